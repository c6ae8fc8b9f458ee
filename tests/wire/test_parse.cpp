// Malformed and truncated frames: a clear status, never a read out of bounds (run under ASan: every
// frame is copied into a heap buffer of exactly its size, so a one-byte over-read is caught).
#include <gtest/gtest.h>

#include <random>

#include "fixtures.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"

using namespace inagg;
using namespace inagg::wire;
using inagg::util::IpVersion;
using inagg::util::parse_ip;

namespace {

ParseStatus parse_exact(const std::vector<uint8_t>& bytes, size_t len, Layout* out = nullptr) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[len ? len : 1]);
  std::copy_n(bytes.begin(), len, buf.get());
  Layout l;
  const ParseStatus s = parse_frame({buf.get(), len}, l);
  if (out) *out = l;
  return s;
}

std::vector<uint8_t> make(uint8_t opcode, size_t payload_len, bool v6 = false, bool vlan = false) {
  RoceFrameSpec s;
  s.src_ip = v6 ? *parse_ip("fd00::1") : *parse_ip("10.0.0.1");
  s.dst_ip = v6 ? *parse_ip("fd00::2") : *parse_ip("10.0.0.2");
  if (vlan) s.vlan_tci = 7;
  s.opcode = opcode;
  s.dest_qp = 0x123456;
  s.psn = 0xfffffe;
  std::vector<uint8_t> payload(payload_len, 0xab), out(roce_frame_size(s, payload_len));
  EXPECT_EQ(build_roce_frame(out, s, payload), out.size());
  return out;
}

void set_ipv4_checksum(std::vector<uint8_t>& f, size_t l3) {
  f[l3 + 10] = f[l3 + 11] = 0;
  store_be16(&f[l3 + 10], ipv4_header_checksum(&f[l3], (f[l3] & 0xf) * 4u));
}

}  // namespace

TEST(Parse, EveryTruncationOfEveryFixtureIsRejectedWithoutOverread) {
  const auto packets = fixtures::load_fixtures();
  size_t checked = 0;
  for (const auto& p : packets) {
    for (size_t len = 0; len < p.frame.size(); ++len) {
      const ParseStatus s = parse_exact(p.frame, len);
      ASSERT_NE(s, ParseStatus::roce) << p.str("name") << " cut to " << len;
      ASSERT_TRUE(is_malformed(s)) << p.str("name") << " cut to " << len << ": " << parse_status_name(s);
      ++checked;
    }
    ASSERT_EQ(parse_exact(p.frame, p.frame.size()), ParseStatus::roce);
  }
  EXPECT_GT(checked, 10000u);
}

TEST(Parse, TruncationStatusNamesTheLayer) {
  const auto f = make(op::kRc | op::kWriteFirst, 64);
  EXPECT_EQ(parse_exact(f, 0), ParseStatus::truncated_l2);
  EXPECT_EQ(parse_exact(f, 13), ParseStatus::truncated_l2);
  EXPECT_EQ(parse_exact(f, 14), ParseStatus::truncated_ip);
  EXPECT_EQ(parse_exact(f, 33), ParseStatus::truncated_ip);
  EXPECT_EQ(parse_exact(f, 34), ParseStatus::bad_ip_length);  // header present, total length says more
  // With the lengths patched to the cut, the deeper layers report themselves.
  auto cut = [&](size_t ip_payload) {
    std::vector<uint8_t> g(f.begin(), f.begin() + 34 + ip_payload);
    store_be16(&g[16], static_cast<uint16_t>(20 + ip_payload));
    set_ipv4_checksum(g, 14);
    if (ip_payload >= 8) store_be16(&g[38], static_cast<uint16_t>(ip_payload));
    return parse_exact(g, g.size());
  };
  EXPECT_EQ(cut(4), ParseStatus::truncated_udp);
  EXPECT_EQ(cut(8 + 12 + 3), ParseStatus::truncated_bth);
  EXPECT_EQ(cut(8 + 12 + 16 + 3), ParseStatus::truncated_ext);  // RETH cut
}

TEST(Parse, BadIhl) {
  auto f = make(op::kRc | op::kAcknowledge, 0);
  for (uint8_t ihl : {0, 1, 4}) {
    auto g = f;
    g[14] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(parse_exact(g, g.size()), ParseStatus::bad_ipv4_ihl) << int(ihl);
  }
  auto g = f;
  g[14] = 0x4f;  // 60 bytes of header, more than the 48-byte datagram
  EXPECT_EQ(parse_exact(g, g.size()), ParseStatus::bad_ipv4_ihl);
}

TEST(Parse, Ipv4OptionsAreSkippedAndCoveredByTheIcrc) {
  auto f = make(op::kRc | op::kWriteOnly, 8);
  // Insert 4 bytes of options (NOP NOP NOP EOL) after the 20-byte IPv4 header.
  std::vector<uint8_t> g(f.begin(), f.begin() + 34);
  g.insert(g.end(), {1, 1, 1, 0});
  g.insert(g.end(), f.begin() + 34, f.end());
  g[14] = 0x46;
  store_be16(&g[16], static_cast<uint16_t>(load_be16(&f[16]) + 4));
  set_ipv4_checksum(g, 14);
  Layout l;
  ASSERT_EQ(parse_exact(g, g.size(), &l), ParseStatus::roce);
  EXPECT_EQ(l.l4, 38);
  EXPECT_EQ(l.payload_len, 8);
  EXPECT_FALSE(icrc_verify(g.data(), l));  // the options are covered: the old ICRC no longer holds
}

TEST(Parse, BadIpLength) {
  auto f = make(op::kRc | op::kWriteOnly, 16);
  auto g = f;
  store_be16(&g[16], static_cast<uint16_t>(f.size() - 14 + 1));  // one more than the frame holds
  EXPECT_EQ(parse_exact(g, g.size()), ParseStatus::bad_ip_length);
  auto v6 = make(op::kRc | op::kWriteOnly, 16, true);
  store_be16(&v6[18], static_cast<uint16_t>(v6.size() - 54 + 1));
  EXPECT_EQ(parse_exact(v6, v6.size()), ParseStatus::bad_ip_length);
}

TEST(Parse, BadUdpLength) {
  for (bool v6 : {false, true}) {
    auto f = make(op::kRc | op::kWriteOnly, 16, v6);
    const size_t udp = v6 ? 54 : 34;
    for (int delta : {-1, 1, -8}) {
      auto g = f;
      store_be16(&g[udp + 4], static_cast<uint16_t>(load_be16(&f[udp + 4]) + delta));
      EXPECT_EQ(parse_exact(g, g.size()), ParseStatus::bad_udp_length) << v6 << " " << delta;
    }
  }
}

TEST(Parse, BadPadCount) {
  // An ACK has no payload: any pad count is larger than it.
  auto f = make(op::kRc | op::kAcknowledge, 0);
  f[42 + 1] |= 0x30;
  EXPECT_EQ(parse_exact(f, f.size()), ParseStatus::bad_pad_count);
  // A 4-byte-aligned payload can hold pad 3, so that one is fine, but the payload shrinks.
  auto w = make(op::kRc | op::kWriteMiddle, 4);
  w[43] |= 0x30;
  Layout l;
  ASSERT_EQ(parse_exact(w, w.size(), &l), ParseStatus::roce);
  EXPECT_EQ(l.payload_len, 1);
  EXPECT_EQ(l.pad, 3);
  auto e = make(op::kRc | op::kWriteMiddle, 0);
  e[43] |= 0x10;
  EXPECT_EQ(parse_exact(e, e.size()), ParseStatus::bad_pad_count);
}

TEST(Parse, PayloadLengthMustMatchTheOpcode) {
  // An ACK with 4 stray bytes before the ICRC.
  auto f = make(op::kRc | op::kAcknowledge, 0);
  f.insert(f.end() - 4, {0, 0, 0, 0});
  store_be16(&f[16], static_cast<uint16_t>(load_be16(&f[16]) + 4));
  store_be16(&f[38], static_cast<uint16_t>(load_be16(&f[38]) + 4));
  set_ipv4_checksum(f, 14);
  EXPECT_EQ(parse_exact(f, f.size()), ParseStatus::bad_payload_length);
  // A WRITE whose payload + pad is not a multiple of 4.
  auto w = make(op::kRc | op::kWriteMiddle, 8);
  w.insert(w.end() - 4, {0});
  store_be16(&w[16], static_cast<uint16_t>(load_be16(&w[16]) + 1));
  store_be16(&w[38], static_cast<uint16_t>(load_be16(&w[38]) + 1));
  set_ipv4_checksum(w, 14);
  EXPECT_EQ(parse_exact(w, w.size()), ParseStatus::bad_payload_length);
}

TEST(Parse, BthVersionAndUnknownOpcode) {
  auto f = make(op::kRc | op::kWriteOnly, 8);
  auto g = f;
  g[43] |= 0x01;
  EXPECT_EQ(parse_exact(g, g.size()), ParseStatus::bad_bth_version);
  for (uint8_t opc : {0x15, 0x1f, 0x2c, 0x40, 0x80, 0xff}) {
    auto h = f;
    h[42] = opc;
    EXPECT_EQ(parse_exact(h, h.size()), ParseStatus::unknown_opcode) << int(opc);
  }
}

TEST(Parse, NonRoceFramesAreClassifiedNotRejected) {
  // ARP.
  std::vector<uint8_t> arp(60, 0);
  store_be16(&arp[12], kEtherTypeArp);
  EXPECT_EQ(parse_exact(arp, arp.size()), ParseStatus::not_ip);
  // IPv4 TCP.
  auto tcp = make(op::kRc | op::kAcknowledge, 0);
  tcp[14 + 9] = 6;
  EXPECT_EQ(parse_exact(tcp, tcp.size()), ParseStatus::not_udp);
  // UDP to another port.
  auto dns = make(op::kRc | op::kAcknowledge, 0);
  store_be16(&dns[36], 53);
  EXPECT_EQ(parse_exact(dns, dns.size()), ParseStatus::not_roce);
  // IPv6 TCP.
  auto v6 = make(op::kRc | op::kAcknowledge, 0, true);
  v6[14 + 6] = 6;
  EXPECT_EQ(parse_exact(v6, v6.size()), ParseStatus::not_udp);
  // A version nibble that disagrees with the EtherType.
  auto bad = make(op::kRc | op::kAcknowledge, 0);
  bad[14] = 0x65;
  EXPECT_EQ(parse_exact(bad, bad.size()), ParseStatus::bad_ip_version);
}

TEST(Parse, FragmentsToThePortAreMalformedOthersAreNotRoce) {
  auto f = make(op::kRc | op::kWriteOnly, 8);
  auto first = f;
  store_be16(&first[20], 0x2000);  // MF
  EXPECT_EQ(parse_exact(first, first.size()), ParseStatus::ip_fragment);
  auto later = f;
  store_be16(&later[20], 0x0010);  // offset 128 bytes: no UDP header in it
  EXPECT_EQ(parse_exact(later, later.size()), ParseStatus::not_roce);
}

TEST(Parse, EthernetPaddingAfterTheIcrcIsIgnored) {
  auto f = make(op::kRc | op::kAcknowledge, 0);  // 62 bytes
  f.resize(f.size() + 6, 0);
  Layout l;
  ASSERT_EQ(parse_exact(f, f.size(), &l), ParseStatus::roce);
  EXPECT_EQ(l.end, f.size() - 6);
  EXPECT_TRUE(icrc_verify(f.data(), l));
}

TEST(Parse, VlanTaggedFrames) {
  auto f = make(op::kRc | op::kWriteOnlyImm, 12, false, true);
  Layout l;
  ASSERT_EQ(parse_exact(f, f.size(), &l), ParseStatus::roce);
  EXPECT_TRUE(l.has_vlan);
  EXPECT_EQ(l.vlan_tci, 7);
  EXPECT_EQ(l.l3, 18);
  EXPECT_TRUE(icrc_verify(f.data(), l));
}

namespace {
// `f` with `tags` (TPID, TCI pairs) in place of whatever tags it had after the MACs.
std::vector<uint8_t> retag(const std::vector<uint8_t>& f, std::initializer_list<std::pair<uint16_t, uint16_t>> tags) {
  Layout l;
  EXPECT_EQ(parse_frame(f, l), ParseStatus::roce);
  std::vector<uint8_t> g(f.begin(), f.begin() + 12);
  for (auto [tpid, tci] : tags) {
    g.push_back(static_cast<uint8_t>(tpid >> 8));
    g.push_back(static_cast<uint8_t>(tpid));
    g.push_back(static_cast<uint8_t>(tci >> 8));
    g.push_back(static_cast<uint8_t>(tci));
  }
  g.insert(g.end(), f.begin() + l.l3 - 2, f.end());
  return g;
}

// `f` (IPv6) with an extension header of `type` and `len` bytes (8 or more, a multiple of 8)
// between the IPv6 header and the UDP header.
std::vector<uint8_t> with_ipv6_extension(const std::vector<uint8_t>& f, uint8_t type, size_t len) {
  std::vector<uint8_t> g(f.begin(), f.begin() + 54);
  std::vector<uint8_t> ext(len, 0);
  ext[0] = g[14 + 6];  // next header: what the IPv6 header said (UDP)
  ext[1] = type == 44 ? 0 : static_cast<uint8_t>(len / 8 - 1);
  g[14 + 6] = type;
  g.insert(g.end(), ext.begin(), ext.end());
  g.insert(g.end(), f.begin() + 54, f.end());
  store_be16(&g[18], static_cast<uint16_t>(load_be16(&f[18]) + len));
  return g;
}
}  // namespace

TEST(Parse, QinQAndEveryTagStackIsParsedAndKept) {
  const auto f = make(op::kRc | op::kWriteOnly, 64);
  for (auto tags : {std::vector<std::pair<uint16_t, uint16_t>>{{0x88a8, 0x0064}},
                    std::vector<std::pair<uint16_t, uint16_t>>{{0x88a8, 0x0064}, {0x8100, 0x2007}},
                    std::vector<std::pair<uint16_t, uint16_t>>{{0x9100, 0x0001}, {0x8100, 0x0002}, {0x8100, 0x0003}}}) {
    std::vector<uint8_t> g(f.begin(), f.begin() + 12);
    for (auto [tpid, tci] : tags) {
      g.push_back(static_cast<uint8_t>(tpid >> 8));
      g.push_back(static_cast<uint8_t>(tpid));
      g.push_back(static_cast<uint8_t>(tci >> 8));
      g.push_back(static_cast<uint8_t>(tci));
    }
    g.insert(g.end(), f.begin() + 12, f.end());
    Layout l;
    ASSERT_EQ(parse_exact(g, g.size(), &l), ParseStatus::roce) << tags.size() << " tags";
    EXPECT_TRUE(l.has_vlan);
    EXPECT_EQ(l.vlan_tags, tags.size());
    EXPECT_EQ(l.vlan_tpid, tags[0].first);
    EXPECT_EQ(l.vlan_tci, tags[0].second);
    EXPECT_EQ(l.l3, 14 + 4 * tags.size());
    EXPECT_EQ(l.payload_len, 64);
    EXPECT_TRUE(icrc_verify(g.data(), l)) << "the ICRC does not cover L2: tags change nothing";
    EXPECT_TRUE(is_roce_candidate(g));
    // Cut inside the tag stack: truncated L2, never an over-read.
    for (size_t len = 12; len < 14 + 4 * tags.size(); ++len)
      EXPECT_EQ(parse_exact(g, len), ParseStatus::truncated_l2) << len;
  }
  (void)retag;
}

TEST(Parse, RoceBehindIpv6ExtensionHeadersIsAddressedNotPlaced) {
  const auto f = make(op::kRc | op::kWriteOnly, 32, /*v6=*/true);
  for (auto [type, len] : {std::pair<uint8_t, size_t>{0, 8}, {43, 24}, {60, 16}, {44, 8}}) {
    const auto g = with_ipv6_extension(f, type, len);
    Layout l;
    ASSERT_EQ(parse_exact(g, g.size(), &l), ParseStatus::ipv6_ext_headers) << int(type);
    EXPECT_FALSE(is_malformed(ParseStatus::ipv6_ext_headers));
    EXPECT_EQ(l.l4, 54 + len);
    RoceDestination d;
    ASSERT_TRUE(roce_destination(g.data(), l, &d));
    EXPECT_EQ(d.qpn, 0x123456u);
    EXPECT_EQ(d.ip, IpVersion::v6);
    EXPECT_EQ(std::vector<uint8_t>(d.addr, d.addr + 16), std::vector<uint8_t>(g.begin() + 38, g.begin() + 54));
    EXPECT_TRUE(is_roce_candidate(g));
  }
  // Two headers chained, then UDP to another port: not RoCE.
  auto two = with_ipv6_extension(with_ipv6_extension(f, 60, 8), 0, 8);
  Layout l;
  EXPECT_EQ(parse_exact(two, two.size(), &l), ParseStatus::ipv6_ext_headers);
  store_be16(&two[54 + 16 + 2], 53);
  EXPECT_EQ(parse_exact(two, two.size(), &l), ParseStatus::not_roce);
  // A later fragment has no UDP header; a chain cut short addresses nothing.
  auto frag = with_ipv6_extension(f, 44, 8);
  store_be16(&frag[54 + 2], 0x0010);
  EXPECT_EQ(parse_exact(frag, frag.size()), ParseStatus::not_roce);
  auto cut = with_ipv6_extension(f, 60, 8);
  cut[54 + 1] = 200;  // claims 1608 bytes
  EXPECT_EQ(parse_exact(cut, cut.size()), ParseStatus::not_udp);
}

// The datapath's pre-filter must pass every frame the engine could hold: whenever the parser gets
// to a BTH, the pre-filter said "candidate".
TEST(Parse, PreFilterPassesEveryFrameWithABth) {
  const auto packets = fixtures::load_fixtures();
  std::mt19937 rng(11);
  size_t with_bth = 0;
  for (int i = 0; i < 20000; ++i) {
    auto g = packets[rng() % packets.size()].frame;
    if (rng() % 3 == 0) g = retag(g, {{0x88a8, 1}, {0x8100, 2}});
    const int flips = rng() % 4;
    for (int k = 0; k < flips; ++k)
      g[rng() % std::min<size_t>(g.size(), 80)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    const size_t len = rng() % 4 ? g.size() : rng() % (g.size() + 1);
    Layout l;
    parse_exact(g, len, &l);
    std::vector<uint8_t> cut(g.begin(), g.begin() + len);
    if (l.bth) {
      ++with_bth;
      ASSERT_TRUE(is_roce_candidate(cut)) << "frame " << i;
    }
  }
  EXPECT_GT(with_bth, 1000u);
  std::vector<uint8_t> arp(60, 0);
  store_be16(&arp[12], kEtherTypeArp);
  EXPECT_FALSE(is_roce_candidate(arp));
  auto dns = make(op::kRc | op::kAcknowledge, 0);
  store_be16(&dns[36], 53);
  EXPECT_FALSE(is_roce_candidate(dns));
}

TEST(Parse, RandomCorruptionNeverCrashes) {
  const auto packets = fixtures::load_fixtures();
  std::mt19937 rng(7);
  size_t statuses[kParseStatusCount] = {};
  for (int i = 0; i < 20000; ++i) {
    auto g = packets[rng() % packets.size()].frame;
    const int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; ++k) g[rng() % g.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    const size_t len = rng() % 4 ? g.size() : rng() % (g.size() + 1);
    Layout l;
    const ParseStatus s = parse_exact(g, len, &l);
    ++statuses[static_cast<size_t>(s)];
    if (s == ParseStatus::roce) {
      ASSERT_LE(l.end, len);
      ASSERT_LE(static_cast<size_t>(l.payload) + l.padded_payload_len(), l.icrc);
      (void)icrc_verify(g.data(), l);  // must stay in bounds
    }
  }
  EXPECT_GT(statuses[static_cast<size_t>(ParseStatus::roce)], 0u);
  EXPECT_GT(statuses[static_cast<size_t>(ParseStatus::truncated_l2)] +
                statuses[static_cast<size_t>(ParseStatus::bad_ip_length)],
            0u);
}

TEST(Parse, StatusNamesAndTextsExistForEveryCode) {
  for (size_t i = 0; i < kParseStatusCount; ++i) {
    EXPECT_FALSE(parse_status_name(static_cast<ParseStatus>(i)).empty());
    EXPECT_FALSE(parse_status_text(static_cast<ParseStatus>(i)).empty());
  }
  EXPECT_EQ(parse_status_name(ParseStatus::bad_udp_length), "bad_udp_length");
}
