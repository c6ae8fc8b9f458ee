# shellcheck shell=bash
# Sourced by bench/appliance.sh: Open vSwitch with DPDK (Debian's openvswitch-switch-dpdk, DPDK
# 22.11 like inagg) as the reference software switch. It runs in a directory of its own, with its
# own ovsdb-server and ovs-vswitchd (never the system's openvswitch-switch service) and one netdev
# bridge whose ports are of type dpdk. Needs scripts/lib/wait.sh.
#
#   ovs_find            ovs_vswitchd = the DPDK-enabled ovs-vswitchd (BENCH_OVS_VSWITCHD, else the
#                       `update-alternatives` alternative of ovs-vswitchd with DPDK); if there is
#                       none (or no OVS tools), returns 1 with ovs_why saying so
#   ovs_up DIR PREFIX PMD_MASK LCORE_MASK EAL...
#                       ovsdb-server and ovs-vswitchd under DIR, DPDK with EAL... and --file-prefix=PREFIX,
#                       the PMD thread on the CPUs of PMD_MASK and OVS's other lcore on LCORE_MASK's;
#                       an empty netdev bridge ovs_br
#   ovs_add_ports NAME DEVARGS [NAME DEVARGS ...]   dpdk ports on vdevs; waits until they are up
#   ovs_del_ports       removes them
#   ovs_flows normal|p2p  the bridge's one rule `actions=NORMAL` (MAC learning: what a bridge has
#                       when nobody configures it), or in_port=first -> second and back
#   ovs_wait_forwarding  waits until every port has sent packets since the call
#   ovs_tx              "NS PACKETS": the time and the tx packets of the bridge's ports (LOCAL not
#                       counted), live from the ports (Interface's statistics column is refreshed
#                       only every 5 s)
#   ovs_log             the last lines of ovs-vswitchd's log, for a failure's message
#   ovs_down            stops what ovs_up started (by PID), removes the bridge's tap and the DPDK
#                       runtime directory; safe to call twice and from a trap
ovs_vswitchd="" ovs_why="" ovs_db_pid="" ovs_sw_pid="" ovs_br="" ovs_prefix="" ovs_ports=()

# shellcheck disable=SC2034  # ovs_why is for the caller
ovs_find() {
  ovs_vswitchd=${BENCH_OVS_VSWITCHD:-$(update-alternatives --list ovs-vswitchd 2>/dev/null | grep -m1 dpdk)}
  : "${ovs_vswitchd:=/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk}"
  if [ ! -x "$ovs_vswitchd" ]; then
    ovs_why="OVS-DPDK is not installed (no $ovs_vswitchd; apt-get install openvswitch-switch-dpdk)"
    return 1
  fi
  local c
  for c in ovsdb-tool ovsdb-server ovs-vsctl ovs-ofctl ovs-appctl; do
    command -v "$c" >/dev/null || { ovs_why="OVS-DPDK: no $c (apt-get install openvswitch-switch-dpdk)"; return 1; }
  done
}

ovs_vsctl() { ovs-vsctl --db="unix:$OVS_RUNDIR/db.sock" "$@"; }
ovs_appctl() { ovs-appctl -t "$OVS_RUNDIR/ovs-vswitchd.ctl" "$@"; }
ovs_log() { grep -v '|coverage|' "$OVS_LOGDIR/ovs-vswitchd.log" 2>/dev/null | tail -n "${1:-5}"; }

ovs_up() {
  local dir=$1 pmd_mask=$3 lcore_mask=$4
  ovs_prefix=$2
  shift 4
  # The bridge's LOCAL port is a tap in this network namespace: a name of this run's own.
  ovs_br=iob$$
  ovs_br=${ovs_br:0:15}
  mkdir -p "$dir"/run "$dir"/db "$dir"/log "$dir"/etc || return 1
  export OVS_RUNDIR=$dir/run OVS_DBDIR=$dir/db OVS_LOGDIR=$dir/log OVS_SYSCONFDIR=$dir/etc
  export OVS_PKGDATADIR=${OVS_PKGDATADIR:-/usr/share/openvswitch}
  ovsdb-tool create "$OVS_DBDIR/conf.db" "$OVS_PKGDATADIR/vswitch.ovsschema" || return 1
  ovsdb-server "$OVS_DBDIR/conf.db" --remote="punix:$OVS_RUNDIR/db.sock" --pidfile="$OVS_RUNDIR/ovsdb-server.pid" \
    --unixctl="$OVS_RUNDIR/ovsdb-server.ctl" --log-file="$OVS_LOGDIR/ovsdb-server.log" --no-chdir \
    >"$OVS_LOGDIR/ovsdb-server.out" 2>&1 &
  ovs_db_pid=$!
  wait_alive "$ovs_db_pid" 10 "ovsdb-server's socket" ovs_vsctl --timeout=1 --no-wait show || return 1
  # --no-huge implies --legacy-mem; said explicitly, it keeps OVS from adding --in-memory, which EAL
  # refuses with it. (OVS adds -c LCORE_MASK.)
  ovs_vsctl --no-wait init -- set Open_vSwitch . other_config:dpdk-init=true \
    "other_config:dpdk-extra=$* --legacy-mem --file-prefix=$ovs_prefix" \
    "other_config:dpdk-lcore-mask=$lcore_mask" "other_config:pmd-cpu-mask=$pmd_mask" || return 1
  "$ovs_vswitchd" "unix:$OVS_RUNDIR/db.sock" --pidfile="$OVS_RUNDIR/ovs-vswitchd.pid" \
    --unixctl="$OVS_RUNDIR/ovs-vswitchd.ctl" --log-file="$OVS_LOGDIR/ovs-vswitchd.log" --no-chdir \
    >"$OVS_LOGDIR/ovs-vswitchd.out" 2>&1 &
  ovs_sw_pid=$!
  wait_alive "$ovs_sw_pid" 60 "OVS to initialise DPDK" \
    sh -c "[ \"\$(ovs-vsctl --db=unix:$OVS_RUNDIR/db.sock --timeout=1 get Open_vSwitch . dpdk_initialized)\" = true ]" ||
    return 1
  ovs_vsctl --timeout=30 add-br "$ovs_br" -- set Bridge "$ovs_br" datapath_type=netdev
}

# ovs_port_up NAME: the port is up and has an OpenFlow port number.
ovs_port_up() {
  [ "$(ovs_vsctl --timeout=2 get Interface "$1" link_state)" = up ] &&
    [ "$(ovs_vsctl --timeout=2 get Interface "$1" ofport)" -gt 0 ]
}

ovs_add_ports() {
  local args=() n
  ovs_ports=()
  while [ $# -ge 2 ]; do
    args+=(-- add-port "$ovs_br" "$1" -- set Interface "$1" type=dpdk "options:dpdk-devargs=$2")
    ovs_ports+=("$1")
    shift 2
  done
  ovs_vsctl --timeout=60 "${args[@]}" || return 1
  # ovs-vsctl returned once ovs-vswitchd applied the change: a port that failed says so by now.
  for n in "${ovs_ports[@]}"; do
    [ "$(ovs_vsctl --timeout=2 get Interface "$n" error 2>/dev/null)" = "[]" ] ||
      { echo "OVS port $n: $(ovs_vsctl --timeout=2 get Interface "$n" error 2>&1)" >&2; return 1; }
  done
  for n in "${ovs_ports[@]}"; do
    wait_alive "$ovs_sw_pid" 30 "OVS port $n to come up" ovs_port_up "$n" ||
      { echo "OVS port $n: error $(ovs_vsctl --timeout=2 get Interface "$n" error 2>&1)" >&2; return 1; }
  done
}

ovs_del_ports() {
  local args=() n
  for n in "${ovs_ports[@]}"; do args+=(-- del-port "$ovs_br" "$n"); done
  ovs_ports=()
  [ ${#args[@]} -eq 0 ] || ovs_vsctl --timeout=30 "${args[@]}"
}

ovs_flows() {
  local a b
  case "$1" in
    normal) echo "priority=0,actions=NORMAL" ;;
    p2p)
      a=$(ovs_vsctl get Interface "${ovs_ports[0]}" ofport) b=$(ovs_vsctl get Interface "${ovs_ports[1]}" ofport)
      echo "in_port=$a,actions=output:$b"
      echo "in_port=$b,actions=output:$a"
      ;;
    *) echo "ovs_flows: normal or p2p, not '$1'" >&2; return 1 ;;
  esac >"$OVS_RUNDIR/flows.txt"
  ovs-ofctl replace-flows "$ovs_br" "$OVS_RUNDIR/flows.txt" &&
    ovs_appctl revalidator/purge >/dev/null  # the datapath's flows of the old rules go at once
}

# ovs_tx_ports: each port's tx packets on a line (LOCAL not counted).
ovs_tx_ports() {
  ovs-ofctl dump-ports "$ovs_br" | awk '/port +LOCAL:/ {l = 1; next} /port +[0-9]+:/ {l = 0}
    /tx pkts=/ && !l {sub(/.*tx pkts=/, ""); sub(/,.*/, ""); print $0 + 0}'
}
ovs_tx() {
  local t
  t=$(date +%s%N)
  ovs_tx_ports | awk -v t="$t" '{s += $1} END {print t, s + 0}'
}
ovs_wait_forwarding() {
  local before now deadline=$((SECONDS + 10))
  before=$(ovs_tx_ports | tr '\n' ' ')
  while true; do
    kill -0 "$ovs_sw_pid" 2>/dev/null || { echo "ovs-vswitchd ended while waiting for it to forward" >&2; return 1; }
    now=$(ovs_tx_ports | tr '\n' ' ')
    awk -v a="$before" -v b="$now" 'BEGIN {n = split(a, x, " "); m = split(b, y, " ");
      if (n == 0 || n != m) exit 1; for (i = 1; i <= n; i++) if (y[i] <= x[i]) exit 1}' && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after 10 s waiting for OVS to forward on every port (tx: $before -> $now)" >&2
      return 1
    fi
    sleep 0.05
  done
}

ovs_down() {
  if [ -n "$ovs_sw_pid" ]; then
    # Removing the bridge first removes its tap; a killed ovs-vswitchd leaves it (see below).
    kill -0 "$ovs_sw_pid" 2>/dev/null && ovs_vsctl --timeout=10 --if-exists del-br "$ovs_br" >/dev/null 2>&1
    kill "$ovs_sw_pid" 2>/dev/null
    wait_pids 15 "ovs-vswitchd to end" "$ovs_sw_pid" 2>/dev/null || kill -9 "$ovs_sw_pid" 2>/dev/null
    wait "$ovs_sw_pid" 2>/dev/null
    ovs_sw_pid=""
  fi
  if [ -n "$ovs_db_pid" ]; then
    kill "$ovs_db_pid" 2>/dev/null
    wait_pids 10 "ovsdb-server to end" "$ovs_db_pid" 2>/dev/null || kill -9 "$ovs_db_pid" 2>/dev/null
    wait "$ovs_db_pid" 2>/dev/null
    ovs_db_pid=""
  fi
  if [ -n "$ovs_br" ] && ip -d link show "$ovs_br" 2>/dev/null | grep -q 'tun type tap'; then
    ip link del "$ovs_br"
  fi
  [ -z "$ovs_prefix" ] || rm -rf "/var/run/dpdk/$ovs_prefix"
  ovs_br="" ovs_prefix="" ovs_ports=()
}
