#!/usr/bin/env bash
# Every tool answers --version with "NAME VERSION" (the built binaries against the tree now; the
# line for each kind of describe is unit-tested in packaging_version_line):
#   - in a git checkout whose history has a release tag (vX.Y.Z): VERSION is what
#     `git describe --tags` says of the tree, its v dropped ("0.6.0", "0.6.0-3-g1a2b3c4-dirty");
#   - in a checkout without one: meson's project version and " (git COMMIT)";
#   - without a checkout: the project version alone.
# The build ran vcs_tag moments ago; a file edited since may add "-dirty".
#   check_version.sh SRCDIR VERSION TOOL...
set -uo pipefail
src=$1 version=$2
shift 2
describe=$(git -C "$src" describe --tags --always --match 'v[0-9]*.*' --match '[0-9]*.*' 2>/dev/null) || describe=""
for tool in "$@"; do
  name=$(basename "$tool")
  out=$("$tool" --version 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: $name --version exited $rc: $out"; exit 1; }
  if [[ $describe =~ ^v?[0-9]+\. ]]; then
    want="$name ${describe#v}"
    case "$out" in
      "$want" | "$want-dirty") ;;
      *) echo "FAIL: $name --version says '$out'; want '$want' (git describe of a tree with a release tag)"; exit 1 ;;
    esac
  elif [ -n "$describe" ]; then
    case "$out" in
      "$name $version (git $describe"*")") ;;
      *) echo "FAIL: $name --version says '$out'; want '$name $version (git $describe...)'"; exit 1 ;;
    esac
  else
    [ "$out" = "$name $version" ] || { echo "FAIL: $name --version says '$out'; want '$name $version' (no git checkout)"; exit 1; }
  fi
  echo "ok: $out"
done
# inagg also takes it among the EAL options, where users type it first.
app=""
for tool in "$@"; do [ "$(basename "$tool")" = inagg ] && app=$tool; done
if [ -n "$app" ]; then
  out=$("$app" -l 0 --version 2>&1) || { echo "FAIL: inagg -l 0 --version failed: $out"; exit 1; }
  [ "$out" = "$("$app" --version)" ] || { echo "FAIL: inagg -l 0 --version says '$out'"; exit 1; }
fi
echo "ok: --version on $# tools"
