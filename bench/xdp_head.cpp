// bench_xdp_head: the two programs bench/xdp.sh runs around a head.
//
//   gen        n emulated workers in one process, closed loop like real members: chunk s of all
//              n ranks goes out once chunk s - window has its result; a chunk without a result
//              after --timeout-ms is sent again. Prints what it sent and how many chunks finished.
//   userspace  the same head logic as xagg_head.bpf.c, in a process on a kernel UDP socket
//              (recvmmsg / sendmmsg, the project's SIMD int32 adds, the packets' MAC checked and
//              made as the XDP head does): what a head costs without XDP. Prints its packets and
//              the CPU seconds it used.
//
// Both sign what they send with the job's key (--key-file, as inagg-xdp key makes it).
//
// Both run --seconds S and then print one line of key=value.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "inagg/agg/kernels.hpp"
#include "inagg/wire/xagg_mac.hpp"
#include "inagg/xdp/xagg_shared.h"

namespace po = boost::program_options;
using namespace inagg;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string head = "10.78.0.2", group = "239.78.0.1";
  unsigned workers = 4, values = 256, window = 16, job = 1, jobs = 1, port = XAGG_UDP_PORT;
  double seconds = 5, timeout_ms = 5;
  double rate = 0;  // gen: packets per second, open loop; 0 = closed loop
  wire::XaggKey key;
};

sockaddr_in addr_of(const std::string& ip, unsigned port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

int udp_socket(unsigned port, const std::string& join) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // Large buffers past net.core.rmem_max (root may), so a head descheduled for a moment does not
  // drop at its socket; no multicast loopback of the head's own results.
  const int buf = 16 << 20, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &zero, sizeof zero);
  sockaddr_in any = addr_of("0.0.0.0", port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
    std::perror("bind");
    std::exit(1);
  }
  if (!join.empty()) {
    ip_mreq m{};
    inet_pton(AF_INET, join.c_str(), &m.imr_multiaddr);
    m.imr_interface.s_addr = htonl(INADDR_ANY);
    if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) std::perror("IP_ADD_MEMBERSHIP");
  }
  return fd;
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

constexpr unsigned kBatch = 64;

int run_gen(const Options& o) {
  const int fd = udp_socket(o.port, o.rate > 0 ? "" : o.group);  // open loop: results are not read
  const sockaddr_in head = addr_of(o.head, o.port);
  const size_t len = sizeof(xagg_hdr) + 4 * o.values;
  // UDP GSO: the packets queued for one send sit back to back in one buffer and leave in one
  // sendto, which the stack cuts into len-byte datagrams: the generator's cost per packet stays
  // well below the head's, so the head gets a load worth measuring.
  const int seg = static_cast<int>(len);
  if (::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) std::perror("UDP_SEGMENT");
  const unsigned max_batch = std::min<unsigned>(kBatch, static_cast<unsigned>(60000 / len));
  std::vector<uint8_t> batch(max_batch * len);
  std::vector<uint8_t> values(4 * o.values);
  for (size_t v = 0; v < o.values; ++v) {
    const int32_t x = static_cast<int32_t>(v * 7 + 1);
    std::memcpy(values.data() + 4 * v, &x, 4);
  }
  unsigned queued = 0;
  uint64_t sent = 0, repeats = 0, results = 0;
  auto flush = [&] {
    while (queued &&
           ::sendto(fd, batch.data(), queued * len, 0, reinterpret_cast<const sockaddr*>(&head), sizeof head) < 0) {
      if (errno != EAGAIN && errno != ENOBUFS) {
        std::fprintf(stderr, "bench_xdp_head gen: sendto: %s (packets of %zu bytes: is the MTU large enough?)\n",
                     std::strerror(errno), len + 28);
        std::exit(1);
      }
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1);
    }
    sent += queued;
    queued = 0;
  };
  auto queue_chunk = [&](unsigned job, uint32_t seq) {
    for (unsigned r = 0; r < o.workers; ++r) {
      uint8_t* p = batch.data() + queued * len;
      const xagg_hdr h{XAGG_VERSION,
                       XAGG_DATA,
                       htons(static_cast<uint16_t>(job)),
                       htons(static_cast<uint16_t>(r)),
                       htons(static_cast<uint16_t>(o.values)),
                       htonl(seq),
                       htonl(1),
                       {}};
      std::memcpy(p, &h, sizeof h);
      std::memcpy(p + sizeof h, values.data(), values.size());
      wire::xagg_sign(o.key, p, len);
      if (++queued == max_batch) flush();
    }
  };
  if (o.rate > 0) {
    // Open loop: chunk after chunk, all n ranks each, job after job, paced to o.rate packets per
    // second in bursts of one chunk; nothing waits for results (the head must keep up: a lost
    // packet leaves its slot unfinished, which the head's counters then show as `ahead`).
    const Clock::time_point start = Clock::now();
    const Clock::time_point stop =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
    const auto per_chunk = std::chrono::duration<double>(o.workers / o.rate);
    uint64_t chunks = 0;
    for (Clock::time_point due = start; due < stop; due += std::chrono::duration_cast<Clock::duration>(per_chunk)) {
      while (Clock::now() < due) {}
      queue_chunk(o.job + static_cast<unsigned>(chunks % o.jobs), static_cast<uint32_t>(chunks / o.jobs));
      flush();
      ++chunks;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("gen sent=%llu chunks_sent=%llu rate=%.0f seconds=%.3f\n", static_cast<unsigned long long>(sent),
                static_cast<unsigned long long>(chunks), static_cast<double>(sent) / secs, secs);
    return 0;
  }
  // Jobs o.job .. o.job + jobs - 1, each n members with its own window: more jobs, more in flight.
  struct Window {
    std::vector<Clock::time_point> sent_at;
    std::vector<uint8_t> done;
    uint32_t lo = 0, next = 0;  // first chunk without a result; next chunk to send
  };
  std::vector<Window> win(o.jobs);
  for (Window& w : win) {
    w.sent_at.resize(o.window);
    w.done.resize(o.window);
  }
  std::vector<uint8_t> rx(len + 64);
  const auto timeout = std::chrono::duration<double, std::milli>(o.timeout_ms);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  while (Clock::now() < stop) {
    const auto t = Clock::now();
    for (unsigned j = 0; j < o.jobs; ++j) {
      Window& w = win[j];
      for (; w.next - w.lo < o.window; ++w.next) {
        w.done[w.next % o.window] = 0;
        w.sent_at[w.next % o.window] = t;
        queue_chunk(o.job + j, w.next);
      }
      for (uint32_t s = w.lo; s != w.next; ++s) {
        if (!w.done[s % o.window] && t - w.sent_at[s % o.window] > timeout) {
          w.sent_at[s % o.window] = t;
          queue_chunk(o.job + j, s);
          repeats += o.workers;
        }
      }
    }
    flush();
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 1);
    while (true) {
      const ssize_t got = ::recv(fd, rx.data(), rx.size(), MSG_DONTWAIT);
      if (got < static_cast<ssize_t>(sizeof(xagg_hdr))) break;
      xagg_hdr h;
      std::memcpy(&h, rx.data(), sizeof h);
      const unsigned j = ntohs(h.job) - o.job;
      const uint32_t seq = ntohl(h.seq);
      if (h.type != XAGG_RESULT || j >= o.jobs || seq - win[j].lo >= win[j].next - win[j].lo) continue;
      if (!win[j].done[seq % o.window]) ++results;
      win[j].done[seq % o.window] = 1;
    }
    for (Window& w : win)
      while (w.lo != w.next && w.done[w.lo % o.window]) ++w.lo;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("gen sent=%llu repeats=%llu chunks=%llu seconds=%.3f\n", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(repeats), static_cast<unsigned long long>(results), secs);
  return 0;
}

// The head logic of xagg_head.bpf.c for one job without a parent, in userspace.
int run_userspace(const Options& o) {
  struct Slot {
    uint32_t seq = 0;
    bool used = false, final = false;
    uint64_t bitmap = 0;
    uint32_t weight = 0;
    std::vector<int32_t> acc;
  };
  const unsigned nslots = 2 * o.window;
  std::vector<Slot> slots(nslots * o.jobs);
  for (Slot& s : slots) s.acc.resize(o.values);
  const uint64_t full = o.workers >= 64 ? ~0ull : (1ull << o.workers) - 1;
  const int fd = udp_socket(o.port, "");
  const sockaddr_in group = addr_of(o.group, o.port);
  const size_t maxlen = sizeof(xagg_hdr) + 4 * XAGG_MAX_VALUES;
  std::vector<std::vector<uint8_t>> buf(kBatch, std::vector<uint8_t>(maxlen));
  std::vector<mmsghdr> rmsg(kBatch), tmsg(kBatch);
  std::vector<iovec> riov(kBatch), tiov(kBatch);
  std::vector<sockaddr_in> from(kBatch);
  uint64_t rx = 0, added = 0, duplicates = 0, completed = 0, answered = 0, stale = 0, bad_mac = 0;
  const double cpu0 = cpu_seconds();
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  while (Clock::now() < stop) {
    for (unsigned i = 0; i < kBatch; ++i) {
      riov[i] = {buf[i].data(), maxlen};
      rmsg[i] = {};
      rmsg[i].msg_hdr.msg_iov = &riov[i];
      rmsg[i].msg_hdr.msg_iovlen = 1;
      rmsg[i].msg_hdr.msg_name = &from[i];
      rmsg[i].msg_hdr.msg_namelen = sizeof from[i];
    }
    const int got = ::recvmmsg(fd, rmsg.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (got <= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 1);
      continue;
    }
    unsigned out = 0;
    for (int i = 0; i < got; ++i) {
      ++rx;
      uint8_t* b = buf[i].data();
      xagg_hdr h;
      std::memcpy(&h, b, sizeof h);
      const unsigned count = ntohs(h.count), rank = ntohs(h.rank);
      const unsigned job = ntohs(h.job) - o.job;
      if (h.type != XAGG_DATA || rank >= o.workers || job >= o.jobs || count != o.values ||
          rmsg[i].msg_len != sizeof h + 4 * count)
        continue;
      if (!wire::xagg_verify(o.key, b, rmsg[i].msg_len)) {
        ++bad_mac;
        continue;
      }
      const uint32_t seq = ntohl(h.seq);
      Slot& s = slots[job * nslots + seq % nslots];
      if (!s.used || (seq - s.seq == nslots && s.final)) {
        s = Slot{seq, true, false, 0, 0, std::move(s.acc)};
      } else if (s.seq != seq) {
        ++stale;
        continue;
      }
      const uint64_t bit = 1ull << rank;
      uint8_t* values = b + sizeof h;
      if (s.bitmap & bit) {
        if (!s.final) {
          ++duplicates;
          continue;
        }
        std::memcpy(values, s.acc.data(), 4 * count);  // answer it alone from the retained sum
        h.type = XAGG_RESULT;
        std::memcpy(b, &h, sizeof h);
        wire::xagg_sign(o.key, b, rmsg[i].msg_len);
        tiov[out] = {b, rmsg[i].msg_len};
        tmsg[out] = {};
        tmsg[out].msg_hdr.msg_iov = &tiov[out];
        tmsg[out].msg_hdr.msg_iovlen = 1;
        tmsg[out].msg_hdr.msg_name = &from[i];
        tmsg[out].msg_hdr.msg_namelen = sizeof from[i];
        ++out;
        ++answered;
        continue;
      }
      if (s.bitmap == 0)
        std::memcpy(s.acc.data(), values, 4 * count);
      else
        agg::add_into(agg::Dtype::int32, reinterpret_cast<uint8_t*>(s.acc.data()), values, 4 * count);
      s.bitmap |= bit;
      s.weight += ntohl(h.weight);
      ++added;
      if (s.bitmap != full) continue;
      s.final = true;
      ++completed;
      std::memcpy(values, s.acc.data(), 4 * count);
      h.type = XAGG_RESULT;
      h.rank = 0;
      h.weight = htonl(s.weight);
      std::memcpy(b, &h, sizeof h);
      wire::xagg_sign(o.key, b, rmsg[i].msg_len);
      tiov[out] = {b, rmsg[i].msg_len};
      tmsg[out] = {};
      tmsg[out].msg_hdr.msg_iov = &tiov[out];
      tmsg[out].msg_hdr.msg_iovlen = 1;
      tmsg[out].msg_hdr.msg_name = const_cast<sockaddr_in*>(&group);
      tmsg[out].msg_hdr.msg_namelen = sizeof group;
      ++out;
    }
    for (unsigned done = 0; done < out;) {
      const int r = ::sendmmsg(fd, tmsg.data() + done, out - done, 0);
      if (r <= 0) break;
      done += static_cast<unsigned>(r);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "userspace rx=%llu added=%llu duplicates=%llu completed=%llu answered=%llu stale=%llu bad_mac=%llu cpu=%.3f "
      "seconds=%.3f kernels=%s\n",
      static_cast<unsigned long long>(rx), static_cast<unsigned long long>(added),
      static_cast<unsigned long long>(duplicates), static_cast<unsigned long long>(completed),
      static_cast<unsigned long long>(answered), static_cast<unsigned long long>(stale),
      static_cast<unsigned long long>(bad_mac), cpu_seconds() - cpu0, secs,
      std::string(agg::kernels_tier_name()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string mode, key_file;
  po::options_description d("Usage: bench_xdp_head gen|userspace [options]\n\nOptions");
  d.add_options()("help,h", "this help")("mode", po::value<std::string>(&mode), "gen or userspace")(
      "head", po::value<std::string>(&o.head)->default_value(o.head), "gen: the head's address")(
      "group", po::value<std::string>(&o.group)->default_value(o.group), "the multicast group of results")(
      "workers", po::value<unsigned>(&o.workers)->default_value(o.workers), "members of the job")(
      "values", po::value<unsigned>(&o.values)->default_value(o.values), "int32 values per packet")(
      "window", po::value<unsigned>(&o.window)->default_value(o.window), "chunks in flight")(
      "job", po::value<unsigned>(&o.job)->default_value(o.job), "the first job id")(
      "jobs", po::value<unsigned>(&o.jobs)->default_value(o.jobs),
      "jobs at once from --job on, each with its own window")(
      "port", po::value<unsigned>(&o.port)->default_value(o.port), "UDP port")(
      "seconds", po::value<double>(&o.seconds)->default_value(o.seconds), "how long to run")(
      "timeout-ms", po::value<double>(&o.timeout_ms)->default_value(o.timeout_ms),
      "gen: send a chunk again after this")(
      "rate", po::value<double>(&o.rate)->default_value(o.rate),
      "gen: open loop at this many packets per second (0: closed loop with --window)")(
      "key-file", po::value<std::string>(&key_file)->value_name("FILE"),
      "the job's MAC key (inagg-xdp key FILE; $INAGG_XDP_KEY first)");
  po::positional_options_description pos;
  pos.add("mode", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(d).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "bench_xdp_head: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help") || (mode != "gen" && mode != "userspace")) {
    std::cout << d;
    return vm.count("help") ? 0 : 2;
  }
  if (o.values == 0 || o.values % XAGG_VALUE_ALIGN || o.values > XAGG_MAX_VALUES || o.window == 0 || o.window > 32 ||
      o.workers == 0 || o.workers > 64 || o.jobs == 0 || o.job + o.jobs > XAGG_MAX_JOBS) {
    std::cerr << "bench_xdp_head: values must be a multiple of 4 up to 1024, window 1..32, workers 1..64\n";
    return 2;
  }
  std::string err;
  if (!wire::load_xagg_key(wire::kXaggKeyEnv, key_file, &o.key, &err)) {
    std::cerr << "bench_xdp_head: " << err << " (--key-file)\n";
    return 2;
  }
  return mode == "gen" ? run_gen(o) : run_userspace(o);
}
