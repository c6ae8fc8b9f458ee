#include "inagg/client/control_client.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include <cstdio>

#include "inagg/client/clock.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/socket.hpp"

namespace inagg::client {

bool ControlClient::request(const std::string& text, std::string* reply, std::string* error) const {
  return control::send_request(path_, text, reply, error, timeout_ms_, "inagg", secret_);
}

std::optional<control::JobListLine> ControlClient::job_state(uint32_t id, std::string* error) const {
  std::string reply;
  if (!request("list\n", &reply, error)) return std::nullopt;
  for (size_t start = 0; start < reply.size();) {
    size_t end = reply.find('\n', start);
    if (end == std::string::npos) end = reply.size();
    const std::optional<control::JobListLine> l =
        control::parse_job_list_line(std::string_view(reply).substr(start, end - start));
    if (l && l->id == id) return l;
    start = end + 1;
  }
  return std::nullopt;
}

uint64_t ControlClient::slots_released(uint32_t id) const {
  std::string reply, error;
  if (!request("stats " + std::to_string(id) + "\n", &reply, &error) || control::is_error_reply(reply)) return 0;
  static constexpr std::string_view kKey = "slots_released ";
  for (size_t at = 0; at < reply.size();) {
    size_t end = reply.find('\n', at);
    if (end == std::string::npos) end = reply.size();
    const std::string_view line = std::string_view(reply).substr(at, end - at);
    if (line.starts_with(kKey)) return std::strtoull(std::string(line.substr(kKey.size())).c_str(), nullptr, 10);
    at = end + 1;
  }
  return 0;
}

namespace {

std::string other_spec(uint32_t id, const std::string& theirs, const std::string& ours) {
  return "job " + std::to_string(id) + " is already active on the appliance with another spec (spec digest " + theirs +
         ", this job's " + ours + ")" + ": remove it first (inagg-ctl remove " + std::to_string(id) +
         ") or give this job another id";
}

// One datagram from `from` (an address of this host) to `to`'s discard port: a plain frame the
// appliance bridges, and notes where `from` is. Best effort: a failure only delays the binding.
void announce(const util::IpAddr& from, const util::IpAddr& to) {
  const bool v6 = from.version == util::IpVersion::v6;
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_storage a{}, b{};
  socklen_t len = 0;
  if (v6) {
    auto* x = reinterpret_cast<sockaddr_in6*>(&a);
    auto* y = reinterpret_cast<sockaddr_in6*>(&b);
    x->sin6_family = y->sin6_family = AF_INET6;
    std::memcpy(&x->sin6_addr, from.bytes.data(), 16);
    std::memcpy(&y->sin6_addr, to.bytes.data(), 16);
    y->sin6_port = htons(9);
    len = sizeof(sockaddr_in6);
  } else {
    auto* x = reinterpret_cast<sockaddr_in*>(&a);
    auto* y = reinterpret_cast<sockaddr_in*>(&b);
    x->sin_family = y->sin_family = AF_INET;
    std::memcpy(&x->sin_addr, from.bytes.data(), 4);
    std::memcpy(&y->sin_addr, to.bytes.data(), 4);
    y->sin_port = htons(9);
    len = sizeof(sockaddr_in);
  }
  static constexpr char kHello[] = "inagg: this rank is here";
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0)
    (void)::sendto(fd, kHello, sizeof kHello - 1, 0, reinterpret_cast<sockaddr*>(&b), len);
  ::close(fd);
}

}  // namespace

Registration ControlClient::register_job(bool add_job, const std::string& job_text, uint32_t id, uint64_t deadline_ns,
                                         int poll_ms, std::optional<unsigned> announce_rank) const {
  Registration r;
  std::string reply, e;
  // A refusal of another job with this id (an earlier run's, with other parameters) is not ours.
  std::string unparsed;
  const std::optional<control::JobSpec> own = control::parse_job(job_text, &unparsed);
  const std::optional<std::string> own_digest = own ? std::optional(control::job_digest(*own)) : std::nullopt;
  if (add_job) {
    if (!request("add\n" + job_text, &reply, &e)) return {Registration::Outcome::unreachable, e};
    if (control::is_error_reply(reply) && reply.find("already exists") == std::string::npos)
      return {Registration::Outcome::refused, reply};
  }
  uint64_t next_announce_ns = 0;
  while (true) {
    const std::optional<control::JobListLine> l = job_state(id, &e);
    // An active job with this id and another spec (an earlier run's, another launch) is not ours:
    // its connections, sizes or rank count differ, and joining it would send into a job the
    // appliance sums otherwise, or not at all.
    if (l && l->state == "active" && l->spec_digest && own_digest && *l->spec_digest != *own_digest)
      return {Registration::Outcome::refused, control::format_error(other_spec(id, *l->spec_digest, *own_digest))};
    // An active job of this spec that has summed already is an earlier launch's, left registered
    // (a rank of this launch joins before any rank sends): its PSNs are past this launch's first,
    // so every packet would be taken for an old one and the ranks would fail on their RC retries.
    // A replay job (pktgen's) restarts at its first PSN by design.
    if (l && l->state == "active" && own && !own->replay) {
      const uint64_t summed = slots_released(id);
      if (summed > 0)
        return {Registration::Outcome::refused,
                control::format_error("job " + std::to_string(id) +
                                      " is already active on the appliance with this spec and has summed " +
                                      std::to_string(summed) +
                                      " slots: an earlier run's, which this run cannot join from its first PSN: "
                                      "remove it first (inagg-ctl remove " +
                                      std::to_string(id) + ") or give this job another id")};
    }
    if (l && l->state == "active") return r;
    if (announce_rank && own && *announce_rank < own->conns.size() && l && l->state == "binding" &&
        now_ns() >= next_announce_ns) {
      for (const control::ConnectionSpec& c : own->conns)
        if (c.rank == *announce_rank) announce(c.src_ip, c.dst_ip);
      next_announce_ns = now_ns() + 100'000'000;
    }
    // The rank that added the job read the refusal in its reply; the others read it here.
    if (l && l->state == "refused" && (!l->spec_digest || !own_digest || *l->spec_digest == *own_digest))
      return {Registration::Outcome::refused, control::format_error(l->error)};
    if (now_ns() > deadline_ns) return {Registration::Outcome::not_active, ""};
    ::poll(nullptr, 0, poll_ms);
  }
}

}  // namespace inagg::client
