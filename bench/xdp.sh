#!/usr/bin/env bash
# bench/run xdp: a head of the XDP tier, per core, against the same head in userspace, in one run.
#
# Two namespaces joined by a veth: inagg-bg runs bench_xdp_head gen (n = 4 emulated workers, closed
# loop with a window, like real members), inagg-bh is the head. Both veth ends use threaded NAPI,
# so the head's receive work runs in a kernel thread of its own: pinned to CPU 1, the generator
# and its NAPI thread to CPU 0. The head's cost is CPU time on CPU 1's side only:
#   xdp        xagg_head in native mode; cost = the head's NAPI thread (driver RX, the program,
#              XDP_TX of the results)
#   userspace  bench_xdp_head userspace on a UDP socket (recvmmsg/sendmmsg, SIMD adds); cost = the
#              head's NAPI thread (driver RX, IP/UDP, socket) + the process (syscalls, sums, sends)
# Gbps are of aggregated input: the int32 values of every DATA packet added into a slot.
#   xdp_gbps_per_core  = added values' bits / the xdp head's CPU seconds
#   xdp_vs_userspace   = that / the same for the userspace head
# XAgg (the published software aggregator) reports 10 Gbps per core; vs_xagg is ours over that.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
secs=${BENCH_SECS:-5}
values=${BENCH_VALUES:-256}
window=${BENCH_WINDOW:-24}
jobs=${BENCH_JOBS:-2}
rate=${BENCH_RATE:-0}
tmp=$(mktemp -d)
pids=()
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  sysctl -qw kernel.bpf_stats_enabled="$stats_was"
  ip netns del inagg-bg 2>/dev/null
  ip netns del inagg-bh 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "bench xdp: $*" >&2; exit 1; }
xdp=build/src/apps/inagg-xdp
gen=build/bench/bench_xdp_head
[ "$(nproc)" -ge 2 ] || fail "needs 2 CPUs (the head and the generator each get one)"

ip netns del inagg-bg 2>/dev/null; ip netns del inagg-bh 2>/dev/null
ip netns add inagg-bg
ip netns add inagg-bh
ip link add inagg-bgv netns inagg-bg type veth peer name eth0 netns inagg-bh
ip -n inagg-bg link set inagg-bgv name eth0
for ns in inagg-bg inagg-bh; do ip -n $ns link set lo up; done
# Frames of `values` int32 plus headers; native XDP on a veth takes frames up to about 3.5 KiB.
mtu=$(( values * 4 + 24 + 28 ))
[ "$mtu" -ge 1500 ] || mtu=1500
[ "$mtu" -le 3400 ] || fail "BENCH_VALUES=$values makes $mtu-byte frames; native XDP on veth takes at most ~3400 (values <= 832)"
ip -n inagg-bg link set eth0 address 02:78:00:00:00:01 mtu "$mtu" up
ip -n inagg-bh link set eth0 address 02:78:00:00:00:02 mtu "$mtu" up
ip -n inagg-bg addr add 10.78.0.1/24 dev eth0
ip -n inagg-bh addr add 10.78.0.2/24 dev eth0
# GRO keeps each veth on NAPI with or without an XDP program; TSO off makes a veth hand even
# plain UDP to its peer's NAPI (veth_skb_is_eligible_for_gro) instead of the sender's backlog, so
# the userspace head's receive work also lands in its own NAPI thread.
for ns in inagg-bg inagg-bh; do
  ip -n $ns route add 224.0.0.0/4 dev eth0
  ip netns exec $ns ethtool -K eth0 gro on tso off >/dev/null
done
ip netns exec inagg-bg "$xdp" peer --iface eth0 --mode native >/dev/null || fail "xagg_pass on the generator's veth"

# threaded NAPI on NS's eth0, its thread pinned to CPU; prints the thread's pid
napi_thread() {
  local ns=$1 cpu=$2 before after
  before=$(pgrep '^napi/' | sort)
  ip netns exec "$ns" sh -c 'echo 1 > /sys/class/net/eth0/threaded' || fail "threaded NAPI on $ns"
  after=$(pgrep '^napi/' | sort)
  local p
  p=$(comm -13 <(echo "$before") <(echo "$after") | head -n 1)
  [ -n "$p" ] || fail "no NAPI thread appeared for $ns"
  taskset -pc "$cpu" "$p" >/dev/null
  chrt -f -p 50 "$p" >/dev/null  # NAPI preempts processes, as softirqs do
  echo "$p"
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, clock ticks
hz=$(getconf CLK_TCK)

# Every packet carries a MAC under the jobs' key (one key for all of them here), as in production.
"$xdp" key "$tmp/job.key" >/dev/null || fail "inagg-xdp key"
# head_jobs FANOUT: the head's job files (all 4 members are the generator's address; unicast: each
# result leaves the head 4 times, as it would for 4 hosts)
head_jobs() {
  job_args=()
  for j in $(seq 1 "$jobs"); do
    {
      printf 'id = %s\nmembers = 4\nvalues = %s\nwindow = %s\ntotal_weight = 4\ngroup = 239.78.0.1\n' "$j" "$values" "$window"
      printf 'member = %s, 10.78.0.1\n' 0 1 2 3   # every rank is the generator (the head checks the source)
      echo "key_file = $tmp/job.key"
      [ "$1" = unicast ] && echo 'fanout = unicast'
    } >"$tmp/head$j.job"
    job_args+=(--job "$tmp/head$j.job")
  done
}

napi_thread inagg-bg 0 >/dev/null  # the generator's side, on CPU 0
run_gen() {  # -> the generator's line
  ip netns exec inagg-bg taskset -c 0 "$gen" gen --key-file "$tmp/job.key" --head 10.78.0.2 --group 239.78.0.1 --timeout-ms 20 --rate "$rate" --values "$values" --window "$window" --jobs "$jobs" --seconds "$secs"
}

napi_head=$(napi_thread inagg-bh 1) || exit 1

# xdp_head FANOUT: the XDP head for a run of the generator; sets added, ticks, prog_ns. The kernel
# counts the head program's own run time (bpf_stats) meanwhile.
xdp_head() {
  head_jobs "$1"
  sysctl -qw kernel.bpf_stats_enabled=1
  rm -f "$tmp/xdp.sock"
  ip netns exec inagg-bh taskset -c 1 "$xdp" run --iface eth0 --mode native "${job_args[@]}" --socket "$tmp/xdp.sock" \
    >"$tmp/agent.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$tmp/xdp.sock" ] && break; sleep 0.05; done
  [ -S "$tmp/xdp.sock" ] || fail "inagg-xdp did not start: $(cat "$tmp/agent.log")"
  local t0 t1 g prog st
  t0=$(ticks "$napi_head")
  g=$(run_gen)
  t1=$(ticks "$napi_head")
  prog=$(ip netns exec inagg-bh "$xdp" status --iface eth0)
  sysctl -qw kernel.bpf_stats_enabled="$stats_was"
  st=$(for j in $(seq 1 "$jobs"); do "$xdp" --socket "$tmp/xdp.sock" stats "$j"; done |
    awk '!($1 in s) {k[n++] = $1} {s[$1] += $2} END {for (i = 0; i < n; i++) print k[i], s[k[i]]}')
  kill "${pids[0]}"
  wait "${pids[0]}" 2>/dev/null
  pids=()
  added=$(awk '$1 == "added" {print $2}' <<<"$st")
  ticks=$(( t1 - t0 ))
  prog_ns=$(grep -o '[0-9]* ns each' <<<"$prog" | cut -d' ' -f1)
  echo "xdp head ($1): $g; head: added $added, NAPI thread $ticks ticks"
  echo "                $(tr '\n' ' ' <<<"$st" | sed -E 's/[a-z_]+ 0( |$)//g')"
  echo "                $prog"
}

xdp_head unicast
added_uni=$added ticks_uni=$ticks
xdp_head multicast
added_xdp=$added xdp_ticks=$ticks

# --- userspace head (no XDP program; GRO keeps the veth on NAPI, in the same thread)
[ -d "/proc/$napi_head" ] || fail "the head's NAPI thread went away with the XDP program"
ip netns exec inagg-bh taskset -c 1 "$gen" userspace --key-file "$tmp/job.key" --group 239.78.0.1 --values "$values" --window "$window" --jobs "$jobs" --seconds $((secs + 2)) \
  >"$tmp/userspace.log" 2>&1 &
pids+=($!)
sleep 0.5
t0=$(ticks "$napi_head")
g=$(run_gen)
t1=$(ticks "$napi_head")
wait "${pids[0]}"
pids=()
u=$(cat "$tmp/userspace.log")
us_ticks=$(( t1 - t0 ))
echo "userspace head: $g; $u; NAPI thread $us_ticks ticks"
get() { grep -o "$1=[0-9.]*" <<<"$2" | cut -d= -f2; }
awk -v pn="${prog_ns:-0}" -v na="$added_uni" -v nt="$ticks_uni" -v xa="$added_xdp" -v xt="$xdp_ticks" -v ua="$(get added "$u")" -v ut="$us_ticks" -v uc="$(get cpu "$u")" -v hz="$hz" -v v="$values" 'BEGIN {
  bits = v * 4 * 8
  xcpu = xt / hz; ucpu = ut / hz + uc
  if (xcpu <= 0 || ucpu <= 0 || xa <= 0 || ua <= 0) { print "bench xdp: nothing measured" > "/dev/stderr"; exit 1 }
  x = xa * bits / xcpu / 1e9; us = ua * bits / ucpu / 1e9
  printf "xdp: %.0f packets added in %.2f CPU s (%.0f ns each); userspace: %.0f in %.2f CPU s (NAPI %.2f + process %.2f; %.0f ns each)\n", xa, xcpu, xcpu / xa * 1e9, ua, ucpu, ut / hz, uc, ucpu / ua * 1e9
  if (na > 0 && nt > 0) printf "fan-out: unicast (4 copies by TC) %.0f ns per added packet, multicast %.0f ns; fanout_unicast_vs_multicast=%.2f\n", nt / hz / na * 1e9, xcpu / xa * 1e9, (nt / hz / na) / (xcpu / xa)
  if (pn > 0) printf "the head program alone: %d ns per packet (bpf_stats), %.1f Gbps of values per core\n", pn, bits / pn
  printf "values_per_packet=%d vs_xagg_10gbps=%.2f userspace_gbps_per_core=%.2f\n", v, x / 10, us
  printf "xdp_gbps_per_core=%.2f xdp_vs_userspace=%.2f\n", x, x / us
}'
