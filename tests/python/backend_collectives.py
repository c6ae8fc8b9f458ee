#!/usr/bin/python3
"""One rank of the torch.distributed backend "inagg" in the virtual rack, started by torchrun
(python3 -m inagg.torchrun, one agent per worker namespace); test_backend.sh runs it.

    backend_collectives.py check OUT_DIR
        dist.init_process_group("inagg"), then every collective checked against a reference
        computed here from every rank's input (each rank draws every rank's input from the same
        seeds): all_reduce of 16 MiB of fp32 (and a few odd sizes) bit for bit against the sum in
        rank order (numpy, the appliance's contract), average, a float64 and an int32 sum and a
        max (through Gloo), reduce_scatter in both forms (the job's dtype: its sum through the
        appliance), broadcast, all_gather in both forms, barrier, and one DDP step without a hook
        against the gradients computed here. Then the process group's counters must say exactly
        which calls went through the appliance and which through Gloo, and (rank 0) the
        appliance's counters for the job must show every slot those sums make released with all
        ranks' packets. Writes OUT_DIR/check.R.json (the counters, the job's id and stats).
    backend_collectives.py loop OUT_DIR
        all_reduce in a loop until it raises (the test kills one rank's process meanwhile); the
        rank writes OUT_DIR/pid.R before its first sum and OUT_DIR/loop.R.json with the error.
"""
import json
import os
import sys
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
    """The slots the appliance releases for a sum of nbytes (client::InaRank: chunks of the
    registered regions, each padded to whole messages of MESSAGE - 2 elements of data)."""
    per = MESSAGE - 2 * element
    chunk = CHUNK // MESSAGE * per
    slots = 0
    for off in range(0, nbytes, chunk):
        slots += -(-min(chunk, nbytes - off) // per) * (MESSAGE // payload)
    return slots


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


def check(out):
    dist.init_process_group("inagg", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    c = Checks(rank)
    if not pg.uses_appliance:
        raise SystemExit(f"rank {rank}: FAIL: the process group does not use the appliance: {pg.gloo_only}")
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

    # reduce_scatter: the whole input summed through the appliance, each rank its shard.
    n = 70000  # two messages and a bit per shard
    whole = [rank_input(r, n * world, 11) for r in range(world)]
    want = whole[0].copy()
    for x in whole[1:]:
        want = want + x
    shard = torch.zeros(n)
    dist.reduce_scatter(shard, list(torch.from_numpy(whole[rank]).chunk(world)))
    c.equal("reduce_scatter (list form)", shard.numpy(), want[rank * n:(rank + 1) * n])
    shard = torch.zeros(n)
    dist.reduce_scatter_tensor(shard, torch.from_numpy(whole[rank]))
    c.equal("reduce_scatter_tensor", shard.numpy(), want[rank * n:(rank + 1) * n])
    appliance_bytes += 2 * 4 * n * world
    slots += 2 * slots_of(4 * n * world, pg.payload)

    # broadcast, all_gather, barrier: Gloo.
    t = torch.from_numpy(rank_input(rank, 4096, 12))
    dist.broadcast(t, src=2 % world)
    c.equal("broadcast from rank 2", t.numpy(), rank_input(2 % world, 4096, 12))
    gathered = [torch.zeros(333) for _ in range(world)]
    dist.all_gather(gathered, torch.from_numpy(rank_input(rank, 333, 13)))
    c.equal("all_gather (list form)", np.stack([g.numpy() for g in gathered]), np.stack([rank_input(r, 333, 13) for r in range(world)]))
    into = torch.zeros(world * 333)
    dist.all_gather_into_tensor(into, torch.from_numpy(rank_input(rank, 333, 13)))
    c.equal("all_gather_into_tensor", into.numpy(), np.concatenate([rank_input(r, 333, 13) for r in range(world)]))
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
    want = {"allreduce_appliance": 6, "allreduce_gloo": 3, "reduce_scatter_appliance": 2, "reduce_scatter_gloo": 0,
            "appliance_bytes": appliance_bytes, "barrier_gloo": 2, "failed": 0}
    for k, v in want.items():
        if got[k] != v:
            c.failed.append(f"counter {k}: {got[k]}, want {v}")
    if got["allgather_gloo"] < 2 or got["broadcast_gloo"] < 2:
        c.failed.append(f"counters allgather_gloo {got['allgather_gloo']}, broadcast_gloo {got['broadcast_gloo']}: "
                        "want at least the 2 calls made here (and DDP's own)")
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
    with open(os.path.join(out, f"check.{rank}.json"), "w") as f:
        json.dump({"job_id": pg.job_id, "counters": got, "job_stats": stats, "failed": c.failed}, f)
    for why in c.failed:
        print(f"rank {rank}: FAIL: {why}", flush=True)
    dist.destroy_process_group()  # every rank: the job leaves the appliance
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


def main():
    what, out = sys.argv[1], sys.argv[2]
    try:
        rc = check(out) if what == "check" else loop(out)
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
