#!/usr/bin/env bash
# Checks that every tracked C and C++ file (src, include, tests, bench, python) is formatted by the
# repository's .clang-format; prints the files and the first lines of the change that would fix them
# (`clang-format -i FILE` does). Also proves it can fail: a mis-formatted copy must be flagged.
#   check_format.sh SRCDIR
set -uo pipefail
src=$1
cd "$src" || exit 1
cf=$(command -v clang-format || command -v clang-format-14) ||
  { echo "SKIP: clang-format is not installed (apt-get install clang-format)"; exit 77; }
[ -f .clang-format ] || { echo "FAIL: no .clang-format in $src"; exit 1; }
mapfile -t files < <(git ls-files -co --exclude-standard '*.c' '*.h' '*.cpp' '*.hpp' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
[ "${#files[@]}" -gt 50 ] || { echo "FAIL: found only ${#files[@]} C/C++ files: the file list is wrong"; exit 1; }

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The check must be able to fail: a file with its indentation squashed is not formatted.
cp .clang-format "$tmp/" && printf 'int f(int a){\nif(a)return 1;\n  return   0;}\n' > "$tmp/bad.cpp"
if (cd "$tmp" && "$cf" --dry-run --Werror bad.cpp) >/dev/null 2>&1; then
  echo "FAIL: clang-format accepted a mis-formatted file; the check cannot fail"; exit 1
fi

bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -eq 0 ]; then
  echo "ok: ${#files[@]} C/C++ files formatted by .clang-format ($("$cf" --version | head -n 1))"
  exit 0
fi
echo "FAIL: ${#bad[@]} file(s) not formatted by .clang-format (fix with: clang-format -i FILE):"
for f in "${bad[@]}"; do
  echo "--- $f"
  "$cf" "$f" | diff "$f" - | head -n 12
done
exit 1
