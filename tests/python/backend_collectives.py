#!/usr/bin/python3
"""One rank of the torch.distributed backend "inagg" in the virtual rack, started by torchrun
(python3 -m inagg.torchrun, one agent per worker namespace); test_backend.sh runs it.

    backend_collectives.py check OUT_DIR [DTYPE...]
        dist.init_process_group("inagg"), then every collective checked against a reference
        computed here from every rank's input (each rank draws every rank's input from the same
        seeds): all_reduce of 16 MiB of fp32 (and a few odd sizes) bit for bit against the sum in
        rank order (numpy, the appliance's contract), average, a float64 and an int32 sum and a
        max (through Gloo), reduce_scatter in both forms and all_gather in both forms (the job's
        dtype: in one pass through the appliance, their jobs of their own; a reduce-scatter's
        shard against the other ranks' sum in rank order, then the rank's own), broadcast,
        barrier, and one DDP step without a hook against the gradients computed here. Then the
        process group's counters must say exactly which calls went through the appliance and
        which through Gloo, and (rank 0) the appliance's counters for the jobs must show every
        slot those sums make released with all ranks' packets, every reduce-scatter's held packet
        summed and every all-gather placeholder filled. Writes OUT_DIR/check.R.json (the
        counters, the job's id and stats).
        Then, for each DTYPE (bf16, fp16, int32, fp32; DTYPE/C: with INAGG_CHANNELS=C as well, the
        job striped over C connections a rank), a process group made again in the same
        processes with INAGG_DTYPE=DTYPE (a job sums one dtype): all_reduce of that dtype through
        the appliance, bit for bit against the scalar reference (16-bit floats widened to fp32,
        summed in rank order, rounded once to nearest even; int32 wrapping), and against Gloo's
        all_reduce of the same inputs in a Gloo group (int32 equal; 16-bit floats, which Gloo
        rounds after every add, within a few units in the last place); the counters say the
        appliance summed them. Writes OUT_DIR/dtype-DTYPE.R.json (DTYPE/C: dtype-DTYPExC.R.json).
        The last line: "rank R: passed" when every part passed, else "rank R: FAILED".
    backend_collectives.py restart OUT_DIR PAUSE_DIR
        reduce_scatter_tensor, all_gather_into_tensor and all_reduce steps (each checked), a pause
        with nothing in flight (PAUSE_DIR/paused.R; on when PAUSE_DIR/resume appears) while the
        test restarts the appliance with its state directory, then more steps through the
        restarted appliance; the counters say every call went through it, and (rank 0) the
        restarted appliance's jobs summed and filled every packet of the steps after the restart.
        Writes OUT_DIR/restart.R.json.
    backend_collectives.py loop OUT_DIR
        all_reduce in a loop until it raises (the test kills one rank's process meanwhile); the
        rank writes OUT_DIR/pid.R before its first sum and OUT_DIR/loop.R.json with the error.
"""
import json
import os
import sys
import time
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import inagg.torch

MESSAGE, CHUNK = 65536, 8 << 20


def rank_input(rank, count, salt):
    rng = np.random.default_rng(7919 * rank + 31 * salt + count)
    return rng.standard_normal(count).astype(np.float32) * np.float32(100)


def ranked_sum(world, count, salt):
    acc = rank_input(0, count, salt).copy()
    for r in range(1, world):
        acc = acc + rank_input(r, count, salt)  # float32 + float32, in rank order
    return acc


def slots_of(nbytes, payload, element=4):
    """The slots the appliance releases for a sum of nbytes (client::Rank: chunks of the
    registered regions, each padded to whole messages of MESSAGE - 2 elements of data)."""
    per = MESSAGE - 2 * element
    chunk = CHUNK // MESSAGE * per
    slots = 0
    for off in range(0, nbytes, chunk):
        slots += -(-min(chunk, nbytes - off) // per) * (MESSAGE // payload)
    return slots


def rotated_packets(shard_bytes, payload, world, element=4):
    """Per rank's connection and one-pass collective of shard_bytes a rank (one piece: below
    CHUNK / world): the packets of one position's messages, every round (chunk 1)."""
    return -(-shard_bytes // (MESSAGE - 2 * element)) * (MESSAGE // payload)


def rs_reference(rank, world, n, salt):
    """The rank's input to a reduce-scatter of n elements a shard, and its shard of the result:
    the other ranks' sum in rank order (as the appliance adds them), then its own."""
    whole = [rank_input(r, n * world, salt) for r in range(world)]
    others = [x for r, x in enumerate(whole) if r != rank]
    want = others[0].copy()
    for x in others[1:]:
        want = want + x
    return whole[rank], want[rank * n:(rank + 1) * n] + whole[rank][rank * n:(rank + 1) * n]


class Checks:
    def __init__(self, rank):
        self.rank, self.failed = rank, []

    def equal(self, what, got, want):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or got.tobytes() != want.tobytes():
            bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1)) if got.shape == want.shape else []
            at = int(bad[0]) if len(bad) else -1
            self.failed.append(f"{what}: {len(bad)} elements differ (first at {at}: "
                               f"{got.reshape(-1)[at] if at >= 0 else got.shape} != {want.reshape(-1)[at] if at >= 0 else want.shape})")
        else:
            print(f"rank {self.rank}: ok: {what}", flush=True)


def appliance_group(**init):
    """dist.init_process_group("inagg", **init): (rank, world size, the group, its Checks); the
    rank stops unless the group uses the appliance."""
    dist.init_process_group("inagg", timeout=timedelta(seconds=120), **init)
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    if not pg.uses_appliance:
        raise SystemExit(f"rank {rank}: FAIL: the process group does not use the appliance: {pg.gloo_only}")
    return rank, world, pg, Checks(rank)


def check(out):
    rank, world, pg, c = appliance_group()
    print(f"rank {rank}: job {pg.job_id}, this rank at {pg.address}, payload {pg.payload}", flush=True)
    before = pg.counters()
    appliance_bytes, slots = 0, 0

    # all_reduce through the appliance: 16 MiB (two chunks and a tail), sizes around a message.
    for salt, count in enumerate([4 << 20, 1, (MESSAGE - 8) // 4 + 1, 1000]):
        t = torch.from_numpy(rank_input(rank, count, salt))
        dist.all_reduce(t)
        c.equal(f"all_reduce of {count} fp32 (appliance)", t.numpy(), ranked_sum(world, count, salt))
        appliance_bytes += 4 * count
        slots += slots_of(4 * count, pg.payload)
    t = torch.from_numpy(rank_input(rank, 5000, 9))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    c.equal("all_reduce AVG of 5000 fp32 (appliance, then / world)", t.numpy(), ranked_sum(world, 5000, 9) / np.float32(world))
    appliance_bytes += 4 * 5000
    slots += slots_of(4 * 5000, pg.payload)

    # Through Gloo: other dtypes, other reductions.
    t = torch.arange(1000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)
    c.equal("all_reduce of float64 (Gloo)", t.numpy(), np.arange(1000, dtype=np.float64) * sum(range(1, world + 1)))
    t = torch.full((77,), rank + 1, dtype=torch.int32)
    dist.all_reduce(t)
    c.equal("all_reduce of int32 (Gloo: the job sums fp32)", t.numpy(), np.full(77, world * (world + 1) // 2, np.int32))
    t = torch.from_numpy(rank_input(rank, 300, 10))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    c.equal("all_reduce MAX (Gloo)", t.numpy(), np.max([rank_input(r, 300, 10) for r in range(world)], axis=0))

    # reduce_scatter in one pass.
    n = 70000  # two messages and a bit per shard
    mine, want = rs_reference(rank, world, n, 11)
    shard = torch.zeros(n)
    dist.reduce_scatter(shard, list(torch.from_numpy(mine).chunk(world)))
    c.equal("reduce_scatter (list form, one pass)", shard.numpy(), want)
    shard = torch.zeros(n)
    dist.reduce_scatter_tensor(shard, torch.from_numpy(mine))
    c.equal("reduce_scatter_tensor (one pass)", shard.numpy(), want)
    appliance_bytes += 2 * 4 * n * world
    rs_held = 2 * world * rotated_packets(4 * n, pg.payload, world)

    # all_gather in one pass through the appliance; broadcast and barrier: Gloo.
    t = torch.from_numpy(rank_input(rank, 4096, 12))
    dist.broadcast(t, src=2 % world)
    c.equal("broadcast from rank 2", t.numpy(), rank_input(2 % world, 4096, 12))
    gathered = [torch.zeros(333) for _ in range(world)]
    dist.all_gather(gathered, torch.from_numpy(rank_input(rank, 333, 13)))
    c.equal("all_gather (list form, one pass)", np.stack([g.numpy() for g in gathered]), np.stack([rank_input(r, 333, 13) for r in range(world)]))
    into = torch.zeros(world * 333)
    dist.all_gather_into_tensor(into, torch.from_numpy(rank_input(rank, 333, 13)))
    c.equal("all_gather_into_tensor (one pass)", into.numpy(), np.concatenate([rank_input(r, 333, 13) for r in range(world)]))
    appliance_bytes += 2 * 4 * 333 * world
    ag_filled = 2 * world * (world - 2) * rotated_packets(4 * 333, pg.payload, world)
    dist.barrier()

    # One DDP step, no hook: DDP's own reducer sums the gradient bucket (divided by the world
    # size first) through the process group; the weights after one SGD step against the mean
    # gradient over every rank's batch, computed here with torch alone (float32: within 1e-6).
    torch.manual_seed(5)
    model = torch.nn.Linear(16, 4)
    ref = torch.nn.Linear(16, 4)
    ref.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    xs = [torch.from_numpy(rank_input(r, 8 * 16, 14).reshape(8, 16)) for r in range(world)]
    ddp(xs[rank]).square().mean().backward()
    torch.optim.SGD(ddp.parameters(), lr=0.01).step()
    grads = []
    for r in range(world):
        ref.zero_grad()
        ref(xs[r]).square().mean().backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    with torch.no_grad():
        for i, p in enumerate(ref.parameters()):
            p -= 0.01 * sum(g[i] for g in grads) / world
    worst = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    if worst > 1e-6:
        c.failed.append(f"DDP step: the weights differ from the reference by {worst:g}")
    else:
        print(f"rank {rank}: ok: a DDP step (no hook) matches the mean gradient within {worst:.1e}", flush=True)
    ddp_params = sum(p.numel() for p in model.parameters())
    appliance_bytes += 4 * ddp_params
    slots += slots_of(4 * ddp_params, pg.payload)
    dist.barrier()

    after = pg.counters()
    got = {k: after[k] - before.get(k, 0) for k in inagg.torch.COUNTERS}
    # DDP's constructor broadcasts the module's state and all_gathers the parameters' shapes
    # (Gloo); its bucket is one all_reduce through the appliance.
    want = {"allreduce_appliance": 6, "allreduce_gloo": 3, "reduce_scatter_appliance": 2, "reduce_scatter_whole": 0,
            "reduce_scatter_gloo": 0, "allgather_appliance": 2, "appliance_bytes": appliance_bytes, "barrier_gloo": 2,
            "failed": 0}
    for k, v in want.items():
        if got[k] != v:
            c.failed.append(f"counter {k}: {got[k]}, want {v}")
    if got["broadcast_gloo"] < 2:
        c.failed.append(f"counter broadcast_gloo {got['broadcast_gloo']}: want at least the 2 calls made here (and DDP's own)")
    print(f"rank {rank}: counters: " + ", ".join(f"{k} {v}" for k, v in got.items() if v), flush=True)
    stats = None
    if rank == 0:
        stats = {}
        for line in pg.job_stats().splitlines():
            k, _, v = line.partition(" ")
            stats[k] = v
        released, aggregated = int(stats.get("slots_released", -1)), int(stats.get("aggregated_packets", -1))
        if released != slots or aggregated != world * slots or stats.get("held_packets") != "0":
            c.failed.append(f"the appliance released {released} slots (aggregated {aggregated} packets, "
                            f"{stats.get('held_packets')} held) for job {pg.job_id}; the sums make {slots} slots, "
                            f"{world * slots} packets")
        else:
            print(f"rank 0: ok: the appliance summed every slot: {released} slots, {aggregated} packets", flush=True)
        for which, key, want_n in (("reduce_scatter", "slots_released", rs_held), ("all_gather", "placeholders_filled", ag_filled)):
            js = dict(line.partition(" ")[::2] for line in pg.job_stats(which).splitlines())
            if js.get(key) != str(want_n) or js.get("held_packets") != "0":
                c.failed.append(f"the {which} job: {key} {js.get(key)}, held_packets {js.get('held_packets')}; "
                                f"want {want_n} and 0")
            else:
                print(f"rank 0: ok: the {which} job: {key} {want_n}, nothing held", flush=True)
            stats[which] = js
    with open(os.path.join(out, f"check.{rank}.json"), "w") as f:
        json.dump({"job_id": pg.job_id, "counters": got, "job_stats": stats, "failed": c.failed}, f)
    for why in c.failed:
        print(f"rank {rank}: FAIL: {why}", flush=True)
    dist.destroy_process_group()  # every rank: the job leaves the appliance
    return 1 if c.failed else 0


def bf16_bits(f32):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (no NaNs here)."""
    u = np.asarray(f32, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def dtype_case(dtype, rank, count, salt):
    """(rank's input tensor, the reference sum's bits as numpy, a bits view of a tensor, ulp)."""
    if dtype == "int32":
        def gen(r):
            return np.random.default_rng(104729 * r + salt + count).integers(-2**31, 2**31, count, dtype=np.int64).astype(np.int32)
        acc = gen(0).copy()
        for r in range(1, dist.get_world_size()):
            acc = acc + gen(r)  # int32 + int32 wraps
        return torch.from_numpy(gen(rank)), acc, lambda t: t.numpy(), 0.0
    f32 = [rank_input(r, count, salt) for r in range(dist.get_world_size())]
    if dtype == "fp32":
        acc = f32[0].copy()
        for x in f32[1:]:
            acc = acc + x  # float32 adds, in rank order
        return torch.from_numpy(f32[rank].copy()), acc.view(np.uint32), lambda t: t.numpy().view(np.uint32), 2.0**-23
    if dtype == "fp16":
        halves = [x.astype(np.float16) for x in f32]
        acc = halves[0].astype(np.float32)
        for h in halves[1:]:
            acc = acc + h.astype(np.float32)  # float32 adds, in rank order
        return torch.from_numpy(halves[rank]), acc.astype(np.float16).view(np.uint16), \
            lambda t: t.numpy().view(np.uint16), 2.0**-10
    bits = [bf16_bits(x) for x in f32]
    acc = (bits[0].astype(np.uint32) << 16).view(np.float32)
    for b in bits[1:]:
        acc = acc + (b.astype(np.uint32) << 16).view(np.float32)
    return torch.from_numpy(bits[rank].view(np.int16)).view(torch.bfloat16), bf16_bits(acc), \
        lambda t: t.view(torch.int16).numpy().view(np.uint16), 2.0**-7


def as_float(bits, dtype):
    if dtype == "fp32":
        return bits.view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def dtype_check(out, spec):
    """A group made again with the job's dtype and channels from SPEC, DTYPE or DTYPE/CHANNELS."""
    dtype, _, channels = spec.partition("/")
    name = dtype + (f"x{channels}" if channels else "")
    os.environ["INAGG_DTYPE"] = dtype
    os.environ["INAGG_CHANNELS"] = channels or "1"
    # A store of this group's own: torch 1.13 numbers a group made again after
    # destroy_process_group as the first, and its barrier would count the first one's ranks too.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                         timedelta(seconds=120))
    rank, world, pg, c = appliance_group(store=dist.PrefixStore(f"dtype-{name}/", base), rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    element = 4 if dtype in ("int32", "fp32") else 2
    before = pg.counters()
    appliance_bytes, calls = 0, 0
    for salt, count in enumerate([3 << 20, 1001]):
        t, want, bits_of, ulp = dtype_case(dtype, rank, count, 40 + salt)
        g = t.clone()
        dist.all_reduce(t)
        c.equal(f"all_reduce of {count} {dtype} (appliance) against the scalar reference", bits_of(t), want)
        appliance_bytes += element * count
        calls += 1
        try:
            dist.all_reduce(g, group=gloo)
        except RuntimeError as e:  # a dtype this Gloo does not sum: the reference above stands alone
            print(f"rank {rank}: Gloo cannot sum {dtype}: {str(e).splitlines()[0]}", flush=True)
            continue
        if dtype == "int32":
            c.equal(f"all_reduce of {count} int32: appliance against Gloo", t.numpy(), g.numpy())
            continue
        a, b = as_float(bits_of(t), dtype), as_float(bits_of(g), dtype)
        scale = max(float(np.abs(a).max()), float(np.abs(b).max())) or 1.0
        worst = float(np.abs(a - b).max())
        if worst > 4 * ulp * scale:
            c.failed.append(f"all_reduce of {count} {dtype}: the appliance's sum and Gloo's differ by {worst:g} "
                            f"(more than 4 units in the last place of {scale:g})")
        else:
            print(f"rank {rank}: ok: all_reduce of {count} {dtype}: appliance and Gloo within {worst:g} "
                  f"(4 ulp of {scale:g} allowed: Gloo rounds after every add)", flush=True)
    dist.barrier()
    after = pg.counters()
    got = {k: after[k] - before.get(k, 0) for k in inagg.torch.COUNTERS}
    for k, v in {"allreduce_appliance": calls, "allreduce_gloo": 0, "appliance_bytes": appliance_bytes, "failed": 0}.items():
        if got[k] != v:
            c.failed.append(f"counter {k}: {got[k]}, want {v}")
    with open(os.path.join(out, f"dtype-{name}.{rank}.json"), "w") as f:
        json.dump({"dtype": dtype, "channels": int(channels or 1), "job_id": pg.job_id, "counters": got,
                   "failed": c.failed}, f)
    for why in c.failed:
        print(f"rank {rank}: FAIL: {name}: {why}", flush=True)
    dist.destroy_process_group()
    os.environ["INAGG_CHANNELS"] = "1"
    print(f"rank {rank}: {name} {'FAILED' if c.failed else 'passed'}", flush=True)
    return 1 if c.failed else 0


def restart(out, pause_dir):
    """Steps of reduce_scatter_tensor, all_gather_into_tensor and all_reduce (fp32, each checked),
    a pause with nothing in flight (PAUSE_DIR/paused.R, then waits up to 120 s for
    PAUSE_DIR/resume) while the test restarts the appliance with its state directory, then more
    steps: every call after the restart through the restarted appliance's sums and copies."""
    rank, world, pg, c = appliance_group()
    n, before_steps, steps = 70000, 2, 5

    def step(i):
        mine, want = rs_reference(rank, world, n, 100 + i)
        shard = torch.zeros(n)
        dist.reduce_scatter_tensor(shard, torch.from_numpy(mine))
        c.equal(f"step {i}: reduce_scatter_tensor", shard.numpy(), want)
        into = torch.zeros(world * n)
        dist.all_gather_into_tensor(into, torch.from_numpy(rank_input(rank, n, 200 + i)))
        c.equal(f"step {i}: all_gather_into_tensor", into.numpy(),
                np.concatenate([rank_input(r, n, 200 + i) for r in range(world)]))
        t = torch.from_numpy(rank_input(rank, n, 300 + i))
        dist.all_reduce(t)
        c.equal(f"step {i}: all_reduce", t.numpy(), ranked_sum(world, n, 300 + i))

    before = pg.counters()
    for i in range(before_steps):
        step(i)
    dist.barrier()
    open(os.path.join(pause_dir, f"paused.{rank}"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(pause_dir, "resume")):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: FAIL: {pause_dir}/resume did not appear within 120 s")
        time.sleep(0.05)
    for i in range(before_steps, steps):
        step(i)
    dist.barrier()
    after = pg.counters()
    got = {k: after[k] - before.get(k, 0) for k in inagg.torch.COUNTERS}
    for k in ("allreduce_appliance", "reduce_scatter_appliance", "allgather_appliance"):
        if got[k] != steps:
            c.failed.append(f"counter {k}: {got[k]}, want {steps} (every call through the appliance)")
    if got["failed"]:
        c.failed.append(f"counter failed: {got['failed']}")
    stats = {}
    if rank == 0:  # the restarted appliance's counters: every call after the restart in them
        want = {"reduce_scatter": ("slots_released", (steps - before_steps) * world * rotated_packets(4 * n, pg.payload, world)),
                "all_gather": ("placeholders_filled",
                               (steps - before_steps) * world * (world - 2) * rotated_packets(4 * n, pg.payload, world))}
        for which, (key, want_n) in want.items():
            js = dict(line.partition(" ")[::2] for line in pg.job_stats(which).splitlines())
            stats[which] = js
            if js.get(key) != str(want_n) or js.get("held_packets") != "0" or js.get("drop_resuming", "0") == "0":
                c.failed.append(f"the restarted appliance's {which} job: {key} {js.get(key)}, held_packets "
                                f"{js.get('held_packets')}, drop_resuming {js.get('drop_resuming')}; want {want_n}, 0 "
                                "and some (the packets it dropped until the ranks went back)")
            else:
                print(f"rank 0: ok: the restarted appliance's {which} job: {key} {want_n}, nothing held, "
                      f"{js['drop_resuming']} packets dropped while it resumed", flush=True)
    with open(os.path.join(out, f"restart.{rank}.json"), "w") as f:
        json.dump({"job_ids": [pg.job_id, pg.rs_job_id, pg.ag_job_id], "counters": got, "job_stats": stats,
                   "failed": c.failed}, f)
    for why in c.failed:
        print(f"rank {rank}: FAIL: {why}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: {'FAILED' if c.failed else 'passed'}", flush=True)
    return 1 if c.failed else 0


def loop(out):
    dist.init_process_group("inagg", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    pg = dist.group.WORLD
    with open(os.path.join(out, f"pid.{rank}.tmp"), "w") as f:
        f.write(f"{os.getpid()} {pg.job_id}\n")
    os.replace(os.path.join(out, f"pid.{rank}.tmp"), os.path.join(out, f"pid.{rank}"))
    t = torch.ones(1 << 18)
    done, error = 0, None
    try:
        while done < 100000:
            dist.all_reduce(t)
            t.fill_(1.0)
            done += 1
    except Exception as e:  # noqa: BLE001 - what the test checks
        error = str(e)
    print(f"rank {rank}: after {done} sums: {error}", flush=True)
    with open(os.path.join(out, f"loop.{rank}.json"), "w") as f:
        json.dump({"job_id": pg.job_id, "sums": done, "error": error, "counters": pg.counters()}, f)
    dist.destroy_process_group()
    return 0 if error else 1


def check_all(out, dtypes):
    rank = int(os.environ["RANK"])
    rc = check(out)
    for dtype in dtypes:
        rc |= dtype_check(out, dtype)
    print(f"rank {rank}: {'FAILED' if rc else 'passed'}", flush=True)
    return rc


def main():
    what, out = sys.argv[1], sys.argv[2]
    try:
        if what == "check":
            rc = check_all(out, sys.argv[3:])
        elif what == "restart":
            rc = restart(out, sys.argv[3])
        else:
            rc = {"loop": loop}[what](out)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Without torch's destructors at interpreter exit (examples/train_digits.py says why); the
    # process group is shut down already.
    os._exit(rc)


if __name__ == "__main__":
    main()
