#!/usr/bin/env bash
# Every shipped config starts as documented. For each conf/NAME.conf: the command line its comment
# gives ("#   inagg ...", continuation lines included) is run as written, with the config path
# pointed at the repository's copy and --check-config added; and where conf/NAME.env exists, the
# systemd unit's command (inagg $INAGG_EAL_ARGS -- --config NAME.conf, systemd/inagg@.service.in)
# is run the same way. --check-config checks what start-up checks without EAL: the options, the
# job files, and the mbuf budget against the lcores the EAL options give. A config whose
# documented command line would be refused at start-up fails here.
#   test_shipped_configs.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
fail() { echo "FAIL: $*"; exit 1; }
check() {  # check CONF WHAT WORDS...: runs the words (starting with inagg) with --check-config
  local conf=$1 what=$2
  shift 2
  [ "$1" = inagg ] || fail "$conf: $what does not start with inagg: $*"
  shift
  local args=() w
  for w in "$@"; do
    case "$w" in
      */"$(basename "$conf")") args+=("$conf") ;;  # /etc/inagg/NAME.conf, conf/NAME.conf -> this copy
      --check-config) ;;
      *) args+=("$w") ;;
    esac
  done
  printf '%s\n' "${args[@]}" | grep -qx -- "$conf" || fail "$conf: $what does not pass this config: $*"
  out=$("$inagg" "${args[@]}" --check-config 2>&1); rc=$?
  [ $rc -eq 0 ] || fail "$conf: $what (inagg $*) is refused (exit $rc): $out"
  grep -q "^config ok" <<<"$out" || fail "$conf: no 'config ok' line: $out"
  echo "$(basename "$conf"), $what: ${out%%$'\n'*}"
}
n=0
for conf in "$src"/conf/*.conf; do
  # The first "#   inagg -..." comment line (a command, not prose) and its continuations.
  cmd=$(awk '/^#[[:space:]]+inagg +-/ {take = 1}
             take {line = $0; sub(/^#[[:space:]]*/, "", line); cont = sub(/\\[[:space:]]*$/, "", line); printf "%s ", line; if (!cont) exit}' "$conf")
  [ -n "$cmd" ] || fail "$conf: no documented command line (a comment '#   inagg ...')"
  read -r -a words <<<"$cmd"
  check "$conf" "its documented command line" "${words[@]}"
  env="${conf%.conf}.env"
  if [ -f "$env" ]; then
    eal=$(sed -n 's/^INAGG_EAL_ARGS="\(.*\)"$/\1/p' "$env")
    [ -n "$eal" ] || fail "$env: no INAGG_EAL_ARGS=\"...\" line"
    read -r -a eal_words <<<"$eal"
    check "$conf" "the systemd unit's command with $(basename "$env")" inagg "${eal_words[@]}" -- --config "$conf"
  fi
  n=$((n + 1))
done
[ $n -gt 0 ] || fail "no configs under $src/conf"
echo "$n shipped configs start as documented"
