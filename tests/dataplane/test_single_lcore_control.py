#!/usr/bin/python3
"""A single-lcore appliance (-l 0: the main lcore runs the datapath) answers control requests
while it forwards, and its datapath never waits for them.

inagg runs on two net_pcap ports looping a capture (infinite_rx). While a thread samples the
port's PMD RX counter through DPDK telemetry (/ethdev/stats, answered by DPDK's own thread, not
inagg's), this script sends 100 control requests (add, list, stats, stats <id>, remove, a bad
one), each checked against what it must say, while another thread keeps DPDK telemetry's
/inagg/* commands busy (they reach the lcore by the same request path) and three clients connect
without sending anything (each holds a connection until its deadline, which must not hold the rest). The test
fails when a request goes unanswered, an answer is wrong, or the RX counter stands still for
STALL_S while requests are in flight (less the time the lcore's thread spent runnable but waiting
for a CPU, from /proc/PID/schedstat: on a loaded 2-core machine the scheduler alone can hold it
off that long, and that is no stall of the design); then SIGTERM must end inagg cleanly.

  test_single_lcore_control.py INAGG SRCDIR
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

STALL_S = 0.15       # a datapath that served the socket itself would stand still for silent clients
REQUESTS = 100
DEADLINE_S = 90      # the whole run


def fail(msg, log=None):
    print("FAIL:", msg)
    if log and os.path.exists(log):
        print("".join(open(log).readlines()[-25:]))
    sys.exit(1)


def request(path, text, timeout=5.0):
    """One control-socket request in protocol 2's frames (socket.hpp): the server's greeting, the
    request framed, the reply's frame."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        body = text.encode()
        s.sendall(b"request %d\n" % len(body) + body)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        greeting, _, rest = out.partition(b"\n")
        header, _, reply = rest.partition(b"\n")
        if not greeting.startswith(b"inagg-control 2 ") or int(header.split()[1]) != len(reply):
            return f"BAD FRAME: {out[:200]!r}"
        return reply.decode()
    finally:
        s.close()


class Telemetry:
    """A client of DPDK's telemetry socket (what dpdk-telemetry.py speaks)."""

    def __init__(self, prefix):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(5.0)
        self.s.connect(f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2")
        self.max = json.loads(self.s.recv(1024).decode())["max_output_len"]

    def __call__(self, cmd):
        self.s.send(cmd.encode())
        return json.loads(self.s.recv(self.max).decode())

    def close(self):
        self.s.close()


def main():
    inagg, src = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp()
    prefix = f"inagg-1lcore-{os.getpid()}"
    log = f"{tmp}/log"
    sock = f"{tmp}/ctl.sock"
    proc = None
    silent = []
    stop = None
    try:
        gen = subprocess.run(["/usr/bin/python3", f"{src}/scripts/gen-pcap", "--out", tmp, "--workers", "2", "--messages", "2",
                              "--replay", "--background", "10"], capture_output=True, text=True)
        if gen.returncode:
            fail("gen-pcap: " + gen.stderr)
        job = open(f"{tmp}/job.job").read()
        proc = subprocess.Popen(
            [inagg, "-l", "0", "--no-huge", "--no-pci", "-m", "1024", f"--file-prefix={prefix}", "--log-level=lib.eal:error",
             f"--vdev=net_pcap0,rx_pcap={tmp}/port0.pcap,infinite_rx=1", f"--vdev=net_pcap1,rx_pcap={tmp}/port1.pcap,infinite_rx=1",
             "--", "--socket", sock, "--mtu", "9000", "--mbufs", "8192", "--mbuf-budget", "2048"],
            stdout=open(log, "w"), stderr=subprocess.STDOUT)
        t_end = time.monotonic() + DEADLINE_S
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > t_end - 60:
                fail("the control socket never appeared", log)
            time.sleep(0.05)
        if "one lcore (main) for the datapath" not in open(log).read():
            fail("inagg did not run its datapath on the main lcore", log)
        tel = Telemetry(prefix)
        rx = lambda: tel("/ethdev/stats,0")["/ethdev/stats"]["ipackets"]  # noqa: E731
        first = rx()
        while rx() == first:
            if time.monotonic() > t_end - 50:
                fail("no packets received before the requests", log)
            time.sleep(0.01)

        # Sampler: (time, RX packets, the lcore thread's run-queue wait in ns) every ~10 ms, RX on its
        # own telemetry connection. With -l 0 the datapath runs on inagg's main thread.
        samples, stop = [], threading.Event()

        def runqueue_wait_ns():
            with open(f"/proc/{proc.pid}/task/{proc.pid}/schedstat") as f:
                return int(f.read().split()[1])
        tel_errors, tel_calls = [], [0]

        def sample():
            try:
                t = Telemetry(prefix)
                while not stop.is_set():
                    n = t("/ethdev/stats,0")["/ethdev/stats"]["ipackets"]
                    samples.append((time.monotonic(), n, runqueue_wait_ns()))
                    time.sleep(0.01)
                t.close()
            except (OSError, ValueError) as e:
                tel_errors.append(f"sampler: {e!r}")

        # Telemetry's own inagg commands, hammered: they take the request path to the lcore too.

        def hammer():
            try:
                t = Telemetry(prefix)
                while not stop.is_set():
                    for cmd in ("/inagg/jobs", "/inagg/engine", "/inagg/lcores", "/inagg/job,1"):
                        r = t(cmd)
                        tel_calls[0] += 1
                        key = cmd.split(",")[0]
                        if cmd != "/inagg/job,1" and not isinstance(r.get(key), (list, dict)):
                            tel_errors.append(f"{cmd}: {r}")
                t.close()
            except (OSError, ValueError) as e:
                tel_errors.append(f"hammer: {e!r}")

        threads = [threading.Thread(target=sample), threading.Thread(target=hammer)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        rate_before = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        t0 = time.monotonic()
        # Three clients that connect and say nothing: they must not hold the others up.
        for _ in range(3):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(sock)
            silent.append(c)
        added = False
        cycle = ["add", "list", "stats", "stats 1", "bogus", "remove 1"]
        for i in range(REQUESTS):
            verb = cycle[i % len(cycle)]
            text = "add\n" + job if verb == "add" else verb + "\n"
            try:
                reply = request(sock, text)
            except OSError as e:
                fail(f"request {i} ({verb}) not answered within 5 s: {e}", log)
            if verb == "add":
                ok, added = reply == "ok job 1 added\n", True
            elif verb == "remove 1":
                ok, added = reply == "ok job 1 removed\n", False
            elif verb == "list":
                ok = reply.startswith("id=1 state=active dtype=fp32 workers=2 ") if added else reply == "no jobs\n"
            elif verb == "stats":
                ok = reply.startswith("rx_packets ")
            elif verb == "stats 1":
                ok = ("\naggregated_packets " in reply) if added else reply.startswith("error: no job 1")
            else:
                ok = reply.startswith("error: unknown request 'bogus'")
            if not ok:
                fail(f"request {i} ({verb!r}) got: {reply!r}", log)
        t1 = time.monotonic()
        time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join()
        for c in silent:
            c.close()
        if tel_errors:
            fail(f"telemetry: {tel_errors[:3]}", log)
        during = [(t, n, w) for t, n, w in samples if t0 <= t <= t1]
        if len(during) < 10:
            fail(f"only {len(during)} RX samples while the requests ran", log)
        # The longest standstill of the RX counter, less the time the lcore waited for a CPU in it.
        longest = longest_wall = waited = 0.0
        last_t, last_n, last_w = during[0]
        for t, n, w in during[1:]:
            if n != last_n:
                last_t, last_n, last_w = t, n, w
            unexplained = (t - last_t) - (w - last_w) / 1e9
            if unexplained > longest:
                longest, longest_wall, waited = unexplained, t - last_t, (w - last_w) / 1e9
        rate_during = (during[-1][1] - during[0][1]) / (during[-1][0] - during[0][0])
        print(f"longest RX standstill not spent waiting for a CPU: {longest * 1e3:.0f} ms "
              f"({longest_wall * 1e3:.0f} ms, of which {waited * 1e3:.0f} ms runnable but not running)")
        print(f"{REQUESTS} requests in {t1 - t0:.2f} s with {tel_calls[0]} telemetry commands beside them; RX {rate_during / 1e6:.2f} "
              f"Mpps during vs {rate_before / 1e6:.2f} Mpps before (shared cores: indicative)")
        if longest >= STALL_S:
            fail(f"the datapath stood still for {longest_wall * 1e3:.0f} ms ({waited * 1e3:.0f} ms of it waiting for a CPU) "
                 "while requests were served", log)
        tel.close()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            fail("inagg did not exit within 10 s of SIGTERM", log)
        proc = None
        text = open(log).read()
        if rc != 0 or "inagg: final stats" not in text:
            fail(f"exit status {rc} after SIGTERM, or no final stats", log)
        if "Sanitizer" in text or "sanitizer" in text:
            fail("sanitizer report", log)
        print("a single-lcore appliance answers control requests without stalling its datapath")
    finally:
        if stop is not None:
            stop.set()
        for c in silent:
            c.close()
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)


if __name__ == "__main__":
    main()
