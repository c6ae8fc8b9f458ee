#!/usr/bin/env bash
# The Debian package's build profiles, checked by dpkg's own tools against a made-up system that
# has every Build-Depends but a named set (an empty dpkg database, one status entry a package):
#   (default)                    needs GoogleTest, Google Benchmark and torch;
#   nocheck                      needs no GoogleTest or Benchmark, and debian/rules configures no
#                                tests or benchmarks;
#   pkg.inagg.notorch            needs no torch, pybind11, python3-dev or dh-python, builds no
#                                python3-inagg, and debian/rules configures no Python module;
#   nocheck pkg.inagg.notorch    needs none of them.
# dpkg-checkbuilddeps says which are missing; dh_listpackages which packages a profile builds;
# each profile's meson options (from debian/rules) configure the tree.
#   check_build_profiles.sh SRCDIR
set -uo pipefail
src=$(cd "$1" && pwd) || exit 1
fail() { echo "FAIL: $*"; exit 1; }
for t in dpkg-checkbuilddeps dh_listpackages meson make; do
  command -v "$t" >/dev/null || fail "$t is missing (scripts/setup installs dpkg-dev, debhelper and meson)"
done
tmp=$(mktemp -d /tmp/inagg-profiles.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Every name in Build-Depends (profiles and versions dropped), plus build-essential, which
# dpkg-checkbuilddeps always asks for.
all=$(sed -n '/^Build-Depends:/,/^[A-Z#]/p' "$src/debian/control" | grep -v '^#' | sed 's/^Build-Depends://' |
  tr ',' '\n' | sed 's/<[^>]*>//g; s/([^)]*)//g; s/\[[^]]*\]//g; s/^\s*//; s/\s*$//' | grep -v '^$' | grep -v '^[A-Z]')
[ -n "$all" ] || fail "no Build-Depends in debian/control"
arch=$(dpkg --print-architecture)
# status WITHOUT...: a dpkg database with every build dependency installed but those named.
status() {
  local admin=$tmp/admin-$RANDOM p
  mkdir -p "$admin/updates" "$admin/info"
  : >"$admin/available"
  for p in $all build-essential debhelper; do
    [ "$p" = debhelper-compat ] && continue
    if printf '%s\n' "$@" | grep -qx "$p"; then continue; fi
    printf 'Package: %s\nStatus: install ok installed\nVersion: 99\nArchitecture: %s\nMaintainer: x <x@inagg.dev>\nDescription: x\n' "$p" "$arch"
    [ "$p" = debhelper ] && printf 'Provides: debhelper-compat (= 13)\n'
    echo
  done >"$admin/status"
  echo "$admin"
}
# checkbuilddeps PROFILES WANT_OK MISSING...: dpkg-checkbuilddeps under PROFILES on a system
# lacking MISSING; WANT_OK yes: it must pass; no: it must name exactly MISSING.
checkbuilddeps() {
  local profiles=$1 want=$2 admin out rc
  shift 2
  admin=$(status "$@")
  out=$(cd "$src" && dpkg-checkbuilddeps --admindir="$admin" ${profiles:+-P "${profiles// /,}"} 2>&1); rc=$?
  if [ "$want" = yes ]; then
    [ $rc = 0 ] || fail "profiles '${profiles:-none}' without $*: dpkg-checkbuilddeps: $out"
  else
    [ $rc != 0 ] || fail "profiles '${profiles:-none}' without $*: dpkg-checkbuilddeps passed, but they are needed"
    for p in "$@"; do grep -qw -- "$p" <<<"$out" || fail "profiles '${profiles:-none}': dpkg-checkbuilddeps does not name $p: $out"; done
  fi
}
check_set=(libgtest-dev libbenchmark-dev)
torch_set=(libtorch-dev python3-torch python3-pybind11 python3-dev dh-python)
checkbuilddeps "" yes
checkbuilddeps "" no "${check_set[@]}"
checkbuilddeps "" no "${torch_set[@]}"
checkbuilddeps nocheck yes "${check_set[@]}"
checkbuilddeps nocheck no "${torch_set[@]}"
checkbuilddeps pkg.inagg.notorch yes "${torch_set[@]}"
checkbuilddeps pkg.inagg.notorch no "${check_set[@]}"
checkbuilddeps "nocheck pkg.inagg.notorch" yes "${check_set[@]}" "${torch_set[@]}"
checkbuilddeps "nocheck pkg.inagg.notorch" no meson
echo "ok: dpkg-checkbuilddeps: nocheck needs no ${check_set[*]}; pkg.inagg.notorch no ${torch_set[*]}"

# What each profile builds, and the meson options debian/rules gives it.
option() { (cd "$src" && DEB_BUILD_PROFILES=$1 make -s -f debian/rules --eval "print-%: ; @echo \$(\$*)" "print-$2"); }
for profiles in "" nocheck pkg.inagg.notorch "nocheck pkg.inagg.notorch"; do
  pkgs=$(cd "$src" && DEB_BUILD_PROFILES=$profiles dh_listpackages 2>&1 | sort | tr '\n' ' ')
  checks=$(option "$profiles" CHECK_OPTIONS)
  python=$(option "$profiles" PYTHON_OPTIONS)
  case " $profiles " in
    *" pkg.inagg.notorch "*) want_pkgs="inagg " want_python="-Dpython=disabled -Dtorch=disabled" ;;
    *) want_pkgs="inagg python3-inagg " want_python="-Dpython=enabled -Dtorch=enabled -Dpython.platlibdir=/usr/lib/python3/dist-packages" ;;
  esac
  case " $profiles " in
    *" nocheck "*) want_checks="-Dtests=disabled -Dbenchmarks=disabled" ;;
    *) want_checks="-Dtests=enabled -Dbenchmarks=enabled" ;;
  esac
  [ "$pkgs" = "$want_pkgs" ] || fail "profiles '${profiles:-none}' build '$pkgs', want '$want_pkgs'"
  [ "$checks" = "$want_checks" ] || fail "profiles '${profiles:-none}': debian/rules gives '$checks', want '$want_checks'"
  [ "$python" = "$want_python" ] || fail "profiles '${profiles:-none}': debian/rules gives '$python', want '$want_python'"
done
echo "ok: dh_listpackages and debian/rules' meson options for each profile"
# The two profiles together configure the tree: no tests, no Python module.
opts=$(option "nocheck pkg.inagg.notorch" CHECK_OPTIONS) || fail "debian/rules"
opts="$opts $(option "nocheck pkg.inagg.notorch" PYTHON_OPTIONS)"
# shellcheck disable=SC2086  # the options are words
out=$(meson setup "$tmp/build" "$src" $opts -Db_ndebug=true 2>&1) || fail "meson setup with $opts: $(tail -n 5 <<<"$out")"
grep -Eq "tests +: False" <<<"$out" && grep -Eq "Python module +: no" <<<"$out" && grep -Eq "torch backend +: no" <<<"$out" ||
  fail "meson setup with $opts did not leave out the tests and the module: $(grep -A8 '^  inagg$' <<<"$out")"
echo "ok: meson configures the tree with nocheck pkg.inagg.notorch's options ($opts)"
