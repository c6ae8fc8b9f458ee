// The control replies' JSON form (inagg-ctl -j) from the formatters' own text: refusals, add and
// remove, list (quoted errors, the spec digest as a string), stats with and without a job id, and
// replies that are not in the protocol's form refused. (python's json module reads a live
// appliance's replies in dataplane_metrics.)
#include <gtest/gtest.h>

#include "inagg/control/reply_json.hpp"

namespace inagg::control {
namespace {

std::string to_json(Request::Verb v, bool has_id, const std::string& reply) {
  std::string err;
  const std::optional<std::string> j = reply_to_json(v, has_id, reply, &err);
  EXPECT_TRUE(j.has_value()) << err << " for: " << reply;
  return j.value_or("");
}

JobStatus job(uint32_t id, std::string error) {
  JobStatus j;
  j.id = id;
  j.state = error.empty() ? JobStatus::State::active : JobStatus::State::failed;
  j.dtype = util::Dtype::fp32;
  j.workers = 4;
  j.released_slots = 12;
  j.spec_digest = "0123456789012345678901234567890123456789012345678901234567890123";  // digits only
  j.error = std::move(error);
  return j;
}

TEST(ReplyJson, Refusal) {
  EXPECT_EQ(to_json(Request::Verb::remove, true, format_error("no job 7")), R"({"ok": false, "error": "no job 7"})");
}

TEST(ReplyJson, AddAndRemove) {
  EXPECT_EQ(to_json(Request::Verb::add, false, format_job_added(3)), R"({"ok": true, "job": 3, "result": "added"})");
  EXPECT_EQ(to_json(Request::Verb::remove, true, format_job_removed(3)),
            R"({"ok": true, "job": 3, "result": "removed"})");
}

TEST(ReplyJson, ListQuotesTheErrorAndKeepsTheDigestAString) {
  const std::string j =
      to_json(Request::Verb::list, false, format_job_list({job(1, ""), job(2, "rank 1 said \"no\"\\")}));
  EXPECT_NE(j.find(R"({"id": 1, "state": "active", "dtype": "fp32", "workers": 4, "released_slots": 12, )"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find(R"("spec": "0123456789012345678901234567890123456789012345678901234567890123", "error": ""})"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find(R"("state": "failed")"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("error": "rank 1 said \"no\"\\"}]})"), std::string::npos) << j;
  EXPECT_EQ(to_json(Request::Verb::list, false, format_job_list({})), R"({"ok": true, "jobs": []})");
}

TEST(ReplyJson, StatsOfTheEngineAndOfAJob) {
  EXPECT_EQ(to_json(Request::Verb::stats, false, format_counters({{"rx_packets", 12}, {"bad_icrc", 0}})),
            R"({"ok": true, "counters": {"rx_packets": 12, "bad_icrc": 0}})");
  JobStatus j = job(5, "");
  j.counters = {{"aggregated_packets", 40}};
  const std::string s = to_json(Request::Verb::stats, true, format_job_stats(j));
  EXPECT_EQ(s.rfind(R"({"ok": true, "job": {"id": 5, "state": "active", "dtype": "fp32", "workers": 4, )", 0), 0u) << s;
  EXPECT_NE(s.find(R"(}, "counters": {"aggregated_packets": 40}})"), std::string::npos) << s;
}

TEST(ReplyJson, ARepliesNotInTheProtocolsFormIsAnError) {
  std::string err;
  EXPECT_FALSE(reply_to_json(Request::Verb::add, false, "ok job x added\n", &err));
  EXPECT_NE(err.find("not 'ok job ID added|removed'"), std::string::npos) << err;
  EXPECT_FALSE(reply_to_json(Request::Verb::list, false, "id=1 state=active\n", &err));
  EXPECT_FALSE(reply_to_json(Request::Verb::stats, false, "rx_packets\n", &err));
}

TEST(ReplyJson, QuoteEscapesControlCharacters) { EXPECT_EQ(json_quote("a\tb\x01"), R"("a\tb\u0001")"); }

}  // namespace
}  // namespace inagg::control
