// inagg's Python extension (_inagg): one rank of an ina allreduce job, a client::Rank (rank.hpp)
// as inagg-worker --mode ina runs it: the rack plan, the software RoCEv2 transport, the job's
// registration on the appliance and the allreduce over the caller's own memory.
// python/inagg/__init__.py wraps it (torch tensors go through allreduce_ptr); docs/training.md.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "inagg/client/rank.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/util/dtype.hpp"

namespace py = pybind11;

namespace inagg::python {
namespace {

// Raised to Python as inagg.InaggError (a RuntimeError) with the client library's reason.
struct InaggError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommunicatorOptions {
  unsigned rank = 0, world_size = 0;
  std::string control;  // "" = registered by someone else
  uint32_t job_id = 1;
  std::string dtype = "fp32";
  uint32_t message = 65536, payload = 0;  // payload 0: auto, from the link MTU (inagg-worker --payload auto)
  unsigned window = 2;
  double ack_timeout_ms = 250;
  unsigned retry = 15;
  std::string ip_base = "10.77.0.0";
  uint64_t chunk_bytes = 8u << 20;
  double timeout_s = 60;
  unsigned exchange_port = 18516;   // with a control socket: rank 0 listens here for the others (meet)
  std::string control_secret_file;  // tcp://: the tenant's credential ($INAGG_CONTROL_SECRET first)
  // The meeting's secret: $INAGG_EXCHANGE_SECRET, else this file, else what the Python side took
  // from a store every rank shares (exchange_secret); none only when insecure_exchange says so.
  std::string exchange_secret_file, exchange_secret;
  bool insecure_exchange = false;
  unsigned channels = 1;  // RC connections per rank, each a job of its own on the appliance
};

// The rank's options as this module's keyword arguments name them (validate()'s sentences).
const client::RankOptionNames& keyword_names() {
  static const client::RankOptionNames names = [] {
    client::RankOptionNames n;
    n.ranks = "world_size";
    n.stall_s = "timeout_s";
    n.exchange_secret_file = "exchange_secret_file=";
    n.insecure_exchange = "insecure_exchange=True";
    n.meeting = "the ranks' meeting (control=)";
    n.exchange_secret_hint =
        ", or store= (a store every rank shares, e.g. torch.distributed's: rank 0 puts a random secret in it)";
    return n;
  }();
  return names;
}

class Communicator {
 public:
  // Opens the transport and, with a control socket, registers the job (rank 0 adds it; every rank
  // waits until it is active) and meets the other ranks. Runs without the GIL.
  explicit Communicator(const CommunicatorOptions& o) : o_(o) {
    client::RankOptions r;
    r.geometry.ranks = o.world_size;
    r.geometry.rank = o.rank;
    r.geometry.dtype = o.dtype;
    r.geometry.message = o.message;
    r.geometry.payload = o.payload;
    r.geometry.window = o.window;
    r.geometry.chunk_bytes = o.chunk_bytes;
    r.geometry.channels = o.channels;
    r.ip_base = o.ip_base;
    r.ack_timeout_ms = o.ack_timeout_ms;
    r.retry = o.retry;
    // No deadline for the whole job (a communicator lives as long as training does); an
    // allreduce fails when nothing at all arrives for timeout_s, or when the RC requester gives up.
    r.timeout_s = o.timeout_s;
    r.stall_s = o.timeout_s;
    r.control = o.control;
    r.control_secret_file = o.control_secret_file;
    r.job_id = o.job_id;
    // Through the appliance, a rank that sends long before the others waits for them without an
    // ACK (the appliance holds its packets): with a control socket the ranks meet at rank 0, as
    // inagg-worker's do, and barrier() lets a caller meet them again after unequal work. Without
    // one (someone else registers the job) they never meet.
    r.meet = !o.control.empty();
    r.exchange_port = o.exchange_port;
    r.exchange_secret_file = o.exchange_secret_file;
    r.exchange_secret = o.exchange_secret;
    r.insecure_exchange = o.insecure_exchange;
    if (std::string why = r.validate(keyword_names()); !why.empty())
      throw std::invalid_argument("inagg.Communicator: " + why);
    o_.payload = r.geometry.payload;  // auto resolved
    rank_ = std::make_unique<client::Rank>(r);
    met_ = r.meet;
    if (rank_->start() != 0 || (met_ && !rank_->barrier("the first allreduce")))
      throw InaggError("inagg.Communicator: rank " + std::to_string(o.rank) + ": " + rank_->error());
    server_ = std::thread([this] { serve(); });
  }

  ~Communicator() {
    // Counted as waiting, or the server thread, which takes the mutex back after every poll,
    // may never let go of it (a communicator dropped without close(), e.g. after an error).
    ++waiting_;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (server_.joinable()) server_.join();
  }

  const CommunicatorOptions& options() const { return o_; }
  std::string dtype() const { return std::string(util::dtype_name(rank_->dtype())); }
  std::string job_text() const { return rank_->job_text(o_.job_id); }
  size_t element() const { return rank_->element(); }

  // Sums `bytes` (whole elements) at `data` over every rank, in place, chunk by chunk. Runs
  // without the GIL; one allreduce at a time.
  void allreduce(uint8_t* data, uint64_t bytes) {
    ++waiting_;  // the server thread steps aside after its current poll (at most 1 ms)
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) throw InaggError("inagg.Communicator: closed");
    if (!rank_->allreduce(data, data, bytes))
      throw InaggError("inagg: rank " + std::to_string(o_.rank) + ", " + rank_->error());
  }

  // Every rank of the job meets here (see the constructor); needs a control socket.
  void barrier(const std::string& what) {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) throw InaggError("inagg.Communicator: closed");
    if (!met_) throw InaggError("inagg.Communicator: barrier() needs a communicator made with control=");
    if (!rank_->barrier(what)) throw InaggError("inagg: rank " + std::to_string(o_.rank) + ": " + rank_->error());
  }

  void close() {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) return;
    closed_ = true;
    rank_->finish();  // answers until the predecessor is quiet; a failure was raised by its allreduce
  }

  std::map<std::string, uint64_t> counters() const {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    const client::TransportCounters t = rank_->transport_counters().value_or(client::TransportCounters{});
    return {{"allreduces", rank_->collectives()},
            {"bytes", rank_->bytes()},
            {"messages", rank_->messages()},
            {"packets_sent", t.packets_sent},
            {"retransmitted", t.retransmitted},
            {"timeouts", t.timeouts},
            {"naks_received", t.naks_received},
            {"accepted", t.accepted},
            {"duplicates", t.duplicates},
            {"bad_icrc", t.bad_icrc},
            {"rx_refused_source", t.rx_refused_source},
            {"rx_refused_rkey", t.rx_refused_rkey},
            {"rx_refused_qpn", t.rx_refused_qpn},
            {"rx_refused_early", t.rx_refused_early}};
  }

  // One request to the appliance's control socket; an error reply or no answer raises.
  std::string control_request(const std::string& text) const {
    if (o_.control.empty()) throw InaggError("inagg.Communicator: no control socket was given");
    std::string reply, error;
    if (!rank_->control_request(text, &reply, &error)) throw InaggError("inagg: " + error);
    if (control::is_error_reply(reply))
      throw InaggError("inagg: the appliance answered: " + reply.substr(0, reply.find('\n')));
    return reply;
  }

 private:
  // Wakes the server thread when an allreduce (or close, counters) is done with the transport:
  // declared before the lock, so it runs after the unlock.
  struct WakeServer {
    std::condition_variable& cv;
    ~WakeServer() { cv.notify_all(); }
  };

  // Between allreduces the transport keeps running, as a NIC does while its host computes and as
  // inagg-worker does (Rank::serve): the predecessor's retransmissions and the appliance's
  // resends are acknowledged, our own retransmissions go out. One caller drives a rank, so the
  // thread serves it under the mutex, 1 ms at a time, and steps aside while anyone waits.
  void serve() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (waiting_ > 0 || closed_) {
        cv_.wait(lock, [&] { return stop_ || (waiting_ == 0 && !closed_); });
        continue;
      }
      rank_->serve(1);
    }
  }

  CommunicatorOptions o_;
  std::unique_ptr<client::Rank> rank_;
  mutable std::mutex mutex_;  // the rank, closed_, stop_
  mutable std::condition_variable cv_;
  mutable std::atomic<int> waiting_{0};  // callers waiting for the mutex
  std::thread server_;
  bool stop_ = false;
  bool closed_ = false;
  bool met_ = false;  // the ranks met at rank 0 (a control socket was given): barrier() works
};

// `stats ID`'s reply ("name value" per line) as a dict: numbers as int, the rest (state, error)
// as str.
py::dict parse_stats(const std::string& reply) {
  py::dict d;
  for (size_t start = 0; start < reply.size();) {
    size_t end = reply.find('\n', start);
    if (end == std::string::npos) end = reply.size();
    const std::string line = reply.substr(start, end - start);
    start = end + 1;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    char* rest = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &rest, 0);
    if (!value.empty() && rest && *rest == '\0')
      d[py::str(key)] = py::int_(v);
    else
      d[py::str(key)] = py::str(value);
  }
  return d;
}

std::optional<util::Dtype> dtype_of_format(const py::buffer_info& b, util::Dtype want) {
  const std::string& f = b.format;
  const char code = f.empty() ? '\0' : f.back();  // "<f", "=i", "@e": the code is last
  if (f.size() > 2 || (f.size() == 2 && f[0] != '<' && f[0] != '=' && f[0] != '@')) return std::nullopt;
  if (code == 'f' && b.itemsize == 4) return util::Dtype::fp32;
  if (code == 'e' && b.itemsize == 2) return util::Dtype::fp16;
  if ((code == 'i' || code == 'l') && b.itemsize == 4) return util::Dtype::int32;
  // Raw 16-bit words: the job's half type, whichever it is (numpy has no bfloat16).
  if (code == 'H' && b.itemsize == 2 && (want == util::Dtype::fp16 || want == util::Dtype::bf16)) return want;
  return std::nullopt;
}

}  // namespace
}  // namespace inagg::python

PYBIND11_MODULE(_inagg, m) {
  using inagg::python::Communicator;
  using inagg::python::CommunicatorOptions;
  namespace util = inagg::util;
  m.doc() = "inagg's C++ core: one rank of an allreduce through the appliance (see the inagg package)";
  py::register_exception<inagg::python::InaggError>(m, "InaggError", PyExc_RuntimeError);
  m.attr("DTYPES") = py::make_tuple("fp32", "fp16", "bf16", "int32");
  m.def("dtype_size", [](const std::string& name) {
    const std::optional<util::Dtype> d = util::parse_dtype(name);
    if (!d) throw std::invalid_argument("inagg: dtype must be fp32, fp16, bf16 or int32, not '" + name + "'");
    return util::dtype_size(*d);
  });

  py::class_<Communicator>(m, "_Communicator")
      .def(py::init([](unsigned rank, unsigned world_size, std::string control, uint32_t job_id, std::string dtype,
                       uint32_t message, uint32_t payload, unsigned window, double ack_timeout_ms, unsigned retry,
                       std::string ip_base, uint64_t chunk_bytes, double timeout_s, unsigned exchange_port,
                       std::string control_secret_file, std::string exchange_secret_file, std::string exchange_secret,
                       bool insecure_exchange, unsigned channels) {
             CommunicatorOptions o{rank,
                                   world_size,
                                   std::move(control),
                                   job_id,
                                   std::move(dtype),
                                   message,
                                   payload,
                                   window,
                                   ack_timeout_ms,
                                   retry,
                                   std::move(ip_base),
                                   chunk_bytes,
                                   timeout_s,
                                   exchange_port,
                                   std::move(control_secret_file),
                                   std::move(exchange_secret_file),
                                   std::move(exchange_secret),
                                   insecure_exchange,
                                   channels};
             py::gil_scoped_release nogil;
             return std::make_unique<Communicator>(o);
           }),
           py::kw_only(), py::arg("rank"), py::arg("world_size"), py::arg("control"), py::arg("job_id"),
           py::arg("dtype"), py::arg("message"), py::arg("payload"), py::arg("window"), py::arg("ack_timeout_ms"),
           py::arg("retry"), py::arg("ip_base"), py::arg("chunk_bytes"), py::arg("timeout_s"),
           py::arg("exchange_port") = 18516, py::arg("control_secret_file") = "", py::arg("exchange_secret_file") = "",
           py::arg("exchange_secret") = "", py::arg("insecure_exchange") = false, py::arg("channels") = 1)
      .def_property_readonly("rank", [](const Communicator& c) { return c.options().rank; })
      .def_property_readonly("world_size", [](const Communicator& c) { return c.options().world_size; })
      .def_property_readonly("job_id", [](const Communicator& c) { return c.options().job_id; })
      .def_property_readonly("dtype", &Communicator::dtype)
      .def_property_readonly("message", [](const Communicator& c) { return c.options().message; })
      .def_property_readonly("payload", [](const Communicator& c) { return c.options().payload; })
      .def_property_readonly("job_text", &Communicator::job_text)
      .def(
          "allreduce_ptr",
          [](Communicator& c, uintptr_t ptr, uint64_t count, const std::string& dtype) {
            if (dtype != c.dtype())
              throw py::type_error("inagg: this communicator's job sums " + c.dtype() + ", not " + dtype);
            if (count && !ptr) throw std::invalid_argument("inagg: allreduce_ptr of a null pointer");
            if (count > std::numeric_limits<uint64_t>::max() / c.element())
              throw std::invalid_argument("inagg: allreduce_ptr: count too large");
            py::gil_scoped_release nogil;
            c.allreduce(reinterpret_cast<uint8_t*>(ptr), count * c.element());
          },
          py::arg("ptr"), py::arg("count"), py::arg("dtype"))
      .def(
          "allreduce_buffer",
          [](Communicator& c, const py::buffer& obj) {
            const py::buffer_info b = obj.request(true);  // writable; raises BufferError otherwise
            const util::Dtype want = *util::parse_dtype(c.dtype());
            const std::optional<util::Dtype> got = inagg::python::dtype_of_format(b, want);
            if (!got || *got != want)
              throw py::type_error("inagg: this communicator's job sums " + c.dtype() + "; the buffer holds format '" +
                                   b.format + "' of " + std::to_string(b.itemsize) +
                                   " bytes (want f for fp32, e or H for fp16, H for bf16, i for int32)");
            // C-contiguous: strides descend from one item.
            py::ssize_t expect = b.itemsize;
            for (py::ssize_t d = b.ndim - 1; d >= 0; --d) {
              if (b.shape[d] > 1 && b.strides[d] != expect)
                throw std::invalid_argument("inagg: allreduce_ takes C-contiguous buffers");
              expect *= b.shape[d];
            }
            uint8_t* data = static_cast<uint8_t*>(b.ptr);
            const uint64_t bytes = static_cast<uint64_t>(b.size) * static_cast<uint64_t>(b.itemsize);
            py::gil_scoped_release nogil;
            c.allreduce(data, bytes);
          },
          py::arg("buffer"))
      .def("counters", &Communicator::counters, py::call_guard<py::gil_scoped_release>())
      .def("job_stats",
           [](const Communicator& c) {
             std::string reply;
             {
               py::gil_scoped_release nogil;
               reply = c.control_request("stats " + std::to_string(c.options().job_id) + "\n");
             }
             return inagg::python::parse_stats(reply);
           })
      .def(
          "remove_job",
          [](const Communicator& c) { c.control_request("remove " + std::to_string(c.options().job_id) + "\n"); },
          py::call_guard<py::gil_scoped_release>())
      .def("close", &Communicator::close, py::call_guard<py::gil_scoped_release>())
      .def("barrier", &Communicator::barrier, py::arg("what"), py::call_guard<py::gil_scoped_release>());
}
