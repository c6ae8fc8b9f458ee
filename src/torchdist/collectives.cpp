// Which way each collective goes (process_group.hpp): sums of the job's dtype through the
// appliance, everything else through the inner Gloo group, each call queued in order.
#include <c10/util/irange.h>

#include <algorithm>
#include <stdexcept>

#include "inagg/torchdist/process_group.hpp"
#include "inagg/util/dtype.hpp"

namespace inagg::torchdist {
namespace {

std::optional<util::Dtype> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return util::Dtype::fp32;
    case at::kHalf:
      return util::Dtype::fp16;
    case at::kBFloat16:
      return util::Dtype::bf16;
    case at::kInt:
      return util::Dtype::int32;
    default:
      return std::nullopt;
  }
}

bool is_sum_or_average(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG;
}

std::string describe(const at::Tensor& t) {
  return std::to_string(t.numel()) + " " + std::string(c10::toString(t.scalar_type()));
}

void check_one(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.size() != 1)
    throw std::invalid_argument(std::string("inagg: ") + what + " takes one tensor per rank (a CPU tensor), got " +
                                std::to_string(tensors.size()));
}

}  // namespace

std::string ProcessGroupInagg::why_not_appliance(const at::Tensor& t, const c10d::ReduceOp& op) const {
  if (!rank_) return o_.gloo_only;
  if (!is_sum_or_average(op)) return "the appliance only sums";
  if (!t.device().is_cpu()) return "a tensor on " + t.device().str() + " (the appliance takes CPU tensors)";
  if (t.layout() != at::kStrided) return "a sparse tensor";
  if (dtype_of(t.scalar_type()) != rank_->dtype())
    return "dtype " + std::string(c10::toString(t.scalar_type())) + ": the job sums " +
           std::string(util::dtype_name(rank_->dtype()));
  if (t.numel() == 0) return "an empty tensor";
  return "";
}

void ProcessGroupInagg::sum(at::Tensor& t, bool appliance, bool average) {
  if (average && !at::isFloatingType(t.scalar_type()))
    throw std::invalid_argument("inagg: ReduceOp.AVG needs a floating-point tensor, not " +
                                std::string(c10::toString(t.scalar_type())));
  if (appliance) {
    // In place on contiguous memory; otherwise through a contiguous copy (the route must not
    // depend on a tensor's layout, which may differ between ranks).
    at::Tensor flat = t.is_contiguous() ? t : t.contiguous();
    auto* data = static_cast<uint8_t*>(flat.data_ptr());
    if (!rank_->allreduce(data, data, flat.numel() * flat.element_size())) {
      const std::string& error = rank_->error();
      remove_job("an allreduce through the appliance failed: " + error);
      throw std::runtime_error("inagg rank " + std::to_string(getRank()) + ": " + error);
    }
    if (!flat.is_same(t)) t.copy_(flat);
    count(Counter::appliance_bytes, static_cast<uint64_t>(flat.numel() * flat.element_size()));
  } else {
    std::vector<at::Tensor> one{t};
    c10d::AllreduceOptions sum_opts;  // Gloo has no AVG: a sum, divided below
    wait_gloo(gloo_->allreduce(one, sum_opts));
  }
  if (average) t.div_(getSize());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  check_one(tensors, "all_reduce");
  at::Tensor t = tensors[0];
  const std::string why = why_not_appliance(t, opts.reduceOp);
  const bool appliance = why.empty();
  if (o_.debug) note("all_reduce of " + describe(t) + (appliance ? " -> appliance" : " -> Gloo: " + why));
  count(appliance ? Counter::allreduce_appliance : Counter::allreduce_gloo);
  if (!appliance && !is_sum_or_average(opts.reduceOp)) {  // MIN, MAX, PRODUCT ...: Gloo's own
    auto o = opts;
    return enqueue(c10d::OpType::ALLREDUCE, tensors,
                   [this, tensors, o]() mutable { wait_gloo(gloo_->allreduce(tensors, o)); });
  }
  const bool average = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  return enqueue(c10d::OpType::ALLREDUCE, tensors,
                 [this, t, appliance, average]() mutable { sum(t, appliance, average); });
}

void ProcessGroupInagg::one_pass(bool reduce_scatter, const at::Tensor& in, at::Tensor& out, uint64_t shard_bytes) {
  const auto* src = static_cast<const uint8_t*>(in.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const bool ok =
      reduce_scatter ? rank_->reduce_scatter(src, dst, shard_bytes) : rank_->all_gather(src, dst, shard_bytes);
  if (!ok) {
    const std::string& error = rank_->error();
    remove_job(std::string(reduce_scatter ? "a reduce_scatter" : "an all_gather") +
               " through the appliance failed: " + error);
    throw std::runtime_error("inagg rank " + std::to_string(getRank()) + ": " + error);
  }
  count(Counter::appliance_bytes, shard_bytes * static_cast<uint64_t>(getSize()));
}

// reduce_scatter: equal shards of the job's dtype go through the appliance in one pass (each rank
// receives its shard's sum only). Otherwise the whole input is summed (through the appliance when
// it can, else Gloo's allreduce) and each rank keeps its shard: an allreduce's bytes.
c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  check_one(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize()))
    throw std::invalid_argument("inagg: reduce_scatter takes one input list of " + std::to_string(getSize()) +
                                " tensors (one per rank)");
  if (!is_sum_or_average(opts.reduceOp))
    throw std::invalid_argument("inagg: reduce_scatter sums (ReduceOp.SUM or AVG) only");
  std::vector<at::Tensor> flat_parts;
  int64_t offset = 0, mine = 0;
  for (const auto r : c10::irange(getSize())) {
    const at::Tensor& in = inputs[0][r];
    if (in.scalar_type() != outputs[0].scalar_type())
      throw std::invalid_argument("inagg: reduce_scatter's inputs and output must have one dtype");
    if (r == getRank()) mine = offset;
    offset += in.numel();
    flat_parts.push_back(in.reshape({-1}));
  }
  at::Tensor whole = at::cat(flat_parts);  // a copy: the caller's inputs stay as they were
  at::Tensor out = outputs[0];
  const int64_t n = inputs[0][getRank()].numel();
  if (n != out.numel())
    throw std::invalid_argument("inagg: reduce_scatter's output has " + std::to_string(out.numel()) +
                                " elements, this rank's input " + std::to_string(n));
  const std::string why = why_not_appliance(whole, opts.reduceOp);
  const bool appliance = why.empty(), average = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  const bool equal =
      std::all_of(inputs[0].begin(), inputs[0].end(), [&](const at::Tensor& t) { return t.numel() == n; });
  if (appliance && rs_job_id_ != 0 && equal) {
    if (o_.debug) note("reduce_scatter of " + describe(whole) + " -> appliance (one pass, each rank its shard)");
    count(Counter::reduce_scatter_appliance);
    return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, [this, whole, out, n, average]() mutable {
      at::Tensor mine_sum = at::empty({n}, out.options());
      one_pass(true, whole, mine_sum, static_cast<uint64_t>(n * whole.element_size()));
      if (average) mine_sum.div_(getSize());
      out.copy_(mine_sum.view_as(out));
    });
  }
  if (o_.debug)
    note("reduce_scatter of " + describe(whole) +
         (appliance ? std::string(" -> appliance (the whole sum to every rank: ") +
                          (rs_job_id_ ? "unequal shards)" : "no reduce_scatter job)")
                    : " -> Gloo allreduce: " + why));
  count(appliance ? Counter::reduce_scatter_whole : Counter::reduce_scatter_gloo);
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, [this, whole, out, mine, n, appliance, average]() mutable {
    sum(whole, appliance, average);
    out.copy_(whole.narrow(0, mine, n).view_as(out));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  if (input.numel() != output.numel() * getSize())
    throw std::invalid_argument("inagg: reduce_scatter_tensor's input must hold the group's size (" +
                                std::to_string(getSize()) + ") times the output's elements");
  std::vector<at::Tensor> outputs{output};
  std::vector<std::vector<at::Tensor>> inputs{input.reshape({-1}).chunk(getSize())};
  return reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  check_one(inputs, "all_gather");
  // Through the appliance in one pass: one output list of a tensor per rank, each of the input's
  // dtype and elements (as Gloo requires too), the job's dtype.
  const at::Tensor& in = inputs[0];
  std::string why = why_not_appliance(in, c10d::ReduceOp::SUM);
  if (why.empty() && ag_job_id_ == 0) why = "no all_gather job";
  if (why.empty() && (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize())))
    why = "not one output list of a tensor per rank";
  for (size_t r = 0; why.empty() && r < outputs[0].size(); ++r)
    if (outputs[0][r].numel() != in.numel() || outputs[0][r].scalar_type() != in.scalar_type())
      why = "an output tensor unlike the input";
  if (why.empty()) {
    if (o_.debug) note("all_gather of " + describe(in) + " -> appliance (one pass)");
    count(Counter::allgather_appliance);
    std::vector<at::Tensor> outs = outputs[0];
    return enqueue(c10d::OpType::ALLGATHER, outs, [this, in, outs]() mutable {
      const at::Tensor flat_in = in.contiguous().reshape({-1});
      at::Tensor all = at::empty({flat_in.numel() * static_cast<int64_t>(outs.size())}, flat_in.options());
      one_pass(false, flat_in, all, static_cast<uint64_t>(flat_in.numel() * flat_in.element_size()));
      for (size_t r = 0; r < outs.size(); ++r)
        outs[r].copy_(all.narrow(0, static_cast<int64_t>(r) * flat_in.numel(), flat_in.numel()).view_as(outs[r]));
    });
  }
  if (o_.debug) note("all_gather of " + describe(in) + " -> Gloo: " + why);
  count(Counter::allgather_gloo);
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  return enqueue(c10d::OpType::ALLGATHER, flat_outputs,
                 [this, outputs, inputs, opts]() mutable { wait_gloo(gloo_->allgather(outputs, inputs, opts)); });
}

// The tensor form (all_gather_into_tensor): Gloo 1.13 has only the list form, so into the
// output's chunks.
c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  if (output.numel() != input.numel() * getSize() || !output.is_contiguous())
    throw std::invalid_argument(
        "inagg: all_gather_into_tensor's output must be contiguous and hold the group's size (" +
        std::to_string(getSize()) + ") times the input's elements");
  std::vector<std::vector<at::Tensor>> outputs{output.reshape({-1}).chunk(getSize())};
  for (at::Tensor& o : outputs[0]) o = o.view(input.sizes());
  std::vector<at::Tensor> inputs{input};
  return allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts) {
  if (o_.debug) note("allgather_coalesced -> Gloo");
  count(Counter::coalesced_gloo);
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, flat_outputs, [this, outputs, inputs, opts]() mutable {
    wait_gloo(gloo_->allgather_coalesced(outputs, inputs, opts));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  if (o_.debug) note("allreduce_coalesced of " + std::to_string(tensors.size()) + " tensors -> Gloo");
  count(Counter::coalesced_gloo);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors,
                 [this, tensors, opts]() mutable { wait_gloo(gloo_->allreduce_coalesced(tensors, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  if (o_.debug && !tensors.empty())
    note("broadcast of " + describe(tensors[0]) + " from rank " + std::to_string(opts.rootRank) +
         " -> Gloo: the appliance only sums");
  count(Counter::broadcast_gloo);
  return enqueue(c10d::OpType::BROADCAST, tensors,
                 [this, tensors, opts]() mutable { wait_gloo(gloo_->broadcast(tensors, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  if (o_.debug && !tensors.empty()) note("reduce of " + describe(tensors[0]) + " -> Gloo");
  count(Counter::reduce_gloo);
  return enqueue(c10d::OpType::REDUCE, tensors,
                 [this, tensors, opts]() mutable { wait_gloo(gloo_->reduce(tensors, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  if (o_.debug) note("gather -> Gloo");
  count(Counter::gather_scatter_gloo);
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  return enqueue(c10d::OpType::GATHER, flat_outputs,
                 [this, outputs, inputs, opts]() mutable { wait_gloo(gloo_->gather(outputs, inputs, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  if (o_.debug) note("scatter -> Gloo");
  count(Counter::gather_scatter_gloo);
  return enqueue(c10d::OpType::SCATTER, outputs,
                 [this, outputs, inputs, opts]() mutable { wait_gloo(gloo_->scatter(outputs, inputs, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions& opts) {
  if (o_.debug) note("all_to_all_single -> Gloo");
  count(Counter::alltoall_gloo);
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output},
                 [this, output, input, output_splits, input_splits, opts]() mutable {
                   wait_gloo(gloo_->alltoall_base(output, input, output_splits, input_splits, opts));
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  if (o_.debug) note("all_to_all -> Gloo");
  count(Counter::alltoall_gloo);
  return enqueue(c10d::OpType::ALLTOALL, outputs,
                 [this, outputs, inputs, opts]() mutable { wait_gloo(gloo_->alltoall(outputs, inputs, opts)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::barrier(const c10d::BarrierOptions& opts) {
  if (o_.debug) note("barrier -> Gloo");
  count(Counter::barrier_gloo);
  return enqueue(c10d::OpType::BARRIER, {}, [this, opts]() { wait_gloo(gloo_->barrier(opts)); });
}

// Point to point goes to Gloo at once, not through the queue: a recv queued before the send it
// waits for (irecv, then isend, on both ranks) would never let that send run.
c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  count(Counter::send_recv_gloo);
  return gloo_->send(tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  count(Counter::send_recv_gloo);
  return gloo_->recv(tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  count(Counter::send_recv_gloo);
  return gloo_->recvAnysource(tensors, tag);
}

}  // namespace inagg::torchdist
