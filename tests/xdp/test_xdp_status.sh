#!/usr/bin/env bash
# inagg-xdp status, as text and as JSON (--json, -j), against what iproute2 reports of the same
# interface (ip -json -details link: the attached program's id, name and mode): a veth pair in a
# namespace of this test's own with no program, XDP_PASS programs attached by `inagg-xdp peer`
# in generic and in native mode, then removed again. Also: --json on another command and status
# on a missing interface are refused with a clear error. Needs root (a namespace).
#   test_xdp_status.sh INAGG_XDP
set -uo pipefail
xdp=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: the test's namespace needs root"; exit 77; }
ns="ixst$$"
cleanup() { ip netns del "$ns" 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
ip netns add "$ns" || fail "ip netns add $ns"
ip -n "$ns" link add xa type veth peer name xb && ip -n "$ns" link set xa up && ip -n "$ns" link set xb up ||
  fail "a veth pair in $ns"
in_ns() { ip netns exec "$ns" "$@"; }

# compare IFACE: inagg-xdp's JSON (read by python's json module) against iproute2's, and the text
# form against the JSON.
compare() {
  local iface=$1 json text ipj
  json=$(in_ns "$xdp" status --iface "$iface" --json) || fail "status --iface $iface --json exited $?: $json"
  text=$(in_ns "$xdp" status --iface "$iface") || fail "status --iface $iface exited $?: $text"
  ipj=$(ip -n "$ns" -json -details link show dev "$iface") || fail "ip link show dev $iface"
  /usr/bin/python3 - "$iface" "$json" "$text" "$ipj" <<'PY' || fail "status --iface $iface: see above"
import json, sys
iface, out, text, ipj = sys.argv[1:5]
got = json.loads(out)
link = json.loads(ipj)[0]
# iproute2's XDP_ATTACHED_* numbers: 1 driver (native), 2 skb (generic), 3 hardware (offload).
modes = {1: "native", 2: "generic", 3: "offload"}
want = [{"mode": modes[a["mode"]], "id": a["prog"]["id"], "name": a["prog"]["name"]}
        for a in link.get("xdp", {}).get("attached", [])]
if "xdp" in link and not want:  # an older iproute2: one program, no "attached" list
    want = [{"mode": modes[link["xdp"]["mode"]], "id": link["xdp"]["prog"]["id"], "name": link["xdp"]["prog"]["name"]}]
assert got["ok"] is True and got["iface"] == iface and got["ifindex"] == link["ifindex"], (got, link["ifindex"])
assert [{k: p[k] for k in ("mode", "id", "name")} for p in got["programs"]] == want, (got["programs"], want)
assert all(isinstance(p["run_count"], int) and isinstance(p["run_time_ns"], int) for p in got["programs"]), got
line = ", ".join(f"{p['name']} (id {p['id']}, {p['mode']})" for p in got["programs"]) or "none"
assert text.startswith(f"{iface}: {line}"), (text, line)
print(f"ok: {iface}: {out}")
PY
}

compare xa
compare xb
in_ns "$xdp" peer --iface xa --mode generic >/dev/null || fail "peer --iface xa --mode generic"
in_ns "$xdp" peer --iface xb --mode native >/dev/null || fail "peer --iface xb --mode native"
compare xa
compare xb
out=$(in_ns "$xdp" status --iface xa -j) && grep -q '"mode": "generic"' <<<"$out" || fail "-j is not --json: $out"
in_ns "$xdp" peer --iface xa --off >/dev/null && in_ns "$xdp" peer --iface xb --off >/dev/null || fail "peer --off"
compare xa
compare xb

out=$(in_ns "$xdp" list --json 2>&1); rc=$?
[ $rc = 2 ] && grep -q "json is for status only" <<<"$out" || fail "list --json: exit $rc, $out"
out=$(in_ns "$xdp" status --iface nosuch0 --json 2>&1); rc=$?
[ $rc = 2 ] && grep -q "no interface 'nosuch0'" <<<"$out" || fail "status on a missing interface: exit $rc, $out"
echo "ok: inagg-xdp status --json agrees with iproute2 with no program, generic and native ones, and after removal"
