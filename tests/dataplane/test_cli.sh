#!/usr/bin/env bash
# inagg's command line and config files: clear errors with exit status 2, --help and
# --check-config work without EAL, the shipped configs and job examples parse.
#   test_cli.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "/var/run/dpdk/inagg-cli-$$"' EXIT
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
expect 2 "cannot open config file" -- -- --config "$tmp/missing.conf"
printf 'mtu = abc\n' >"$tmp/bad.conf"
expect 2 "for option 'mtu' is invalid" -- -- --config "$tmp/bad.conf"
printf 'no_such_key = 1\n' >"$tmp/bad2.conf"
expect 2 "no_such_key" -- -- --config "$tmp/bad2.conf"
# Config files share the job files' key = value parser: errors name the file and line.
printf '# c\nmtu = 1500\nmbfus = 10\n' >"$tmp/bad3.conf"
expect 2 "bad3.conf:3: unknown key 'mbfus' (did you mean 'mbufs'?)" -- -- --config "$tmp/bad3.conf"
printf 'mtu = 1500\nburst = 16\nmtu = 9000\n' >"$tmp/bad4.conf"
expect 2 "bad4.conf:3: duplicate key 'mtu' (first set on line 1)" -- -- --config "$tmp/bad4.conf"
printf 'no-flow = yes\n' >"$tmp/bad5.conf"
expect 2 "bad5.conf:1: no-flow: 'yes' is not true or false" -- -- --config "$tmp/bad5.conf"
printf '[inagg]\nmtu = 1500\n' >"$tmp/bad6.conf"
expect 2 "bad6.conf:1: sections such as '[inagg]' are not used" -- -- --config "$tmp/bad6.conf"
expect 2 "--log-level: 'inagg.control' is not PATTERN:LEVEL" -- -- --log-level inagg.control --check-config
expect 2 "--log-level: 'inagg.*:verbose': the level must be emergency" -- -- --log-level 'inagg.*:verbose' --check-config
expect 0 "config ok" -- -- --log-level 'inagg.*:debug' --log-level pmd.net.pcap:7 --check-config
printf 'mtu = 2000  # jumbo off\nno-flow = true\njob = %s\njob = %s\n' "$src/conf/jobs/example-fp32-4workers.job" \
  "$src/conf/jobs/example-int32-2workers-ipv6.job" >"$tmp/good.conf"
expect 0 "config ok: mtu 2000" -- -- --config "$tmp/good.conf" --check-config
grep -c "^job " <<<"$out" | grep -qx 2 || fail "two job lines from a repeated job key: $out"
expect 0 "config ok: mtu 1500" -- -- --config "$tmp/good.conf" --mtu 1500 --check-config  # the command line wins
# --check-config checks the mbuf budget against the lcores EAL is given, as start-up does.
expect 0 "1 datapath lcore(s)" -- -l 0 -- --mbufs 8192 --mbuf-budget 4096 --check-config
expect 0 "2 datapath lcore(s)" -- -l 0-2 -- --mbufs 8192 --mbuf-budget 4000 --check-config
expect 2 "the engines' mbuf budget (4096 x 2 lcores) must leave buffers" -- -l 0-2 -- --mbufs 8192 --mbuf-budget 4096 --check-config
expect 2 "the engines' mbuf budget (2048 x 5 lcores)" -- --lcores='(0,5)@0,1@1,2-4' -- --mbufs 8192 --mbuf-budget 2048 --check-config
expect 2 "the engines' mbuf budget (2048 x 4 lcores)" -- -c 0x1f -- --mbufs 8192 --mbuf-budget 2048 --check-config
expect 2 "cannot read the lcores in '0-x'" -- -l 0-x -- --check-config
# A --vdev that fails to probe (no such interface; or, as a user, no CAP_NET_RAW): EAL goes on
# without it, inagg does not.
expect 2 "--vdev net_af_packet9 did not become a port" -- -l 0 --no-huge --no-pci -m 256 --file-prefix="inagg-cli-$$" \
  --log-level=lib.eal:error --vdev="net_af_packet9,iface=inagg-none$$" -- --socket "" --mtu 1500 --mbufs 2048 --mbuf-budget 512
# --job-lcores and --job-spread were removed (a job's channels spread it now): any value but their
# old default is refused, saying what to do instead, on the command line and in a config file; the
# old default changes nothing and is only warned about. --help no longer shows them.
expect 2 "--job-lcores was removed: a job is spread over lcores by its channels now" -- -l 0-2 -- --job-lcores 2 --check-config
expect 2 "give its job file \`channels = C\`" -- -- --job-lcores=4 --check-config
printf 'mtu = 1500\njob-lcores = 2\n' >"$tmp/lcores.conf"
expect 2 "--job-lcores was removed" -- -- --config "$tmp/lcores.conf" --check-config
expect 2 "--job-spread was removed" -- -- --job-spread verify --check-config
printf 'job-lcores = 1\njob-spread = shards\n' >"$tmp/old.conf"
expect 0 "--job-lcores 1 is ignored: the option was removed" -- -- --config "$tmp/old.conf" --check-config
grep -qF -- "--job-spread shards is ignored" <<<"$out" || fail "no warning about job-spread = shards: $out"
"$inagg" -- --help 2>&1 | grep -q -- "job-lcores" && fail "--help still shows --job-lcores"
expect 0 "mempools per-port" -- -- --mempools per-port --check-config
expect 0 "mempools shared" -- -- --check-config
expect 2 "--mempools must be shared, per-socket or per-port (got 'numa')" -- -- --mempools numa
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
# A port set-up failure after the pool exists: a clear error and a clean exit (it used to segfault
# tearing the appliance down after EAL cleanup).
expect 2 "has 1 RX / 1 TX queues but 2 datapath lcores need one each" -- --lcores='(0,2)@0,1@0' --no-huge --no-pci -m 256 \
  --file-prefix="inagg-cli3-$$" --log-level=lib.eal:error --vdev="net_pcap0,rx_pcap=$tmp/g/port0.pcap,tx_pcap=$tmp/o0.pcap" \
  -- --socket "" --mbufs 4096 --mbuf-budget 1024
grep -qi "sanitizer\|segmentation" <<<"$out" && fail "port set-up failure: $out"
# Two net_null ports (the docker image's self-check): --run-for counts from when the datapath runs,
# so start-up time does not matter; the null PMD's all-zero frames are forwarded (the zero address
# is never learned), not dropped as going back out of their ingress port.
cpu=$(/usr/bin/python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
expect 0 "ran for 0.5 s: exiting (--run-for)" -- -l "$cpu" --no-huge --no-pci -m 512 --file-prefix="inagg-cli4-$$" \
  --log-level=lib.eal:error --vdev=net_null0 --vdev=net_null1 -- --socket "" --mtu 1500 --mbufs 8192 --mbuf-budget 1024 --run-for 0.5
for p in 0 1; do
  grep -Eq "^port $p \(net_null.*\): rx [1-9][0-9]* tx [1-9]" <<<"$out" || fail "net_null port $p did not receive and send: $out"
done
# Logging: rte_log types inagg.dataplane/engine/control, chosen by EAL's --log-level; one line per
# event (the port's link, forwarding, a job that fails and why - once, by the engine).
grep -q "^inagg: port 0 (net_null): link up" <<<"$out" || fail "no link line: $out"
grep -q "^inagg: forwarding on 2 ports" <<<"$out" || fail "no forwarding line: $out"
expect 0 "inagg: final stats" -- -l "$cpu" --no-huge --no-pci -m 512 --file-prefix="inagg-cli4-$$" --log-level=lib.eal:error \
  --log-level='inagg.*:warning' --vdev=net_null0 --vdev=net_null1 -- --socket "" --mtu 1500 --mbufs 8192 --mbuf-budget 1024 --run-for 0.3
grep -E "^inagg: (forwarding|port|ran for)" <<<"$out" && fail "--log-level=inagg.*:warning printed info lines: $out"
# Rank 1 never sends (port 1 is net_null): the job makes no progress and fails after --abort-ms.
/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp/f" --workers 2 --messages 2 --background 0 >/dev/null || fail gen-pcap
expect 0 "inagg: job 1 aborted: no progress" -- -l "$cpu" --no-huge --no-pci -m 512 --file-prefix="inagg-cli4-$$" --log-level=lib.eal:error \
  --vdev="net_pcap0,rx_pcap=$tmp/f/port0.pcap,tx_pcap=$tmp/o0.pcap" --vdev=net_null1 -- --job "$tmp/f/job.job" --socket "" \
  --mtu 4200 --mbufs 4096 --mbuf-budget 1024 --abort-ms 300 --run-for 2
[ "$(grep -c "^inagg: job 1 aborted: " <<<"$out")" = 1 ] || fail "the job's failure is not logged exactly once: $out"
# No ports at all.
expect 2 "no DPDK ports" -- --no-huge --no-pci -m 256 --file-prefix="inagg-cli2-$$" --log-level=lib.eal:error -- --socket ""
rm -rf "/var/run/dpdk/inagg-cli-$$" "/var/run/dpdk/inagg-cli2-$$" "/var/run/dpdk/inagg-cli3-$$" "/var/run/dpdk/inagg-cli4-$$"
echo "inagg CLI behaves"
