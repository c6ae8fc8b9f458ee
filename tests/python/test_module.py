#!/usr/bin/python3
"""The Python module without an appliance: 4 ranks as 4 threads of this process on loopback
addresses (127.S.D.1-4, S from the process id so that two runs at once do not meet; no root
needed), each a Communicator bound to its own address. With no appliance on the path a rank
receives exactly what its predecessor sent, its tallies 1 and not 4 (docs/protocol.md, "The
tally"), so every allreduce_ must raise InaggError naming the tally, and leave the caller's buffer
as it was: nothing that was not summed comes back as a sum. The 4 ranks wait for one another
inside allreduce_, so the test also shows the GIL is released while it works (it would deadlock
otherwise; a deadline turns that into a failure). The rack test (test_sums.py) checks the sums
themselves, with the appliance. Checked: every dtype through the buffer protocol (numpy) and
through torch tensors (bf16 via data_ptr), many messages with a ragged tail, zero elements, the
counters, argument errors (ValueError/TypeError with what to change), an unreachable control
socket, a successor that never answers (InaggError with the RC requester's reason), use after
close, a rank that starts late (its transport served meanwhile: its predecessor meets the tally,
not its retry limit), and the DDP hooks (inagg.torch) on buckets: the unsummed bucket fails the
future and stays as it was, bf16 compression included, and a failure reaching the later futures.

    PYTHONPATH=build/python test_module.py
"""
import os
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

import inagg

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def expect_raises(exc, fragment, fn, what):
    try:
        fn()
    except exc as e:
        check(fragment in str(e), f"{what}: {exc.__name__} without '{fragment}': {e}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__} ({e}), want {exc.__name__}")
        return
    check(False, f"{what}: no {exc.__name__}")


def ranks(n, body, deadline_s=60):
    """Runs body(rank, barrier) on n threads; returns their results (exceptions re-raised)."""
    out, errs = [None] * n, [None] * n
    barrier = threading.Barrier(n, timeout=deadline_s)

    def run(r):
        try:
            out[r] = body(r, barrier)
        except BaseException as e:  # noqa: BLE001
            errs[r] = e
            traceback.print_exc()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        print(f"FAIL: ranks still running after {deadline_s} s (is the GIL released inside allreduce_?)", flush=True)
        sys.exit(1)
    for r, e in enumerate(errs):
        if e is not None:
            raise RuntimeError(f"rank {r} failed: {e!r}")
    return out


N = 4
S = 100 + os.getpid() % 150  # the loopback /16 of this run
SIZES = [1, 3, 255, 16384 + 7, 70000]  # elements: one, a few, under a message, ragged tails, many messages


def inputs(dtype_np, rank, count):
    rng = np.random.default_rng(1000 * rank + count)
    if dtype_np == np.int32:
        return rng.integers(-2**31, 2**31 - 1, count, dtype=np.int32)
    if dtype_np == np.uint16:
        return rng.integers(0, 2**16 - 1, count, dtype=np.uint16)
    return rng.standard_normal(count).astype(dtype_np)


UNSUMMED = f"arrived without the appliance's sum (last tally 1, want {N})"


def buffer_protocol(dtype, dtype_np, base):
    count = SIZES[-1]

    def body(r, barrier):
        comm = inagg.Communicator(r, N, dtype=dtype, ip_base=base, message=4096, payload=1024, chunk_bytes=1 << 20,
                                  ack_timeout_ms=20, timeout_s=20)
        empty = np.zeros(0, dtype=dtype_np)
        check(comm.allreduce_(empty) is empty, f"{dtype}: an empty allreduce_ does not return its buffer")
        a = inputs(dtype_np, r, count)
        expect_raises(inagg.InaggError, UNSUMMED, lambda: comm.allreduce_(a), f"{dtype} via buffer, rank {r}")
        check(a.tobytes() == inputs(dtype_np, r, count).tobytes(), f"{dtype} via buffer: rank {r}'s buffer changed")
        c = comm.counters()
        comm.close()
        return c

    for r, c in enumerate(ranks(N, body)):
        # The empty allreduce sends nothing and counts; the unsummed one is not counted.
        check(c["allreduces"] == 1 and c["messages"] == 0, f"{dtype}: rank {r}'s counters {c}")
        # Every message is 4096 bytes in 4 packets of 1024, 2 elements of each the tally.
        want = -(-count * inagg.dtype_size(dtype) // (4096 - 2 * inagg.dtype_size(dtype))) * 4
        check(c["packets_sent"] >= want, f"{dtype}: rank {r} sent {c['packets_sent']} packets, want {want} at least")
        check(c["bad_icrc"] == 0, f"{dtype}: bad ICRCs on loopback: {c}")
    print(f"ok: {dtype} through the buffer protocol: {count} elements unsummed raise on all {N} ranks, the buffers "
          "untouched; an empty allreduce", flush=True)


def torch_tensors(torch, base):
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "int32": torch.int32}

    def make(dt, r, count):
        g = torch.Generator().manual_seed(1000 * r + count)
        if dt == torch.int32:
            return torch.randint(-2**31, 2**31 - 1, (count,), generator=g, dtype=torch.int32)
        return torch.randn(count, generator=g).to(dt)

    count = SIZES[-1]
    for i, (name, dt) in enumerate(dtypes.items()):
        b = base.replace(".10.", f".{10 + i}.")

        def body(r, barrier):
            comm = inagg.Communicator(r, N, dtype=name, ip_base=b, message=4096, payload=1024, chunk_bytes=1 << 20,
                                      ack_timeout_ms=20, timeout_s=20)
            t = make(dt, r, count).reshape(-1, 2)
            expect_raises(inagg.InaggError, UNSUMMED, lambda: comm.allreduce_(t), f"torch {name}, rank {r}")
            check(torch.equal(t.reshape(-1), make(dt, r, count)), f"torch {name}: rank {r}'s tensor changed")
            if r == 0:
                expect_raises(ValueError, "contiguous", lambda: comm.allreduce_(torch.zeros(8, 2, dtype=dt).t()),
                              f"torch {name}: a transposed tensor")
                other = torch.float64 if dt != torch.float64 else torch.float32
                expect_raises(TypeError, "no inagg dtype", lambda: comm.allreduce_(torch.zeros(4, dtype=other)),
                              f"torch {name}: a float64 tensor")
                wrong = torch.int32 if dt != torch.int32 else torch.float32
                expect_raises(TypeError, f"sums {name}", lambda: comm.allreduce_(torch.zeros(4, dtype=wrong)),
                              f"torch {name}: a tensor of another dtype")
            comm.close()

        ranks(N, body)
    print(f"ok: torch tensors fp32/fp16/bf16/int32: unsummed raise, tensors untouched; bad tensors refused", flush=True)


class Bucket:
    """What DDP hands a hook: buffer() is the flattened gradients."""

    def __init__(self, t):
        self._t = t

    def buffer(self):
        return self._t


def hooks(torch, base):
    import inagg.torch as it

    for name, hook in (("fp32", it.allreduce_hook), ("bf16", it.bf16_compress_hook)):
        b = base if name == "fp32" else base.replace(".20.", ".21.")

        def body(r, barrier):
            comm = inagg.Communicator(r, N, dtype=name, ip_base=b, message=4096, payload=1024, ack_timeout_ms=20, timeout_s=20)
            state = it.InaggState(comm)
            buf = torch.full((5000,), float(r + 1)) * torch.arange(5000, dtype=torch.float32)
            before = buf.clone()
            expect_raises(inagg.InaggError, UNSUMMED, hook(state, Bucket(buf)).wait, f"hook {name}, rank {r}")
            check(torch.equal(buf, before), f"hook {name}: rank {r}'s unsummed bucket changed")
            state.close()

        ranks(N, body)
        print(f"ok: inagg.torch hook {hook.__name__}: an unsummed bucket fails its future and stays as it was",
              flush=True)

    # A failure reaches the hook's future (DDP raises it from backward), and every later bucket's.
    comm = inagg.Communicator(0, 2, ip_base=base.replace(".20.", ".23."), ack_timeout_ms=5, retry=2, timeout_s=10)
    st = it.InaggState(comm)
    futs = [it.allreduce_hook(st, Bucket(torch.ones(100))) for _ in range(2)]
    for i, f in enumerate(futs):
        expect_raises(Exception, "retry count (2) exceeded", f.wait, f"hook on a rank with no successor, bucket {i}")
    st.close()
    print("ok: a failed allreduce fails the hook's future and the next bucket's", flush=True)

    # A hook on a communicator of the wrong dtype says what to do.
    def wrong(r, barrier):
        comm = inagg.Communicator(r, N, dtype="fp32", ip_base=base.replace(".20.", ".22."), timeout_s=5)
        st = it.InaggState(comm)
        if r == 0:
            expect_raises(TypeError, "dtype='bf16'", lambda: it.bf16_compress_hook(st, Bucket(torch.zeros(4))),
                          "bf16 hook on an fp32 communicator")
        st.close()

    ranks(N, wrong)


def served(base):
    """A rank that starts its allreduce long after its predecessor's writes arrived (10 times the
    predecessor's retry budget): its transport is kept running between allreduces, as a NIC's
    would be, so it acknowledges them and the predecessor does not give up: both meet the tally
    (no appliance here), not the RC requester's retry limit."""
    def body(r, barrier):
        comm = inagg.Communicator(r, 2, ip_base=base, ack_timeout_ms=10, retry=3, timeout_s=20)
        barrier.wait()
        if r == 1:
            time.sleep(0.4)
        a = np.full(1000, r + 1, dtype=np.float32)
        expect_raises(inagg.InaggError, "arrived without the appliance's sum (last tally 1, want 2)",
                      lambda: comm.allreduce_(a), f"served: rank {r}")
        c = comm.counters()
        comm.close()
        return c

    results = ranks(2, body)
    print(f"ok: a rank 0.4 s late is served meanwhile (rank 0's ACK timeouts: {results[0]['timeouts']})", flush=True)


class DictStore:
    """The three calls of a torch.distributed store the meeting's secret uses, over a dict."""

    def __init__(self):
        self.values = {}

    def add(self, key, n):
        self.values[key] = int(self.values.get(key, 0)) + n
        return self.values[key]

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.values[key]


def errors(base, torch):
    expect_raises(ValueError, "world_size must be between 2 and 64", lambda: inagg.Communicator(0, 1), "world_size 1")
    expect_raises(ValueError, "rank must be below world_size", lambda: inagg.Communicator(4, 4), "rank 4 of 4")
    expect_raises(ValueError, "dtype must be fp32, fp16, bf16 or int32", lambda: inagg.Communicator(0, 4, dtype="fp64"), "fp64")
    expect_raises(ValueError, "message must be a multiple of payload", lambda: inagg.Communicator(0, 4, message=1000, payload=300),
                  "message 1000")
    expect_raises(ValueError, "payload auto: no path MTU payload", lambda: inagg.Communicator(0, 4, message=1000),
                  "message 1000 with payload auto")
    expect_raises(ValueError, "ip_base must be an IPv4 address", lambda: inagg.Communicator(0, 4, ip_base="::1"), "IPv6 base")
    expect_raises(inagg.InaggError, "cannot bind", lambda: inagg.Communicator(0, 4, ip_base="192.0.2.0"),
                  "an address this host does not have")
    # With control=, the ranks' meeting needs the job's secret: none is a ValueError naming where
    # one comes from; each source of one gets past it (to the missing control socket).
    saved = os.environ.pop("INAGG_EXCHANGE_SECRET", None)
    try:
        expect_raises(ValueError, "the ranks' meeting (control=) needs the job's secret",
                      lambda: inagg.Communicator(0, 4, ip_base=base, control="/nonexistent/inagg.sock", timeout_s=2),
                      "control= without a secret")
        expect_raises(ValueError, "cannot read the secret file",
                      lambda: inagg.Communicator(0, 4, ip_base=base, control="/nonexistent/inagg.sock", timeout_s=2,
                                                 exchange_secret_file="/nonexistent/secret"),
                      "an exchange_secret_file that does not exist")
        store = DictStore()
        expect_raises(inagg.InaggError, "cannot be reached",
                      lambda: inagg.Communicator(0, 4, ip_base=base, control="/nonexistent/inagg.sock", timeout_s=2,
                                                 store=store), "a secret from a store")
        check(len(store.values.get("inagg/exchange-secret/1", b"")) == 32, f"rank 0's secret in the store: {store.values}")
        expect_raises(inagg.InaggError, "cannot be reached",
                      lambda: inagg.Communicator(0, 4, ip_base=base, control="/nonexistent/inagg.sock", timeout_s=2,
                                                 insecure_exchange=True), "insecure_exchange=True")
        os.environ["INAGG_EXCHANGE_SECRET"] = "the job's secret, 0123456789"
        expect_raises(inagg.InaggError, "cannot be reached",
                      lambda: inagg.Communicator(0, 4, ip_base=base, control="/nonexistent/inagg.sock", timeout_s=2),
                      "a control socket that does not exist")
    finally:
        os.environ.pop("INAGG_EXCHANGE_SECRET", None)
        if saved is not None:
            os.environ["INAGG_EXCHANGE_SECRET"] = saved
    # A successor that never answers: the RC requester gives up after its retries.
    comm = inagg.Communicator(0, 2, ip_base=base, ack_timeout_ms=5, retry=2, timeout_s=10)
    # payload auto: the largest of 4096..256 whose RoCEv2 frame (+96 bytes of headers, as Linux's
    # iboe_get_mtu counts) fits the MTU of the interface holding the rank's address (1500 when none
    # does) and that divides the 65536-byte message.
    addr = base.rsplit(".", 1)[0] + ".1"
    mtu = 1500
    for line in subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout.splitlines():
        f = line.split()
        if len(f) > 3 and f[3].split("/")[0] == addr:
            mtu = int(open(f"/sys/class/net/{f[1]}/mtu").read())
    want = next(p for p in (4096, 2048, 1024, 512, 256) if p + 96 <= mtu and 65536 % p == 0)
    check(comm.payload == want, f"payload auto on {addr} (MTU {mtu}): {comm.payload}, want {want}")
    a = np.zeros(100, dtype=np.float32)
    expect_raises(TypeError, "sums fp32", lambda: comm.allreduce_(np.zeros(4, dtype=np.float64)), "a float64 array")
    expect_raises(TypeError, "sums fp32", lambda: comm.allreduce_(np.zeros(4, dtype=np.int32)), "an int32 array")
    expect_raises(BufferError, "", lambda: comm.allreduce_(b"read-only bytes!"), "a read-only buffer")
    expect_raises(ValueError, "C-contiguous", lambda: comm.allreduce_(np.zeros((4, 4), dtype=np.float32)[:, 1]),
                  "a strided array")
    t0 = time.monotonic()
    expect_raises(inagg.InaggError, "retry count (2) exceeded", lambda: comm.allreduce_(a), "no successor")
    check(time.monotonic() - t0 < 5, "no successor: took longer than its retry budget")
    expect_raises(inagg.InaggError, "retry count (2) exceeded", lambda: comm.allreduce_(a), "a broken communicator stays broken")
    comm.close()
    expect_raises(inagg.InaggError, "closed", lambda: comm.allreduce_(a), "use after close")
    expect_raises(inagg.InaggError, "no control socket", comm.job_stats, "job_stats without a control socket")
    del comm
    print("ok: argument errors, unreachable control socket, no successor, closed", flush=True)


def main():
    try:
        import torch
    except ImportError:
        torch = None
        print("note: torch is not installed (python3-torch): the tensor and hook cases are skipped", flush=True)
    errors(f"127.{S}.1.0", torch)
    served(f"127.{S}.30.0")
    for i, (dtype, dtype_np) in enumerate((("fp32", np.float32), ("fp16", np.float16), ("int32", np.int32),
                                           ("bf16", np.uint16), ("fp16", np.uint16))):
        buffer_protocol(dtype, dtype_np, f"127.{S}.{2 + i}.0")
    if torch is not None:
        torch_tensors(torch, f"127.{S}.10.0")
        hooks(torch, f"127.{S}.20.0")
    if failures:
        print(f"FAILED: {len(failures)} checks")
        return 1
    print("ok: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
