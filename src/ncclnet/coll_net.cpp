// NCCL's collective network (CollNet) over the appliance: each NCCL rank's collective
// communicator is one client::Rank (include/inagg/client/rank.hpp) through a channel of its own
// (INAGG_ADDRESS), its jobs registered by rank 0, its collectives over host memory. NCCL hands
// GPU data to a plugin whose ptrSupport is NCCL_PTR_HOST through host buffers of its own; a CUDA
// or DMA-BUF registration is refused with a sentence saying so.
//
// The ranks meet at rank 0 over TCP (the handles say where; rank 0's carries a nonce the others
// must present, and a job id): the endpoints, then the registration's outcome, then "receiving".
// Each collective runs to completion in its i* call (the request is done at once); a thread keeps
// the transport answering between collectives (Rank::serve), as a NIC would.
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"
#include "plugin_api.hpp"
#include "plugin_env.hpp"

namespace inagg::ncclnet {
namespace {

constexpr uint32_t kHandleMagic = 0x696e6167;  // "inag"
constexpr uint32_t kJobIdLimit = 0x7ffffff0;

// What listen() writes into NCCL's handle (kHandleBytes): where this rank's meeting socket is, and
// (rank 0's being the one used) the communicator's nonce and job id.
struct Handle {
  uint32_t magic;
  in_addr address;
  uint16_t port;
  uint8_t nonce[16];
  uint32_t job_id;
};
static_assert(sizeof(Handle) <= kHandleBytes);

struct ListenComm {
  int fd = -1;
  Handle handle{};
};

// A registered buffer: host memory only.
struct MemoryRegion {
  const uint8_t* base;
  size_t size;
};

// A finished request: each collective completes in its call.
struct Request {
  int bytes = 0;
};

// One NCCL rank's communicator. Who may touch what: `rank` is used under `mutex` only (the
// collectives on NCCL's proxy thread, serve() on `server`), as client::Rank is single-threaded.
struct CollComm {
  unsigned ranks = 0, rank = 0;
  uint32_t job_id = 0;
  std::unique_ptr<client::Rank> inagg;
  std::mutex mutex;
  std::thread server;
  std::atomic<bool> stop{false};
  std::vector<uint8_t> window, shards;  // reduce-scatter and all-gather: the padded shards
};

std::string hex(const uint8_t* b, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {digits[b[i] >> 4], digits[b[i] & 15]};
  return s;
}

ncclResult_t fail(ncclResult_t code, const std::string& why) {
  log_line(kLogWarn, "inagg: %s", why.c_str());
  return code;
}

std::optional<util::Dtype> dtype_of(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return util::Dtype::fp32;
    case ncclFloat16:
      return util::Dtype::fp16;
    case ncclBfloat16:
      return util::Dtype::bf16;
    case ncclInt32:
      return util::Dtype::int32;
    default:
      return std::nullopt;
  }
}

// Why the appliance's job cannot take (type, op), or "".
std::string why_not(ncclDataType_t type, ncclRedOp_t op) {
  const PluginEnv& env = plugin_env();
  const std::optional<util::Dtype> d = dtype_of(type);
  if (op != ncclSum) return "the appliance only sums (ncclSum); reduction " + std::to_string(op) + " is not supported";
  if (!d) return "data type " + std::to_string(type) + " is not one the appliance sums (fp32, fp16, bf16, int32)";
  if (*d != env.dtype)
    return "the job sums " + env.dtype_name + " (INAGG_DTYPE), not " + std::string(util::dtype_name(*d)) +
           ": give that dtype in INAGG_DTYPE for such a communicator";
  return "";
}

// The memory region `mhandle` must hold [data, data + bytes).
std::string why_not_region(const void* mhandle, const void* data, size_t bytes, const char* what) {
  const auto* mr = static_cast<const MemoryRegion*>(mhandle);
  const auto* p = static_cast<const uint8_t*>(data);
  if (!mr) return std::string(what) + ": no registered memory handle";
  if (p < mr->base || p + bytes > mr->base + mr->size)
    return std::string(what) + ": " + std::to_string(bytes) + " bytes lie outside the memory registered for them";
  return "";
}

// The ranks' meeting at rank 0: every rank's line, in rank order (rank 0 gathers, then sends all).
class Meeting {
 public:
  Meeting(const Handle& first, int listen_fd, unsigned ranks, unsigned rank, uint64_t deadline_ns)
      : first_(first), listen_fd_(listen_fd), ranks_(ranks), rank_(rank), deadline_(deadline_ns) {}
  ~Meeting() {
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
  }
  // False with *why; the lines of every rank in *all.
  bool round(const std::string& mine, std::vector<std::string>* all, std::string* why) {
    all->assign(ranks_, "");
    const std::string nonce = hex(first_.nonce, sizeof first_.nonce);
    if (rank_ != 0) {
      if (peers_.empty()) {
        const int fd = connect_tcp(first_.address, first_.port, deadline_, why);
        if (fd < 0) return false;
        peers_.push_back(fd);
      }
      if (!write_all(peers_[0], nonce + " " + std::to_string(rank_) + " " + mine + "\n", deadline_, why)) return false;
      for (unsigned r = 0; r < ranks_; ++r)
        if (!read_line(peers_[0], &(*all)[r], deadline_, why)) return false;
      return true;
    }
    (*all)[0] = mine;
    if (peers_.empty()) {  // the first round: whoever presents the nonce and a rank not yet seen
      peers_.assign(ranks_, -1);
      for (unsigned joined = 1; joined < ranks_;) {
        const int fd = accept_tcp(listen_fd_, deadline_, why);
        if (fd < 0) return false;
        std::string line;
        unsigned r = 0;
        std::string their_nonce;
        std::istringstream in;
        if (read_line(fd, &line, deadline_, why)) in.str(line);
        if (!(in >> their_nonce >> r) || their_nonce != nonce || r == 0 || r >= ranks_ || peers_[r] >= 0) {
          log_line(kLogWarn,
                   "inagg: rank 0 dropped a connection to its meeting that is not one of this communicator's ranks");
          ::close(fd);
          continue;
        }
        peers_[r] = fd;
        std::getline(in >> std::ws, (*all)[r]);
        ++joined;
      }
    } else {
      for (unsigned r = 1; r < ranks_; ++r) {
        std::string line, their_nonce;
        unsigned from = 0;
        if (!read_line(peers_[r], &line, deadline_, why)) return false;
        std::istringstream in(line);
        if (!(in >> their_nonce >> from) || from != r) {
          *why = "rank " + std::to_string(r) + " sent a line out of turn";
          return false;
        }
        std::getline(in >> std::ws, (*all)[r]);
      }
    }
    std::string joined;
    for (const std::string& l : *all) joined += l + "\n";
    for (unsigned r = 1; r < ranks_; ++r)
      if (!write_all(peers_[r], joined, deadline_, why)) return false;
    return true;
  }

 private:
  Handle first_;
  int listen_fd_;
  unsigned ranks_, rank_;
  uint64_t deadline_;
  std::vector<int> peers_;  // rank 0: by rank; the others: rank 0's
};

constexpr const char* kError = "error: ";

// The first rank's line that is an error, as "rank R: why"; "" when none is.
std::string first_error(const std::vector<std::string>& lines) {
  for (size_t r = 0; r < lines.size(); ++r)
    if (lines[r].rfind(kError, 0) == 0)
      return "rank " + std::to_string(r) + ": " + lines[r].substr(std::strlen(kError));
  return "";
}

// The three jobs of a communicator: the allreduce's, then the reduce-scatter's and the all-gather's.
constexpr control::Collective kCollectives[] = {control::Collective::allreduce, control::Collective::reduce_scatter,
                                                control::Collective::all_gather};

ncclResult_t coll_init(Logger log) {
  set_logger(log);
  const PluginEnv& env = plugin_env();
  log_line(kLogInfo, "inagg: CollNet plugin, host buffers (NCCL_PTR_HOST), job dtype %s, appliance %s",
           env.dtype_name.c_str(), env.control.empty() ? "(none: INAGG_CONTROL unset)" : env.control.c_str());
  return ncclSuccess;
}

ncclResult_t coll_init_v11(void** ctx, uint64_t, Logger log) {
  *ctx = nullptr;
  return coll_init(log);
}

ncclResult_t coll_devices(int* ndev) {
  const PluginEnv& env = plugin_env();
  std::string why = env.control.empty() ? "INAGG_CONTROL (the appliance's control socket) is not set"
                    : !env.address      ? env.why_no_address
                                        : env.why_bad_dtype;
  *ndev = why.empty() ? 1 : 0;
  if (!why.empty()) log_line(kLogWarn, "inagg: CollNet is off: %s", why.c_str());
  return ncclSuccess;
}

void fill_properties(PropertiesV10* p) {
  std::memset(p, 0, sizeof *p);
  static char name[] = "inagg";
  p->name = name;
  p->pci_path = nullptr;
  p->guid = 0x696e616767;  // "inagg"
  p->ptr_support = kPtrHost;
  p->speed = 100000;
  p->port = 1;
  p->max_comms = 1024;
  p->max_recvs = 1;
  p->vprops.ndevs = 1;
  p->vprops.devs[0] = 0;
  p->max_p2p_bytes = 1ul << 31;
  p->max_coll_bytes = 1ul << 31;
}

ncclResult_t coll_properties_v10(int dev, PropertiesV10* p) {
  if (dev != 0) return fail(ncclInvalidArgument, "CollNet device " + std::to_string(dev) + " does not exist (one: 0)");
  fill_properties(p);
  return ncclSuccess;
}

ncclResult_t coll_properties_v11(int dev, PropertiesV11* p) {
  if (dev != 0) return fail(ncclInvalidArgument, "CollNet device " + std::to_string(dev) + " does not exist (one: 0)");
  fill_properties(p);
  p->max_multi_request_size = 1;
  return ncclSuccess;
}

ncclResult_t coll_listen(int dev, void* handle, void** listen_comm) {
  const PluginEnv& env = plugin_env();
  if (dev != 0) return fail(ncclInvalidArgument, "CollNet device " + std::to_string(dev) + " does not exist (one: 0)");
  if (!env.address) return fail(ncclInvalidUsage, env.why_no_address);
  auto l = std::make_unique<ListenComm>();
  std::string why;
  l->fd = listen_tcp(*env.address, &l->handle.port, &why);
  if (l->fd < 0) return fail(ncclSystemError, "the ranks' meeting: " + why);
  l->handle.magic = kHandleMagic;
  l->handle.address = *env.address;
  if (getrandom(l->handle.nonce, sizeof l->handle.nonce, 0) != sizeof l->handle.nonce)
    return fail(ncclSystemError, "getrandom failed");
  uint32_t draw = 0;
  std::memcpy(&draw, l->handle.nonce, sizeof draw);
  // A job id of its own per communicator (three in a row), unless INAGG_JOB_ID names one.
  l->handle.job_id = env.job_id ? env.job_id : 1 + draw % kJobIdLimit;
  std::memset(handle, 0, kHandleBytes);
  std::memcpy(handle, &l->handle, sizeof l->handle);
  *listen_comm = l.release();
  return ncclSuccess;
}

ncclResult_t coll_listen_v11(void*, int dev, void* handle, void** listen_comm) {
  return coll_listen(dev, handle, listen_comm);
}

// The rank's set-up with every other: options, endpoints, open, registration, receive side.
std::string set_up(CollComm& c, const Handle& first, ListenComm& l) {
  const PluginEnv& env = plugin_env();
  client::RankOptions o;
  o.geometry.ranks = c.ranks;
  o.geometry.rank = c.rank;
  o.geometry.dtype = env.dtype_name;
  o.geometry.payload = env.payload;
  o.geometry.message = env.message;
  o.geometry.chunk_bytes = env.chunk_bytes;
  util::IpAddr ip;
  std::memcpy(ip.bytes.data(), &env.address->s_addr, 4);
  o.address = ip;
  o.control = env.control;
  o.control_secret_file = env.control_secret_file;
  o.timeout_s = env.timeout_s;
  o.stall_s = env.timeout_s;
  o.job_id = first.job_id;
  o.lanes = true;
  client::RankOptionNames names;
  names.dtype = "INAGG_DTYPE";
  names.payload = "INAGG_PAYLOAD";
  names.message = "INAGG_MESSAGE";
  names.chunk_bytes = "INAGG_CHUNK_BYTES";
  names.address = "INAGG_ADDRESS";
  names.control = "INAGG_CONTROL";
  names.control_secret_file = "INAGG_CONTROL_SECRET_FILE";
  names.job_id = "INAGG_JOB_ID";
  names.timeout_s = "INAGG_TIMEOUT_S";
  std::string why = o.validate(names);
  if (why.empty()) {
    c.inagg = std::make_unique<client::Rank>(o);
    why = c.inagg->error();
  }
  const uint64_t deadline = client::now_ns() + static_cast<uint64_t>(env.timeout_s * 1e9);
  Meeting meeting(first, l.fd, c.ranks, c.rank, deadline);
  std::vector<std::string> lines;
  std::string meeting_why;
  const auto round = [&](const std::string& mine) {
    if (!meeting.round(mine, &lines, &meeting_why)) return "the ranks' meeting at rank 0: " + meeting_why;
    return first_error(lines);
  };
  // 1. Endpoints; every rank opens its transport on them.
  if (std::string e = round(why.empty() ? client::format_endpoint(c.inagg->endpoint()) : kError + why); !e.empty())
    return e;
  std::vector<client::RankEndpoint> all;
  for (const std::string& line : lines) {
    const std::optional<client::RankEndpoint> e = client::parse_endpoint(line, &why);
    if (!e) return why;
    all.push_back(*e);
  }
  why = c.inagg->open(all) ? "" : c.inagg->error();
  if (std::string e = round(why.empty() ? "open" : kError + why); !e.empty()) return e;
  // 2. Rank 0 registers the three jobs; the others learn its outcome, then wait until active.
  if (c.rank == 0)
    for (unsigned k = 0; k < 3 && why.empty(); ++k) why = c.inagg->register_job(c.job_id + k, kCollectives[k], true);
  if (std::string e = round(why.empty() ? "registered" : kError + why); !e.empty()) return e;
  if (c.rank != 0)
    for (unsigned k = 0; k < 3 && why.empty(); ++k) why = c.inagg->register_job(c.job_id + k, kCollectives[k], false);
  // 3. The receive sides open; nobody sends before every rank's has.
  if (why.empty() && !c.inagg->open_receive()) why = c.inagg->error();
  return round(why.empty() ? "receiving" : kError + why);
}

void remove_jobs(CollComm& c) {
  if (c.rank != 0 || !c.inagg) return;
  for (unsigned k = 0; k < 3; ++k) {
    std::string reply, why;
    if (!c.inagg->control_request("remove " + std::to_string(c.job_id + k) + "\n", &reply, &why))
      log_line(kLogWarn, "inagg: job %u could not be removed from the appliance: %s", c.job_id + k, why.c_str());
  }
}

ncclResult_t coll_connect(void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm) {
  *coll_comm = nullptr;
  auto* l = static_cast<ListenComm*>(listen_comm);
  if (!l || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "connect: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  Handle first;
  std::memcpy(&first, handles[0], sizeof first);
  if (first.magic != kHandleMagic) return fail(ncclInvalidArgument, "connect: rank 0's handle is not inagg's");
  auto c = std::make_unique<CollComm>();
  c->ranks = static_cast<unsigned>(nranks);
  c->rank = static_cast<unsigned>(rank);
  c->job_id = first.job_id;
  if (std::string why = set_up(*c, first, *l); !why.empty()) {
    remove_jobs(*c);
    return fail(ncclSystemError, "rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                                     " could not join the appliance's job " + std::to_string(c->job_id) + ": " + why);
  }
  log_line(kLogInfo, "inagg: rank %d of %d in jobs %u, %u, %u (allreduce, reduce_scatter, all_gather), payload %u",
           rank, nranks, c->job_id, c->job_id + 1, c->job_id + 2, c->inagg->payload());
  CollComm* raw = c.get();
  c->server = std::thread([raw] {
    while (!raw->stop.load(std::memory_order_relaxed)) {
      const std::lock_guard lock(raw->mutex);
      raw->inagg->serve(1);
    }
  });
  *coll_comm = c.release();
  return ncclSuccess;
}

ncclResult_t coll_reduce_support(ncclDataType_t type, ncclRedOp_t op, int* supported) {
  *supported = why_not(type, op).empty() ? 1 : 0;
  return ncclSuccess;
}

ncclResult_t coll_reg_mr(void*, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != kPtrHost)
    return fail(
        ncclInvalidUsage,
        "regMr of a CUDA buffer refused: this plugin takes host memory only (NCCL_PTR_HOST; NCCL stages GPU data "
        "through host buffers for it). GPU buffers (GPUDirect) are not supported yet");
  *mhandle = new MemoryRegion{static_cast<const uint8_t*>(data), size};
  return ncclSuccess;
}

ncclResult_t coll_reg_mr_dma_buf(void*, void*, size_t, int, uint64_t, int, void** mhandle) {
  *mhandle = nullptr;
  return fail(ncclInvalidUsage,
              "regMrDmaBuf refused: this plugin takes host memory only (NCCL_PTR_HOST); DMA-BUF (GPU) buffers are not "
              "supported yet");
}

ncclResult_t coll_dereg_mr(void*, void* mhandle) {
  delete static_cast<MemoryRegion*>(mhandle);
  return ncclSuccess;
}

ncclResult_t done(void** request, size_t bytes) {
  *request = new Request{static_cast<int>(std::min<size_t>(bytes, INT32_MAX))};
  return ncclSuccess;
}

ncclResult_t failed_collective(CollComm& c, const char* what) {
  return fail(ncclSystemError,
              "rank " + std::to_string(c.rank) + ": " + what + " through the appliance failed: " + c.inagg->error());
}

ncclResult_t coll_iallreduce(void* coll_comm, void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                             void* send_mhandle, void* recv_mhandle, void** request) {
  *request = nullptr;
  auto& c = *static_cast<CollComm*>(coll_comm);
  if (std::string why = why_not(type, op); !why.empty()) return fail(ncclInvalidArgument, "iallreduce: " + why);
  const size_t bytes = count * util::dtype_size(plugin_env().dtype);
  for (const auto& [mh, p, what] :
       {std::tuple{send_mhandle, send, "iallreduce's input"}, std::tuple{recv_mhandle, recv, "iallreduce's output"}})
    if (std::string why = why_not_region(mh, p, bytes, what); !why.empty()) return fail(ncclInvalidArgument, why);
  const std::lock_guard lock(c.mutex);
  if (!c.inagg->allreduce(static_cast<const uint8_t*>(send), static_cast<uint8_t*>(recv), bytes))
    return failed_collective(c, "an allreduce");
  return done(request, bytes);
}

// A window [offset, offset + bytes) of the whole buffer of n x per_rank bytes: rank r's part of it,
// [begin(r), end(r)), and the shard every rank pads its part to (the largest part, in whole
// elements of the job's dtype), so that one reduce-scatter or all-gather of equal shards moves it.
struct Window {
  size_t offset, bytes, per_rank;
  size_t begin(unsigned r) const { return std::max(offset, r * per_rank); }
  size_t end(unsigned r) const { return std::min(offset + bytes, (r + 1) * per_rank); }
  size_t part(unsigned r) const { return end(r) > begin(r) ? end(r) - begin(r) : 0; }
  size_t shard(unsigned ranks, size_t element) const {
    size_t most = 0;
    for (unsigned r = 0; r < ranks; ++r) most = std::max(most, part(r));
    return (most + element - 1) / element * element;
  }
};

// The scatter-gather list of a window: every part registered, together the window's bytes, the
// window inside the ranks' buffer. "" when it is; else why not, for `what` ("iallgather's output").
std::string why_not_parts(const char* what, int nparts, const Sge* parts, const Window& w, unsigned ranks) {
  size_t bytes = 0;
  for (int i = 0; i < nparts; ++i) {
    bytes += parts[i].size;
    if (std::string why = why_not_region(parts[i].mhandle, parts[i].address, parts[i].size, what); !why.empty())
      return why;
  }
  if (bytes != w.bytes || w.offset + w.bytes > w.per_rank * ranks)
    return std::string(what) + ": the parts hold " + std::to_string(bytes) + " bytes for a window of " +
           std::to_string(w.bytes) + " at " + std::to_string(w.offset) + " of " + std::to_string(ranks) + " x " +
           std::to_string(w.per_rank);
  return "";
}

// Walks the window's parts in order beside each rank's part of it at `shards` + r x shard:
// copy(part_address, shard_address, n) for every run. Returns the bytes walked.
template <class Copy>
size_t walk_parts(const Sge* parts, const Window& w, unsigned ranks, uint8_t* shards, size_t shard, Copy copy) {
  size_t at = 0, in_part = 0;
  int part = 0;
  for (unsigned r = 0; r < ranks; ++r)
    for (size_t left = w.part(r), from = 0; left > 0;) {
      const size_t n = std::min(left, parts[part].size - in_part);
      copy(static_cast<uint8_t*>(parts[part].address) + in_part, shards + r * shard + from, n);
      left -= n, from += n, at += n, in_part += n;
      if (in_part == parts[part].size) ++part, in_part = 0;
    }
  return at;
}

ncclResult_t coll_iallgather(void* coll_comm, void* send, int nrecv_parts, Sge* recv_parts, size_t bytes_per_rank,
                             size_t window_offset, size_t window_bytes, void* send_mhandle, void** request) {
  *request = nullptr;
  auto& c = *static_cast<CollComm*>(coll_comm);
  const Window w{window_offset, window_bytes, bytes_per_rank};
  if (std::string why = why_not_parts("iallgather's output", nrecv_parts, recv_parts, w, c.ranks); !why.empty())
    return fail(ncclInvalidArgument, why);
  const size_t mine = w.part(c.rank);
  if (std::string why = why_not_region(send_mhandle, send, mine, "iallgather's input"); !why.empty())
    return fail(ncclInvalidArgument, why);
  const size_t shard = w.shard(c.ranks, util::dtype_size(plugin_env().dtype));
  if (shard == 0) return done(request, 0);
  const std::lock_guard lock(c.mutex);
  c.window.assign(shard, 0);
  if (mine) std::memcpy(c.window.data(), send, mine);
  c.shards.resize(shard * c.ranks);
  if (!c.inagg->all_gather(c.window.data(), c.shards.data(), shard)) return failed_collective(c, "an all-gather");
  // Rank r's part lands at window position begin(r) - offset; the parts list is that window in order.
  const size_t at = walk_parts(recv_parts, w, c.ranks, c.shards.data(), shard,
                               [](uint8_t* out, const uint8_t* sum, size_t n) { std::memcpy(out, sum, n); });
  return done(request, at);
}

ncclResult_t coll_ireducescatter(void* coll_comm, int nsend_parts, Sge* send_parts, void* recv, size_t bytes_per_rank,
                                 size_t window_offset, size_t window_bytes, ncclDataType_t type, ncclRedOp_t op,
                                 void* recv_mhandle, void** request) {
  *request = nullptr;
  auto& c = *static_cast<CollComm*>(coll_comm);
  if (std::string why = why_not(type, op); !why.empty()) return fail(ncclInvalidArgument, "ireducescatter: " + why);
  const Window w{window_offset, window_bytes, bytes_per_rank};
  if (std::string why = why_not_parts("ireducescatter's input", nsend_parts, send_parts, w, c.ranks); !why.empty())
    return fail(ncclInvalidArgument, why);
  const size_t mine = w.part(c.rank);
  if (std::string why = why_not_region(recv_mhandle, recv, mine, "ireducescatter's output"); !why.empty())
    return fail(ncclInvalidArgument, why);
  const size_t shard = w.shard(c.ranks, util::dtype_size(plugin_env().dtype));
  if (shard == 0) return done(request, 0);
  const std::lock_guard lock(c.mutex);
  // Rank r's part of the window, padded with zeros to the shard, at shard r.
  c.shards.assign(shard * c.ranks, 0);
  walk_parts(send_parts, w, c.ranks, c.shards.data(), shard,
             [](const uint8_t* in, uint8_t* shard_at, size_t n) { std::memcpy(shard_at, in, n); });
  c.window.resize(shard);
  if (!c.inagg->reduce_scatter(c.shards.data(), c.window.data(), shard))
    return failed_collective(c, "a reduce-scatter");
  if (mine) std::memcpy(recv, c.window.data(), mine);
  return done(request, mine);
}

ncclResult_t coll_iflush(void*, void*, int, void*, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t coll_test(void* request, int* is_done, int* size) {
  auto* r = static_cast<Request*>(request);
  *is_done = 1;
  if (size) *size = r ? r->bytes : 0;
  delete r;
  return ncclSuccess;
}

ncclResult_t coll_close(void* coll_comm) {
  std::unique_ptr<CollComm> c(static_cast<CollComm*>(coll_comm));
  if (!c) return ncclSuccess;
  c->stop = true;
  if (c->server.joinable()) c->server.join();
  if (!c->inagg->finish())
    log_line(kLogWarn, "inagg: rank %u: the transport's last barrier: %s", c->rank, c->inagg->error().c_str());
  remove_jobs(*c);
  return ncclSuccess;
}

ncclResult_t coll_close_listen(void* listen_comm) {
  std::unique_ptr<ListenComm> l(static_cast<ListenComm*>(listen_comm));
  if (l && l->fd >= 0) ::close(l->fd);
  return ncclSuccess;
}

ncclResult_t coll_finalize(void*) { return ncclSuccess; }

}  // namespace
}  // namespace inagg::ncclnet

using namespace inagg::ncclnet;

// The tables NCCL looks up (newest first: 2.28 takes v11; v10 and v9 are the same functions).
extern "C" {
[[gnu::visibility("default")]] CollNetV11 ncclCollNetPlugin_v11 = {
    .name = "inagg",
    .init = coll_init_v11,
    .devices = coll_devices,
    .get_properties = coll_properties_v11,
    .listen = coll_listen_v11,
    .connect = coll_connect,
    .reduce_support = coll_reduce_support,
    .reg_mr = coll_reg_mr,
    .reg_mr_dma_buf = coll_reg_mr_dma_buf,
    .dereg_mr = coll_dereg_mr,
    .iallreduce = coll_iallreduce,
    .iallgather = coll_iallgather,
    .ireducescatter = coll_ireducescatter,
    .iflush = coll_iflush,
    .test = coll_test,
    .close_coll = coll_close,
    .close_listen = coll_close_listen,
    .make_vdevice = nullptr,  // NCCL then uses the physical device
    .finalize = coll_finalize,
};
[[gnu::visibility("default")]] CollNetV10 ncclCollNetPlugin_v10 = {
    .name = "inagg",
    .init = coll_init,
    .devices = coll_devices,
    .get_properties = coll_properties_v10,
    .listen = coll_listen,
    .connect = coll_connect,
    .reduce_support = coll_reduce_support,
    .reg_mr = coll_reg_mr,
    .reg_mr_dma_buf = coll_reg_mr_dma_buf,
    .dereg_mr = coll_dereg_mr,
    .iallreduce = coll_iallreduce,
    .iallgather = coll_iallgather,
    .ireducescatter = coll_ireducescatter,
    .iflush = coll_iflush,
    .test = coll_test,
    .close_coll = coll_close,
    .close_listen = coll_close_listen,
    .make_vdevice = nullptr,  // NCCL then uses the physical device
};
[[gnu::visibility("default")]] CollNetV10 ncclCollNetPlugin_v9 = ncclCollNetPlugin_v10;
}
