#!/usr/bin/python3
"""bench/run appliance-ab OLD NEW: two inagg binaries compared in one run, interleaved (the order
alternates per round), on the same virtual ports as bench/run appliance: 64-byte forwarding with
-l 0 and with a worker lcore, and the fp32 n=4 4 KiB replay job. Each figure is per CPU-second
of the datapath thread (/proc/.../schedstat), so CPU time other processes take from a shared
machine does not count; the last line gives NEW/OLD medians.

  appliance_ab.py OLD NEW [ROUNDS=3] [SECONDS=6]
"""
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, wrpcap  # noqa: E402


def frames(src, dst):
    out = []
    for i in range(256):
        p = Ether(src=src, dst=dst) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1000 + i, dport=9)
        out.append(p / Raw(bytes(60 - len(p))))
    return out


def run(binary, lcores, vdevs, extra, secs, prefix):
    p = subprocess.Popen([binary, "-l", lcores, "--no-huge", "-m", "2048", "--no-pci", "--log-level=lib.eal:error",
                          f"--file-prefix={prefix}"] + vdevs + ["--", "--socket", ""] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(secs)
    cpu_ns = 0  # the datapath thread: the one with the most CPU time
    for t in os.listdir(f"/proc/{p.pid}/task"):
        try:
            cpu_ns = max(cpu_ns, int(open(f"/proc/{p.pid}/task/{t}/schedstat").read().split()[0]))
        except OSError:
            pass
    p.send_signal(signal.SIGINT)
    out = p.communicate()[0]
    rx = sum(int(m) for m in re.findall(r"^lcore \d+: busy [\d.]+% rx (\d+)", out, re.M))
    agg = sum(int(m) for m in re.findall(r"^job 1: .* aggregated_bytes (\d+)", out, re.M))
    return rx / (cpu_ns / 1e9), agg * 8 / (cpu_ns / 1e9) / 1e9


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    secs = float(sys.argv[4]) if len(sys.argv) > 4 else 6
    d = tempfile.mkdtemp()
    prefix = f"inagg-bench-ab-{os.getpid()}"
    try:
        wrpcap(f"{d}/fwd0.pcap", frames("02:00:00:00:00:0a", "02:00:00:00:00:0b"))
        wrpcap(f"{d}/fwd1.pcap", frames("02:00:00:00:00:0b", "02:00:00:00:00:0a"))
        subprocess.run(["/usr/bin/python3", "scripts/gen-pcap", "--out", f"{d}/agg", "--workers", "4", "--payload", "4096",
                        "--message", "65536", "--messages", "8", "--replay", "--background", "0"], check=True, stdout=subprocess.DEVNULL)
        fwd = [f"--vdev=net_pcap0,rx_pcap={d}/fwd0.pcap,infinite_rx=1", f"--vdev=net_pcap1,rx_pcap={d}/fwd1.pcap,infinite_rx=1"]
        agg = [f"--vdev=net_pcap0,rx_pcap={d}/agg/port0.pcap,infinite_rx=1", f"--vdev=net_pcap1,rx_pcap={d}/agg/port1.pcap,infinite_rx=1"]
        fwd_opts = ["--mtu", "1500", "--mbufs", "32768", "--mbuf-budget", "1024"]
        agg_opts = ["--job", f"{d}/agg/job.job", "--mtu", "4200", "--mbufs", "16384", "--mbuf-budget", "4096"]
        res = {"old": [], "new": []}
        for r in range(rounds):
            order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
            for name, binary in order:
                f1, _ = run(binary, "0", fwd, fwd_opts, secs, prefix)
                f2, _ = run(binary, "0,1", fwd, fwd_opts, secs, prefix)
                _, g = run(binary, "0,1", agg, agg_opts, secs, prefix)
                res[name].append((f1, f2, g))
                print(f"round {r + 1} {name}: forwarding -l 0 {f1 / 1e6:.2f} Mpps, with a worker lcore {f2 / 1e6:.2f} Mpps, "
                      f"aggregation {g:.1f} Gbps of input (per CPU-second of the datapath thread)", flush=True)
        ratios = []
        for i, key in enumerate(["fwd_single_lcore", "fwd_worker_lcore", "agg"]):
            o = statistics.median(x[i] for x in res["old"])
            n = statistics.median(x[i] for x in res["new"])
            ratios.append(f"{key}_new_vs_old={n / o:.2f}")
        print(" ".join(ratios))
    finally:
        subprocess.run(["rm", "-rf", d, f"/var/run/dpdk/{prefix}"])


if __name__ == "__main__":
    main()
