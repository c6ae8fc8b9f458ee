# Sourced by the end-to-end tests: a virtual rack of $n workers with inagg on its veths, torn down
# on exit whatever happens. Needs: inagg, src, n set by the caller (xdp for start_agent).
tmp=$(mktemp -d)
prefix="inagg-e2e-$$"
pid=""
others=()  # other processes the test started (agents, watchers, workers): stopped by PID on exit
cleanup() {
  for p in "${others[@]}" $pid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  "$src/scripts/rack" down >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 5 "$tmp"/*.log; exit 1; }

# start_rack [RACK_ARGS...] -- [INAGG_ARGS...]: the rack, then inagg with its control socket at
# $tmp/ctl.sock.
start_rack() {
  local rack_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do rack_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  "$src/scripts/rack" up --workers "$n" "${rack_args[@]}" >/dev/null || fail "rack up"
  # shellcheck disable=SC2046
  "$inagg" -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error $("$src/scripts/rack" vdevs) \
    -- --socket "$tmp/ctl.sock" --mtu 1500 --mbufs 16384 --mbuf-budget 4096 --resend-us 2000 "$@" >"$tmp/inagg.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -S "$tmp/ctl.sock" ] && break; sleep 0.1; done
  [ -S "$tmp/ctl.sock" ] || fail "inagg did not start"
}

# start_agent H MODE JOBFILE...: inagg-xdp on head H's eth0 (native mode also puts xagg_pass on the
# head's port, which a native XDP_TX on veth needs), its control socket at $tmp/xdp$H.sock.
start_agent() {
  local h=$1 mode=$2 jobs=()
  shift 2
  for f in "$@"; do jobs+=(--job "$f"); done
  if [ "$mode" = native ]; then "$xdp" peer --iface "inagg-q$h" --mode native >/dev/null || fail "xagg_pass on inagg-q$h"; fi
  ip netns exec "inagg-h$h" "$xdp" run --iface eth0 --mode "$mode" --socket "$tmp/xdp$h.sock" "${jobs[@]}" >"$tmp/agent$h.log" 2>&1 &
  others+=($!)
  for _ in $(seq 100); do [ -S "$tmp/xdp$h.sock" ] && break; sleep 0.05; done
  [ -S "$tmp/xdp$h.sock" ] || fail "inagg-xdp on head $h did not start: $(cat "$tmp/agent$h.log")"
}
