// inagg as a torch.distributed backend (PyTorch 1.13's c10d::ProcessGroup): what
// `dist.init_process_group(backend="inagg")` creates once `inagg.torch` is imported
// (python/inagg/torch.py registers it; docs/training.md).
//
// all_reduce with a sum (or an average) of the job's dtype goes through the appliance: one
// client::Rank per rank (its endpoints through the store), the software RoCEv2 transport at the rank's own address.
// Everything else goes to an inner Gloo process group built on the same store: the other dtypes and reductions,
// broadcast, all_gather, barrier, gather, scatter, all_to_all, send/recv. reduce_scatter and all_gather of the job's
// dtype, in equal shards, go through the appliance in one pass (docs/protocol.md section 20: jobs of their own, on QPs
// of their own beside the allreduce's); otherwise a reduce_scatter sums the whole input (through the appliance when the
// job can, else through Gloo's allreduce: PyTorch 1.13's Gloo has no reduce_scatter) and each rank keeps its shard, and
// an all_gather goes through Gloo. counters() says which way each call went; with `debug` every call prints one line
// saying where it went and why.
//
// Set-up, through the c10d store the process group was created with (inagg.torch gives it one
// prefixed for this process group and this initialisation: inagg/GENERATION/): every
// rank takes its address from its own interface, publishes its endpoint and reads the others';
// each binds its transport and says so; rank 0 registers the job with the appliance (replacing a
// job that an earlier run on these same addresses left behind) and publishes the job's id once it
// is active. A rank that fails a step publishes why, and every rank raises with that reason.
// PyTorch's store is not authenticated: every value the backend puts there carries an
// HMAC-SHA256 under the job's exchange secret ($INAGG_EXCHANGE_SECRET, else the file
// exchange_secret_file), bound to the store prefix, the group's size, the job id, the writing rank
// and the key; a value that does not verify is refused with the key's name. Without a secret given,
// rank 0 makes one and puts it in the store, and the backend says once that the meeting is then
// only as safe as the store (docs/training.md, "The store").
//
// Calls are queued to one thread per process group and run in the order they were made, so that
// every rank runs them in the same order whichever way each goes; that thread keeps the transport
// answering its peers between calls and while Gloo works. send/recv go to Gloo directly (a queue
// would deadlock a recv posted before its send). A collective that fails through the appliance or
// in Gloo's communication removes the job from the appliance (any rank can), so the other ranks
// fail too instead of waiting; later calls through the appliance raise the same error.
//
// The job lives as long as the process group: shutdown() (destroy_process_group, the destructor,
// interpreter exit) lets the transport answer until quiet, and rank 0 removes the job once every
// rank has finished (or after timeout_s).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "inagg/client/rank.hpp"

namespace inagg::torchdist {

struct ProcessGroupOptions {
  std::string control;                    // the appliance's control socket, or tcp://HOST:PORT
  std::string control_secret_file;        // tcp://: the tenant's credential ($INAGG_CONTROL_SECRET first)
  std::string exchange_secret_file;       // the job's secret for the store's values ($INAGG_EXCHANGE_SECRET first)
  std::string store_prefix;               // the store's prefix for this group (names keys in errors; bound in MACs)
  uint32_t job_id = 0;                    // 0: derived from the job's connections
  std::string dtype = "fp32";             // what the appliance sums
  std::string address;                    // this rank's address; "": interface's, or the route's toward master_addr
  std::string interface;                  // the interface that holds this rank's address
  std::string master_addr;                // where the route is taken toward when neither is given
  uint32_t message = 65536, payload = 0;  // payload 0: from the link's MTU
  unsigned window = 2;
  unsigned channels = 1;  // RC connections a rank, each a job of its own on the appliance's lcores
  double ack_timeout_ms = 250;
  unsigned retry = 15;
  uint64_t chunk_bytes = 8u << 20;
  double timeout_s = 60;  // registration, an allreduce with nothing arriving, the finish at shutdown
  bool debug = false;     // one line per call: where it went and why
  std::string gloo_only;  // not "": no appliance for this group, every call through Gloo, and why
};

// What counters() counts: which way each call went. X(name, text).
#define INAGG_PG_COUNTERS(X)                                                                                 \
  X(allreduce_appliance, "all_reduce summed by the appliance")                                               \
  X(allreduce_gloo, "all_reduce through Gloo (a dtype or op the job does not sum, or no appliance)")         \
  X(reduce_scatter_appliance, "reduce_scatter in one pass through the appliance, each rank its shard's sum") \
  X(reduce_scatter_whole, "reduce_scatter: the whole input summed by the appliance, each rank its shard")    \
  X(reduce_scatter_gloo, "reduce_scatter: the whole input summed by Gloo's allreduce, each rank its shard")  \
  X(allgather_appliance, "all_gather in one pass through the appliance (list and tensor forms)")             \
  X(allgather_gloo, "all_gather, list and tensor forms, through Gloo")                                       \
  X(broadcast_gloo, "broadcast through Gloo")                                                                \
  X(barrier_gloo, "barrier through Gloo")                                                                    \
  X(reduce_gloo, "reduce through Gloo")                                                                      \
  X(gather_scatter_gloo, "gather and scatter through Gloo")                                                  \
  X(alltoall_gloo, "all_to_all through Gloo")                                                                \
  X(coalesced_gloo, "allreduce_coalesced and allgather_coalesced through Gloo")                              \
  X(send_recv_gloo, "send and recv through Gloo")                                                            \
  X(appliance_bytes, "bytes summed by the appliance")                                                        \
  X(failed, "calls that raised")

enum class Counter : uint8_t {
#define X(name, text) name,
  INAGG_PG_COUNTERS(X)
#undef X
      count
};

// A call's outcome for c10d: wait() raises the call's error, getFuture() is completed with the
// output tensors (DDP's reducer chains on it).
class QueuedWork final : public c10d::Work {
 public:
  QueuedWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs);
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupInagg final : public c10d::ProcessGroup {
 public:
  // Runs the set-up above (blocking; rendezvous_timeout bounds the wait for the other ranks'
  // endpoints). Throws std::runtime_error with the reason when any rank's step fails.
  ProcessGroupInagg(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    c10::intrusive_ptr<c10d::ProcessGroup> gloo, ProcessGroupOptions options,
                    std::chrono::milliseconds rendezvous_timeout);
  ~ProcessGroupInagg() override;

  const std::string getBackendName() const override { return "inagg"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // INAGG_PG_COUNTERS, then the transport's (packets_sent, retransmitted, timeouts, ...).
  std::map<std::string, uint64_t> counters() const;
  // The appliance's `stats ID` reply for the job of `collective` (allreduce, reduce_scatter or
  // all_gather); throws when there is no such job or no answer.
  std::string job_stats(const std::string& collective = "allreduce") const;
  uint32_t job_id() const { return job_id_; }
  // The one-pass reduce-scatter's and all-gather's jobs (0: none; those calls then go the other way).
  uint32_t rs_job_id() const { return rs_job_id_; }
  uint32_t ag_job_id() const { return ag_job_id_; }
  bool uses_appliance() const { return rank_ != nullptr; }
  const std::string& gloo_only() const { return o_.gloo_only; }
  std::string address() const;
  std::string job_text() const { return job_text_; }
  uint32_t payload() const { return rank_ ? rank_->payload() : 0; }
  // Drains the queue, lets the transport answer until quiet, and (rank 0) removes the job once
  // every rank has finished. Idempotent; later calls raise.
  void shutdown();

 private:
  void set_up(const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds rendezvous_timeout);
  std::string register_job();  // rank 0: "" once active, else why
  // Rank 0: the job of collective c, its id in *id; "" once active, else why.
  std::string register_one(control::Collective c, uint32_t* id);

  using Body = std::function<void()>;
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType op, std::vector<at::Tensor> outputs, Body body);
  void serve();  // the queue's thread
  // Runs on the queue's thread: waits for a Gloo call, the transport answering meanwhile.
  void wait_gloo(const c10::intrusive_ptr<c10d::Work>& work);
  // Sums t in place over every rank (through the appliance when `appliance`, else Gloo), then
  // divides by the group's size when `average`. Runs on the queue's thread.
  void sum(at::Tensor& t, bool appliance, bool average);
  // The one-pass reduce-scatter (in: every shard, contiguous; out: this rank's) or all-gather (in:
  // this rank's shard; out: every shard) through the appliance. Runs on the queue's thread; a
  // failure removes the jobs and throws.
  void one_pass(bool reduce_scatter, const at::Tensor& in, at::Tensor& out, uint64_t shard_bytes);
  // Why a sum of t with `op` cannot go through the appliance; "" when it can. The same on every
  // rank for the same call (dtype, op, size), so that every rank routes it the same way.
  std::string why_not_appliance(const at::Tensor& t, const c10d::ReduceOp& op) const;
  void count(Counter c, uint64_t n = 1) { counters_[static_cast<size_t>(c)] += n; }
  void note(const std::string& what) const;  // the debug line
  void remove_job(const std::string& why);   // after a failure: best effort, once

  ProcessGroupOptions o_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> gloo_;
  std::unique_ptr<client::Rank> rank_;  // null: every call through Gloo (o_.gloo_only says why)
  uint32_t job_id_ = 0, rs_job_id_ = 0, ag_job_id_ = 0;
  std::string job_text_;
  std::atomic<uint64_t> counters_[static_cast<size_t>(Counter::count)] = {};
  std::atomic<bool> job_removed_{false};

  std::mutex mutex_;  // the queue, stop_
  std::condition_variable cv_;
  struct Task {
    c10::intrusive_ptr<QueuedWork> work;
    Body body;
  };
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread worker_;
  std::once_flag shutdown_once_;
  std::atomic<bool> shut_{false};

  mutable std::mutex snapshot_mutex_;  // the transport's counters, copied by the queue's thread
  client::TransportCounters snapshot_;
};

}  // namespace inagg::torchdist
