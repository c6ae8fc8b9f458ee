"""inagg for PyTorch: the torch.distributed backend "inagg", and DDP communication hooks.

Importing this module registers the backend, so that a training script selects it as it would
Gloo, and runs under torchrun (``python3 -m inagg.torchrun`` on Debian 12)::

    import torch.distributed as dist
    import inagg.torch
    dist.init_process_group(backend="inagg")        # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    model = torch.nn.parallel.DistributedDataParallel(model)
    ...
    dist.destroy_process_group()                    # the job leaves the appliance

all_reduce with a sum (or an average), reduce_scatter and all_gather of the job's dtype go through
the appliance (the last two in one pass, jobs of their own); every other call goes to a Gloo
group inside the backend, and ``dist.group.WORLD.counters()`` says which way
each went (``COUNTERS`` describes them). Where the appliance is and how this rank reaches it comes
from the environment (or ``pg_options=inagg.torch.Options(...)``):

    INAGG_CONTROL              the appliance's control socket, or tcp://HOST:PORT (its --control-tcp);
                               "none": no appliance, every call through Gloo.
                               Default /run/inagg/inagg.sock. Only rank 0 uses it to register.
    INAGG_CONTROL_SECRET_FILE  tcp://: a file (mode 0600) with the tenant's credential;
    INAGG_CONTROL_SECRET       or the credential itself in the environment (never an argument)
    INAGG_IFNAME, INAGG_ADDRESS  this rank's interface toward the appliance, or its address; default:
                               the address this host sends from toward MASTER_ADDR
    INAGG_EXCHANGE_SECRET      the job's secret, the same on every rank (a launcher sets it once):
    INAGG_EXCHANGE_SECRET_FILE or the first line of this file (mode 0600). Every value the backend
                               puts in PyTorch's store (which is not authenticated) carries an HMAC
                               under it, and a value that does not verify is refused. Without
                               either, rank 0 makes one and puts it in the store, and the backend
                               warns once: the meeting is then only as safe as the store
    INAGG_JOB_ID               the job's id on the appliance; default: one derived from the ranks'
                               addresses (a tenant whose credential owns only some ids sets it)
    INAGG_DTYPE                what the appliance sums: fp32 (default), fp16, bf16, int32
    INAGG_CHANNELS             RC connections per rank for all_reduce, 1 (default) to 16: message m
                               on channel m mod C, each channel a job of its own on one of the
                               appliance's lcores (more lcores for one job); every rank the same
    INAGG_DEBUG=1              one line per call on stderr: where it went and why

The DDP communication hooks are the other way in, beside a Gloo process group, summing gradient
buckets through an ``inagg.Communicator``::

    import inagg, inagg.torch
    dist.init_process_group("gloo", ...)            # Gloo stays for everything else
    comm = inagg.Communicator(rank, world, control=SOCKET, job_id=1, dtype="fp32",
                              store=dist.distributed_c10d._get_default_store())  # the meeting's secret
    state = inagg.torch.InaggState(comm)
    model = DistributedDataParallel(model)
    model.register_comm_hook(state, inagg.torch.allreduce_hook)
    ...
    state.close()

``allreduce_hook`` sums each bucket through the appliance, then divides by the world size (the
mean, as PyTorch's own ``allreduce_hook`` leaves it). ``bf16_compress_hook`` sends the bucket as
bfloat16, half the bytes of fp32 on the wire: the appliance sums bf16 in fp32 and rounds once,
and the sum is divided by the world size back in the bucket's own dtype (it needs a Communicator
with dtype="bf16"). Like PyTorch's hooks they return a ``torch.futures.Future`` of the bucket's
tensor. The allreduces run on one thread of the state, in the order DDP hands the buckets over
(the same on every rank), while the backward pass goes on computing; the communicator releases
the GIL while it works. A failure (the client's reason, e.g. "retry count (7) exceeded") is set
on the future, so DDP raises it from ``backward()``; every later bucket fails with it too.
"""

import atexit
import os
import queue
import threading
import warnings

import torch
import torch.distributed as dist

try:
    from inagg import _torch as _backend
    _backend_missing = None
except ImportError as e:  # built without libtorch-dev
    _backend, _backend_missing = None, e

__all__ = ["Options", "COUNTERS", "InaggState", "allreduce_hook", "bf16_compress_hook"]

# What each of the process group's counters() counts (the first ones; then the transport's).
COUNTERS = dict(_backend.COUNTERS) if _backend else {}


class Options:
    """The backend's options, for ``init_process_group(backend="inagg", pg_options=Options(...))``.
    A field left None is taken from the environment (the module's docstring), else its default.

    control, control_secret_file, exchange_secret_file, job_id, dtype, interface, address, debug: as
                       INAGG_CONTROL ...
    message, payload   RDMA WRITE message size and path-MTU payload (payload None: from the link's
                       MTU, 4096 on MTU 4200 links, 1024 at 1500); every rank must agree
    window             messages in flight per connection
    channels           as INAGG_CHANNELS
    ack_timeout_ms, retry  the RC requester's ACK timeout and retries: (retry + 1) x ack_timeout_ms
                       is the skew the ranks may have at a sum (the appliance holds a rank's packets
                       until every rank's are in)
    chunk_bytes        the transport's registered regions; a larger tensor is summed in pieces
    timeout_s          registration; a sum with nothing arriving for this long fails; how long
                       rank 0 waits for the others at shutdown before it removes the job
    """

    def __init__(self, control=None, control_secret_file=None, job_id=None, dtype=None, interface=None,
                 address=None, message=65536, payload=None, window=2, ack_timeout_ms=250.0, retry=15,
                 chunk_bytes=8 << 20, timeout_s=60.0, debug=None, channels=None, exchange_secret_file=None):
        env = os.environ.get
        self.control = control if control is not None else env("INAGG_CONTROL", "/run/inagg/inagg.sock")
        self.control_secret_file = (control_secret_file if control_secret_file is not None
                                    else env("INAGG_CONTROL_SECRET_FILE", ""))
        self.exchange_secret_file = (exchange_secret_file if exchange_secret_file is not None
                                     else env("INAGG_EXCHANGE_SECRET_FILE", ""))
        self.job_id = int(job_id if job_id is not None else env("INAGG_JOB_ID", "0"))
        self.dtype = dtype or env("INAGG_DTYPE", "fp32")
        self.interface = interface if interface is not None else env("INAGG_IFNAME", "")
        self.address = address if address is not None else env("INAGG_ADDRESS", "")
        self.message, self.payload, self.window = message, payload or 0, window
        self.ack_timeout_ms, self.retry, self.chunk_bytes, self.timeout_s = ack_timeout_ms, retry, chunk_bytes, timeout_s
        self.debug = bool(debug) if debug is not None else env("INAGG_DEBUG", "") not in ("", "0")
        channels = channels if channels is not None else env("INAGG_CHANNELS", "1")
        try:
            self.channels = int(channels)
        except ValueError:
            raise ValueError(f"inagg: INAGG_CHANNELS (channels) must be a number of channels, 1 to 16, not {channels!r}")

    def _native(self, master_addr):
        o = _backend._Options()
        for k in ("control_secret_file", "exchange_secret_file", "job_id", "dtype", "interface", "address", "message",
                  "payload", "window", "channels", "ack_timeout_ms", "retry", "chunk_bytes", "timeout_s", "debug"):
            setattr(o, k, getattr(self, k))
        o.control = "" if self.control == "none" else self.control
        if self.control == "none":
            o.gloo_only = "no appliance (INAGG_CONTROL=none)"
        o.master_addr = master_addr or ""
        return o

    def __repr__(self):
        return "inagg.torch.Options(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


def _master_addr(store):
    """MASTER_ADDR, else the host of the TCPStore under the group's prefixes (init_method tcp://)."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store.host if isinstance(store, dist.TCPStore) else None


# The backend's live process groups: shut down by destroy_process_group, or at interpreter exit.
_live = []


def _create_process_group(backend_options, pg_options):
    if _backend is None:
        raise RuntimeError(f"inagg: the torch.distributed backend was not built ({_backend_missing}): meson builds "
                           "it when libtorch-dev is installed (scripts/setup installs it)")
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"inagg: pg_options must be an inagg.torch.Options, not {type(pg_options).__name__}")
    store, rank, size = backend_options.store, backend_options.group_rank, backend_options.group_size
    timeout = backend_options.timeout
    options = (pg_options or Options())._native(_master_addr(store))
    if backend_options.global_ranks_in_group:
        # new_group(): this process's software endpoint (UDP 4791 at its address) is the default group's.
        options.gloo_only = "a group made by new_group() (the default group holds this rank's endpoint)"
        warnings.warn(f"inagg: {options.gloo_only}: every call of this group goes through Gloo", stacklevel=3)
    # Keys of this initialisation only: torch gives a group made again (destroy, then init) the
    # same prefix, and the store keeps the earlier one's keys. Every rank makes its groups in the
    # same order, so its own count of them is the same on every rank.
    generation = store.add(f"inagg/generation/{rank}", 1)
    prefix = f"inagg/{generation}/"
    gloo = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "gloo/", store), rank, size, timeout)
    options.store_prefix = prefix
    pg = _backend.ProcessGroupInagg(dist.PrefixStore(prefix, store), rank, size, gloo, options, timeout)
    _live.append(pg)
    return pg


def _shutdown(groups):
    for pg in groups:
        pg.shutdown()
        if pg in _live:
            _live.remove(pg)


_torch_destroy_process_group = dist.destroy_process_group


def destroy_process_group(group=None):
    """torch.distributed.destroy_process_group, which also ends the jobs of inagg's process groups
    (shutdown(): the transport quiet, then rank 0 removes the job from the appliance)."""
    if group is None or group is dist.GroupMember.WORLD:
        ending = list(_live)
    else:
        ending = [g for g in _live if g is group]
    _shutdown(ending)
    return _torch_destroy_process_group(group)


if "INAGG" not in dist.Backend._plugins:
    dist.Backend.register_backend("inagg", _create_process_group, extended_api=True)
    # A user's `dist.destroy_process_group()` reaches the jobs through these two names.
    dist.destroy_process_group = destroy_process_group
    dist.distributed_c10d.destroy_process_group = destroy_process_group
    atexit.register(lambda: _shutdown(list(_live)))


class InaggState:
    """The hooks' state: the communicator and the thread that feeds it buckets in order.

    asynchronous=False runs each allreduce inside the hook instead (no overlap with backward).
    """

    def __init__(self, comm, asynchronous=True):
        self.comm = comm
        self.world_size = comm.world_size
        self.asynchronous = asynchronous
        self.error = None           # the first failure; every later bucket fails with it
        self._queue = queue.SimpleQueue()
        self._thread = None

    def submit(self, tensor, finish):
        """Future of finish(tensor) once `tensor` is summed in place over every rank."""
        fut = torch.futures.Future()
        if not self.asynchronous:
            self._run(tensor, finish, fut)
            return fut
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="inagg-allreduce", daemon=True)
            self._thread.start()
        self._queue.put((tensor, finish, fut))
        return fut

    def _run(self, tensor, finish, fut):
        if self.error is not None:
            fut.set_exception(self.error)
            return
        try:
            self.comm.allreduce_(tensor)
            result = finish(tensor)
        except Exception as e:  # noqa: BLE001 - handed to DDP through the future
            self.error = e
            fut.set_exception(e)
            return
        fut.set_result(result)

    def _serve(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._run(*item)

    def close(self):
        """Stops the thread (after the buckets already handed over) and closes the communicator."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self.comm.close()


def _check(state, tensor, want):
    if state.comm.dtype != want:
        raise TypeError(f"inagg: this hook sends {want}, but the communicator's job sums {state.comm.dtype}: "
                        f"create the Communicator with dtype={want!r}")


_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "int32"}


def allreduce_hook(state: InaggState, bucket) -> torch.futures.Future:
    """Sums the bucket through inagg and divides it by the world size (the mean gradient)."""
    buf = bucket.buffer()
    _check(state, buf, _DTYPE_NAMES.get(buf.dtype, str(buf.dtype)))
    world = state.world_size
    return state.submit(buf, lambda t: t.div_(world))


def bf16_compress_hook(state: InaggState, bucket) -> torch.futures.Future:
    """Like PyTorch's bf16_compress_hook: the bucket goes over the wire as bfloat16 (half the bytes
    of fp32), the appliance sums it in fp32 and rounds once, and the mean comes back in the
    bucket's own dtype."""
    _check(state, None, "bf16")
    buf = bucket.buffer()
    compressed = buf.to(torch.bfloat16)
    world = state.world_size

    def decompress(summed):
        buf.copy_(summed)
        return buf.div_(world)

    return state.submit(compressed, decompress)


# PyTorch 1.13's DDP refuses any hook whose __name__ is "bf16_compress_hook" unless CUDA 11 and NCCL
# 2.10 are there (it assumes NCCL sums the bf16); this one needs neither.
bf16_compress_hook.__name__ = bf16_compress_hook.__qualname__ = "inagg_bf16_compress_hook"
