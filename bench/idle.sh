#!/usr/bin/env bash
# bench/run idle: the appliance's CPU use on an idle virtual rack (4 workers, no traffic), busy-
# polling (--idle-sleep-us 0, the default) against lab mode (--idle-sleep-us BENCH_IDLE_SLEEP_US,
# default 1000), BENCH_ROUNDS rounds alternating the order, BENCH_SECS seconds each, from
# every thread's run time (scripts/lib/cpu.sh: the datapath lcore, the control thread, EAL's).
# Also the round trip of a UDP ping between two workers through it in each mode (what sleeping
# costs a packet that finds the lcore asleep). Ends with `idle_cpu_busy=X idle_cpu_lab=Y
# lab_vs_busy=Z datapath_lab_vs_busy=D rtt_lab_vs_busy=W` (CPU in cores, medians of the rounds;
# datapath: the worker lcore's thread alone).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib/wait.sh
. scripts/lib/wait.sh
# shellcheck source=../scripts/lib/cpu.sh
. scripts/lib/cpu.sh
secs=${BENCH_SECS:-3}
rounds=${BENCH_ROUNDS:-3}
lab_us=${BENCH_IDLE_SLEEP_US:-1000}
rack=ibidle$$
rack=${rack:0:11}
tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  scripts/rack down --name "$rack" >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/inagg-bench-idle-$$"
}
trap cleanup EXIT
[ "$(id -u)" = 0 ] || { echo "bench idle: needs root (the virtual rack)" >&2; exit 1; }
scripts/rack up --name "$rack" --workers 4 >/dev/null || exit 1

# measure US: one round with --idle-sleep-us US; prints "CPU_ALL CPU_DATAPATH PING_MEDIAN_MS".
measure() {
  rm -f "$tmp/ctl.sock"
  # shellcheck disable=SC2046
  build/src/apps/inagg -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="inagg-bench-idle-$$" --log-level=lib.eal:error \
    $(scripts/rack vdevs --name "$rack") -- --socket "$tmp/ctl.sock" --mtu 1500 --mbufs 16384 --mbuf-budget 4096 \
    --idle-sleep-us "$1" --resend-us 2000 >"$tmp/inagg.log" 2>&1 &
  pid=$!
  wait_alive "$pid" 60 "inagg to forward" grep -q "^inagg: forwarding on" "$tmp/inagg.log" ||
    { echo "bench idle: inagg did not start: $(tail -n 3 "$tmp/inagg.log")" >&2; exit 1; }
  local cpu ping
  cpu=$(cpu_cores_split "$pid" "$secs" rte-worker) || exit 1
  ip netns exec "$rack-w1" /usr/bin/python3 scripts/lib/udp_rtt.py echo 10.77.0.2 7777 25 &
  local echo_pid=$!
  ping=$(ip netns exec "$rack-w0" /usr/bin/python3 scripts/lib/udp_rtt.py ping 10.77.0.2 7777 30) || ping=nan
  kill "$echo_pid" 2>/dev/null
  wait "$echo_pid" 2>/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null
  pid=""
  echo "$cpu $ping"
}

echo "idle rack, 4 workers; $rounds rounds of $secs s per mode; CPU in cores (the machine has $(nproc))"
for i in $(seq "$rounds"); do
  if [ $((i % 2)) = 1 ]; then order="0 $lab_us"; else order="$lab_us 0"; fi
  for us in $order; do
    read -r cpu dp ping < <(measure "$us")
    [ -n "${ping:-}" ] || exit 1
    mode=$([ "$us" = 0 ] && echo busy || echo lab)
    printf "round %d %-4s (--idle-sleep-us %4s): cpu %s cores (datapath lcore %s), UDP round trip %s ms\n" \
      "$i" "$mode" "$us" "$cpu" "$dp" "$ping"
    echo "$cpu $ping $dp" >>"$tmp/$mode"
  done
done
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
bc=$(cut -d' ' -f1 "$tmp/busy" | median) lc=$(cut -d' ' -f1 "$tmp/lab" | median)
bp=$(cut -d' ' -f2 "$tmp/busy" | median) lp=$(cut -d' ' -f2 "$tmp/lab" | median)
bd=$(cut -d' ' -f3 "$tmp/busy" | median) ld=$(cut -d' ' -f3 "$tmp/lab" | median)
awk -v bc="$bc" -v lc="$lc" -v bp="$bp" -v lp="$lp" -v bd="$bd" -v ld="$ld" \
  'BEGIN {printf "idle_cpu_busy=%.3f idle_cpu_lab=%.3f lab_vs_busy=%.3f datapath_lab_vs_busy=%.3f rtt_lab_vs_busy=%.2f\n",
    bc, lc, lc / bc, ld / bd, lp / bp}'
