#!/usr/bin/env bash
# The committed fixtures are exactly what scripts/gen-fixtures makes (it is deterministic), so the
# golden vectors can always be regenerated and audited.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/scripts/gen-fixtures" "$tmp" >/dev/null
for f in manifest.txt roce_v4.pcap roce_v6.pcap cnp_connectx4lx.pcap; do
  cmp "$tmp/$f" "$src/tests/fixtures/$f" || { echo "tests/fixtures/$f differs from scripts/gen-fixtures output: regenerate and commit"; exit 1; }
done
echo "fixtures match scripts/gen-fixtures"
