#!/usr/bin/env bash
# Model-checks the aggregation protocol's core (docs/model/slots.pml, spin) as written, at the
# model's own sizes (N = 2 workers, W = 1, K = 4 messages): safety (every accepted packet carries
# the full sum, in order; nothing ahead of its slot's epoch) and liveness (no non-progress cycle
# under weak fairness). docs/model/README.md records larger runs and the mutations that break it.
#   check_slots.sh MODEL
set -uo pipefail
model=$1
# shellcheck source=spin_workdir.sh
. "$(dirname "$0")/spin_workdir.sh" "$model"
spin -a model.pml >spin.log 2>&1 || { echo "FAIL: spin: $(tail -n 3 spin.log)"; exit 1; }
gcc -O2 -DSAFETY -o pan pan.c >gcc.log 2>&1 || { echo "FAIL: gcc pan.c (safety): $(tail -n 3 gcc.log)"; exit 1; }
./pan -m300000 >safety.log 2>&1
grep -q "Full statespace search" safety.log || { echo "FAIL: safety search did not finish: $(tail -n 5 safety.log)"; exit 1; }
grep -q "errors: 0" safety.log || { echo "FAIL: safety violated: $(grep -m2 -E 'violated|invalid end' safety.log)"; exit 1; }
gcc -O2 -DNP -DNFAIR=3 -o pan pan.c >gcc.log 2>&1 || { echo "FAIL: gcc pan.c (liveness): $(tail -n 3 gcc.log)"; exit 1; }
./pan -l -f -m300000 >liveness.log 2>&1
grep -q "Full statespace search" liveness.log || { echo "FAIL: liveness search did not finish: $(tail -n 5 liveness.log)"; exit 1; }
grep -q "errors: 0" liveness.log || { echo "FAIL: a non-progress cycle: $(grep -m2 -E 'non-progress|acceptance' liveness.log)"; exit 1; }
echo "ok: slots model holds: safety $(awk '/states, stored/ {print $1}' safety.log) states, liveness $(awk '/states, stored/ {print $1}' liveness.log) states"
