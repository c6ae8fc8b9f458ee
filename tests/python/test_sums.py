#!/usr/bin/python3
"""One rank of a checked allreduce through the appliance, from Python: inagg.Communicator with
the job registered by rank 0, buffers from one element to several chunks (chunk_bytes is small
here, so a buffer goes as several allreduces of whole messages), every result compared bit for
bit with the appliance's contract computed here with numpy: the sum in rank order, fp32 in fp32,
fp16 and bf16 summed in fp32 and rounded once to nearest even, int32 wrapping (docs/protocol.md).
Every rank draws every rank's input from the same seeds, so each can compute the reference.
Rank 0 prints "expected_slots N": the slots the appliance must have released for these
allreduces (each chunk is padded to whole messages of `message` bytes, two elements of each the
tally, one slot per packet of `payload` bytes), for the caller to compare with `inagg-ctl stats`.

    test_sums.py --rank R --world-size N --control SOCKET --job-id ID --dtype fp32|fp16|bf16|int32
"""
import argparse
import sys

import numpy as np

import inagg

MESSAGE, PAYLOAD, CHUNK = 16384, 1024, 65536


def inputs(dtype, rank, count):
    rng = np.random.default_rng(7919 * rank + count)
    if dtype == "int32":
        return rng.integers(-2**31, 2**31 - 1, count, dtype=np.int32)
    x = rng.standard_normal(count).astype(np.float32) * np.float32(100)
    if dtype == "fp32":
        return x
    if dtype == "fp16":
        return x.astype(np.float16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits (truncated; any bf16 will do)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, as the appliance does (no NaNs here)."""
    b = x.view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def reference(dtype, world, count):
    xs = [inputs(dtype, r, count) for r in range(world)]
    if dtype == "int32":
        acc = xs[0].astype(np.int64)
        for x in xs[1:]:
            acc = (acc + x) & 0xFFFFFFFF
        return acc.astype(np.uint32).view(np.int32)
    wide = [bf16_to_f32(x) if dtype == "bf16" else x.astype(np.float32) for x in xs]
    acc = wide[0].copy()
    for x in wide[1:]:
        acc = acc + x  # float32 + float32, in rank order
    if dtype == "fp32":
        return acc
    return acc.astype(np.float16) if dtype == "fp16" else f32_to_bf16(acc)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--job-id", type=int, required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--channels", type=int, default=1)
    a = p.parse_args()
    es = inagg.dtype_size(a.dtype)
    sizes = [1, 1000, MESSAGE // es * 3 + 5, CHUNK // es * 2 + 17]  # one element .. three chunks with a tail
    comm = inagg.Communicator(a.rank, a.world_size, control=a.control, job_id=a.job_id, dtype=a.dtype, message=MESSAGE,
                              payload=PAYLOAD, chunk_bytes=CHUNK, ack_timeout_ms=100, timeout_s=60,
                              channels=a.channels)
    bad = 0
    slots = 0
    for count in sizes:
        buf = inputs(a.dtype, a.rank, count)
        comm.allreduce_(buf)
        want = reference(a.dtype, a.world_size, count)
        if buf.tobytes() != want.tobytes():
            diff = np.flatnonzero(buf.view(f"u{es}") != want.view(f"u{es}"))
            print(f"FAIL: rank {a.rank}, {a.dtype}, {count} elements: {diff.size} differ from the rank-ordered sum "
                  f"(first at {diff[0]}: got {buf[diff[0]]}, want {want[diff[0]]})")
            bad += 1
        # Every message carries the tally in its first and last element (docs/protocol.md, "The
        # tally"): MESSAGE - 2 elements of data, and a chunk is the data of CHUNK / MESSAGE messages.
        nbytes, per = count * es, MESSAGE - 2 * es
        for off in range(0, nbytes, CHUNK // MESSAGE * per):
            chunk = min(CHUNK // MESSAGE * per, nbytes - off)
            slots += -(-chunk // per) * (MESSAGE // PAYLOAD)
    comm.close()
    if a.rank == 0:
        print(f"expected_slots {slots}")
    if bad:
        return 1
    print(f"ok: rank {a.rank}, {a.dtype}: {len(sizes)} allreduces ({', '.join(map(str, sizes))} elements) "
          f"equal the rank-ordered sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
