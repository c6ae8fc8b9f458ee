#!/usr/bin/python3
"""bench/run job-lcores: one aggregation job on one datapath lcore against the same job on two, in one
run, interleaved: as two channels on two lcores, and as one job half of whose packets arrive at the
lcore that does not own it. The fp32 n = 4, 4 KiB replay job of bench/run appliance, on two net_pcap
ports looping their captures (infinite_rx), TX to /dev/null pcaps in every configuration:

  one     -l 0,1: one datapath lcore (lcore 1, CPU 1); the control thread on lcore 0 (CPU 0)
  handover  --lcores (0,2)@0,1@1, rank r on queue r / 2 of port r mod 2 (as RSS by UDP source port
          spreads connections): the lcore that does not own the job hands its packets to the owner
  channels2  the n = 4, 4 KiB job as two channels (docs/protocol.md section 22: every rank two
          connections, message m on channel m mod 2, each channel an engine job of its own on its own
          lcore), each channel as the one-channel job (8 messages, window 8), channel c's packets on
          queue c of each port as RSS by UDP source port would put them: nothing shared, no packet
          handed between lcores (the handovers are counted)

The two-lcore runs put lcore 2 on CPU 0 with the control thread (which sleeps between 1 s stats
prints), as bench/run appliance does for forwarding. Figures per configuration: aggregated input
Gbps over wall-clock time (what the 1.7x target is about) and per CPU-second of the
datapath threads (/proc/PID/task/*/schedstat: what the scheduler gave them, which on a shared
machine is less than two cores), and each datapath lcore's busy TSC cycles per packet it took in.

The captures loop without receivers (open loop): ranks taken in by different lcores run at those
lcores' rates, and the engine spends part of its time on the faster ranks' repeats (the figure
"new to their slot"); real RC senders are held to the slowest rank by their windows. Last, bench_handoff:
what reading a 4 KiB payload another core wrote costs against a CRC over it on one core.

  job_lcores.py [ROUNDS=3] [SECONDS=8]      (run from the source tree; uses build/src/apps/inagg)
"""
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

INAGG = os.environ.get("BENCH_INAGG", "build/src/apps/inagg")


def thread_cpu(pid):
    """{tid: (name, ns on CPU)} of every thread of pid."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            out[t] = (name, int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0]))
        except OSError:
            pass
    return out


def run(lcores, vdevs, extra, secs, prefix, env=None):
    """Returns (Gbps wall-clock, Gbps per datapath CPU-second, {lcore: busy cycles per packet}, text)."""
    p = subprocess.Popen([INAGG, "--lcores", lcores, "--no-huge", "-m", "2048", "--no-pci", "--log-level=lib.eal:error",
                          f"--file-prefix={prefix}"] + vdevs +
                         ["--", "--socket", "", "--mtu", "4200", "--mbufs", "16384", "--mbuf-budget", "4096",
                          "--stats-interval", "1"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                         env=dict(os.environ, **(env or {})))
    samples = []  # (wall time, aggregated bytes, thread cpu) at each stats print
    started = None
    deadline = time.monotonic() + secs + 30  # EAL start-up with --no-huge takes a few seconds
    block_bytes = None
    log = []
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if not r:
            if p.poll() is not None:
                break
            continue
        line = p.stdout.readline()
        if not line:
            break
        log.append(line)
        now = time.monotonic()
        if started is None and "forwarding on" in line:
            started = now
        m = re.match(r"^job 1: .* aggregated_bytes (\d+)", line)
        if m:
            block_bytes = int(m.group(1))
            samples.append((now, block_bytes, thread_cpu(p.pid)))
        if started is not None and now - started > secs:
            break
    p.send_signal(signal.SIGINT)
    try:
        rest = p.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        rest = p.communicate()[0]
    text = "".join(log) + rest
    if len(samples) < 4:
        sys.exit(f"job_lcores.py: too few stats prints from inagg {lcores} {extra}:\n{text[-3000:]}")
    (t0, b0, c0), (t1, b1, c1) = samples[1], samples[-1]
    gbps = (b1 - b0) * 8 / (t1 - t0) / 1e9
    datapath_ns = sum(ns - c0[t][1] for t, (name, ns) in c1.items() if t in c0 and name.startswith("rte-worker"))
    per_cpu = (b1 - b0) * 8 / (datapath_ns / 1e9) / 1e9 if datapath_ns else 0
    cycles = {}
    final = [l for l in text.splitlines() if l.startswith("lcore ")][-2:]
    for l in final:
        f = l.split()
        kv = {f[i]: f[i + 1] for i in range(2, len(f) - 1)}
        taken = int(kv.get("rx", 0)) + int(kv.get("handover_in", 0))
        cycles[f[1].rstrip(":")] = int(kv["busy_cycles"]) / taken if taken else 0
    eng = [l for l in text.splitlines() if l.startswith("engine:")][-1].split()
    kv = {eng[i]: int(eng[i + 1]) for i in range(1, len(eng) - 1, 2)}
    useful = kv.get("aggregated_packets", 0) / kv["rx_packets"] if kv.get("rx_packets") else 0
    return gbps, per_cpu, datapath_ns / 1e9 / (t1 - t0), cycles, useful, text


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    d = tempfile.mkdtemp()
    prefix = f"inagg-bench-jl-{os.getpid()}"
    try:
        gen = ["/usr/bin/python3", "scripts/gen-pcap", "--workers", "4", "--payload", "4096", "--message", "65536",
               "--messages", "8", "--replay", "--background", "0"]
        subprocess.run(gen + ["--out", f"{d}/one"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(gen + ["--out", f"{d}/two", "--ports", "4", "--appliance-ports", "2"], check=True,
                       stdout=subprocess.DEVNULL)
        # Each channel as the one-channel job: 8 messages in a window of 8, so that every engine
        # job holds as many slots (the capture has twice the messages, half on each channel).
        subprocess.run(gen + ["--out", f"{d}/ch2", "--channels", "2", "--queues", "2", "--messages", "16"], check=True,
                       stdout=subprocess.DEVNULL)
        one = [f"--vdev=net_pcap0,rx_pcap={d}/one/port0.pcap,infinite_rx=1",
               f"--vdev=net_pcap1,rx_pcap={d}/one/port1.pcap,infinite_rx=1"]
        two = [f"--vdev=net_pcap0,rx_pcap={d}/two/port0.pcap,rx_pcap={d}/two/port2.pcap,"
               "infinite_rx=1",
               f"--vdev=net_pcap1,rx_pcap={d}/two/port1.pcap,rx_pcap={d}/two/port3.pcap,"
               "infinite_rx=1"]
        ch2 = [f"--vdev=net_pcap{p},rx_pcap={d}/ch2/port{p}q0.pcap,rx_pcap={d}/ch2/port{p}q1.pcap,infinite_rx=1"
               for p in (0, 1)]
        configs = [
            ("one", "0,1", one, ["--job", f"{d}/one/job.job"]),
            ("handover", "(0,2)@0,1@1", two, ["--job", f"{d}/two/job.job"]),
            ("channels2", "(0,2)@0,1@1", ch2, ["--job", f"{d}/ch2/job.job"]),
        ]
        handed = {name: [] for name, *_ in configs}
        res = {name: [] for name, *_ in configs}
        for r in range(rounds):
            order = configs if r % 2 == 0 else configs[::-1]
            for name, lcores, vdevs, extra in order:
                gbps, per_cpu, cores, cycles, useful, text = run(lcores, vdevs, extra, secs, prefix)
                if not re.search(r"^job 1: active", text, re.M):
                    print(f"warning: {name}: the job did not stay active", file=sys.stderr)
                full = sum(int(m) for m in re.findall(r"handover_full (\d+)", text))
                finals = {}  # each lcore's last stats line
                for m in re.finditer(r"^lcore (\d+): .*", text, re.M):
                    finals[m.group(1)] = m.group(0)
                handed[name].append(sum(int(x) for l in finals.values() for x in re.findall(r"handover_out (\d+)", l)))
                res[name].append((gbps, per_cpu))
                cyc = ", ".join(f"lcore {k} {v:.0f}" for k, v in sorted(cycles.items()))
                print(f"round {r + 1} {name:8}: {gbps:6.1f} Gbps of input, {cores:.2f} cores to the datapath, "
                      f"{per_cpu:6.1f} Gbps per datapath CPU-second; {100 * useful:.0f}% of the engine's packets "
                      f"new to their slot; busy cycles per packet taken in: {cyc}; handover_full {full}", flush=True)
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
        handoff = subprocess.run([os.path.join(os.path.dirname(INAGG), "..", "..", "bench", "bench_handoff")],
                                 capture_output=True, text=True).stdout
        print(handoff.splitlines()[0] if handoff else "bench_handoff did not run", flush=True)
        two = re.search(r"two_cores_vs_one=([0-9.]+)", handoff)
        print(f"job_2channels_vs_1={med['channels2'][0] / med['one'][0]:.2f} "
              f"channels2_handed_over={max(handed['channels2'])} "
              f"handover_vs_1={med['handover'][0] / med['one'][0]:.2f} "
              f"one_gbps={med['one'][0]:.1f} "
              f"two_cores_vs_one={two.group(1) if two else '?'}")
    finally:
        subprocess.run(["rm", "-rf", d, f"/var/run/dpdk/{prefix}"])


if __name__ == "__main__":
    main()
