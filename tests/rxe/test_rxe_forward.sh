#!/usr/bin/env bash
# The kernel's own RoCE through inagg: two Soft-RoCE VMs (scripts/rxe-lab), their taps as inagg's
# only ports, and rdma-core's programs between them.
#   0. control: with an ibv_rc_pingpong QP frozen (SIGSTOP) on both sides, 2 RC SENDs with bad
#      ICRCs and 2 with good ones (old PSNs: duplicates), built by scapy, go straight into vm1's
#      tap. rxe must count the good ones and refuse the bad ones: so the check below, "every
#      RoCE datagram the VM's UDP stack took was accepted by rxe", sees an ICRC error when there
#      is one (this kernel, 6.1, has no ICRC counter and no longer logs them).
#   1. ibv_rc_pingpong -c (SEND/RECV, every received buffer validated by the program).
#   2. ib_write_bw (RC RDMA WRITE, 64 KiB messages; QP timeout 2^20 x 4.096 us, so that TCG's
#      latency causes no spurious retransmissions and the count check below is exact).
#   Checks: both programs succeed on both sides; over phase 2 each VM's UDP InDatagrams grew exactly
#   as much as rxe's rcvd_pkts (rxe refused nothing: no bad ICRC); no retry_exceeded_err; inagg's
#   counters show the traffic: the port to each VM transmitted at least every RoCE datagram that
#   VM received in phases 1-2, and nothing bridges the taps besides inagg.
#   test_rxe_forward.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
here=$(cd "$(dirname "$0")" && pwd)


# shellcheck source=lab.sh
. "$src/tests/rxe/lab.sh" fwd 8

lab_up 2
up_s=$((SECONDS - started))
gid0=$(awk '$1 == "gid_index" {print $2}' /run/rxe-lab/vm0/share/ready)
gid1=$(awk '$1 == "gid_index" {print $2}' /run/rxe-lab/vm1/share/ready)
ip1=10.77.0.102

lab_start_appliance --idle-sleep-us 100
for t in rxe-t0 rxe-t1; do
  ip -o link show "$t" | grep -q ' master ' && fail "$t is enslaved to a bridge: traffic could bypass inagg"
done

# listening VM PORT: waits (deadline) for a TCP listener, as the servers below exchange QP data over TCP first.
listening() { "$lab" run "$1" --timeout 30 -- "until ss -ltn | grep -q ':$2 '; do sleep 0.1; done" || fail "nothing listens on port $2 in $1 within 30 s"; }

# --- 0. control: the count check sees a bad ICRC ---------------------------------------------
srv=$("$lab" run vm1 --bg --timeout 120 -- "exec ibv_rc_pingpong -d rxe0 -g $gid1 -n 100000000 -s 64")
listening vm1 18515
cli=$("$lab" run vm0 --bg --timeout 120 -- "exec ibv_rc_pingpong -d rxe0 -g $gid0 -n 100000000 -s 64 $ip1")
qp=$("$lab" run vm1 --timeout 30 -- 'for i in $(seq 100); do q=$(rdma res show qp | grep "type RC state RTS" | grep ibv_rc_pingpong); [ -n "$q" ] && { echo "$q"; exit 0; }; sleep 0.2; done; exit 1') ||
  fail "no RTS QP of ibv_rc_pingpong on vm1 within 20 s"
qpn=$(awk '{for (i = 1; i < NF; i++) if ($i == "lqpn") print $(i + 1)}' <<<"$qp")
rqpsn=$(awk '{for (i = 1; i < NF; i++) if ($i == "rq-psn") print $(i + 1)}' <<<"$qp")
"$lab" run vm0 -- 'kill -STOP $(pidof ibv_rc_pingpong)' && "$lab" run vm1 -- 'kill -STOP $(pidof ibv_rc_pingpong)' || fail "cannot freeze the pingpongs"
# Quiet once two snapshots a second apart agree.
counters vm1 >"$tmp/c0"
for _ in $(seq 20); do
  sleep 1
  counters vm1 >"$tmp/c1"
  cmp -s "$tmp/c0" "$tmp/c1" && break
  mv "$tmp/c1" "$tmp/c0"
done
cmp -s "$tmp/c0" "$tmp/c1" || fail "vm1's counters did not settle with the pingpongs frozen"
python3=/usr/bin/python3
$python3 "$here/inject_roce.py" rxe-t1 02:77:00:00:02:02 10.77.0.101 $ip1 "$qpn" $(((rqpsn - 1000) & 0xffffff)) 2 bad >/dev/null || fail "scapy could not send"
$python3 "$here/inject_roce.py" rxe-t1 02:77:00:00:02:02 10.77.0.101 $ip1 "$qpn" $(((rqpsn - 1000) & 0xffffff)) 2 good >/dev/null || fail "scapy could not send"
for _ in $(seq 50); do
  counters vm1 >"$tmp/c2"
  [ "$(delta "$tmp/c1" "$tmp/c2" udp_in)" -ge 4 ] && break
  sleep 0.2
done
ctl_udp=$(delta "$tmp/c1" "$tmp/c2" udp_in)
ctl_rcvd=$(delta "$tmp/c1" "$tmp/c2" rcvd_pkts)
ctl_dup=$(delta "$tmp/c1" "$tmp/c2" duplicate_request)
[ "$ctl_udp" -eq 4 ] && [ "$ctl_rcvd" -eq 2 ] && [ "$ctl_dup" -eq 2 ] ||
  fail "control: after 2 bad-ICRC and 2 good duplicate SENDs to QPN $qpn, vm1 counted udp_in +$ctl_udp rcvd_pkts +$ctl_rcvd duplicate_request +$ctl_dup (want 4, 2, 2)"
"$lab" run vm0 -- 'kill -KILL $(pidof ibv_rc_pingpong)' >/dev/null
"$lab" run vm1 -- 'kill -KILL $(pidof ibv_rc_pingpong)' >/dev/null
"$lab" wait vm1 "$srv" --timeout 30 >/dev/null 2>&1
"$lab" wait vm0 "$cli" --timeout 30 >/dev/null 2>&1
echo "ok: control: rxe took the 2 good SENDs and refused the 2 bad-ICRC ones (udp_in +4, rcvd_pkts +2)"

# --- 1. ibv_rc_pingpong with validation ----------------------------------------------------
counters vm0 >"$tmp/a0"
counters vm1 >"$tmp/a1"
t=$SECONDS
srv=$("$lab" run vm1 --bg --timeout 240 -- "ibv_rc_pingpong -d rxe0 -g $gid1 -c -n 200 -s 4096")
listening vm1 18515
"$lab" run vm0 --timeout 240 -- "ibv_rc_pingpong -d rxe0 -g $gid0 -c -n 200 -s 4096 $ip1" >"$tmp/pp-client.log" 2>&1 ||
  fail "ibv_rc_pingpong client failed ($?)"
"$lab" wait vm1 "$srv" --timeout 60 >"$tmp/pp-server.log" 2>&1 || fail "ibv_rc_pingpong server failed ($?)"
for f in pp-client pp-server; do
  grep -q "^200 iters in" "$tmp/$f.log" || fail "$f did not report 200 iterations"
  grep -qi "invalid\|error" "$tmp/$f.log" && fail "$f reports an error"
done
pp_s=$((SECONDS - t))
echo "ok: ibv_rc_pingpong -c: 200 x 4096 bytes each way, every buffer validated ($(grep -m1 'iters in' "$tmp/pp-client.log"))"
counters vm0 >"$tmp/b0"
counters vm1 >"$tmp/b1"

# --- 2. ib_write_bw ----------------------------------------------------------------------
t=$SECONDS
srv=$("$lab" run vm1 --bg --timeout 240 -- "ib_write_bw -d rxe0 -x $gid1 -s 65536 -n 100 -u 20 -F")
listening vm1 18515
"$lab" run vm0 --timeout 240 -- "ib_write_bw -d rxe0 -x $gid0 -s 65536 -n 100 -u 20 -F $ip1" >"$tmp/bw-client.log" 2>&1 ||
  fail "ib_write_bw client failed ($?)"
"$lab" wait vm1 "$srv" --timeout 60 >"$tmp/bw-server.log" 2>&1 || fail "ib_write_bw server failed ($?)"
bw=$(awk '$1 == 65536 && $2 == 100 {print $4}' "$tmp/bw-client.log")
[ -n "$bw" ] || fail "ib_write_bw printed no result line for 100 x 65536 bytes"
bw_s=$((SECONDS - t))
echo "ok: ib_write_bw: 100 x 64 KiB RDMA WRITEs completed, average $bw MB/s"
counters vm0 >"$tmp/z0"
counters vm1 >"$tmp/z1"

# --- checks ------------------------------------------------------------------------------
lab_stop_appliance
grep -E '^(port|lcore)' "$tmp/inagg.log" | sed 's/^/inagg: /'
for v in 0 1; do
  udp_bw=$(delta "$tmp/b$v" "$tmp/z$v" udp_in)
  rcvd_bw=$(delta "$tmp/b$v" "$tmp/z$v" rcvd_pkts)
  [ "$udp_bw" -gt 0 ] || fail "vm$v received no RoCE datagram during ib_write_bw"
  [ "$udp_bw" -eq "$rcvd_bw" ] ||
    fail "vm$v: during ib_write_bw its UDP stack took $udp_bw RoCE datagrams but rxe accepted $rcvd_bw: rxe refused some (bad ICRC or headers)"
  # Phase 1 tears down without a final handshake, so a late retransmission may find its QP gone:
  # reported, not asserted.
  refused_pp=$(($(delta "$tmp/a$v" "$tmp/b$v" udp_in) - $(delta "$tmp/a$v" "$tmp/b$v" rcvd_pkts)))
  [ "$(delta "$tmp/a$v" "$tmp/z$v" retry_exceeded_err)" -eq 0 ] || fail "vm$v: an RC QP exceeded its retry count"
  udp_all=$(delta "$tmp/a$v" "$tmp/z$v" udp_in)
  tx=$(awk -v p="$v" '$1 == "port" && $2 == p {for (i = 3; i < NF; i++) if ($i == "tx") print $(i + 1)}' "$tmp/inagg.log")
  [ -n "$tx" ] || fail "inagg printed no counters for port $v"
  [ "$tx" -ge "$udp_all" ] || fail "vm$v received $udp_all RoCE datagrams but inagg's port $v transmitted only $tx frames: something else delivered them"
  echo "ok: vm$v: ib_write_bw: rxe accepted all $rcvd_bw RoCE datagrams it got (no ICRC error); inagg's port $v sent $tx frames >= the $udp_all it got in phases 1-2; pingpong: $refused_pp refused at teardown; completer_retry_err +$(delta "$tmp/a$v" "$tmp/b$v" completer_retry_err) (pingpong) +$(delta "$tmp/b$v" "$tmp/z$v" completer_retry_err) (write_bw), duplicate_request +$(delta "$tmp/a$v" "$tmp/z$v" duplicate_request)"
done
bridged=$(awk '$1 == "lcore" {for (i = 3; i < NF; i++) if ($i == "bridged") s += $(i + 1)} END {print s + 0}' "$tmp/inagg.log")
[ "$bridged" -gt 0 ] || fail "inagg bridged nothing"
echo "ok: two rxe VMs through inagg; lab up in ${up_s} s ($(grep -o 'up ([a-z]*)' "$tmp/up.log")), pingpong ${pp_s} s, write_bw ${bw_s} s, whole test $((SECONDS - started)) s"
