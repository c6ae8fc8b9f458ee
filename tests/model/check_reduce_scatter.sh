#!/usr/bin/env bash
# Model-checks the rotated-shard reduce-scatter (reduce_scatter.pml, spin; the design of
# docs/protocol.md section 20): the design as written must hold, and each mutation in the model's
# header must be caught by the claim it is about.
#   check_reduce_scatter.sh MODEL
# Configurations (3 ranks, W 1, 3 rounds of slots per shard): safety over 4 rounds with 1 loss
# (slots reused); liveness over 2 rounds with 1 loss (the 4-round liveness run, 10M states and
# 1.5 GB, is by hand: docs/model/README.md).
set -uo pipefail
model=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=spin_workdir.sh
. "$here/spin_workdir.sh" "$model"
A=(-DW=1 -DK=4 -DLMAX=1)
B=(-DW=1 -DK=2 -DLMAX=1)
# The safety run over 4 rounds needs ~950 MB.
SPIN_MEMLIM=2048
# shellcheck source=spin_check.sh
. "$here/spin_check.sh"
check "safety, 4 rounds" safety holds "${A[@]}"
check "liveness, 2 rounds" liveness holds "${B[@]}"
check "mutation 1 (the held packet released with one contribution)" safety "==(7-(1<<" "${B[@]}" -DMUTATION=1
check "mutation 2 (a retransmitted contribution added again)" safety "==(7-(1<<" "${B[@]}" -DMUTATION=2
check "mutation 3 (no retained sum)" liveness "non-progress cycle" "${B[@]}" -DMUTATION=3
check "mutation 4 (n - 1 rounds of slots per shard)" safety "assertion violated 0" -DW=1 -DK=4 -DLMAX=0 -DMUTATION=4
echo "ok: reduce-scatter model (3 ranks, rotated shards):"
printf '  %s\n' "${results[@]}"
