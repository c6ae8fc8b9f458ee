#!/usr/bin/env bash
# Model-checks a job across two racks, two leaves and a spine (leaf_spine.pml, spin; the design of
# docs/protocol.md section 21): the design as written must hold, and each mutation in the model's
# header must be caught by the claim it is about.
#   check_leaf_spine.sh MODEL
# Configuration: W 1, 1 message per rank, 1 loss anywhere (rank to leaf, leaf to spine, spine to
# leaf, leaf to rank, an ACK): every retransmission path of the two levels. Mutation 5 (one epoch
# of slots) needs a slot reused: 2 messages. Larger runs (slots reused, 2 losses) take minutes and
# gigabytes: docs/model/README.md.
set -uo pipefail
model=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=spin_workdir.sh
. "$here/spin_workdir.sh" "$model"
A=(-DW=1 -DMSGS=1 -DLMAX=1)
# The liveness run needs ~900 MB.
SPIN_MEMLIM=2048
# shellcheck source=spin_check.sh
. "$here/spin_check.sh"
check "safety" safety holds "${A[@]}"
check "liveness" liveness holds "${A[@]}"
check "mutation 1 (the held packet released with the rack's partial)" safety "==15)" "${A[@]}" -DMUTATION=1
check "mutation 2 (uplink retransmissions dropped at the leaf)" liveness "non-progress cycle" "${A[@]}" -DMUTATION=2
check "mutation 3 (downlink retransmissions dropped at the leaf)" liveness "non-progress cycle" "${A[@]}" -DMUTATION=3
check "mutation 4 (the spine answers with the partial)" safety "==15)" "${A[@]}" -DMUTATION=4
check "mutation 5 (one epoch of slots)" liveness "non-progress cycle" -DW=1 -DMSGS=2 -DLMAX=1 -DMUTATION=5
echo "ok: leaf and spine model (4 ranks, 2 racks):"
printf '  %s\n' "${results[@]}"
