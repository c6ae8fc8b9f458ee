#!/usr/bin/env bash
# The alerting rules shipped in conf/prometheus: valid for Prometheus (promtool check rules) and
# firing as their tests say (promtool test rules inagg-rules.test.yml); every metric they read is
# one the appliance exports (named in src/dataplane/metrics.cpp or the engine's counter list).
#   check_prometheus_rules.sh SRCDIR
set -uo pipefail
src=$1
# shellcheck source=../lib/promtool.sh
. "$src/tests/lib/promtool.sh"
promtool=$(find_promtool) ||
  { echo "SKIP: promtool is not installed (Debian's prometheus package has it: scripts/setup installs it)"; exit 77; }
rules="$src/conf/prometheus/inagg-rules.yml"
out=$("$promtool" check rules "$rules" 2>&1) || { echo "FAIL: promtool check rules: $out"; exit 1; }
out=$(cd "$src/conf/prometheus" && "$promtool" test rules inagg-rules.test.yml 2>&1) ||
  { echo "FAIL: promtool test rules: $out"; exit 1; }
# The rules' metrics: each inagg_ name (less _bucket) is a family metrics.cpp renders: by its full
# name, as a prefix and a family of its counter tables, or a job field it exports as a gauge.
/usr/bin/python3 - "$rules" "$src/src/dataplane/metrics.cpp" <<'PY' || exit 1
import re, sys
rules, exporter = (open(f).read() for f in sys.argv[1:3])
families = set(re.findall(r'"(inagg_[a-z0-9_]+)"', exporter))
tables = set(re.findall(r'\{"[a-z_0-9]+", "([a-z_0-9]+)", "[a-z_0-9]*"\}', exporter))
gauges = {"inagg_job_" + f for f in re.findall(r'\{"([a-z_0-9]+)", JobFieldPlace::gauge\}', exporter)}
served = families | gauges | {p + t for p in ("inagg_lcore_", "inagg_engine_", "inagg_job_") for t in tables}
asked = {re.sub(r"_bucket$", "", m) for m in re.findall(r"\binagg_[a-z0-9_]+", rules)}
missing = asked - served
assert not missing, f"inagg-rules.yml reads metrics inagg does not export: {sorted(missing)}"
print(f"ok: the rules read {len(asked)} metrics, all exported")
PY
echo "ok: conf/prometheus/inagg-rules.yml passes promtool check rules and its tests ($("$promtool" --version 2>&1 | head -n 1))"
