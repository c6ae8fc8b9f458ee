// PcapWriter's size limit and error count: a capture stops at its limit, counting what it skipped,
// and libpcap reads back exactly the records written before it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include "inagg/util/pcap.hpp"

namespace inagg::util {
namespace {

TEST(PcapWriter, StopsAtItsLimitAndCountsTheRest) {
  char tmpl[] = "/tmp/inagg_pcap_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string path = tmpl;
  PcapWriter w;
  std::string err;
  ASSERT_TRUE(w.open(path, &err)) << err;
  w.set_limit(24 + 3 * (16 + 100));  // the file header and three 100-byte records
  const std::vector<uint8_t> frame(100, 0xab);
  unsigned written = 0;
  for (int i = 0; i < 10; ++i) written += w.write(frame.data(), frame.size(), 1000u * i) ? 1 : 0;
  EXPECT_EQ(written, 3u);
  EXPECT_EQ(w.skipped(), 7u);
  EXPECT_EQ(w.errors(), 0u);
  EXPECT_TRUE(w.close());
  std::vector<PcapRecord> records;
  ASSERT_TRUE(read_pcap(path, &records, &err)) << err;
  EXPECT_EQ(records.size(), 3u);
  ::unlink(path.c_str());
}

TEST(PcapWriter, WriteErrorsAreCounted) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  PcapWriter w;
  std::string err;
  ASSERT_TRUE(w.open("/dev/full", &err)) << err;
  const std::vector<uint8_t> frame(1500, 1);
  unsigned failed = 0;
  for (int i = 0; i < 100; ++i) failed += w.write(frame.data(), frame.size(), i) ? 0 : 1;  // past stdio's buffer
  EXPECT_GT(failed, 0u);
  EXPECT_EQ(w.errors(), failed);
  EXPECT_FALSE(w.close());
}

}  // namespace
}  // namespace inagg::util
