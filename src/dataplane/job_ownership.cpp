#include "job_ownership.hpp"

#include <algorithm>
#include <cstdio>

#include "inagg/agg/job_status.hpp"

namespace inagg::dataplane {

bool JobOwnership::conflicts(const agg::JobSpec& spec, std::string* error) const {
  // Each engine checks its own jobs' connections; jobs on other lcores are checked here.
  for (const auto& [id, other] : specs_) {
    if (id == spec.id) continue;
    for (const agg::ConnectionSpec& c : spec.conns)
      for (const agg::ConnectionSpec& o : other.conns)
        for (const OwnerKey& k : {key_of(c.dst_ip, c.dst_qpn), key_of(c.src_ip, c.src_qpn)})
          if (k == key_of(o.dst_ip, o.dst_qpn) || k == key_of(o.src_ip, o.src_qpn)) {
            char qpn[16];
            std::snprintf(qpn, sizeof qpn, "%x", k.qpn);
            *error = "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + " uses QPN 0x" + qpn +
                     " on an address that already belongs to job " + std::to_string(id);
            return true;
          }
  }
  return false;
}

// With one datapath lcore there is nobody to hand packets to: no owner tables.
void JobOwnership::broadcast(LcoreRequest::Kind kind, const agg::JobSpec& spec, uint16_t owner, uint64_t linger_ns,
                             const std::vector<uint16_t>& verifiers) {
  if (lcores_.size() < 2) return;
  for (LcoreState* l : lcores_) {
    LcoreRequest r{kind};
    r.spec = &spec;
    r.owner = owner;
    r.linger_ns = linger_ns;
    r.verifiers = verifiers;
    call_lcore(*l, r);
  }
}

uint16_t JobOwnership::verifier_of(uint16_t owner, unsigned rank, uint16_t job_lcores, size_t nlcores) {
  if (job_lcores < 2 || nlcores < 2) return owner;
  const size_t verifiers = std::min<size_t>(job_lcores, nlcores) - 1;
  return static_cast<uint16_t>((owner + 1 + rank % verifiers) % nlcores);
}

bool JobOwnership::add(const agg::JobSpec& spec, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (conflicts(spec, error)) return false;
  uint16_t owner = 0;
  if (auto it = owner_.find(spec.id); it != owner_.end()) {
    owner = it->second;
  } else {
    std::vector<size_t> load(lcores_.size(), 0);
    for (const auto& [id, o] : owner_) ++load[o];
    owner = static_cast<uint16_t>(std::min_element(load.begin(), load.end()) - load.begin());
  }
  // Every lcore holds the job's connections closed before any of them learns its owner: until the
  // owner has it, a packet of the job is dropped wherever it arrives, never forwarded raw.
  const bool existed = owner_.count(spec.id) > 0;
  if (!existed) broadcast(LcoreRequest::Kind::hold_closed, spec, 0);
  LcoreRequest r{LcoreRequest::Kind::add_job};
  r.spec = &spec;
  call_lcore(*lcores_[owner], r);
  if (!r.ok) {
    if (!existed) broadcast(LcoreRequest::Kind::release_closed, spec, 0, 0);
    *error = r.error;
    return false;
  }
  owner_[spec.id] = owner;
  specs_[spec.id] = spec;
  std::vector<uint16_t> verifiers;  // by rank (a job file may list its connections in any order)
  if (job_lcores_ > 1)
    for (const agg::ConnectionSpec& c : spec.conns) {
      if (c.rank >= verifiers.size()) verifiers.resize(c.rank + 1, owner);
      verifiers[c.rank] = verifier_of(owner, c.rank, job_lcores_, lcores_.size());
    }
  broadcast(LcoreRequest::Kind::set_owner, specs_[spec.id], owner, 0, verifiers);
  return true;
}

bool JobOwnership::remove(uint32_t id, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = owner_.find(id);
  if (it == owner_.end()) {
    *error = "no job " + std::to_string(id) + " (list jobs to see which exist)";
    return false;
  }
  LcoreRequest r{LcoreRequest::Kind::remove_job};
  r.id = id;
  call_lcore(*lcores_[it->second], r);
  if (!r.ok) {
    *error = r.error;
    return false;
  }
  broadcast(LcoreRequest::Kind::clear_owner, specs_[id], 0, closed_hold_ns_);
  owner_.erase(it);
  specs_.erase(id);
  return true;
}

control::JobStatus JobOwnership::description(const agg::JobInfo& info) const {
  const auto it = specs_.find(info.id);
  return agg::job_status(info, it != specs_.end() ? &it->second : nullptr);
}

std::vector<control::JobStatus> JobOwnership::describe_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<control::JobStatus> all;
  for (LcoreState* l : lcores_) {
    LcoreRequest r{LcoreRequest::Kind::list_jobs};
    call_lcore(*l, r);
    for (const agg::JobInfo& info : r.infos) all.push_back(description(info));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return all;
}

bool JobOwnership::describe(uint32_t id, control::JobStatus* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = owner_.find(id);
  if (it == owner_.end()) return false;
  LcoreRequest r{LcoreRequest::Kind::job_info};
  r.id = id;
  call_lcore(*lcores_[it->second], r);
  if (!r.ok || r.infos.empty()) return false;
  *out = description(r.infos[0]);
  return true;
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
