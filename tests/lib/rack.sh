# shellcheck shell=bash disable=SC2154  # src, n, inagg, ctl, xdp: set by the sourcing test
# Sourced by the end-to-end tests: a virtual rack of $n workers with inagg on its veths, torn down
# on exit whatever happens. Needs: inagg, src, n set by the caller (xdp for start_agent).
# The rack has a name of this run's own ($rack, "irPID"), so a test never touches a rack it did
# not create (a user's, or another test's): its namespaces are $(ns_w R) and $(ns_h H).
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
# shellcheck source=../../scripts/lib/exchange_secret.sh
. "$src/scripts/lib/exchange_secret.sh"
export_exchange_secret  # every rank the test starts meets the others with this job's secret
[ "$(id -u)" = 0 ] || { echo "SKIP: the virtual rack needs root (network namespaces, veths)"; exit 77; }
tmp=$(mktemp -d)
rack="ir$$"
prefix="inagg-e2e-$$"
pid=""
others=()  # other processes the test started (agents, watchers, workers): stopped by PID on exit
cleanup() {
  for p in "${others[@]}" $pid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rack_cmd down >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 5 "$tmp"/*.log; exit 1; }

rack_cmd() { local cmd=$1; shift; "$src/scripts/rack" "$cmd" --name "$rack" "$@"; }
ns_w() { echo "$rack-w$1"; }   # worker R's namespace
ns_h() { echo "$rack-h$1"; }   # head H's namespace
port_q() { echo "$rack-q$1"; } # head H's port (the appliance's side of its veth)

# start_rack [RACK_ARGS...] -- [INAGG_ARGS...]: the rack, then inagg (start_inagg).
start_rack() {
  local rack_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do rack_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  rack_cmd up --workers "$n" "${rack_args[@]}" >"$tmp/rack.log" 2>&1 || fail "rack up: $(cat "$tmp/rack.log")"
  start_inagg "$@"
}

# start_inagg [INAGG_ARGS...]: inagg on the rack's ports with its control socket at $tmp/ctl.sock,
# in lab mode (it shares the machine's cores with the workers) unless the caller set
# idle_sleep_us (0: busy-poll), with --mtu $inagg_mtu (default 1500). Its output goes to
# $tmp/inagg.log.
start_inagg() {
  rm -f "$tmp/ctl.sock"
  inagg_argv "$@"
  "$inagg" "${argv[@]}" >"$tmp/inagg.log" 2>&1 &
  pid=$!
  wait_alive "$pid" 30 "inagg's control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" || fail "inagg did not start"
}

# inagg_argv [INAGG_ARGS...]: sets argv to start_inagg's arguments of inagg (for a start that must
# fail: "$inagg" "${argv[@]}").
inagg_argv() {
  # shellcheck disable=SC2207,SC2054  # "-l 0,1" is one word
  argv=(-l 0,1 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error $(rack_cmd vdevs)
    -- --socket "$tmp/ctl.sock" --mtu "${inagg_mtu:-1500}" --mbufs 16384 --mbuf-budget 4096 --resend-us 2000
    --idle-sleep-us "${idle_sleep_us:-1000}" "$@")
}

# stop_inagg: SIGTERM, and wait until it has exited (its final stats are then in $tmp/inagg.log).
stop_inagg() {
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=""
}

# start_agent H MODE JOBFILE...: inagg-xdp on head H's eth0 (native mode also puts xagg_pass on the
# head's port, which a native XDP_TX on veth needs), its control socket at $tmp/xdp$H.sock.
start_agent() {
  local h=$1 mode=$2 jobs=() apid
  shift 2
  for f in "$@"; do jobs+=(--job "$f"); done
  if [ "$mode" = native ]; then "$xdp" peer --iface "$(port_q "$h")" --mode native >/dev/null || fail "xagg_pass on $(port_q "$h")"; fi
  ip netns exec "$(ns_h "$h")" "$xdp" run --iface eth0 --mode "$mode" --socket "$tmp/xdp$h.sock" "${jobs[@]}" >"$tmp/agent$h.log" 2>&1 &
  apid=$!
  others+=("$apid")
  wait_alive "$apid" 30 "inagg-xdp's socket on head $h" test -S "$tmp/xdp$h.sock" ||
    fail "inagg-xdp on head $h did not start: $(cat "$tmp/agent$h.log")"
}

# table_exact LOG...: each inagg-worker log is exact: rank 0's, the job's table (nccl-tests'
# all_reduce_perf columns: #wrong, summed over the ranks, is field 9 out of place, 13 in place),
# counted no wrong element in at least one row; another rank's closing line ("# rank R: S sizes,
# C checked placements, W wrong elements") counted none of its own.
table_exact() {
  local log
  for log in "$@"; do
    awk '/^# rank [0-9]+: [0-9]+ sizes, [0-9]+ checked placements, 0 wrong elements/ {own = 1}
         !/^#/ && NF >= 9 {rows++; if ($9 != "0" || (NF >= 13 && $13 != "0")) bad = 1}
         END {exit bad || !(rows || own)}' "$log" || return 1
  done
}

# rows_of LOG: the sizes an inagg-worker log reports: rank 0's table rows, or the count in another
# rank's closing line.
rows_of() {
  awk '/^# rank [0-9]+: [0-9]+ sizes,/ {sizes = $4} !/^#/ && NF >= 9 {rows++} END {print rows ? rows : sizes + 0}' "$1"
}

# run_workers MIN_ROWS WORKER_ARGS...: inagg-worker ($worker) on every rank in its namespace, as
# --workers $n --rank R and WORKER_ARGS, its output in $tmp/wR.log; fails unless every worker exits
# 0, every row of its table is exact and it printed at least MIN_ROWS rows. A failure message
# starts with $worker_context (e.g. "round 3: ") and ends with what worker_failure_hint prints,
# when the test defines that function.
run_workers() {
  local rows=$1 r rc hint wpids=()
  shift
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$(ns_w "$r")" "$worker" --workers "$n" --rank "$r" "$@" >"$tmp/w$r.log" 2>&1 &
    wpids+=($!)
  done
  for r in $(seq 0 $((n - 1))); do
    wait "${wpids[$r]}" && continue
    rc=$?
    hint=$(declare -F worker_failure_hint >/dev/null && worker_failure_hint)
    fail "${worker_context:-}worker $r exited with status $rc${hint:+; $hint}"
  done
  for r in $(seq 0 $((n - 1))); do
    table_exact "$tmp/w$r.log" || fail "${worker_context:-}worker $r reports wrong elements"
    [ "$(rows_of "$tmp/w$r.log")" -ge "$rows" ] || fail "${worker_context:-}worker $r reported fewer than $rows sizes"
  done
}

# released_over ID N: the appliance ($ctl on $tmp/ctl.sock) has released more than N slots of job ID.
released_over() {
  local v
  v=$("$ctl" --socket "$tmp/ctl.sock" stats "$1" 2>/dev/null | awk '$1 == "slots_released" {print $2}')
  [ "${v:-0}" -gt "$2" ]
}
