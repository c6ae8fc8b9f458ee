// Golden vectors from independent sources: a ConnectX-4 Lx capture and scapy-built packets of every
// opcode over IPv4 and IPv6 (scripts/gen-fixtures). The wire layer must decode their fields and
// reproduce their ICRCs exactly.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "fixtures.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"

using namespace inagg;
using namespace inagg::wire;
using inagg::util::IpAddr;
using inagg::util::IpVersion;

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

namespace {

// The ICRC's header part by the definition (docs/protocol.md section 9), with zlib: 8 bytes of
// 0xff, then IP .. end of the extension headers with the variant fields set to ones.
uint32_t reference_header_crc(const uint8_t* f, const Layout& l) {
  std::vector<uint8_t> m(8, 0xff);
  m.insert(m.end(), f + l.l3, f + l.payload);
  uint8_t* ip = m.data() + 8;
  if (l.ip == IpVersion::v4) {
    ip[1] = ip[8] = ip[10] = ip[11] = 0xff;
  } else {
    ip[0] |= 0x0f;
    ip[1] = ip[2] = ip[3] = ip[7] = 0xff;
  }
  ip[l.l4 - l.l3 + 6] = ip[l.l4 - l.l3 + 7] = 0xff;
  ip[l.bth - l.l3 + 4] = 0xff;
  return static_cast<uint32_t>(::crc32(0, m.data(), static_cast<uInt>(m.size())));
}

}  // namespace

// The engine derives each header CRC from the sender's previous header (IcrcHeaderCache): fed the
// scapy fixtures in any order, in one cache, the ICRCs it yields are scapy's.
TEST(IcrcHeaderCache, ReproducesEveryScapyFixturesIcrcInAnyOrder) {
  auto packets = fixtures::load_fixtures();
  ASSERT_GE(packets.size(), 100u);
  std::mt19937 rng(7);
  IcrcHeaderCache cache;
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto& p : packets) {
      SCOPED_TRACE(p.str("file") + " #" + p.str("index") + " " + p.str("name"));
      const uint8_t* f = p.frame.data();
      Layout l;
      ASSERT_EQ(parse_frame(p.frame, l), ParseStatus::roce);
      const Crc32Shift shift(l.padded_payload_len());
      EXPECT_EQ(icrc_combine(cache.header_crc(f, l), icrc_payload_crc(f, l), shift), p.num("icrc"));
      EXPECT_EQ(cache.header_crc(f, l), icrc_header_crc(f, l));  // twice: now from the cache
    }
    std::shuffle(packets.begin(), packets.end(), rng);
  }
}

// A stream of one connection's packets whose headers change the way real ones do (PSN, IP ID, ECN,
// TTL, FECN/BECN, the opcode, extension headers, a VLAN tag), and in any other covered byte as a
// corrupted packet's would: the cached derivation must equal zlib over the masked header each time.
TEST(IcrcHeaderCache, EqualsZlibOverTheMaskedHeaderForEveryChange) {
  std::mt19937 rng(11);
  const std::vector<uint8_t> payload(256, 0x3c);
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      SCOPED_TRACE(std::string(v6 ? "IPv6" : "IPv4") + (vlan ? " VLAN" : ""));
      RoceFrameSpec s;
      s.src_ip = v6 ? IpAddr::v6({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}) : IpAddr::v4(0x0a000001);
      s.dst_ip = v6 ? IpAddr::v6({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}) : IpAddr::v4(0x0a000002);
      if (vlan) s.vlan_tci = 100;
      s.dest_qp = 0x123456;
      s.opcode = op::kRc | op::kWriteMiddle;
      IcrcHeaderCache cache;
      for (int i = 0; i < 4000; ++i) {
        RoceFrameSpec t = s;
        t.psn = static_cast<uint32_t>(rng()) & kPsnMask;
        t.ack_req = rng() & 1;
        switch (rng() % 8) {
          case 0:
            t.ip_id = static_cast<uint16_t>(rng());
            break;
          case 1:
            t.tos = static_cast<uint8_t>(rng());
            t.ttl = static_cast<uint8_t>(rng());
            t.flow_label = rng() & 0xfffff;
            t.fecn = rng() & 1;
            t.becn = rng() & 1;
            break;
          case 2: {
            static constexpr uint8_t kOps[] = {op::kWriteFirst, op::kWriteLast, op::kWriteLastImm, op::kWriteOnly,
                                               op::kWriteOnlyImm};
            t.opcode = op::kRc | kOps[rng() % 5];
            t.reth_va = rng();
            t.immdt = static_cast<uint32_t>(rng());
            break;
          }
          case 3:
            t.src_port = static_cast<uint16_t>(rng());
            break;
          default:
            break;
        }
        std::vector<uint8_t> f(roce_frame_size(t, payload.size()));
        ASSERT_NE(build_roce_frame(f, t, payload), 0u);
        Layout l;
        ASSERT_EQ(parse_frame(f, l), ParseStatus::roce);
        if (rng() % 4 == 0) {  // a corrupted covered or masked byte, anywhere from IP to the payload
          f[l.l3 + rng() % (l.payload - l.l3)] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        const uint32_t want = reference_header_crc(f.data(), l);
        ASSERT_EQ(cache.header_crc(f.data(), l), want) << "packet " << i;
        ASSERT_EQ(cache.header_crc(f.data(), l), want) << "packet " << i << ", again";
      }
    }
  }
}
