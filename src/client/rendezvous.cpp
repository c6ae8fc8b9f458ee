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
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/util/hmac.hpp"

namespace inagg::client {
namespace {

constexpr size_t kMaxLine = 4096;

sockaddr_in address_of(const util::IpAddr& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(ip.v4_host_order());
  return a;
}

std::string where(const RendezvousConfig& c) { return util::ip_text(c.host) + ":" + std::to_string(c.port); }

}  // namespace

bool Rendezvous::wait_for(int fd, short events) const {
  while (true) {
    const int left = ms_until(cfg_.deadline_ns);
    pollfd p{fd, events, 0};
    if (!idle_) return left > 0 && ::poll(&p, 1, left) > 0;
    if (::poll(&p, 1, 0) > 0) return true;
    if (left <= 0) return false;
    idle_(std::min(left, kIdleMs));
  }
}

// Reads until `stop` has been seen, or with an empty `stop` until the peer closes; false on timeout,
// error, an early close or an oversized answer.
bool Rendezvous::read_until(int fd, const std::string& stop, std::string* out) const {
  char buf[1024];
  while (stop.empty() || out->find(stop) == std::string::npos) {
    if (!wait_for(fd, POLLIN)) return false;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && stop.empty()) return true;
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > 64 * kMaxLine) return false;
  }
  return true;
}

// Reads until a whole line "end ..." has arrived (the last line of rank 0's answer).
bool Rendezvous::read_answer(int fd, std::string* out) const {
  char buf[1024];
  while (true) {
    const size_t at = out->compare(0, 4, "end ") == 0 ? 0 : out->find("\nend ");
    if (at != std::string::npos && out->find('\n', at + 1) != std::string::npos) return true;
    if (!wait_for(fd, POLLIN)) return false;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > 64 * kMaxLine) return false;
  }
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

Rendezvous::~Rendezvous() {
  // Rank 0 after a failed barrier: each rank still connected has been sent the reason. A rank's
  // barrier line may arrive after drop_peers drained the input, and closing with unread input
  // sends a reset that can discard the reason before the rank has read it: read on until each
  // rank closes its side (it does once it has the reason), for at most a second.
  if (cfg_.rank == 0 && !broken_.empty()) {
    const uint64_t until = now_ns() + 1'000'000'000ull;
    std::vector<pollfd> fds;
    for (const Kept& k : peers_)
      if (k.fd >= 0) fds.push_back({k.fd, POLLIN, 0});
    while (!fds.empty() && now_ns() < until) {
      if (::poll(fds.data(), fds.size(), std::max(1, ms_until(until))) <= 0) continue;
      for (size_t i = 0; i < fds.size();) {
        char sink[512];
        const ssize_t n = fds[i].revents ? ::recv(fds[i].fd, sink, sizeof sink, MSG_DONTWAIT) : 1;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          fds[i] = fds.back();
          fds.pop_back();
        } else {
          fds[i++].revents = 0;
        }
      }
    }
  }
  for (const Kept& k : peers_)
    if (k.fd >= 0) ::close(k.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

namespace {

// What each side MACs: a label, both nonces, the text. Rank 0's nonce is fresh per connection, so
// a message recorded on one connection is worth nothing on another.
std::string request_mac(const std::string& secret, const std::string& ours, const std::string& theirs,
                        const std::string& line) {
  return util::hmac_sha256_hex(secret, "inagg-rendezvous request\n" + ours + "\n" + theirs + "\n" + line);
}
std::string answer_mac(const std::string& secret, const std::string& ours, const std::string& theirs,
                       const std::string& text) {
  return util::hmac_sha256_hex(secret, "inagg-rendezvous answer\n" + ours + "\n" + theirs + "\n" + text);
}

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// A connection rank 0 has accepted: its nonce, what it sent so far, until when it may prove itself.
struct Peer {
  int fd = -1;
  std::string from;  // its address and port, for the log
  std::string nonce, peer_nonce, in, line;
  uint64_t deadline_ns = 0;
  unsigned rank = 0;
};

constexpr unsigned kNoRank = ~0u;

void drop(std::vector<Peer>* peers, size_t i) {
  ::close((*peers)[i].fd);
  (*peers)[i] = std::move(peers->back());
  peers->pop_back();
}

}  // namespace

bool Rendezvous::check_secret(std::string* error) const {
  if (cfg_.secret.size() >= kMinExchangeSecret) return true;
  if (!cfg_.insecure) {
    *error = std::string(
                 "the ranks' meeting needs the job's shared secret, the same on every rank (at least 16 "
                 "characters): set $") +
             kExchangeSecretEnv + " on every rank (e.g. export " + kExchangeSecretEnv +
             "=$(head -c 24 /dev/urandom | base64) where the job is launched) or give --exchange-secret-file";
    return false;
  }
  std::fprintf(stderr,
               "inagg rank %u: WARNING: the ranks' meeting at %s is NOT authenticated (insecure exchange, no "
               "secret): any host that reaches it can join this job as a rank or answer as rank 0\n",
               cfg_.rank, where(cfg_).c_str());
  return true;
}

void Rendezvous::note_refusal(const std::string& from, const std::string& why) {
  if (!refusal_log_.allow(now_ns())) return;
  const uint64_t more = refusal_log_.take_suppressed();
  const std::string also = more ? " (and " + std::to_string(more) + " before it not shown)" : "";
  std::fprintf(stderr, "inagg rank 0: the ranks' meeting dropped a connection from %s: %s%s\n", from.c_str(),
               why.c_str(), also.c_str());
}

bool Rendezvous::listen(std::string* error) {
  if (listen_fd_ >= 0) return true;
  // Rank 0's own address only (the one the others connect to); every address only where that is
  // not a local one (a NAT in front of rank 0). The secret guards both.
  for (const util::IpAddr& at : {cfg_.host, util::IpAddr::v4(INADDR_ANY)}) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in a = address_of(at, cfg_.port);
    if (listen_fd_ >= 0 && ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 &&
        ::listen(listen_fd_, 64) == 0)
      return true;
    const int err = errno;
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    if (err != EADDRNOTAVAIL) {
      *error = "rank 0: cannot listen on TCP port " + std::to_string(cfg_.port) +
               " for the other ranks: " + std::strerror(err) + " (choose another --exchange-port)";
      return false;
    }
  }
  *error = "rank 0: cannot listen on TCP port " + std::to_string(cfg_.port);
  return false;
}

bool Rendezvous::gather(const std::string& what, std::vector<std::string>* lines, const Check& check,
                        const Answer& answer, std::string* error) {
  // Every connection is read at once; one that proves itself within kAuthMs with a good line joins
  // `ranks`, any other is closed (told why only when it proved itself: it holds the secret). Once
  // every other rank is there, all get the answer.
  std::vector<Peer> pending, ranks;
  struct Closer {
    std::vector<Peer>& a;
    std::vector<Peer>& b;
    ~Closer() {
      for (const Peer& p : a) ::close(p.fd);
      for (const Peer& p : b) ::close(p.fd);
    }
  } closer{pending, ranks};
  std::vector<bool> seen(cfg_.workers, false);
  lines->clear();
  std::string last_refusal;
  const auto refuse = [&](const Peer& p, const std::string& why, bool authenticated) {
    ++refused_;
    last_refusal = why;
    note_refusal(p.from, why);
    if (!authenticated) return;
    const std::string text = "error " + why + "\n";
    const std::string msg = text + "end " + answer_mac(cfg_.secret, p.nonce, p.peer_nonce, text) + "\n";
    (void)!::send(p.fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  };
  const std::string hint = " (--workers " + std::to_string(cfg_.workers) + "; does every rank have its own --rank?)";
  while (ranks.size() + 1 < cfg_.workers) {
    const uint64_t now = now_ns();
    if (now >= cfg_.deadline_ns) {
      *error = "rank 0: only " + std::to_string(ranks.size()) + " of the " + std::to_string(cfg_.workers - 1) +
               " other ranks " + what + " on TCP port " + std::to_string(cfg_.port) +
               " before the deadline (are they all started, with the same --workers, --ip-base, --exchange-port "
               "and secret?)" +
               (refused_ ? "; " + std::to_string(refused_) + " connection(s) dropped, the last: " + last_refusal : "");
      return false;
    }
    for (size_t i = 0; i < pending.size();)  // silent too long: dropped
      if (pending[i].deadline_ns <= now) {
        refuse(pending[i], "no authenticated message within " + std::to_string(kAuthMs) + " ms", false);
        drop(&pending, i);
      } else {
        ++i;
      }
    // fds: the listener, then `pending`, then `ranks` (a rank that joined sends nothing more
    // until the answer: its connection readable means it closed, or broke the protocol).
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Peer& p : pending) fds.push_back({p.fd, POLLIN, 0});
    for (const Peer& p : ranks) fds.push_back({p.fd, POLLIN, 0});
    const size_t first_rank = 1 + pending.size();
    int wait = ms_until(cfg_.deadline_ns);
    for (const Peer& p : pending) wait = std::min(wait, ms_until(p.deadline_ns));
    if (::poll(fds.data(), fds.size(), idle_ ? 0 : wait) <= 0) {
      if (idle_) idle_(std::min(std::max(wait, 0), kIdleMs));
      continue;
    }
    // Joined ranks first, from the back (a drop moves the last one into the hole).
    for (size_t i = ranks.size(); i-- > 0;) {
      if (!fds[first_rank + i].revents) continue;
      char byte;
      const ssize_t n = ::recv(ranks[i].fd, &byte, 1, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      const std::string r = std::to_string(ranks[i].rank);
      refuse(ranks[i],
             n > 0 ? "rank " + r + " sent more than its one line"
                   : "rank " + r + " closed its connection before the answer",
             false);
      seen[ranks[i].rank] = false;  // its place is open again
      drop(&ranks, i);
    }
    // Readable pending connections (fds[1..] match `pending` before any drop below).
    std::vector<size_t> done;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (!fds[i + 1].revents) continue;
      Peer& p = pending[i];
      char buf[1024];
      const ssize_t n = ::read(p.fd, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) p.in.append(buf, static_cast<size_t>(n));
      const size_t first = p.in.find('\n'), second = first == std::string::npos ? first : p.in.find('\n', first + 1);
      if (n > 0 && second == std::string::npos && p.in.size() <= 2 * kMaxLine) continue;
      done.push_back(i);
      p.rank = kNoRank;
      // "auth <nonce> <mac>\n<line>\n"
      std::istringstream auth(p.in.substr(0, first));
      std::string word, mac;
      auth >> word >> p.peer_nonce >> mac;
      const std::string line = second == std::string::npos ? "" : p.in.substr(first + 1, second - first - 1);
      if (n <= 0 || second == std::string::npos || word != "auth" || !is_hex(p.peer_nonce, 2 * util::kNonceBytes) ||
          !util::equal_constant_time(mac, request_mac(cfg_.secret, p.nonce, p.peer_nonce, line))) {
        refuse(p,
               n <= 0                        ? "closed before its message"
               : second == std::string::npos ? "no message within " + std::to_string(2 * kMaxLine) + " bytes"
                                             : "a message without a valid MAC (another secret?)",
               false);
        continue;
      }
      const std::optional<unsigned> rank = rank_field(line);
      std::string why;
      if (!rank)
        why = "no rank";
      else if (*rank == 0 || *rank >= cfg_.workers)
        why = "rank " + std::to_string(*rank) + " out of range 1.." + std::to_string(cfg_.workers - 1) + hint;
      else if (seen[*rank])
        why = "rank " + std::to_string(*rank) + " twice" + hint;
      else
        why = check(line);
      if (!why.empty()) {
        refuse(p, "a rank sent '" + line.substr(0, 100) + "': " + why, true);
        continue;
      }
      seen[*rank] = true;
      p.rank = *rank;
      p.line = line;
    }
    for (size_t k = done.size(); k-- > 0;) {
      const size_t i = done[k];
      if (pending[i].rank != kNoRank) {
        ranks.push_back(std::move(pending[i]));
        pending[i] = std::move(pending.back());
        pending.pop_back();
      } else {
        drop(&pending, i);
      }
    }
    if (!fds[0].revents) continue;
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    const int c = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;
    Peer p;
    p.fd = c;
    p.from = util::ip_text(util::IpAddr::v4(ntohl(peer.sin_addr.s_addr))) + ":" + std::to_string(ntohs(peer.sin_port));
    if (pending.size() >= kMaxPending) {  // the oldest unproven one makes room
      size_t oldest = 0;
      for (size_t i = 1; i < pending.size(); ++i)
        if (pending[i].deadline_ns < pending[oldest].deadline_ns) oldest = i;
      refuse(pending[oldest], "more than " + std::to_string(kMaxPending) + " connections waiting", false);
      drop(&pending, oldest);
    }
    p.nonce = util::random_hex();
    p.deadline_ns = std::min(cfg_.deadline_ns, now_ns() + uint64_t{kAuthMs} * 1'000'000);
    const std::string challenge = "challenge " + p.nonce + "\n";
    if (p.nonce.empty() ||
        ::send(c, challenge.data(), challenge.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(challenge.size())) {
      ::close(c);
      continue;
    }
    pending.push_back(std::move(p));
  }
  for (const Peer& p : ranks) lines->push_back(p.line);
  const std::string reply = answer(*lines);
  for (Peer& p : ranks) {
    const int flags = ::fcntl(p.fd, F_GETFL);
    ::fcntl(p.fd, F_SETFL, flags & ~O_NONBLOCK);
    if (!write_all(p.fd, reply + "end " + answer_mac(cfg_.secret, p.nonce, p.peer_nonce, reply) + "\n")) {
      *error = "rank 0: rank " + std::to_string(p.rank) + " went away before it had rank 0's answer";
      return false;
    }
  }
  // Kept for the barriers: a rank whose process ends closes its own, which is how the others learn
  // of it at once.
  peers_.assign(cfg_.workers, Kept{});
  for (Peer& p : ranks) {
    peers_[p.rank] = Kept{p.fd, p.nonce, p.peer_nonce, 0, 0, {}};
    p.fd = -1;
  }
  ranks.clear();
  return true;
}

bool Rendezvous::ask(const std::string& line, std::string* answer, std::string* error) {
  const sockaddr_in a = address_of(cfg_.host, cfg_.port);
  std::string last = "nothing answered";
  const std::string who = "rank " + std::to_string(cfg_.rank) + ": rank 0 at " + where(cfg_);
  // Rank 0 may not be listening yet: try again until the deadline.
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("cannot create a TCP socket: ") + std::strerror(errno);
      return false;
    }
    // A blocking connect gives up after SO_SNDTIMEO instead of the kernel's SYN retries (minutes).
    const timeval tv{std::max(1, std::min(5, ms_until(cfg_.deadline_ns) / 1000)), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
      std::string challenge;
      const bool got = read_until(fd, "\n", &challenge);
      const std::string nonce =
          challenge.rfind("challenge ", 0) == 0 ? challenge.substr(10, 2 * util::kNonceBytes) : "";
      const std::string ours = util::random_hex();
      if (!got || !is_hex(nonce, 2 * util::kNonceBytes) || challenge.size() != 11 + nonce.size() || ours.empty()) {
        ::close(fd);
        *error = who + " did not open the exchange with its nonce (is that rank 0 of this job, and inagg-worker?)";
        return false;
      }
      answer->clear();
      // Rank 0's answer ends with the line "end <mac>"; the connection stays open for the barriers.
      const bool ok =
          write_all(fd, "auth " + ours + " " + request_mac(cfg_.secret, nonce, ours, line) + "\n" + line + "\n") &&
          read_answer(fd, answer);
      if (!ok) ::close(fd);
      const size_t end = answer->rfind("end ", answer->size() < 5 ? 0 : answer->size() - 5);
      if (ok && (end == std::string::npos || (end > 0 && (*answer)[end - 1] != '\n') || answer->back() != '\n'))
        ::close(fd);
      if (!ok || end == std::string::npos || (end > 0 && (*answer)[end - 1] != '\n') || answer->back() != '\n') {
        *error = who +
                 " took the connection but gave no complete answer before the deadline (are all ranks started, with "
                 "the same secret?)";
        return false;
      }
      const std::string mac = answer->substr(end + 4, answer->size() - end - 5);
      answer->resize(end);
      if (!util::equal_constant_time(mac, answer_mac(cfg_.secret, nonce, ours, *answer))) {
        ::close(fd);
        *error = who + " answered without a valid MAC: another secret, or not rank 0 of this job";
        return false;
      }
      peers_.assign(1, Kept{fd, nonce, ours, 0, 0, {}});
      return true;
    }
    last = std::strerror(errno);
    ::close(fd);
    if (ms_until(cfg_.deadline_ns) <= 0) {
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
  if (!check_secret(error)) return false;
  RankEndpoint mine = endpoint;
  mine.workers = cfg.workers;
  std::vector<std::string> lines;
  if (cfg.rank == 0) {
    if (!listen(error)) return false;
    // A line the table below would refuse is dropped at the door instead, so that one bad line
    // (another --workers or --payload, one that does not parse) does not stop the meeting.
    const auto check = [&](const std::string& line) -> std::string {
      std::string why;
      const std::optional<RankEndpoint> e = parse_endpoint(line, &why);
      if (!e) return why;
      if (e->workers != cfg.workers)
        return "started with --workers " + std::to_string(e->workers) + ", rank 0 with " + std::to_string(cfg.workers) +
               ": every rank needs the same";
      if (e->payload != mine.payload)
        return "uses --payload " + std::to_string(e->payload) + ", rank 0 " + std::to_string(mine.payload) +
               ": every rank needs the same";
      return "";
    };
    const auto table = [&mine](std::vector<std::string>& got) {
      got.push_back(format_endpoint(mine));
      std::string t;
      for (const std::string& l : got) t += l + "\n";
      return t;
    };
    if (!gather("sent their endpoints", &lines, check, table, error)) return false;
  } else {
    std::string answer;
    if (!ask(format_endpoint(mine), &answer, error)) return false;
    for (size_t start = 0; start < answer.size();) {
      const size_t end = answer.find('\n', start);
      const std::string l = answer.substr(start, end - start);
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
      *error = "the exchange got rank " + std::to_string(e->rank) + " " +
               (e->rank >= cfg.workers ? "out of range" : "twice") + " with --workers " + std::to_string(cfg.workers) +
               ": does every rank have its own --rank?";
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

}  // namespace inagg::client
