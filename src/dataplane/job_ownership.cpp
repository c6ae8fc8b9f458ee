#include "job_ownership.hpp"

#include <utility>

#include <algorithm>
#include <cstdio>

#include "inagg/agg/job_status.hpp"

namespace inagg::dataplane {

bool JobOwnership::conflicts(const control::JobSpec& spec, std::string* error) const {
  // Each engine checks its own jobs' connections; jobs on other lcores are checked here.
  for (const auto& [id, other] : specs_) {
    if (id == spec.id) continue;
    for (const control::ConnectionSpec& c : spec.conns)
      for (const control::ConnectionSpec& o : other.conns)
        for (const auto& [ip, qp] : {std::pair{c.dst_ip, c.dst_qpn}, std::pair{c.src_ip, c.src_qpn}})
          if ((ip == o.dst_ip && qp == o.dst_qpn) || (ip == o.src_ip && qp == o.src_qpn)) {
            char qpn[16];
            std::snprintf(qpn, sizeof qpn, "%x", qp);
            *error = "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + " uses QPN 0x" + qpn +
                     " on an address that already belongs to job " + std::to_string(id);
            return true;
          }
  }
  return false;
}

// With one datapath lcore there is nobody to hand packets to: no routes.
void JobOwnership::broadcast(LcoreRequest::Kind kind, const control::JobSpec& spec, uint16_t owner,
                             uint64_t linger_ns) {
  if (lcores_.size() < 2) return;
  for (LcoreState* l : lcores_) {
    LcoreRequest r{kind};
    r.spec = &spec;
    r.owner = owner;
    r.linger_ns = linger_ns;
    call_lcore(*l, r);
  }
}

namespace {

// The lcores of a job's channels, each once (an engine removes all its channels of a job at once).
std::vector<uint16_t> each_once(std::vector<uint16_t> lcores) {
  std::sort(lcores.begin(), lcores.end());
  lcores.erase(std::unique(lcores.begin(), lcores.end()), lcores.end());
  return lcores;
}

}  // namespace

// Channel c's engine job on channel_lcore(owner, c). All channels take the job or none does.
bool JobOwnership::add_channels(const control::JobSpec& spec, uint16_t owner, agg::JobStart start, std::string* error,
                                unsigned* taken) {
  std::vector<uint16_t> ls;
  *taken = 0;
  for (unsigned c = 0; c < spec.channels; ++c) {
    const control::JobSpec part = control::channel_spec(spec, c);
    const uint16_t lc = channel_lcore(owner, c, lcores_.size());
    LcoreRequest r{LcoreRequest::Kind::add_job};
    r.spec = &part;
    r.start = start;
    call_lcore(*lcores_[lc], r);
    if (!r.ok) {
      // Undo the channels already added (their engines keep the connections closed a while, as
      // after any removal: nothing of the job is forwarded raw in between).
      for (uint16_t done : each_once(ls)) remove_from(done, spec.id, nullptr);
      *error = r.error + (spec.channels > 1 ? " (on lcore " + std::to_string(lcores_[lc]->lcore_id) + ")" : "");
      return false;
    }
    ls.push_back(lc);
    ++*taken;
  }
  channel_lcores_[spec.id] = ls;
  return true;
}

std::vector<size_t> JobOwnership::load() const {
  std::vector<size_t> load(lcores_.size(), 0);
  for (const auto& [id, o] : owner_)
    if (auto it = channel_lcores_.find(id); it != channel_lcores_.end())
      for (uint16_t lc : it->second) ++load[lc];
    else
      ++load[o];
  return load;
}

std::vector<uint16_t> JobOwnership::lcores_of(uint32_t id) const {
  if (auto it = channel_lcores_.find(id); it != channel_lcores_.end()) return each_once(it->second);
  if (auto it = owner_.find(id); it != owner_.end()) return {it->second};
  return {};
}

agg::JobInfo JobOwnership::merge(const std::vector<agg::JobInfo>& parts) {
  agg::JobInfo m = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    const agg::JobInfo& p = parts[i];
    if (p.state == agg::JobState::failed && m.state != agg::JobState::failed) {
      m.state = p.state;
      m.error = p.error;
    }
    m.released_slots += p.released_slots;
    m.held_packets += p.held_packets;
    m.retained_packets += p.retained_packets;
    m.memory_bytes += p.memory_bytes;
    m.mbuf_quota += p.mbuf_quota;
    m.counters.add(p.counters);
    m.slot_completion.add(p.slot_completion);
  }
  return m;
}

bool JobOwnership::check(const control::JobSpec& spec, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  return !conflicts(spec, error);
}

int JobOwnership::least_loaded() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<size_t> l = load();
  return static_cast<int>(std::min_element(l.begin(), l.end()) - l.begin());
}

std::vector<JobOwnership::LcoreUse> JobOwnership::use() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<LcoreUse> use(lcores_.size());
  for (size_t i = 0; i < lcores_.size(); ++i) {
    LcoreRequest r{LcoreRequest::Kind::list_jobs};
    call_lcore(*lcores_[i], r);
    for (const agg::JobInfo& info : r.infos) {
      ++use[i].jobs;
      use[i].memory_bytes += info.memory_bytes;
      use[i].mbufs += info.mbuf_quota;
    }
  }
  return use;
}

// Unlike broadcast(), also with one lcore: a waiting job has no owner to take its packets.
void JobOwnership::to_every_lcore(LcoreRequest::Kind kind, const control::JobSpec& spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (LcoreState* l : lcores_) {
    LcoreRequest r{kind};
    r.spec = &spec;
    call_lcore(*l, r);
  }
}

void JobOwnership::hold(const control::JobSpec& spec) { to_every_lcore(LcoreRequest::Kind::hold_closed, spec); }
void JobOwnership::release(const control::JobSpec& spec) { to_every_lcore(LcoreRequest::Kind::release_closed, spec); }

std::vector<std::vector<StationTable::Sighting>> JobOwnership::stations(const std::vector<util::IpAddr>& addresses,
                                                                        const std::vector<Mac>& macs) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<StationTable::Sighting>> all(addresses.size() + macs.size());
  for (LcoreState* l : lcores_) {
    LcoreRequest r{LcoreRequest::Kind::stations};
    r.addresses = addresses;
    r.macs = macs;
    call_lcore(*l, r);
    for (size_t i = 0; i < r.seen.size() && i < all.size(); ++i)
      all[i].insert(all[i].end(), r.seen[i].begin(), r.seen[i].end());
  }
  return all;
}

bool JobOwnership::set_pins(const std::vector<std::pair<Mac, uint16_t>>& pins,
                            const std::vector<util::IpAddr>& addresses, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool ok = true;
  for (LcoreState* l : lcores_) {
    LcoreRequest r{LcoreRequest::Kind::set_pins};
    r.pins = pins;
    r.addresses = addresses;
    for (const auto& [mac, port] : pins) r.macs.push_back(mac);
    call_lcore(*l, r);
    if (!r.ok) {
      ok = false;
      *error = r.error;
    }
  }
  return ok;
}

bool JobOwnership::add(const control::JobSpec& spec, std::string* error, agg::JobStart start, int placed,
                       const control::JobSpec* bound) {
  const control::JobSpec& engine_spec = bound ? *bound : spec;
  // Bounded before any lcore hears of it: the holds below cost every lcore time per connection.
  if (spec.workers < 1 || spec.workers > 64) {
    *error = "job " + std::to_string(spec.id) + ": needs 1..64 workers (got " + std::to_string(spec.workers) + ")";
    return false;
  }
  if (!control::check_channels(spec, error)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (conflicts(spec, error)) return false;
  uint16_t owner = 0;
  if (auto it = owner_.find(spec.id); it != owner_.end()) {
    owner = it->second;
  } else if (placed >= 0 && static_cast<size_t>(placed) < lcores_.size()) {
    owner = static_cast<uint16_t>(placed);
  } else {
    const std::vector<size_t> l = load();
    owner = static_cast<uint16_t>(std::min_element(l.begin(), l.end()) - l.begin());
  }
  // Every lcore holds the job's connections closed before any of them learns its owner: until the
  // owner has it, a packet of the job is dropped wherever it arrives, never forwarded raw.
  const bool existed = owner_.count(spec.id) > 0;
  if (existed && specs_[spec.id].channels != spec.channels) {
    *error = "job " + std::to_string(spec.id) + " already exists with " + std::to_string(specs_[spec.id].channels) +
             " channel(s); remove it before adding it with " + std::to_string(spec.channels);
    return false;
  }
  if (!existed) broadcast(LcoreRequest::Kind::hold_closed, spec, 0);
  unsigned taken = 0;
  if (!add_channels(engine_spec, owner, start, error, &taken)) {
    if (!existed) broadcast(LcoreRequest::Kind::release_closed, spec, 0, 0);
    // A failed job of channels being replaced: the channels that took the new one gave it back,
    // the others still hold the failed one. Half a job cannot stay: all of it goes, as a removal
    // does (every engine keeps its connections closed for the closed hold). Where the first
    // channel refused (an active job: "already exists and is active"), nothing was replaced and
    // the job stays as it was.
    if (existed && spec.channels > 1 && taken > 0) {
      remove_parts(spec.id);
      *error += "; the failed job " + std::to_string(spec.id) + " it was to replace was removed";
    }
    return false;
  }
  owner_[spec.id] = owner;
  specs_[spec.id] = spec;
  const std::vector<uint16_t>& ls = channel_lcores_[spec.id];
  for (unsigned c = 0; c < spec.channels; ++c)  // each channel's packets to its own lcore
    broadcast(LcoreRequest::Kind::set_owner, control::channel_spec(engine_spec, c), ls[c]);
  return true;
}

bool JobOwnership::remove(uint32_t id, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!owner_.count(id)) {
    *error = "no job " + std::to_string(id) + " (list jobs to see which exist)";
    return false;
  }
  return remove_parts(id, error);
}

bool JobOwnership::remove_from(uint16_t lcore, uint32_t id, std::string* error) {
  LcoreRequest r{LcoreRequest::Kind::remove_job};
  r.id = id;
  call_lcore(*lcores_[lcore], r);
  if (!r.ok && error) *error = r.error;
  return r.ok;
}

// Every part of a job goes (each channel's; a part already gone is no refusal to the
// others), then every lcore forgets its owner. False, with the first engine's refusal, when an
// engine had no part of it.
bool JobOwnership::remove_parts(uint32_t id, std::string* error) {
  bool ok = true;
  for (uint16_t lc : lcores_of(id)) ok = remove_from(lc, id, ok ? error : nullptr) && ok;
  broadcast(LcoreRequest::Kind::clear_owner, specs_[id], 0, closed_hold_ns_);
  owner_.erase(id);
  specs_.erase(id);
  channel_lcores_.erase(id);
  return ok;
}

control::JobStatus JobOwnership::description(const agg::JobInfo& info) const {
  const auto it = specs_.find(info.id);
  return agg::job_status(info, it != specs_.end() ? &it->second : nullptr);
}

std::vector<control::JobStatus> JobOwnership::describe_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_map<uint32_t, std::vector<agg::JobInfo>> parts;  // a job of channels has one per channel
  for (LcoreState* l : lcores_) {
    LcoreRequest r{LcoreRequest::Kind::list_jobs};
    call_lcore(*l, r);
    for (const agg::JobInfo& info : r.infos) parts[info.id].push_back(info);
  }
  std::vector<control::JobStatus> all;
  for (const auto& [id, p] : parts) all.push_back(description(merge(p)));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return all;
}

bool JobOwnership::describe(uint32_t id, control::JobStatus* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<agg::JobInfo> parts;
  for (uint16_t lc : lcores_of(id)) {
    LcoreRequest r{LcoreRequest::Kind::job_info};
    r.id = id;
    call_lcore(*lcores_[lc], r);
    if (!r.ok || r.infos.empty()) return false;
    parts.insert(parts.end(), r.infos.begin(), r.infos.end());
  }
  if (parts.empty()) return false;
  *out = description(merge(parts));
  return true;
}

std::vector<uint16_t> JobOwnership::channel_lcores(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = channel_lcores_.find(id);
  return it == channel_lcores_.end() ? std::vector<uint16_t>{} : it->second;
}

int JobOwnership::owner_of(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = owner_.find(id);
  return it == owner_.end() ? -1 : it->second;
}

agg::EngineCounters JobOwnership::totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  agg::EngineCounters sum;
  for (LcoreState* l : lcores_) {
    LcoreRequest r{LcoreRequest::Kind::totals};
    call_lcore(*l, r);
    if (r.ok) sum.add(r.counters);
  }
  return sum;
}

}  // namespace inagg::dataplane
