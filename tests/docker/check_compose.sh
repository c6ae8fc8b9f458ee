#!/usr/bin/env bash
# docker/compose.yaml as Compose reads it, without a Docker engine: `docker-compose config` with
# every variable docker/lab-rack sets must accept it without a warning, and the file follows the
# Compose Specification (no top-level `version:` key).
#   check_compose.sh SRCDIR
set -uo pipefail
src=$1
fail() { echo "FAIL: $*"; exit 1; }
command -v docker-compose >/dev/null || { echo "SKIP: no docker-compose"; exit 77; }
file=$src/docker/compose.yaml
grep -q '^version:' "$file" && fail "compose.yaml has a top-level version: key (the Compose Specification has none)"
# Every variable the file uses, as lab-rack sets them (their names from the file itself).
vars=$(grep -o '\${INAGG_[A-Z_]*' "$file" | sed 's/^\${//' | sort -u)
[ -n "$vars" ] || fail "no INAGG_ variables found in compose.yaml"
env_args=()
for v in $vars; do
  case "$v" in
    *_DIR) env_args+=("$v=/run/inaggc/check/${v,,}") ;;  # host paths for the volumes
    *) env_args+=("$v=x") ;;
  esac
done
out=$(env "${env_args[@]}" docker-compose -p inaggc-check -f "$file" config -q 2>&1)
rc=$?
[ "$rc" = 0 ] && [ -z "$out" ] || fail "docker-compose config (exit $rc): $out"
# Without the variables it still parses (the defaults in the file), warning only of the unset ones.
out=$(env -u INAGG_VDEVS docker-compose -p inaggc-check -f "$file" config -q 2>&1) || fail "docker-compose config without the variables: $out"
echo "ok: docker-compose config accepts compose.yaml ($(wc -w <<<"$vars") variables), no version: key"
