// inagg's Python extension (_inagg): one rank of an ina allreduce job, on the client library
// (inagg::client) exactly as inagg-worker --mode ina uses it: the rack plan (RackPlan), the
// software RoCEv2 RC transport (UdpRcTransport), the job's registration on the appliance
// (ControlClient) and ina_allreduce over the caller's own memory. python/inagg/__init__.py wraps it
// (torch tensors go through allreduce_ptr); docs/training.md.
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

#include "inagg/client/algorithms.hpp"
#include "inagg/client/clock.hpp"
#include "inagg/client/control_client.hpp"
#include "inagg/client/transport/udp_transport.hpp"
#include "inagg/client/worker.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/util/dtype.hpp"
#include "inagg/util/hmac.hpp"

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
};

// inagg-worker's option checks speak of its flags; say the keyword arguments' names instead.
std::string keyword_names(std::string why) {
  static const std::pair<const char*, const char*> names[] = {{"--workers", "world_size"}, {"--message", "message"},
                                                              {"--payload", "payload"},    {"--dtype", "dtype"},
                                                              {"--ip-base", "ip_base"},    {"--rank", "rank"}};
  for (const auto& [flag, keyword] : names)
    for (size_t at; (at = why.find(flag)) != std::string::npos;) why.replace(at, std::string(flag).size(), keyword);
  return "inagg.Communicator: " + why;
}

class Communicator {
 public:
  // Opens the transport and, with a control socket, registers the job (rank 0 adds it; every rank
  // waits until it is active). Runs without the GIL.
  explicit Communicator(const CommunicatorOptions& o) : o_(o) {
    // The job's parameters and the rack plan, checked and filled as inagg-worker does.
    client::WorkerOptions w;
    w.rank = o.rank;
    w.rank_given = true;
    w.workers = o.world_size;
    w.dtype_name = o.dtype;
    w.message = o.message;
    w.payload = o.payload;
    w.window = o.window;
    w.ip_base = o.ip_base;
    w.job_id = o.job_id;
    if (std::string why = client::check_job_options(w); !why.empty()) throw std::invalid_argument(keyword_names(why));
    o_.payload = w.payload;  // auto resolved
    if (o.rank >= o.world_size) throw std::invalid_argument("inagg.Communicator: rank must be below world_size");
    if (o.window == 0) throw std::invalid_argument("inagg.Communicator: window must be at least 1");
    if (!(o.ack_timeout_ms > 0) || !(o.timeout_s > 0))
      throw std::invalid_argument("inagg.Communicator: ack_timeout_ms and timeout_s must be positive");
    if (o.chunk_bytes == 0) throw std::invalid_argument("inagg.Communicator: chunk_bytes must be positive");
    plan_ = w.rack;
    geometry_ = {plan_.dtype, o.world_size, o.message, client::Mode::ina};
    // The regions hold chunk_bytes rounded up to whole messages; a chunk is the data those
    // messages carry besides their tallies (ina_allreduce).
    chunk_ = geometry_.padded(o.chunk_bytes) / o.message * geometry_.data_per_message();
    client::UdpRcConfig c = plan_.rc_config(false, o.ack_timeout_ms, o.retry, geometry_.send_bytes(chunk_),
                                            geometry_.receive_bytes(chunk_));
    // Ranks that never meet (no control socket: someone else registers the job) cannot tell each
    // other a random region key: they share the fixed one, and only their peers' addresses guard
    // their receive regions. With a control socket the meeting below carries each rank's own.
    if (o.control.empty()) c.receive_key = client::UdpRcTransport::kUnmetKey;
    std::string error;
    if (!transport_.open(c, &error))
      throw InaggError("inagg.Communicator: rank " + std::to_string(o.rank) + ": " + error);
    const uint64_t timeout_ns = static_cast<uint64_t>(o.timeout_s * 1e9);
    // The ranks' meeting's secret (with a control socket), before anything is registered.
    std::string meeting_secret;
    if (!o.control.empty()) {
      std::string why;
      if (std::getenv(client::kExchangeSecretEnv) || !o.exchange_secret_file.empty()) {
        if (!util::load_secret(client::kExchangeSecretEnv, o.exchange_secret_file, &meeting_secret, &why))
          throw std::invalid_argument("inagg.Communicator: the ranks' meeting secret: " + why);
      } else if (!o.exchange_secret.empty()) {
        meeting_secret = o.exchange_secret;
      } else if (!o.insecure_exchange) {
        throw std::invalid_argument(
            std::string("inagg.Communicator: the ranks' meeting (control=) needs the job's secret, the same on every "
                        "rank: set $") +
            client::kExchangeSecretEnv +
            " where the job is launched, or give exchange_secret_file= (mode 0600) or store= (a store every rank "
            "shares, e.g. torch.distributed's: rank 0 puts a random secret in it); insecure_exchange=True meets "
            "without one, on a lab network of your own only");
      }
    }
    if (o.control.rfind(control::kTcpScheme, 0) == 0 &&
        !control::load_secret_file(o.control_secret_file, &credential_, &error))
      throw std::invalid_argument(
          "inagg.Communicator: control " + o.control +
          " needs a tenant's credential (control_secret_file or $INAGG_CONTROL_SECRET): " + error);
    if (!o.control.empty()) {
      const client::ControlClient control(o.control, 5000, credential_);
      const client::Registration r =
          control.register_job(o.rank == 0, plan_.job_text(), o.job_id, client::now_ns() + timeout_ns, 20, o.rank);
      switch (r.outcome) {
        case client::Registration::Outcome::active:
          break;
        case client::Registration::Outcome::unreachable:
          throw InaggError("the appliance cannot be reached: " + r.reason);
        case client::Registration::Outcome::refused:
          throw InaggError("the appliance refused job " + std::to_string(o.job_id) + ": " +
                           r.reason.substr(0, r.reason.find('\n')));
        case client::Registration::Outcome::not_active:
          throw InaggError("job " + std::to_string(o.job_id) + " did not become active on " + o.control + " within " +
                           std::to_string(o.timeout_s) + " s (is rank 0 running?)");
      }
    }
    // Through the appliance, a rank that sends long before the others waits for them without an ACK
    // (the appliance holds its packets): the ranks meet at rank 0 first, as inagg-worker's do
    // (UdpRcTransport::meet), and barrier() lets a caller meet them again after unequal work.
    if (!o.control.empty()) {
      if (o.exchange_port == 0 || o.exchange_port > 65535)
        throw std::invalid_argument("inagg.Communicator: exchange_port must be a TCP port");
      client::RendezvousConfig rc;
      rc.rank = o.rank;
      rc.workers = o.world_size;
      rc.host = plan_.ip_of(0);
      rc.port = static_cast<uint16_t>(o.exchange_port);
      rc.deadline_ns = client::now_ns() + timeout_ns;
      rc.insecure = o.insecure_exchange;
      rc.secret = meeting_secret;
      // The receive side opens only now, the job active: nothing written before is taken.
      if (!transport_.meet(rc, &error) || !transport_.open_receive(&error) ||
          !transport_.barrier("the first allreduce", &error))
        throw InaggError("inagg.Communicator: rank " + std::to_string(o.rank) + ": " + error);
      met_ = true;
    } else {
      transport_.set_successor_key(client::UdpRcTransport::kUnmetKey);
      if (!transport_.open_receive(&error))
        throw InaggError("inagg.Communicator: rank " + std::to_string(o.rank) + ": " + error);
    }
    // No deadline for the whole job (a communicator lives as long as training does); an allreduce
    // fails when nothing at all arrives for timeout_s, or when the RC requester gives up.
    exchange_ =
        std::make_unique<client::RingExchange>(transport_, o.message, std::numeric_limits<uint64_t>::max(), timeout_ns);
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
  std::string dtype() const { return std::string(util::dtype_name(plan_.dtype)); }
  std::string job_text() const { return plan_.job_text(); }
  size_t element() const { return geometry_.element(); }

  // Sums `bytes` (whole elements) at `data` over every rank, in place, chunk by chunk. Runs
  // without the GIL; one allreduce at a time.
  void allreduce(uint8_t* data, uint64_t bytes) {
    ++waiting_;  // the server thread steps aside after its current poll (at most 1 ms)
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) throw InaggError("inagg.Communicator: closed");
    if (!error_.empty()) throw InaggError(error_);
    for (uint64_t off = 0; off < bytes; off += chunk_) {
      const uint64_t n = std::min(chunk_, bytes - off);
      if (client::Outcome r = client::ina_allreduce(*exchange_, geometry_, data + off, n); !r.ok()) {
        const client::TransportCounters t = transport_.counters();
        error_ = "inagg: rank " + std::to_string(o_.rank) + ", allreduce " + std::to_string(allreduces_ + 1) + " (" +
                 std::to_string(bytes) + " bytes of " + dtype() + "): " + r.error +
                 " [this rank so far: " + std::to_string(t.packets_sent) + " packets sent, " +
                 std::to_string(t.retransmitted) + " again, " + std::to_string(t.timeouts) + " ACK timeouts, " +
                 std::to_string(t.naks_received) + " NAKs; " + std::to_string(t.accepted) + " received, " +
                 std::to_string(t.duplicates) + " duplicates]";
        throw InaggError(error_);
      }
      messages_ += geometry_.messages_of(n);
    }
    ++allreduces_;
    bytes_ += bytes;
  }

  // Every rank of the job meets here (see the constructor); needs a control socket.
  void barrier(const std::string& what) {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) throw InaggError("inagg.Communicator: closed");
    if (!met_) throw InaggError("inagg.Communicator: barrier() needs a communicator made with control=");
    std::string error;
    if (!transport_.barrier(what, &error)) throw InaggError("inagg: rank " + std::to_string(o_.rank) + ": " + error);
  }

  void close() {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    if (closed_) return;
    closed_ = true;
    transport_.finish(client::now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9));
  }

  std::map<std::string, uint64_t> counters() const {
    ++waiting_;
    const WakeServer wake{cv_};
    std::unique_lock lock(mutex_);
    --waiting_;
    const client::TransportCounters t = transport_.counters();
    return {{"allreduces", allreduces_},
            {"bytes", bytes_},
            {"messages", messages_},
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
    if (!client::ControlClient(o_.control, 5000, credential_).request(text, &reply, &error))
      throw InaggError("inagg: " + error);
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
  // inagg-worker does (Worker::serve): the predecessor's retransmissions and the appliance's
  // resends are acknowledged, our own retransmissions go out. One caller drives a transport, so
  // the thread polls it under the mutex, 1 ms at a time, and steps aside while anyone waits.
  void serve() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (waiting_ > 0 || closed_) {
        cv_.wait(lock, [&] { return stop_ || (waiting_ == 0 && !closed_); });
        continue;
      }
      transport_.poll(1);
    }
  }

  CommunicatorOptions o_;
  client::RackPlan plan_;
  client::Geometry geometry_;
  uint64_t chunk_ = 0;
  client::UdpRcTransport transport_;
  std::unique_ptr<client::RingExchange> exchange_;
  std::string credential_;    // tcp:// control: the tenant's credential
  mutable std::mutex mutex_;  // the transport, the counters, closed_, error_, stop_
  mutable std::condition_variable cv_;
  mutable std::atomic<int> waiting_{0};  // callers waiting for the mutex
  std::thread server_;
  bool stop_ = false;
  bool closed_ = false;
  bool met_ = false;  // the ranks met at rank 0 (a control socket was given): barrier() works
  std::string error_;
  uint64_t allreduces_ = 0, bytes_ = 0, messages_ = 0;
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
                       bool insecure_exchange) {
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
                                   insecure_exchange};
             py::gil_scoped_release nogil;
             return std::make_unique<Communicator>(o);
           }),
           py::kw_only(), py::arg("rank"), py::arg("world_size"), py::arg("control"), py::arg("job_id"),
           py::arg("dtype"), py::arg("message"), py::arg("payload"), py::arg("window"), py::arg("ack_timeout_ms"),
           py::arg("retry"), py::arg("ip_base"), py::arg("chunk_bytes"), py::arg("timeout_s"),
           py::arg("exchange_port") = 18516, py::arg("control_secret_file") = "", py::arg("exchange_secret_file") = "",
           py::arg("exchange_secret") = "", py::arg("insecure_exchange") = false)
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
