// Head job files: what parses, what each mistake says.
#include <gtest/gtest.h>

#include "inagg/xdp/head_job.hpp"

using namespace inagg;
using namespace inagg::xdp;

namespace {

constexpr const char* kTop =
    "# a top head\n"
    "id = 5\nmembers = 2   ; two groups below\nvalues = 256\nwindow = 8\ntotal_weight = 4\ngroup = 239.77.0.9\n"
    "member = 0, 10.77.0.201\nmember = 1, 10.77.0.202\nkey_file = /etc/inagg/xdp/job5.key\n";

TEST(HeadJob, ParsesAndFormatsBack) {
  std::string err;
  const std::optional<HeadJob> j = parse_head_job(kTop, &err);
  ASSERT_TRUE(j) << err;
  EXPECT_EQ(j->id, 5u);
  EXPECT_EQ(j->members, 2u);
  EXPECT_EQ(j->values, 256u);
  EXPECT_EQ(j->window, 8u);
  EXPECT_EQ(j->total_weight, 4u);
  EXPECT_EQ(util::ip_text(j->group), "239.77.0.9");
  EXPECT_FALSE(j->parent);
  EXPECT_EQ(j->key_file, "/etc/inagg/xdp/job5.key");
  EXPECT_FALSE(j->key) << "the agent reads the key when it adds the job";
  const std::optional<HeadJob> again = parse_head_job(format_head_job(*j), &err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(format_head_job(*again), format_head_job(*j));
}

TEST(HeadJob, ParentWithAndWithoutMac) {
  std::string err;
  std::optional<HeadJob> j =
      parse_head_job(std::string(kTop) + "parent = 10.0.0.9\nparent_group = 239.77.0.100\nparent_rank = 1\n", &err);
  ASSERT_TRUE(j) << err;
  EXPECT_EQ(util::ip_text(*j->parent), "10.0.0.9");
  EXPECT_EQ(j->parent_rank, 1u);
  EXPECT_EQ(util::ip_text(*j->parent_group), "239.77.0.100");
  EXPECT_FALSE(j->parent_mac);
  j = parse_head_job(
      std::string(kTop) + "parent = 10.0.0.9\nparent_group = 239.77.0.100\nparent_mac = 02:AA:00:00:00:0f\n", &err);
  ASSERT_TRUE(j) << err;
  EXPECT_EQ(mac_text(*j->parent_mac), "02:aa:00:00:00:0f");
  EXPECT_EQ(format_head_job(*parse_head_job(format_head_job(*j), &err)), format_head_job(*j));
}

// The head takes a rank's DATA only from its member's address: every rank needs one, with either fan-out.
TEST(HeadJob, EveryMemberIsNamed) {
  std::string err;
  const std::string base =
      "id = 1\nmembers = 2\nvalues = 8\nwindow = 2\ntotal_weight = 2\ngroup = 239.1.1.1\nkey_file = /k\n";
  EXPECT_FALSE(parse_head_job(base, &err));
  EXPECT_NE(err.find("every member needs a 'member = RANK, IP' line"), std::string::npos) << err;
  EXPECT_FALSE(parse_head_job(base + "member = 1, 10.0.0.2\n", &err));
  EXPECT_NE(err.find("rank 0 has none"), std::string::npos) << err;
  EXPECT_TRUE(parse_head_job(base + "member = 1, 10.0.0.2\nmember = 0, 10.0.0.1\n", &err)) << err;
}

TEST(HeadJob, UnicastFanoutNeedsEveryMember) {
  std::string err;
  const std::string base =
      "id = 1\nmembers = 2\nvalues = 8\nwindow = 2\ntotal_weight = 2\ngroup = 239.1.1.1\nfanout = unicast\n"
      "key_file = /k\n";
  std::optional<HeadJob> j =
      parse_head_job(base + "member = 1, 10.0.0.2, 02:00:00:00:00:02\nmember = 0, 10.0.0.1\n", &err);
  ASSERT_TRUE(j) << err;
  EXPECT_TRUE(j->unicast);
  ASSERT_EQ(j->member.size(), 2u);
  EXPECT_EQ(util::ip_text(j->member[0]->ip), "10.0.0.1");
  EXPECT_FALSE(j->member[0]->mac);
  EXPECT_EQ(mac_text(*j->member[1]->mac), "02:00:00:00:00:02");
  EXPECT_EQ(format_head_job(*parse_head_job(format_head_job(*j), &err)), format_head_job(*j));
  EXPECT_FALSE(parse_head_job(base + "member = 0, 10.0.0.1\n", &err));
  EXPECT_NE(err.find("rank 1 has none"), std::string::npos) << err;
  EXPECT_FALSE(parse_head_job(base + "member = 0, 10.0.0.1\nmember = 0, 10.0.0.3\n", &err));
  EXPECT_NE(err.find("rank 0 given twice"), std::string::npos) << err;
  EXPECT_FALSE(parse_head_job(base + "member = 0, 10.0.0.1\nmember = 2, 10.0.0.3\n", &err));
  EXPECT_NE(err.find("member 2 is not below members = 2"), std::string::npos) << err;
  EXPECT_FALSE(parse_head_job(base + "member = 0\n", &err));
  EXPECT_NE(err.find("expected RANK, IP[, MAC]"), std::string::npos) << err;
  EXPECT_FALSE(parse_head_job("fanout = broadcast\n", &err));
  EXPECT_NE(err.find("is not multicast or unicast"), std::string::npos) << err;
}

TEST(HeadJob, MulticastMac) { EXPECT_EQ(mac_text(multicast_mac(*util::parse_ip("239.205.1.2"))), "01:00:5e:4d:01:02"); }

struct Bad {
  std::string text, message;
};

TEST(HeadJob, EachMistakeSaysWhatToWrite) {
  const std::string base = "id = 1\nmembers = 4\nvalues = 256\nwindow = 8\ntotal_weight = 4\n";
  const Bad cases[] = {
      {base, "missing required key; add a line like `group = 239.77.0.1`"},
      {base + "group = 10.0.0.1\n", "is not a multicast address"},
      {base + "group = fd00::1\n", "is not an IPv4 address"},
      {"id = 256\n", "line 1: id: '256' is not a number in 0..255"},
      {"id = 1\nid = 2\n", "line 2: duplicate key 'id' (first set on line 1)"},
      {"id = 1\nvalues = 6\n", "line 2: values: 6 is not a multiple of 4"},
      {"id = 1\nvalues = 2048\n", "not a number in 4..1024"},
      {"id = 1\nwindow = 33\n", "not a number in 1..32"},
      {"id = 1\nmembers = 65\n", "not a number in 1..64"},
      {"groop = 1\n", "line 1: unknown key 'groop' (did you mean 'group'?); valid keys: id, members"},
      {"just words\n", "line 1: expected `key = value`"},
      {base + "group = 239.0.0.1\nparent_rank = 1\n", "parent_group, parent_rank and parent_mac need 'parent = IP'"},
      {base + "group = 239.0.0.1\nparent = 10.0.0.1\n", "a head with a parent needs 'parent_group = IP'"},
      {base + "group = 239.0.0.1\nparent = 10.0.0.1\nparent_group = 10.0.0.2\n",
       "parent_group: '10.0.0.2' is not a multicast address"},
      {base + "group = 239.0.0.1\nparent = 10.0.0.1\nparent_group = 239.0.0.2\nparent_mac = 02:00\n",
       "is not an Ethernet address"},
      {"id = 1\nmembers = 4\nvalues = 256\nwindow = 8\ntotal_weight = 3\ngroup = 239.0.0.1\n",
       "total_weight 3 is below members 4"},
      {base + "group = 239.0.0.1\nmember = 0, 10.0.0.1\nmember = 1, 10.0.0.2\nmember = 2, 10.0.0.3\n"
              "member = 3, 10.0.0.4\n",
       "a head job needs 'key_file = PATH', the job's MAC key"},
      {"id = 1\nkey_file = job1.key\n", "key_file: 'job1.key' is not an absolute path"},
  };
  for (const Bad& b : cases) {
    std::string err;
    EXPECT_FALSE(parse_head_job(b.text, &err)) << b.text;
    EXPECT_NE(err.find(b.message), std::string::npos) << "got: " << err << "\nwanted: " << b.message;
  }
}

TEST(HeadJob, LoadNamesTheFile) {
  std::string err;
  EXPECT_FALSE(load_head_job("/nonexistent/x.job", &err));
  EXPECT_NE(err.find("cannot open head job file '/nonexistent/x.job'"), std::string::npos) << err;
}

}  // namespace
