# shellcheck shell=bash
# Sourced by scripts and tests (bash): waiting for a state with a deadline, never for a sleep to be
# long enough.

# wait_for SECONDS WHAT CMD [ARGS...]: runs CMD (output discarded) every 50 ms until it succeeds.
# Returns 0 as soon as it does; after SECONDS returns 1 with "timed out after SECONDS s waiting for
# WHAT" on stderr, so that the caller can add what it saw.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after $seconds s waiting for $what" >&2
      return 1
    fi
    sleep 0.05
  done
}

# wait_alive PID SECONDS WHAT CMD [ARGS...]: wait_for, but gives up at once (returning 1, with
# "process PID ended while waiting for WHAT" on stderr) if process PID ends first: the process that
# should bring the state about has died, so waiting longer cannot help.
wait_alive() {
  local pid=$1 seconds=$2 what=$3
  shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "process $pid ended while waiting for $what" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after $seconds s waiting for $what" >&2
      return 1
    fi
    sleep 0.05
  done
}

# wait_pids SECONDS WHAT PID...: waits until every PID has ended, at most SECONDS. Returns 0 when
# all ended by then, whatever their status (the caller `wait`s each for it); otherwise returns 1
# with "timed out after SECONDS s waiting for WHAT: still running: PID..." on stderr, so that the
# caller can name what did not finish and stop it.
wait_pids() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds)) p alive
  while true; do
    alive=()
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    [ ${#alive[@]} -eq 0 ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after $seconds s waiting for $what: still running: ${alive[*]}" >&2
      return 1
    fi
    sleep 0.2
  done
}
