// Golden vectors from independent sources: a ConnectX-4 Lx capture and scapy-built packets of every
// opcode over IPv4 and IPv6 (scripts/gen-fixtures). The wire layer must decode their fields and
// reproduce their ICRCs exactly.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"

using namespace inagg;
using namespace inagg::wire;

TEST(IcrcGolden, ConnectX4LxCnpCapture) {
  std::vector<util::PcapRecord> recs;
  std::string err;
  ASSERT_TRUE(util::read_pcap(fixtures::fixtures_dir() + "/cnp_connectx4lx.pcap", &recs, &err)) << err;
  ASSERT_EQ(recs.size(), 1u);
  const auto& f = recs[0].data;
  ASSERT_EQ(f.size(), 74u);
  ASSERT_EQ(f[70], 0x82);  // the capture's last four bytes
  ASSERT_EQ(f[73], 0x2a);
  Layout l;
  ASSERT_EQ(parse_frame(f, l), ParseStatus::roce);
  EXPECT_EQ(l.opcode, op::kCnp);
  EXPECT_EQ(opcode_name(l.opcode), "CNP");
  EXPECT_EQ(bth_of(f.data(), l).dest_qp(), 0x000118u);
  EXPECT_TRUE(bth_of(f.data(), l).becn());
  EXPECT_EQ(l.payload_len, 0u);
  EXPECT_EQ(icrc_stored(f.data(), l), 0x2a00fd82u);
  EXPECT_EQ(icrc_compute(f.data(), l), 0x2a00fd82u);
  EXPECT_TRUE(icrc_verify(f.data(), l));
}

TEST(IcrcGolden, EveryScapyFixtureDecodesAndItsIcrcIsReproduced) {
  const auto packets = fixtures::load_fixtures();
  ASSERT_GE(packets.size(), 100u);
  size_t v4 = 0, v6 = 0, vlan = 0, with_payload = 0;
  for (const auto& p : packets) {
    SCOPED_TRACE(p.str("file") + " #" + p.str("index") + " " + p.str("name"));
    const uint8_t* f = p.frame.data();
    Layout l;
    ASSERT_EQ(parse_frame(p.frame, l), ParseStatus::roce);
    EXPECT_EQ(l.opcode, p.num("opcode"));
    EXPECT_EQ(opcode_name(l.opcode), p.str("name"));
    EXPECT_EQ(static_cast<int>(l.ip), static_cast<int>(p.num("ip")));
    EXPECT_EQ(l.has_vlan, p.str("vlan") != "-");
    if (l.has_vlan) {
      EXPECT_EQ(l.vlan_tci & 0xfff, p.num("vlan"));
    }
    const BthView bth = bth_of(f, l);
    EXPECT_EQ(bth.dest_qp(), p.num("dqpn"));
    EXPECT_EQ(bth.psn(), p.num("psn"));
    EXPECT_EQ(bth.pkey(), p.num("pkey"));
    EXPECT_EQ(bth.solicited(), p.num("se") == 1);
    EXPECT_EQ(bth.migreq(), p.num("m") == 1);
    EXPECT_EQ(bth.fecn(), p.num("fecn") == 1);
    EXPECT_EQ(bth.becn(), p.num("becn") == 1);
    EXPECT_EQ(bth.ack_req(), p.num("ackreq") == 1);
    EXPECT_EQ(l.pad, p.num("pad"));
    EXPECT_EQ(l.payload_len, p.num("payload_len"));
    EXPECT_EQ(l.end, p.frame.size());
    if (p.has("reth_va")) {
      ASSERT_NE(l.reth, 0);
      EXPECT_EQ(reth_of(f, l).va(), p.num("reth_va"));
      EXPECT_EQ(reth_of(f, l).rkey(), p.num("reth_rkey"));
      EXPECT_EQ(reth_of(f, l).dma_len(), p.num("reth_dlen"));
    } else {
      EXPECT_EQ(l.reth, 0);
    }
    if (p.has("imm")) {
      ASSERT_NE(l.immdt, 0);
      EXPECT_EQ(immdt_of(f, l), p.num("imm"));
    } else {
      EXPECT_EQ(l.immdt, 0);
    }
    if (p.has("aeth_syndrome")) {
      ASSERT_NE(l.aeth, 0);
      EXPECT_EQ(aeth_of(f, l).syndrome(), p.num("aeth_syndrome"));
      EXPECT_EQ(aeth_of(f, l).msn(), p.num("aeth_msn"));
    }
    const uint32_t expected = static_cast<uint32_t>(p.num("icrc"));
    EXPECT_EQ(icrc_stored(f, l), expected);
    EXPECT_EQ(icrc_compute(f, l), expected);
    // The combine path the engine uses: header CRC and payload CRC computed apart.
    const Crc32Shift shift(l.padded_payload_len());
    EXPECT_EQ(icrc_combine(icrc_header_crc(f, l), icrc_payload_crc(f, l), shift), expected);
    v4 += l.ip == IpVersion::v4;
    v6 += l.ip == IpVersion::v6;
    vlan += l.has_vlan;
    with_payload += l.payload_len > 0;
  }
  EXPECT_GT(v4, 0u);
  EXPECT_GT(v6, 0u);
  EXPECT_GT(vlan, 0u);
  EXPECT_GT(with_payload, 0u);
}

TEST(IcrcGolden, AnyFlippedCoveredBitBreaksTheIcrcButMaskedFieldsDoNot) {
  const auto packets = fixtures::load_fixtures();
  for (const auto& p : packets) {
    if (p.frame.size() > 200) continue;  // small packets keep this exhaustive loop quick
    SCOPED_TRACE(p.str("file") + " #" + p.str("index"));
    std::vector<uint8_t> f = p.frame;
    Layout l;
    ASSERT_EQ(parse_frame(f, l), ParseStatus::roce);
    const uint32_t good = icrc_compute(f.data(), l);
    // Variant fields: rewriting them (as routers and the appliance do) keeps the ICRC.
    std::vector<size_t> masked;
    if (l.ip == IpVersion::v4) {
      masked = {l.l3 + 1u, l.l3 + 8u, l.l3 + 10u, l.l3 + 11u};
    } else {
      masked = {l.l3 + 1u, l.l3 + 2u, l.l3 + 3u, l.l3 + 7u};
    }
    masked.insert(masked.end(), {l.l4 + 6u, l.l4 + 7u, l.bth + 4u});
    for (size_t off : masked) {
      std::vector<uint8_t> g = f;
      g[off] ^= 0x5a;
      EXPECT_EQ(icrc_compute(g.data(), l), good) << "masked byte " << off;
    }
    // Everything else from the IP version to the last pad byte is covered.
    for (size_t off = l.l3 + 1; off < l.icrc; ++off) {
      if (std::find(masked.begin(), masked.end(), off) != masked.end()) continue;
      if (l.ip == IpVersion::v6 && off == l.l3) continue;
      std::vector<uint8_t> g = f;
      g[off] ^= 0x01;
      ASSERT_NE(icrc_compute(g.data(), l), good) << "covered byte " << off;
    }
  }
}
