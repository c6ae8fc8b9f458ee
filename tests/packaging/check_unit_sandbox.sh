#!/usr/bin/env bash
# inagg@.service's sandbox, as systemd itself rates it: `systemd-analyze security --offline` on the
# unit (its @dirs@ filled in) must score an exposure of at most 6.0 of 10 (the unit without its
# sandboxing scored 9.6, "UNSAFE"), and must bound the capabilities and make the system read-only.
# `systemd-analyze verify` on an instance of it, with the built inagg in @bindir@, must pass without
# a word (an unknown key is only a warning there, so any output fails too).
#   check_unit_sandbox.sh SRCDIR INAGG
set -uo pipefail
src=$1
inagg=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# unit BINDIR LIBEXECDIR: the unit with its @dirs@ filled in.
unit() {
  sed -e "s|@bindir@|$1|g; s|@libexecdir@|$2|g; s|@sysconfdir@|/etc|g; s|@docdir@|/usr/share/doc/inagg|g" \
    "$src/systemd/inagg@.service.in"
}
unit /usr/bin /usr/libexec/inagg >"$tmp/inagg@.service"
grep -q '@[a-z]*@' "$tmp/inagg@.service" && fail "a @dir@ left unfilled: $(grep -o '@[a-z]*@' "$tmp/inagg@.service" | head -n 1)"
out=$(systemd-analyze security --offline=yes "$tmp/inagg@.service" 2>&1)
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$out")
[ -n "$score" ] || fail "systemd-analyze printed no exposure level: $(tail -n 3 <<<"$out")"
awk -v s="$score" 'BEGIN { exit !(s <= 6.0) }' || fail "exposure $score, above 6.0: $(grep '✗' <<<"$out" | head -n 10)"
grep -q '^CapabilityBoundingSet=' "$tmp/inagg@.service" || fail "no CapabilityBoundingSet"
grep -q '^ProtectSystem=strict$' "$tmp/inagg@.service" || fail "ProtectSystem is not strict"
grep -q '^User=inagg$' "$tmp/inagg@.service" || fail "the unit does not run as its own user inagg"
# No capability that lets it past the file system's permissions or into the kernel's memory map:
# its hugetlbfs and VFIO groups are its own (inagg-hugepages, 60-inagg-vfio.rules). Each one it
# keeps is explained in the comment above it ("#   CAP_X  why").
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$tmp/inagg@.service")
for c in CAP_SYS_ADMIN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_SYS_RAWIO CAP_CHOWN CAP_FOWNER; do
  grep -qw "$c" <<<"$caps" && fail "the unit keeps $c ($caps)"
done
for c in $caps; do
  grep -q "^#   $c  *[a-z]" "$tmp/inagg@.service" || fail "the unit keeps $c without saying why next to it"
done
grep -q -- '--huge-dir=/dev/hugepages-inagg ' "$tmp/inagg@.service" &&
  grep -q '^Environment=INAGG_HUGEPAGE_DIR=/dev/hugepages-inagg INAGG_HUGEPAGE_USER=inagg$' "$tmp/inagg@.service" ||
  fail "inagg does not use the hugetlbfs the helper mounts for user inagg"
# Reload and watchdog: SIGHUP reloads (inagg handles it), and inagg pings the watchdog it is given.
grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$tmp/inagg@.service" || fail "the unit does not reload with SIGHUP"
grep -q '^WatchdogSec=[1-9]' "$tmp/inagg@.service" || fail "the unit has no WatchdogSec"
grep -q '^SUBSYSTEM=="vfio", KERNEL=="\[0-9\]\*", GROUP="inagg", MODE="0660"$' "$src/systemd/60-inagg-vfio.rules" ||
  fail "the udev rule does not give the VFIO groups to group inagg"

# verify: the build's inagg for @bindir@/inagg and the tree's inagg-hugepages for @libexecdir@.
mkdir -p "$tmp/verify"
unit "$(dirname "$inagg")" "$src/systemd" >"$tmp/verify/inagg@.service"
vout=$(cd "$tmp/verify" && systemd-analyze verify ./inagg@rack1.service 2>&1)
vrc=$?
[ "$vrc" = 0 ] && [ -z "$vout" ] || fail "systemd-analyze verify inagg@rack1.service (exit $vrc): $vout"
echo "ok: inagg@.service's exposure is $score of 10 with $caps only; systemd-analyze verify passes"
