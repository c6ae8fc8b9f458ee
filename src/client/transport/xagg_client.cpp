#include "inagg/client/transport/xagg_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "inagg/agg/kernels.hpp"
#include "inagg/wire/xagg.h"

namespace inagg::client {
namespace {

static_assert(std::endian::native == std::endian::little, "the tier's values are little-endian int32 in host memory");

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

XaggClient::~XaggClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool XaggClient::open(const XaggConfig& cfg, std::string* error) {
  cfg_ = cfg;
  if (cfg.values == 0 || cfg.values % XAGG_VALUE_ALIGN || cfg.values > XAGG_MAX_VALUES || cfg.window == 0 ||
      cfg.window > XAGG_MAX_SLOTS / 2 || cfg.job >= XAGG_MAX_JOBS || cfg.total_weight == 0) {
    *error = "XDP tier: values must be a multiple of 4 up to 1024, window 1..32, job 0..255, total weight > 0";
    return false;
  }
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  const int buf = 8 << 20, zero = 0;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);  // only the group joined here
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(cfg.port);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
    *error = "cannot bind UDP port " + std::to_string(cfg.port) + ": " + std::strerror(errno) +
             (errno == EADDRINUSE ? " (another worker of the XDP tier on this host?)" : "");
    return false;
  }
  ip_mreq m{};
  std::memcpy(&m.imr_multiaddr, cfg.group.bytes.data(), 4);
  std::memcpy(&m.imr_interface, cfg.local.bytes.data(), 4);
  if (::setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
    *error =
        "cannot join " + util::ip_text(cfg.group) + " on " + util::ip_text(cfg.local) + ": " + std::strerror(errno);
    return false;
  }
  buf_.resize(sizeof(xagg_hdr) + 4 * XAGG_MAX_VALUES + 64);
  return true;
}

bool XaggClient::send_chunk(const int32_t* v, size_t n, uint32_t seq) {
  const size_t count = (n + XAGG_VALUE_ALIGN - 1) / XAGG_VALUE_ALIGN * XAGG_VALUE_ALIGN;  // the tail padded with zeros
  xagg_hdr h{XAGG_VERSION,
             XAGG_DATA,
             htons(static_cast<uint16_t>(cfg_.job)),
             htons(static_cast<uint16_t>(cfg_.rank)),
             htons(static_cast<uint16_t>(count)),
             htonl(seq),
             htonl(1),
             {}};
  std::memcpy(buf_.data(), &h, sizeof h);
  std::memcpy(buf_.data() + sizeof h, v, 4 * n);
  std::memset(buf_.data() + sizeof h + 4 * n, 0, 4 * (count - n));
  wire::xagg_sign(cfg_.key, buf_.data(), sizeof h + 4 * count);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(cfg_.port);
  std::memcpy(&to.sin_addr, cfg_.head.bytes.data(), 4);
  ++c_.sent;
  return ::sendto(fd_, buf_.data(), sizeof h + 4 * count, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) >= 0;
}

bool XaggClient::allreduce(int32_t* v, size_t n, uint64_t deadline_ns, std::string* error) {
  const size_t per = cfg_.values, chunks = (n + per - 1) / per;
  const uint32_t base = seq_;
  std::vector<uint64_t> sent_at(chunks, 0);
  std::vector<uint8_t> done(chunks, 0);
  size_t lo = 0, next = 0;
  auto len_of = [&](size_t k) { return std::min(per, n - k * per); };
  std::vector<uint8_t> rx(sizeof(xagg_hdr) + 4 * XAGG_MAX_VALUES + 64);
  while (lo < chunks) {
    uint64_t t = now_ns();
    if (t > deadline_ns) {
      *error = "XDP tier: no result for chunk " + std::to_string(base + lo) + " of job " + std::to_string(cfg_.job) +
               " from head " + util::ip_text(cfg_.head) + " in time (" + std::to_string(c_.repeats) +
               " repeats so far; `inagg-xdp stats " + std::to_string(cfg_.job) +
               "` on the head shows what it got: `stale` rising means it holds chunks of an earlier run of this job, so"
               " add the job again on every head (its slots start empty) or use a new job id; `ahead` means the"
               " workers' --xdp-window is larger than the heads' window)";
      return false;
    }
    // A member may send chunk s once it has the results of every chunk up to s - window.
    for (; next < chunks && next < lo + cfg_.window; ++next) {
      send_chunk(v + next * per, len_of(next), base + static_cast<uint32_t>(next));
      sent_at[next] = t;
    }
    uint64_t wake = t + cfg_.timeout_ns;
    for (size_t k = lo; k < next; ++k) {
      if (done[k]) continue;
      if (t - sent_at[k] >= cfg_.timeout_ns) {
        send_chunk(v + k * per, len_of(k), base + static_cast<uint32_t>(k));
        sent_at[k] = t;
        ++c_.repeats;
      }
      wake = std::min(wake, sent_at[k] + cfg_.timeout_ns);
    }
    pollfd p{fd_, POLLIN, 0};
    const timespec ts{0, static_cast<long>(std::min<uint64_t>(wake - std::min(wake, t), 999'999'999))};
    ::ppoll(&p, 1, &ts, nullptr);
    while (true) {
      sockaddr_in from{};
      socklen_t from_len = sizeof from;
      const ssize_t got =
          ::recvfrom(fd_, rx.data(), rx.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_len);
      if (got < 0) break;
      // Only the head's address and the tier's port: no other host can feed us a result. (Not a
      // connect(): a connected socket takes no multicast, its local address being the unicast one.)
      if (from.sin_port != htons(cfg_.port) || std::memcmp(&from.sin_addr, cfg_.head.bytes.data(), 4) != 0) {
        ++c_.wrong_source;
        continue;
      }
      xagg_hdr h;
      if (static_cast<size_t>(got) < sizeof h) {
        ++c_.malformed;
        continue;
      }
      std::memcpy(&h, rx.data(), sizeof h);
      const size_t count = ntohs(h.count);
      if (h.version != XAGG_VERSION || h.type != XAGG_RESULT || sizeof h + 4 * count != static_cast<size_t>(got)) {
        ++c_.malformed;
        continue;
      }
      const size_t k = static_cast<uint32_t>(ntohl(h.seq) - base);
      if (ntohs(h.job) != cfg_.job || k < lo || k >= next || done[k]) {
        ++c_.results_ignored;
        continue;
      }
      // Before the result is believed (its values, its weight, which would end the job): a host
      // that can forge the head's address still cannot make a result without the job's key.
      if (!wire::xagg_verify(cfg_.key, rx.data(), static_cast<size_t>(got))) {
        ++c_.bad_mac;
        continue;
      }
      const size_t len = len_of(k);
      if (count != (len + XAGG_VALUE_ALIGN - 1) / XAGG_VALUE_ALIGN * XAGG_VALUE_ALIGN) {
        ++c_.malformed;
        continue;
      }
      if (ntohl(h.weight) != cfg_.total_weight) {
        *error = "XDP tier: the result of chunk " + std::to_string(base + k) + " sums " +
                 std::to_string(ntohl(h.weight)) + " workers, the job has " + std::to_string(cfg_.total_weight) +
                 " (the heads' members/total_weight do not match the workers)";
        return false;
      }
      std::memcpy(v + k * per, rx.data() + sizeof h, 4 * len);
      done[k] = 1;
      ++c_.results;
    }
    while (lo < chunks && done[lo]) ++lo;
  }
  seq_ = base + static_cast<uint32_t>(chunks);
  c_.chunks += chunks;
  return true;
}

size_t to_fixed(agg::Dtype dtype, const uint8_t* src, size_t count, double scale, uint32_t total_weight, int32_t* out) {
  const double limit = static_cast<double>(INT32_MAX / std::max<uint32_t>(total_weight, 1));
  const size_t es = agg::dtype_size(dtype);
  size_t clipped = 0;
  for (size_t i = 0; i < count; ++i) {
    float f = 0;
    uint16_t h = 0;
    if (dtype == agg::Dtype::fp32) {
      std::memcpy(&f, src + i * es, 4);
    } else {
      std::memcpy(&h, src + i * es, 2);
      f = dtype == agg::Dtype::fp16 ? agg::scalar::fp16_to_fp32(h) : agg::scalar::bf16_to_fp32(h);
    }
    double q = std::nearbyint(static_cast<double>(f) * scale);
    if (std::isnan(q)) {
      q = 0;
      ++clipped;
    } else if (q > limit || q < -limit) {
      q = q > 0 ? limit : -limit;
      ++clipped;
    }
    out[i] = static_cast<int32_t>(q);
  }
  return clipped;
}

void from_fixed(agg::Dtype dtype, const int32_t* in, size_t count, double scale, uint8_t* dst) {
  const size_t es = agg::dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    const float f = static_cast<float>(static_cast<double>(in[i]) / scale);
    if (dtype == agg::Dtype::fp32) {
      std::memcpy(dst + i * es, &f, 4);
    } else {
      const uint16_t h = dtype == agg::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
      std::memcpy(dst + i * es, &h, 2);
    }
  }
}

}  // namespace inagg::client
