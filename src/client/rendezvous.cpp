#include "inagg/client/rendezvous.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <sstream>

#include "inagg/client/clock.hpp"

namespace inagg::client {
namespace {

constexpr size_t kMaxLine = 4096;

int ms_left(uint64_t deadline_ns) {
  const uint64_t t = now_ns();
  if (t >= deadline_ns) return 0;
  return static_cast<int>(std::min<uint64_t>((deadline_ns - t) / 1'000'000 + 1, 1'000'000));
}

sockaddr_in address_of(const util::IpAddr& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(ip.v4_host_order());
  return a;
}

std::string where(const RendezvousConfig& c) { return util::ip_text(c.host) + ":" + std::to_string(c.port); }

// "key=value" fields of a line.
std::optional<std::string> field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string tok;
  while (in >> tok)
    if (tok.compare(0, key.size() + 1, key + "=") == 0) return tok.substr(key.size() + 1);
  return std::nullopt;
}

std::optional<uint64_t> number(const std::string& line, const std::string& key, uint64_t max) {
  const std::optional<std::string> v = field(line, key);
  if (!v || v->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 0);
  if (errno || *end || n > max) return std::nullopt;
  return n;
}

}  // namespace

bool Rendezvous::wait_for(int fd, short events) const {
  while (true) {
    const int left = ms_left(cfg_.deadline_ns);
    pollfd p{fd, events, 0};
    if (!idle_) return left > 0 && ::poll(&p, 1, left) > 0;
    if (::poll(&p, 1, 0) > 0) return true;
    if (left <= 0) return false;
    idle_(std::min(left, kIdleMs));
  }
}

// Reads until `stop` has been seen (or the peer closed); false on timeout, error or an oversized answer.
bool Rendezvous::read_until(int fd, const std::string& stop, std::string* out) const {
  char buf[1024];
  while (out->find(stop) == std::string::npos) {
    if (!wait_for(fd, POLLIN)) return false;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > 64 * kMaxLine) return false;
  }
  return true;
}

bool Rendezvous::write_all(int fd, const std::string& s) const {
  for (size_t done = 0; done < s.size();) {
    if (!wait_for(fd, POLLOUT)) return false;
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::vector<RankConnection> connections_of(const std::vector<RankEndpoint>& all) {
  std::vector<RankConnection> c;
  for (const RankEndpoint& e : all) c.push_back({e.gid, e.send_qpn, e.recv_qpn, e.start_psn});
  return c;
}

std::string format_endpoint(const RankEndpoint& e) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "endpoint rank=%u gid=%s send_qpn=0x%x recv_qpn=0x%x start_psn=0x%x recv_addr=0x%" PRIx64
                " recv_rkey=0x%x payload=%u workers=%u",
                e.rank, util::ip_text(e.gid).c_str(), e.send_qpn, e.recv_qpn, e.start_psn, e.recv_addr, e.recv_rkey,
                e.payload, e.workers);
  return buf;
}

std::optional<RankEndpoint> parse_endpoint(const std::string& line, std::string* error) {
  RankEndpoint e;
  const std::optional<uint64_t> rank = number(line, "rank", 63), sq = number(line, "send_qpn", 0xffffff),
                                rq = number(line, "recv_qpn", 0xffffff), psn = number(line, "start_psn", 0xffffff),
                                addr = number(line, "recv_addr", UINT64_MAX),
                                rkey = number(line, "recv_rkey", UINT32_MAX), p = number(line, "payload", 1 << 16);
  const std::optional<std::string> gid_text = field(line, "gid");
  const std::optional<util::IpAddr> gid = gid_text ? util::parse_ip(*gid_text) : std::nullopt;
  if (line.rfind("endpoint ", 0) != 0 || !rank || !sq || !rq || !psn || !addr || !rkey || !p || !gid) {
    *error = "not an endpoint line (rank, gid, send_qpn, recv_qpn, start_psn, recv_addr, recv_rkey, payload): '" +
             line.substr(0, 200) + "'";
    return std::nullopt;
  }
  e.rank = static_cast<unsigned>(*rank);
  e.gid = *gid;
  e.send_qpn = static_cast<uint32_t>(*sq);
  e.recv_qpn = static_cast<uint32_t>(*rq);
  e.start_psn = static_cast<uint32_t>(*psn);
  e.recv_addr = *addr;
  e.recv_rkey = static_cast<uint32_t>(*rkey);
  e.payload = static_cast<uint32_t>(*p);
  e.workers = static_cast<unsigned>(number(line, "workers", 64).value_or(0));
  return e;
}

Rendezvous::~Rendezvous() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Rendezvous::drop_peers(const std::string& why) {
  // Rank 0: tell the ranks still connected why, so that each of them fails at once with the reason
  // instead of at its deadline, then end our side (FIN after that line). The sockets stay open
  // until the Rendezvous goes, their input drained: closing one with unread input (another rank's
  // barrier line) would send a reset, which can discard the reason before the rank has read it.
  for (int& fd : peers_) {
    if (fd < 0) continue;
    if (cfg_.rank == 0) {
      const std::string line = "error " + why + "\n";
      (void)!::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd, SHUT_WR);
      char sink[512];
      while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
      }
    } else {
      ::close(fd);
      fd = -1;
    }
  }
  broken_ = why;
}

bool Rendezvous::gather(const std::string& what, std::vector<std::string>* lines, const Answer& answer,
                        std::string* error) {
  // Accept the other ranks' connections and read one line from each; then answer them all. The
  // connections stay open for the barriers: a rank whose process ends closes its own, which is
  // how the others learn of it at once.
  std::vector<int> conns;
  struct Closer {
    std::vector<int>& fds;
    ~Closer() {
      for (int fd : fds) ::close(fd);
    }
  } closer{conns};
  lines->clear();
  while (conns.size() + 1 < cfg_.workers) {
    if (!wait_for(listen_fd_, POLLIN)) {
      *error = "rank 0: only " + std::to_string(conns.size()) + " of the " + std::to_string(cfg_.workers - 1) +
               " other ranks " + what + " on TCP port " + std::to_string(cfg_.port) +
               " before the deadline (are they all started, with the same --workers, --ip-base and --exchange-port?)";
      return false;
    }
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    conns.push_back(c);
    std::string line;
    if (!read_until(c, "\n", &line)) {
      *error =
          "rank 0: a rank connected to port " + std::to_string(cfg_.port) + " but sent no line before the deadline";
      return false;
    }
    lines->push_back(line.substr(0, line.find('\n')));
  }
  const std::string reply = answer(*lines) + "end\n";
  for (int c : conns)
    if (!write_all(c, reply)) {
      *error = "rank 0: a rank went away before it had rank 0's answer";
      return false;
    }
  // Kept, in the order of `lines` (exchange() files them by rank).
  peers_ = std::move(conns);
  conns.clear();
  return true;
}

bool Rendezvous::ask(const std::string& line, std::string* answer, std::string* error) {
  const sockaddr_in a = address_of(cfg_.host, cfg_.port);
  std::string last = "nothing answered";
  // Rank 0 may not be listening yet: try again until the deadline.
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("cannot create a TCP socket: ") + std::strerror(errno);
      return false;
    }
    // A blocking connect gives up after SO_SNDTIMEO instead of the kernel's SYN retries (minutes).
    const timeval tv{std::max(1, std::min(5, ms_left(cfg_.deadline_ns) / 1000)), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
      answer->clear();
      const bool ok = write_all(fd, line + "\n") && read_until(fd, "end\n", answer);
      if (ok) {
        peers_.assign(1, fd);  // kept for the barriers
        return true;
      }
      ::close(fd);
      *error = "rank " + std::to_string(cfg_.rank) + ": rank 0 at " + where(cfg_) +
               " took the connection but gave no complete answer before the deadline (are all ranks started?)";
      return false;
    }
    last = std::strerror(errno);
    ::close(fd);
    if (ms_left(cfg_.deadline_ns) <= 0) {
      *error = "rank " + std::to_string(cfg_.rank) + ": could not reach rank 0 at " + where(cfg_) + " (" + last +
               ") before the deadline: is rank 0 started, and is --ip-base right?";
      return false;
    }
    // Again in 100 ms.
    for (const uint64_t until = now_ns() + 100'000'000; now_ns() < until;) {
      if (!idle_) {
        ::poll(nullptr, 0, 100);
        break;
      }
      idle_(kIdleMs);
    }
  }
}

bool Rendezvous::exchange(const RendezvousConfig& cfg, const RankEndpoint& endpoint, std::vector<RankEndpoint>* all,
                          std::string* error) {
  cfg_ = cfg;
  RankEndpoint mine = endpoint;
  mine.workers = cfg.workers;
  std::vector<std::string> lines;
  if (cfg.rank == 0) {
    if (listen_fd_ < 0) {
      listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int one = 1;
      ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      // Rank 0's own address only: ranks of other jobs (other --ip-base) on this host listen on theirs.
      const sockaddr_in any = address_of(cfg.host, cfg.port);
      if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0 ||
          ::listen(listen_fd_, 64) != 0) {
        *error = "rank 0: cannot listen on TCP port " + std::to_string(cfg.port) +
                 " for the other ranks: " + std::strerror(errno) + " (choose another --exchange-port)";
        return false;
      }
    }
    const auto table = [&mine](std::vector<std::string>& got) {
      got.push_back(format_endpoint(mine));
      std::string t;
      for (const std::string& l : got) t += l + "\n";
      return t;
    };
    if (!gather("sent their endpoints", &lines, table, error)) return false;
    // peers_[i] answered lines[i]; file them by rank (the lines are checked below).
    std::vector<int> by_rank(cfg.workers, -1);
    for (size_t i = 0; i < peers_.size(); ++i) {
      std::string ignored;
      const std::optional<RankEndpoint> e = parse_endpoint(lines[i], &ignored);
      if (e && e->rank < cfg.workers && by_rank[e->rank] < 0) {
        by_rank[e->rank] = peers_[i];
        peers_[i] = -1;
      }
    }
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
    peers_ = std::move(by_rank);
  } else {
    std::string answer;
    if (!ask(format_endpoint(mine), &answer, error)) return false;
    for (size_t start = 0; start < answer.size();) {
      const size_t end = answer.find('\n', start);
      const std::string l = answer.substr(start, end - start);
      if (l == "end") break;
      if (l.rfind("error ", 0) == 0) {
        *error = "rank 0 refused the exchange: " + l.substr(6);
        return false;
      }
      lines.push_back(l);
      start = end + 1;
    }
  }
  all->assign(cfg.workers, RankEndpoint{});
  std::vector<bool> seen(cfg.workers, false);
  for (const std::string& l : lines) {
    const std::optional<RankEndpoint> e = parse_endpoint(l, error);
    if (!e) return false;
    if (e->rank >= cfg.workers || seen[e->rank]) {
      *error = "the exchange got rank " + std::to_string(e->rank) + " " + (seen[e->rank] ? "twice" : "") +
               " with --workers " + std::to_string(cfg.workers) + ": does every rank have its own --rank?";
      return false;
    }
    if (e->workers != cfg.workers) {
      *error = "rank " + std::to_string(e->rank) + " was started with --workers " + std::to_string(e->workers) +
               ", rank " + std::to_string(cfg.rank) + " with " + std::to_string(cfg.workers) +
               ": every rank needs the same";
      return false;
    }
    if (e->payload != mine.payload) {
      *error = "rank " + std::to_string(e->rank) + " uses --payload " + std::to_string(e->payload) + ", rank " +
               std::to_string(mine.rank) + " " + std::to_string(mine.payload) + ": every rank needs the same";
      return false;
    }
    seen[e->rank] = true;
    (*all)[e->rank] = *e;
  }
  for (unsigned r = 0; r < cfg.workers; ++r)
    if (!seen[r]) {
      *error = "the exchange has no endpoint of rank " + std::to_string(r);
      return false;
    }
  return true;
}

bool Rendezvous::barrier(const std::string& what, std::string* error) {
  if (cfg_.workers == 0 || peers_.empty()) {
    *error = "barrier before the exchange";
    return false;
  }
  if (!broken_.empty()) {
    *error = "the ranks' connections are closed: " + broken_;
    return false;
  }
  const std::string line = "barrier " + what;
  if (cfg_.rank != 0) {
    // Our line to rank 0 on the kept connection, then its answer: "end", or "error ..." when a rank
    // went away or came to another barrier; the connection closing means rank 0 went away.
    std::string answer;
    if (!write_all(peers_[0], line + "\n") || !read_until(peers_[0], "\n", &answer)) {
      const std::string why = ms_left(cfg_.deadline_ns) <= 0
                                  ? "rank 0 did not end the barrier '" + what + "' before the deadline"
                                  : "rank 0's connection closed in the barrier '" + what + "' (its process ended?)";
      drop_peers(why);
      *error = "rank " + std::to_string(cfg_.rank) + ": " + why;
      return false;
    }
    answer = answer.substr(0, answer.find('\n'));
    if (answer == "end") return true;
    drop_peers(answer.rfind("error ", 0) == 0 ? answer.substr(6) : "rank 0 answered '" + answer.substr(0, 100) + "'");
    *error = "rank " + std::to_string(cfg_.rank) + " in the barrier '" + what + "': " + broken_;
    return false;
  }
  // Rank 0: a line from every other rank's connection, read as they come; a connection that
  // closes is a rank that went away, and every other rank is told so at once.
  std::vector<std::string> got(cfg_.workers);
  std::vector<bool> in(cfg_.workers, false);
  in[0] = true;
  for (unsigned arrived = 1; arrived < cfg_.workers;) {
    std::vector<pollfd> fds;
    std::vector<unsigned> rank_of;
    for (unsigned r = 1; r < cfg_.workers; ++r)
      if (!in[r]) {
        fds.push_back({peers_[r], POLLIN, 0});
        rank_of.push_back(r);
      }
    const int left = ms_left(cfg_.deadline_ns);
    if (left <= 0) {
      std::string missing;
      for (unsigned r = 1; r < cfg_.workers; ++r)
        if (!in[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      drop_peers("rank " + missing + " did not reach the barrier '" + what + "' before the deadline");
      *error = "rank 0: " + broken_;
      return false;
    }
    if (idle_) idle_(std::min(left, kIdleMs));
    if (::poll(fds.data(), fds.size(), idle_ ? 0 : std::min(left, 100)) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const unsigned r = rank_of[i];
      char buf[512];
      const ssize_t n = ::recv(peers_[r], buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        drop_peers("rank " + std::to_string(r) + " went away (its connection to rank 0 closed: its process ended?)");
        *error = "rank 0 in the barrier '" + what + "': " + broken_;
        return false;
      }
      got[r].append(buf, static_cast<size_t>(n));
      if (got[r].size() > kMaxLine) got[r].resize(kMaxLine);
      const size_t eol = got[r].find('\n');
      if (eol == std::string::npos) continue;
      if (got[r].substr(0, eol) != line) {
        drop_peers("rank " + std::to_string(r) + " came to '" + got[r].substr(0, std::min<size_t>(eol, 100)) +
                   "' while rank 0 was at '" + line + "'");
        *error = "rank 0: " + broken_;
        return false;
      }
      in[r] = true;
      ++arrived;
    }
  }
  for (unsigned r = 1; r < cfg_.workers; ++r)
    if (!write_all(peers_[r], "end\n")) {
      drop_peers("rank " + std::to_string(r) + " went away before rank 0 ended the barrier '" + what + "'");
      *error = "rank 0: " + broken_;
      return false;
    }
  return true;
}

}  // namespace inagg::client
