// The head program in the kernel through BPF_PROG_TEST_RUN (Katran's BpfTester idea): the
// scapy-built fixtures of gen_head_fixtures.py run in order against one loaded program, each
// checked for its verdict, the frame it leaves and exactly the counters it moves. The program's
// MAC (BPF) against the C++ one on random packets, both ways; a forged DATA leaves its slot as it
// was. Then two threads hammer the same slots at once, to check the slot lock: no contribution
// lost or doubled. Needs root (CAP_BPF); CI runs as root.
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "inagg/xdp/head_program.hpp"

using namespace inagg;
using namespace inagg::xdp;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string f; std::getline(in, f, sep);) out.push_back(f);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::vector<uint8_t> unhex(const std::string& h) {
  std::vector<uint8_t> b(h.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(std::stoul(h.substr(2 * i, 2), nullptr, 16));
  return b;
}

std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) s += {d[x >> 4], d[x & 15]};
  return s;
}

uint32_t verdict_of(const std::string& name) {
  if (name == "XDP_DROP") return XDP_DROP;
  if (name == "XDP_PASS") return XDP_PASS;
  if (name == "XDP_TX") return XDP_TX;
  ADD_FAILURE() << "unknown verdict " << name;
  return XDP_ABORTED;
}

struct Step {
  std::string name;
  unsigned row = 0;
  std::vector<std::string> counters;
  std::string verdict;
  std::vector<uint8_t> in;
  std::string expected;  // hex, "-" for unchanged, "" for not checked
};

struct Fixtures {
  std::unique_ptr<HeadProgram> prog;
  std::vector<Step> steps;
  std::string error;
};

Fixtures& fixtures() {
  static Fixtures f = [] {
    Fixtures f;
    const char* path = std::getenv("INAGG_XDP_FIXTURES");
    std::ifstream in(path ? path : "");
    if (!in) {
      f.error = "cannot read the fixtures (INAGG_XDP_FIXTURES)";
      return f;
    }
    f.prog = HeadProgram::load(4, &f.error);
    if (!f.prog) return f;
    for (std::string line; std::getline(in, line);) {
      const std::vector<std::string> r = split(line, '|');
      if (r[0] == "identity") {
        if (!f.prog->set_identity(static_cast<uint16_t>(std::stoi(r[3])), *util::parse_ip(r[1]), *parse_mac(r[2]),
                                  &f.error))
          return f;
      } else if (r[0] == "job" && r.size() == 3) {
        std::string text = r[1];
        for (char& c : text) c = c == ';' ? '\n' : c;
        std::optional<HeadJob> job = parse_head_job(text, &f.error);
        if (!job) return f;
        job->key = wire::parse_xagg_key(r[2]);  // what the agent reads from key_file
        if (!f.prog->add_job(*job, &f.error)) return f;
      } else if (r[0] == "step" && r.size() == 7) {
        Step s{r[1],
               static_cast<unsigned>(std::stoul(r[2])),
               r[3].empty() ? std::vector<std::string>{} : split(r[3], '+'),
               r[4],
               unhex(r[5]),
               r[6]};
        f.steps.push_back(std::move(s));
      } else {
        f.error = "bad fixture line: " + line.substr(0, 80);
        return f;
      }
    }
    return f;
  }();
  return f;
}

class HeadFixture : public testing::TestWithParam<size_t> {};

TEST_P(HeadFixture, VerdictOutputAndCounters) {
  Fixtures& f = fixtures();
  ASSERT_TRUE(f.prog) << f.error;
  ASSERT_TRUE(f.error.empty()) << f.error;
  ASSERT_LT(GetParam(), f.steps.size());
  const Step& s = f.steps[GetParam()];
  SCOPED_TRACE(s.name);
  const Counters before = f.prog->counters(s.row);
  const TestRun r = f.prog->test_run(s.in);
  ASSERT_EQ(r.error, 0) << "BPF_PROG_TEST_RUN failed";
  EXPECT_EQ(r.verdict, verdict_of(s.verdict));
  if (s.expected == "-") {
    EXPECT_EQ(hex(r.out), hex(s.in)) << "the frame must pass unchanged";
  } else if (!s.expected.empty()) {
    EXPECT_EQ(hex(r.out), s.expected);
  }
  const Counters after = f.prog->counters(s.row);
  for (size_t i = 0; i < after.size(); ++i) {
    const bool listed = std::find(s.counters.begin(), s.counters.end(), counter_name(i)) != s.counters.end();
    EXPECT_EQ(after[i] - before[i], listed ? 1u : 0u) << "counter " << counter_name(i);
  }
}

// One instance per fixture step, read when the tests register; they run in order (the slots carry
// state from step to step), so they are not for --gtest_shuffle.
std::vector<size_t> step_indices() {
  std::vector<size_t> v(std::max<size_t>(fixtures().steps.size(), 1));
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, HeadFixture, testing::ValuesIn(step_indices()),
                         [](const testing::TestParamInfo<size_t>& i) { return "step" + std::to_string(i.param); });

TEST(HeadFixtures, AllStepsRan) {
  Fixtures& f = fixtures();
  ASSERT_TRUE(f.prog) << f.error;
  EXPECT_GE(f.steps.size(), 30u) << "gen_head_fixtures.py writes more steps than that";
}

constexpr size_t kHdrOff = 14 + 20 + 8;  // Ethernet, IPv4, UDP: where the tier's header starts

// A DATA frame as the worker client sends it: Ethernet/IPv4/UDP/xagg_hdr/values, signed.
std::vector<uint8_t> data_frame(const wire::XaggKey& key, unsigned job, unsigned rank, uint32_t seq,
                                const std::vector<int32_t>& values) {
  std::vector<uint8_t> f(14 + 20 + 8 + sizeof(xagg_hdr) + 4 * values.size(), 0);
  const uint8_t eth[14] = {2, 0x77, 0, 0, 1, 1, 2, 0x77, 0, 0, 0, static_cast<uint8_t>(rank + 1), 0x08, 0x00};
  std::memcpy(f.data(), eth, 14);
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  const uint16_t ip_len = htons(static_cast<uint16_t>(f.size() - 14)),
                 udp_len = htons(static_cast<uint16_t>(f.size() - 34));
  std::memcpy(ip + 2, &ip_len, 2);
  ip[8] = 64;
  ip[9] = 17;
  const uint8_t src[4] = {10, 77, 0, static_cast<uint8_t>(rank + 1)}, dst[4] = {10, 77, 0, 201};
  std::memcpy(ip + 12, src, 4);
  std::memcpy(ip + 16, dst, 4);
  uint8_t* udp = ip + 20;
  const uint16_t port = htons(XAGG_UDP_PORT);
  std::memcpy(udp, &port, 2);
  std::memcpy(udp + 2, &port, 2);
  std::memcpy(udp + 4, &udp_len, 2);
  xagg_hdr h{XAGG_VERSION,
             XAGG_DATA,
             htons(static_cast<uint16_t>(job)),
             htons(static_cast<uint16_t>(rank)),
             htons(static_cast<uint16_t>(values.size())),
             htonl(seq),
             htonl(1),
             {}};
  std::memcpy(udp + 8, &h, sizeof h);
  std::memcpy(udp + 8 + sizeof h, values.data(), 4 * values.size());
  wire::xagg_sign(key, f.data() + kHdrOff, f.size() - kHdrOff);
  return f;
}

wire::XaggKey random_key(std::mt19937_64& rng) {
  wire::XaggKey k;
  for (uint8_t& b : k.bytes) b = static_cast<uint8_t>(rng());
  return k;
}

// A job of `members` workers at data_frame's addresses (10.77.0.1.., 02:77:00:00:00:01..).
HeadJob test_job(unsigned id, unsigned members, unsigned values, unsigned window, const wire::XaggKey& key) {
  HeadJob job;
  job.id = id;
  job.members = members;
  job.values = values;
  job.window = window;
  job.total_weight = members;
  job.group = *util::parse_ip("239.77.0.3");
  for (unsigned r = 0; r < members; ++r)
    job.member.push_back(HeadJob::Member{*util::parse_ip("10.77.0." + std::to_string(r + 1)),
                                         wire::MacAddr{2, 0x77, 0, 0, 0, static_cast<uint8_t>(r + 1)}});
  job.key_file = "/nonexistent/job.key";
  job.key = key;
  return job;
}

std::unique_ptr<HeadProgram> loaded(std::string* err) {
  std::unique_ptr<HeadProgram> prog = HeadProgram::load(1, err);
  if (prog && !prog->set_identity(XAGG_UDP_PORT, *util::parse_ip("10.77.0.201"), *parse_mac("02:77:00:00:01:01"), err))
    return nullptr;
  return prog;
}

// The BPF SipHash (src/xdp/bpf/xagg_mac.h) and the C++ one agree, both ways, on random keys, counts,
// values and chunks: the program takes each DATA the C++ side signed (a lone member's completes its
// slot) and the RESULT it makes in its place carries exactly the MAC the C++ side computes for it;
// the same DATA with one bit changed in its values, chunk number or MAC is dropped as bad_mac.
// Counts up to 860: BPF_PROG_TEST_RUN takes frames of at most a page less XDP's head- and tailroom.
TEST(HeadProgramMac, BpfAndCppAgreeOnRandomPackets) {
  std::string err;
  std::unique_ptr<HeadProgram> prog = loaded(&err);
  ASSERT_TRUE(prog) << err;
  std::mt19937_64 rng(4792);
  unsigned checked = 0;
  for (int round = 0; round < 300; ++round) {
    const wire::XaggKey key = random_key(rng);
    const unsigned count = 4 * (1 + static_cast<unsigned>(rng() % 215));
    ASSERT_TRUE(prog->add_job(test_job(9, 1, XAGG_MAX_VALUES, 32, key), &err)) << err;
    std::vector<int32_t> values(count);
    for (int32_t& v : values) v = static_cast<int32_t>(rng());
    const uint32_t seq = static_cast<uint32_t>(rng());
    std::vector<uint8_t> in = data_frame(key, 9, 0, seq, values);
    // One bit of the values, the chunk number or the MAC flipped: the program must refuse it.
    std::vector<uint8_t> bad = in;
    const size_t spots[] = {(kHdrOff + offsetof(xagg_hdr, seq)) * 8, (kHdrOff + offsetof(xagg_hdr, mac)) * 8,
                            (kHdrOff + sizeof(xagg_hdr)) * 8};
    const size_t spans[] = {32, 64, 32 * count};
    const int which = static_cast<int>(rng() % 3);
    const size_t bit = spots[which] + rng() % spans[which];
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const Counters before = prog->counters(9);
    const TestRun refused = prog->test_run(bad);
    ASSERT_EQ(refused.error, 0);
    EXPECT_EQ(refused.verdict, static_cast<uint32_t>(XDP_DROP)) << "bit " << bit << " flipped, count " << count;
    EXPECT_EQ(prog->counters(9)[XAGG_C_bad_mac] - before[XAGG_C_bad_mac], 1u);
    const TestRun r = prog->test_run(in);
    ASSERT_EQ(r.error, 0);
    ASSERT_EQ(r.verdict, static_cast<uint32_t>(XDP_TX)) << "the program refused the C++ MAC, count " << count;
    ASSERT_EQ(r.out.size(), in.size());
    xagg_hdr h;
    std::memcpy(&h, r.out.data() + kHdrOff, sizeof h);
    EXPECT_EQ(h.type, XAGG_RESULT);
    EXPECT_EQ(ntohl(h.seq), seq);
    EXPECT_EQ(0, std::memcmp(r.out.data() + kHdrOff + sizeof h, values.data(), 4 * count)) << "a lone member's sum";
    EXPECT_EQ(wire::xagg_mac(key, r.out.data() + kHdrOff, r.out.size() - kHdrOff),
              [&] {
                uint64_t m = 0;
                for (int i = 7; i >= 0; --i) m = m << 8 | h.mac[i];
                return m;
              }())
        << "the program's MAC of its RESULT, count " << count;
    ++checked;
  }
  EXPECT_EQ(checked, 300u);
}

// A DATA with a bad MAC from a member's own address and port changes nothing in its slot: not the
// arrival bitmap, not the sum, not the weight; the member's real DATA after it is added.
TEST(HeadProgramMac, ForgedDataLeavesTheSlotAsItWas) {
  std::string err;
  std::unique_ptr<HeadProgram> prog = loaded(&err);
  ASSERT_TRUE(prog) << err;
  std::mt19937_64 rng(7);
  const wire::XaggKey key = random_key(rng), other = random_key(rng);
  ASSERT_TRUE(prog->add_job(test_job(4, 2, 8, 2, key), &err)) << err;
  const std::vector<int32_t> v0 = {1, 2, 3, 4, 5, 6, 7, 8}, v1 = {10, 20, 30, 40, 50, 60, 70, 80};
  ASSERT_EQ(prog->test_run(data_frame(key, 4, 0, 0, v0)).verdict, static_cast<uint32_t>(XDP_DROP));  // held
  const std::optional<xagg_slot> held = prog->slot(4, 0);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->bitmap, 1u);
  const TestRun forged = prog->test_run(data_frame(other, 4, 1, 0, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}));
  EXPECT_EQ(forged.verdict, static_cast<uint32_t>(XDP_DROP));
  EXPECT_EQ(prog->counters(4)[XAGG_C_bad_mac], 1u);
  EXPECT_EQ(prog->counters(4)[XAGG_C_added], 1u);
  const std::optional<xagg_slot> after = prog->slot(4, 0);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->bitmap, held->bitmap);
  EXPECT_EQ(after->weight, held->weight);
  EXPECT_EQ(after->state, held->state);
  EXPECT_EQ(0, std::memcmp(after->acc, held->acc, sizeof held->acc));
  const TestRun real = prog->test_run(data_frame(key, 4, 1, 0, v1));
  ASSERT_EQ(real.verdict, static_cast<uint32_t>(XDP_TX)) << "rank 1's real DATA completes the slot";
  std::vector<int32_t> sum(8);
  std::memcpy(sum.data(), real.out.data() + kHdrOff + sizeof(xagg_hdr), 4 * sum.size());
  EXPECT_EQ(sum, (std::vector<int32_t>{11, 22, 33, 44, 55, 66, 77, 88}));
  EXPECT_TRUE(wire::xagg_verify(key, real.out.data() + kHdrOff, real.out.size() - kHdrOff));
}

// A job added again starts its chunk numbers over: under the key it had, the earlier run's
// packets would verify and land in the new run's slots. The head takes it again only with a new
// key, whether it replaces the job or comes back after a removal; under the new key, a DATA of the
// earlier run is dropped as bad_mac, never added.
TEST(HeadProgramMac, AJobAddedAgainNeedsANewKey) {
  std::string err;
  std::unique_ptr<HeadProgram> prog = loaded(&err);
  ASSERT_TRUE(prog) << err;
  std::mt19937_64 rng(11);
  const wire::XaggKey first = random_key(rng), second = random_key(rng), third = random_key(rng);
  ASSERT_TRUE(prog->add_job(test_job(5, 2, 8, 2, first), &err)) << err;
  const std::vector<uint8_t> old_run = data_frame(first, 5, 0, 0, {1, 1, 1, 1, 1, 1, 1, 1});
  ASSERT_EQ(prog->test_run(old_run).verdict, static_cast<uint32_t>(XDP_DROP));  // held in the first run
  EXPECT_EQ(prog->counters(5)[XAGG_C_added], 1u);

  EXPECT_FALSE(prog->add_job(test_job(5, 2, 8, 2, first), &err)) << "replaced with the key it had";
  EXPECT_NE(err.find("job 5 was added on this head before with this key"), std::string::npos) << err;
  EXPECT_NE(err.find("inagg-xdp key FILE"), std::string::npos) << err;
  std::string why;
  ASSERT_TRUE(prog->remove_job(5, &why)) << why;
  EXPECT_FALSE(prog->add_job(test_job(5, 2, 8, 2, first), &err)) << "added again after its removal with its old key";
  EXPECT_TRUE(prog->jobs().empty());
  ASSERT_TRUE(prog->add_job(test_job(6, 2, 8, 2, first), &err)) << "another id may use it: " << err;
  ASSERT_TRUE(prog->remove_job(6, &why)) << why;

  ASSERT_TRUE(prog->add_job(test_job(5, 2, 8, 2, second), &err)) << err;
  EXPECT_EQ(prog->test_run(old_run).verdict, static_cast<uint32_t>(XDP_DROP));
  EXPECT_EQ(prog->counters(5)[XAGG_C_bad_mac], 1u) << "the earlier run's DATA verified in the new one";
  EXPECT_EQ(prog->counters(5)[XAGG_C_added], 0u);
  ASSERT_TRUE(prog->add_job(test_job(5, 2, 8, 2, third), &err)) << "replaced with a new key: " << err;
}

TEST(HeadProgramConcurrency, TwoThreadsOnTheSameSlotsLoseAndDoubleNothing) {
  std::string err;
  std::unique_ptr<HeadProgram> prog = loaded(&err);
  ASSERT_TRUE(prog) << err;
  std::mt19937_64 rng(3);
  const wire::XaggKey key = random_key(rng);
  const HeadJob job = test_job(3, 64, 16, 32, key);
  ASSERT_TRUE(prog->add_job(job, &err)) << err;
  // 64 chunks (every slot once), 64 ranks; ranks 0..31 from one thread, 32..63 from the other,
  // interleaved chunk by chunk so both threads keep hitting the same slots. Rank r adds r + 1 + i
  // to value i, so every sum is known in closed form.
  auto values = [](unsigned rank) {
    std::vector<int32_t> v(16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(rank + 1 + i);
    return v;
  };
  std::atomic<unsigned> tx{0}, failures{0};
  // One thread per CPU, so the two really run at once (BPF_PROG_TEST_RUN keeps a run on its CPU).
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 CPUs for two runs at once";
  auto sender = [&](unsigned first_rank) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(first_rank ? 1 : 0, &cpus);
    if (pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus) != 0) ++failures;
    for (uint32_t seq = 0; seq < 64; ++seq) {
      for (unsigned r = first_rank; r < first_rank + 32; ++r) {
        const TestRun t = prog->test_run(data_frame(key, job.id, r, seq, values(r)));
        if (t.error) ++failures;
        if (t.verdict == XDP_TX) ++tx;
      }
    }
  };
  std::thread a(sender, 0), b(sender, 32);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(tx.load(), 64u) << "exactly one completion per chunk";
  const Counters c = prog->counters(job.id);
  EXPECT_EQ(c[XAGG_C_added], 64u * 64u);
  EXPECT_EQ(c[XAGG_C_completed], 64u);
  EXPECT_EQ(c[XAGG_C_duplicates], 0u);
  for (uint32_t seq = 0; seq < 64; ++seq) {
    const std::optional<xagg_slot> s = prog->slot(job.id, seq);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->seq, seq);
    EXPECT_EQ(s->state, static_cast<uint32_t>(XAGG_SLOT_FINAL));
    EXPECT_EQ(s->weight, 64u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(s->acc[i], 64 * 65 / 2 + 64 * i) << "chunk " << seq << " value " << i;
  }
}

}  // namespace
