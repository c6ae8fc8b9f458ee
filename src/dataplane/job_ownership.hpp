// Which datapath lcore owns which job, as the control side sees it, and the requests that keep
// the lcores' engines and their routes in line with it. Internal to src/dataplane.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "inagg/control/protocol.hpp"
#include "lcore.hpp"

namespace inagg::dataplane {

class JobOwnership {
 public:
  void set_lcores(std::vector<LcoreState*> lcores) { lcores_ = std::move(lcores); }
  // How long a removed job's connections stay closed on the lcores that did not own it.
  void set_closed_hold(uint64_t ns) { closed_hold_ns_ = ns; }
  // The lcore of channel `c` of a job whose channel 0 is on `owner`: the channels go round the
  // lcores from there, so that C channels on L lcores share an lcore only when C > L.
  static uint16_t channel_lcore(uint16_t owner, unsigned c, size_t nlcores) {
    return static_cast<uint16_t>((owner + c) % nlcores);
  }

  // A new job goes to lcore index `placed` when it is given (>= 0: where the state directory had
  // it), else to the lcore with the fewest jobs' channels; a job of C channels has its channel c
  // on channel_lcore(that lcore, c), each an engine job of its own; a re-added id (a failed job) to its lcore, whose
  // engine decides. Refused when one of its connections belongs to another job.
  // `start`: JobStart::resume for a job registered before the appliance restarted (engine.hpp).
  // `bound`: the spec the engines take (its ranks bound to ports, rank_binding.hpp); `spec`, the
  // one it was registered with, is what list and stats describe (its digest).
  bool add(const control::JobSpec& spec, std::string* error, agg::JobStart start = agg::JobStart::fresh,
           int placed = -1, const control::JobSpec* bound = nullptr);
  // Whether `spec` could be added as far as other jobs go (none of its connections another job's).
  bool check(const control::JobSpec& spec, std::string* error);
  // The index of the lcore with the fewest jobs, where add() puts a new job given no lcore.
  int least_loaded();
  // What each lcore's engine holds (its jobs' channels, slot memory and mbuf quota), by index.
  struct LcoreUse {
    size_t jobs = 0, memory_bytes = 0, mbufs = 0;
  };
  std::vector<LcoreUse> use();
  // Every lcore drops the job's packets (its connections held closed) until add() or release().
  void hold(const control::JobSpec& spec);
  void release(const control::JobSpec& spec);
  // Where each address, then each MAC, was seen on any lcore (StationTable), per query.
  std::vector<std::vector<StationTable::Sighting>> stations(const std::vector<util::IpAddr>& addresses,
                                                            const std::vector<Mac>& macs);
  // Pins the bound ranks' MACs to their ports in every lcore's MAC table, and their addresses and
  // MACs in every lcore's station table (StationTable::set_pinned); false with *error.
  bool set_pins(const std::vector<std::pair<Mac, uint16_t>>& pins, const std::vector<util::IpAddr>& addresses,
                std::string* error);
  bool remove(uint32_t id, std::string* error);
  std::vector<control::JobStatus> describe_all();
  bool describe(uint32_t id, control::JobStatus* out);
  agg::EngineCounters totals();
  // The index (= queue) of the lcore that owns job `id` (its channel 0), or -1.
  int owner_of(uint32_t id);
  // The lcore index of each of the job's channels, channel 0 first; empty for no job.
  std::vector<uint16_t> channel_lcores(uint32_t id);

 private:
  bool conflicts(const control::JobSpec& spec, std::string* error) const;
  // *taken: the channels that took the job before one refused (0: none was touched).
  bool add_channels(const control::JobSpec& spec, uint16_t owner, agg::JobStart start, std::string* error,
                    unsigned* taken);
  std::vector<size_t> load() const;                              // channels per lcore
  bool remove_parts(uint32_t id, std::string* error = nullptr);  // with mutex_ held
  // Removes job `id` from one lcore's engine; on refusal sets *error (when given) to why.
  bool remove_from(uint16_t lcore, uint32_t id, std::string* error);
  std::vector<uint16_t> lcores_of(uint32_t id) const;  // every lcore whose engine has a part of the job
  // One job's parts (its channels' infos) as one: counters and buffers summed, failed if any part is.
  static agg::JobInfo merge(const std::vector<agg::JobInfo>& parts);
  control::JobStatus description(const agg::JobInfo& info) const;
  void to_every_lcore(LcoreRequest::Kind kind, const control::JobSpec& spec);  // takes mutex_
  void broadcast(LcoreRequest::Kind kind, const control::JobSpec& spec, uint16_t owner, uint64_t linger_ns = 0);

  std::vector<LcoreState*> lcores_;
  uint64_t closed_hold_ns_ = 0;
  // Taken by control-side threads only (the control thread, DPDK's telemetry thread): it keeps the
  // maps below consistent and lets one request at a time use an lcore's rings. The lcores never
  // take it.
  std::mutex mutex_;
  std::unordered_map<uint32_t, uint16_t> owner_;  // job id -> lcore index
  std::unordered_map<uint32_t, control::JobSpec> specs_;
  std::unordered_map<uint32_t, std::vector<uint16_t>> channel_lcores_;  // each channel's lcore, channel 0 first
};

}  // namespace inagg::dataplane
