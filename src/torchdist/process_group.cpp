// The process group's life: set-up through the store, the queue and its thread, counters, the
// job's removal. The collectives themselves (which way each goes) are in collectives.cpp.
#include "inagg/torchdist/process_group.hpp"

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/util/dtype.hpp"
#include "inagg/util/hmac.hpp"

namespace inagg::torchdist {
namespace {

constexpr const char* kError = "error: ";

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The backend's values in the store, each as "MAC VALUE": PyTorch's store is not authenticated, so
// each value carries an HMAC-SHA256 under the job's exchange secret of everything that gives it its
// meaning (the group's store prefix, size and job id, the rank that wrote it, its key). A value
// another process wrote, or one moved from another key, rank or initialisation, does not verify.
class StoreSeal {
 public:
  StoreSeal(std::string secret, const ProcessGroupOptions& o, int size)
      : secret_(std::move(secret)),
        binding_("inagg-torch-store\n" + o.store_prefix + "\n" + std::to_string(size) + "\n" +
                 std::to_string(o.job_id) + "\n"),
        prefix_(o.store_prefix) {}

  // No secret: this rank could not load it, and its value is its reason (open() below).
  std::vector<uint8_t> seal(int writer, const std::string& key, const std::string& value) const {
    return bytes_of(secret_.empty() ? value : mac(writer, key, value) + " " + value);
  }

  // The value rank `writer` put under `key`; throws, naming the key, when its MAC does not verify.
  // A rank that could not load the secret publishes its reason without one: such a value stops the
  // set-up with that reason (said to be unauthenticated) and is used for nothing else.
  std::string open(int reader, int writer, const std::string& key, const std::vector<uint8_t>& stored) const {
    const std::string text = text_of(stored);
    constexpr size_t kMacHex = 2 * util::kHmacBytes;
    if (text.size() > kMacHex && text[kMacHex] == ' ') {
      std::string value = text.substr(kMacHex + 1);
      if (util::equal_constant_time(text.substr(0, kMacHex), mac(writer, key, value))) return value;
    }
    const std::string me = "inagg rank " + std::to_string(reader) + ": ";
    if (text.rfind(kError, 0) == 0)
      throw std::runtime_error(me + "rank " + std::to_string(writer) + " failed (an unauthenticated value under " +
                               where(writer, key) + "): " + text.substr(std::string(kError).size()));
    throw std::runtime_error(
        me + "refused the store's value under " + where(writer, key) +
        ": it does not carry a valid HMAC under the job's exchange secret, so another process wrote it (PyTorch's "
        "store is not authenticated) or rank " +
        std::to_string(writer) + " was given another secret ($" + client::kExchangeSecretEnv +
        " or INAGG_EXCHANGE_SECRET_FILE); nothing from it was used");
  }

 private:
  std::string where(int writer, const std::string& key) const {
    return "key '" + key + "' (store prefix '" + prefix_ + "', rank " + std::to_string(writer) + "'s)";
  }
  std::string mac(int writer, const std::string& key, const std::string& value) const {
    return util::hmac_sha256_hex(secret_, binding_ + std::to_string(writer) + "\n" + key + "\n" + value);
  }
  std::string secret_, binding_, prefix_;
};

// Every rank publishes `mine` (a value, or "error: why") under PHASE/RANK and reads every rank's;
// a rank whose value is an error makes every rank raise with its reason. A failing rank still
// waits (up to the timeout) until every rank has published: a rank that publishes has finished
// making its inner Gloo group, whose connections the failing rank closes when it raises (a rank
// still connecting would raise Gloo's "Connection closed by peer" instead of the reason).
std::vector<std::string> all_publish(c10d::Store& store, const StoreSeal& seal, int rank, int size,
                                     const std::string& phase, const std::string& mine,
                                     std::chrono::milliseconds timeout) {
  const std::string me = "inagg rank " + std::to_string(rank) + ": ";
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(phase + "/" + std::to_string(r));
  store.set(keys[rank], seal.seal(rank, keys[rank], mine));
  const bool failed = mine.rfind(kError, 0) == 0;
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    if (failed) throw std::runtime_error(me + mine.substr(std::string(kError).size()));  // its reason stands
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw std::runtime_error(me + "rank(s) " + missing + " did not publish their " + phase + " within " +
                             std::to_string(timeout.count() / 1000) + " s (" + e.what() + ")");
  }
  if (failed) throw std::runtime_error(me + mine.substr(std::string(kError).size()));
  std::vector<std::string> values;
  for (int r = 0; r < size; ++r) {
    values.push_back(seal.open(rank, r, keys[r], store.get(keys[r])));
    if (values.back().rfind(kError, 0) == 0)
      throw std::runtime_error(me + "rank " + std::to_string(r) + " failed (" + phase +
                               "): " + values.back().substr(std::string(kError).size()));
  }
  return values;
}

// The job's exchange secret: $INAGG_EXCHANGE_SECRET, else the first line of exchange_secret_file;
// else one rank 0 makes at random and puts in the store, which every process says once, loudly.
// "" with *why when a secret was named but cannot be read.
std::string meeting_secret(c10d::Store& store, const ProcessGroupOptions& o, int rank,
                           std::chrono::milliseconds timeout, std::string* why) {
  std::string secret;
  const char* env = std::getenv(client::kExchangeSecretEnv);
  if ((env && *env) || !o.exchange_secret_file.empty()) {
    if (!util::load_secret(client::kExchangeSecretEnv, o.exchange_secret_file, &secret, why))
      *why = "the job's exchange secret ($" + std::string(client::kExchangeSecretEnv) +
             " or INAGG_EXCHANGE_SECRET_FILE): " + *why;
    return secret;
  }
  static std::once_flag warned;
  std::call_once(warned, [rank] {
    std::fprintf(stderr,
                 "inagg rank %d: WARNING: no exchange secret was given ($%s or INAGG_EXCHANGE_SECRET_FILE), so rank "
                 "0 made one and put it in PyTorch's store: the ranks' meeting (their endpoints, the job's id) is "
                 "then only as safe as the store, which is not authenticated: any host that reaches it "
                 "(MASTER_ADDR:MASTER_PORT) can read the secret and change what the ranks tell each other. Give "
                 "every rank the job's secret: export %s=$(head -c 24 /dev/urandom | base64) where the job is "
                 "launched, or INAGG_EXCHANGE_SECRET_FILE=FILE (mode 0600)\n",
                 rank, client::kExchangeSecretEnv, client::kExchangeSecretEnv);
  });
  if (rank == 0) {
    secret = util::random_hex(util::kNonceBytes);
    if (secret.empty()) {
      *why = "rank 0 could not draw a random exchange secret from the OS";
      return "";
    }
    store.set("secret", bytes_of(secret));
    return secret;
  }
  try {
    store.wait({"secret"}, timeout);
  } catch (const std::exception& e) {
    *why = "rank 0 put no exchange secret in the store within " + std::to_string(timeout.count() / 1000) + " s (" +
           e.what() + ")";
    return "";
  }
  return text_of(store.get("secret"));
}

std::optional<util::IpAddr> address_of(const ProcessGroupOptions& o, std::string* why) {
  if (!o.address.empty()) {
    const std::optional<util::IpAddr> a = util::parse_ip(o.address);
    if (!a || a->version != util::IpVersion::v4) *why = "address (INAGG_ADDRESS) '" + o.address + "' is not IPv4";
    return a && a->version == util::IpVersion::v4 ? a : std::nullopt;
  }
  if (!o.interface.empty()) {
    std::optional<util::IpAddr> a = client::interface_address(o.interface, why);
    if (a && a->bytes[0] == 127)
      *why = "interface (INAGG_IFNAME) " + o.interface + " holds the loopback address " + util::ip_text(*a) +
             ": name the interface toward the appliance";
    return a && a->bytes[0] != 127 ? a : std::nullopt;
  }
  if (!o.master_addr.empty()) {
    std::optional<util::IpAddr> a = client::source_address_toward(o.master_addr, why);
    if (a && a->bytes[0] == 127)
      *why = "the route toward the master " + o.master_addr + " leaves from the loopback address " + util::ip_text(*a) +
             ": name the interface toward the appliance (INAGG_IFNAME) or the address (INAGG_ADDRESS)";
    return a && a->bytes[0] != 127 ? a : std::nullopt;
  }
  *why =
      "no address for this rank: name the interface toward the appliance (INAGG_IFNAME) or the address "
      "(INAGG_ADDRESS)";
  return std::nullopt;
}

}  // namespace

QueuedWork::QueuedWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs)
    : Work(rank, op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void QueuedWork::complete(std::exception_ptr error) {
  finish(error);  // wait() returns, or raises the error
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

ProcessGroupInagg::ProcessGroupInagg(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     c10::intrusive_ptr<c10d::ProcessGroup> gloo, ProcessGroupOptions options,
                                     std::chrono::milliseconds rendezvous_timeout)
    : ProcessGroup(rank, size), o_(std::move(options)), store_(store), gloo_(std::move(gloo)) {
  if (!gloo_) throw std::invalid_argument("inagg: the process group needs an inner Gloo group");
  if (o_.gloo_only.empty() && size < 2) o_.gloo_only = "a group of one rank";
  if (o_.gloo_only.empty() && o_.control.empty()) o_.gloo_only = "no appliance was named (INAGG_CONTROL)";
  if (o_.gloo_only.empty()) set_up(store, rendezvous_timeout);
  if (o_.debug)
    note(rank_ ? "job " + std::to_string(job_id_) + " (reduce_scatter " + std::to_string(rs_job_id_) + ", all_gather " +
                     std::to_string(ag_job_id_) + ") active at " + o_.control + ", this rank at " + address() +
                     " (payload " + std::to_string(rank_->payload()) + ")"
               : "every call through Gloo: " + o_.gloo_only);
  worker_ = std::thread([this] { serve(); });
}

void ProcessGroupInagg::set_up(const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds timeout) {
  const int rank = getRank(), size = getSize();
  std::string why;
  const StoreSeal seal(meeting_secret(*store, o_, rank, timeout, &why), o_, size);
  // 1. Endpoints: this rank's address from its own interface.
  std::string mine;
  const std::optional<util::IpAddr> address = why.empty() ? address_of(o_, &why) : std::nullopt;
  if (address) {
    client::RankOptions r;
    r.geometry.ranks = static_cast<unsigned>(size);
    r.geometry.rank = static_cast<unsigned>(rank);
    r.geometry.dtype = o_.dtype;
    r.geometry.message = o_.message;
    r.geometry.payload = o_.payload;
    r.geometry.window = o_.window;
    r.geometry.channels = o_.channels;
    r.geometry.chunk_bytes = o_.chunk_bytes;
    r.address = *address;
    r.ack_timeout_ms = o_.ack_timeout_ms;
    r.retry = o_.retry;
    r.timeout_s = o_.timeout_s;
    r.stall_s = o_.timeout_s;
    r.control = o_.control;
    r.control_secret_file = o_.control_secret_file;
    r.job_id = o_.job_id;
    r.lanes = true;
    why = r.validate();
    if (why.empty()) {
      rank_ = std::make_unique<client::Rank>(r);
      why = rank_->error();
    }
  }
  mine = why.empty() ? client::format_endpoint(rank_->endpoint()) : kError + why;
  std::vector<client::RankEndpoint> all;
  for (const std::string& line : all_publish(*store, seal, rank, size, "endpoint", mine, timeout)) {
    const std::optional<client::RankEndpoint> e = client::parse_endpoint(line, &why);
    if (!e) throw std::runtime_error("inagg rank " + std::to_string(rank) + ": " + why);
    all.push_back(*e);
  }
  // 2. Every rank binds its transport (UDP 4791 at its address) before anyone registers or sends;
  // its receive side stays closed until step 4.
  const bool opened = rank_->open(all);
  all_publish(*store, seal, rank, size, "open", opened ? "ok" : kError + rank_->error(), timeout);
  // 3. Rank 0 registers the job and says when it is active.
  if (rank == 0) {
    why = register_job();
    store->set("job", seal.seal(0, "job",
                                why.empty() ? std::to_string(job_id_) + " " + std::to_string(rs_job_id_) + " " +
                                                  std::to_string(ag_job_id_)
                                            : kError + why));
    if (!why.empty()) throw std::runtime_error("inagg rank 0: " + why);
  } else {
    try {
      store->wait({"job"}, timeout);
    } catch (const std::exception& e) {
      throw std::runtime_error("inagg rank " + std::to_string(rank) + ": rank 0 did not say whether job registration " +
                               "succeeded within " + std::to_string(timeout.count() / 1000) + " s (" + e.what() + ")");
    }
    const std::string v = seal.open(rank, 0, "job", store->get("job"));
    if (v.rfind(kError, 0) == 0)
      throw std::runtime_error("inagg rank " + std::to_string(rank) +
                               ": rank 0 could not register the job: " + v.substr(std::string(kError).size()));
    std::istringstream ids(v);
    ids >> job_id_ >> rs_job_id_ >> ag_job_id_;
    job_text_ = rank_->job_text(job_id_);
  }
  // 4. The jobs are active: every rank opens its receive side (nothing written before is taken),
  // and nobody sends before every rank has.
  const bool receiving = rank_->open_receive();
  all_publish(*store, seal, rank, size, "receiving", receiving ? "ok" : kError + rank_->error(), timeout);
}

// The allreduce's job, then the reduce-scatter's and the all-gather's: an appliance that refuses
// either of those leaves that collective the other way (said on stderr), not the group unusable.
std::string ProcessGroupInagg::register_job() {
  if (std::string why = register_one(control::Collective::allreduce, &job_id_); !why.empty()) return why;
  job_text_ = rank_->job_text(job_id_);
  for (const auto& [c, id] : {std::pair{control::Collective::reduce_scatter, &rs_job_id_},
                              std::pair{control::Collective::all_gather, &ag_job_id_}}) {
    if (std::string why = register_one(c, id); !why.empty()) {
      std::fprintf(stderr, "inagg rank 0: no %s job (%s): those calls go the other way\n", control::collective_name(c),
                   why.c_str());
      *id = 0;
    }
  }
  return "";
}

std::string ProcessGroupInagg::register_one(control::Collective c, uint32_t* id) {
  std::string why;
  const auto digest_of = [&](uint32_t i) {
    const std::optional<control::JobSpec> spec = control::parse_job(rank_->job_text(i, c), &why);
    return spec ? std::optional(control::job_digest(*spec)) : std::nullopt;
  };
  // The allreduce's: o_.job_id, the others the next two ids; or, with none given, from the
  // description (the same ranks at the same addresses get the same ids).
  const uint32_t offset = c == control::Collective::allreduce ? 0 : c == control::Collective::reduce_scatter ? 1 : 2;
  *id = o_.job_id ? o_.job_id + offset : 0;
  if (*id == 0) {
    const std::optional<std::string> d = digest_of(1);
    if (!d) return "the job's description does not parse: " + why;
    *id = 1 + static_cast<uint32_t>(std::stoul(d->substr(0, 8), nullptr, 16) % 0x7ffffffeu);  // its first 32 bits
  }
  const std::optional<std::string> own = digest_of(*id);
  if (!own) return "the job's description does not parse: " + why;
  // A job with this very description can only be one that an earlier run on these addresses left
  // (its ranks were killed): this run's ranks hold UDP 4791 at every one of them. It goes.
  const std::optional<control::JobListLine> left = rank_->job_state(*id, &why);
  if (!left && !why.empty()) return "the appliance cannot be reached at " + o_.control + ": " + why;
  if (left && left->spec_digest == own) {
    std::string reply;
    rank_->control_request("remove " + std::to_string(*id) + "\n", &reply, &why);
    std::fprintf(stderr, "inagg rank 0: removed job %u (%s), left by an earlier run on these addresses\n", *id,
                 left->state.c_str());
  }
  why = rank_->register_job(*id, c, true);
  if (why.find("already belongs to job") != std::string::npos)
    why += " (a job an earlier run on these addresses left with other parameters? remove it with inagg-ctl)";
  return why;
}

ProcessGroupInagg::~ProcessGroupInagg() {
  // The last reference may be dropped by a future's callback on the queue's own thread (DDP's
  // reducer going away): that thread cannot join itself.
  if (worker_.joinable() && worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();
    return;
  }
  try {
    // From Python the destructor runs with the GIL held, which the queue's thread may need for a
    // future's callback (a Python hook's then()).
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      shutdown();
    } else {
      shutdown();
    }
  } catch (...) {  // nothing may leave a destructor; shutdown() reports what it can
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupInagg::enqueue(c10d::OpType op, std::vector<at::Tensor> outputs, Body body) {
  auto work = c10::make_intrusive<QueuedWork>(getRank(), op, std::move(outputs));
  {
    std::lock_guard lock(mutex_);
    if (stop_) throw std::runtime_error("inagg: the process group was shut down (destroy_process_group)");
    queue_.push_back({work, std::move(body)});
  }
  cv_.notify_all();
  return work;
}

void ProcessGroupInagg::serve() {
  while (true) {
    Task t;
    {
      std::unique_lock lock(mutex_);
      if (queue_.empty()) {
        if (stop_) return;
        if (!rank_) {
          cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
          continue;
        }
        lock.unlock();
        rank_->serve(1);  // answers the peers between calls, as a NIC does
        const std::lock_guard snap(snapshot_mutex_);
        snapshot_ = rank_->transport_counters().value_or(client::TransportCounters{});
        continue;
      }
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      t.body();
    } catch (...) {
      error = std::current_exception();
      count(Counter::failed);
    }
    if (rank_) {
      const std::lock_guard snap(snapshot_mutex_);
      snapshot_ = rank_->transport_counters().value_or(client::TransportCounters{});
    }
    t.work->complete(error);
  }
}

void ProcessGroupInagg::wait_gloo(const c10::intrusive_ptr<c10d::Work>& work) {
  while (rank_ && !work->isCompleted()) rank_->serve(1);
  try {
    work->wait();
  } catch (const std::exception& e) {
    // Gloo's communication failed (a rank went away): the job cannot go on either.
    remove_job(std::string("a call through Gloo failed: ") + e.what());
    throw;
  }
}

void ProcessGroupInagg::remove_job(const std::string& why) {
  if (!rank_ || job_id_ == 0 || job_removed_.exchange(true)) return;
  for (const uint32_t id : {job_id_, rs_job_id_, ag_job_id_}) {
    if (id == 0) continue;
    std::string reply, error;
    const bool ok = rank_->control_request("remove " + std::to_string(id) + "\n", &reply, &error);
    if (o_.debug || !ok)
      note("job " + std::to_string(id) + " removed from the appliance after: " + why +
           (ok ? " (" + reply.substr(0, reply.find('\n')) + ")" : " (the removal failed: " + error + ")"));
  }
}

void ProcessGroupInagg::note(const std::string& what) const {
  std::fprintf(stderr, "inagg rank %d: %s\n", getRank(), what.c_str());
}

std::string ProcessGroupInagg::address() const {
  return rank_ && rank_->options().address ? util::ip_text(*rank_->options().address) : "";
}

std::map<std::string, uint64_t> ProcessGroupInagg::counters() const {
  std::map<std::string, uint64_t> m;
#define X(name, text) m[#name] = counters_[static_cast<size_t>(Counter::name)].load();
  INAGG_PG_COUNTERS(X)
#undef X
  if (rank_) {
    const std::lock_guard snap(snapshot_mutex_);
    const client::TransportCounters& t = snapshot_;
    m["packets_sent"] = t.packets_sent;
    m["retransmitted"] = t.retransmitted;
    m["timeouts"] = t.timeouts;
    m["naks_received"] = t.naks_received;
    m["accepted"] = t.accepted;
    m["duplicates"] = t.duplicates;
    m["bad_icrc"] = t.bad_icrc;
    m["rx_refused_source"] = t.rx_refused_source;
    m["rx_refused_rkey"] = t.rx_refused_rkey;
    m["rx_refused_qpn"] = t.rx_refused_qpn;
    m["rx_refused_early"] = t.rx_refused_early;
  }
  return m;
}

std::string ProcessGroupInagg::job_stats(const std::string& collective) const {
  const std::optional<control::Collective> c = control::collective_of(collective);
  if (!c)
    throw std::invalid_argument("inagg: job_stats: no collective '" + collective +
                                "' (allreduce, reduce_scatter, all_gather)");
  const uint32_t id = *c == control::Collective::allreduce        ? job_id_
                      : *c == control::Collective::reduce_scatter ? rs_job_id_
                                                                  : ag_job_id_;
  if (!rank_ || id == 0)
    throw std::runtime_error("inagg: this process group has no " + collective + " job on an appliance");
  std::string reply, error;
  if (!rank_->control_request("stats " + std::to_string(id) + "\n", &reply, &error))
    throw std::runtime_error("inagg: " + error);
  if (control::is_error_reply(reply))
    throw std::runtime_error("inagg: the appliance answered: " + reply.substr(0, reply.find('\n')));
  return reply;
}

void ProcessGroupInagg::shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();  // runs what was queued first
    if (!rank_) return;
    const uint64_t deadline = client::now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9);
    rank_->finish();  // the predecessor quiet (or timeout_s): nobody needs this rank any more
    // Rank 0 removes the job once every rank has finished (or the deadline passed: a rank that
    // died never will), answering its own peers meanwhile.
    try {
      const int64_t finished = store_->add("finished", 1);
      if (getRank() == 0 && !job_removed_) {
        int64_t seen = finished;
        for (uint64_t next_check = 0; seen < getSize() && client::now_ns() < deadline;) {
          rank_->serve(1);
          if (client::now_ns() < next_check) continue;
          seen = store_->add("finished", 0);
          next_check = client::now_ns() + 20'000'000;
        }
        remove_job(seen < getSize() ? "shutdown: only " + std::to_string(seen) + " of " + std::to_string(getSize()) +
                                          " ranks finished within " + std::to_string(o_.timeout_s) + " s"
                                    : "shutdown: every rank finished");
      }
    } catch (const std::exception& e) {  // the store's server went away (its process ended)
      if (getRank() == 0) remove_job(std::string("shutdown (the store: ") + e.what() + ")");
    }
    shut_ = true;
  });
}

}  // namespace inagg::torchdist
