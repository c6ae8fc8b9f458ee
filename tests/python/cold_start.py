#!/usr/bin/env python3
"""One rank's first allreduce_ of a large torch tensor, straight after the communicator is made
(the ranks' processes start up to a second apart, by the caller): the sum must be exact. Rank r
contributes (i mod 1000) x (r + 1) at index i, whole numbers that fp32 sums exactly, so the
reference is the plain formula (i mod 1000) x n(n+1)/2, checked element by element with numpy."""
import argparse
import sys

import numpy as np
import torch

import inagg

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("--world-size", type=int, required=True)
p.add_argument("--control", required=True)
p.add_argument("--job-id", type=int, required=True)
p.add_argument("--bytes", type=int, default=64 << 20)
a = p.parse_args()

count = a.bytes // 4
base = torch.arange(count, dtype=torch.int64).remainder_(1000).to(torch.float32)
t = base * float(a.rank + 1)
comm = inagg.Communicator(a.rank, a.world_size, control=a.control, job_id=a.job_id)
comm.allreduce_(t)
want = base.numpy() * float(a.world_size * (a.world_size + 1) // 2)
wrong = int(np.count_nonzero(t.numpy() != want))
c = comm.counters()
comm.close()
if wrong:
    print(f"rank {a.rank}: {wrong} of {count} elements differ from the reference sum", flush=True)
    sys.exit(1)
print(f"ok: rank {a.rank}: first allreduce_ of {a.bytes} bytes exact ({c['timeouts']} ACK timeouts)", flush=True)
