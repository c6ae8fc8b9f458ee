#!/usr/bin/python3
"""The torch.distributed backend "inagg" and PyTorch's store, which is not authenticated: another
process that reaches the store writes the backend's keys (no root, loopback, no appliance).

Each case runs the backend's process group (inagg._torch.ProcessGroupInagg, as inagg.torch makes
it: the store prefixed inagg/1/, an inner Gloo group) in one process and, in another, a process
that is not a rank: it holds the other rank's place in the inner Gloo group, connected to the same
TCPStore, and writes that rank's values itself. Its MACs are computed here with Python's hmac
(the scheme of src/torchdist/process_group.cpp, StoreSeal), independently of the backend's code.
The control socket does not exist, so a set-up that accepts every value ends at rank 0's
registration ("the appliance cannot be reached").

  1. INAGG_EXCHANGE_SECRET on the rank; the other process writes rank 1's endpoint
     (a) as plain text, without a MAC;
     (b) with a MAC under another secret;
     (c) as rank 0's own sealed endpoint, moved under rank 1's key;
     (d) with a MAC under the job's secret (the control: accepted, the set-up goes on to the
         registration), then rank 1's "open";
     rank 0 must refuse (a)-(c) with an error naming the key endpoint/1, before registering.
  2. The same secret in INAGG_EXCHANGE_SECRET_FILE (mode 0600) on rank 1, the other process as
     rank 0 sealing rank 0's endpoint and "open" under the secret, then "job" under another secret:
     rank 1 must refuse the key job.
  3. No secret: two real ranks, each initialising twice; rank 0 makes the secret and puts it in the
     store: both reach the registration, and each process says once (not twice) that the meeting is
     only as safe as the store.

    backend_store.py            the test
    backend_store.py ROLE ...   one process (what the test starts)
"""
import hashlib
import hmac
import os
import re
import socket
import subprocess
import sys
from datetime import timedelta

PREFIX = "inagg/1/"
SECRET = "store-test-secret-0123456789"
TIMEOUT = timedelta(seconds=30)


def connect(port, rank):
    """The TCPStore (rank 0 hosts it)."""
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", port, 2, rank == 0, TIMEOUT)


def gloo_group(store, rank, prefix=PREFIX):
    """This process's place in the inner Gloo group, as inagg.torch makes it."""
    import torch.distributed as dist
    return dist.ProcessGroupGloo(dist.PrefixStore(prefix + "gloo/", store), rank, 2, TIMEOUT)


def seal(secret, writer, key, value, prefix=PREFIX, size=2, job_id=0):
    binding = f"inagg-torch-store\n{prefix}\n{size}\n{job_id}\n{writer}\n{key}\n{value}"
    return hmac.new(secret.encode(), binding.encode(), hashlib.sha256).hexdigest() + " " + value


def rank_role(port, rank, times):
    """A real rank: the backend's process group, `times` initialisations; prints how each ended."""
    import torch.distributed as dist

    import inagg.torch
    from inagg import _torch
    store = connect(port, rank)
    for generation in range(1, times + 1):
        prefix = f"inagg/{generation}/"
        gloo = gloo_group(store, rank, prefix)
        options = inagg.torch.Options(control="/nonexistent/ctl.sock", address=f"127.79.6.{rank + 1}")._native(None)
        options.store_prefix = prefix
        try:
            _torch.ProcessGroupInagg(dist.PrefixStore(prefix, store), rank, 2, gloo, options, TIMEOUT)
            print("set-up returned", flush=True)
        except RuntimeError as e:
            print(f"raised: {e}", flush=True)
        del gloo
        if rank == 0:
            store.wait([f"{prefix}done"])  # the host of the store outlives its client's reads
        else:
            store.set(f"{prefix}done", "1")


def other_role(port, case):
    """The process that is not a rank (case 1*: in rank 1's place; case 2: in rank 0's)."""
    import torch.distributed as dist
    rank = 0 if case == "job" else 1
    hosted = connect(port, rank)
    _gloo = gloo_group(hosted, rank)
    store = dist.PrefixStore(PREFIX, hosted)  # the backend's keys, as any client of the store can write them
    if case == "job":
        # Rank 1's endpoint is its own; rank 0's values are sealed, then the job under another secret.
        store.set("endpoint/0", seal(SECRET, 0, "endpoint/0", "endpoint rank=0 gid=127.79.6.9 "
                                              "send_qpn=0x111 recv_qpn=0x112 start_psn=0x0 recv_addr=0x7f0000000000 "
                                              "recv_rkey=0x1234 payload=1024 workers=2"))
        store.wait(["open/1"])
        store.set("open/0", seal(SECRET, 0, "open/0", "ok"))
        store.set("job", seal("another-secret-0123456789", 0, "job", "7 0 0"))
        print("wrote rank 0's endpoint and open, and a job under another secret", flush=True)
        hosted.wait([PREFIX + "done"])
        return
    store.wait(["endpoint/0"])
    theirs = store.get("endpoint/0").decode()
    mac, value = theirs.split(" ", 1)
    payload = re.search(r"payload=(\d+)", value).group(1)
    mine = ("endpoint rank=1 gid=127.79.6.9 send_qpn=0x111 recv_qpn=0x112 start_psn=0x0 recv_addr=0x7f0000000000 "
            f"recv_rkey=0x1234 payload={payload} workers=2")
    # Checked against rank 0's own value: the scheme here is the backend's.
    if seal(SECRET, 0, "endpoint/0", value) != theirs:
        print(f"FAIL: rank 0's endpoint does not carry the MAC computed here: {theirs}", flush=True)
    forged = {"plain": mine, "other-secret": seal("another-secret-0123456789", 1, "endpoint/1", mine),
              "moved": theirs, "sealed": seal(SECRET, 1, "endpoint/1", mine)}[case]
    store.set("endpoint/1", forged)
    print(f"wrote endpoint/1: {forged[:90]}", flush=True)
    if case == "sealed":
        store.wait(["open/0"])
        store.set("open/1", seal(SECRET, 1, "open/1", "ok"))
    hosted.set(PREFIX + "done", "1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(procs, env_of):
    """Starts every (name, args) of `procs` at once; their outputs by name."""
    started = {}
    for name, args in procs:
        started[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args, env=env_of(name),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = {}
    for name, p in started.items():
        try:
            outs[name] = p.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            outs[name] = p.communicate()[0] + "\n(killed after 120 s)"
    return outs


def test_main():
    base = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    for k in ("INAGG_EXCHANGE_SECRET", "INAGG_EXCHANGE_SECRET_FILE", "INAGG_CONTROL"):
        base.pop(k, None)
    failed = []

    def expect(what, out, want, absent=None):
        if want not in out or (absent and absent in out):
            failed.append(f"{what}: want '{want}'" + (f" and no '{absent}'" if absent else "") + f" in:\n{out}")
        else:
            line = next(l for l in out.splitlines() if want in l)
            print(f"ok: {what}: {line.strip()[:400]}")

    with_secret = dict(base, INAGG_EXCHANGE_SECRET=SECRET)
    for case in ("plain", "other-secret", "moved"):
        port = str(free_port())
        outs = run([("rank", ["rank", port, "0", "1"]), ("other", ["other", port, case])], lambda _: with_secret)
        if "FAIL" in outs["other"]:
            failed.append(f"1. ({case}) the other process: {outs['other']}")
        expect(f"1. rank 1's endpoint written by another process ({case})", outs["rank"],
               "refused the store's value under key 'endpoint/1' (store prefix 'inagg/1/', rank 1's): it does not carry a valid HMAC",
               absent="appliance cannot be reached")
    port = str(free_port())
    outs = run([("rank", ["rank", port, "0", "1"]), ("other", ["other", port, "sealed"])], lambda _: with_secret)
    expect("1d. the control: rank 1's endpoint sealed under the job's secret is taken", outs["rank"],
           "the appliance cannot be reached at /nonexistent/ctl.sock", absent="refused the store's value")

    secret_dir = os.environ.get("TMPDIR", "/tmp")
    secret_file = os.path.join(secret_dir, f"inagg-store-secret-{os.getpid()}")
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (SECRET + "\n").encode())
    os.close(fd)
    try:
        port = str(free_port())
        outs = run([("other", ["other", port, "job"]), ("rank", ["rank", port, "1", "1"])],
                   lambda _: dict(base, INAGG_EXCHANGE_SECRET_FILE=secret_file))
        expect("2. the job's id written by another process under another secret", outs["rank"],
               "refused the store's value under key 'job' (store prefix 'inagg/1/', rank 0's)")
    finally:
        os.unlink(secret_file)

    port = str(free_port())
    outs = run([("rank0", ["rank", port, "0", "2"]), ("rank1", ["rank", port, "1", "2"])], lambda _: base)
    for name in ("rank0", "rank1"):
        warnings = outs[name].count("WARNING: no exchange secret was given")
        if warnings != 1:
            failed.append(f"3. {name} warned {warnings} times over two initialisations, not once:\n{outs[name]}")
        else:
            print(f"ok: 3. {name} warned once over two initialisations that the meeting is only as safe as the store")
    expect("3. without a secret, rank 0 reaches the registration (twice)", outs["rank0"],
           "the appliance cannot be reached at /nonexistent/ctl.sock")
    if outs["rank0"].count("the appliance cannot be reached") != 2:
        failed.append(f"3. rank 0 did not reach the registration in both initialisations:\n{outs['rank0']}")
    expect("3. and rank 1 hears why", outs["rank1"], "rank 0 could not register the job")

    for f in failed:
        print(f"FAIL: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        rank_role(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        sys.stdout.flush()
        os._exit(0)  # without torch's destructors at exit (examples/train_digits.py says why)
    if sys.argv[1:2] == ["other"]:
        other_role(int(sys.argv[2]), sys.argv[3])
        sys.stdout.flush()
        os._exit(0)
    sys.exit(test_main())
