#!/usr/bin/env bash
# Model-checks one job over two shards (sharded.pml, spin): the design as written must hold in
# both configurations, each mutation in the model's header must be caught by the claim it is
# about, and mutation 2 (the window check against the shard's own cursor) must hold under the
# contract and be caught only with a sender that breaks it (the model's header says why).
#   check_sharded.sh MODEL
# Configurations: A = W 1, 4 messages, 2 losses (slots reused, epochs, stale drops, retained
# sums; one message in flight per rank, so the ticket never has to hold a shard back);
# B = W 2, 5 messages, 1 loss (two messages in flight on two shards: the ticket's order, and
# slots reused). B's liveness run (3.8M states, ~2 min) is too slow for CI: docs/model/README.md.
set -uo pipefail
model=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=spin_workdir.sh
. "$here/spin_workdir.sh" "$model"
A=(-DW=1 -DMSGS=4 -DLMAX=2)
B=(-DW=2 -DMSGS=5 -DLMAX=1)
# The largest run needs ~470 MB.
# shellcheck source=spin_check.sh
. "$here/spin_check.sh"
check "A safety" safety holds "${A[@]}"
check "A safety, mutation 2 (own cursor)" safety holds "${A[@]}" -DMUTATION=2
check "A safety, a rogue sender" safety holds "${A[@]}" -DROGUE
check "A safety, a rogue sender, mutation 2" safety "rexp\[" "${A[@]}" -DROGUE -DMUTATION=2
check "A safety, mutation 4 (window against the ticket alone)" safety "assertion violated 0" "${A[@]}" -DMUTATION=4
check "A liveness" liveness holds "${A[@]}"
check "A liveness, mutation 3 (no retained sum)" liveness "non-progress cycle" "${A[@]}" -DMUTATION=3
check "B safety" safety holds "${B[@]}"
check "B safety, mutation 1 (no ticket)" safety "m==nfirst" "${B[@]}" -DMUTATION=1
echo "ok: sharded model (N=2 workers, K=2 shards):"
printf '  %s\n' "${results[@]}"
