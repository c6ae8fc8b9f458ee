#!/usr/bin/env bash
# inagg's Prometheus endpoint (--metrics): scraped twice while net_pcap loops a job's traffic, the
# text parsed by the Prometheus project's own Python client (an independent parser of the format);
# port, lcore, engine and job families present, counters that move between the scrapes, a busy
# ratio in [0, 1], the job's counters agreeing with inagg-ctl; bad --metrics values refused clearly.
#   test_metrics.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" metrics-test
/usr/bin/python3 -c "import prometheus_client.parser" 2>/dev/null ||
  { echo "SKIP: python3-prometheus-client is not installed (scripts/setup installs it)"; exit 77; }

# Bad values: a clear error before EAL starts.
# (A bare port is the loopback: dataplane_metrics_listen.)
for bad in "99999" "localhost" "127.0.0.1:99999" "[::1:9100"; do
  out=$("$inagg" --no-huge -- --metrics "$bad" --check-config 2>&1); rc=$?
  [ $rc = 2 ] && grep -q "inagg: --metrics: " <<<"$out" || fail "--metrics '$bad': exit $rc, $out"
done

start_pcap_appliance --job "$tmp/job.job" --metrics 127.0.0.1:0
url=$(sed -n 's|^inagg: metrics at \(http://[^ ]*\)$|\1|p' "$tmp/log")
[ -n "$url" ] || fail "inagg did not say where its metrics are"
aggregating() { local v; v=$("$ctl" --socket "$tmp/ctl.sock" stats 1 | awk '$1 == "aggregated_packets" {print $2}'); [ "${v:-0}" -gt 0 ]; }
wait_for 10 "job 1 to aggregate" aggregating || fail "job 1 aggregated nothing"

/usr/bin/python3 - "$url" "$ctl" "$tmp/ctl.sock" "$src/conf/grafana/inagg-dashboard.json" <<'PY' || fail "metrics check"
import json, re, subprocess, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families

url, ctl, sock, dashboard = sys.argv[1:5]
raw_names = set()

def scrape():
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200, r.status
        ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        text = r.read().decode()
    raw_names.update(l.split("{")[0].split(" ")[0] for l in text.splitlines() if l and not l.startswith("#"))
    fams = {f.name: f for f in text_string_to_metric_families(text)}  # raises on a malformed line
    return fams

def value(fams, family, **labels):
    # prometheus_client strips _total from counter family names
    f = fams[family]
    hits = [s.value for s in f.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (family, labels, [s for s in f.samples])
    return hits[0]

a = scrape()
time.sleep(0.3)   # traffic keeps flowing; the second scrape must see it
b = scrape()
for fam in ("inagg_port_rx_packets", "inagg_port_tx_packets", "inagg_port_rx_bytes", "inagg_port_rx_missed",
            "inagg_port_rx_errors", "inagg_port_tx_errors", "inagg_lcore_rx", "inagg_lcore_busy_ratio",
            "inagg_engine_aggregated_packets", "inagg_job_up", "inagg_job_aggregated_packets",
            "inagg_job_slots_released", "inagg_job_naks_sent", "inagg_job_resends", "inagg_job_held_packets"):
    assert fam in b, f"family {fam} missing; have {sorted(b)[:10]}..."
for port in ("0", "1"):
    ra, rb = value(a, "inagg_port_rx_packets", port=port), value(b, "inagg_port_rx_packets", port=port)
    assert rb > ra > 0, f"port {port} rx did not grow between scrapes: {ra} -> {rb}"
assert a["inagg_port_rx_packets"].type == "counter" and b["inagg_job_held_packets"].type == "gauge"
for s in b["inagg_lcore_busy_ratio"].samples:
    assert 0.0 <= s.value <= 1.0, s
assert value(b, "inagg_job_up", job="1", state="active") == 1
ja, jb = value(a, "inagg_job_aggregated_packets", job="1"), value(b, "inagg_job_aggregated_packets", job="1")
assert jb >= ja > 0, (ja, jb)
# The same counter through the control socket, read after the scrape: at least as far along.
out = subprocess.run([ctl, "--socket", sock, "stats", "1"], capture_output=True, text=True, check=True).stdout
ctl_agg = int(next(l.split()[1] for l in out.splitlines() if l.startswith("aggregated_packets ")))
assert ctl_agg >= jb, (ctl_agg, jb)
# The engine totals include the job's packets (rendered before the jobs, so compared with the
# previous scrape's job figure).
eng = value(b, "inagg_engine_aggregated_packets")
assert eng >= ja, (eng, ja)
# Packet buffers: some in use (the job holds packets, the lcores cache some), within the pool
# (8192, --mbufs).
in_use, total = value(b, "inagg_mbufs_in_use"), value(b, "inagg_mbufs")
assert total == 8192 and 0 < in_use <= total, (in_use, total)
# The shipped Grafana dashboard asks only for metrics the appliance serves.
exprs = [t["expr"] for p in json.load(open(dashboard))["panels"] for t in p["targets"]]
asked = {m for e in exprs for m in re.findall(r"inagg_[a-z0-9_]+", e)}
missing = asked - raw_names
assert not missing, f"the dashboard asks for metrics inagg does not serve: {sorted(missing)}"
print(f"ok: {len(b)} metric families, the dashboard's {len(asked)} metrics all served; port 0 rx "
      f"{value(a, 'inagg_port_rx_packets', port='0'):.0f} -> {value(b, 'inagg_port_rx_packets', port='0'):.0f}; "
      f"job 1 aggregated {jb:.0f} (inagg-ctl: {ctl_agg})")
PY
# inagg-ctl top: two frames (not a terminal: one after the other), job 1 aggregating in both.
top=$("$ctl" --socket "$tmp/ctl.sock" top --interval 0.3 --count 2 2>&1) || fail "inagg-ctl top: $top"
[ "$(grep -c '^inagg-ctl top ' <<<"$top")" = 2 ] || fail "inagg-ctl top did not show 2 frames: $top"
awk '$1 == 1 && $2 == "active" {n++; v = $3; sub(/[kMG]$/, "", v); if (v + 0 <= 0) bad = 1} END {exit !(n == 2 && !bad)}' <<<"$top" ||
  fail "inagg-ctl top shows no aggregation for job 1: $top"
grep -q "^engine: rx [0-9.]*[kMG]\? pps  aggregated [1-9]" <<<"$top" || fail "inagg-ctl top's engine line: $top"
out=$("$ctl" --socket "$tmp/ctl.sock" top --interval 0 2>&1); rc=$?
[ $rc = 2 ] && grep -q "interval must be between" <<<"$out" || fail "top --interval 0: exit $rc, $out"

# Only GET /metrics and / answer; other paths are 404.
code=$(/usr/bin/python3 -c "
import sys, urllib.request, urllib.error
try: urllib.request.urlopen(sys.argv[1].replace('/metrics', '/nothing'), timeout=5); print(200)
except urllib.error.HTTPError as e: print(e.code)" "$url")
[ "$code" = 404 ] || fail "GET /nothing answered $code"
# A second inagg on the same port is refused with a clear error.
port=${url##*:}; port=${port%%/*}
out=$(timeout 60 "$inagg" -l 0 --no-huge --no-pci -m 512 --file-prefix="$prefix-b" --log-level=lib.eal:error --vdev=net_null0 \
  -- --socket "" --mtu 1500 --mbufs 2048 --mbuf-budget 512 --metrics "127.0.0.1:$port" 2>&1); rc=$?
rm -rf "/var/run/dpdk/$prefix-b"
[ $rc = 2 ] && grep -q "cannot listen on 127.0.0.1:$port" <<<"$out" || fail "port in use: exit $rc: $(tail -n 3 <<<"$out")"
kill -TERM "$pid"
wait "$pid"; rc=$?
pid=""
[ $rc = 0 ] || fail "exit status $rc after SIGTERM"
echo "ok: metrics endpoint"
