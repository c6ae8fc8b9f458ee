// The builder against scapy: rebuilding every fixture from its decoded fields gives the same bytes.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"

using namespace inagg;
using namespace inagg::wire;
using inagg::util::IpAddr;
using inagg::util::IpVersion;
using inagg::util::parse_gid;
using inagg::util::parse_ip;

TEST(Build, RebuildsEveryScapyFixtureByteForByte) {
  const auto packets = fixtures::load_fixtures();
  for (const auto& p : packets) {
    SCOPED_TRACE(p.str("file") + " #" + p.str("index") + " " + p.str("name"));
    const uint8_t* f = p.frame.data();
    Layout l;
    ASSERT_EQ(parse_frame(p.frame, l), ParseStatus::roce);
    RoceFrameSpec s;
    std::copy_n(f, 6, s.dst_mac.begin());
    std::copy_n(f + 6, 6, s.src_mac.begin());
    s.l2_tags_len = static_cast<uint8_t>(l.vlan_tags * 4);
    std::copy_n(f + 12, s.l2_tags_len, s.l2_tags.begin());
    const uint8_t* ip = f + l.l3;
    if (l.ip == IpVersion::v4) {
      s.src_ip = IpAddr::v4(load_be32(ip + 12));
      s.dst_ip = IpAddr::v4(load_be32(ip + 16));
      s.tos = ip[1];
      s.ttl = ip[8];
      s.ip_id = load_be16(ip + 4);
      s.dont_fragment = load_be16(ip + 6) & 0x4000;
    } else {
      std::array<uint8_t, 16> a, b;
      std::copy_n(ip + 8, 16, a.begin());
      std::copy_n(ip + 24, 16, b.begin());
      s.src_ip = IpAddr::v6(a);
      s.dst_ip = IpAddr::v6(b);
      s.tos = static_cast<uint8_t>(load_be32(ip) >> 20);
      s.flow_label = load_be32(ip) & 0xfffff;
      s.ttl = ip[7];
    }
    s.src_port = load_be16(f + l.l4);
    s.opcode = static_cast<uint8_t>(p.num("opcode"));
    s.solicited = p.num("se");
    s.migreq = p.num("m");
    s.fecn = p.num("fecn");
    s.becn = p.num("becn");
    s.ack_req = p.num("ackreq");
    s.pkey = static_cast<uint16_t>(p.num("pkey"));
    s.dest_qp = static_cast<uint32_t>(p.num("dqpn"));
    s.psn = static_cast<uint32_t>(p.num("psn"));
    if (p.has("reth_va")) {
      s.reth_va = p.num("reth_va");
      s.reth_rkey = static_cast<uint32_t>(p.num("reth_rkey"));
      s.reth_dma_len = static_cast<uint32_t>(p.num("reth_dlen"));
    }
    if (p.has("imm")) s.immdt = static_cast<uint32_t>(p.num("imm"));
    if (p.has("aeth_syndrome")) {
      s.aeth_syndrome = static_cast<uint8_t>(p.num("aeth_syndrome"));
      s.aeth_msn = static_cast<uint32_t>(p.num("aeth_msn"));
    }
    if (l.deth) {
      s.deth_qkey = load_be32(f + l.deth);
      s.deth_src_qp = load_be24(f + l.deth + 5);
    }
    std::vector<uint8_t> out(roce_frame_size(s, l.payload_len));
    ASSERT_EQ(build_roce_frame(out, s, {f + l.payload, l.payload_len}), p.frame.size());
    std::vector<uint8_t> expected = p.frame;
    if (l.ip == IpVersion::v6) {
      // scapy fills the IPv6 UDP checksum; inagg writes 0, as RoCEv2 NICs do (the ICRC masks it).
      expected[l.l4 + 6] = expected[l.l4 + 7] = 0;
    }
    EXPECT_EQ(out, expected);
  }
}

TEST(Build, RefusesWhatItCannotBuild) {
  RoceFrameSpec s;
  s.src_ip = *parse_ip("10.0.0.1");
  s.dst_ip = *parse_ip("fd00::1");
  s.opcode = op::kRc | op::kWriteOnly;
  std::vector<uint8_t> out(9000);
  const uint8_t payload[4] = {1, 2, 3, 4};
  EXPECT_EQ(build_roce_frame(out, s, payload), 0u) << "mixed IP versions";
  s.dst_ip = *parse_ip("10.0.0.2");
  EXPECT_GT(build_roce_frame(out, s, payload), 0u);
  s.opcode = 0x80;
  EXPECT_EQ(build_roce_frame(out, s, payload), 0u) << "unknown opcode";
  s.opcode = op::kRc | op::kAcknowledge;
  EXPECT_EQ(build_roce_frame(out, s, payload), 0u) << "payload on an ACK";
  s.opcode = op::kRc | op::kWriteOnly;
  EXPECT_EQ(build_roce_frame({out.data(), 40}, s, payload), 0u) << "buffer too small";
}

TEST(Build, PadBytesAreZeroAndCounted) {
  RoceFrameSpec s;
  s.src_ip = *parse_ip("10.0.0.1");
  s.dst_ip = *parse_ip("10.0.0.2");
  s.opcode = op::kRc | op::kWriteLast;
  for (size_t n = 0; n < 9; ++n) {
    std::vector<uint8_t> payload(n, 0xee), out(roce_frame_size(s, n));
    ASSERT_EQ(build_roce_frame(out, s, payload), out.size());
    Layout l;
    ASSERT_EQ(parse_frame(out, l), ParseStatus::roce);
    EXPECT_EQ(l.payload_len, n);
    EXPECT_EQ(l.pad, (4 - n % 4) % 4);
    for (size_t i = 0; i < l.pad; ++i) EXPECT_EQ(out[l.payload + n + i], 0);
    EXPECT_TRUE(icrc_verify(out.data(), l));
  }
}

TEST(Build, RawTagsAreWrittenAsGiven) {
  RoceFrameSpec s;
  s.src_ip = *parse_ip("10.0.0.1");
  s.dst_ip = *parse_ip("10.0.0.2");
  s.opcode = op::kRc | op::kAcknowledge;
  s.vlan_tci = 5;  // ignored when raw tags are given
  const uint8_t tags[8] = {0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x07};
  std::copy_n(tags, 8, s.l2_tags.begin());
  s.l2_tags_len = 8;
  std::vector<uint8_t> out(roce_frame_size(s, 0));
  ASSERT_EQ(build_roce_frame(out, s, {}), out.size());
  EXPECT_EQ(std::vector<uint8_t>(out.begin() + 12, out.begin() + 20), std::vector<uint8_t>(tags, tags + 8));
  Layout l;
  ASSERT_EQ(parse_frame(out, l), ParseStatus::roce);
  EXPECT_EQ(l.vlan_tags, 2);
  EXPECT_TRUE(icrc_verify(out.data(), l));
  s.l2_tags_len = 6;
  EXPECT_EQ(build_roce_frame(out, s, {}), 0u) << "tags are 4 bytes each";
}

TEST(Build, Ipv4MappedGidsNameTheIpv4Address) {
  EXPECT_EQ(*parse_gid("::ffff:10.0.0.7"), *parse_ip("10.0.0.7"));
  EXPECT_EQ(*parse_gid("::FFFF:0a00:0007"), *parse_ip("10.0.0.7"));
  EXPECT_TRUE(parse_ip("::ffff:10.0.0.7")->is_v4_mapped());
  EXPECT_EQ(parse_gid("fd00::1")->version, IpVersion::v6);
  EXPECT_EQ(parse_gid("::1")->version, IpVersion::v6);
  EXPECT_EQ(parse_gid("::fffe:10.0.0.7")->version, IpVersion::v6) << "only ::ffff:0:0/96 is IPv4-mapped";
  EXPECT_EQ(parse_gid("10.0.0.7")->v4_host_order(), 0x0a000007u);
  EXPECT_FALSE(parse_gid("::ffff:10.0.0"));
}

TEST(Build, ParseIp) {
  EXPECT_EQ(parse_ip("10.1.2.3")->v4_host_order(), 0x0a010203u);
  EXPECT_EQ(parse_ip("fd00::1")->version, IpVersion::v6);
  EXPECT_FALSE(parse_ip("10.1.2"));
  EXPECT_FALSE(parse_ip("not an address"));
}
