# shellcheck shell=bash
# Sourced by the Soft-RoCE lab tests (after they set src, and checked what they need to run):
# skips without root, QEMU or taps; makes $tmp and a DPDK prefix of the run's own ($prefix); takes
# the lab's lock (its taps and VMs have fixed names, so one lab at a time); on exit stops the
# appliance the test started ($ipid, by PID), takes the lab down and removes what the run made.
#   . "$src/tests/rxe/lab.sh" NAME LOG_LINES
#   lab_up VMS [ARGS]       the lab with VMS VMs (ARGS: more of `up`'s, e.g. --netns 1), its output in
#                           $tmp/up.log (and printed)
#   lab_require_verbs WORKER   skips (77) when WORKER was built without verbs support
#   lab_start_appliance ARGS   inagg on the lab's ports (one lcore, no hugepages, --mtu 1500, control
#                           socket $tmp/ctl.sock, log $tmp/inagg.log) with ARGS after them; sets
#                           $ipid and waits for the socket. lab_stop_appliance stops it (its stats
#                           are then at the end of $tmp/inagg.log).
#   lab_secret              a new shared secret in $tmp/secret (mode 0600), for --control-tcp
#   lab_job_done NAME JOB WANT   job JOB released exactly WANT slots (one per packet it carried) and
#                           holds none; then removed; its stats in $tmp/NAME.stats
#   wait_appliance          waits (30 s) for $ipid's control socket $tmp/ctl.sock
#   fail MSG                "FAIL: MSG", the last LOG_LINES of every $tmp/*.log, exit 1
#   lab_install_worker WORKER VMS SECRET   inagg-worker, its libraries and the secret in each VM's
#                           /lab/inagg; $run_env: the environment to run it there with
#   counters VM             "name value" lines: rxe0's hw counters and udp_in (UDP InDatagrams)
#   delta BEFORE AFTER NAME a counter's growth between two `counters` files
#   lab_rxe_accepted_all VM BEFORE AFTER   between two `counters` files, VM's rxe accepted every RoCE
#                           datagram its UDP stack took (none refused: no bad ICRC) and no QP ran
#                           out of retries; prints rxe's retry and duplicate counts
# Processes the test starts in the background (namespaces' workers): add their PIDs to lab_pids,
# and cleanup kills them.
: "${src:?tests/rxe/lab.sh: set src before sourcing}"
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
lab=$src/scripts/rxe-lab
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (taps, QEMU on them)"; exit 77; }
command -v qemu-system-x86_64 >/dev/null ||
  { echo "SKIP: qemu-system-x86_64 is missing: install qemu-system-x86 (scripts/packages.txt, scripts/setup --deps)"; exit 77; }
[ -c /dev/net/tun ] || { echo "SKIP: /dev/net/tun is missing: no taps on this host"; exit 77; }

tmp=$(mktemp -d) || exit 1
prefix="rxe-$1-$$"
lab_log_lines=$2
ipid=""
lab_pids=()
# shellcheck disable=SC2034  # the sourcing test reports times since it
started=$SECONDS
lab_cleanup() {
  local p
  for p in "${lab_pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if [ -n "$ipid" ]; then kill "$ipid" 2>/dev/null && wait "$ipid" 2>/dev/null; fi
  "$lab" down >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f")"; tail -n "$lab_log_lines" "$f"; }; done
  exit 1
}
exec 9>/run/rxe-lab.lock
flock -w 900 9 || { echo "FAIL: another rxe-lab run held /run/rxe-lab.lock for 15 minutes"; exit 1; }
trap lab_cleanup EXIT

lab_up() {
  "$lab" up --vms "$@" >"$tmp/up.log" 2>&1 || fail "the lab did not come up: $(cat "$tmp/up.log")"
  cat "$tmp/up.log"
}

wait_appliance() {
  wait_alive "$ipid" 30 "inagg's control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" || fail "inagg did not start on the taps"
}

lab_require_verbs() {
  "$1" --rank 0 --workers 3 --transport verbs 2>&1 | grep -q "no verbs support" &&
    { echo "SKIP: this build of inagg-worker has no verbs support (libibverbs-dev)"; exit 77; }
  return 0
}

lab_start_appliance() {
  # shellcheck disable=SC2046
  "${inagg:?tests/rxe/lab.sh: set inagg}" -l 0 --no-huge --no-pci -m 512 --file-prefix="$prefix" --log-level=lib.eal:error $("$lab" vdevs) \
    -- --socket "$tmp/ctl.sock" --mtu 1500 "$@" >"$tmp/inagg.log" 2>&1 &
  ipid=$!
  wait_appliance
}

lab_stop_appliance() {
  kill "$ipid"
  wait "$ipid"
  ipid=""
}

lab_job_done() {
  local stats
  stats=$("${ctl:?tests/rxe/lab.sh: set ctl}" --socket "$tmp/ctl.sock" stats "$2") || fail "stats $2: $stats"
  grep -q "^slots_released $3$" <<<"$stats" || fail "$1: job $2: want slots_released $3 (one per packet): $(tr '\n' ' ' <<<"$stats")"
  grep -q "^held_packets 0$" <<<"$stats" || fail "$1: job $2: slots held after the run: $(tr '\n' ' ' <<<"$stats")"
  "$ctl" --socket "$tmp/ctl.sock" remove "$2" >/dev/null || fail "cannot remove job $2"
  echo "$stats" >"$tmp/$1.stats"
}

lab_secret() {
  head -c 24 /dev/urandom | base64 >"$tmp/secret"
  chmod 600 "$tmp/secret"
}

lab_install_worker() {
  local worker=$1 vms=$2 secret=$3 i d l
  for i in $(seq 0 $((vms - 1))); do
    d=/run/rxe-lab/vm$i/share/inagg
    mkdir -p "$d/lib"
    cp "$worker" "$d/"
    # Its libraries but the VM's own libc and libibverbs (with the VM's providers).
    for l in $(ldd "$worker" | awk '/=>/ {print $3}' | grep -vE '/(libc|libm|ld-linux|libibverbs|libnl-[a-z0-9-]*)\.so'); do
      cp "$l" "$d/lib/"
    done
    install -m 600 "$secret" "$d/secret"
  done
}
# shellcheck disable=SC2034  # used by the sourcing test
run_env="LD_LIBRARY_PATH=/lab/inagg/lib ASAN_OPTIONS=detect_leaks=0"

counters() {
  "$lab" run "$1" --timeout 60 -- 'rdma statistic show link rxe0/1; cat /proc/net/snmp' |
    awk '$1 == "link" {for (i = 3; i < NF; i += 2) print $i, $(i + 1)} $1 == "Udp:" && $2 ~ /^[0-9]+$/ {print "udp_in", $2}'
}
delta() { awk -v n="$3" 'FNR == NR && $1 == n {b = $2} FNR != NR && $1 == n {a = $2} END {print a - b}' "$1" "$2"; }

lab_rxe_accepted_all() {
  local vm=$1 a=$2 b=$3 udp rcvd
  udp=$(delta "$a" "$b" udp_in)
  rcvd=$(delta "$a" "$b" rcvd_pkts)
  [ "$udp" -gt 0 ] || fail "$vm received no RoCE datagram"
  [ "$udp" -eq "$rcvd" ] ||
    fail "$vm: its UDP stack took $udp RoCE datagrams but rxe accepted $rcvd: rxe refused some (bad ICRC or headers)"
  [ "$(delta "$a" "$b" retry_exceeded_err)" -eq 0 ] || fail "$vm: an RC QP exceeded its retry count"
  echo "ok: $vm: rxe accepted all $rcvd RoCE datagrams it got (no ICRC error); completer_retry_err +$(delta "$a" "$b" completer_retry_err), duplicate_request +$(delta "$a" "$b" duplicate_request), out_of_seq_request +$(delta "$a" "$b" out_of_seq_request)"
}
