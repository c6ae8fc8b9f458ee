// The ranks' barriers over the connections the exchange kept (rendezvous.hpp): every message and
// answer carries an HMAC over the exchange's two nonces and its sequence number on that connection;
// a connection that closes is a rank that went away, and rank 0 tells the others which one.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/rendezvous.hpp"
#include "inagg/util/hmac.hpp"

namespace inagg::client {
namespace {

constexpr size_t kMaxLine = 4096;

}  // namespace

std::string Rendezvous::barrier_mac(const Kept& k, const char* label, uint64_t seq, const std::string& text) const {
  return util::hmac_sha256_hex(cfg_.secret, std::string("inagg-rendezvous ") + label + "\n" + k.rank0_nonce + "\n" +
                                                k.rank_nonce + "\n" + std::to_string(seq) + "\n" + text);
}

void Rendezvous::drop_peers(const std::string& why) {
  // Rank 0: tell the ranks still connected why, so that each of them fails at once with the reason
  // instead of at its deadline, then end our side (FIN after that line). The sockets stay open
  // until the Rendezvous goes, their input drained: closing one with unread input (another rank's
  // barrier line) would send a reset, which can discard the reason before the rank has read it.
  for (Kept& k : peers_) {
    if (k.fd < 0) continue;
    if (cfg_.rank == 0) {
      const std::string text = "error " + why;
      const std::string line = barrier_mac(k, "answer", k.sent++, text) + " " + text + "\n";
      (void)!::send(k.fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(k.fd, SHUT_WR);
      char sink[512];
      while (::recv(k.fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
    } else {
      ::close(k.fd);
      k.fd = -1;
    }
  }
  broken_ = why;
}

bool Rendezvous::barrier(const std::string& what, std::string* error) {
  return meet(what, "barrier " + what, nullptr, error);
}

bool Rendezvous::gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
                        std::string* error) {
  if (what.size() > 256 || what.find_first_of("\t\n") != std::string::npos || mine.find('\n') != std::string::npos ||
      mine.size() > kMaxGatherText) {
    *error = "the gather '" + what.substr(0, 100) + "': its name has a tab, a newline or more than 256 bytes, or " +
             "its text (" + std::to_string(mine.size()) + " bytes) a newline or more than " +
             std::to_string(kMaxGatherText) + " bytes";
    return false;
  }
  all->assign(cfg_.rank == 0 ? cfg_.workers : 0, "");
  // Rank 0 reads each rank's text after this prefix; the tab ends the name, which may have spaces.
  if (!meet(what, "gather " + what + "\t" + (cfg_.rank == 0 ? "" : mine), cfg_.rank == 0 ? all : nullptr, error))
    return false;
  if (cfg_.rank == 0) (*all)[0] = mine;
  return true;
}

bool Rendezvous::meet(const std::string& what, const std::string& line, std::vector<std::string>* texts,
                      std::string* error) {
  if (cfg_.workers == 0 || peers_.empty()) {
    *error = "barrier before the exchange";
    return false;
  }
  if (!broken_.empty()) {
    *error = "the ranks' connections are closed: " + broken_;
    return false;
  }
  if (cfg_.rank != 0) {
    // "<mac> barrier WHAT" to rank 0 on the kept connection; its answer "<mac> end", or
    // "<mac> error ..." when a rank went away or came to another barrier; the connection closing
    // means rank 0 went away.
    // One read can bring more than this answer: rank 0 ends a barrier and, when a rank goes away
    // just after, sends the next one's error at once. What follows the line waits in the inbox.
    Kept& k = peers_[0];
    std::string answer = std::move(k.inbox);
    k.inbox.clear();
    if (!write_all(k.fd, barrier_mac(k, "barrier", k.sent++, line) + " " + line + "\n") ||
        !read_until(k.fd, "\n", &answer)) {
      const std::string why = ms_until(cfg_.deadline_ns) <= 0
                                  ? "rank 0 did not end the barrier '" + what + "' before the deadline"
                                  : "rank 0's connection closed in the barrier '" + what + "' (its process ended?)";
      drop_peers(why);
      *error = "rank " + std::to_string(cfg_.rank) + ": " + why;
      return false;
    }
    const size_t eol = answer.find('\n');
    k.inbox = answer.substr(eol + 1);
    answer.resize(eol);
    const size_t sp = answer.find(' ');
    const std::string text = sp == std::string::npos ? "" : answer.substr(sp + 1);
    if (sp == std::string::npos ||
        !util::equal_constant_time(answer.substr(0, sp), barrier_mac(k, "answer", k.received++, text))) {
      drop_peers("rank 0's answer in the barrier '" + what + "' carried no valid MAC");
      *error = "rank " + std::to_string(cfg_.rank) + ": " + broken_;
      return false;
    }
    if (text == "end") return true;
    drop_peers(text.rfind("error ", 0) == 0 ? text.substr(6) : "rank 0 answered '" + text.substr(0, 100) + "'");
    *error = "rank " + std::to_string(cfg_.rank) + " in the barrier '" + what + "': " + broken_;
    return false;
  }
  // Rank 0: a line from every other rank's connection, read as they come; a connection that
  // closes is a rank that went away, and every other rank is told so at once.
  std::vector<bool> in(cfg_.workers, false);
  in[0] = true;
  for (unsigned arrived = 1; arrived < cfg_.workers;) {
    std::vector<pollfd> fds;
    std::vector<unsigned> rank_of;
    for (unsigned r = 1; r < cfg_.workers; ++r)
      if (!in[r]) {
        fds.push_back({peers_[r].fd, POLLIN, 0});
        rank_of.push_back(r);
      }
    const int left = ms_until(cfg_.deadline_ns);
    if (left <= 0) {
      std::string missing;
      for (unsigned r = 1; r < cfg_.workers; ++r)
        if (!in[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      drop_peers("rank " + missing + " did not reach the barrier '" + what + "' before the deadline");
      *error = "rank 0: " + broken_;
      return false;
    }
    if (idle_) idle_(std::min(left, kIdleMs));
    const bool queued = std::any_of(rank_of.begin(), rank_of.end(),
                                    [&](unsigned r) { return peers_[r].inbox.find('\n') != std::string::npos; });
    if (::poll(fds.data(), fds.size(), idle_ || queued ? 0 : std::min(left, 100)) <= 0 && !queued) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      const unsigned r = rank_of[i];
      std::string& got = peers_[r].inbox;
      if (!fds[i].revents && got.find('\n') == std::string::npos) continue;
      if (fds[i].revents) {
        char buf[512];
        const ssize_t n = ::recv(peers_[r].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
          drop_peers("rank " + std::to_string(r) + " went away (its connection to rank 0 closed: its process ended?)");
          *error = "rank 0 in the barrier '" + what + "': " + broken_;
          return false;
        }
        got.append(buf, static_cast<size_t>(n));
        if (got.size() > kMaxLine) got.resize(kMaxLine);
      }
      const size_t eol = got.find('\n');
      if (eol == std::string::npos) continue;
      const std::string msg = got.substr(0, eol);
      got.erase(0, eol + 1);
      const size_t sp = msg.find(' ');
      const std::string text = sp == std::string::npos ? "" : msg.substr(sp + 1);
      if (sp == std::string::npos ||
          !util::equal_constant_time(msg.substr(0, sp),
                                     barrier_mac(peers_[r], "barrier", peers_[r].received++, text))) {
        drop_peers("rank " + std::to_string(r) + "'s barrier message carried no valid MAC");
        *error = "rank 0: " + broken_;
        return false;
      }
      // A barrier's line is rank 0's own; a gather's starts with rank 0's (which ends in a tab).
      if (texts ? text.compare(0, line.size(), line) != 0 : text != line) {
        const std::string came = text.substr(0, std::min<size_t>(100, text.find('\t')));
        drop_peers("rank " + std::to_string(r) + " came to '" + came + "' while rank 0 was at '" +
                   line.substr(0, line.find('\t')) + "'");
        *error = "rank 0: " + broken_;
        return false;
      }
      if (texts) (*texts)[r] = text.substr(line.size());
      in[r] = true;
      ++arrived;
    }
  }
  for (unsigned r = 1; r < cfg_.workers; ++r) {
    Kept& k = peers_[r];
    if (!write_all(k.fd, barrier_mac(k, "answer", k.sent++, "end") + " end\n")) {
      drop_peers("rank " + std::to_string(r) + " went away before rank 0 ended the barrier '" + what + "'");
      *error = "rank 0: " + broken_;
      return false;
    }
  }
  return true;
}

}  // namespace inagg::client
