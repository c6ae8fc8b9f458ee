# shellcheck shell=bash
# check NAME safety|liveness EXPECT SPIN_FLAGS...: runs spin and pan on model.pml (in the scratch
# directory spin_workdir.sh made) and appends a line to results[]. EXPECT is "holds" or a pattern
# that pan's first error line must match (the claim that catches a mutation); anything else, or a
# search that did not finish, prints FAIL and exits. SPIN_MEMLIM (MB, default 1024) bounds pan's
# memory: a run stops rather than take the machine's.
#   . "$(dirname "$0")/spin_check.sh"
results=()
check() {
  local name=$1 kind=$2 expect=$3
  shift 3
  local cflags=(-DSAFETY) run=(./pan -m300000)
  [ "$kind" = liveness ] && { cflags=(-DNP -DNFAIR=3); run=(./pan -l -f -m300000); }
  rm -f pan pan.c model.pml.trail
  spin "$@" -a model.pml >spin.log 2>&1 || { echo "FAIL: $name: spin: $(tail -n 3 spin.log)"; exit 1; }
  gcc -O2 "${cflags[@]}" -DMEMLIM="${SPIN_MEMLIM:-1024}" -o pan pan.c >gcc.log 2>&1 ||
    { echo "FAIL: $name: gcc pan.c: $(grep -m3 error gcc.log)"; exit 1; }
  "${run[@]}" >pan.log 2>&1
  grep -q "errors: [1-9]" pan.log || { grep -q "Full statespace search" pan.log && ! grep -q "Search not completed" pan.log; } ||
    { echo "FAIL: $name: pan did not finish: $(grep -m1 'Search not completed' pan.log) $(tail -n 5 pan.log)"; exit 1; }
  local states err
  states=$(awk '/states, stored/ {print $1}' pan.log)
  err=$(grep -m1 -E 'assertion violated|invalid end state|non-progress cycle|acceptance cycle' pan.log |
    sed 's/ (at depth.*//; s/^pan:[0-9]*: //')
  if [ "$expect" = holds ]; then
    grep -q "errors: 0" pan.log || { echo "FAIL: $name breaks a claim: $err"; exit 1; }
    results+=("$name: holds ($states states)")
  else
    grep -q "errors: 0" pan.log && { echo "FAIL: $name went unnoticed: the model checks less than it claims"; exit 1; }
    grep -q -- "$expect" <<<"$err" ||
      { echo "FAIL: $name was caught by '$err', not by the claim it is about ('$expect')"; exit 1; }
    results+=("$name: caught: $err")
  fi
}
