#!/usr/bin/env bash
# The adversarial replay: a 4-worker job's honest traffic through inagg on two
# net_pcap ports with BAD bad packets mixed in (tests/dataplane/gen_adversarial.py: truncated, bad
# ICRC, forged WRITEs/SENDs/ACKs/NAKs, a rank's frames on another port, IPv4-mapped IPv6), all aimed
# at the job's connections. Checks: the job's sums exact and in PSN order, nothing raw out
# (check_output.py), every bad packet accounted for by exactly the engine counter its kind names,
# every frame read accounted for, no crash, no sanitizer report, the job still active at the end.
#   test_adversarial_replay.sh INAGG SRCDIR [BAD]
#     (BAD: default 200000; the README records 1000000)
set -uo pipefail
inagg=$1 src=$2 bad=${3:-200000}
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" adversarial

step() { echo "== $*"; }
step "generate: 4 workers x 256 packets of 256 B, and $bad bad packets"
/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 4 --payload 256 --message 1024 --messages 64 \
  --background 20 --max-frame 4000 >/dev/null || fail "gen-pcap"
/usr/bin/python3 "$src/tests/dataplane/gen_adversarial.py" "$tmp" --bad "$bad" || fail "gen_adversarial.py"

step "replay through inagg"
vdevs=(--vdev="net_pcap0,rx_pcap=$tmp/port0.pcap,tx_pcap=$tmp/out0.pcap"
  --vdev="net_pcap1,rx_pcap=$tmp/port1.pcap,tx_pcap=$tmp/out1.pcap")
# --idle-exit 3: under a loaded CI machine a second without a packet read is not yet the end of
# the capture.
timeout 600 "$inagg" -l 0 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
  "${vdevs[@]}" -- --job "$tmp/job.job" --socket "" --idle-exit 3 --mtu 4200 --mbufs 8192 --mbuf-budget 2048 \
  --resend-us 100000000 >"$tmp/log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "inagg exited with status $rc"
grep -qi "sanitizer\|runtime error" "$tmp/log" && fail "sanitizer report in inagg's output"
grep -q "^job 1: active " "$tmp/log" || fail "job 1 is not active at the end: $(grep '^job 1' "$tmp/log")"

step "check the output: sums exact, PSN order, nothing raw on the job's connections"
/usr/bin/python3 "$src/tests/dataplane/check_output.py" "$tmp" "$tmp/out0.pcap" "$tmp/out1.pcap" || fail "output check"

step "check the accounting"
/usr/bin/python3 - "$tmp" <<'PY' || fail "accounting"
import collections, re, struct, sys
d = sys.argv[1]
log = open(f"{d}/log").read().splitlines()

def counters(prefix):
    line = next((l for l in log if l.startswith(prefix)), None)
    if line is None:
        sys.exit(f"no '{prefix}' line in inagg's final stats")
    words = line[len(prefix):].split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2) if words[i + 1].isdigit()}

def frames(path):
    data, n, off = open(path, "rb").read(), 0, 24
    while off < len(data):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
        n += 1
    return n

engine = counters("engine:")
want = collections.Counter()
for line in open(f"{d}/adversarial.txt"):
    counter, count, _ = line.split()
    want[counter] += int(count)
errors = [f"{c}: {engine.get(c, 0)} counted, {n} sent" for c, n in sorted(want.items()) if engine.get(c, 0) != n]
read = sum(int(re.search(r"\): rx (\d+) ", l).group(1)) for l in log if re.match(r"port [01] \(", l))
sent = frames(f"{d}/port0.pcap") + frames(f"{d}/port1.pcap")
if read != sent:
    errors.append(f"the ports read {read} frames of the {sent} in the captures")
if engine.get("aggregated_packets") != sum(1 for _ in open(f"{d}/expected.txt")):
    errors.append(f"aggregated_packets {engine.get('aggregated_packets')}, expected one per honest data packet")
for e in errors:
    print("FAIL:", e)
print(f"{sum(want.values())} bad packets among {sent} frames: " +
      ", ".join(f"{c} {engine.get(c, 0)}" for c in sorted(want)) + f"; {len(errors)} errors")
sys.exit(1 if errors else 0)
PY
echo "ok: $bad adversarial packets mixed with a 4-worker job: sums exact, every bad packet counted"
