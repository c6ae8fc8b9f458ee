// The control protocol: each verb parses, malformed requests say what is wrong, replies format as
// documented in protocol.hpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "inagg/control/job_file.hpp"
#include "inagg/control/protocol.hpp"

namespace inagg::control {
namespace {

using Verb = Request::Verb;

const char* kJob =
    "id = 9\ndtype = fp32\nworkers = 1\nmessage_bytes = 1024\npayload_bytes = 1024\nwindow = 2\n"
    "conn = 0, 10.0.0.1, 0x11, 10.0.0.2, 0x12, 0\n";

std::string refused(const std::string& text) {
  std::string err;
  EXPECT_FALSE(parse_request(text, &err)) << "accepted: " << text;
  return err;
}

TEST(Protocol, ParsesEachVerb) {
  std::string err;
  auto r = parse_request(std::string("add\n") + kJob, &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->verb, Verb::add);
  EXPECT_EQ(r->body, kJob);
  EXPECT_EQ(r->job.id, 9u);
  EXPECT_TRUE(r->has_id);
  EXPECT_EQ(r->id, 9u);
  ASSERT_EQ(r->job.conns.size(), 1u);

  r = parse_request("remove 42\n", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->verb, Verb::remove);
  EXPECT_TRUE(r->has_id);
  EXPECT_EQ(r->id, 42u);

  r = parse_request("remove\t4294967295", &err);  // no newline is fine too
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->id, 4294967295u);

  r = parse_request("list", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->verb, Verb::list);
  EXPECT_FALSE(r->has_id);

  r = parse_request("stats\r\n", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->verb, Verb::stats);
  EXPECT_FALSE(r->has_id);

  r = parse_request("  stats 0x10  \n\n", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->verb, Verb::stats);
  EXPECT_TRUE(r->has_id);
  EXPECT_EQ(r->id, 16u);
}

TEST(Protocol, ARegistrationWithIpv4MappedGidsRegistersIpv4Addresses) {
  std::string err;
  auto r = parse_request(
      "add\nid = 9\ndtype = fp32\nworkers = 1\nmessage_bytes = 1024\npayload_bytes = 1024\n"
      "window = 2\nconn = 0, ::ffff:10.0.0.1, 0x11, ::ffff:10.0.0.1, 0x12, 0\n",
      &err);
  ASSERT_TRUE(r) << err;
  ASSERT_EQ(r->job.conns.size(), 1u);
  EXPECT_EQ(r->job.conns[0].src_ip.version, util::IpVersion::v4);
  EXPECT_EQ(r->job.conns[0].dst_ip, *util::parse_ip("10.0.0.1"));
}

TEST(Protocol, FormatRequestRoundTrips) {
  Request add;
  add.verb = Verb::add;
  add.body = kJob;
  Request rm;
  rm.verb = Verb::remove;
  rm.id = 5;
  rm.has_id = true;
  Request st = rm;
  st.verb = Verb::stats;
  Request all;
  all.verb = Verb::stats;
  Request ls;
  ls.verb = Verb::list;
  EXPECT_EQ(format_request(rm), "remove 5\n");
  EXPECT_EQ(format_request(st), "stats 5\n");
  EXPECT_EQ(format_request(all), "stats\n");
  EXPECT_EQ(format_request(ls), "list\n");
  for (const Request& r : {add, rm, st, all, ls}) {
    std::string err;
    const auto back = parse_request(format_request(r), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->verb, r.verb);
    EXPECT_EQ(back->has_id, r.has_id || r.verb == Verb::add);
    if (r.verb != Verb::add) {
      EXPECT_EQ(back->id, r.id);
    }
    EXPECT_EQ(back->body, r.body);
  }
}

TEST(Protocol, MalformedRequests) {
  EXPECT_EQ(refused("frobnicate 3\n"), "unknown request 'frobnicate'; valid: add, remove, list, stats");
  EXPECT_NE(refused("LIST").find("unknown request 'LIST'"), std::string::npos);
  EXPECT_NE(refused("\x01\x02").find("unknown request '\\x01\\x02'"), std::string::npos);
  EXPECT_NE(refused("").find("empty request"), std::string::npos);
  EXPECT_NE(refused(" \n list").find("empty request"), std::string::npos);
  EXPECT_EQ(refused("remove"), "remove needs a job id, e.g. 'remove 7'");
  EXPECT_EQ(refused("remove abc"), "remove: job id 'abc' is not a number; write a decimal job id, e.g. 'remove 7'");
  EXPECT_EQ(refused("remove 4294967296"), "remove: job id '4294967296' is out of range; job ids are 0..4294967295");
  EXPECT_NE(refused("remove -1").find("is out of range"), std::string::npos);
  EXPECT_NE(refused("remove 7x").find("'7x' is not a number"), std::string::npos);
  EXPECT_EQ(refused("remove 1 2"), "remove takes one job id, got 2 arguments");
  EXPECT_EQ(refused("stats 1 2"), "stats takes at most one job id, got 2 arguments");
  EXPECT_NE(refused("stats x").find("stats: job id 'x' is not a number"), std::string::npos);
  EXPECT_EQ(refused("list all"), "list takes no arguments, got 1");
  EXPECT_EQ(refused("list\nsomething"), "list takes nothing after its first line");
  EXPECT_EQ(refused("add"), "add needs a job file: send its text on the lines after 'add'");
  EXPECT_EQ(refused("add\n\n  \n"), "add needs a job file: send its text on the lines after 'add'");
  EXPECT_EQ(refused(std::string("add 9\n") + kJob),
            "add takes no arguments; send the job file text on the lines after 'add'");
  EXPECT_EQ(
      refused(std::string("add\n") + kJob + "windw = 3\n"),
      "job file: line 8: unknown key 'windw' (did you mean 'window'?); valid keys: id, dtype, workers, message_bytes, "
      "payload_bytes, window, replay, tier, collective, chunk, channels, conn");
}

TEST(Protocol, Replies) {
  EXPECT_EQ(format_job_added(3), "ok job 3 added\n");
  EXPECT_EQ(format_job_removed(3), "ok job 3 removed\n");
  EXPECT_EQ(format_error("no job 3\nis known"), "error: no job 3 is known\n");
  EXPECT_TRUE(is_error_reply(format_error("x")));
  EXPECT_FALSE(is_error_reply(format_job_added(1)));
  EXPECT_FALSE(is_error_reply(""));

  EXPECT_EQ(format_job_list({}), "no jobs\n");
  JobStatus a;
  a.id = 1;
  a.state = JobStatus::State::active;
  a.released_slots = 12;
  a.held_packets = 3;
  a.dtype = util::Dtype::bf16;
  a.workers = 4;
  JobStatus b = a;
  b.id = 2;
  b.state = JobStatus::State::failed;
  b.error = "rank 1 sent \"late\"\npacket";
  b.dtype = util::Dtype::int32;
  JobStatus c = a;
  c.id = 3;
  c.state = JobStatus::State::refused;
  c.error = "needs 16384 buffers\\x";
  EXPECT_EQ(
      format_job_list({a, b, c}),
      "id=1 state=active dtype=bf16 workers=4 released_slots=12 held_packets=3 retained_packets=0 memory_bytes=0 "
      "mbuf_quota=0 error=\"\"\n"
      "id=2 state=failed dtype=int32 workers=4 released_slots=12 held_packets=3 retained_packets=0 memory_bytes=0 "
      "mbuf_quota=0 error=\"rank 1 sent \\\"late\\\"\\npacket\"\n"
      "id=3 state=refused dtype=bf16 workers=4 released_slots=12 held_packets=3 retained_packets=0 memory_bytes=0 "
      "mbuf_quota=0 error=\"needs 16384 buffers\\\\x\"\n");

  EXPECT_EQ(format_counters({{"rx_packets", 10}, {"tx_full", 2}}), "rx_packets 10\ntx_full 2\n");
  EXPECT_EQ(format_counters({}), "");

  JobStatus s;
  s.id = 4;
  s.state = JobStatus::State::active;
  s.memory_bytes = 4096;
  s.counters = {{"slots_released", 5}};
  s.workers = 2;
  EXPECT_EQ(format_job_stats(s),
            "id 4\nstate active\ndtype fp32\nworkers 2\nreleased_slots 0\nheld_packets 0\nretained_packets "
            "0\nmemory_bytes 4096\n"
            "mbuf_quota 0\nslots_released 5\n");
  s.state = JobStatus::State::failed;
  s.error = "timed out\nafter 30 s";
  EXPECT_EQ(format_job_stats(s),
            "id 4\nstate failed\ndtype fp32\nworkers 2\nreleased_slots 0\nheld_packets 0\nretained_packets "
            "0\nmemory_bytes 4096\n"
            "mbuf_quota 0\nerror timed out after 30 s\nslots_released 5\n");
  s.counters.push_back({"naks_sent", 0});
  EXPECT_EQ(format_job_summary(s),
            "job 4: failed dtype fp32 workers 2 released_slots 0 held_packets 0 retained_packets 0 memory_bytes 4096 "
            "mbuf_quota 0 slots_released 5 error \"timed out\\nafter 30 s\"\n");
}

// The forms come from one field list (INAGG_JOB_FIELDS): each shows every field, in its order.
TEST(Protocol, JobFormsShowEveryFieldInOrder) {
  JobStatus j;
  j.id = 7;
  j.state = JobStatus::State::failed;
  j.error = "why";
  j.spec_digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";  // every text field set: a form
                                                                                       // leaves out an empty one
  std::vector<std::string> names;
  for_each_job_field(j, [&](std::string_view name, std::string_view text, const JobFieldValue&) {
    names.emplace_back(name);
    EXPECT_FALSE(text.empty()) << name;
  });
  ASSERT_GE(names.size(), 10u);
  const std::string line = format_job_list({j}), stats = format_job_stats(j), summary = format_job_summary(j);
  size_t at_line = 0, at_stats = 0, at_summary = 0;
  for (const std::string& n : names) {
    at_line = line.find(n + "=", at_line);
    EXPECT_NE(at_line, std::string::npos) << n << " missing or out of order in: " << line;
    at_stats = stats.find(n + " ", at_stats);
    EXPECT_NE(at_stats, std::string::npos) << n << " missing or out of order in: " << stats;
    if (n == "id" || n == "state") continue;  // the summary starts "job <id>: <state>"
    at_summary = summary.find(" " + n + " ", at_summary);
    EXPECT_NE(at_summary, std::string::npos) << n << " missing or out of order in: " << summary;
  }
}

// What a worker reads back from `list`: the id, the state and the unescaped error, whatever the
// error held (quotes, backslashes, newlines, control characters).
TEST(Protocol, JobListLinesReadBack) {
  JobStatus j;
  j.id = 4000000000u;
  j.state = JobStatus::State::refused;
  j.error = "needs \"16384\" held\\packet buffers\nbut only\x01 8192 \x7f";
  const std::string text = format_job_list({j});
  const std::optional<JobListLine> l = parse_job_list_line(text.substr(0, text.size() - 1));
  ASSERT_TRUE(l) << text;
  EXPECT_EQ(l->id, 4000000000u);
  EXPECT_EQ(l->state, "refused");
  EXPECT_EQ(l->error, j.error) << text;
  EXPECT_FALSE(l->spec_digest);
  j.spec_digest = "0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d";
  const std::string with_spec = format_job_list({j});
  EXPECT_NE(
      with_spec.find(" mbuf_quota=0 spec=0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d error=\""),
      std::string::npos)
      << with_spec;
  const std::optional<JobListLine> ls = parse_job_list_line(with_spec.substr(0, with_spec.size() - 1));
  ASSERT_TRUE(ls);
  EXPECT_EQ(ls->spec_digest, j.spec_digest);
  // An older appliance's 8 hex digits, or anything but 64 hex digits: no digest to compare.
  for (const char* other : {"0badf00d", "0BADF00D0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d",
                            "0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00dff",
                            "0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00d0badf00"}) {
    const std::optional<JobListLine> lo = parse_job_list_line("id=7 state=active spec=" + std::string(other));
    ASSERT_TRUE(lo) << other;
    EXPECT_FALSE(lo->spec_digest) << other;
  }
  EXPECT_EQ(ls->error, j.error);
  EXPECT_FALSE(parse_job_list_line("no jobs"));
  EXPECT_FALSE(parse_job_list_line("id=x state=active"));
  EXPECT_FALSE(parse_job_list_line(""));
  const std::optional<JobListLine> bare = parse_job_list_line("id=7 state=active");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->id, 7u);
  EXPECT_EQ(bare->state, "active");
  EXPECT_EQ(bare->error, "");
  // Garbled escapes are kept as they are, never read past the line.
  const std::optional<JobListLine> odd = parse_job_list_line("id=1 state=failed error=\"a\\xZZ b\\");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->error, "axZZ b\\");
}

// job_digest: SHA-256 of the canonical text as 64 hex digits, checked against coreutils'
// sha256sum of the same text; equal specs agree, a changed field changes it.
TEST(Protocol, JobDigestIsTheSha256OfTheCanonicalText) {
  std::string err;
  const std::optional<JobSpec> a = parse_job(kJob, &err);
  ASSERT_TRUE(a) << err;
  char path[] = "/tmp/inagg-digest-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = format_job(*a);
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  std::string out;
  if (FILE* p = ::popen(("sha256sum " + std::string(path)).c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  ::unlink(path);
  ASSERT_GE(out.size(), 64u) << "sha256sum gave: " << out;
  EXPECT_EQ(job_digest(*a), out.substr(0, 64));
  JobSpec b = *a;
  EXPECT_EQ(job_digest(b), job_digest(*a));
  b.window = 3;
  EXPECT_NE(job_digest(b), job_digest(*a));
}

}  // namespace
}  // namespace inagg::control
