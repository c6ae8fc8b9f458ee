#!/bin/sh
# inagg's container entrypoint.
#   docker run ... inagg [EAL args] -- [inagg args]   run the appliance (arguments passed through)
#   docker run ... inagg --help                        inagg's options
#   docker run ... inagg self-check                    a short check that the image works
#   docker run ... inagg inagg-ctl list                any other inagg-* tool by name
#   inagg-entrypoint healthcheck                       the image's HEALTHCHECK: inagg answers on its
#                                                      control socket ($INAGG_SOCKET, default
#                                                      /run/inagg/inagg.sock)
# Hugepages: if none are mounted at /dev/hugepages (docker run -v /dev/hugepages:/dev/hugepages)
# with free pages, --no-huge -m 1024 is added to the EAL arguments and a note says so.
# INAGG_WAIT_IFACES="p0 p1 ...": before starting inagg, wait until these network interfaces exist
# and are up (ports attached after the container started, e.g. veths moved in by docker/lab-rack),
# at most INAGG_WAIT_TIMEOUT seconds (default 60).
set -eu
case "${1:-}" in
  self-check)
    echo "self-check: wire layer on a ConnectX-4 Lx capture"
    inagg-decode /usr/local/share/inagg/cnp_connectx4lx.pcap
    # inagg runs until its datapath has received packets (a state, read from its periodic stats),
    # not for a fixed time: on a cold machine EAL and mempool set-up alone can take seconds, and a
    # stop requested before the datapath started would show rx 0. Two lcores (-l 0,1), whatever the
    # machine has: the mbuf budget below is per datapath lcore.
    echo "self-check: inagg on two net_null ports until its datapath receives packets (at most 60 s)"
    log=$(mktemp)
    inagg -l 0,1 --no-huge -m 512 --no-pci --log-level=lib.eal:error --file-prefix=selfcheck \
      --vdev=net_null0 --vdev=net_null1 -- --socket "" --mtu 1500 --mbufs 8192 --mbuf-budget 1024 --stats-interval 1 \
      >"$log" 2>&1 &
    pid=$!
    tries=600
    until grep -Eq "^port 0 .* rx [1-9]" "$log"; do
      if ! kill -0 "$pid" 2>/dev/null; then echo "self-check FAILED: inagg exited before receiving a packet:"; cat "$log"; exit 1; fi
      tries=$((tries - 1))
      if [ "$tries" -le 0 ]; then
        echo "self-check FAILED: no packet received on net_null port 0 within 60 s; inagg's output:"; cat "$log"
        kill -9 "$pid"; exit 1
      fi
      sleep 0.1
    done
    kill -INT "$pid"
    rc=0; wait "$pid" || rc=$?
    grep -A 3 "^inagg: final stats" "$log" | grep -E "^(port|inagg: final)" || true
    [ "$rc" = 0 ] && grep -q "inagg: final stats" "$log" || { echo "self-check FAILED: inagg exited with $rc after SIGINT:"; cat "$log"; exit 1; }
    rm -f "$log"
    echo "self-check: ok"
    exit 0
    ;;
  healthcheck)
    sock=${INAGG_SOCKET:-/run/inagg/inagg.sock}
    [ -S "$sock" ] || { echo "unhealthy: no control socket at $sock (inagg not up yet, or started with --socket \"\")"; exit 1; }
    exec inagg-ctl --socket "$sock" --timeout 3000 list
    ;;
  inagg-*) exec "$@" ;;
  --help|-h) exec inagg -- --help ;;
esac
if [ -n "${INAGG_WAIT_IFACES:-}" ]; then
  tries=$(( ${INAGG_WAIT_TIMEOUT:-60} * 10 ))
  for i in $INAGG_WAIT_IFACES; do
    until [ "$(cat "/sys/class/net/$i/operstate" 2>/dev/null)" = up ]; do
      tries=$((tries - 1))
      [ "$tries" -gt 0 ] || { echo "inagg-entrypoint: interface $i is not up after ${INAGG_WAIT_TIMEOUT:-60} s" >&2; exit 1; }
      sleep 0.1
    done
  done
fi
free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
if ! grep -qs " /dev/hugepages " /proc/mounts || [ "$free" -eq 0 ]; then
  case " $* " in
    *" --no-huge "*) ;;
    *) echo "inagg-entrypoint: no free hugepages mounted at /dev/hugepages: adding --no-huge -m 1024 (slower; see docker/README.md)" >&2
       set -- --no-huge -m 1024 "$@" ;;
  esac
fi
exec inagg "$@"
