#!/usr/bin/python3
"""Data-parallel training of a classifier on scikit-learn's bundled digits (8x8 images, 10
classes; no download), with the gradients summed by Gloo or by inagg.

    train_digits.py train [--rank R --world-size N --master ADDR:PORT]
        --comm gloo|gloo-fp16|backend|inagg|inagg-bf16|gloo-sharded|backend-sharded \
        [--control SOCKET --job-id ID] [--hidden 2048 --depth 2 --epochs 10 ...] --out RUN.json
    train_digits.py report RUN.json... [--plot FILE.png] [--loss-tolerance 1e-3] [--min-accuracy 0.9]
                           [--link-rate BITS_PER_S]

`train` is one rank, started by hand (--rank, --world-size, --master) or by torchrun (which sets
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; on Debian 12 `python3 -m inagg.torchrun`). With
--comm backend the process group is inagg's torch.distributed backend
(init_process_group(backend="inagg")) and DDP runs as it would on any backend, no hook: its
gradient buckets are summed by the appliance, everything else (DDP's broadcast of the initial
weights, evaluation, the final gathering of results) goes through the backend's Gloo group.
Otherwise the process group is Gloo and the gradient buckets are summed by a DDP communication
hook: PyTorch's own allreduce_hook on Gloo (--comm gloo), PyTorch's fp16_compress_hook on Gloo
(--comm gloo-fp16: fp16 on the wire; 1.13 runs its bf16_compress_hook only with NCCL), inagg's
allreduce_hook (--comm inagg: fp32 through the appliance) or inagg's bf16_compress_hook (--comm
inagg-bf16). With --comm backend-sharded (the backend) or gloo-sharded (Gloo) there is no DDP:
the training is sharded (ShardedSGD: gradients reduce-scattered, the optimizer's state 1/n per
rank, the parameters all-gathered after each step). The model is an
MLP 64 -> hidden (x depth) -> 10; the same seed gives every run the same initial weights, the same
train/test split and the same data order (each global batch is split into world-size slices, one
per rank). Rank 0 writes RUN.json: the global mean loss of every step, its time and (hook runs)
the time its buckets spent in communication (from the hook handing a bucket over to its mean being
ready, the union over the step's buckets; it overlaps the backward pass; sharded runs: the
reduce-scatter's and the all-gather's, after the backward pass), the sizes of the
buckets, per epoch the training loss and the test accuracy, and (backend runs) the process
group's counters and the appliance's counters for its job.

`report` prints the runs side by side and checks them: every run's last test accuracy at least
--min-accuracy, and the loss curve of every fp32 run within --loss-tolerance of the first run's
(relative, per step: |a - b| <= tol * max(|a|, |b|)); the runs differ only in the order the sums
are taken. Runs with 16 bits on the wire (bf16, fp16) are checked for accuracy only. With --plot it
draws, for every run, the loss against the step and against the training time (the steps' times
summed), and the step time against the step (matplotlib).
"""
import argparse
import json
import os
import sys
import time
import traceback


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="run one rank")
    t.add_argument("--rank", type=int, help="this rank (default: $RANK, as torchrun sets it)")
    t.add_argument("--world-size", type=int, help="the number of ranks (default: $WORLD_SIZE)")
    t.add_argument("--master", help="rank 0's ADDRESS:PORT for the rendezvous (TCP; default: torchrun's "
                   "$MASTER_ADDR:$MASTER_PORT)")
    t.add_argument("--comm", choices=["gloo", "gloo-fp16", "backend", "inagg", "inagg-bf16", "gloo-sharded",
                                      "backend-sharded"], required=True)
    t.add_argument("--control", help="the appliance's control socket (inagg runs: rank 0 registers the job there; "
                   "backend runs: default $INAGG_CONTROL)")
    t.add_argument("--job-id", type=int, default=1)
    t.add_argument("--ip-base", default="10.77.0.0", help="rank r's address is this + r + 1 (the virtual rack's)")
    t.add_argument("--message", type=int, default=65536, help="RDMA WRITE message bytes")
    t.add_argument("--payload", type=int, default=None, help="path MTU payload bytes (default: auto, from the link MTU)")
    t.add_argument("--window", type=int, default=2)
    # (retry + 1) x ack timeout is the skew the ranks may have (inagg.Communicator's docstring).
    t.add_argument("--ack-timeout-ms", type=float, default=250.0)
    t.add_argument("--retry", type=int, default=15)
    t.add_argument("--hidden", type=int, default=2048)
    t.add_argument("--depth", type=int, default=2, help="hidden layers")
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    t.add_argument("--lr", type=float, default=0.05)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    t.add_argument("--bucket-cap-mb", type=float, default=25.0)
    t.add_argument("--out", help="rank 0 writes the run here (JSON)")
    r = sub.add_parser("report", help="compare runs, check them, plot them")
    r.add_argument("runs", nargs="+", help="RUN.json files; the first is the reference for the loss curves")
    r.add_argument("--plot", help="write a PNG of loss and step time against the step")
    r.add_argument("--loss-tolerance", type=float, default=1e-3)
    r.add_argument("--min-accuracy", type=float, default=0.9)
    r.add_argument("--link-rate", type=float, help="every rank's link rate in bit/s (the rack's --rate): prints the "
                   "in-network and ring bounds of a step's communication beside the times")
    return p.parse_args(argv)


# ---------------------------------------------------------------- train

def load_data(seed):
    """The digits, scaled to [0, 1], split 80/20 (stratified, by the seed)."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return train_test_split(x, d.target.astype(np.int64), test_size=0.2, random_state=seed, stratify=d.target)


def build_model(torch, hidden, depth):
    layers, width = [], 64
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


class CommTimer:
    """Wraps a DDP hook: records each bucket's size and when it was in communication, from the
    hook's call to its future's completion. `seconds()` is the wall time during which at least
    one bucket of the step was (buckets may overlap one another and the backward pass). `hook`
    is what DDP is given (DDP looks at its __name__)."""

    def __init__(self, inner):
        self.intervals = []
        self.buckets = []
        self.wall = []  # per bucket, in the order DDP hands them over: (start, end), time.time()

        def timed_hook(state, bucket):
            start, wall_start = time.perf_counter(), time.time()
            self.buckets.append(bucket.buffer().numel())
            index = len(self.wall)
            self.wall.append(None)

            def done(f):
                self.intervals.append((start, time.perf_counter()))
                self.wall[index] = (wall_start, time.time())
                return f.value()

            return inner(state, bucket).then(done)

        self.hook = timed_hook

    def reset(self):
        self.intervals, self.buckets, self.wall = [], [], []

    def seconds(self):
        return union(self.intervals)


class ShardedSGD:
    """Sharded data parallelism (ZeRO stage 2, FSDP's SHARD_GRAD_OP over one flat buffer): every
    rank holds the whole model for its forward and backward pass; after backward the gradients,
    flattened into one buffer of n equal shards, are reduce-scattered (rank r receives the sum of
    shard r), the optimizer (SGD with momentum, its state a shard per rank: 1/n of DDP's) steps
    that shard of the parameters, and the shards are all-gathered back into every rank's model.
    The model's parameters become views of the flat buffer. The same arithmetic as DDP with SGD
    (each element's mean gradient, then the same update), so the loss curves agree with DDP's up
    to the order of the sums.

    Through the backend: dist.reduce_scatter_tensor and dist.all_gather_into_tensor. On Gloo
    (PyTorch 1.13's has no reduce-scatter): all_reduce of the whole buffer, each rank taking its
    shard, and all_gather into the buffer's chunks, as a user of Gloo would write it."""

    def __init__(self, torch, dist, model, world, rank, lr, gloo):
        self.torch, self.dist, self.world, self.gloo = torch, dist, world, gloo
        self.params = list(model.parameters())
        total = sum(p.numel() for p in self.params)
        self.shard_len = -(-total // world)
        self.flat = torch.zeros(self.shard_len * world)
        self.grads = torch.zeros_like(self.flat)
        off = 0
        for p in self.params:
            n = p.numel()
            self.flat[off:off + n].copy_(p.data.reshape(-1))
            p.data = self.flat[off:off + n].view_as(p)
            off += n
        dist.broadcast(self.flat, 0)  # rank 0's initial weights, as DDP starts
        self.mine = slice(rank * self.shard_len, (rank + 1) * self.shard_len)
        self.shard = self.flat[self.mine].clone().requires_grad_()
        self.opt = torch.optim.SGD([self.shard], lr=lr, momentum=0.9)
        self.reduce_scatter_s = self.all_gather_s = 0.0

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        """The gradients summed and the parameters updated and gathered; returns the seconds
        spent in the reduce-scatter and the all-gather."""
        torch, dist = self.torch, self.dist
        off = 0
        for p in self.params:
            n = p.numel()
            self.grads[off:off + n].copy_(p.grad.reshape(-1))
            off += n
        mine = torch.empty(self.shard_len)
        t0 = time.perf_counter()
        if self.gloo:
            dist.all_reduce(self.grads)
            mine.copy_(self.grads[self.mine])
        else:
            dist.reduce_scatter_tensor(mine, self.grads)
        t1 = time.perf_counter()
        self.shard.grad = mine.div_(self.world)
        self.opt.step()
        t2 = time.perf_counter()
        if self.gloo:
            dist.all_gather(list(self.flat.chunk(self.world)), self.shard.detach())
        else:
            dist.all_gather_into_tensor(self.flat, self.shard.detach())
        t3 = time.perf_counter()
        self.reduce_scatter_s, self.all_gather_s = t1 - t0, t3 - t2
        return (t1 - t0) + (t3 - t2)


def train(a):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(a.threads)
    if a.rank is None or a.world_size is None:
        a.rank, a.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    init = {"init_method": f"tcp://{a.master}"} if a.master else {"init_method": "env://"}
    on_backend = a.comm in ("backend", "backend-sharded")
    sharded = a.comm.endswith("-sharded")
    if on_backend:
        import inagg.torch
        options = inagg.torch.Options(control=a.control, job_id=a.job_id, message=a.message, payload=a.payload,
                                      window=a.window, ack_timeout_ms=a.ack_timeout_ms, retry=a.retry)
        dist.init_process_group("inagg", rank=a.rank, world_size=a.world_size, pg_options=options, **init)
        a.payload = dist.group.WORLD.payload  # what auto chose, for the report
    else:
        dist.init_process_group("gloo", rank=a.rank, world_size=a.world_size, **init)
    world, rank = a.world_size, a.rank

    x_train, x_test, y_train, y_test = load_data(a.seed)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)

    torch.manual_seed(a.seed)
    model = build_model(torch, a.hidden, a.depth)
    params = sum(p.numel() for p in model.parameters())

    state = hook = None
    if on_backend or sharded:
        pass  # DDP as on any backend (its reducer hands the buckets to the process group), or sharded
    elif a.comm in ("gloo", "gloo-fp16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = default_hooks.fp16_compress_hook if a.comm == "gloo-fp16" else default_hooks.allreduce_hook
        hook_state = None
    else:
        import inagg
        import inagg.torch
        comm = inagg.Communicator(rank, world, control=a.control, job_id=a.job_id,
                                  dtype="bf16" if a.comm == "inagg-bf16" else "fp32", message=a.message,
                                  payload=a.payload, window=a.window, ack_timeout_ms=a.ack_timeout_ms, retry=a.retry,
                                  ip_base=a.ip_base,
                                  # the meeting's secret ($INAGG_EXCHANGE_SECRET first), through Gloo's store
                                  store=dist.distributed_c10d._get_default_store())
        a.payload = comm.payload  # what auto chose, for the report
        state = hook_state = inagg.torch.InaggState(comm)
        hook = inagg.torch.bf16_compress_hook if a.comm == "inagg-bf16" else inagg.torch.allreduce_hook

    timer = CommTimer(hook)
    if sharded:
        ddp = model
        opt = ShardedSGD(torch, dist, model, world, rank, a.lr, gloo=not on_backend)
    else:
        ddp = DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
        if hook is not None:
            ddp.register_comm_hook(hook_state, timer.hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    global_batch = a.batch * world
    steps_per_epoch = len(x_train) // global_batch
    steps, epochs = [], []
    if rank == 0:
        print(f"# {a.comm}: {world} ranks, MLP 64-{'-'.join([str(a.hidden)] * a.depth)}-10 ({params} parameters, "
              f"{params * 4 / 2**20:.1f} MiB of fp32 gradients per step), {len(x_train)} train / {len(x_test)} test "
              f"samples, {steps_per_epoch} steps of {a.batch} x {world} per epoch", flush=True)
        if sharded:
            print(f"# sharded: gradients reduce-scattered, optimizer state {opt.shard_len} elements per rank "
                  f"(DDP's: {params}), parameters all-gathered after each step", flush=True)
        print(f"{'epoch':>5} {'train loss':>10} {'test acc':>8} {'step ms':>8} {'comm ms':>8}", flush=True)
    for epoch in range(a.epochs):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(a.seed * 1000 + epoch))
        ddp.train()
        first = len(steps)
        for s in range(steps_per_epoch):
            idx = order[s * global_batch + rank * a.batch: s * global_batch + (rank + 1) * a.batch]
            timer.reset()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x_train[idx]), y_train[idx])
            loss.backward()
            comm_s = opt.step()
            step = {"loss": loss.item(), "step_s": time.perf_counter() - t0}
            if hook is not None:  # the backend's time in communication is not seen from here
                step.update(comm_s=timer.seconds(), buckets=list(timer.buckets), wall=list(timer.wall))
            elif sharded:  # after the backward pass, not overlapping it
                step.update(comm_s=comm_s, reduce_scatter_s=opt.reduce_scatter_s, all_gather_s=opt.all_gather_s)
            steps.append(step)
        # Evaluation: each rank a slice of the test set, the counts summed over Gloo (which also
        # keeps the ranks together, so the next epoch's first allreduce starts without skew).
        ddp.eval()
        with torch.no_grad():
            mine = slice(rank, None, world)
            correct = (model(x_test[mine]).argmax(1) == y_test[mine]).sum()
        tally = torch.tensor([float(correct), sum(st["loss"] for st in steps[first:])], dtype=torch.float64)
        dist.all_reduce(tally)
        epochs.append({"epoch": epoch + 1, "train_loss": tally[1].item() / (world * steps_per_epoch),
                       "test_accuracy": tally[0].item() / len(x_test)})
        if rank == 0:
            recent = steps[first:]
            print(f"{epoch + 1:>5} {epochs[-1]['train_loss']:>10.5f} {epochs[-1]['test_accuracy']:>8.4f} "
                  f"{1e3 * sum(st['step_s'] for st in recent) / len(recent):>8.1f} "
                  f"{ms(mean_comm(recent)):>8}", flush=True)

    transport = backend = None
    if state is not None:
        state.close()
        transport = state.comm.counters()
    if on_backend:
        pg = dist.group.WORLD
        transport = pg.counters()
        if sharded:  # one reduce-scatter of the flat gradient buffer a step
            buckets = [opt.grads.numel() * opt.grads.element_size()]
        else:  # the bucket sizes DDP settled on (bytes), for a check of the appliance's counters
            sizes = ddp._get_ddp_logging_data().get("bucket_sizes", "")
            buckets = [int(b) for b in str(sizes).split(",") if b.strip()]
        backend = {"job_id": pg.rs_job_id if sharded else pg.job_id, "address": pg.address, "bucket_bytes": buckets}
    # Every rank's per-step losses, for the global mean loss of each step, and its transport's counters.
    gathered = [None] * world
    dist.all_gather_object(gathered, ([st["loss"] for st in steps], transport, [st.get("wall") for st in steps]))
    losses = [g[0] for g in gathered]
    walls = [g[2] for g in gathered]
    job_stats = None
    if state is not None and rank == 0 and a.control:
        job_stats = state.comm.job_stats()
    if backend is not None and rank == 0 and dist.group.WORLD.uses_appliance:
        # The job that carried the gradients: the allreduce's (DDP), or the reduce-scatter's
        # (sharded: in one pass, a job of its own beside the all-gather's).
        job_stats = {}
        for line in dist.group.WORLD.job_stats("reduce_scatter" if sharded else "allreduce").splitlines():
            k, _, v = line.partition(" ")
            job_stats[k] = int(v) if v.isdigit() else v
    if rank == 0:
        for i, st in enumerate(steps):
            st["loss"] = sum(l[i] for l in losses) / world
            st.pop("wall", None)
            if all(w[i] for w in walls):
                st.update(comm_parts(w[i] for w in walls))
        measured = steps[2:] if len(steps) > 4 else steps  # the first steps build DDP's buckets
        run = {"comm": a.comm, "world_size": world, "parameters": params, "hidden": a.hidden, "depth": a.depth,
               "batch": a.batch, "seed": a.seed, "message": a.message, "payload": a.payload,
               "steps": steps, "epochs": epochs, "job_id": backend["job_id"] if backend else (
                   a.job_id if state is not None else None),
               "job_stats": job_stats, "transport": [g[1] for g in gathered], "backend": backend,
               "mean_step_s": sum(st["step_s"] for st in measured) / len(measured),
               "mean_comm_s": mean_comm(measured), "mean_wait_s": mean_of(measured, "wait_s"),
               "mean_after_s": mean_of(measured, "after_s")}
        print(f"# {a.comm}: mean step {1e3 * run['mean_step_s']:.1f} ms, communication {ms(run['mean_comm_s'])} ms "
              f"per step (steps 3..{len(steps)}); last test accuracy {epochs[-1]['test_accuracy']:.4f}", flush=True)
        if a.out:
            with open(a.out + ".tmp", "w") as f:
                json.dump(run, f)
            os.replace(a.out + ".tmp", a.out)
    # Every rank is done once this barrier returns. Leave here, before any of torch's destructors
    # run: with PyTorch 1.13, DDP's reducer destroys the Gloo process group it holds when `ddp` goes
    # out of scope, and ~ProcessGroupGloo joins a worker thread that may itself be waiting for the
    # GIL the destroying thread holds (gdb: Reducer::~Reducer -> ~ProcessGroupGloo -> thread::join,
    # the worker in PyEval_AcquireThread): the rank never exits. Nothing is left to write.
    dist.barrier()
    if on_backend:
        dist.destroy_process_group()  # inagg's: the transport quiet, then rank 0 removes the job
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Runs whose gradients cross the wire in 16 bits: half the bytes, and loss curves not compared.
SIXTEEN_BITS = ("inagg-bf16", "gloo-fp16")


def union(intervals):
    """Seconds covered by at least one of the (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def comm_parts(ranks):
    """One step's communication split at each bucket's last arrival, from every rank's (start, end)
    per bucket (wall clock; the ranks share one host's clock here): `wait_s`, the time a rank's
    bucket waited for the last rank to hand over the same bucket (skew: the slowest rank's
    backward pass, not the network), and `after_s`, from that moment until the rank had the sum
    (the transport and the network). Means over the ranks; buckets that overlap count once."""
    ranks = list(ranks)
    buckets = min(len(r) for r in ranks)
    last = [max(r[b][0] for r in ranks) for b in range(buckets)]
    wait = sum(union([(r[b][0], min(last[b], r[b][1])) for b in range(buckets)]) for r in ranks) / len(ranks)
    after = sum(union([(max(last[b], r[b][0]), r[b][1]) for b in range(buckets) if r[b][1] > last[b]])
                for r in ranks) / len(ranks)
    return {"wait_s": wait, "after_s": after}


def mean_of(steps, key):
    """Mean of a per-step figure over the steps, or None when a step lacks it."""
    if not steps or any(key not in st for st in steps):
        return None
    return sum(st[key] for st in steps) / len(steps)


def mean_comm(steps):
    """Mean communication time per step, None when the steps do not record it (backend runs)."""
    return mean_of(steps, "comm_s")


def ms(seconds):
    return "-" if seconds is None else f"{1e3 * seconds:.1f}"


# ---------------------------------------------------------------- report

def report(a):
    runs = []
    for path in a.runs:
        with open(path) as f:
            runs.append(json.load(f))
    ref = runs[0]
    ok = True
    print(f"{'run':<11} {'params':>9} {'steps':>5} {'step ms':>8} {'comm ms':>8} {'last loss':>10} {'test acc':>8}")
    for r in runs:
        print(f"{r['comm']:<11} {r['parameters']:>9} {len(r['steps']):>5} {1e3 * r['mean_step_s']:>8.1f} "
              f"{ms(r['mean_comm_s']):>8} {r['epochs'][-1]['train_loss']:>10.5f} {r['epochs'][-1]['test_accuracy']:>8.4f}")
    print("per epoch (train loss / test accuracy):")
    print("epoch " + " ".join(f"{r['comm']:>20}" for r in runs))
    for e in range(max(len(r["epochs"]) for r in runs)):
        cells = []
        for r in runs:
            ep = r["epochs"][e] if e < len(r["epochs"]) else None
            cells.append(f"{ep['train_loss']:>11.5f} / {ep['test_accuracy']:.4f}" if ep else " " * 20)
        print(f"{e + 1:>5} " + " ".join(cells))
    for r in runs:
        if r.get("mean_after_s") is not None:
            print(f"{r['comm']}: communication per step {ms(r['mean_comm_s'])} ms (rank 0); all ranks' mean: waiting for "
                  f"the last rank's bucket {1e3 * r['mean_wait_s']:.1f} ms, after it arrived {1e3 * r['mean_after_s']:.1f} ms")
        if r.get("transport") and all(r["transport"]) and "packets_sent" in r["transport"][0]:
            tot = {k: sum(t[k] for t in r["transport"]) for k in r["transport"][0]}
            print(f"{r['comm']}: the ranks' transports: {tot['packets_sent']} packets sent, {tot['retransmitted']} again, "
                  f"{tot['timeouts']} ACK timeouts, {tot['naks_received']} NAKs, {tot['duplicates']} duplicates received")
        if r.get("job_stats"):
            js = r["job_stats"]
            print(f"{r['comm']}: the appliance: " + ", ".join(f"{k} {js[k]}" for k in (
                "slots_released", "aggregated_packets", "naks_sent", "resends", "retransmits_answered") if k in js))
    if a.link_rate:
        # A step's gradients, G bytes per rank (fp32; bf16 on the wire halves them): through the
        # appliance each rank sends G and receives G at once, G / rate; a ring sends 2 (n-1) / n G.
        print(f"bounds at {a.link_rate / 1e9:g} Gbit/s per link (the wire alone, no headers):")
        for r in runs:
            g = r["parameters"] * (2 if r["comm"] in SIXTEEN_BITS else 4)
            n = r.get("world_size") or 4
            ina, ring = 8 * g / a.link_rate, 8 * g * 2 * (n - 1) / n / a.link_rate
            comm = r["mean_comm_s"]
            if r["comm"].endswith("-sharded"):
                # A reduce-scatter and an all-gather each carry (n-1)/n G a rank each way at best (a
                # ring's, and the backend's, in one pass through the appliance); on Gloo the
                # reduce-scatter is an all_reduce on a ring.
                part = ring / 2
                appliance = r["comm"] == "backend-sharded"
                rs = part if appliance else ring
                print(f"  {r['comm']}: {g / 1e6:.1f} MB a step; reduce-scatter: bound {1e3 * part:.0f} ms, "
                      f"{'in one pass through the appliance' if appliance else 'an all_reduce on a ring'} "
                      f"{1e3 * rs:.0f} ms; all-gather {1e3 * part:.0f} ms; communication "
                      f"{1e3 * comm:.0f} ms = {comm / (rs + part):.2f}x the sum of those two "
                      f"(reduce-scatter {1e3 * mean_of(r['steps'][2:], 'reduce_scatter_s'):.0f} ms, all-gather "
                      f"{1e3 * mean_of(r['steps'][2:], 'all_gather_s'):.0f} ms)")
                continue
            print(f"  {r['comm']}: {g / 1e6:.1f} MB a step; in-network bound {1e3 * ina:.0f} ms, ring bound "
                  f"{1e3 * ring:.0f} ms; communication "
                  + (f"{1e3 * comm:.0f} ms = {comm / ina:.2f}x the in-network bound, {comm / ring:.2f}x the ring's"
                     if comm else "not measured in this run (the backend's time is inside the step)"))
            if r.get("mean_after_s") is not None:
                after = r["mean_after_s"]
                print(f"    of which waiting for the last rank's bucket {1e3 * r['mean_wait_s']:.0f} ms, after it arrived "
                      f"{1e3 * after:.0f} ms = {after / ina:.2f}x the in-network bound, {after / ring:.2f}x the ring's")
    pairs = [(r, ref) for r in runs[1:]]
    # 16 bits on the wire against Gloo with 16 bits on the wire too, when both ran.
    half = next((r for r in runs if r["comm"] == "gloo-fp16"), None)
    if half is not None:
        pairs += [(r, half) for r in runs if r["comm"] in SIXTEEN_BITS and r is not half]
    for r, base in pairs:
        speed = base["mean_step_s"] / r["mean_step_s"]
        print(f"{r['comm']} vs {base['comm']}: a step {speed if speed >= 1 else 1 / speed:.2f}x "
              f"{'faster' if speed >= 1 else 'slower'} ({1e3 * r['mean_step_s']:.0f} vs {1e3 * base['mean_step_s']:.0f} ms), "
              f"communication {ms(r['mean_comm_s'])} vs {ms(base['mean_comm_s'])} ms per step")
    for r in runs:
        acc = r["epochs"][-1]["test_accuracy"]
        if acc < a.min_accuracy:
            print(f"FAIL: {r['comm']}: test accuracy {acc:.4f} < {a.min_accuracy}")
            ok = False
    for r in runs[1:]:
        if len(r["steps"]) != len(ref["steps"]):
            print(f"FAIL: {r['comm']} ran {len(r['steps'])} steps, {ref['comm']} {len(ref['steps'])}: not the same run")
            ok = False
            continue
        worst, at = 0.0, 0
        for i, (x, y) in enumerate(zip(ref["steps"], r["steps"])):
            rel = abs(x["loss"] - y["loss"]) / max(abs(x["loss"]), abs(y["loss"]), 1e-12)
            if rel > worst:
                worst, at = rel, i
        checked = r["comm"] not in SIXTEEN_BITS
        verdict = "" if not checked else (" (within)" if worst <= a.loss_tolerance else " (OUTSIDE)")
        print(f"loss curves {r['comm']} vs {ref['comm']}: largest relative difference {worst:.2e} at step {at + 1}"
              f"{verdict}{'' if checked else ' (16 bits on the wire: not compared)'}; tolerance {a.loss_tolerance:g}")
        if checked and worst > a.loss_tolerance:
            print(f"FAIL: {r['comm']}'s loss curve leaves {ref['comm']}'s: {worst:.2e} > {a.loss_tolerance:g}")
            ok = False
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax0, ax2) = plt.subplots(3, 1, figsize=(9, 11))
        for i, r in enumerate(runs):
            x = range(1, len(r["steps"]) + 1)
            color = f"C{i}"
            ax1.plot(x, [s["loss"] for s in r["steps"]], label=r["comm"], color=color, linewidth=1,
                     linestyle=["-", "--", ":"][i % 3])
            elapsed, t = [], 0.0  # the run's training time: its steps' times summed (no evaluation)
            for s in r["steps"]:
                t += s["step_s"]
                elapsed.append(t)
            ax0.plot(elapsed, [s["loss"] for s in r["steps"]], label=f"{r['comm']} ({t:.1f} s)", color=color,
                     linewidth=1)
            ax2.plot(x, [1e3 * s["step_s"] for s in r["steps"]], color=color, linewidth=1,
                     label=f"{r['comm']}: step (mean {1e3 * r['mean_step_s']:.0f} ms)")
            if r["mean_comm_s"] is not None:
                ax2.plot(x, [1e3 * s["comm_s"] for s in r["steps"]], color=color, linestyle=":", linewidth=1,
                         label=f"{r['comm']}: communication (mean {1e3 * r['mean_comm_s']:.0f} ms)")
        ax1.set_ylabel("training loss (mean over ranks)")
        ax1.set_yscale("log")
        ax1.legend()
        ax1.set_title(f"digits, {ref['world_size']} ranks, MLP with {ref['parameters']} parameters")
        ax1.set_xlabel("step")
        ax0.set_ylabel("training loss")
        ax0.set_yscale("log")
        ax0.set_xlabel("training time, s (the steps' times summed)")
        ax0.legend()
        ax2.set_ylabel("ms per step")
        ax2.set_xlabel("step")
        ax2.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)
        print(f"plot: {a.plot}")
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


def main(argv):
    a = parse_args(argv)
    if a.command == "report":
        return report(a)
    try:
        rc = train(a)
    except Exception:  # noqa: BLE001
        # A failed rank leaves at once: its peers fail on their own timeouts, and torch's
        # destructors (DDP's reducer, Gloo's threads) are not run half-way through a step.
        traceback.print_exc()
        rc = 1
    # Either way without torch's destructors at interpreter exit: with PyTorch 1.13 a Gloo worker
    # thread can free the last tensor of a finished run while the interpreter finalises, wait for
    # the GIL in that tensor's destructor and keep the process from ever exiting (seen once in a
    # CI run, rank 0 after writing its results). Everything is written and flushed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
