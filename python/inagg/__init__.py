"""inagg from Python: allreduce through the in-network aggregation appliance.

A :class:`Communicator` is one rank of an inagg job, as ``inagg-worker --mode ina`` runs it: the
software RoCEv2 RC transport of the client library (``inagg::client``), the rack plan (rank r at
``ip_base + r + 1``, RDMA-WRITEing to rank (r + 1) % world_size through the appliance) and the
job's registration on the appliance's control socket (rank 0 adds it, every rank waits until it
is active)::

    import inagg
    comm = inagg.Communicator(rank, 4, control="/tmp/ctl.sock", job_id=1, dtype="fp32")
    comm.allreduce_(tensor)          # in place: every rank holds the sum over the 4 ranks

(with ``INAGG_EXCHANGE_SECRET`` set on every rank: the ranks meet with the job's secret, see
``exchange_secret_file`` and ``store`` below).

``allreduce_`` takes a contiguous CPU ``torch.Tensor`` (float32, float16, bfloat16, int32) or any
writable C-contiguous buffer-protocol object (numpy arrays, ``array.array``, ``bytearray`` seen
through ``memoryview(...).cast(...)``) of the job's dtype: format ``f`` for fp32, ``e`` for fp16,
``i`` for int32, and ``H`` (raw 16-bit words) for fp16 or bf16. Nothing is copied between Python
and C++: the library reads and writes the caller's memory, with the GIL released while it works.
Every failure is an :class:`InaggError` carrying the client library's reason. Between
allreduces a thread keeps the transport running (acknowledging, retransmitting), as a NIC would.

DDP communication hooks for PyTorch are in :mod:`inagg.torch`.
"""

import os
import secrets
import sys

from inagg._inagg import DTYPES, InaggError, _Communicator, dtype_size

__all__ = ["Communicator", "InaggError", "DTYPES", "dtype_size"]

# torch dtypes by their name here; filled lazily, so that importing inagg never imports torch.
_TORCH_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int32": "int32"}


_EXCHANGE_SECRET_ENV = "INAGG_EXCHANGE_SECRET"


_STORE_SECRET_WARNING = (
    "inagg: WARNING: no exchange secret was given (INAGG_EXCHANGE_SECRET or exchange_secret_file), so rank 0 made "
    "one and put it in the store: the ranks' meeting is then only as safe as the store, and PyTorch's store is not "
    "authenticated: any host that reaches it (MASTER_ADDR:MASTER_PORT) can read the secret and join the job as a "
    "rank. Give every rank the job's secret: export INAGG_EXCHANGE_SECRET=$(head -c 24 /dev/urandom | base64) where "
    "the job is launched, or exchange_secret_file=FILE (mode 0600)")
_store_secret_warned = False


def _secret_from_store(store, rank):
    """The meeting's secret through a store every rank shares: rank 0 makes it at random (said once
    per process, loudly). Every rank makes its communicators in the same order, so its own count of
    them names the same key on every rank (a store keeps an earlier communicator's keys)."""
    global _store_secret_warned
    if not _store_secret_warned:
        _store_secret_warned = True
        print(_STORE_SECRET_WARNING, file=sys.stderr, flush=True)
    generation = store.add(f"inagg/communicator/{rank}", 1)
    key = f"inagg/exchange-secret/{generation}"
    if rank == 0:
        store.set(key, secrets.token_hex(16))
    value = store.get(key)
    return value.decode() if isinstance(value, bytes) else str(value)


def _torch_dtype_name(tensor):
    return _TORCH_NAMES.get(str(tensor.dtype).replace("torch.", ""))


class Communicator:
    """One rank of an inagg allreduce job.

    rank, world_size   this rank and the number of ranks (2..64)
    control            the appliance's control socket; rank 0 adds the job there and every rank
                       waits until it is active. None: the job is registered by someone else
                       (inagg-ctl add), and the ranks do not wait. "tcp://HOST:PORT": the
                       appliance's TCP listener, with a tenant's credential (below)
    control_secret_file  tcp:// control: a file (mode 0600) with the tenant's credential, one line
                       SECRET or TENANT SECRET; the environment variable INAGG_CONTROL_SECRET,
                       when set, is taken instead. Never pass a secret itself as an argument.
    job_id             the job's id on the appliance
    dtype              "fp32", "fp16", "bf16" or "int32": the one dtype the appliance sums
    message, payload   RDMA WRITE message size M and path-MTU payload P (M a multiple of P). payload
                       None: what an RDMA NIC would choose from the MTU of the link that holds this
                       rank's address (4096 on the virtual rack's MTU 4200 links; 1024 at MTU 1500,
                       and where the address is on no interface); every rank must use the same
    window             messages in flight per connection
    channels           RC connections to the successor (1..16): message m goes on channel m mod
                       channels, each channel a job of its own on the appliance's lcores (its
                       docs/protocol.md section 22); every rank must give the same
    ack_timeout_ms     the RC requester's ACK timeout; retry: timeouts in a row before it gives up.
                       The appliance holds a slot until every rank's packet is in, so a rank that
                       starts an allreduce late makes the others time out: (retry + 1) x
                       ack_timeout_ms is the skew the ranks may have (default 4 s; the design
                       advises ~1 s x 7 retries for real NICs). Losses are recovered sooner, by
                       the appliance's NAKs and resends.
    ip_base            rank r's address is ip_base + r + 1 (the virtual rack: 10.77.0.1..)
    chunk_bytes        size of the transport's registered regions; a larger buffer is reduced in
                       pieces of this size (rounded up to whole messages)
    timeout_s          how long registration may take, and how long an allreduce may go with
                       nothing arriving before it fails
    exchange_port      with control: rank 0 listens on this TCP port at its address, and every rank
                       meets it there before the first allreduce (and in barrier()), so that no rank
                       sends while another is still starting
    exchange_secret_file, store, insecure_exchange
                       with control, that meeting is authenticated with the job's secret, the same
                       on every rank: the environment variable INAGG_EXCHANGE_SECRET when set (a
                       launcher sets it once for all ranks), else the first line of
                       exchange_secret_file (mode 0600), else one rank 0 makes at random and puts
                       in `store`, a store every rank shares (set/get/add, e.g. torch.distributed's
                       TCPStore or the default group's). With none of them the communicator is
                       refused; insecure_exchange=True meets without a secret (any host that
                       reaches rank 0's port could join the job), on a lab network of your own only
    """

    def __init__(self, rank, world_size, control=None, job_id=1, dtype="fp32", message=65536, payload=None,
                 window=2, ack_timeout_ms=250.0, retry=15, ip_base="10.77.0.0", chunk_bytes=8 << 20, timeout_s=60.0,
                 exchange_port=18516, control_secret_file=None, exchange_secret_file=None, store=None,
                 insecure_exchange=False, channels=1):
        secret = ""
        if control and store is not None and not os.environ.get(_EXCHANGE_SECRET_ENV) and not exchange_secret_file:
            secret = _secret_from_store(store, rank)
        self._c = _Communicator(rank=rank, world_size=world_size, control=control or "", job_id=job_id,
                                dtype=dtype, message=message, payload=payload or 0, window=window,
                                ack_timeout_ms=ack_timeout_ms, retry=retry, ip_base=ip_base,
                                chunk_bytes=chunk_bytes, timeout_s=timeout_s, exchange_port=exchange_port,
                                control_secret_file=control_secret_file or "",
                                exchange_secret_file=exchange_secret_file or "", exchange_secret=secret,
                                insecure_exchange=bool(insecure_exchange), channels=channels)

    rank = property(lambda self: self._c.rank)
    world_size = property(lambda self: self._c.world_size)
    job_id = property(lambda self: self._c.job_id)
    dtype = property(lambda self: self._c.dtype)
    message = property(lambda self: self._c.message)
    payload = property(lambda self: self._c.payload)
    job_text = property(lambda self: self._c.job_text, doc="the job file rank 0 adds (what inagg-ctl add takes)")

    def allreduce_(self, buf):
        """Sums `buf` over every rank, in place; returns `buf`."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(buf, torch.Tensor):
            if buf.device.type != "cpu":
                raise ValueError(f"inagg: allreduce_ takes CPU tensors, this one is on {buf.device}")
            if not buf.is_contiguous():
                raise ValueError("inagg: allreduce_ takes contiguous tensors (call .contiguous() first)")
            name = _torch_dtype_name(buf)
            if name is None:
                raise TypeError(f"inagg: no inagg dtype for {buf.dtype} (float32, float16, bfloat16, int32)")
            self._c.allreduce_ptr(buf.data_ptr(), buf.numel(), name)
            return buf
        self._c.allreduce_buffer(buf)
        return buf

    def allreduce_ptr(self, ptr, count, dtype):
        """Sums `count` elements of `dtype` at address `ptr` in place. The caller keeps the memory
        alive and unchanged by anyone else until this returns."""
        self._c.allreduce_ptr(ptr, count, dtype)

    def counters(self):
        """The transport's counters (packets sent, retransmitted, timeouts, NAKs, accepted,
        duplicates, bad ICRCs) and this communicator's own (allreduces, bytes, messages)."""
        return self._c.counters()

    def job_stats(self):
        """The appliance's counters for this job (`inagg-ctl stats ID`) as a dict of ints."""
        return self._c.job_stats()

    def remove_job(self):
        """Removes the job from the appliance (`inagg-ctl remove ID`): call it on one rank, once
        every rank has closed its communicator."""
        self._c.remove_job()

    def barrier(self, what="barrier"):
        """Returns once every rank called barrier() with the same `what` (needs control=): ranks whose
        work before the next allreduce differs in length meet here instead of one rank's packets
        waiting at the appliance, unacknowledged, for the slowest."""
        self._c.barrier(what)

    def close(self):
        """Final barrier of the transport: keeps answering the predecessor's retransmissions until
        it has been quiet for a few ACK timeouts. Further allreduces fail."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"inagg.Communicator(rank={self.rank}, world_size={self.world_size}, job_id={self.job_id}, "
                f"dtype={self.dtype!r}, message={self.message}, payload={self.payload})")
