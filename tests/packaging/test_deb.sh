#!/usr/bin/env bash
# Builds the Debian package from the tree and checks it the way an appliance host would meet it:
#   1. debian/control's Build-Depends are scripts/packages.txt above its "test and tooling" part,
#      and debian/changelog's version is meson's project version;
#   2. dpkg-buildpackage -us -uc (source and binary) with the nocheck profile (the tests run from
#      the tree), in a copy of the tree (the tree itself stays clean);
#   3. inagg holds the binaries with their manual pages, the configs (the only conffiles), the
#      examples, the systemd unit, the hugepage helper and the documents; python3-inagg the Python
#      module with both extensions in Debian's python3 path; lintian passes on the binary packages
#      and the source package;
#   4. its dependencies: every package dh_shlibdeps found is in packages.txt's "runtime" part, and
#      apt resolves the package for a root with nothing installed (apt-get --simulate against an
#      empty dpkg status, with Debian's package lists);
#   5. unpacked into a scratch root, Debian's python3 imports the module and its torch backend
#      from there (backend "inagg" registered with torch.distributed), every tool prints the
#      package's version, the unit's
#      ExecStartPre and ExecStart command lines (with the shipped inagg.env, paths moved into the
#      root) run in config-check mode, a broken config fails the pre-start check, and the hugepage
#      helper raises a reservation in a fake sysfs, never lowers one and refuses a bad size.
# Most of its time is the build: about 4 CPU-minutes (-O0, no debug info; half of it the torch
# backend against libtorch's headers).
#   test_deb.sh SRCDIR
set -uo pipefail
src=$(cd "$1" && pwd) || exit 1
fail() { echo "FAIL: $*"; exit 1; }
for t in dpkg-buildpackage dh dpkg-deb apt-get git python3; do
  command -v "$t" >/dev/null || fail "$t is missing (scripts/setup installs dpkg-dev, debhelper and the rest)"
done
tmp=$(mktemp -d /tmp/inagg-deb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Package names of a list file part: no comments, no blank lines, sorted.
names() { grep -v '^\s*#' | grep -v '^\s*$' | sort -u; }
# The names in a Depends-style field ("a (>= 1), b | c, ${x}") one per line, alternatives included.
field_names() { tr ',|' '\n\n' | sed 's/([^)]*)//g; s/\[[^]]*\]//g; s/<[^>]*>//g; s/^\s*//; s/\s*$//' | grep -v '^$' | sort -u; }

# 1. What debian/ says against what the tree says.
# (build-essential is left out of Build-Depends: it is always there when a package builds.)
build_part=$(sed '/^# test and tooling/,$d' "$src/scripts/packages.txt" | names | grep -vx build-essential)
runtime_part=$(sed -n '/^# runtime/,$p' "$src/scripts/packages.txt" | names)
[ -n "$runtime_part" ] || fail "scripts/packages.txt has no '# runtime' part"
build_depends=$(grep -v '^#' "$src/debian/control" |
  awk '/^Build-Depends:/ {on = 1; sub(/^Build-Depends:/, ""); print; next} on && /^[ \t]/ {print; next} {on = 0}' |
  field_names | grep -v '^debhelper-compat$')
if [ "$build_depends" != "$build_part" ]; then
  echo "debian/control Build-Depends | scripts/packages.txt build part:"
  diff <(echo "$build_depends") <(echo "$build_part")
  fail "debian/control's Build-Depends differ from scripts/packages.txt above 'test and tooling' (keep them the same)"
fi
version=$(cd "$src" && meson introspect --projectinfo meson.build | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])') ||
  fail "meson introspect could not read the project version"
deb_version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version) || fail "cannot read debian/changelog"
[ "$deb_version" = "$version" ] || fail "debian/changelog is at $deb_version but meson.build at $version: add a changelog entry"
echo "ok: Build-Depends match packages.txt ($(echo "$build_part" | wc -l) packages); version $version"

# 2. Build from a copy of the tree's files (tracked and new, not ignored: no build directories).
mkdir -p "$tmp/inagg"
(cd "$src" && git ls-files -co --exclude-standard -z) | (cd "$src" && xargs -0 cp --parents -t "$tmp/inagg" 2>/dev/null)
[ -f "$tmp/inagg/debian/rules" ] || fail "copying the tree failed (is $src a git checkout?)"
start=$SECONDS
if ! (cd "$tmp/inagg" &&
  DEB_BUILD_OPTIONS="nocheck noddebs noopt parallel=$(nproc)" DEB_BUILD_PROFILES=nocheck DEB_CFLAGS_STRIP=-g DEB_CXXFLAGS_STRIP=-g \
    dpkg-buildpackage -us -uc >"$tmp/build.log" 2>&1); then
  tail -n 40 "$tmp/build.log"
  fail "dpkg-buildpackage failed (the log's end is above)"
fi
deb=$tmp/inagg_${version}_$(dpkg --print-architecture).deb
pydeb=$tmp/python3-inagg_${version}_$(dpkg --print-architecture).deb
for d in "$deb" "$pydeb"; do
  [ -f "$d" ] || fail "dpkg-buildpackage made no $(basename "$d"): $(ls "$tmp")"
done
echo "ok: built $(basename "$deb") and $(basename "$pydeb") in $((SECONDS - start)) s"

# 3. What it holds.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for f in /usr/bin/inagg /usr/bin/inagg-ctl /usr/bin/inagg-worker /usr/bin/inagg-xdp /usr/bin/inagg-decode \
  /etc/inagg/inagg.conf /etc/inagg/inagg.env /usr/share/inagg/examples/jobs/example-fp32-4workers.job \
  /usr/share/inagg/examples/xdp/head-4workers.job /usr/share/inagg/examples/grafana/inagg-dashboard.json \
  /usr/share/inagg/examples/prometheus/inagg-rules.yml \
  /usr/share/man/man8/inagg.8.gz /usr/share/man/man1/inagg-ctl.1.gz /usr/share/man/man1/inagg-worker.1.gz \
  /usr/share/man/man1/inagg-xdp.1.gz /usr/share/man/man1/inagg-decode.1.gz \
  /lib/systemd/system/inagg@.service /usr/libexec/inagg/inagg-hugepages /usr/lib/sysusers.d/inagg.conf /usr/lib/udev/rules.d/60-inagg-vfio.rules \
  /usr/share/doc/inagg/README.md /usr/share/doc/inagg/docs/protocol.md /usr/share/doc/inagg/docs/architecture.md \
  /usr/share/doc/inagg/docs/deploy.md /usr/share/doc/inagg/copyright; do
  grep -qx "$f" <<<"$contents" || fail "the package lacks $f"
done
dpkg-deb -e "$deb" "$tmp/control"
for f in /etc/inagg/inagg.conf /etc/inagg/inagg.env; do
  grep -qx "$f" "$tmp/control/conffiles" || fail "$f is not a conffile (an upgrade would overwrite the operator's edits)"
done
[ "$(grep -c . "$tmp/control/conffiles")" = "$(grep -c '^/etc/inagg/[^/]\+$' <<<"$contents")" ] ||
  fail "conffiles are more than the configs in /etc/inagg: $(cat "$tmp/control/conffiles")"
man=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/man/man1/inagg-ctl.1.gz | gzip -d)
grep -q '^\.SH NAME' <<<"$man" && grep -q 'remove job ID and free its slots' <<<"$man" ||
  fail "inagg-ctl's manual page does not show its --help: $(head -c 400 <<<"$man")"
grep -q "systemd-sysusers.*inagg.conf" "$tmp/control/postinst" 2>/dev/null ||
  fail "the postinst does not create the user inagg (systemd-sysusers inagg.conf): $(cat "$tmp/control/postinst" 2>&1)"
echo "ok: binaries, manual pages, configs (the only conffiles), examples, unit, helper, sysusers file and documents in place"
pycontents=$(dpkg-deb -c "$pydeb" | awk '{print $6}' | sed 's|^\./|/|')
pydir=/usr/lib/python3/dist-packages/inagg
for f in "$pydir/__init__.py" "$pydir/torch.py" "$pydir/torchrun.py" /usr/share/doc/python3-inagg/copyright \
  /usr/share/doc/python3-inagg/examples/train_digits.py; do
  grep -qx "$f" <<<"$pycontents" || fail "python3-inagg lacks $f"
done
for e in _inagg _torch; do
  grep -qx "$pydir/$e\.cpython-[0-9]*-[a-z0-9_]*-linux-gnu\.so" <<<"$pycontents" || fail "python3-inagg lacks the extension $e: $(grep "$pydir" <<<"$pycontents" | tr '\n' ' ')"
done
stray=$(comm -12 <(sort <<<"$contents" | grep -v '/$') <(sort <<<"$pycontents" | grep -v '/$'))
[ -z "$stray" ] || fail "files in both packages: $stray"
grep -q "^$pydir" <<<"$contents" && fail "inagg holds Python files: $(grep "^$pydir" <<<"$contents" | head -n 3)"
echo "ok: python3-inagg holds the module, its two extensions and nothing of inagg's"

# Debian's own checks on the binary packages and the source package: no error, no warning. (Its
# info and pedantic tags are shown; this build is -O0, so lintian notes the missing _FORTIFY_SOURCE
# calls.)
command -v lintian >/dev/null || fail "lintian is missing (scripts/setup installs it)"
lint=$(lintian --fail-on error,warning --display-info --pedantic "$tmp"/inagg_"${version}"_*.changes 2>&1); rc=$?
[ $rc = 0 ] || fail "lintian: $lint"
echo "ok: lintian passes on $(cd "$tmp" && ls inagg_"${version}".dsc "$(basename "$deb")" "$(basename "$pydeb")" | tr '\n' ' ')(info and pedantic tags:$(grep '^[IP]:' <<<"$lint" | cut -d' ' -f2-3 | sort | uniq -c | tr -s ' \n' ' '))"

# 4. Dependencies.
depends=$(dpkg-deb -f "$deb" Depends | field_names)
shlibs=$(sed -n 's/^shlibs:Depends=//p' "$tmp/inagg/debian/inagg.substvars" | field_names)
[ -n "$shlibs" ] || fail "no shlibs:Depends in debian/inagg.substvars: dh_shlibdeps found no libraries?"
missing=$(comm -23 <(echo "$shlibs") <(echo "$runtime_part"))
[ -z "$missing" ] || fail "the binaries load libraries of packages that scripts/packages.txt's runtime part does not name: $(echo "$missing" | tr '\n' ' ')(scripts/setup --runtime would leave them out)"
missing=$(comm -23 <(echo "$runtime_part") <(echo "$depends"))
[ -z "$missing" ] || fail "the package does not depend on runtime packages $(echo "$missing" | tr '\n' ' ')"
if [ "$(apt-cache policy librte-eal23 2>/dev/null | awk '/Candidate:/ {print $2}')" = "(none)" ] ||
  [ -z "$(apt-cache policy librte-eal23 2>/dev/null)" ]; then
  [ "$(id -u)" -eq 0 ] || fail "apt has no package lists (run apt-get update as root), so dependencies cannot be resolved"
  apt-get update -qq || fail "apt-get update failed"
fi
mkdir -p "$tmp/apt/cache/archives/partial"
: >"$tmp/apt/status"
if ! apt-get -s -q --no-install-recommends -o Dir::State::status="$tmp/apt/status" -o Debug::NoLocking=1 \
  -o Dir::Cache="$tmp/apt/cache" install "$deb" "$pydeb" >"$tmp/apt.log" 2>&1; then
  tail -n 20 "$tmp/apt.log"
  fail "apt cannot install the package into an empty root: its dependencies do not resolve (above)"
fi
for p in inagg python3-inagg python3-torch libtorch1.13 librte-eal23 librte-mempool-ring23 librte-net-mlx5-23; do
  grep -q "^Inst $p " "$tmp/apt.log" || fail "apt's plan for an empty root does not install $p"
done
echo "ok: $(echo "$depends" | wc -l) dependencies cover the libraries; apt resolves $(grep -c '^Inst' "$tmp/apt.log") packages for an empty root"

# 5. It runs, from an unpacked root (with this host's libraries).
root=$tmp/root
dpkg -x "$deb" "$root" || fail "dpkg -x failed"
for tool in inagg inagg-ctl inagg-worker inagg-xdp inagg-decode; do
  out=$("$root/usr/bin/$tool" --version 2>&1)
  # The copy is no git checkout: vcs_tag falls back to the project version.
  [ "$out" = "$tool $version" ] || fail "$tool --version says '$out'; want '$tool $version'"
done
echo "ok: every tool says $version"

# The user the unit runs as, as systemd-sysusers creates it from the package's file in an empty root.
mkdir -p "$tmp/sysroot/etc"
systemd-sysusers --root="$tmp/sysroot" "$root/usr/lib/sysusers.d/inagg.conf" >"$tmp/sysusers.log" 2>&1 ||
  fail "systemd-sysusers on the package's inagg.conf: $(cat "$tmp/sysusers.log")"
user=$(grep '^inagg:' "$tmp/sysroot/etc/passwd") || fail "systemd-sysusers made no user inagg: $(cat "$tmp/sysroot/etc/passwd")"
IFS=: read -r _ _ u_id _ _ u_home u_shell <<<"$user"
[ "$u_id" -gt 0 ] && [ "$u_id" -lt 1000 ] && [ "$u_home" = /var/lib/inagg ] && [ "$u_shell" = /usr/sbin/nologin ] ||
  fail "user inagg is '$user', want a system uid, home /var/lib/inagg, no login shell"
grep -q '^User=inagg$' "$root/lib/systemd/system/inagg@.service" || fail "the unit does not run as user inagg"
echo "ok: systemd-sysusers makes the unit's user: $user"

# The Python module from the unpacked root, not from a build tree: Debian's python3 with the
# root's dist-packages first on its path.
dpkg -x "$pydeb" "$root" || fail "dpkg -x $(basename "$pydeb") failed"
out=$(cd "$tmp" && PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 -c '
import sys
import inagg, inagg.torch
import torch.distributed as dist
assert inagg.__file__.startswith(sys.argv[1]), inagg.__file__
assert inagg.dtype_size("bf16") == 2 and "fp32" in inagg.DTYPES, inagg.DTYPES
assert "INAGG" in dist.Backend._plugins and dist.Backend("inagg") == "inagg", "no backend inagg in torch.distributed"
print("imported", inagg.__file__)' "$root" 2>&1) || fail "python3-inagg does not import from the unpacked root: $out"
echo "ok: python3 $out; backend \"inagg\" registered"

unit=$root/lib/systemd/system/inagg@.service
eal_args=$(. "$root/etc/inagg/inagg.env" && echo "${INAGG_EAL_ARGS:-}")
hugepages=$(. "$root/etc/inagg/inagg.env" && echo "${INAGG_HUGEPAGES:-}")
[ -n "$eal_args" ] || fail "inagg.env sets no INAGG_EAL_ARGS"
grep -q '^EnvironmentFile=/etc/inagg/%i.env$' "$unit" || fail "the unit does not read /etc/inagg/%i.env"
# A unit's command line as systemd would run it for instance `inagg`, with absolute paths moved
# into the unpacked root: $VAR splits into words, ${VAR} is one word.
command_of() {
  local line word
  line=$(sed -n "s/^$1=//p" "$unit" | grep -F -e "$2" | head -n 1)
  [ -n "$line" ] || fail "the unit has no $1 line with '$2'"
  line=${line//%i/inagg}
  # systemd's prefixes before the executable ('+' full privileges, '-' failure ignored, ...).
  while [[ $line =~ ^[-+@:!] ]]; do line=${line:1}; done
  line=${line//\$\{INAGG_HUGEPAGES\}/$hugepages}
  line=${line//\$INAGG_EAL_ARGS/$eal_args}
  cmd=()
  for word in $line; do
    case "$word" in /usr/* | /etc/* | /lib/*) word=$root$word ;; esac
    cmd+=("$word")
  done
}
command_of ExecStartPre "--check-config"
out=$("${cmd[@]}" 2>&1) || fail "the unit's config check fails on the shipped config: ${cmd[*]}: $out"
grep -q "^config ok: mtu 9000" <<<"$out" || fail "the unit's config check printed '$out'"
command_of ExecStart "--file-prefix"
out=$("${cmd[@]}" --check-config 2>&1) || fail "the service's command line fails in config-check mode: ${cmd[*]} --check-config: $out"
grep -q "^config ok" <<<"$out" || fail "the service's command line in config-check mode printed '$out'"
echo "ok: the service's command line checks the shipped config: $(head -n 1 <<<"$out")"
sed 's/^mtu = .*/mtu = jumbo/' "$root/etc/inagg/inagg.conf" >"$root/etc/inagg/broken.conf"
command_of ExecStartPre "--check-config"
cmd=("${cmd[@]/inagg.conf/broken.conf}")
if out=$("${cmd[@]}" 2>&1); then fail "the pre-start check passed a config with 'mtu = jumbo': $out"; fi
grep -q "mtu" <<<"$out" || fail "the pre-start check's refusal does not name the bad option: $out"
echo "ok: a broken config stops the unit before EAL: $out"

# The hugepage helper, on a fake sysfs with the env file's reservation.
sys=$tmp/sys
mkdir -p "$sys/devices/system/node/node0/hugepages/hugepages-2048kB" "$sys/kernel/mm/hugepages/hugepages-2048kB"
node0=$sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
echo 0 >"$node0"
echo 0 >"$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
echo "hugetlbfs /dev/hugepages hugetlbfs rw 0 0" >"$tmp/mounts"
command_of ExecStartPre "inagg-hugepages"
helper=("${cmd[@]}")
[ "${#helper[@]}" -eq 2 ] && [ "${helper[1]}" = "0:4G" ] || fail "expected the unit to run the helper with 0:4G from inagg.env, got: ${helper[*]}"
INAGG_SYS=$sys INAGG_MOUNTS=$tmp/mounts "${helper[@]}" >"$tmp/hp.log" 2>&1 || fail "hugepage helper: $(cat "$tmp/hp.log")"
[ "$(cat "$node0")" = 2048 ] || fail "the helper reserved $(cat "$node0") pages on node 0 for 4G, want 2048"
echo 4096 >"$node0"
INAGG_SYS=$sys INAGG_MOUNTS=$tmp/mounts "${helper[@]}" >"$tmp/hp.log" 2>&1 || fail "hugepage helper: $(cat "$tmp/hp.log")"
[ "$(cat "$node0")" = 4096 ] || fail "the helper lowered a reservation of 4096 pages to $(cat "$node0")"
INAGG_SYS=$sys INAGG_MOUNTS=$tmp/mounts "${helper[0]}" 3000M >"$tmp/hp.log" 2>&1 || fail "hugepage helper 3000M: $(cat "$tmp/hp.log")"
[ "$(cat "$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")" = 1500 ] || fail "3000M should be 1500 pages of 2 MiB"
for bad in 4X 1:4G; do
  if INAGG_SYS=$sys INAGG_MOUNTS=$tmp/mounts "${helper[0]}" "$bad" >"$tmp/hp.log" 2>&1; then
    fail "the helper accepted '$bad'"
  fi
  grep -q "inagg-hugepages: " "$tmp/hp.log" || fail "the helper's refusal of '$bad' says nothing: $(cat "$tmp/hp.log")"
done
echo "ok: the hugepage helper raises, never lowers, and refuses a bad size or a missing node"
echo "ok: package $(basename "$deb") builds, resolves, and its service command line runs"
