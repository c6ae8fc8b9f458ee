#!/usr/bin/python3
"""The torch.distributed backend "inagg" without an appliance and without root: two ranks on
loopback under torchrun (python3 -m inagg.torchrun --nproc_per_node 2), each initialising the
backend several times in one run.

  1. INAGG_CONTROL=none: every call through Gloo, every result against a reference computed here
     (sums, average, max, reduce_scatter in both forms, all_gather in both forms, broadcast,
     barrier, a subgroup from new_group), and the counters saying so.
  2. Set-up errors reach every rank, each raising with the failing rank's reason instead of
     waiting: two ranks with one address; an unreachable control socket (rank 0's registration);
     a TCP control listener without a credential; a route toward the master that leaves from
     loopback; a dtype the appliance does not sum; UDP 4791 at rank 0's address already held.

    backend_loopback.py            the test: runs torchrun on itself, checks both ranks' output
    backend_loopback.py rank       one rank (what torchrun starts)
"""
import os
import socket
import subprocess
import sys
import traceback
from datetime import timedelta


def rank_main():
    import torch
    import torch.distributed as dist

    import inagg.torch

    rank = int(os.environ["RANK"])
    failed = []

    def expect(what, got, want):
        if torch.is_tensor(got):
            got = got.tolist()
        if got != want:
            failed.append(f"{what}: {got} != {want}")
        else:
            print(f"rank {rank}: ok: {what}", flush=True)

    # 1. No appliance: every call through Gloo.
    os.environ["INAGG_CONTROL"] = "none"
    dist.init_process_group("inagg", timeout=timedelta(seconds=60))
    pg = dist.group.WORLD
    expect("no appliance", (pg.uses_appliance, pg.gloo_only), (False, "no appliance (INAGG_CONTROL=none)"))
    t = torch.arange(6, dtype=torch.float32) + rank
    dist.all_reduce(t)
    expect("all_reduce SUM", t, [1.0, 3.0, 5.0, 7.0, 9.0, 11.0])
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    expect("all_reduce AVG", t, [1.5] * 3)
    t = torch.tensor([rank, 5 - rank], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    expect("all_reduce MAX", t, [1, 5])
    shard = torch.zeros(2)
    dist.reduce_scatter(shard, [torch.full((2,), float((rank + 1) * (i + 1))) for i in range(2)])
    expect("reduce_scatter", shard, [3.0 * (rank + 1)] * 2)
    dist.reduce_scatter_tensor(shard, torch.arange(4, dtype=torch.float32))
    expect("reduce_scatter_tensor", shard, [4.0 * rank, 4.0 * rank + 2])
    into = torch.zeros(4)
    dist.all_gather_into_tensor(into, torch.full((2,), float(rank)))
    expect("all_gather_into_tensor", into, [0.0, 0.0, 1.0, 1.0])
    parts = [torch.zeros(1), torch.zeros(1)]
    dist.all_gather(parts, torch.tensor([rank + 10.0]))
    expect("all_gather", [p.item() for p in parts], [10.0, 11.0])
    t = torch.full((2,), float(rank))
    dist.broadcast(t, src=1)
    expect("broadcast", t, [1.0, 1.0])
    dist.barrier()
    with __import__("warnings").catch_warnings(record=True) as warned:
        __import__("warnings").simplefilter("always")
        sub = dist.new_group([0, 1])
    t = torch.ones(2)
    dist.all_reduce(t, group=sub)
    expect("a new_group's sum, through Gloo", (t.tolist(), sub.uses_appliance, any("new_group" in str(w.message) for w in warned)),
           ([2.0, 2.0], False, True))
    c = pg.counters()
    expect("counters", {k: c[k] for k in ("allreduce_appliance", "allreduce_gloo", "reduce_scatter_gloo",
                                          "allgather_gloo", "broadcast_gloo", "barrier_gloo", "appliance_bytes")},
           {"allreduce_appliance": 0, "allreduce_gloo": 3, "reduce_scatter_gloo": 2, "allgather_gloo": 2,
            "broadcast_gloo": 1, "barrier_gloo": 1, "appliance_bytes": 0})
    dist.destroy_process_group()

    # 2. Set-up errors: every rank raises, with the failing rank's reason.
    local = f"127.79.5.{rank + 1}"
    cases = [
        ("one address for two ranks", {"INAGG_CONTROL": "/nonexistent/ctl.sock", "INAGG_ADDRESS": "127.79.5.1"},
         "rank 1: it has the same address as rank 0 (127.79.5.1): every rank needs an address of its own"),
        ("an unreachable control socket", {"INAGG_CONTROL": "/nonexistent/ctl.sock", "INAGG_ADDRESS": local},
         "the appliance cannot be reached at /nonexistent/ctl.sock"),
        ("a TCP control listener without a credential", {"INAGG_CONTROL": "tcp://127.0.0.1:9", "INAGG_ADDRESS": local},
         "control tcp://127.0.0.1:9 needs a tenant's credential"),
        ("the route toward the master from loopback", {"INAGG_CONTROL": "/nonexistent/ctl.sock"},
         "leaves from the loopback address 127.0.0.1: name the interface toward the appliance (INAGG_IFNAME)"),
        ("a dtype the appliance does not sum", {"INAGG_CONTROL": "/nonexistent/ctl.sock", "INAGG_ADDRESS": local,
                                                "INAGG_DTYPE": "fp64"}, "dtype must be fp32, fp16, bf16 or int32"),
    ]
    # UDP 4791 at rank 0's address already held (by the kernel's RoCE driver, or another worker).
    cases.append(("UDP 4791 already held at rank 0's address", {"INAGG_CONTROL": "/nonexistent/ctl.sock",
                                                               "INAGG_ADDRESS": local},
                  "cannot bind 127.79.5.1 UDP port 4791: Address already in use (is another worker or the kernel's "
                  "RoCE driver using this address?)"))
    for what, env, want in cases:
        for k in ("INAGG_ADDRESS", "INAGG_DTYPE", "INAGG_CONTROL_SECRET"):
            os.environ.pop(k, None)
        os.environ.update(env)
        holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if rank == 0 and what.startswith("UDP 4791"):
            holder.bind(("127.79.5.1", 4791))
        try:
            dist.init_process_group("inagg", timeout=timedelta(seconds=30))
            failed.append(f"{what}: init_process_group returned")
            dist.destroy_process_group()
        except RuntimeError as e:
            if want not in str(e):
                failed.append(f"{what}: raised '{e}', not '{want}'")
            else:
                print(f"rank {rank}: ok: {what}: {e}", flush=True)
        holder.close()
    for why in failed:
        print(f"rank {rank}: FAIL: {why}", flush=True)
    print(f"rank {rank}: {'FAILED' if failed else 'passed'}", flush=True)
    return 1 if failed else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_main():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("INAGG_CONTROL", None)
    cmd = [sys.executable, "-m", "inagg.torchrun", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--monitor_interval", "1", os.path.abspath(__file__), "rank"]
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        print("FAIL: the ranks did not end within 400 s")
        return 1
    lines = [l for l in p.stdout.splitlines() if l.startswith(("rank ", "inagg", "Traceback", "RuntimeError"))]
    print("\n".join(lines))
    ok = p.returncode == 0 and all(f"rank {r}: passed" in p.stdout for r in (0, 1))
    if not ok:
        print(p.stdout[-4000:])
        print(f"FAIL: torchrun exited with {p.returncode}; every rank must print 'passed'")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["rank"]:
        try:
            rc = rank_main()
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        os._exit(rc)  # without torch's destructors at exit (examples/train_digits.py says why)
    sys.exit(test_main())
