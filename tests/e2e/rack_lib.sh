# Sourced by the end-to-end tests: a virtual rack of $n workers with inagg on its veths, torn down
# on exit whatever happens. Needs: inagg, src, n set by the caller.
tmp=$(mktemp -d)
prefix="inagg-e2e-$$"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
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
