# shellcheck shell=bash
# Sourced by scripts and tests that start several inagg processes on net_af_packet ports in one
# network namespace. DPDK 22.11's net_af_packet joins each port's sockets to a PACKET_FANOUT group
# whose id is (its PID ^ the interface's index) & 0xffff, and the kernel refuses (EINVAL) a group id
# another process already uses on another interface: two processes then clash by chance, and the
# second fails to probe its port. It starts again with another PID.

# fanout_clash LOG: the inagg whose output is LOG failed on such a clash.
fanout_clash() { grep -q "could not set PACKET_FANOUT" "$1" 2>/dev/null; }
