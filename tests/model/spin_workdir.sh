# shellcheck shell=bash
# What the model checks share: spin must be there, and they work in a scratch directory (removed on
# exit) holding the model as model.pml. Sourced with the model's path; leaves the shell in $tmp.
#   . "$(dirname "$0")/spin_workdir.sh" MODEL
command -v spin >/dev/null || { echo "FAIL: spin is missing (scripts/setup installs it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$1" "$tmp/model.pml"
cd "$tmp" || exit 1
