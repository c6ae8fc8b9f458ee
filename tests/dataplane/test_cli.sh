#!/usr/bin/env bash
# inagg's command line and config files: clear errors with exit status 2, --help and
# --check-config work without EAL, the shipped configs and job examples parse.
#   test_cli.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect() {  # expect STATUS NEEDLE -- ARGS...
  local want=$1 needle=$2
  shift 3
  out=$("$inagg" "$@" 2>&1); rc=$?
  [ $rc -eq "$want" ] || fail "inagg $*: exit $rc, want $want: $out"
  grep -qF -- "$needle" <<<"$out" || fail "inagg $*: no '$needle' in: $out"
}
expect 0 "Usage: inagg [EAL options] -- [inagg options]" -- -- --help
expect 0 "--idle-exit" -- -- --help
expect 2 "unrecognised option '--bogus'" -- -- --bogus
expect 2 "cannot read config file" -- -- --config "$tmp/missing.conf"
printf 'mtu = abc\n' >"$tmp/bad.conf"
expect 2 "for option 'mtu' is invalid" -- -- --config "$tmp/bad.conf"
printf 'no_such_key = 1\n' >"$tmp/bad2.conf"
expect 2 "no_such_key" -- -- --config "$tmp/bad2.conf"
expect 2 "--burst must be between 1 and 64" -- -- --burst 0
expect 2 "--ports" -- -- --ports 0,x
printf 'id = 1\ndtype = fp64\n' >"$tmp/bad.job"
expect 2 "bad.job:2" -- -- --job "$tmp/bad.job"
expect 0 "config ok: mtu 9000" -- -- --config "$src/conf/inagg.conf" --check-config
expect 0 "config ok: mtu 4200" -- -- --config "$src/conf/inagg-virtual-rack.conf" --check-config
for j in "$src"/conf/jobs/*.job; do
  expect 0 "job " -- -- --job "$j" --check-config
done
# A job the engine refuses (sizes that do not divide) is refused at start with the reason.
/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp/g" --workers 2 --messages 1 --background 0 >/dev/null || fail gen-pcap
sed -i 's/^message_bytes = .*/message_bytes = 1000/' "$tmp/g/job.job"
expect 2 "multiple of payload_bytes" -- --no-huge --no-pci -m 256 --file-prefix="inagg-cli-$$" --log-level=lib.eal:error \
  --vdev="net_pcap0,rx_pcap=$tmp/g/port0.pcap,tx_pcap=$tmp/o0.pcap" --vdev="net_pcap1,rx_pcap=$tmp/g/port1.pcap,tx_pcap=$tmp/o1.pcap" \
  -- --job "$tmp/g/job.job" --socket "" --mtu 4200 --mbufs 4096 --mbuf-budget 1024
# No ports at all.
expect 2 "no DPDK ports" -- --no-huge --no-pci -m 256 --file-prefix="inagg-cli2-$$" --log-level=lib.eal:error -- --socket ""
rm -rf "/var/run/dpdk/inagg-cli-$$" "/var/run/dpdk/inagg-cli2-$$"
echo "inagg CLI behaves"
