// Test harness for the RC engine: a buffer pool with reference counts (so leaks and double frees
// show), a job fixture that builds its workers' packets with the wire builder, and the reference
// sum computed by a plain loop.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "../lib/buffer_pool.hpp"
#include "inagg/agg/engine.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::enginetest {

using agg::Dtype;
using agg::PacketRef;

// Buffers for the engine (tests/lib/buffer_pool.hpp): a leak, double free or dead reference fails the test.
struct Pool : testlib::BufferPool {
  Pool() : BufferPool([](const char* what) { ADD_FAILURE() << what; }) {}
};

// A job whose rank r writes from 10.0.<job>.<r+1> to rank r+1's receive QP.
struct JobFixture {
  control::JobSpec spec;
  uint32_t ppm = 0;
  uint32_t seed = 1;
  bool v6 = false;

  JobFixture(uint32_t id, unsigned n, Dtype dtype, uint32_t message_bytes, uint32_t payload_bytes, unsigned window,
             uint32_t start_psn_base = 0xfffff0, bool ipv6 = false)
      : v6(ipv6) {
    spec.id = id;
    spec.dtype = dtype;
    spec.workers = n;
    spec.message_bytes = message_bytes;
    spec.payload_bytes = payload_bytes;
    spec.window = window;
    ppm = message_bytes / payload_bytes;
    for (unsigned r = 0; r < n; ++r) {
      control::ConnectionSpec c;
      c.rank = r;
      c.src_ip = ip_of(id, r);
      c.dst_ip = ip_of(id, (r + 1) % n);
      c.src_qpn = 0x1000 * id + 0x100 + r;
      c.dst_qpn = 0x1000 * id + 0x200 + (r + 1) % n;
      c.start_psn = (start_psn_base + 7 * r) & 0xffffff;  // near the 24-bit wrap, different per rank
      spec.conns.push_back(c);
    }
  }

  util::IpAddr ip_of(uint32_t id, unsigned r) const {
    if (v6) {
      std::array<uint8_t, 16> a{};
      a[0] = 0xfd;
      a[13] = static_cast<uint8_t>(id);
      a[15] = static_cast<uint8_t>(r + 1);
      return util::IpAddr::v6(a);
    }
    return util::IpAddr::v4(0x0a000000u | id << 8 | (r + 1));
  }

  // Gradient bytes of (rank, seq): deterministic, with fp specials now and then.
  std::vector<uint8_t> payload(unsigned rank, uint64_t seq, uint32_t variant = 0) const {
    std::vector<uint8_t> v(spec.payload_bytes);
    std::mt19937 rng(static_cast<uint32_t>(seed * 1000003u + rank * 7919u + seq * 104729u + variant));
    const size_t es = agg::dtype_size(spec.dtype);
    for (size_t i = 0; i < v.size(); i += es) {
      if (spec.dtype == Dtype::fp32) {
        float f = std::uniform_real_distribution<float>(-100, 100)(rng);
        std::memcpy(&v[i], &f, 4);
      } else if (spec.dtype == Dtype::int32) {
        uint32_t x = rng();
        std::memcpy(&v[i], &x, 4);
      } else {
        const float f = std::uniform_real_distribution<float>(-4, 4)(rng);
        const uint16_t h = spec.dtype == Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
        std::memcpy(&v[i], &h, 2);
      }
    }
    return v;
  }

  // The rank-ordered sum of every rank's payload for `seq`, by a plain loop (halves through the
  // scalar reference conversions).
  std::vector<uint8_t> expected_sum(uint64_t seq) const {
    std::vector<std::vector<uint8_t>> in;
    for (unsigned r = 0; r < spec.workers; ++r) in.push_back(payload(r, seq));
    std::vector<uint8_t> out(spec.payload_bytes);
    const size_t es = agg::dtype_size(spec.dtype);
    for (size_t i = 0; i < out.size(); i += es) {
      if (spec.dtype == Dtype::fp32) {
        float acc;
        std::memcpy(&acc, &in[0][i], 4);
        for (unsigned r = 1; r < spec.workers; ++r) {
          float x;
          std::memcpy(&x, &in[r][i], 4);
          acc += x;
        }
        std::memcpy(&out[i], &acc, 4);
      } else if (spec.dtype == Dtype::int32) {
        uint32_t acc = 0;
        for (unsigned r = 0; r < spec.workers; ++r) {
          uint32_t x;
          std::memcpy(&x, &in[r][i], 4);
          acc += x;
        }
        std::memcpy(&out[i], &acc, 4);
      } else {
        auto widen = [&](const uint8_t* p) {
          uint16_t h;
          std::memcpy(&h, p, 2);
          return spec.dtype == Dtype::fp16 ? agg::scalar::fp16_to_fp32(h) : agg::scalar::bf16_to_fp32(h);
        };
        float acc = widen(&in[0][i]);
        for (unsigned r = 1; r < spec.workers; ++r) acc += widen(&in[r][i]);
        const uint16_t h = spec.dtype == Dtype::fp16 ? agg::scalar::fp32_to_fp16(acc) : agg::scalar::fp32_to_bf16(acc);
        std::memcpy(&out[i], &h, 2);
      }
    }
    return out;
  }

  uint32_t psn(unsigned rank, uint64_t seq) const {
    return static_cast<uint32_t>((spec.conns[rank].start_psn + seq) & 0xffffff);
  }

  wire::RoceFrameSpec frame_spec(unsigned rank, uint64_t seq) const {
    const control::ConnectionSpec& c = spec.conns[rank];
    wire::RoceFrameSpec s;
    s.src_mac = {2, 0, 0, 0, 0, static_cast<uint8_t>(rank + 1)};
    s.dst_mac = {2, 0, 0, 0, 0, static_cast<uint8_t>((rank + 1) % spec.workers + 1)};
    s.src_ip = c.src_ip;
    s.dst_ip = c.dst_ip;
    s.tos = wire::kEcnEct0;
    s.dest_qp = c.dst_qpn;
    s.psn = psn(rank, seq);
    const uint32_t k = static_cast<uint32_t>(seq % ppm);
    using namespace wire::op;
    s.opcode = ppm == 1 ? kWriteOnly : k == 0 ? kWriteFirst : k == ppm - 1 ? kWriteLastImm : kWriteMiddle;
    s.ack_req = k == ppm - 1;
    s.reth_va = 0x7f0000000000ull + (seq / ppm) * spec.message_bytes;
    s.reth_rkey = 0x1234;
    s.reth_dma_len = spec.message_bytes;
    s.immdt = static_cast<uint32_t>(seq / ppm);
    return s;
  }

  std::vector<uint8_t> data_frame(unsigned rank, uint64_t seq, uint32_t variant = 0) const {
    return build(frame_spec(rank, seq), payload(rank, seq, variant));
  }

  // The ACK (or NAK) that rank r's receiver sends back to rank r for `seq`.
  std::vector<uint8_t> ack_frame(unsigned rank, uint64_t seq, uint8_t syndrome = wire::aeth::kAckUnlimitedCredits,
                                 uint32_t msn = 0) const {
    const control::ConnectionSpec& c = spec.conns[rank];
    wire::RoceFrameSpec s;
    s.src_ip = c.dst_ip;
    s.dst_ip = c.src_ip;
    s.opcode = wire::op::kRc | wire::op::kAcknowledge;
    s.dest_qp = c.src_qpn;
    s.psn = psn(rank, seq);
    s.aeth_syndrome = syndrome;
    s.aeth_msn = msn;
    return build(s, {});
  }

  static std::vector<uint8_t> build(const wire::RoceFrameSpec& s, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> f(wire::roce_frame_size(s, payload.size()));
    EXPECT_EQ(wire::build_roce_frame(f, s, payload), f.size());
    return f;
  }
};

// A 24-bit PSN difference, sign-extended.
inline int64_t sext24(uint32_t d) {
  d &= 0xffffff;
  return d & 0x800000 ? static_cast<int64_t>(d) - 0x1000000 : d;
}

inline float widen(Dtype dt, const uint8_t* p) {
  if (dt == Dtype::fp32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == Dtype::fp16 ? agg::scalar::fp16_to_fp32(h) : agg::scalar::bf16_to_fp32(h);
}

inline void narrow(Dtype dt, float f, uint8_t* p) {
  if (dt == Dtype::fp32) return std::memcpy(p, &f, 4), void();
  const uint16_t h = dt == Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
  std::memcpy(p, &h, 2);
}

// The rank-ordered sum of some payloads by a plain loop (int32 wraps; halves accumulate in fp32 and
// round once, as the wire carries them).
inline std::vector<uint8_t> plain_sum(Dtype dt, const std::vector<std::vector<uint8_t>>& in) {
  std::vector<uint8_t> out(in[0].size());
  const size_t es = agg::dtype_size(dt);
  for (size_t i = 0; i < out.size(); i += es) {
    if (dt == Dtype::int32) {
      uint32_t acc = 0;
      for (const auto& v : in) {
        uint32_t x;
        std::memcpy(&x, &v[i], 4);
        acc += x;
      }
      std::memcpy(&out[i], &acc, 4);
    } else {
      float acc = widen(dt, &in[0][i]);
      for (size_t k = 1; k < in.size(); ++k) acc += widen(dt, &in[k][i]);
      narrow(dt, acc, &out[i]);
    }
  }
  return out;
}

// A decoded engine output packet.
struct Out {
  std::vector<uint8_t> frame;
  wire::Layout l;
  uint8_t opcode() const { return l.opcode; }
  uint32_t dest_qp() const { return wire::bth_of(frame.data(), l).dest_qp(); }
  uint32_t psn() const { return wire::bth_of(frame.data(), l).psn(); }
  std::vector<uint8_t> payload() const {
    return {frame.begin() + l.payload, frame.begin() + l.payload + l.payload_len};
  }
  bool icrc_ok() const { return wire::icrc_verify(frame.data(), l); }
};

// Takes every TX entry out of `tx` (dropping the engine's reference), decoded.
inline std::vector<Out> drain(Pool& pool, agg::TxList& tx) {
  std::vector<Out> v;
  for (size_t i = 0; i < tx.size(); ++i) {
    Out o;
    o.frame = pool.take(tx[i]);
    EXPECT_NE(wire::parse_frame(o.frame, o.l), wire::ParseStatus::truncated_l2);
    v.push_back(std::move(o));
  }
  tx.clear();
  return v;
}

// A fresh engine per test over a reference-counting pool; TearDown checks nothing leaked.
class EngineTest : public ::testing::Test {
 protected:
  agg::EngineConfig cfg;
  Pool pool;
  std::unique_ptr<agg::Engine> engine;
  agg::TxList tx{1 << 14};
  uint64_t now = 1'000'000;

  void make_engine() { engine = std::make_unique<agg::Engine>(cfg, pool.ops); }
  void SetUp() override { make_engine(); }
  void TearDown() override {
    for (uint32_t id : engine->job_ids()) {
      std::string err;
      EXPECT_TRUE(engine->remove_job(id, &err)) << err;
    }
    EXPECT_EQ(engine->memory_in_use(), 0u);
    EXPECT_EQ(engine->mbufs_reserved(), 0u);
    engine.reset();
    drain(pool, tx);
    EXPECT_EQ(pool.live(), 0u) << "buffers leaked";
  }

  void add(const JobFixture& j) {
    std::string err;
    ASSERT_TRUE(engine->add_job(j.spec, &err)) << err;
  }
  std::vector<Out> send(const std::vector<uint8_t>& frame, uint16_t port = agg::kUnknownPort) {
    PacketRef p = pool.wrap(frame);
    p.port = port;
    last_trusted = engine->process(p, now, tx);
    return drain(pool, tx);
  }
  bool last_trusted = true;  // what process() said of the last frame send() gave it
  std::vector<Out> poll(uint64_t at) {
    now = at;
    engine->poll(now, tx);
    return drain(pool, tx);
  }
  agg::JobInfo info(uint32_t id) {
    agg::JobInfo i{};
    EXPECT_TRUE(engine->job_info(id, &i));
    return i;
  }

  // Every packet of `seq` for every rank arrived: the n outputs carry the sum to their receivers.
  void expect_released(const JobFixture& j, uint64_t seq, const std::vector<Out>& outs) {
    ASSERT_EQ(outs.size(), j.spec.workers) << "seq " << seq;
    const auto sum = j.expected_sum(seq);
    for (unsigned r = 0; r < j.spec.workers; ++r) {
      const Out& o = outs[r];
      ASSERT_NE(o.l.info, nullptr) << "not a RoCEv2 packet";
      EXPECT_EQ(o.dest_qp(), j.spec.conns[r].dst_qpn) << "rank " << r;
      EXPECT_EQ(o.psn(), j.psn(r, seq)) << "rank " << r;
      EXPECT_EQ(o.payload(), sum) << "rank " << r << " seq " << seq;
      EXPECT_TRUE(o.icrc_ok()) << "rank " << r;
      // Headers untouched but for the UDP checksum (0 already) and the ICRC.
      auto orig = j.data_frame(r, seq);
      ASSERT_EQ(orig.size(), o.frame.size());
      // Headers are untouched but for the UDP checksum, which an IPv6 packet may carry.
      for (size_t b = 0; b < o.l.payload; ++b)
        if (b != o.l.l4 + 6u && b != o.l.l4 + 7u) {
          EXPECT_EQ(orig[b], o.frame[b]) << "header byte " << b << " changed";
        }
    }
  }
};

}  // namespace inagg::enginetest
