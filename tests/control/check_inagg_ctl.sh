#!/usr/bin/env bash
# inagg-ctl: usage errors exit 2 with a message; `add` checks the job file locally (file:line); a
# missing socket says "is inagg running?"; against a scripted server, ok replies exit 0 and
# "error:" replies exit 1, and the request on the wire is what protocol.hpp says.
set -uo pipefail
bin=$1 src=$2
tmp=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
example=$src/conf/jobs/example-fp32-4workers.job

# expect RC NEEDLE ARGS...: runs inagg-ctl, checks the exit status and that stdout+stderr has NEEDLE.
expect() {
  local want=$1 needle=$2; shift 2
  "$bin" "$@" >"$tmp/out" 2>&1; local rc=$?
  [ "$rc" -eq "$want" ] || fail "inagg-ctl $*: exit $rc, want $want: $(cat "$tmp/out")"
  grep -qF -- "$needle" "$tmp/out" || fail "inagg-ctl $*: no '$needle' in: $(cat "$tmp/out")"
}

expect 0 "add JOBFILE" --help
for cmd in "remove ID" "list " "stats [ID]" "Exit status"; do grep -qF -- "$cmd" "$tmp/out" || fail "--help lacks '$cmd'"; done
expect 2 "no command; expected add JOBFILE, remove ID, list, stats [ID], top or split JOBFILE"
expect 2 "unknown command 'frobnicate'; valid: add, remove, list, stats, top, split" frobnicate
expect 2 "unrecognised option" --bogus list
expect 2 "add takes one job file" add
expect 2 "remove takes one job id" remove
expect 2 "job id 'seven' is not a number" remove seven
expect 2 "list takes no arguments" list 3
expect 2 "stats takes at most one job id" stats 1 2
expect 2 "--timeout must be a positive number" --timeout 0 list

printf 'id = 1\ndtype = fp32\nconn = 0, 10.0.0.1, 0xzz, 10.0.0.2, 2, 0\n' >"$tmp/bad.job"
expect 2 "$tmp/bad.job:3: conn: QPN '0xzz' is not a number (hex 0x... or decimal)" --socket "$tmp/none.sock" add "$tmp/bad.job"
expect 2 "cannot open job file '$tmp/missing.job'" --socket "$tmp/none.sock" add "$tmp/missing.job"
expect 2 "cannot connect to $tmp/none.sock: No such file or directory (is inagg running?)" --socket "$tmp/none.sock" list
# A good file passes the local check and only then fails to connect.
expect 2 "is inagg running?" --socket "$tmp/none.sock" add "$example"

# split: a 4-worker ring in two racks gives two leaves and a spine, each a job file the local
# check accepts; racks that interleave in the ring are refused.
expect 2 "split takes one job file and --racks" split "$example"
expect 2 "--racks: 'x' is not a rack number" split "$example" --racks 0,x,1,1
expect 2 "whose other ranks are not next to it in the ring" split "$example" --racks 0,1,0,1 --out-dir "$tmp"
expect 0 "spine.job: spine, 2 connections" split "$example" --racks 0,0,1,1 --out-dir "$tmp"
grep -q "leaf-1.job: leaf, 3 connections" "$tmp/out" || fail "split: $(cat "$tmp/out")"
grep -q "^tier = leaf$" "$tmp/leaf-0.job" || fail "leaf-0.job has no 'tier = leaf': $(cat "$tmp/leaf-0.job")"
grep -q "^tier = spine$" "$tmp/spine.job" || fail "spine.job has no 'tier = spine'"
# The spine's conn lines are the racks' uplinks: ranks 1 and 3 of the ring.
[ "$(grep -c '^conn' "$tmp/spine.job")" = 2 ] || fail "spine.job: $(cat "$tmp/spine.job")"
# A reduce-scatter or all-gather runs on one appliance.
{ cat "$example"; echo "collective = reduce_scatter"; } >"$tmp/rs.job"
expect 2 "a reduce_scatter runs on one appliance: only an allreduce can be split" split "$tmp/rs.job" --racks 0,0,1,1 --out-dir "$tmp"
expect 2 "is inagg running?" --socket "$tmp/none.sock" add "$tmp/leaf-0.job"

# A scripted server speaking protocol 2's frames (socket.hpp): records each request, answers
# "error: ..." to remove, "ok ..." otherwise.
cat >"$tmp/server.py" <<'PY'
import os, socket, sys
path, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path + ".tmp"); s.listen(4); os.rename(path + ".tmp", path)
with open(log, "wb") as f:
    for _ in range(n):
        c, _ = s.accept()
        c.sendall(b"inagg-control 2 " + b"0" * 32 + b"\n")
        data = b""
        while chunk := c.recv(65536):
            data += chunk
        header, _, body = data.partition(b"\n")
        assert header.split()[0] == b"request" and int(header.split()[1]) == len(body), header
        f.write(body + b"\0"); f.flush()
        verb = body.split(None, 1)[0] if body.split() else b""
        reply = b"error: no job 5 (list jobs to see which exist)\n" if verb == b"remove" else b"ok " + verb + b"\n"
        c.sendall(b"reply %d\n" % len(reply) + reply)
        c.close()
PY
command -v python3 >/dev/null || { echo "inagg-ctl CLI behaves (scripted-server part skipped: no python3)"; exit 0; }
python3 "$tmp/server.py" "$tmp/ctl.sock" "$tmp/log" 4 & server_pid=$!
for _ in $(seq 100); do [ -S "$tmp/ctl.sock" ] && break; sleep 0.05; done
[ -S "$tmp/ctl.sock" ] || fail "scripted server did not start"
expect 0 "ok add" --socket "$tmp/ctl.sock" add "$example"
expect 1 "error: no job 5" -s "$tmp/ctl.sock" remove 5
expect 0 "ok list" -s "$tmp/ctl.sock" list
expect 0 "ok stats" -s "$tmp/ctl.sock" stats 0x10
wait "$server_pid"; server_pid=
{ printf 'add\n'; cat "$example"; printf '\0remove 5\n\0list\n\0stats 16\n\0'; } >"$tmp/want"
cmp -s "$tmp/log" "$tmp/want" || fail "requests on the wire differ: $(tr '\0' '|' <"$tmp/log")"
echo "inagg-ctl CLI behaves"
