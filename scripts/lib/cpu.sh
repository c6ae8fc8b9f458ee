# shellcheck shell=bash
# Sourced by benchmarks and tests: how much CPU a process uses, measured exactly (the scheduler's
# per-thread run time in /proc/PID/task/*/schedstat, in ns), not from utime/stime, which the tick
# samples and which mis-charges a thread that wakes thousands of times a second.

# cpu_ns PID [NAME_PREFIX]: nanoseconds the threads of PID (those whose name starts with
# NAME_PREFIX, e.g. rte-worker for DPDK's worker lcores) have run so far; threads that ended are
# not counted.
cpu_ns() {
  local t s=0 v
  for t in /proc/"$1"/task/*; do
    [[ "$(cat "$t/comm" 2>/dev/null)" == "${2:-}"* ]] || continue
    v=$(cut -d' ' -f1 "$t/schedstat" 2>/dev/null) && s=$((s + ${v:-0}))
  done
  echo "$s"
}

# cpu_cores PID SECONDS [NAME_PREFIX]: the CPU PID (its threads named NAME_PREFIX...) uses over
# the next SECONDS, in cores (1.000 = one core busy).
cpu_cores() {
  local pid=$1 secs=$2 c0 c1 t0 t1
  [ -r "/proc/$pid/schedstat" ] || { echo "cpu_cores: no /proc/$pid/schedstat (kernel without CONFIG_SCHED_INFO?)" >&2; return 1; }
  c0=$(cpu_ns "$pid" "${3:-}") t0=$(date +%s%N)
  sleep "$secs"  # the measurement interval, not a wait for a state
  c1=$(cpu_ns "$pid" "${3:-}") t1=$(date +%s%N)
  awk -v c="$((c1 - c0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.3f\n", c / t}'
}

# cpu_cores_split PID SECONDS NAME_PREFIX: "ALL PART", both in cores over the same SECONDS: every
# thread of PID, and those named NAME_PREFIX...
cpu_cores_split() {
  local pid=$1 secs=$2 a0 a1 p0 p1 t0 t1
  [ -r "/proc/$pid/schedstat" ] || { echo "cpu_cores: no /proc/$pid/schedstat (kernel without CONFIG_SCHED_INFO?)" >&2; return 1; }
  a0=$(cpu_ns "$pid") p0=$(cpu_ns "$pid" "$3") t0=$(date +%s%N)
  sleep "$secs"  # the measurement interval, not a wait for a state
  a1=$(cpu_ns "$pid") p1=$(cpu_ns "$pid" "$3") t1=$(date +%s%N)
  awk -v a="$((a1 - a0))" -v p="$((p1 - p0))" -v t="$((t1 - t0))" 'BEGIN {printf "%.3f %.3f\n", a / t, p / t}'
}
