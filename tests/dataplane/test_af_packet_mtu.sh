#!/usr/bin/env bash
# inagg --mtu 4200 on net_af_packet ports with framesz=4352 (RoCE's 4096-byte MTU):
# the packet buffers are sized for the driver's frame slots, the ports come up, and a 4214-byte
# frame sent into one port leaves the other byte for byte (checked by raw sockets on the veth
# peers). Runs in a network namespace of its own (unshare -n), so its veths can clash with nobody
# and vanish with it. Root only (exit 77 otherwise).
#   test_af_packet_mtu.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (veths, AF_PACKET)"; exit 77; }
if [ -z "${INAGG_IN_OWN_NETNS:-}" ]; then
  unshare -n true 2>/dev/null || { echo "SKIP: cannot create a network namespace here"; exit 77; }
  exec unshare -n env INAGG_IN_OWN_NETNS=1 "$0" "$@"
fi
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" afp-mtu

for i in 0 1; do
  ip link add "h$i" type veth peer name "p$i" || fail "veth h$i/p$i"
  for d in "h$i" "p$i"; do
    ip link set "$d" mtu 4200 && ip link set "$d" up || fail "set $d up with mtu 4200"
  done
done
"$inagg" -l 0 --no-huge --no-pci -m 512 --file-prefix="$prefix" --log-level=lib.eal:error \
  --vdev=net_af_packet0,iface=p0,framesz=4352,blocksz=69632 --vdev=net_af_packet1,iface=p1,framesz=4352,blocksz=69632 \
  -- --socket "" --mtu 4200 --mbufs 4096 --mbuf-budget 1024 >"$tmp/log" 2>&1 &
pid=$!
wait_alive "$pid" 30 "inagg's two ports up" grep -q "^inagg: 2 ports" "$tmp/log" ||
  fail "inagg did not start on the af_packet ports"
/usr/bin/python3 - <<'PY' || fail "a 4214-byte frame did not cross the appliance intact"
import os, socket, time
ETH_P = 0x88B5  # IEEE local experimental: nothing else on these links uses it
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P))
rx.bind(("h1", 0))
rx.settimeout(0.2)
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind(("h0", 0))
want = {}
for size in (64, 1514, 4214):  # whole frames: 14-byte header + payload up to the 4200-byte MTU
    body = bytes((i * 7 + size) & 0xFF for i in range(size - 14))
    want[size] = bytes.fromhex("020000000b02" "020000000a01") + ETH_P.to_bytes(2, "big") + body
got = set()
deadline = time.monotonic() + 15
while got != set(want) and time.monotonic() < deadline:
    for size, f in want.items():
        if size not in got:
            tx.send(f)
    try:
        while True:
            data = rx.recv(9000)
            for size, f in want.items():
                if data == f:
                    got.add(size)
    except socket.timeout:
        pass
missing = sorted(set(want) - got)
print("frames through the appliance:", sorted(got), "missing:", missing)
raise SystemExit(1 if missing else 0)
PY
kill -INT "$pid"
ended() { ! kill -0 "$pid" 2>/dev/null; }
wait_for 10 "inagg to exit after SIGINT" ended || fail "inagg still running 10 s after SIGINT"
wait "$pid"; rc=$?
pid=""
[ $rc -eq 0 ] || fail "exit status $rc after SIGINT"
grep -q "will not fit in mbuf" "$tmp/log" && fail "the driver refused the buffers"
grep -qi "sanitizer" "$tmp/log" && fail "sanitizer report"
grep -Eq "^port 0 \(net_af_packet, mtu 4200" "$tmp/log" || fail "port 0 does not report the interface's MTU 4200"
echo "MTU 4200 on net_af_packet ports (framesz=4352): frames up to 4214 bytes cross intact"
