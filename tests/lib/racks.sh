# shellcheck shell=bash disable=SC2154,SC2034  # src, n, inagg, ctl, worker, tmp, prefix, rack: set by the caller and rack.sh; part_pid: read by it
# Sourced by the end-to-end tests across racks, after tests/lib/rack.sh: 2 racks of 2 workers
# (scripts/racks), a leaf appliance per rack and a spine, each in lab mode with its part of the
# job (inagg-ctl split) and its control socket at $tmp/PART.sock (PART: leaf0, leaf1, spine); all
# of it torn down on exit, also on failure.
racks_cmd() { local cmd=$1; shift; "$src/scripts/racks" "$cmd" --name "$rack" "$@"; }
appliances=()  # PART -> PID, in start order
declare -A part_pid=()
racks_cleanup() {
  for p in "${appliances[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  racks_cmd down >/dev/null 2>&1
  for part in leaf0 leaf1 spine; do rm -rf "/var/run/dpdk/$prefix-$part"; done
  cleanup
}
trap racks_cleanup EXIT
stat() { awk -v k="$2" '$1 == k {print $2}' <<<"$1"; }
part_stats() { "$ctl" --socket "$tmp/$1.sock" stats 1; }

# shellcheck source=../../scripts/lib/af_packet.sh
. "$src/scripts/lib/af_packet.sh"

# start_part PART JOBFILE VDEVS: one appliance, its control socket $tmp/PART.sock (started again
# on a PACKET_FANOUT clash with another appliance, scripts/lib/af_packet.sh).
start_part() {
  local part=$1 job=$2 p attempt
  shift 2
  for attempt in 1 2 3; do
    # shellcheck disable=SC2068  # the vdev arguments are words
    "$inagg" -l 0,1 --no-huge --no-pci -m 512 --file-prefix="$prefix-$part" --log-level=lib.eal:error $@ \
      -- --socket "$tmp/$part.sock" --mbufs 8192 --mbuf-budget 4096 --resend-us 2000 --idle-sleep-us 1000 \
      --job "$job" >"$tmp/$part.log" 2>&1 &
    p=$!
    appliances+=("$p")
    part_pid[$part]=$p
    wait_alive "$p" 30 "the $part appliance's control socket" test -S "$tmp/$part.sock" && return 0
    fanout_clash "$tmp/$part.log" || break
    echo "the $part appliance clashed with another's PACKET_FANOUT group (attempt $attempt); starting it again"
  done
  fail "the $part appliance did not start: $(tail -n 5 "$tmp/$part.log")"
}

# start_racks SIZE_ARGS -- RACKS_UP_ARGS...: the racks, the ring's job for the worker options
# SIZE_ARGS (inagg-worker --print-job) split into its parts, and the three appliances.
start_racks() {
  local size=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do size+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  racks_cmd up --racks 2 --per-rack 2 "$@" >"$tmp/racks.log" 2>&1 || fail "racks up: $(cat "$tmp/racks.log")"
  "$worker" --workers "$n" --rank 0 "${size[@]}" --print-job >"$tmp/job.job" || fail "inagg-worker --print-job"
  "$ctl" split "$tmp/job.job" --racks "$(racks_cmd rack-of)" --out-dir "$tmp" >"$tmp/split.log" 2>&1 ||
    fail "inagg-ctl split: $(cat "$tmp/split.log")"
  start_part leaf0 "$tmp/leaf-0.job" "$(racks_cmd vdevs leaf 0)"
  start_part leaf1 "$tmp/leaf-1.job" "$(racks_cmd vdevs leaf 1)"
  start_part spine "$tmp/spine.job" "$(racks_cmd vdevs spine)"
  for part in leaf0 leaf1 spine; do
    "$ctl" --socket "$tmp/$part.sock" list | grep -Eq "state=(active|binding)" || fail "the $part appliance has no job"
  done
}
worker_failure_hint() { for part in leaf0 leaf1 spine; do echo "$part: $("$ctl" --socket "$tmp/$part.sock" list 2>&1)"; done; }
