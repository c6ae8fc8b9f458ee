#!/usr/bin/env bash
# inagg's Prometheus endpoint (--metrics): scraped twice while net_pcap loops a job's traffic, the
# text parsed by the Prometheus project's own Python client (an independent parser of the format);
# port, lcore, engine and job families present and named by Prometheus's conventions (promtool
# check metrics passes; no free-text label; the job's state a StateSet), counters that move between
# the scrapes, the job's counters agreeing with inagg-ctl, the slots' wait histogram against bounds
# computed here and the slots completed, the process's start against ps; every metric the Grafana
# dashboard and docs/operations.md name served; bad --metrics values refused clearly.
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

version=$("$inagg" --version | awk '{print $2; exit}')
/usr/bin/python3 - "$url" "$ctl" "$tmp/ctl.sock" "$src/conf/grafana/inagg-dashboard.json" "$version" "$tmp/dashboard-rules.yml" \
  "$pid" "$src/docs/operations.md" <<'PY' || fail "metrics check"
import json, math, re, subprocess, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families

url, ctl, sock, dashboard, version, rules_file, pid, operations_md = sys.argv[1:9]
raw_names = set()

def scrape():
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200, r.status
        ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        text = r.read().decode()
    raw_names.update(l.split("{")[0].split(" ")[0] for l in text.splitlines() if l and not l.startswith("#"))
    raw_names.update(l.split(" ")[2] for l in text.splitlines() if l.startswith("# TYPE "))
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
for fam in ("inagg_build_info", "inagg_port_rx_packets", "inagg_port_tx_packets", "inagg_port_rx_bytes",
            "inagg_port_rx_dropped_packets", "inagg_port_rx_errors", "inagg_port_tx_errors",
            "inagg_lcore_rx_packets", "inagg_lcore_loop_seconds", "inagg_lcore_dropped_packets",
            "inagg_engine_aggregated_packets", "inagg_engine_dropped_packets", "inagg_engine_contract_violations",
            "inagg_job_info", "inagg_job_state", "inagg_job_aggregated_packets", "inagg_job_slots_released",
            "inagg_job_naks_sent", "inagg_job_resent_packets", "inagg_job_held_packets",
            "inagg_job_slot_completion_seconds", "inagg_port_link_up", "process_start_time_seconds"):
    assert fam in b, f"family {fam} missing; have {sorted(b)[:10]}..."
# One family per meaning: the release cursor's gauge is gone beside the counter of released slots.
assert "inagg_job_released_slots" not in b, "inagg_job_released_slots duplicates inagg_job_slots_released_total"
# Labels of few values: no free text (why a job failed) nor a per-job digest on any series.
for f in b.values():
    for s in f.samples:
        assert not {"error", "spec"} & set(s.labels), (f.name, s.labels)
assert [set(s.labels) for s in b["inagg_job_info"].samples] == [{"job_id", "dtype"}], b["inagg_job_info"].samples
# Prometheus's conventions: counters end in _total; no cycles (seconds are the base unit), no
# ratio computed at scrape, one family per quantity (drops by a reason label, not a family each).
for f in b.values():
    if f.type == "counter":
        assert all(s.name.endswith("_total") for s in f.samples), f.name
    assert not re.search(r"_(cycles|ratio|drop)(_|$)", f.name), f.name
assert value(b, "inagg_build_info", version=version) == 1
for port in ("0", "1"):
    ra, rb = value(a, "inagg_port_rx_packets", port=port), value(b, "inagg_port_rx_packets", port=port)
    assert rb > ra > 0, f"port {port} rx did not grow between scrapes: {ra} -> {rb}"
    assert {s.labels["reason"] for s in b["inagg_port_rx_dropped_packets"].samples if s.labels["port"] == port} == \
        {"no_descriptor", "no_mbuf"}
assert a["inagg_port_rx_packets"].type == "counter" and b["inagg_job_held_packets"].type == "gauge"
# The loop's seconds grow, busy while it aggregates; each state once per lcore.
busy = lambda f: sum(s.value for s in f["inagg_lcore_loop_seconds"].samples if s.labels["state"] == "busy")
assert busy(b) > busy(a) > 0, (busy(a), busy(b))
# The job's state as a StateSet: one sample per state, 1 for the current one.
states = {s.labels["state"]: s.value for s in b["inagg_job_state"].samples if s.labels["job_id"] == "1"}
assert states == {"active": 1, "failed": 0, "refused": 0, "binding": 0}, states
assert value(b, "inagg_job_info", job_id="1", dtype="fp32") == 1
# The slots' waits for their last rank: the buckets' bounds are 2^(10+i) ns (computed here, not
# read from inagg), cumulative, +Inf equal to the count, which is every slot completed (one
# snapshot of the job gives both); the count grows while traffic flows.
def histogram(fams):
    f = fams["inagg_job_slot_completion_seconds"]
    assert f.type == "histogram", f.type
    buckets = [(float(s.labels["le"]), s.value) for s in f.samples if s.name.endswith("_bucket") and s.labels["job_id"] == "1"]
    count = next(s.value for s in f.samples if s.name.endswith("_count") and s.labels["job_id"] == "1")
    total = next(s.value for s in f.samples if s.name.endswith("_sum") and s.labels["job_id"] == "1")
    return buckets, count, total
buckets, count, wait_sum = histogram(b)
assert [le for le, _ in buckets] == [2 ** (10 + i) / 1e9 for i in range(21)] + [math.inf], [le for le, _ in buckets]
assert all(x <= y for (_, x), (_, y) in zip(buckets, buckets[1:])) and buckets[-1][1] == count, buckets
assert count == value(b, "inagg_job_slots_completed", job_id="1") and 0 <= wait_sum <= count * 2 ** 30 / 1e9, (count, wait_sum)
assert count > histogram(a)[1] > 0, (histogram(a)[1], count)
# process_start_time_seconds against ps's elapsed time of the appliance's process.
etimes = int(subprocess.run(["ps", "-o", "etimes=", "-p", pid], capture_output=True, text=True, check=True).stdout)
started = value(b, "process_start_time_seconds")
assert abs(started - (time.time() - etimes)) < 3, (started, time.time() - etimes)
assert value(b, "inagg_port_link_up", port="0") == 1 and value(b, "inagg_port_link_up", port="1") == 1
ja, jb = value(a, "inagg_job_aggregated_packets", job_id="1"), value(b, "inagg_job_aggregated_packets", job_id="1")
assert jb >= ja > 0, (ja, jb)
# Drop reasons: one sample per reason, and the same reasons per job as for the engine.
reasons = [s.labels["reason"] for s in b["inagg_engine_dropped_packets"].samples]
assert len(reasons) == len(set(reasons)) and {"bad_icrc", "malformed", "duplicate", "contract"} <= set(reasons), reasons
assert sorted(s.labels["reason"] for s in b["inagg_job_dropped_packets"].samples) == sorted(reasons)
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
# Several appliances stay apart: $job and $instance select, rates use Grafana's $__rate_interval.
board = json.load(open(dashboard))
assert [v["name"] for v in board["templating"]["list"]] == ["job", "instance", "job_id"], board["templating"]
for e in exprs:
    assert 'instance=~"$instance"' in e and ("rate(" not in e or "[$__rate_interval]" in e), e
# The queries as PromQL, for promtool check rules (the variables as Grafana fills them).
with open(rules_file, "w") as f:
    f.write("groups:\n- name: dashboard\n  rules:\n")
    for k, e in enumerate(exprs):
        q = e.replace("$__rate_interval", "1m").replace("$job_id", ".*").replace("$instance", ".*").replace("$job", ".*")
        f.write(f"  - record: inagg:dashboard_{k}\n    expr: {json.dumps(q)}\n")
# Every metric docs/operations.md names is served ({a,b} alternatives expanded, a label list at the
# end of a name left out, inagg_job_* and the like skipped).
def doc_names(text):
    for span in re.findall(r"`((?:inagg|process)_[^`]*)`", text):
        name = re.sub(r"\{[^{}]*\}$", "", span)
        if "*" in name:
            continue
        names = [name]
        while any("{" in n for n in names):
            names = [n[:n.index("{")] + alt + n[n.index("}") + 1:] for n in names for alt in n[n.index("{") + 1:n.index("}")].split(",")]
        yield from (n for n in names if re.fullmatch(r"[a-z_][a-z0-9_]*[a-z0-9]", n))
documented = set(doc_names(open(operations_md).read()))
assert "inagg_job_slot_completion_seconds" in documented and "inagg_port_rx_bytes_total" in documented, sorted(documented)
undocumented = documented - raw_names
assert not undocumented, f"docs/operations.md names metrics inagg does not serve: {sorted(undocumented)}"
print(f"ok: {len(b)} metric families, the dashboard's {len(asked)} metrics all served; port 0 rx "
      f"{value(a, 'inagg_port_rx_packets', port='0'):.0f} -> {value(b, 'inagg_port_rx_packets', port='0'):.0f}; "
      f"job 1 aggregated {jb:.0f} (inagg-ctl: {ctl_agg}); {count:.0f} slots timed, {wait_sum / count * 1e6:.1f} us on "
      f"average; the {len(documented)} metrics docs/operations.md names all served")
PY
# The Prometheus project's own linter on a live scrape (promtool: tests/lib/promtool.sh).
# shellcheck source=../lib/promtool.sh
. "$src/tests/lib/promtool.sh"
promtool=$(find_promtool) || fail "promtool: install the prometheus package (scripts/packages.txt names it)"
/usr/bin/python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "$url" >"$tmp/scrape.txt" || fail "scrape for promtool"
lint=$("$promtool" check metrics <"$tmp/scrape.txt" 2>&1) || fail "promtool check metrics: $lint"
lint=$("$promtool" check rules "$tmp/dashboard-rules.yml" 2>&1) || fail "the dashboard's queries as PromQL: $lint"
echo "ok: promtool check metrics passes on a scrape of $(grep -c '^# TYPE' "$tmp/scrape.txt") families"
# inagg-ctl -j: the same replies as JSON (read by python's json module) with the text form's names
# and values.
/usr/bin/python3 - "$ctl" "$tmp/ctl.sock" <<'PY' || fail "inagg-ctl -j"
import json, subprocess, sys
ctl, sock = sys.argv[1:3]
def run(*args, json_form):
    r = subprocess.run([ctl, "--socket", sock] + (["-j"] if json_form else []) + list(args), capture_output=True, text=True)
    return r.returncode, (json.loads(r.stdout) if json_form else r.stdout)
rc, jl = run("list", json_form=True)
_, tl = run("list", json_form=False)
assert rc == 0 and jl["ok"] and [j["id"] for j in jl["jobs"]] == [1], jl
assert f"id=1 state={jl['jobs'][0]['state']} dtype={jl['jobs'][0]['dtype']} workers={jl['jobs'][0]['workers']} " in tl, (jl, tl)
rc, js = run("stats", "1", json_form=True)
_, ts = run("stats", "1", json_form=False)
text = dict(l.split(" ", 1) for l in ts.splitlines())
assert rc == 0 and js["job"]["id"] == 1 and js["job"]["dtype"] == text["dtype"], (js, text)
assert set(js["counters"]) | set(js["job"]) == set(text), sorted(set(text) ^ (set(js["counters"]) | set(js["job"])))
assert 0 < js["counters"]["aggregated_packets"] <= int(text["aggregated_packets"]), (js["counters"], text["aggregated_packets"])
rc, je = run("stats", json_form=True)
assert rc == 0 and je["counters"]["aggregated_packets"] >= js["counters"]["aggregated_packets"], je
rc, jr = run("remove", "99", json_form=True)
assert rc == 1 and jr["ok"] is False and "99" in jr["error"], (rc, jr)
print(f"ok: inagg-ctl -j list, stats, stats 1 and a refusal parse as JSON with the text form's {len(text)} names")
PY
# inagg-ctl top: two frames (not a terminal: one after the other), job 1 aggregating in both.
top=$("$ctl" --socket "$tmp/ctl.sock" top --interval 0.3 --count 2 2>&1) || fail "inagg-ctl top: $top"
[ "$(grep -c '^inagg-ctl top ' <<<"$top")" = 2 ] || fail "inagg-ctl top did not show 2 frames: $top"
awk '$1 == 1 && $2 == "active" {n++; v = $3; sub(/[kMG]$/, "", v); if (v + 0 <= 0) bad = 1} END {exit !(n == 2 && !bad)}' <<<"$top" ||
  fail "inagg-ctl top shows no aggregation for job 1: $top"
grep -q "^engine: rx [0-9.]*[kMG]\? pps  aggregated [1-9]" <<<"$top" || fail "inagg-ctl top's engine line: $top"
# top --once --json: one frame as one JSON object (python's json module), job 1 aggregating in it.
/usr/bin/python3 - "$ctl" "$tmp/ctl.sock" <<'PY' || fail "inagg-ctl top --once --json"
import json, subprocess, sys
ctl, sock = sys.argv[1:3]
r = subprocess.run([ctl, "--socket", sock, "top", "--once", "--json", "--interval", "0.3"], capture_output=True,
                   text=True, timeout=30)
assert r.returncode == 0 and r.stdout.count("\n") == 1, (r.returncode, r.stdout, r.stderr)
f = json.loads(r.stdout)
assert f["socket"] == sock and f["interval_s"] == 0.3 and f["elapsed_s"] >= 0.3, f
assert f["engine"]["aggregated_packets_per_s"] > 0 and f["engine"]["rx_packets_per_s"] > 0, f["engine"]
assert [j["id"] for j in f["jobs"]] == [1] and f["jobs"][0]["state"] == "active", f["jobs"]
job = f["jobs"][0]
assert job["aggregated_packets_per_s"] > 0 and job["aggregated_bits_per_s"] > 0 and job["error"] == "", job
for k in ("slots_released_per_s", "naks_sent_per_s", "resends_per_s", "dropped_packets_per_s", "held_packets",
          "retained_packets"):
    assert isinstance(job[k], (int, float)) and job[k] >= 0, (k, job)
print(f"ok: inagg-ctl top --once --json: {r.stdout.strip()[:160]}...")
PY
out=$("$ctl" --socket "$tmp/ctl.sock" top --once --count 3 2>&1); rc=$?
[ $rc = 2 ] && grep -q "once is --count 1" <<<"$out" || fail "top --once --count 3: exit $rc, $out"
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
