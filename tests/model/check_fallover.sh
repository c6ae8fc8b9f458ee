#!/usr/bin/env bash
# Model-checks the auto mode's fall-over (fallover.pml, spin): the protocol as written must hold
# (no assertion fails, no rank left waiting), and each mutation in the model's header must be
# caught, so the model is known to check what it claims.
#   check_fallover.sh MODEL
set -uo pipefail
model=$1
# shellcheck source=spin_workdir.sh
. "$(dirname "$0")/spin_workdir.sh" "$model"
check() {  # MUTATION -> pan's summary line
  spin -DMUTATION="$1" -a model.pml >spin.log 2>&1 || { echo "FAIL: spin: $(tail -n 3 spin.log)"; exit 1; }
  gcc -O2 -DSAFETY -o pan pan.c >gcc.log 2>&1 || { echo "FAIL: gcc pan.c: $(tail -n 3 gcc.log)"; exit 1; }
  ./pan -m200000 >pan.log 2>&1
  grep -q "Full statespace search\|errors: [1-9]" pan.log || { echo "FAIL: pan did not finish: $(tail -n 5 pan.log)"; exit 1; }
  grep -o "errors: [0-9]*" pan.log
}
out=$(check 0)
[ "$out" = "errors: 0" ] || { echo "FAIL: the fall-over protocol breaks a claim: $(grep -E 'violated|invalid end' pan.log | head -n 2)"; exit 1; }
states=$(awk '/states, stored/ {print $1}' pan.log)
for m in 1 2 3; do
  out=$(check "$m")
  [ "$out" != "errors: 0" ] || { echo "FAIL: mutation $m went unnoticed: the model checks less than it claims"; exit 1; }
  caught+=("$m: $(grep -m1 -E 'assertion violated|invalid end state' pan.log | sed 's/ (at depth.*//; s/^pan:[0-9]*: //')")
done
echo "ok: fall-over model holds ($states states, N=3 ranks, K=2 allreduces); mutations caught:"
printf '  %s\n' "${caught[@]}"
