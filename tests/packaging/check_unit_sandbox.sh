#!/usr/bin/env bash
# inagg@.service's sandbox, as systemd itself rates it: `systemd-analyze security --offline` on the
# unit (its @dirs@ filled in) must score an exposure of at most 6.0 of 10 (the unit without its
# sandboxing scored 9.6, "UNSAFE"), and must bound the capabilities and make the system read-only.
#   check_unit_sandbox.sh SRCDIR
set -uo pipefail
src=$1
fail() { echo "FAIL: $*"; exit 1; }
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e 's|@bindir@|/usr/bin|g; s|@libexecdir@|/usr/libexec/inagg|g; s|@sysconfdir@|/etc|g; s|@docdir@|/usr/share/doc/inagg|g' \
  "$src/systemd/inagg@.service.in" >"$tmp/inagg@.service"
grep -q '@[a-z]*@' "$tmp/inagg@.service" && fail "a @dir@ left unfilled: $(grep -o '@[a-z]*@' "$tmp/inagg@.service" | head -n 1)"
out=$(systemd-analyze security --offline=yes "$tmp/inagg@.service" 2>&1)
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$out")
[ -n "$score" ] || fail "systemd-analyze printed no exposure level: $(tail -n 3 <<<"$out")"
awk -v s="$score" 'BEGIN { exit !(s <= 6.0) }' || fail "exposure $score, above 6.0: $(grep '✗' <<<"$out" | head -n 10)"
grep -q '^CapabilityBoundingSet=' "$tmp/inagg@.service" || fail "no CapabilityBoundingSet"
grep -q '^ProtectSystem=strict$' "$tmp/inagg@.service" || fail "ProtectSystem is not strict"
echo "ok: inagg@.service's exposure is $score of 10"
