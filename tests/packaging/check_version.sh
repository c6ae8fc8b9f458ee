#!/usr/bin/env bash
# Every tool answers --version with "NAME VERSION", VERSION being meson's project version, and, in a
# git checkout, " (git DESCRIBE)" where DESCRIBE starts with what `git describe` says of the tree
# now (the build ran vcs_tag moments ago; a file edited since may add "-dirty").
#   check_version.sh SRCDIR VERSION TOOL...
set -uo pipefail
src=$1 version=$2
shift 2
describe=$(git -C "$src" describe --tags --always 2>/dev/null) || describe=""
for tool in "$@"; do
  name=$(basename "$tool")
  out=$("$tool" --version 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: $name --version exited $rc: $out"; exit 1; }
  if [ -n "$describe" ]; then
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
