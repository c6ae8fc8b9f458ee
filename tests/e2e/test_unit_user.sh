#!/usr/bin/env bash
# inagg as inagg@.service runs it: a user other than root holding exactly the unit's ambient
# capabilities (which must equal its bounding set) and nothing else, with EAL's runtime files
# under the XDG_RUNTIME_DIR it gives. Here the user is an unused uid (no account needed), the
# ports the rack's net_af_packet. inagg must start, own its control socket (0600), sum a 2-rank
# allreduce exactly and stop cleanly; with NET_RAW taken away it must refuse to start and say why.
#   test_unit_user.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=2
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
command -v setpriv >/dev/null || fail "setpriv (util-linux) is missing"
uid=64321  # no account: setpriv switches to the number itself
unit=$src/systemd/inagg@.service.in
ambient=$(sed -n 's/^AmbientCapabilities=//p' "$unit")
bounding=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
[ -n "$ambient" ] || fail "the unit gives no AmbientCapabilities"
[ "$(tr ' ' '\n' <<<"$ambient" | sort)" = "$(tr ' ' '\n' <<<"$bounding" | sort)" ] ||
  fail "AmbientCapabilities ($ambient) differ from CapabilityBoundingSet ($bounding)"
grep -q '^User=inagg$' "$unit" || fail "the unit does not run as user inagg"
grep -q '^Environment=XDG_RUNTIME_DIR=' "$unit" || fail "the unit gives EAL no XDG_RUNTIME_DIR"
# "CAP_NET_RAW CAP_IPC_LOCK" -> "+net_raw,+ipc_lock", as setpriv takes them.
caps_arg() { tr ' ' '\n' <<<"$1" | sed 's/^CAP_//' | tr '[:upper:]' '[:lower:]' | sed 's/^/+/' | paste -sd, -; }
caps=$(caps_arg "$ambient")
# The uid writes its socket and EAL's runtime files into the test's directory only.
chown "$uid" "$tmp" || fail "chown $tmp"
as_unit() {  # CAPS: sets unit_cmd to run a command as the uid with CAPS inheritable, ambient and
             # bounding, no new privileges (env and setpriv exec it: its PID is the command's)
  unit_cmd=(env "XDG_RUNTIME_DIR=$tmp" setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps="-all,$1"
    --ambient-caps="-all,$1" --bounding-set="-all,$1" --no-new-privs)
}

rack_cmd up --workers "$n" >"$tmp/rack.log" 2>&1 || fail "rack up: $(cat "$tmp/rack.log")"
# Without NET_RAW the af_packet ports cannot open: a refusal that says so, and no socket.
inagg_argv
fewer=$(caps_arg "$(tr ' ' '\n' <<<"$ambient" | grep -vx CAP_NET_RAW | paste -sd' ' -)")
as_unit "$fewer"
if timeout 60 "${unit_cmd[@]}" "$inagg" "${argv[@]}" >"$tmp/fewer.log" 2>&1; then
  fail "inagg started without CAP_NET_RAW: $(tail -n 3 "$tmp/fewer.log")"
fi
grep -q "^inagg: --vdev net_af_packet[0-9] did not become a port (.*CAP_NET_RAW" "$tmp/fewer.log" ||
  fail "inagg without CAP_NET_RAW did not say which port failed and why: $(tail -n 5 "$tmp/fewer.log")"
[ ! -e "$tmp/ctl.sock" ] || fail "inagg without CAP_NET_RAW left a control socket"
echo "ok: without CAP_NET_RAW inagg refuses to start: $(grep "^inagg: --vdev" "$tmp/fewer.log")"
rm -rf "${tmp:?}/dpdk"

# With the unit's capabilities: it runs.
rm -f "$tmp/ctl.sock"
inagg_argv
as_unit "$caps"
"${unit_cmd[@]}" "$inagg" "${argv[@]}" >"$tmp/inagg.log" 2>&1 &
pid=$!
wait_alive "$pid" 30 "inagg's control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" ||
  fail "inagg as uid $uid with the unit's capabilities did not start"
status=/proc/$pid/status
[ "$(awk '/^Uid:/ {print $2 $3 $4 $5}' "$status")" = "$uid$uid$uid$uid" ] || fail "inagg runs as $(grep '^Uid:' "$status"), want uid $uid"
eff=$(awk '/^CapEff:/ {print $2}' "$status")
bnd=$(awk '/^CapBnd:/ {print $2}' "$status")
[ "$eff" = "$bnd" ] || fail "capabilities: effective $eff, bounding $bnd"
# The mask of the unit's capabilities, by their numbers in the kernel's header.
# (In the shell's 64-bit arithmetic: awk's printf cannot print bits past 31, CAP_BPF's 39.)
want=$(m=0
  for c in $ambient; do
    b=$(awk -v c="$c" '$1 == "#define" && $2 == c {print $3}' /usr/include/linux/capability.h)
    [ -n "$b" ] || exit 0
    m=$((m | 1 << b))
  done
  printf '%016x' "$m")
[ -n "$want" ] || fail "no capability numbers for $ambient in /usr/include/linux/capability.h"
[ "$eff" = "$want" ] || fail "effective capabilities $eff, want $want ($ambient)"
[ "$(stat -c '%u %a' "$tmp/ctl.sock")" = "$uid 600" ] || fail "control socket: $(stat -c '%U %a' "$tmp/ctl.sock"), want uid $uid, 600"
[ -d "$tmp/dpdk/$prefix" ] || fail "EAL's runtime files are not under XDG_RUNTIME_DIR ($tmp/dpdk/$prefix): $(ls "$tmp")"
echo "ok: inagg runs as uid $uid with capabilities $eff (the unit's), its socket $(stat -c '%u %a' "$tmp/ctl.sock")"
run_workers 1 -b 1M -e 1M -n 1 -w 0 -c 1 --timeout 60 --register "$tmp/ctl.sock"
out=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats: $out"
released=$(awk '$1 == "slots_released" {print $2}' <<<"$out")
[ "${released:-0}" -gt 0 ] || fail "the job released no slot: $out"
stop_inagg
grep -q "^job 1: active" "$tmp/inagg.log" || fail "no final job line: $(tail -n 5 "$tmp/inagg.log")"
echo "ok: as uid $uid with the unit's capabilities inagg summed a 2-rank 1 MiB allreduce exactly ($released slots) and stopped"
