// libFuzzer: the RC engine against one registered job, driven by the operations the input encodes:
// honest WRITEs of every rank (in order, retransmitted, lost, out of window), its receivers' ACKs
// and NAKs, corrupted, truncated and re-tagged copies, forged sources, wrong ingress ports, CNPs,
// SENDs, IPv4-mapped IPv6 copies, random frames and timer polls. After every operation, all the
// engine sent is checked against the engine's own invariants (docs/protocol.md):
//  - a WRITE on a registered connection carries exactly the rank-ordered sum of all n ranks for
//    its PSN (never a raw or partial payload) with a valid ICRC, and only once every rank's packet
//    of that PSN went into the engine;
//  - per connection, the first copy of each PSN goes out in PSN order;
//  - an ACK or NAK to a sender comes from its receiver's registered address;
//  - nothing the engine could not place goes out addressed to a registered connection;
// and at the end every buffer is back and the job's memory returned.
//
// Input: 5 header bytes (ranks, dtype, packets per message, window, payload seed), then operations
// of 4 bytes each (op, a, b, c); op 12 also takes c more bytes as a raw frame.
#include <array>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "../lib/buffer_pool.hpp"
#include "check.hpp"
#include "inagg/agg/engine.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"

using namespace inagg;

namespace {

constexpr uint32_t kPayload = 32;
constexpr uint64_t kMaxSeq = 48;  // packets per rank an input can send in order

// Buffers for the engine (tests/lib/buffer_pool.hpp): a leak, double free or dead reference aborts.
struct Pool : testlib::BufferPool {
  Pool() : BufferPool([](const char* what) { FUZZ_CHECK(false, "%s", what); }) {}
};

int64_t sext24(uint32_t d) {
  d &= 0xffffff;
  return d & 0x800000 ? static_cast<int64_t>(d) - 0x1000000 : d;
}

class Run {
 public:
  Run(const uint8_t* h) {
    n_ = 2 + h[0] % 3;
    dtype_ = h[1] % 2 ? util::Dtype::fp32 : util::Dtype::int32;
    ppm_ = 1 + h[2] % 3;
    window_ = 1 + h[3] % 2;
    seed_ = h[4];
    spec_.id = 1;
    spec_.dtype = dtype_;
    spec_.workers = n_;
    spec_.message_bytes = ppm_ * kPayload;
    spec_.payload_bytes = kPayload;
    spec_.window = window_;
    for (unsigned r = 0; r < n_; ++r) {
      control::ConnectionSpec c;
      c.rank = r;
      c.src_ip = util::IpAddr::v4(0x0a000001u + r);
      c.dst_ip = util::IpAddr::v4(0x0a000001u + (r + 1) % n_);
      c.src_qpn = 0x100 + r;
      c.dst_qpn = 0x200 + (r + 1) % n_;
      c.start_psn = (0xfffff0u + 7 * r) & 0xffffff;  // across the 24-bit wrap
      spec_.conns.push_back(c);
    }
    cfg_.abort_timeout_ns = 1'000'000'000;
    cfg_.ecn_threshold_packets = 1;
    agg::BufferOps ops = pool_.ops;
    ops.queue_ctx = this;
    ops.tx_queue_above = [](void* ctx, uint16_t port, uint32_t) {
      return ((static_cast<Run*>(ctx)->now_ >> 14) + port) % 3 == 0;
    };
    engine_ = std::make_unique<agg::Engine>(cfg_, ops);
    std::string err;
    FUZZ_CHECK(engine_->add_job(spec_, &err), "the job was refused: %s", err.c_str());
    presented_.assign(n_, std::vector<bool>(kMaxSeq + 64, false));
    make_payloads();
    next_.assign(n_, 0);
    first_unseen_.assign(n_, 0);
  }

  ~Run() {
    std::string err;
    FUZZ_CHECK(engine_->remove_job(1, &err), "remove: %s", err.c_str());
    FUZZ_CHECK(engine_->memory_in_use() == 0 && engine_->mbufs_reserved() == 0, "job memory not returned");
    engine_.reset();
    drain();
    FUZZ_CHECK(pool_.live() == 0, "%zu buffers leaked", pool_.live());
  }

  void op(uint8_t code, uint8_t a, uint8_t b, uint8_t c, const uint8_t*& extra, const uint8_t* end) {
    const unsigned r = a % n_;
    const uint64_t limit = kMaxSeq + 8;
    now_ += 1000;
    switch (code % 17) {
      case 0:
      case 1: {  // the next packet of an honest sender that honours its window
        if (next_[r] >= kMaxSeq || next_[r] / ppm_ >= first_unseen_[r] / ppm_ + window_) break;
        send_data(r, next_[r]++, r);
        break;
      }
      case 2:  // lost before the appliance
        if (next_[r] < kMaxSeq) ++next_[r];
        break;
      case 3:  // go back N: what its receiver has not acknowledged
        next_[r] = std::min<uint64_t>(next_[r], first_unseen_[r] > b % 8 ? first_unseen_[r] - b % 8 : 0);
        break;
      case 4:  // a retransmission or a network duplicate of anything sent so far
        if (next_[r]) send_data(r, b % next_[r], r);
        break;
      case 5:  // any PSN, window or not
        send_data(r, b % limit, r);
        break;
      case 6: {  // the receiver ACKs (or NAKs) what it got
        const uint64_t got = first_unseen_[r];
        if (got == 0) break;
        send(ack(r, got - 1 - b % std::min<uint64_t>(got, 4), c % 4 == 0), (r + 1) % n_);
        break;
      }
      case 7: {  // an honest frame, corrupted
        auto f = data(r, b % limit);
        // At most 3 bits: CRC-32 catches every such error in a frame this size (Hamming distance 4),
        // so a copy the engine accepts differs from the honest one in masked or L2 bytes only.
        for (int k = 0; k <= c % 3; ++k)
          f[(b * 131 + c * 7 + k * 61) % f.size()] ^= static_cast<uint8_t>(1u << ((c + k) % 8));
        if (still_honest(f, r, b % limit)) presented_[r][b % limit] = true;
        send(f, r);
        break;
      }
      case 8: {  // truncated
        auto f = data(r, b % limit);
        f.resize(c % f.size());
        send(f, r);
        break;
      }
      case 9: {  // forged: another source address, a valid ICRC
        wire::RoceFrameSpec s = spec(r, b % limit);
        s.src_ip = util::IpAddr::v4(0x0a000900u + c);
        if (c % 2) {  // or a forged ACK / NAK to the sender
          s = ack_spec(r, b % limit, c % 4 == 1);
          s.src_ip = util::IpAddr::v4(0x0a000900u + c);
        }
        send(build(s, s.opcode == (wire::op::kRc | wire::op::kAcknowledge) ? std::vector<uint8_t>{} : junk(c)), r);
        break;
      }
      case 10:  // an honest frame from another port
        presented_[r][b % limit] = true;
        send(data(r, b % limit), static_cast<uint16_t>((r + 1 + c % 2) % n_));
        break;
      case 11: {  // CNP to the sender from its receiver (or anyone), or a SEND on the data QP
        wire::RoceFrameSpec s = ack_spec(r, 0, false);
        if ((b & 0x3f) == 0) {
          s = spec(r, b % limit);
          s.opcode = wire::op::kRc | wire::op::kSendOnly;
          send(build(s, junk(c)), r);
          break;
        }
        s.opcode = wire::op::kCnp;
        if (c % 2) s.src_ip = util::IpAddr::v4(0x0a000900u + c);
        send(build(s, {}), (r + 1) % n_);
        break;
      }
      case 12: {  // raw bytes
        const size_t len = std::min<size_t>(c, static_cast<size_t>(end - extra));
        send(std::vector<uint8_t>(extra, extra + len), r);
        extra += len;
        break;
      }
      case 13: {  // an honest frame, re-tagged (802.1ad / QinQ), or addressed IPv4-mapped in IPv6
        wire::RoceFrameSpec s = spec(r, b % limit);
        if (c % 2) {
          const uint8_t tags[8] = {0x88, 0xa8, 0, static_cast<uint8_t>(c), 0x81, 0, 0, static_cast<uint8_t>(b)};
          std::memcpy(s.l2_tags.data(), tags, 8);
          s.l2_tags_len = static_cast<uint8_t>(4 + 4 * (c % 4 == 1));
          presented_[r][b % limit] = true;
        } else {
          std::array<uint8_t, 16> src{}, dst{};
          src[10] = src[11] = dst[10] = dst[11] = 0xff;
          std::memcpy(&src[12], s.src_ip.bytes.data(), 4);
          std::memcpy(&dst[12], s.dst_ip.bytes.data(), 4);
          s.src_ip = util::IpAddr::v6(src);
          s.dst_ip = util::IpAddr::v6(dst);
        }
        send(build(s, payload(r, b % limit)), r);
        break;
      }
      case 14:  // any ACK or NAK from the receiver, released or not (may prove a bypass)
        send(ack(r, b % limit, c % 2), (r + 1) % n_);
        break;
      case 16: {  // the job removed and added again at once: it starts afresh
        std::string err;
        FUZZ_CHECK(engine_->remove_job(1, &err), "remove: %s", err.c_str());
        FUZZ_CHECK(engine_->add_job(spec_, &err), "re-add: %s", err.c_str());
        for (auto& v : presented_) std::fill(v.begin(), v.end(), false);
        std::fill(next_.begin(), next_.end(), 0);
        std::fill(first_unseen_.begin(), first_unseen_.end(), 0);
        break;
      }
      case 15:  // time passes: the engine's timers
        now_ += (static_cast<uint64_t>(b) << 8 | c) * (a % 4 == 0 ? 100'000 : 1'000);
        engine_->poll(now_, tx_);
        drain();
        break;
    }
  }

 private:
  // Every rank's payload for every sequence an input can name, and their sums (rank order,
  // element by element, by a plain loop), made once per input.
  void make_payloads() {
    const uint64_t count = kMaxSeq + 64;
    payloads_.assign(n_, std::vector<std::vector<uint8_t>>(count, std::vector<uint8_t>(kPayload)));
    for (unsigned r = 0; r < n_; ++r) {
      std::mt19937 rng(static_cast<uint32_t>(seed_ * 1000003u + r * 7919u));
      for (auto& v : payloads_[r]) {
        for (size_t i = 0; i < v.size(); i += 4) {
          if (dtype_ == util::Dtype::fp32) {
            const float f = std::uniform_real_distribution<float>(-100, 100)(rng);
            std::memcpy(&v[i], &f, 4);
          } else {
            const uint32_t x = rng();
            std::memcpy(&v[i], &x, 4);
          }
        }
      }
    }
    sums_.assign(count, std::vector<uint8_t>(kPayload));
    for (uint64_t seq = 0; seq < count; ++seq) {
      for (size_t i = 0; i < kPayload; i += 4) {
        if (dtype_ == util::Dtype::fp32) {
          float acc;
          std::memcpy(&acc, &payloads_[0][seq][i], 4);
          for (unsigned r = 1; r < n_; ++r) {
            float x;
            std::memcpy(&x, &payloads_[r][seq][i], 4);
            acc += x;
          }
          std::memcpy(&sums_[seq][i], &acc, 4);
        } else {
          uint32_t acc = 0;
          for (unsigned r = 0; r < n_; ++r) {
            uint32_t x;
            std::memcpy(&x, &payloads_[r][seq][i], 4);
            acc += x;
          }
          std::memcpy(&sums_[seq][i], &acc, 4);
        }
      }
    }
  }
  const std::vector<uint8_t>& payload(unsigned r, uint64_t seq) const { return payloads_[r][seq]; }
  const std::vector<uint8_t>& sum(uint64_t seq) const { return sums_[seq]; }
  uint32_t psn(unsigned r, uint64_t seq) const {
    return static_cast<uint32_t>((spec_.conns[r].start_psn + seq) & 0xffffff);
  }
  wire::RoceFrameSpec spec(unsigned r, uint64_t seq) const {
    const control::ConnectionSpec& c = spec_.conns[r];
    wire::RoceFrameSpec s;
    s.src_mac = {2, 0, 0, 0, 0, static_cast<uint8_t>(r + 1)};
    s.dst_mac = {2, 0, 0, 0, 0, static_cast<uint8_t>((r + 1) % n_ + 1)};
    s.src_ip = c.src_ip;
    s.dst_ip = c.dst_ip;
    s.tos = wire::kEcnEct0;
    s.dest_qp = c.dst_qpn;
    s.psn = psn(r, seq);
    const uint32_t k = static_cast<uint32_t>(seq % ppm_);
    using namespace wire::op;
    s.opcode = ppm_ == 1 ? kWriteOnly : k == 0 ? kWriteFirst : k + 1 == ppm_ ? kWriteLastImm : kWriteMiddle;
    s.reth_dma_len = spec_.message_bytes;
    return s;
  }
  wire::RoceFrameSpec ack_spec(unsigned r, uint64_t seq, bool nak) const {
    const control::ConnectionSpec& c = spec_.conns[r];
    wire::RoceFrameSpec s;
    s.src_ip = c.dst_ip;
    s.dst_ip = c.src_ip;
    s.opcode = wire::op::kRc | wire::op::kAcknowledge;
    s.dest_qp = c.src_qpn;
    s.psn = psn(r, seq);
    s.aeth_syndrome = nak ? wire::aeth::kNakPsnSequenceError : wire::aeth::kAckUnlimitedCredits;
    return s;
  }
  static std::vector<uint8_t> build(const wire::RoceFrameSpec& s, const std::vector<uint8_t>& pl) {
    std::vector<uint8_t> f(wire::roce_frame_size(s, pl.size()));
    FUZZ_CHECK(wire::build_roce_frame(f, s, pl) == f.size(), "the builder refused a frame");
    return f;
  }
  static std::vector<uint8_t> junk(uint8_t c) { return std::vector<uint8_t>(kPayload, c); }
  std::vector<uint8_t> data(unsigned r, uint64_t seq) const { return build(spec(r, seq), payload(r, seq)); }
  std::vector<uint8_t> ack(unsigned r, uint64_t seq, bool nak) const { return build(ack_spec(r, seq, nak), {}); }

  // A corrupted copy the engine may accept as (r, seq): it parses, its ICRC holds and it names the
  // honest packet's addresses, QPN and PSN. Its payload is then the honest one (see case 7).
  bool still_honest(const std::vector<uint8_t>& f, unsigned r, uint64_t seq) const {
    wire::Layout l;
    if (wire::parse_frame(f, l) != wire::ParseStatus::roce || !wire::icrc_verify(f.data(), l)) return false;
    if (l.ip != util::IpVersion::v4) return false;
    const control::ConnectionSpec& c = spec_.conns[r];
    return std::memcmp(f.data() + l.l3 + 12, c.src_ip.bytes.data(), 4) == 0 &&
           std::memcmp(f.data() + l.l3 + 16, c.dst_ip.bytes.data(), 4) == 0 &&
           wire::bth_of(f.data(), l).dest_qp() == c.dst_qpn && wire::bth_of(f.data(), l).psn() == psn(r, seq);
  }

  void send_data(unsigned r, uint64_t seq, uint16_t port) {
    presented_[r][seq] = true;
    send(data(r, seq), port);
  }
  void send(const std::vector<uint8_t>& f, uint16_t port) {
    engine_->process(pool_.wrap(f, port), now_, tx_);
    ++processed_;
    FUZZ_CHECK(engine_->counters().rx_packets == processed_, "rx_packets %llu != %llu",
               static_cast<unsigned long long>(engine_->counters().rx_packets),
               static_cast<unsigned long long>(processed_));
    drain();
  }

  // Checks every packet the engine sent, then "sends" it.
  void drain() {
    for (size_t i = 0; i < tx_.size(); ++i) check(pool_.take(tx_[i]));
    tx_.clear();
  }

  void check(const std::vector<uint8_t>& f) {
    wire::Layout l;
    const wire::ParseStatus st = wire::parse_frame(f, l);
    wire::RoceDestination d;
    if (!wire::roce_destination(f.data(), l, &d)) return;  // not RoCEv2 at all: bridged as it is
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool mapped = d.ip == util::IpVersion::v6 && std::memcmp(d.addr, kMapped, 12) == 0;
    for (unsigned r = 0; r < n_; ++r) {
      const control::ConnectionSpec& c = spec_.conns[r];
      auto is = [&](const util::IpAddr& ip, uint32_t qpn) {
        if (d.qpn != qpn) return false;
        if (mapped) return std::memcmp(d.addr + 12, ip.bytes.data(), 4) == 0;
        return d.ip == util::IpVersion::v4 && std::memcmp(d.addr, ip.bytes.data(), 4) == 0;
      };
      const bool data_conn = is(c.dst_ip, c.dst_qpn), ack_conn = is(c.src_ip, c.src_qpn);
      if (!data_conn && !ack_conn) continue;
      FUZZ_CHECK(st == wire::ParseStatus::roce && !mapped,
                 "a frame the engine cannot place went out on rank %u's %s connection (%s)", r,
                 data_conn ? "data" : "ACK", wire::parse_status_name(st).data());
      if (l.opcode == wire::op::kCnp) return;
      FUZZ_CHECK(wire::icrc_verify(f.data(), l), "a bad ICRC went out on rank %u's connection", r);
      if (ack_conn) {
        FUZZ_CHECK(l.opcode == (wire::op::kRc | wire::op::kAcknowledge), "opcode 0x%02x went to rank %u's sender",
                   l.opcode, r);
        FUZZ_CHECK(std::memcmp(f.data() + l.l3 + 12, c.dst_ip.bytes.data(), 4) == 0,
                   "an ACK/NAK not from rank %u's receiver went out", r);
        return;
      }
      FUZZ_CHECK(wire::is_rdma_write(l.opcode), "opcode 0x%02x went out on rank %u's data connection", l.opcode, r);
      uint64_t& first = first_unseen_[r];
      const int64_t s = static_cast<int64_t>(first) + sext24(wire::bth_of(f.data(), l).psn() - psn(r, first));
      FUZZ_CHECK(s >= 0 && s < static_cast<int64_t>(presented_[r].size()),
                 "rank %u: a WRITE for sequence %lld went out", r, static_cast<long long>(s));
      const uint64_t seq = static_cast<uint64_t>(s);
      for (unsigned k = 0; k < n_; ++k)
        FUZZ_CHECK(presented_[k][seq], "rank %u: the sum of sequence %llu went out before rank %u's packet came in", r,
                   static_cast<unsigned long long>(seq), k);
      FUZZ_CHECK(l.payload_len == kPayload && std::memcmp(f.data() + l.payload, sum(seq).data(), kPayload) == 0,
                 "rank %u: sequence %llu went out without its full sum (raw or partial)", r,
                 static_cast<unsigned long long>(seq));
      FUZZ_CHECK(seq <= first, "rank %u: sequence %llu went out before %llu (PSN order)", r,
                 static_cast<unsigned long long>(seq), static_cast<unsigned long long>(first));
      if (seq == first) ++first;
      return;
    }
  }

  unsigned n_ = 2, ppm_ = 1, window_ = 1;
  util::Dtype dtype_ = util::Dtype::int32;
  uint8_t seed_ = 0;
  control::JobSpec spec_;
  agg::EngineConfig cfg_;
  Pool pool_;
  std::unique_ptr<agg::Engine> engine_;
  agg::TxList tx_{4096};
  std::vector<std::vector<bool>> presented_;
  std::vector<std::vector<std::vector<uint8_t>>> payloads_;  // [rank][seq]
  std::vector<std::vector<uint8_t>> sums_;                   // [seq]
  std::vector<uint64_t> next_, first_unseen_;
  uint64_t now_ = 1'000'000, processed_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  Run run(data);
  const uint8_t* p = data + 5;
  const uint8_t* end = data + size;
  for (int ops = 0; end - p >= 4 && ops < 2000; ++ops) {
    const uint8_t code = p[0], a = p[1], b = p[2], c = p[3];
    p += 4;
    run.op(code, a, b, c, p, end);
  }
  return 0;
}
