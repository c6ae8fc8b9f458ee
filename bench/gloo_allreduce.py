"""One rank of PyTorch Gloo all_reduce on the virtual rack, for bench/allreduce.sh: the same sizes
as inagg-worker's sweep (MIN, MIN * 4, ... up to MAX bytes of fp32), one timed all_reduce per size
after a barrier, as inagg-worker --iters 1 --warmup 0 times its own. Gloo's TCP crosses the
appliance, which only forwards it. Every element is checked against the exact sum (small
integers in fp32). Rank 0 prints `SIZE TIME_US WRONG` per size, ITERS lines per size when given
(bench/ports.sh: the same size timed several times). OP all_gather (bench/collectives.sh): Gloo's
all_gather of SIZE bytes in all (each rank's SIZE / WORLD), every element checked.

    gloo_allreduce.py RANK WORLD MASTER_ADDR PORT MIN MAX [ITERS [OP]]
"""
import sys
import time

import torch
import torch.distributed as dist

rank, world, addr, port, lo, hi = sys.argv[1:7]
rank, world, lo, hi = int(rank), int(world), int(lo), int(hi)
iters = int(sys.argv[7]) if len(sys.argv) > 7 else 1
op = sys.argv[8] if len(sys.argv) > 8 else "all_reduce"
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
expected = sum(range(1, world + 1))
size = lo
while size <= hi:
    for _ in range(iters):
        if op == "all_gather":
            t = torch.full((size // 4 // world,), float(rank + 1), dtype=torch.float32)
            out = [torch.zeros_like(t) for _ in range(world)]
        else:
            t = torch.full((size // 4,), float(rank + 1), dtype=torch.float32)
        dist.barrier()
        t0 = time.perf_counter()
        if op == "all_gather":
            dist.all_gather(out, t)
        else:
            dist.all_reduce(t)
        took = time.perf_counter() - t0
        if op == "all_gather":
            wrong = sum(int((o != r + 1).sum()) for r, o in enumerate(out))
        else:
            wrong = int((t != expected).sum())
        if rank == 0:
            print(f"{size} {took * 1e6:.0f} {wrong}", flush=True)
    size *= 4
dist.destroy_process_group()
