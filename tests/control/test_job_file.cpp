// Job files: every key, comments, hex and decimal numbers, IPv6, format -> parse round trips, the
// shipped examples (which the engine must accept), and one message per kind of mistake.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>

#include "inagg/agg/engine.hpp"
#include "inagg/control/job_file.hpp"

namespace inagg::control {
namespace {

const char* kGood =
    "# a comment\n"
    "; another comment\n"
    "id = 7\n"
    "dtype = bf16\n"
    "workers = 2\n"
    "message_bytes = 4096\n"
    "payload_bytes = 0x400   # hex works for every number\n"
    "window = 4\n"
    "replay = true\n"
    "conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x12, 0xfffffe\n"
    "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0\n";

std::string parse_error(const std::string& text) {
  std::string err;
  EXPECT_FALSE(parse_job(text, &err).has_value()) << "accepted:\n" << text;
  return err;
}

// kGood with one line replaced (or added when `old_line` is empty).
std::string with(const std::string& old_line, const std::string& new_line) {
  std::string t = kGood;
  if (old_line.empty()) return t + new_line + "\n";
  const size_t at = t.find(old_line);
  EXPECT_NE(at, std::string::npos) << old_line;
  return t.replace(at, old_line.size(), new_line);
}

bool operator_eq(const JobSpec& a, const JobSpec& b) {
  if (a.id != b.id || a.dtype != b.dtype || a.workers != b.workers || a.message_bytes != b.message_bytes ||
      a.payload_bytes != b.payload_bytes || a.window != b.window || a.replay != b.replay || a.tier != b.tier ||
      a.conns.size() != b.conns.size())
    return false;
  for (size_t i = 0; i < a.conns.size(); ++i) {
    const ConnectionSpec &x = a.conns[i], &y = b.conns[i];
    if (x.rank != y.rank || !(x.src_ip == y.src_ip) || !(x.dst_ip == y.dst_ip) || x.src_qpn != y.src_qpn ||
        x.dst_qpn != y.dst_qpn || x.start_psn != y.start_psn)
      return false;
  }
  return true;
}

TEST(JobFile, ParsesEveryKey) {
  std::string err;
  const std::optional<JobSpec> s = parse_job(kGood, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id, 7u);
  EXPECT_EQ(s->dtype, util::Dtype::bf16);
  EXPECT_EQ(s->workers, 2u);
  EXPECT_EQ(s->message_bytes, 4096u);
  EXPECT_EQ(s->payload_bytes, 1024u);
  EXPECT_EQ(s->window, 4u);
  EXPECT_TRUE(s->replay);
  ASSERT_EQ(s->conns.size(), 2u);
  EXPECT_EQ(s->conns[0].rank, 0u);
  EXPECT_EQ(s->conns[0].src_ip, *util::parse_ip("10.0.0.1"));
  EXPECT_EQ(s->conns[0].src_qpn, 0x11u);
  EXPECT_EQ(s->conns[0].dst_ip, *util::parse_ip("10.0.0.2"));
  EXPECT_EQ(s->conns[0].dst_qpn, 0x12u);
  EXPECT_EQ(s->conns[0].start_psn, 0xfffffeu);
  EXPECT_EQ(s->conns[1].src_qpn, 19u);
  EXPECT_EQ(s->conns[1].dst_qpn, 0xabcdefu);
  EXPECT_EQ(s->conns[1].start_psn, 0u);
}

TEST(JobFile, ReplayIsOptionalAndDefaultsToFalse) {
  std::string err;
  const auto s = parse_job(with("replay = true\n", ""), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_FALSE(s->replay);
  const auto f = parse_job(with("replay = true", "replay = false"), &err);
  ASSERT_TRUE(f) << err;
  EXPECT_FALSE(f->replay);
}

TEST(JobFile, WhitespaceCrlfBomAndNoFinalNewline) {
  std::string t = "\xEF\xBB\xBF";
  for (const char* l : {"  id\t=\t7  ", "dtype=fp32", "workers =1", "message_bytes= 8", "payload_bytes = 8",
                        "window = 1", "", "   # indented comment", "conn = 0 ,fd00::1 , 1, fd00::2 ,2 , 3"})
    t += std::string(l) + "\r\n";
  t += "replay = false";  // no newline at the end
  std::string err;
  const auto s = parse_job(t, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->workers, 1u);
  ASSERT_EQ(s->conns.size(), 1u);
  EXPECT_EQ(s->conns[0].src_ip.version, util::IpVersion::v6);
  EXPECT_EQ(s->conns[0].dst_ip, *util::parse_ip("fd00::2"));
  EXPECT_EQ(s->conns[0].start_psn, 3u);
}

TEST(JobFile, Ipv6AndMaxima) {
  std::string err;
  const std::string t =
      "id = 4294967295\ndtype = int32\nworkers = 64\nmessage_bytes = 0xffffffff\npayload_bytes = 4294967295\n"
      "window = 4294967295\nconn = 63, 2001:db8::1, 0xffffff, 2001:db8::ffff:10.0.0.1, 16777215, 0xFFFFFF\n";
  const auto s = parse_job(t, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id, 0xffffffffu);
  EXPECT_EQ(s->workers, 64u);
  EXPECT_EQ(s->message_bytes, 0xffffffffu);
  EXPECT_EQ(s->window, 0xffffffffu);
  EXPECT_EQ(s->conns[0].rank, 63u);
  EXPECT_EQ(s->conns[0].src_qpn, 0xffffffu);
  EXPECT_EQ(s->conns[0].dst_qpn, 0xffffffu);
  EXPECT_EQ(s->conns[0].start_psn, 0xffffffu);
  EXPECT_EQ(s->conns[0].dst_ip.version, util::IpVersion::v6);
}

TEST(JobFile, Ipv4MappedGidsMeanTheIpv4Address) {
  // rdma-core (ibv_devinfo -v, ibv_query_gid) and the kernel's Soft-RoCE show a RoCEv2 GID of an
  // IPv4 address as ::ffff:a.b.c.d; its packets are IPv4, so the job must match IPv4 packets.
  std::string err;
  auto s = parse_job(with("conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x12, 0xfffffe",
                          "conn = 0, ::ffff:10.0.0.1, 0x000011, ::ffff:0a00:0002, 0x12, 0xfffffe"),
                     &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->conns[0].src_ip, *util::parse_ip("10.0.0.1"));
  EXPECT_EQ(s->conns[0].dst_ip, *util::parse_ip("10.0.0.2"));
  EXPECT_EQ(s->conns[0].src_ip.version, util::IpVersion::v4);
  // Mixed with a plain IPv4 address on the same line: both IPv4.
  s = parse_job(with("conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0", "conn = 1,10.0.0.2,19,::ffff:10.0.0.1,0xABCDEF,0"),
                &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->conns[1].dst_ip, *util::parse_ip("10.0.0.1"));
  // And the engine takes the job: both ranks' addresses form a ring of IPv4 hosts.
  agg::Engine engine(agg::EngineConfig{}, agg::BufferOps{});
  EXPECT_TRUE(engine.add_job(*s, &err)) << err;
  // The canonical text writes it as IPv4.
  EXPECT_NE(format_job(*s).find("conn = 1, 10.0.0.2, 0x000013, 10.0.0.1,"), std::string::npos) << format_job(*s);
}

TEST(JobFile, FormatRoundTrips) {
  std::string err;
  for (const std::string& text : {std::string(kGood), with("replay = true", "replay = false")}) {
    const auto s = parse_job(text, &err);
    ASSERT_TRUE(s) << err;
    const std::string canon = format_job(*s);
    const auto back = parse_job(canon, &err);
    ASSERT_TRUE(back) << err << "\n" << canon;
    EXPECT_TRUE(operator_eq(*s, *back)) << canon;
    EXPECT_EQ(format_job(*back), canon);  // canonical: a fixed point
  }
  JobSpec v6;
  v6.id = 123456;
  v6.dtype = util::Dtype::fp16;
  v6.workers = 3;
  v6.message_bytes = 3072;
  v6.payload_bytes = 1024;
  v6.window = 16;
  for (unsigned r = 0; r < 3; ++r) {
    ConnectionSpec c;
    c.rank = 2 - r;  // order is kept, ranks need not be sorted
    c.src_ip = *util::parse_ip("fd00::" + std::to_string(r + 1));
    c.dst_ip = *util::parse_ip("fd00:1234:5678:9abc:def0:1:2:" + std::to_string(r + 1));
    c.src_qpn = 0x100 + r;
    c.dst_qpn = 0xfff000 + r;
    c.start_psn = 0x123456 * r & 0xffffff;
    v6.conns.push_back(c);
  }
  const std::string canon = format_job(v6);
  EXPECT_NE(canon.find("dtype = fp16\n"), std::string::npos) << canon;
  EXPECT_NE(canon.find("conn = 2, fd00::1, 0x000100, fd00:1234:5678:9abc:def0:1:2:1, 0xfff000, 0x000000\n"),
            std::string::npos)
      << canon;
  const auto back = parse_job(canon, &err);
  ASSERT_TRUE(back) << err << "\n" << canon;
  EXPECT_TRUE(operator_eq(v6, *back)) << canon;
}

// A rank's port (IP source guard): optional, read back identically; a job naming none formats as
// before, so its digest, which clients compare, is unchanged.
TEST(JobFile, ARanksPortIsOptionalAndRoundTrips) {
  std::string err;
  auto s =
      parse_job(with("conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0", "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0, 3"), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->conns[0].port, kAnyPort);
  EXPECT_EQ(s->conns[1].port, 3);
  const std::string canon = format_job(*s);
  EXPECT_NE(canon.find("0xabcdef, 0x000000, 3\n"), std::string::npos) << canon;
  auto back = parse_job(canon, &err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(back->conns[1].port, 3);
  EXPECT_EQ(format_job(*back), canon);
  auto plain = parse_job(kGood, &err);
  ASSERT_TRUE(plain) << err;
  EXPECT_EQ(format_job(*plain).find(", 3\n"), std::string::npos);
  EXPECT_NE(job_digest(*plain), job_digest(*s));
  back->conns[1].port = kAnyPort;
  EXPECT_EQ(job_digest(*back), job_digest(*plain));
}

TEST(JobFile, ShippedExamplesLoadAndTheEngineAcceptsThem) {
  agg::EngineConfig cfg;
  agg::BufferOps ops;  // add_job never touches buffers
  agg::Engine engine(cfg, ops);
  for (const char* name : {"example-fp32-4workers.job", "example-int32-2workers-ipv6.job"}) {
    const std::string path = std::string(INAGG_SOURCE_DIR) + "/conf/jobs/" + name;
    std::string err, text;
    const auto s = load_job_file(path, &err, &text);
    ASSERT_TRUE(s) << err;
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(engine.add_job(*s, &err)) << name << ": " << err;
  }
  agg::JobInfo info;
  ASSERT_TRUE(engine.job_info(42, &info));  // the IPv6 example writes its id in hex
  ASSERT_TRUE(engine.job_info(1, &info));
}

TEST(JobFile, LoadErrorsNameTheFile) {
  const std::string dir = ::testing::TempDir();
  std::string err;
  EXPECT_FALSE(load_job_file(dir + "/no-such.job", &err));
  EXPECT_NE(err.find("cannot open job file '" + dir + "/no-such.job': No such file or directory"), std::string::npos)
      << err;
  EXPECT_FALSE(load_job_file(dir, &err));
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;

  const std::string path = dir + "/bad-control-test.job";
  {
    std::ofstream f(path);
    f << with("conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0", "conn = 1,10.0.0.2,0xzz,10.0.0.1,0xABCDEF,0");
  }
  EXPECT_FALSE(load_job_file(path, &err));
  EXPECT_EQ(err, path + ":11: conn: QPN '0xzz' is not a number (hex 0x... or decimal)");
  {
    std::ofstream f(path);
    f << with("window = 4\n", "");
  }
  EXPECT_FALSE(load_job_file(path, &err));
  EXPECT_EQ(err.rfind(path + ": missing required key; add a line like `window = 8`", 0), 0u) << err;
  {
    std::ofstream f(path);
    f << std::string(kMaxJobFileBytes + 1, '#');
  }
  EXPECT_FALSE(load_job_file(path, &err));
  EXPECT_NE(err.find("at most 1 MiB"), std::string::npos) << err;
  std::remove(path.c_str());
}

// A job across racks: each appliance's part says its tier; a flat job's text (and so its digest)
// has no tier line.
TEST(JobFile, TierOfAJobAcrossRacks) {
  std::string err;
  const auto flat = parse_job(kGood, &err);
  ASSERT_TRUE(flat) << err;
  EXPECT_EQ(flat->tier, Tier::flat);
  EXPECT_EQ(format_job(*flat).find("tier"), std::string::npos);
  for (const auto& [text, want] : {std::pair{"leaf", Tier::leaf}, {"spine", Tier::spine}, {"flat", Tier::flat}}) {
    const auto s = parse_job(with("", std::string("tier = ") + text), &err);
    ASSERT_TRUE(s) << err;
    EXPECT_EQ(s->tier, want) << text;
    const auto back = parse_job(format_job(*s), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->tier, want) << text;
  }
  EXPECT_NE(job_digest(*parse_job(with("", "tier = leaf"), &err)), job_digest(*flat));
  EXPECT_NE(parse_error(with("", "tier = top")).find("unknown tier 'top'; valid: flat"), std::string::npos);
}

TEST(JobFile, CollectiveAndChunk) {
  std::string err;
  const auto all = parse_job(kGood, &err);
  ASSERT_TRUE(all) << err;
  EXPECT_EQ(all->collective, Collective::allreduce);
  EXPECT_EQ(all->chunk, 1u);
  EXPECT_EQ(format_job(*all).find("collective"), std::string::npos);  // an allreduce keeps its digest
  for (const auto& [text, want] :
       {std::pair{"reduce_scatter", Collective::reduce_scatter}, {"all_gather", Collective::all_gather}}) {
    const auto s = parse_job(with("", std::string("collective = ") + text + "\nchunk = 4"), &err);
    ASSERT_TRUE(s) << err;
    EXPECT_EQ(s->collective, want) << text;
    EXPECT_EQ(s->chunk, 4u);
    const auto back = parse_job(format_job(*s), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->collective, want) << text;
    EXPECT_EQ(back->chunk, 4u);
    EXPECT_NE(job_digest(*s), job_digest(*all));
  }
  EXPECT_NE(parse_error(with("", "collective = broadcast")).find("unknown collective 'broadcast'; valid: allreduce"),
            std::string::npos);
  EXPECT_NE(parse_error(with("", "chunk = 0")).find("out of range"), std::string::npos);
}

// Which jobs a restarted appliance registers again from its state directory: allreduces; not a
// leaf; a reduce-scatter or all-gather when its rounds of (workers - 1) x chunk x (message_bytes /
// payload_bytes) packets divide the 2^24 PSNs.
TEST(JobFile, ResumableAfterARestart) {
  std::string err;
  auto spec = parse_job(kGood, &err);  // 2 workers, 4 packets a message
  ASSERT_TRUE(spec) << err;
  std::string why;
  EXPECT_TRUE(resumable(*spec, &why)) << why;
  spec->tier = Tier::leaf;
  EXPECT_FALSE(resumable(*spec, &why));
  EXPECT_NE(why.find("leaf"), std::string::npos) << why;
  spec->tier = Tier::flat;
  spec->collective = Collective::reduce_scatter;
  for (const auto& [workers, chunk, ok] : {std::tuple{2u, 1u, true},
                                           {3u, 2u, true},
                                           {5u, 4u, true},
                                           {9u, 1u, true},
                                           {4u, 1u, false},
                                           {3u, 3u, false},
                                           {6u, 1u, false}}) {
    spec->workers = workers;
    spec->chunk = chunk;
    why.clear();
    EXPECT_EQ(resumable(*spec, &why), ok) << workers << " workers, chunk " << chunk << ": " << why;
    if (!ok)
      EXPECT_NE(why.find("its are " + std::to_string((workers - 1) * chunk * 4) + " packets"), std::string::npos)
          << why;
  }
  spec->workers = 3;
  spec->chunk = 1;
  spec->message_bytes = 3 * 1024;  // 3 packets a message: rounds of 6
  spec->collective = Collective::all_gather;
  EXPECT_FALSE(resumable(*spec, &why));
}

TEST(JobFile, ErrorMessages) {
  struct Case {
    std::string text, want;
  };
  const std::string conn1 = "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0";
  const Case cases[] = {
      {with("conn = 1,10.0.0.2,19,", "conn = 1,10.0.0.2,0xzz,"),
       "line 11: conn: QPN '0xzz' is not a number (hex 0x... or decimal)"},
      {with("workers = 2", "worker = 2"),
       "line 5: unknown key 'worker' (did you mean 'workers'?); valid keys: id, dtype, workers, "
       "message_bytes, payload_bytes, window, replay, tier, collective, chunk, channels, conn"},
      {with("", "color = blue"), "line 12: unknown key 'color'; valid keys: id, dtype"},
      {with("id = 7", "ID = 7"), "unknown key 'ID' (did you mean 'id'?)"},
      {with("", "window = 9"), "line 12: duplicate key 'window' (first set on line 8); keep one of the two lines"},
      {with("window = 4\n", ""), "missing required key; add a line like `window = 8`"},
      {with("id = 7\n", ""), "missing required key; add a line like `id = 7`"},
      {"dtype = fp32\n",
       "missing required keys; add lines like `id = 7`, `workers = 4`, `message_bytes = 65536`, "
       "`payload_bytes = 1024`, `window = 8`, `conn = "},
      {std::string(kGood).substr(0, std::string(kGood).find("conn")),
       "(conn: one line per worker, RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN[,PORT[,MAC]])"},
      {with("id = 7", "id = 7x"), "line 3: id: '7x' is not a number (hex 0x... or decimal)"},
      {with("id = 7", "id = 4294967296"), "line 3: id: '4294967296' is out of range; write a number in 0..4294967295"},
      {with("id = 7", "id = 99999999999999999999999"), "is out of range"},
      {with("id = 7", "id = -1"), "line 3: id: '-1' is negative; write a number in 0..4294967295"},
      {with("id = 7", "id = +1"), "'+1' is not a number"},
      {with("id = 7", "id = 0x"), "'0x' is not a number"},
      {with("id = 7", "id = 1 2"), "'1 2' is not a number"},
      {with("id = 7", "id ="), "line 3: id: no value; write e.g. `id = 7`"},
      {with("workers = 2", "workers = 0"), "line 5: workers: '0' is out of range; write a number in 1..64"},
      {with("workers = 2", "workers = 65"), "'65' is out of range; write a number in 1..64"},
      {with("window = 4", "window = 0"), "line 8: window: '0' is out of range; write a number in 1..4294967295"},
      {with("message_bytes = 4096", "message_bytes = 1e6"), "line 6: message_bytes: '1e6' is not a number"},
      {with("payload_bytes = 0x400", "payload_bytes = 0"), "payload_bytes: '0' is out of range"},
      {with("dtype = bf16", "dtype = fp64"), "line 4: dtype: unknown dtype 'fp64'; valid: fp32, fp16, bf16, int32"},
      {with("replay = true", "replay = yes"), "line 9: replay: 'yes' is not a boolean; write true or false"},
      {with(conn1, "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF"),
       "line 11: conn: expected 6 to 8 comma-separated fields "
       "RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN[,PORT[,MAC]], got 5"},
      {with(conn1, conn1 + ",65535"),
       "line 11: conn: port '65535' is out of range; write a number in 0..65534 (the appliance's DPDK port id) or "
       "any"},
      {with(conn1, conn1 + ",p1"), "line 11: conn: port 'p1' is not a number"},
      {with(conn1, conn1 + ",1,02:00:00:00:00:01,3"), "expected 6 to 8 comma-separated fields"},
      {with(conn1, conn1 + ",7,8,9"), "got 9"},
      {with(conn1, conn1 + ",1,2"), "line 11: conn: MAC '2' is not a station's MAC address"},
      {with(conn1, conn1 + ",1,02:00:00:00:00"), "MAC '02:00:00:00:00' is not a station's MAC address"},
      {with(conn1, conn1 + ",1,00:00:00:00:00:00"), "MAC '00:00:00:00:00:00' is not a station's MAC address"},
      {with(conn1, conn1 + ",1,01:00:5e:00:00:01"), "MAC '01:00:5e:00:00:01' is not a station's MAC address"},
      {with(conn1, "conn = 1,,19,10.0.0.1,0xABCDEF,0"), "line 11: conn: field 2 (SRC_IP) is empty"},
      {with(conn1, "conn = 1,10.0.0.256,19,10.0.0.1,0xABCDEF,0"),
       "line 11: conn: '10.0.0.256' is not an IPv4 or IPv6 address (e.g. 10.0.0.1 or fd00::1)"},
      {with(conn1, "conn = 1,10.0.0.2,19,fd00::1::2,0xABCDEF,0"), "conn: 'fd00::1::2' is not an IPv4 or IPv6 address"},
      {with(conn1, "conn = 1,10.0.0.2,19,fd00::1,0xABCDEF,0"),
       "line 11: conn: source 10.0.0.2 and destination fd00::1 are of different IP versions; use IPv4 for both or IPv6 "
       "for both"},
      {with(conn1, "conn = 1,10.0.0.2,0x1000000,10.0.0.1,0xABCDEF,0"),
       "line 11: conn: QPN '0x1000000' is out of range; write a number in 0..0xffffff (QPNs are 24-bit)"},
      {with(conn1, "conn = 1,10.0.0.2,19,10.0.0.1,16777216,0"), "QPN '16777216' is out of range"},
      {with(conn1, "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0x1000000"),
       "line 11: conn: PSN '0x1000000' is out of range; write a number in 0..0xffffff (PSNs are 24-bit)"},
      {with(conn1, "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,-3"), "conn: PSN '-3' is negative"},
      {with(conn1, "conn = x,10.0.0.2,19,10.0.0.1,0xABCDEF,0"), "line 11: conn: rank 'x' is not a number"},
      {with(conn1, "conn = 64,10.0.0.2,19,10.0.0.1,0xABCDEF,0"),
       "conn: rank '64' is out of range; write a number in 0..63"},
      {with(conn1, "conn ="), "line 11: conn: no value; write e.g. `conn = 0, 10.0.0.1"},
      {with("", "[job]"), "line 12: sections such as '[job]' are not used"},
      {with("", "just some words"), "line 12: expected `key = value`, got 'just some words'"},
      {with("", " = 5"), "line 12: no key before '='"},
      {with("id = 7", std::string("id = 7\x01")), "'7\\x01' is not a number"},
  };
  for (const Case& c : cases) {
    const std::string err = parse_error(c.text);
    EXPECT_NE(err.find(c.want), std::string::npos) << "want: " << c.want << "\ngot:  " << err;
  }
}

// A conn line may bind its rank: PORT (or `any`) and the MAC its packets carry; written back as read.
TEST(JobFile, AConnLineNamesItsRanksPortAndMac) {
  const std::string conn1 = "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0";
  std::string err;
  const auto s = parse_job(with(conn1, conn1 + ",3,02:aA:00:00:00:07"), &err);
  ASSERT_TRUE(s) << err;
  const ConnectionSpec& c = s->conns[1];
  EXPECT_EQ(c.port, 3);
  EXPECT_EQ(c.mac, (std::array<uint8_t, 6>{0x02, 0xaa, 0, 0, 0, 7}));
  const auto any = parse_job(with(conn1, conn1 + ",any,02:00:00:00:00:07"), &err);
  ASSERT_TRUE(any) << err;
  EXPECT_EQ(any->conns[1].port, kAnyPort);
  EXPECT_TRUE(any->conns[1].has_mac());
  for (const auto& spec : {*s, *any}) {
    const auto again = parse_job(format_job(spec), &err);
    ASSERT_TRUE(again) << err << "\n" << format_job(spec);
    EXPECT_EQ(format_job(*again), format_job(spec));
    EXPECT_EQ(again->conns[1].mac, spec.conns[1].mac);
    EXPECT_EQ(again->conns[1].port, spec.conns[1].port);
  }
  EXPECT_NE(format_job(*any).find(", any, 02:00:00:00:00:07"), std::string::npos) << format_job(*any);
}

// The digest leaves the reported MACs out (each rank knows only its own, and compares the digest of
// a text without the others'), but keeps everything else, ports included.
TEST(JobFile, TheDigestLeavesTheReportedMacsOut) {
  const std::string conn1 = "conn = 1,10.0.0.2,19,10.0.0.1,0xABCDEF,0";
  std::string err;
  const auto plain = parse_job(kGood, &err);
  const auto with_mac = parse_job(with(conn1, conn1 + ",any,02:00:00:00:00:07"), &err);
  const auto other_mac = parse_job(with(conn1, conn1 + ",any,02:00:00:00:00:08"), &err);
  const auto with_port = parse_job(with(conn1, conn1 + ",3,02:00:00:00:00:07"), &err);
  ASSERT_TRUE(plain && with_mac && other_mac && with_port) << err;
  EXPECT_EQ(job_digest(*with_mac), job_digest(*plain));
  EXPECT_EQ(job_digest(*other_mac), job_digest(*plain));
  EXPECT_NE(job_digest(*with_port), job_digest(*plain)) << "a port is part of the digest";
  EXPECT_NE(job_text_digest(*with_mac), job_text_digest(*plain)) << "the whole text's digest has the MAC";
  EXPECT_EQ(job_text_digest(*plain), job_digest(*plain)) << "a job naming no MAC keeps the digest it had";
}

TEST(JobFile, CrossFieldChecksAreLeftToTheEngine) {
  // Ranks vs workers, duplicate ranks and sizes that do not divide are add_job's to refuse.
  std::string err;
  EXPECT_TRUE(parse_job(with("workers = 2", "workers = 5"), &err)) << err;
  EXPECT_TRUE(parse_job(with("conn = 1,", "conn = 0,"), &err)) << err;
  EXPECT_TRUE(parse_job(with("message_bytes = 4096", "message_bytes = 1000"), &err)) << err;
}

// A job has at most 64 ranks: a file with more conn lines (here a 1 MiB `add` body) is refused by
// the parser, before anything of it reaches the appliance's lcores.
TEST(JobFile, MoreThan64ConnLinesAreRefusedByTheParser) {
  std::string big = "id = 1\ndtype = fp32\nworkers = 64\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 2\n";
  for (unsigned i = 0; big.size() < (1u << 20) - 64; ++i)
    big += "conn = " + std::to_string(i % 64) + ", 10.0.0.1, 0x" + std::to_string(i) + ", 10.0.0.2, 0x12, 0\n";
  const std::string err = parse_error(big);
  EXPECT_NE(err.find("more than 1024 conn lines"), std::string::npos) << err;
  std::string sixty_four =
      "id = 1\ndtype = fp32\nworkers = 64\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 2\n";
  for (unsigned i = 0; i < 64; ++i)
    sixty_four += "conn = " + std::to_string(i) + ", 10.0.0.1, " + std::to_string(i + 1) + ", 10.0.0.1, " +
                  std::to_string(i + 1000) + ", 0\n";
  std::string e;
  EXPECT_TRUE(parse_job(sixty_four, &e).has_value()) << e;
  const std::string sixty_five = parse_error(sixty_four + "conn = 0, 10.0.0.1, 0x70, 10.0.0.1, 0x71, 0\n");
  EXPECT_NE(sixty_five.find("65 conn lines for 1 channel(s)"), std::string::npos) << sixty_five;
}

// Channels: workers x channels conn lines, channel by channel; each channel names every rank once.
const char* kTwoChannels =
    "id = 9\ndtype = fp32\nworkers = 2\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 2\n"
    "channels = 2\n"
    "conn = 0, 10.0.0.1, 0x11, 10.0.0.2, 0x22, 0\n"
    "conn = 1, 10.0.0.2, 0x21, 10.0.0.1, 0x12, 0\n"
    "conn = 1, 10.0.0.2, 0x31, 10.0.0.1, 0x42, 5\n"  // channel 1: the ranks in any order
    "conn = 0, 10.0.0.1, 0x41, 10.0.0.2, 0x32, 7\n";

TEST(JobFile, ChannelsAreTheirConnLinesInTurn) {
  std::string err;
  const std::optional<JobSpec> s = parse_job(kTwoChannels, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->channels, 2u);
  ASSERT_EQ(s->conns.size(), 4u);
  const unsigned want_channel[] = {0, 0, 1, 1};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s->conns[i].channel, want_channel[i]) << i;
  // Channel 1's spec: its two connections, as an engine takes it, and the engine accepts it.
  const JobSpec one = channel_spec(*s, 1);
  EXPECT_EQ(one.channel, 1u);
  ASSERT_EQ(one.conns.size(), 2u);
  EXPECT_EQ(one.conns[0].src_qpn, 0x31u);
  EXPECT_EQ(one.conns[1].src_qpn, 0x41u);
  agg::Engine engine(agg::EngineConfig{}, agg::BufferOps{});
  EXPECT_TRUE(engine.add_job(channel_spec(*s, 0), &err)) << err;
  EXPECT_TRUE(engine.add_job(one, &err)) << err;
  EXPECT_EQ(engine.job_ids(), std::vector<uint32_t>{9});
  ASSERT_EQ(engine.job_infos().size(), 2u);
  agg::JobInfo info{};
  EXPECT_TRUE(engine.job_info(9, &info, 1));
  EXPECT_EQ(info.channel, 1u);
  EXPECT_FALSE(engine.add_job(one, &err));  // the same channel twice
  EXPECT_NE(err.find("job 9 channel 1: already exists"), std::string::npos) << err;
  EXPECT_TRUE(engine.remove_job(9, &err)) << err;  // every channel of it
  EXPECT_TRUE(engine.job_infos().empty());
  // The whole job is not an engine's: it takes one channel at a time.
  agg::Engine other(agg::EngineConfig{}, agg::BufferOps{});
  EXPECT_FALSE(other.add_job(*s, &err));
  EXPECT_NE(err.find("an engine takes one channel at a time"), std::string::npos) << err;
  // The canonical text keeps the channels and reads back the same (a job of one channel keeps
  // the text it had before channels existed: no channels line).
  const std::string text = format_job(*s);
  EXPECT_NE(text.find("channels = 2\n"), std::string::npos) << text;
  const std::optional<JobSpec> back = parse_job(text, &err);
  ASSERT_TRUE(back) << err << text;
  EXPECT_TRUE(operator_eq(*s, *back)) << text;
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(back->conns[i].channel, s->conns[i].channel);
  std::optional<JobSpec> single = parse_job(kGood, &err);
  ASSERT_TRUE(single);
  EXPECT_EQ(format_job(*single).find("channels"), std::string::npos);
}

TEST(JobFile, ChannelMistakesAreNamed) {
  const std::string text = kTwoChannels;
  auto without_last = text.substr(0, text.rfind("conn ="));
  std::string err = parse_error(without_last);
  EXPECT_NE(err.find("2 workers x 2 channels but 3 conn lines"), std::string::npos) << err;
  std::string twice = text;
  twice.replace(twice.rfind("conn = 0,"), 9, "conn = 1,");
  err = parse_error(twice);
  EXPECT_NE(err.find("channel 1 names rank 1 twice"), std::string::npos) << err;
  err = parse_error(std::string(text).replace(text.find("channels = 2"), 12, "channels = 17"));
  EXPECT_NE(err.find("1..16"), std::string::npos) << err;
  err = parse_error(std::string(text).replace(text.find("channels = 2"), 12, "channels = 0"));
  EXPECT_NE(err.find("1..16"), std::string::npos) << err;
}

}  // namespace
}  // namespace inagg::control
