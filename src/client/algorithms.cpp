#include "inagg/client/algorithms.hpp"

#include <algorithm>
#include <cstring>

#include "inagg/agg/kernels.hpp"
#include "inagg/client/clock.hpp"

namespace inagg::client {

uint64_t Geometry::messages_of(uint64_t bytes) const {
  return std::max<uint64_t>(1, (bytes + data_per_message() - 1) / data_per_message());
}

uint64_t Geometry::padded(uint64_t bytes) const {
  return std::max<uint64_t>(message, (bytes + message - 1) / message * message);
}

uint64_t Geometry::chunk_of(uint64_t bytes) const {
  const size_t es = element();
  return ((bytes / es + workers - 1) / workers) * es;
}

// ring: the buffer in n chunks of whole elements, each padded to whole messages; every step has
// its own staging area in the receive region, so a step never overwrites one not yet consumed,
// at a stride fixed for the whole run (ring_stride). ina/auto: whole messages, auto's commit
// message after them.
uint64_t Geometry::send_bytes(uint64_t max_bytes) const {
  if (mode == Mode::ring) return padded(chunk_of(max_bytes)) * workers;
  if (rotated()) return Rotation{workers, chunk}.stream_messages(messages_of(chunk_of(max_bytes))) * message;
  return (messages_of(max_bytes) + (committed() ? 1 : 0)) * message;
}

uint64_t Geometry::receive_bytes(uint64_t max_bytes) const {
  if (mode == Mode::ring) return 2ull * (workers - 1) * ring_stride(max_bytes);
  if (rotated()) return 2 * send_bytes(max_bytes);  // two halves, as ina's
  // ina: two halves, one per allreduce parity (ina_allreduce).
  if (mode == Mode::ina) return 2 * messages_of(max_bytes) * message;
  return (messages_of(max_bytes) + (committed() ? 1 : 0)) * message;
}

uint64_t Geometry::ring_stride(uint64_t max_bytes) const { return padded(chunk_of(max_bytes)); }

uint64_t Geometry::data_bytes(uint64_t max_bytes) const {
  return (messages_of(max_bytes) + (committed() ? 1 : 0)) * message + padded(chunk_of(max_bytes)) * workers;
}

Outcome RingExchange::exchange(uint64_t src_offset, uint64_t len, uint64_t dst_offset, uint64_t expect) {
  expected_ += expect;
  for (uint64_t m = 0; m * message_ < len; ++m)
    t_.post_write(src_offset + m * message_, message_, dst_offset + m * message_, static_cast<uint32_t>(m));
  const uint64_t start = now_ns();
  while (!(t_.writes_done() && t_.messages_received() >= expected_)) {
    const uint64_t t = now_ns();
    if (!t_.error().empty()) return {t_.error(), FallOverCause::retry_exceeded};
    if (t > deadline_ns_) return {"timed out", FallOverCause::timed_out};
    if (stall_ns_ && t - std::max(start, t_.last_arrival_ns()) > stall_ns_)
      return {"nothing arrived for " + std::to_string(stall_ns_ / 1'000'000) + " ms (the predecessor stopped sending)",
              FallOverCause::predecessor_silent};
    t_.poll(1);
  }
  return {};
}

namespace {

// A small whole number as one element of the job's dtype (exact in each of them up to 64).
void element_of(util::Dtype dtype, unsigned v, uint8_t* out) {
  const float f = static_cast<float>(v);
  const int32_t i = static_cast<int32_t>(v);
  const uint16_t h = dtype == util::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
  if (dtype == util::Dtype::fp32)
    std::memcpy(out, &f, 4);
  else if (dtype == util::Dtype::int32)
    std::memcpy(out, &i, 4);
  else
    std::memcpy(out, &h, 2);
}

// The tally as it leaves every rank (1) and as the appliance's sum makes it (workers; a
// reduce-scatter's: the n - 1 ranks that are not the shard's owner).
struct Tally {
  uint8_t one[4] = {}, summed[4] = {};
  explicit Tally(const Geometry& g, unsigned count = 0) {
    element_of(g.dtype, 1, one);
    element_of(g.dtype, count ? count : g.workers, summed);
  }
};

// One message as lay_out makes it, of `n` bytes of data (the rest zeros) and the tally `tally`.
void lay_message(const Geometry& g, const uint8_t* tally, const uint8_t* data, uint64_t n, uint8_t* msg) {
  const uint64_t per = g.data_per_message();
  const size_t es = g.element();
  std::memcpy(msg, tally, es);
  if (n) std::memcpy(msg + es, data, n);
  std::memset(msg + es + n, 0, per - n);
  std::memcpy(msg + es + per, tally, es);
}

// A message: the tally, data_per_message() bytes of data, the tally again. The last element tells
// whether the appliance summed the message's last packet, so a message that is only partly
// summed (the appliance restarted within it) is seen; the first element, whether the predecessor's
// next allreduce, forwarded unsummed, has begun to overwrite it (its packets land in order).
void lay_out(const Geometry& g, const Tally& t, const uint8_t* data, uint64_t bytes, uint64_t msgs, uint8_t* send) {
  const uint64_t per = g.data_per_message();
  for (uint64_t m = 0; m < msgs; ++m) {
    const uint64_t n = m * per < bytes ? std::min(per, bytes - m * per) : 0;
    lay_message(g, t.one, data + m * per, n, send + m * g.message);
  }
}

Outcome unsummed(const Geometry& g, const Tally& t, uint64_t m, const uint8_t* got, const char* where) {
  uint8_t zero[4] = {};
  const std::string seen = std::memcmp(got, t.one, g.element()) == 0  ? "1"
                           : std::memcmp(got, zero, g.element()) == 0 ? "0"
                                                                      : "garbled";
  unsigned want = 0;
  while (want < 64) {
    uint8_t e[4] = {};
    element_of(g.dtype, ++want, e);
    if (std::memcmp(e, t.summed, g.element()) == 0) break;
  }
  return {"message " + std::to_string(m) + " arrived without the appliance's sum (" + where + " tally " + seen +
              ", want " + std::to_string(want) +
              "): the appliance did not sum it (it does not know the job: restarted, the job removed, or a path "
              "around it)",
          FallOverCause::tally_wrong};
}

// ok() when message m arrived with the appliance's sum in both tallies.
Outcome tally_of(const Geometry& g, const Tally& t, const uint8_t* recv, uint64_t m) {
  const uint8_t* msg = recv + m * g.message;
  const uint8_t* tail = msg + g.element() + g.data_per_message();
  if (std::memcmp(tail, t.summed, g.element()) != 0) return unsummed(g, t, m, tail, "last");
  if (std::memcmp(msg, t.summed, g.element()) != 0) return unsummed(g, t, m, msg, "first");
  return {};
}

// The half of the receive region this collective uses (consecutive ones alternate, as
// ina_allreduce's), or an error when `msgs` messages do not fit in it.
Outcome receive_half(RingExchange& x, const Geometry& g, uint64_t msgs, const char* what, uint64_t* base) {
  const uint64_t half = x.transport().receive_region().size() / 2;
  if (msgs * g.message > half)
    return {std::string(what) + " needs " + std::to_string(2 * msgs * g.message) +
                " bytes of receive region, which has " + std::to_string(2 * half),
            FallOverCause::retry_exceeded};
  if (msgs * g.message > x.transport().send_region().size())
    return {std::string(what) + " needs " + std::to_string(msgs * g.message) + " bytes of send region, which has " +
                std::to_string(x.transport().send_region().size()),
            FallOverCause::retry_exceeded};
  *base = x.next_parity() ? half : 0;
  return {};
}

// Copies the data of messages that passed tally_of to out. A transport that places data while we
// copy (a NIC) may meanwhile overwrite a message with the predecessor's next allreduce: its first
// tally, read again after the copy, tells. On failure out holds part of the sums.
Outcome copy_out(const Geometry& g, const Tally& t, const uint8_t* recv, uint64_t bytes, uint8_t* out) {
  const uint64_t per = g.data_per_message();
  for (uint64_t m = 0; m * per < bytes; ++m) {
    const uint8_t* msg = recv + m * g.message;
    std::memcpy(out + m * per, msg + g.element(), std::min(per, bytes - m * per));
    if (std::memcmp(msg, t.summed, g.element()) != 0) return unsummed(g, t, m, msg, "first");
  }
  return {};
}

}  // namespace

// Measured cost of the tally: docs/protocol.md, "The tally". Consecutive allreduces land in the
// two halves of the receive region in turn. An appliance that forgot the job forwards the
// predecessor's next allreduce unsummed the moment it is sent, while this rank may still be
// copying out the last one; the bytes of a write land in no set order, so no tally read after the
// copy can prove that none of them was overwritten. In the other half they overwrite nothing: the
// predecessor can come back to this half only after an allreduce that this rank's next one
// completed (the appliance's sum needs every rank's part), i.e. after this copy.
Outcome ina_allreduce(RingExchange& x, const Geometry& g, const uint8_t* in, uint8_t* out, uint64_t bytes) {
  const Tally t(g);
  const uint64_t msgs = g.messages_of(bytes);
  const uint64_t half = x.transport().receive_region().size() / 2;
  if (msgs * g.message > half)
    return {"an allreduce of " + std::to_string(bytes) + " bytes needs " + std::to_string(2 * msgs * g.message) +
                " bytes of receive region, which has " + std::to_string(2 * half) + " (Geometry::receive_bytes)",
            FallOverCause::retry_exceeded};
  const uint64_t base = x.next_parity() ? half : 0;
  const uint8_t* recv = x.transport().receive_region().data() + base;
  lay_out(g, t, in, bytes, msgs, x.transport().send_region().data());
  if (Outcome r = x.exchange(0, msgs * g.message, base, msgs); !r.ok()) return r;
  for (uint64_t m = 0; m < msgs; ++m)
    if (Outcome r = tally_of(g, t, recv, m); !r.ok()) return r;
  return copy_out(g, t, recv, bytes, out);
}

Outcome ring_allreduce(RingExchange& x, const Geometry& g, unsigned rank, uint8_t* data, uint64_t bytes,
                       uint64_t stride) {
  const unsigned n = g.workers;
  const uint64_t chunk = g.chunk_of(bytes), pc = g.padded(chunk), msgs = pc / g.message;
  uint8_t* send = x.transport().send_region().data();
  const uint8_t* recv = x.transport().receive_region().data();
  for (unsigned step = 0; step < 2 * (n - 1); ++step) {
    const bool gather = step >= n - 1;
    const unsigned j = gather ? step - (n - 1) : step;
    const unsigned send_c = (rank + (gather ? 1 : 0) + n - j) % n, recv_c = (rank + (gather ? 0 : n - 1) + n - j) % n;
    std::memset(send, 0, pc);
    std::memcpy(send, data + send_c * chunk, chunk);
    if (Outcome r = x.exchange(0, pc, step * stride, msgs); !r.ok()) return r;
    uint8_t* dst = data + recv_c * chunk;
    const uint8_t* got = recv + step * stride;
    if (gather) {
      std::memcpy(dst, got, chunk);
    } else {
      // acc = received (ranks c..r-1) + ours (r): rank order along the ring.
      const uint8_t* srcs[2] = {got, dst};
      agg::sum_ranked(g.dtype, dst, srcs, 2, chunk);
    }
  }
  return {};
}

Outcome tallied_allreduce(RingExchange& x, const Geometry& g, const uint8_t* data, uint64_t bytes, uint8_t* held,
                          bool* have_data) {
  const Tally t(g);
  const uint64_t msgs = g.messages_of(bytes), m_bytes = g.message;
  const uint8_t* recv = x.transport().receive_region().data();
  *have_data = false;
  lay_out(g, t, data, bytes, msgs + 1, x.transport().send_region().data());  // the commit: zeros and the tally
  if (Outcome r = x.exchange(0, msgs * m_bytes, 0, msgs); !r.ok()) return r;
  for (uint64_t m = 0; m < msgs; ++m)
    if (Outcome r = tally_of(g, t, recv, m); !r.ok()) return r;
  if (Outcome r = copy_out(g, t, recv, bytes, held); !r.ok()) return r;
  *have_data = true;
  if (Outcome r = x.exchange(msgs * m_bytes, m_bytes, msgs * m_bytes, 1); !r.ok()) return r;
  return tally_of(g, t, recv, msgs);
}

// Messages of a shard's stream position: message m of the shard is chunk m / c, message m % c
// of it, written in round m / c at position t: stream message ((round (n - 1) + t) c + m % c).
namespace {
uint64_t stream_at(const Rotation& rot, uint64_t m, unsigned t) {
  return ((m / rot.chunk) * (rot.workers - 1) + t) * rot.chunk + m % rot.chunk;
}
}  // namespace

Outcome ina_reduce_scatter(RingExchange& x, const Geometry& g, const Rotation& rot, unsigned rank, const uint8_t* in,
                           uint8_t* out, uint64_t shard_bytes, uint64_t stride) {
  const unsigned n = g.workers;
  if (stride == 0) stride = shard_bytes;
  const Tally t(g, n - 1);
  const uint64_t per = g.data_per_message(), ms = g.messages_of(shard_bytes), msgs = rot.stream_messages(ms);
  uint64_t base = 0;
  if (Outcome r = receive_half(x, g, msgs, "a reduce-scatter", &base); !r.ok()) return r;
  uint8_t* send = x.transport().send_region().data();
  // Every position of every round, padded with zero messages to whole chunks.
  for (uint64_t m = 0; m < msgs / (n - 1); ++m)
    for (unsigned pos = 0; pos + 1 < n; ++pos) {
      const unsigned s = rot.shard_at(true, rank, pos);
      const uint64_t len = m * per < shard_bytes ? std::min(per, shard_bytes - m * per) : 0;
      lay_message(g, t.one, in + s * stride + m * per, len, send + stream_at(rot, m, pos) * g.message);
    }
  if (Outcome r = x.exchange(0, msgs * g.message, base, msgs); !r.ok()) return r;
  // The predecessor's last position of each round carries this rank's shard, summed.
  const uint8_t* recv = x.transport().receive_region().data() + base;
  for (uint64_t m = 0; m < ms; ++m) {
    const uint64_t at = stream_at(rot, m, n - 2);
    if (Outcome r = tally_of(g, t, recv, at); !r.ok()) return r;
    const uint64_t len = std::min(per, shard_bytes - m * per);
    const uint8_t* srcs[2] = {recv + at * g.message + g.element(), in + rank * stride + m * per};
    agg::sum_ranked(g.dtype, out + m * per, srcs, 2, len);
    if (std::memcmp(recv + at * g.message, t.summed, g.element()) != 0)  // overwritten while we added
      return unsummed(g, t, at, recv + at * g.message, "first");
  }
  return {};
}

Outcome ina_all_gather(RingExchange& x, const Geometry& g, const Rotation& rot, unsigned rank, const uint8_t* in,
                       uint8_t* out, uint64_t shard_bytes, uint64_t stride) {
  const unsigned n = g.workers;
  if (stride == 0) stride = shard_bytes;
  const Tally t(g, 1);
  const uint8_t zero[4] = {};
  const uint64_t per = g.data_per_message(), ms = g.messages_of(shard_bytes), msgs = rot.stream_messages(ms);
  uint64_t base = 0;
  if (Outcome r = receive_half(x, g, msgs, "an all-gather", &base); !r.ok()) return r;
  uint8_t* send = x.transport().send_region().data();
  for (uint64_t m = 0; m < msgs / (n - 1); ++m)
    for (unsigned pos = 0; pos + 1 < n; ++pos) {
      const uint64_t len = pos == 0 && m * per < shard_bytes ? std::min(per, shard_bytes - m * per) : 0;
      lay_message(g, pos == 0 ? t.one : zero, in + m * per, len, send + stream_at(rot, m, pos) * g.message);
    }
  if (Outcome r = x.exchange(0, msgs * g.message, base, msgs); !r.ok()) return r;
  const uint8_t* recv = x.transport().receive_region().data() + base;
  const unsigned pred = (rank + n - 1) % n;
  std::memcpy(out + rank * stride, in, shard_bytes);
  for (unsigned pos = 0; pos + 1 < n; ++pos) {
    const unsigned s = rot.shard_at(false, pred, pos);
    for (uint64_t m = 0; m < ms; ++m) {
      const uint64_t at = stream_at(rot, m, pos);
      if (Outcome r = tally_of(g, t, recv, at); !r.ok()) return r;
      std::memcpy(out + s * stride + m * per, recv + at * g.message + g.element(),
                  std::min(per, shard_bytes - m * per));
      if (std::memcmp(recv + at * g.message, t.summed, g.element()) != 0)
        return unsummed(g, t, at, recv + at * g.message, "first");
    }
  }
  return {};
}

bool TierAllreduce::run(uint8_t* data, uint64_t bytes, uint64_t deadline_ns, std::string* why) {
  const size_t count = bytes / util::dtype_size(dtype_);
  if (dtype_ == util::Dtype::int32)
    std::memcpy(fixed_.data(), data, bytes);
  else
    saturated_ += to_fixed(dtype_, data, count, scale_, workers_, fixed_.data());
  if (!tier_.allreduce(fixed_.data(), count, deadline_ns, why)) return false;
  if (dtype_ == util::Dtype::int32)
    std::memcpy(data, fixed_.data(), bytes);
  else
    from_fixed(dtype_, fixed_.data(), count, scale_, data);
  return true;
}

}  // namespace inagg::client
