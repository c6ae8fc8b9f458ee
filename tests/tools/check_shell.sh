#!/usr/bin/env bash
# Runs shellcheck over every shell script in the repository (scripts/, docker/, bench/, tests/, .ci/,
# pktgen_profiles/, systemd/): warnings and errors fail, style notes do not. The list is every tracked file
# whose first line names a shell, plus the sourced libraries (no shebang, "# shellcheck shell=").
#   check_shell.sh SRCDIR
set -uo pipefail
src=$1
cd "$src" || exit 1
command -v shellcheck >/dev/null || { echo "SKIP: shellcheck is not installed (apt-get install shellcheck)"; exit 77; }
mapfile -t files < <(git ls-files -co --exclude-standard scripts docker bench tests .ci pktgen_profiles systemd |
  while read -r f; do
    [ -f "$f" ] || continue
    head -n 1 "$f" | grep -qE '^#!.*\b(ba)?sh\b|^# shellcheck shell=' && echo "$f"
  done)
[ "${#files[@]}" -gt 10 ] || { echo "FAIL: found only ${#files[@]} shell scripts (${files[*]}): the file list is wrong"; exit 1; }
if shellcheck -S warning "${files[@]}"; then
  echo "ok: shellcheck clean (warnings and errors) on ${#files[@]} scripts"
else
  echo "FAIL: shellcheck found the problems above"
  exit 1
fi
