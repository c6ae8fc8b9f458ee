#!/usr/bin/env bash
# Model-checks the one-pass reduce-scatter and all-gather of docs/protocol.md section 20 (spin):
# the rotated-shard reduce-scatter (REDUCE_SCATTER_MODEL) and the rotated-placeholder all-gather
# (ALL_GATHER_MODEL). Each design as written must hold, and each mutation in a model's header must
# be caught by the claim it is about.
#   check_rotated.sh REDUCE_SCATTER_MODEL ALL_GATHER_MODEL
# Configurations (3 ranks, W 1, 3 rounds of slots per shard): safety over 4 rounds with 1 loss
# (slots reused); liveness over 2 rounds with 1 loss (the 4-round liveness runs, 10M states and
# 1.5 GB each, are by hand: docs/model/README.md).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
all_gather=$(realpath "$2")
# shellcheck source=spin_workdir.sh
. "$here/spin_workdir.sh" "$1"
A=(-DW=1 -DK=4 -DLMAX=1)
B=(-DW=1 -DK=2 -DLMAX=1)
# The safety runs over 4 rounds need ~950 MB.
SPIN_MEMLIM=2048
# shellcheck source=spin_check.sh
. "$here/spin_check.sh"
check "reduce-scatter: safety, 4 rounds" safety holds "${A[@]}"
check "reduce-scatter: liveness, 2 rounds" liveness holds "${B[@]}"
check "reduce-scatter: mutation 1 (the held packet released with one contribution)" safety "==(7-(1<<" "${B[@]}" -DMUTATION=1
check "reduce-scatter: mutation 2 (a retransmitted contribution added again)" safety "==(7-(1<<" "${B[@]}" -DMUTATION=2
check "reduce-scatter: mutation 3 (no retained sum)" liveness "non-progress cycle" "${B[@]}" -DMUTATION=3
check "reduce-scatter: mutation 4 (n - 1 rounds of slots per shard)" safety "assertion violated 0" -DW=1 -DK=4 -DLMAX=0 -DMUTATION=4
cp "$all_gather" model.pml
check "all-gather: safety, 4 rounds" safety holds "${A[@]}"
check "all-gather: liveness, 2 rounds" liveness holds "${B[@]}"
check "all-gather: mutation 1 (a placeholder released before its copy)" safety "assertion violated (0==" "${B[@]}" -DMUTATION=1
check "all-gather: mutation 2 (no copy for a retransmission)" liveness "non-progress cycle" "${B[@]}" -DMUTATION=2
check "all-gather: mutation 3 (n - 1 rounds of copies per shard)" safety "assertion violated 0" -DW=1 -DK=4 -DLMAX=0 -DMUTATION=3
echo "ok: one-pass collectives (3 ranks): rotated-shard reduce-scatter and rotated-placeholder all-gather:"
printf '  %s\n' "${results[@]}"
