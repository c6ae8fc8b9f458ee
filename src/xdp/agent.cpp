#include "inagg/xdp/agent.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "inagg/control/protocol.hpp"
#include "inagg/util/text.hpp"

namespace inagg::xdp {
namespace {

constexpr int kArpTimeoutMs = 2000;

}  // namespace

HeadAgent::~HeadAgent() {
  for (const auto& [id, fd] : joined_) ::close(fd);
}

bool HeadAgent::remove_job(unsigned id, std::string* error) {
  if (!prog_.remove_job(id, error)) return false;
  if (auto it = joined_.find(id); it != joined_.end()) {
    ::close(it->second);
    joined_.erase(it);
  }
  return true;
}

bool HeadAgent::add_job(HeadJob job, std::string* error) {
  if (job.parent && !job.parent_mac) {
    job.parent_mac = resolve_neighbor(iface_, *job.parent, kArpTimeoutMs, error);
    if (!job.parent_mac) {
      *error = "parent: " + *error + " (parent_mac = ... in the job file skips ARP)";
      return false;
    }
  }
  // Every member's MAC, with either fan-out: a retained result goes back to the member's bound
  // address, never to a frame's own source.
  for (size_t r = 0; r < job.member.size(); ++r) {
    std::optional<HeadJob::Member>& m = job.member[r];
    if (m && !m->mac && !(m->mac = resolve_neighbor(iface_, m->ip, kArpTimeoutMs, error))) {
      *error = "member " + std::to_string(r) + ": " + *error + " (member = RANK, IP, MAC in the job file skips ARP)";
      return false;
    }
  }
  if (!job.key) {
    wire::XaggKey key;
    if (!wire::load_xagg_key(nullptr, job.key_file, &key, error)) return false;
    job.key = key;
  }
  int fd = -1;
  if (job.parent_group) {
    fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ip_mreqn m{};
    std::memcpy(&m.imr_multiaddr, job.parent_group->bytes.data(), 4);
    m.imr_ifindex = iface_.ifindex;
    if (fd < 0 || ::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      *error = "cannot join parent_group " + util::ip_text(*job.parent_group) + " on " + iface_.name + ": " +
               std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return false;
    }
  }
  if (!prog_.add_job(job, error)) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (auto it = joined_.find(job.id); it != joined_.end()) {  // a replaced job leaves its old group
    ::close(it->second);
    joined_.erase(it);
  }
  if (fd >= 0) joined_[job.id] = fd;
  return true;
}

std::string HeadAgent::format_counters(unsigned row) const {
  const Counters c = prog_.counters(row);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) out += std::string(counter_name(i)) + " " + std::to_string(c[i]) + "\n";
  return out;
}

std::string HeadAgent::format_jobs() const {
  if (prog_.jobs().empty()) return "no jobs\n";
  std::string out;
  for (const auto& [id, j] : prog_.jobs()) {
    const Counters c = prog_.counters(id);
    out += "id=" + std::to_string(id) + " members=" + std::to_string(j.members) +
           " values=" + std::to_string(j.values) + " window=" + std::to_string(j.window) +
           " total_weight=" + std::to_string(j.total_weight) + " group=" + util::ip_text(j.group);
    if (j.parent)
      out += " parent=" + util::ip_text(*j.parent) + " parent_group=" + util::ip_text(*j.parent_group) +
             " parent_rank=" + std::to_string(j.parent_rank);
    out += j.unicast ? " fanout=unicast" : " fanout=multicast";
    out += " completed=" + std::to_string(c[XAGG_C_completed]) +
           " results_sent=" + std::to_string(c[XAGG_C_results_sent]) + "\n";
  }
  return out;
}

std::string HeadAgent::handle(std::string_view request) {
  const size_t nl = request.find('\n');
  const std::string_view first = util::trim(request.substr(0, nl));
  const std::string_view body = nl == std::string_view::npos ? std::string_view() : request.substr(nl + 1);
  const size_t sp = first.find(' ');
  const std::string_view verb = first.substr(0, sp);
  const std::string_view arg = sp == std::string_view::npos ? std::string_view() : util::trim(first.substr(sp + 1));
  std::string error;
  auto job_id = [&](bool required, unsigned* id) {
    if (arg.empty() && !required) return true;
    const std::optional<uint64_t> v = util::parse_unsigned(arg, XAGG_MAX_JOBS - 1);
    if (!v) {
      error = "expected a job id 0.." + std::to_string(XAGG_MAX_JOBS - 1) + ", got " + util::quote_for_error(arg);
      return false;
    }
    *id = static_cast<unsigned>(*v);
    return true;
  };
  if (verb == "add") {
    if (!arg.empty()) return control::format_error("add takes the head job text on the following lines, no argument");
    const std::optional<HeadJob> job = parse_head_job(body, &error);
    if (!job || !add_job(*job, &error)) return control::format_error(error);
    return control::format_job_added(job->id);
  }
  if (body.find_first_not_of(" \t\r\n") != std::string_view::npos)
    return control::format_error("only add takes lines after the first");
  if (verb == "remove") {
    unsigned id = 0;
    if (!job_id(true, &id)) return control::format_error(error);
    if (!remove_job(id, &error)) return control::format_error(error + " (list shows the jobs)");
    return control::format_job_removed(id);
  }
  if (verb == "list") {
    if (!arg.empty()) return control::format_error("list takes no argument");
    return format_jobs();
  }
  if (verb == "stats") {
    unsigned id = XAGG_MAX_JOBS;
    if (!job_id(false, &id)) return control::format_error(error);
    if (id != XAGG_MAX_JOBS && !prog_.jobs().count(id))
      return control::format_error("no job " + std::to_string(id) + " on this head (list shows the jobs)");
    return format_counters(id);
  }
  return control::format_error("unknown request " + util::quote_for_error(verb) + "; valid: add, remove, list, stats");
}

}  // namespace inagg::xdp
