// The ranks' out-of-band exchange (client::Rendezvous) on 127.0.0.1, one thread per rank, and the
// job text a rank 0 registers with the connections a transport made (RackPlan::connections): what
// VerbsTransport relies on, without an RDMA device.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/client/rendezvous.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/util/hmac.hpp"

namespace inagg::client {
namespace {

const std::string kSecret = "the job's secret, 0123456789";

// Rank r of n on 127.0.0.1:port, with the job's secret and `seconds` to its deadline.
RendezvousConfig config_of(unsigned r, unsigned n, uint16_t port, uint64_t seconds = 5,
                           const std::string& secret = kSecret) {
  RendezvousConfig c;
  c.rank = r;
  c.workers = n;
  c.host = *util::parse_ip("127.0.0.1");
  c.port = port;
  c.deadline_ns = now_ns() + seconds * 1'000'000'000ull;
  c.secret = secret;
  return c;
}

uint16_t test_port(unsigned k) { return static_cast<uint16_t>(30000 + (::getpid() * 7 + k * 101) % 20000); }

RankEndpoint endpoint_of(unsigned r, uint32_t payload = 1024) {
  RankEndpoint e;
  e.rank = r;
  e.gid = *util::parse_ip("::ffff:10.77.0." + std::to_string(101 + r));
  e.send_qpn = 0x11 + 2 * r;
  e.recv_qpn = 0x12 + 2 * r;
  e.start_psn = 0xfff000 + r;
  e.recv_addr = 0x7f0000001000ull + (uint64_t{r} << 20);
  e.recv_rkey = 0xabc00 + r;
  e.payload = payload;
  return e;
}

TEST(Rendezvous, EndpointLineRoundTrip) {
  const RankEndpoint e = endpoint_of(2);
  std::string err;
  const std::optional<RankEndpoint> back = parse_endpoint(format_endpoint(e), &err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(back->rank, 2u);
  EXPECT_EQ(back->gid, e.gid);
  EXPECT_EQ(back->send_qpn, e.send_qpn);
  EXPECT_EQ(back->recv_qpn, e.recv_qpn);
  EXPECT_EQ(back->start_psn, e.start_psn);
  EXPECT_EQ(back->recv_addr, e.recv_addr);
  EXPECT_EQ(back->recv_rkey, e.recv_rkey);
  EXPECT_EQ(back->payload, 1024u);
  EXPECT_FALSE(parse_endpoint("endpoint rank=1 gid=::ffff:10.0.0.1", &err));
  EXPECT_NE(err.find("not an endpoint line"), std::string::npos) << err;
}

// runs n ranks; ranks[r] gets payload payloads[r]; returns each rank's error ("" = ok).
std::vector<std::string> run_ranks(unsigned n, uint16_t port, const std::vector<uint32_t>& payloads,
                                   std::vector<std::vector<RankEndpoint>>* tables, bool barrier) {
  std::vector<std::string> errors(n);
  tables->assign(n, {});
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      const RendezvousConfig c = config_of(r, n, port);
      if (!rv.exchange(c, endpoint_of(r, payloads[r]), &(*tables)[r], &errors[r])) return;
      if (barrier && !rv.barrier("connected", &errors[r])) return;
      if (barrier && !rv.barrier("done", &errors[r])) return;
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(Rendezvous, EveryRankLearnsEveryEndpointThenMeetsInTheBarrier) {
  std::vector<std::vector<RankEndpoint>> tables;
  const std::vector<std::string> errors = run_ranks(3, test_port(1), {1024, 1024, 1024}, &tables, true);
  for (unsigned r = 0; r < 3; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(tables[r].size(), 3u);
    for (unsigned p = 0; p < 3; ++p) {
      EXPECT_EQ(tables[r][p].rank, p);
      EXPECT_EQ(tables[r][p].recv_qpn, endpoint_of(p).recv_qpn);
      EXPECT_EQ(tables[r][p].recv_rkey, endpoint_of(p).recv_rkey);
      EXPECT_EQ(tables[r][p].gid, endpoint_of(p).gid);
    }
  }
}

// A rank whose process ends between two barriers (its Rendezvous, and so its connection to rank 0,
// goes): the others' next barrier fails at once with the rank that went away, not at the deadline
// (30 s here); a rank at another barrier than rank 0 is refused with both names.
TEST(Rendezvous, ARankThatWentAwayFailsTheOthersBarrierAtOnce) {
  const unsigned n = 4;
  std::vector<std::string> errors(n);
  std::vector<uint64_t> took_ms(n, 0);
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto rv = std::make_unique<Rendezvous>();
      const RendezvousConfig c = config_of(r, n, test_port(5), 30);
      std::vector<RankEndpoint> table;
      if (!rv->exchange(c, endpoint_of(r, 1024), &table, &errors[r])) return;
      if (!rv->barrier("one", &errors[r])) return;
      if (r == 2) {
        rv.reset();  // rank 2's process ends
        return;
      }
      const uint64_t t0 = now_ns();
      if (rv->barrier("two", &errors[r])) errors[r] = "the barrier passed without rank 2";
      took_ms[r] = (now_ns() - t0) / 1'000'000;
      std::string again;
      EXPECT_FALSE(rv->barrier("three", &again)) << "rank " << r << ": a barrier after a failed one passed";
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors[2], "");
  for (unsigned r : {0u, 1u, 3u}) {
    EXPECT_NE(errors[r].find("rank 2 went away"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_LT(took_ms[r], 5000u) << "rank " << r << " waited for the deadline";
  }

  errors.assign(2, "");
  threads.clear();
  for (unsigned r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      const RendezvousConfig c = config_of(r, 2, test_port(6), 30);
      std::vector<RankEndpoint> table;
      if (!rv.exchange(c, endpoint_of(r, 1024), &table, &errors[r])) return;
      rv.barrier(r == 0 ? "size 4096" : "size 8192", &errors[r]);
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("rank 1 came to 'barrier size 8192' while rank 0 was at 'barrier size 4096'"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
}

// A gather carries each rank's line to rank 0 (texts with spaces, an empty one, one of the
// largest size), indexed by rank, between barriers on the same connections; the other ranks get
// nothing. A rank at another gather is refused with both names; a text with a newline or too long
// is refused before anything is sent.
TEST(Rendezvous, AGatherBringsEveryRanksTextToRankZero) {
  const unsigned n = 4;
  auto text_of = [](unsigned r) {
    return r == 2   ? std::string()
           : r == 3 ? std::string(Rendezvous::kMaxGatherText, 'x')
                    : "rank " + std::to_string(r) + " a b\tc";
  };
  std::vector<std::string> errors(n);
  std::vector<std::vector<std::string>> got(n), second(n);
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      std::vector<RankEndpoint> table;
      if (!rv.exchange(config_of(r, n, test_port(7), 30), endpoint_of(r, 1024), &table, &errors[r])) return;
      if (!rv.gather("the figures of 8 bytes", text_of(r), &got[r], &errors[r])) return;
      if (!rv.barrier("between", &errors[r])) return;
      if (!rv.gather("again", std::to_string(r * r), &second[r], &errors[r])) return;
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  ASSERT_EQ(got[0].size(), n);
  for (unsigned r = 0; r < n; ++r) EXPECT_EQ(got[0][r], text_of(r)) << "rank " << r << "'s text";
  EXPECT_EQ(second[0], (std::vector<std::string>{"0", "1", "4", "9"}));
  for (unsigned r = 1; r < n; ++r) EXPECT_TRUE(got[r].empty() && second[r].empty()) << "rank " << r;

  errors.assign(2, "");
  threads.clear();
  for (unsigned r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      std::vector<RankEndpoint> table;
      std::vector<std::string> all;
      if (!rv.exchange(config_of(r, 2, test_port(8), 30), endpoint_of(r, 1024), &table, &errors[r])) return;
      rv.gather(r == 0 ? "size 4096" : "size 8192", "mine", &all, &errors[r]);
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("rank 1 came to 'gather size 8192' while rank 0 was at 'gather size 4096'"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];

  Rendezvous alone;
  std::vector<std::string> all;
  std::string why;
  EXPECT_FALSE(alone.gather("x", "two\nlines", &all, &why));
  EXPECT_NE(why.find("a newline"), std::string::npos) << why;
  EXPECT_FALSE(alone.gather("x", std::string(Rendezvous::kMaxGatherText + 1, 'x'), &all, &why));
  EXPECT_NE(why.find("more than 3072 bytes"), std::string::npos) << why;
}

TEST(Rendezvous, NoRankZeroIsADeadlineWithAMessage) {
  Rendezvous rv;
  RendezvousConfig c;
  c.rank = 1;
  c.workers = 2;
  c.host = *util::parse_ip("127.0.0.1");
  c.port = test_port(3);
  c.deadline_ns = now_ns() + 300'000'000ull;
  c.secret = kSecret;
  std::vector<RankEndpoint> all;
  std::string err;
  EXPECT_FALSE(rv.exchange(c, endpoint_of(1), &all, &err));
  EXPECT_NE(err.find("could not reach rank 0 at 127.0.0.1:" + std::to_string(c.port)), std::string::npos) << err;
}

// A rank that is its own NIC (the software transport among verbs ranks) keeps its RC running
// while it waits for the others: the idle function is called, in short turns, in rank 0's wait
// for a late rank and in a late rank 0's answer, and the barriers still complete.
TEST(Rendezvous, TheIdleFunctionRunsWhileARankWaits) {
  const uint16_t port = test_port(4);
  std::string errors[2];
  unsigned idles[2] = {0, 0};
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      const RendezvousConfig c = config_of(r, 2, port);
      std::vector<RankEndpoint> all;
      if (!rv.exchange(c, endpoint_of(r), &all, &errors[r])) return;
      rv.set_idle([&, r](int wait_ms) {
        EXPECT_LE(wait_ms, Rendezvous::kIdleMs);
        ++idles[r];
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      });
      // Rank 1 comes late to the first barrier, rank 0 to the second.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (!rv.barrier("connected", &errors[r])) return;
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (!rv.barrier("done", &errors[r])) return;
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_GE(idles[r], 10u) << "rank " << r << " waited ~150 ms without running its idle function";
  }
}

// A peer on the exchange port that is not one of the job's ranks: raw TCP to 127.0.0.1:port.
struct RawPeer {
  int fd = -1;
  explicit RawPeer(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 500; ++i) {  // rank 0 may not listen yet: up to 5 s
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return;
      ::close(fd);
      fd = -1;
      ::poll(nullptr, 0, 10);
    }
  }
  ~RawPeer() {
    if (fd >= 0) ::close(fd);
  }
  void send_text(const std::string& t) const {
    ASSERT_EQ(::send(fd, t.data(), t.size(), MSG_NOSIGNAL), (ssize_t)t.size());
  }
  // Everything rank 0 sends until it closes (or 6 s pass).
  std::string read_all() const {
    std::string got;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 6000) > 0) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  std::string read_line() const {
    std::string got;
    char c;
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 6000) > 0 && ::read(fd, &c, 1) == 1 && c != '\n') got += c;
    return got;
  }
};

struct RankRun {
  std::string error;
  std::vector<RankEndpoint> table;
  uint64_t refused = 0;
};

// Rank r of n (its endpoint says rank `claims`, with `payload`), `seconds` to its deadline, on its
// own thread; `insecure`: the lab's opt-out.
std::thread run_rank(unsigned r, unsigned n, uint16_t port, RankRun* out, const std::string& secret = kSecret,
                     unsigned claims = ~0u, uint64_t seconds = 5, uint32_t payload = 1024, bool insecure = false) {
  return std::thread([=] {
    Rendezvous rv;
    RendezvousConfig c = config_of(r, n, port, seconds, secret);
    c.insecure = insecure;
    if (rv.exchange(c, endpoint_of(claims == ~0u ? r : claims, payload), &out->table, &out->error))
      rv.barrier("connected", &out->error);
    out->refused = rv.refused();
  });
}

// No secret: every rank refuses to meet, saying where one comes from; only insecure by name meets
// without one.
TEST(Rendezvous, NoSecretIsRefusedWithAMessage) {
  RankRun runs[2];
  run_rank(0, 2, test_port(5), &runs[0], "").join();
  run_rank(1, 2, test_port(5), &runs[1], "").join();
  for (const RankRun& run : runs) {
    EXPECT_NE(run.error.find("needs the job's shared secret"), std::string::npos) << run.error;
    EXPECT_NE(run.error.find("INAGG_EXCHANGE_SECRET"), std::string::npos) << run.error;
  }
  const uint16_t port = test_port(12);
  RankRun open[2];
  std::thread r0 = run_rank(0, 2, port, &open[0], "", ~0u, 5, 1024, true);
  std::thread r1 = run_rank(1, 2, port, &open[1], "", ~0u, 5, 1024, true);
  r0.join();
  r1.join();
  for (unsigned r = 0; r < 2; ++r) {
    EXPECT_EQ(open[r].error, "") << "rank " << r;
    ASSERT_EQ(open[r].table.size(), 2u);
    EXPECT_EQ(open[r].table[1 - r].recv_rkey, endpoint_of(1 - r).recv_rkey);
  }
}

// A host that connects first and claims rank 2 without the secret: the job's ranks complete their
// exchange without it, and it gets nothing but rank 0's nonce.
TEST(Rendezvous, ARoguePeerGetsNothingAndJoinsNothing) {
  const uint16_t port = test_port(6);
  RankRun runs[3];
  std::thread r0 = run_rank(0, 3, port, &runs[0]);
  RawPeer rogue(port);
  ASSERT_GE(rogue.fd, 0);
  const std::string challenge = rogue.read_line();
  ASSERT_EQ(challenge.rfind("challenge ", 0), 0u) << challenge;
  RankEndpoint forged = endpoint_of(2);
  forged.recv_rkey = 0xbad;
  rogue.send_text("auth " + std::string(32, 'a') + " " + util::hmac_sha256_hex("a guessed secret 0123", "x") + "\n" +
                  format_endpoint(forged) + "\n");
  const std::string after = rogue.read_all();
  std::thread r1 = run_rank(1, 3, port, &runs[1]), r2 = run_rank(2, 3, port, &runs[2]);
  r0.join();
  r1.join();
  r2.join();
  EXPECT_EQ(after, "") << "rank 0 sent a peer without the secret: " << after;
  for (unsigned r = 0; r < 3; ++r) {
    ASSERT_EQ(runs[r].error, "") << "rank " << r;
    EXPECT_EQ(runs[r].table[2].recv_rkey, endpoint_of(2).recv_rkey) << "rank " << r << " took the forged endpoint";
  }
  EXPECT_EQ(runs[0].refused, 1u);
}

// A rank with another secret is dropped unanswered, and its own exchange fails saying so.
TEST(Rendezvous, AnotherSecretIsNoRank) {
  const uint16_t port = test_port(7);
  RankRun runs[2];
  std::thread r0 = run_rank(0, 2, port, &runs[0]);
  std::thread r1 = run_rank(1, 2, port, &runs[1], "another secret, 0123456789");
  r0.join();
  r1.join();
  EXPECT_NE(runs[1].error.find("gave no complete answer"), std::string::npos) << runs[1].error;
  EXPECT_NE(runs[0].error.find("without a valid MAC"), std::string::npos) << runs[0].error;
}

// An idle connection (a port scan, a stalled host) opened before the ranks does not stall them.
TEST(Rendezvous, AnIdlePeerDoesNotStallTheExchange) {
  const uint16_t port = test_port(8);
  RankRun runs[3];
  std::thread r0 = run_rank(0, 3, port, &runs[0]);
  RawPeer idle(port), idle2(port);
  ASSERT_GE(idle.fd, 0);
  std::thread r1 = run_rank(1, 3, port, &runs[1]), r2 = run_rank(2, 3, port, &runs[2]);
  r0.join();
  r1.join();
  r2.join();
  for (unsigned r = 0; r < 3; ++r) EXPECT_EQ(runs[r].error, "") << "rank " << r;
}

// A rank's message recorded on one connection (here by a fake rank 0) and played to the real rank
// 0 on another: rank 0's nonce differs, the MAC does not match, the message is dropped.
TEST(Rendezvous, AReplayedMessageIsDropped) {
  const uint16_t fake_port = test_port(10), port = test_port(11);
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(fake_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l, 4), 0);
  RankRun victim;
  std::thread r1 = run_rank(1, 2, fake_port, &victim);
  const int c = ::accept(l, nullptr, nullptr);
  const std::string challenge = "challenge " + util::random_hex() + "\n";
  ASSERT_EQ(::send(c, challenge.data(), challenge.size(), 0), (ssize_t)challenge.size());
  std::string recorded;
  char buf[4096];
  while (std::count(recorded.begin(), recorded.end(), '\n') < 2) {
    const ssize_t n = ::read(c, buf, sizeof buf);
    ASSERT_GT(n, 0);
    recorded.append(buf, static_cast<size_t>(n));
  }
  ::close(c);
  ::close(l);
  r1.join();
  ASSERT_EQ(recorded.rfind("auth ", 0), 0u) << recorded;

  RankRun r0run;
  std::thread r0 = std::thread([&] {
    Rendezvous rv;
    RendezvousConfig cfg;
    cfg.rank = 0;
    cfg.workers = 2;
    cfg.host = *util::parse_ip("127.0.0.1");
    cfg.port = port;
    cfg.deadline_ns = now_ns() + 1'500'000'000ull;
    cfg.secret = kSecret;
    rv.exchange(cfg, endpoint_of(0), &r0run.table, &r0run.error);
    r0run.refused = rv.refused();
  });
  RawPeer replayer(port);
  ASSERT_GE(replayer.fd, 0);
  ASSERT_EQ(replayer.read_line().rfind("challenge ", 0), 0u);
  replayer.send_text(recorded);
  EXPECT_EQ(replayer.read_all(), "");
  r0.join();
  EXPECT_EQ(r0run.refused, 1u);
  EXPECT_NE(r0run.error.find("only 0 of the 1 other ranks"), std::string::npos) << r0run.error;
}

// A rank with another payload is told why at once and dropped; the meeting waits on for a rank 1
// that agrees, and fails at its deadline naming the refusal. Rank 2 waits past rank 0's deadline,
// so that rank 0, not rank 2's own deadline, ends the meeting.
TEST(Rendezvous, DifferentPayloadsAreRefused) {
  const uint16_t port = test_port(2);
  RankRun runs[3];
  std::thread r0 = run_rank(0, 3, port, &runs[0], kSecret, ~0u, 2);
  std::thread r1 = run_rank(1, 3, port, &runs[1], kSecret, ~0u, 2, 4096);
  std::thread r2 = run_rank(2, 3, port, &runs[2], kSecret, ~0u, 6);
  r0.join();
  r1.join();
  r2.join();
  EXPECT_NE(runs[1].error.find("rank 0 refused the exchange"), std::string::npos) << runs[1].error;
  EXPECT_NE(runs[1].error.find("uses --payload 4096, rank 0 1024: every rank needs the same"), std::string::npos)
      << runs[1].error;
  EXPECT_NE(runs[0].error.find("only 1 of the 2 other ranks"), std::string::npos) << runs[0].error;
  EXPECT_NE(runs[0].error.find("every rank needs the same"), std::string::npos) << runs[0].error;
  EXPECT_NE(runs[2].error, "");
  EXPECT_EQ(runs[0].refused, 1u);
}

// A peer that speaks the protocol as docs/protocol.md "The ranks' exchange" writes it, spelled
// out here: rank 0's challenge, then "auth <nonce> <mac>\n<line>\n" with an HMAC-SHA256 under a
// secret; rank 0's answer is read until it closes and its MAC checked the same way.
struct ScriptedRank : RawPeer {
  std::string rank0_nonce, nonce = util::random_hex();
  explicit ScriptedRank(uint16_t port) : RawPeer(port) {}
  void send_line(const std::string& line, const std::string& secret = kSecret) {
    const std::string challenge = read_line();
    ASSERT_EQ(challenge.rfind("challenge ", 0), 0u) << challenge;
    rank0_nonce = challenge.substr(10);
    const std::string mac =
        util::hmac_sha256_hex(secret, "inagg-rendezvous request\n" + rank0_nonce + "\n" + nonce + "\n" + line);
    send_text("auth " + nonce + " " + mac + "\n" + line + "\n");
  }
  // What rank 0 answered before it closed: "" for nothing; its text before "end <mac>".
  std::string answer() const {
    const std::string all = read_all();
    if (all.empty()) return "";
    const size_t end = all.rfind("end ");
    if (end == std::string::npos || all.back() != '\n') return "(no end line) " + all;
    const std::string text = all.substr(0, end);
    EXPECT_EQ(all.substr(end + 4, all.size() - end - 5),
              util::hmac_sha256_hex(kSecret, "inagg-rendezvous answer\n" + rank0_nonce + "\n" + nonce + "\n" + text))
        << "rank 0's answer carries no valid MAC: " << all;
    return text;
  }
};

// A meeting of 4 ranks while extra connections send each kind of bad line: each is dropped, counted
// and (when it holds the secret) told why, and the meeting goes on. A rank claimed twice keeps its
// first claimant; one that closes before the answer frees its place, which the real rank takes.
// Every rank ends with every real rank's endpoint, and the barrier after it passes.
TEST(Rendezvous, BadLinesAreDroppedAndTheMeetingGoesOn) {
  const uint16_t port = test_port(9);
  const unsigned n = 4;
  RankRun runs[n];
  std::thread r0 = run_rank(0, n, port, &runs[0], kSecret, ~0u, 30);
  const auto line_of = [](unsigned rank, unsigned workers) {
    RankEndpoint e = endpoint_of(rank);
    e.workers = workers;
    e.recv_rkey = 0xbad;  // forged: no rank may end with it
    return format_endpoint(e);
  };
  struct Bad {
    const char* what;
    std::string line, secret;
    const char* told;  // "": dropped unanswered
  };
  const Bad bad[] = {
      {"a wrong MAC", line_of(1, n), "a guessed secret, 0123456789", ""},
      {"rank 0", line_of(0, n), kSecret, "rank 0 out of range 1..3"},
      {"rank 7 of 4", line_of(7, n), kSecret, "rank 7 out of range 1..3"},
      {"no rank", "hello rank 0", kSecret, "no rank"},
      {"garbage with a rank", "endpoint rank=2 gid=nonsense", kSecret, "not an endpoint line"},
      {"another --workers", line_of(2, 5), kSecret, "started with --workers 5, rank 0 with 4"},
  };
  for (const Bad& b : bad) {
    ScriptedRank p(port);
    ASSERT_GE(p.fd, 0) << b.what;
    p.send_line(b.line, b.secret);
    const std::string told = p.answer();
    if (*b.told == '\0') {
      EXPECT_EQ(told, "") << b.what;
    } else {
      EXPECT_EQ(told.rfind("error a rank sent '" + b.line.substr(0, 20), 0), 0u) << b.what << ": " << told;
      EXPECT_NE(told.find(b.told), std::string::npos) << b.what << ": " << told;
    }
  }
  {
    RawPeer web(port);  // not the protocol at all
    ASSERT_EQ(web.read_line().rfind("challenge ", 0), 0u);
    web.send_text("GET / HTTP/1.1\r\nHost: rank0\r\n\r\n");
    EXPECT_EQ(web.read_all(), "");
  }
  // Rank 3 claimed by a holder of the secret (a rank started twice), then claimed again.
  auto first = std::make_unique<ScriptedRank>(port);
  first->send_line(line_of(3, n));
  {
    ScriptedRank again(port);
    again.send_line(line_of(3, n));
    const std::string told = again.answer();
    EXPECT_NE(told.find("rank 3 twice"), std::string::npos) << told;
  }
  std::thread r1 = run_rank(1, n, port, &runs[1], kSecret, ~0u, 20);
  std::thread r2 = run_rank(2, n, port, &runs[2], kSecret, ~0u, 20);
  first.reset();  // the first claimant goes: its place opens again for the real rank 3
  std::thread r3 = run_rank(3, n, port, &runs[3], kSecret, ~0u, 20);
  r0.join();
  r1.join();
  r2.join();
  r3.join();
  for (unsigned r = 0; r < n; ++r) {
    ASSERT_EQ(runs[r].error, "") << "rank " << r;
    ASSERT_EQ(runs[r].table.size(), n) << "rank " << r;
    for (unsigned p = 0; p < n; ++p) {
      EXPECT_EQ(runs[r].table[p].rank, p);
      EXPECT_EQ(runs[r].table[p].gid, endpoint_of(p).gid) << "rank " << r << "'s table, rank " << p;
      EXPECT_EQ(runs[r].table[p].send_qpn, endpoint_of(p).send_qpn) << "rank " << r << "'s table, rank " << p;
      EXPECT_EQ(runs[r].table[p].recv_rkey, endpoint_of(p).recv_rkey) << "rank " << r << "'s table, rank " << p;
    }
  }
  // The six bad lines, the stranger, the second claim of rank 3 and the first claimant's close.
  EXPECT_EQ(runs[0].refused, 9u);
}

// The job rank 0 registers from the exchanged connections: the appliance's own parser reads it,
// and an IPv4-mapped GID is the IPv4 address.
TEST(Rendezvous, JobTextWithTheTransportsConnections) {
  RackPlan plan;
  plan.workers = 3;
  plan.ip_base = *util::parse_ip("10.77.0.100");
  plan.job_id = 5;
  plan.message = 4096;
  plan.payload = 1024;
  for (unsigned r = 0; r < 3; ++r) {
    const RankEndpoint e = endpoint_of(r);
    plan.connections.push_back({e.gid, e.send_qpn, e.recv_qpn, e.start_psn});
  }
  std::string err;
  const std::optional<control::JobSpec> j = control::parse_job(plan.job_text(), &err);
  ASSERT_TRUE(j) << err << "\n" << plan.job_text();
  ASSERT_EQ(j->conns.size(), 3u);
  for (unsigned r = 0; r < 3; ++r) {
    const control::ConnectionSpec& c = j->conns[r];
    EXPECT_EQ(c.src_ip, *util::parse_ip("10.77.0." + std::to_string(101 + r)));
    EXPECT_EQ(c.dst_ip, *util::parse_ip("10.77.0." + std::to_string(101 + (r + 1) % 3)));
    EXPECT_EQ(c.src_qpn, endpoint_of(r).send_qpn);
    EXPECT_EQ(c.dst_qpn, endpoint_of((r + 1) % 3).recv_qpn);
    EXPECT_EQ(c.start_psn, endpoint_of(r).start_psn);
  }
}

}  // namespace
}  // namespace inagg::client
