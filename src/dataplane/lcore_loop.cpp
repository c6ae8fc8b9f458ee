// The datapath lcore's run-to-completion loop (l3fwd style): requests, handovers and RX between
// bursts, the L2 bridge for frames no job claims, the owning lcore's engine for RoCEv2, TX buffered
// per port and drained on a TSC timer.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_pause.h>
#include <rte_prefetch.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "inagg/wire/headers.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"
#include "lcore.hpp"
#include "mbuf_parse.hpp"

namespace inagg::dataplane {
namespace {

// A cheap pre-filter so plain frames go straight to the bridge (wire::is_roce_candidate: UDP to
// 4791 after any VLAN tags, or IPv6 with extension headers). A candidate is then parsed once.
bool looks_like_roce(const uint8_t* f, uint32_t len) { return wire::is_roce_candidate({f, len}); }

// Lab mode's back-off when an lcore's queues stay empty, DPDK l3fwd-power's empty-poll heuristic:
// a few empty polls cost nothing (the next burst is often on its way), then rte_pause() between
// polls, then sleeps that double from 1 us up to the configured maximum, and busy-polling again
// from the first packet. The maximum stays below the engine's timers (inagg refuses
// --idle-sleep-us above half of --resend-us), so resends and timeouts fire at most that late.
class IdleBackoff {
 public:
  static constexpr unsigned kPauseAfter = 10;   // empty polls before rte_pause() (l3fwd-power: 10)
  static constexpr unsigned kSleepAfter = 300;  // empty polls before the first sleep (l3fwd-power: 300)

  explicit IdleBackoff(uint32_t max_us) : max_ns_(uint64_t{max_us} * 1000) {}
  void on_work() {
    empty_ = 0;
    sleep_ns_ = 1000;
  }
  // After an empty poll. True when it slept.
  bool on_empty() {
    if (++empty_ < kPauseAfter) return false;
    if (empty_ < kSleepAfter) {
      rte_pause();
      return false;
    }
    const timespec ts{static_cast<time_t>(sleep_ns_ / 1'000'000'000), static_cast<long>(sleep_ns_ % 1'000'000'000)};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
    sleep_ns_ = std::min(sleep_ns_ * 2, max_ns_);
    return true;
  }

 private:
  uint64_t max_ns_;
  unsigned empty_ = 0;
  uint64_t sleep_ns_ = 1000;
};

// One lcore's loop; a class only so the per-packet steps share dp and l without passing them.
class LcoreLoop {
 public:
  LcoreLoop(const Datapath& dp, LcoreState& l) : dp_(dp), l_(l) {}
  // The loop, busy-polling or in lab mode (chosen once, by run_lcore_loop).
  template <bool kLabMode>
  void run();

 private:
  void handle_packet(rte_mbuf* m, uint64_t now_ns, bool from_handover);
  void handle_roce(rte_mbuf* m, wire::ParseStatus st, const wire::Layout& layout, uint64_t now_ns, bool from_handover);
  void hand_over(rte_mbuf* m, uint16_t to, wire::ParseStatus st, const wire::Layout& layout);
  // Learns a frame's source (its first `len` bytes: 64 hold every header it reads).
  // `note_station`: the station table notes it too (not a RoCEv2 frame).
  void learn_source(const uint8_t* frame, uint32_t len, uint16_t port, uint64_t now_ns, bool note_station);
  void route_engine_output(uint64_t now_ns);
  void send(rte_mbuf* m, uint64_t now_ns);
  void enqueue_tx(unsigned port_index, rte_mbuf* m);
  void send_burst(unsigned port_index);
  void flush_tx();

  const Datapath& dp_;
  LcoreState& l_;
};

template <bool kLabMode>
void LcoreLoop::run() {
  LcoreState& l = l_;
  IdleBackoff idle(dp_.idle_sleep_us);
  // A thread's default timer slack (50 us) would stretch every short sleep to ~50 us.
  if constexpr (kLabMode) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const uint64_t drain_tsc = dp_.tsc_hz * dp_.drain_us / 1'000'000;
  const uint64_t poll_tsc = dp_.tsc_hz / 100'000;  // engine timers every 10 us
  uint64_t last_drain = rte_rdtsc(), last_poll = last_drain;
  rte_mbuf* pkts[kMaxBurst];
  const double ns_per_tsc = 1e9 / static_cast<double>(dp_.tsc_hz);

  while (!g_force_quit.load(std::memory_order_relaxed)) {
    l.loops.store(l.loops.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    const uint64_t t0 = rte_rdtsc();
    const uint64_t now_ns = static_cast<uint64_t>(static_cast<double>(t0) * ns_per_tsc);
    bool work = false;

    serve_requests(l);  // control requests, between bursts

    // Packets other lcores handed over (their job is ours): always taken, they go to our engine only,
    // so a handover ring always drains.
    unsigned n = rte_ring_dequeue_burst(l.handover, reinterpret_cast<void**>(pkts), dp_.burst, nullptr);
    if (n) {
      work = true;
      l.c.handover_in += n;
      for (unsigned i = 0; i < n; ++i) handle_packet(pkts[i], now_ns, true);
    }

    for (uint16_t pi = 0; pi < dp_.port_ids.size(); ++pi) {
      n = rte_eth_rx_burst(dp_.port_ids[pi], l.queue, pkts, dp_.burst);
      if (n == 0) continue;
      work = true;
      l.c.rx += n;
      // As l3fwd does: start the headers' cache misses for the burst before touching any of them.
      for (unsigned i = 0; i < n; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
      for (unsigned i = 0; i < n; ++i) handle_packet(pkts[i], now_ns, false);
    }

    if (t0 - last_poll > poll_tsc) {
      l.engine->poll(now_ns, l.engine_tx);
      route_engine_output(now_ns);
      last_poll = t0;
    }
    if (t0 - last_drain > drain_tsc) {
      flush_tx();
      last_drain = t0;
    }
    if constexpr (kLabMode) {
      if (work) {
        idle.on_work();
      } else {
        flush_tx();  // nothing waits in a TX buffer while the lcore sleeps
        if (idle.on_empty()) ++l.c.idle_sleeps;
      }
    }
    const uint64_t t1 = rte_rdtsc();
    (work ? l.c.busy_cycles : l.c.idle_cycles) += t1 - t0;
  }
  flush_tx();
  // Answer what is waiting, then hand the engine to the control side (lcore_requests.cpp).
  serve_requests(l);
  l.serving.store(false, std::memory_order_release);
}

void LcoreLoop::handle_packet(rte_mbuf* m, uint64_t now_ns, bool from_handover) {
  LcoreState& l = l_;
  if (m->nb_segs > 1 && rte_pktmbuf_linearize(m) != 0) {
    // The engine cannot look inside it. A RoCEv2 candidate may belong to a registered connection:
    // dropped, never bridged raw (its sender retransmits); anything else is bridged as it is.
    ++l.c.multiseg_linearize_failed;
    if (!from_handover && !looks_like_roce(rte_pktmbuf_mtod(m, uint8_t*), m->data_len))
      send(m, now_ns);
    else
      rte_pktmbuf_free(m);
    return;
  }
  uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  if (len < 14) {
    send(m, now_ns);
    return;
  }
  // A handed-over frame comes with the parse the lcore that received it made.
  if (MbufParse* carried = from_handover ? mbuf_parse(m) : nullptr)
    return handle_roce(m, carried->status, carried->layout, now_ns, true);
  // Not RoCEv2, or nothing registered on this lcore (no job, no route, no closed connection), so
  // that no frame can be a job's: bridged as a plain switch would, without a parse.
  if (!from_handover) {
    const bool roce = looks_like_roce(data, len);
    if (!roce || l.engine->knows_no_connection()) {
      if (roce) {
        ++l.c.roce;
        l.engine->count_passthrough();
      }
      learn_source(data, len, m->port, now_ns, !roce);
      send(m, now_ns);
      return;
    }
  }
  wire::Layout layout;
  const wire::ParseStatus st = wire::parse_frame({data, len}, layout);
  handle_roce(m, st, layout, now_ns, from_handover);
}

// A RoCEv2 candidate, parsed: to the lcore that owns its job, or into this lcore's engine.
void LcoreLoop::handle_roce(rte_mbuf* m, wire::ParseStatus st, const wire::Layout& layout, uint64_t now_ns,
                            bool from_handover) {
  LcoreState& l = l_;
  uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  // More than one lcore: the engine's connection table also says which lcore takes the packet
  // (Engine::route_of; each lcore keeps its own routes, told by requests: nothing shared). (A
  // frame whose BTH is cut short has no route: this lcore's engine drops and counts it, held
  // closed here or its own.) The owner learns from it if its engine took it (below).
  if (!from_handover && dp_.lcores.size() > 1) {
    const agg::Engine::Route* r = l.engine->route_of(data, layout);
    if (r && r->owner != l.index) return hand_over(m, r->owner, st, layout);
  }
  ++l.c.roce;
  // A RoCEv2 frame teaches the bridge where its sender is only if the engine says so (teaches()):
  // a frame of no registered connection, or one its job took from its rank's bound port and MAC.
  // A forged, stale or duplicate frame teaches nothing (a rank's own address is pinned anyway).
  // The engine may free the frame, so its start is kept first.
  uint8_t head[64];
  const uint32_t head_len = std::min<uint32_t>(len, sizeof head);
  std::memcpy(head, data, head_len);
  const uint16_t in_port = m->port;
  l.engine->process({m, data, static_cast<uint16_t>(len), m->port}, st, layout, now_ns, l.engine_tx);
  // (A RoCE frame notes no station: ranks are bound by their other frames, never by a job's.)
  if (l.engine->teaches()) learn_source(head, head_len, in_port, now_ns, false);
  route_engine_output(now_ns);
}

// Onto another lcore's handover ring, for its engine, with the frame's parse.
void LcoreLoop::hand_over(rte_mbuf* m, uint16_t to, wire::ParseStatus st, const wire::Layout& layout) {
  if (MbufParse* p = mbuf_parse(m)) {
    p->layout = layout;
    p->status = st;
  }
  if (rte_ring_enqueue(dp_.lcores[to]->handover, m) == 0) {
    ++l_.c.handover_out;
  } else {
    ++l_.c.handover_full;
    rte_pktmbuf_free(m);
  }
}

// Every lcore learns from the frames it handles, handed over or received: the lcore that owns a job
// sends its sums, so it must know where the ranks are whichever lcore received them. It notes the
// station (its MAC and address on this port) for binding ranks too (stations.hpp). Bursts come
// from few stations: re-learning the same source (MAC and address) on the same port within 1 ms
// changes nothing, so it is skipped (halves the bridge's per-frame cost on a burst of one flow).
void LcoreLoop::learn_source(const uint8_t* frame, uint32_t len, uint16_t port, uint64_t now_ns, bool note_station) {
  LcoreState& l = l_;
  const uint64_t src = MacTable::key(frame + 6), addr = source_address_word(frame, len);
  if (src != l.learn_cache_mac || addr != l.learn_cache_addr || port != l.learn_cache_port ||
      now_ns - l.learn_cache_ns > 1'000'000) {
    const uint64_t refused = l.macs->moves_refused(), limited = l.macs->port_limit_refused();
    l.macs->learn(frame + 6, port, now_ns);
    l.c.mac_moves_refused += l.macs->moves_refused() - refused;
    l.c.mac_limit_refused += l.macs->port_limit_refused() - limited;
    if (note_station) l.stations->note_frame(frame, len, port, now_ns);
    l.learn_cache_mac = src;
    l.learn_cache_addr = addr;
    l.learn_cache_port = port;
    l.learn_cache_ns = now_ns;
    l.lookup_cache_ns = 0;  // a move may change the cached lookup
  }
}

void LcoreLoop::route_engine_output(uint64_t now_ns) {
  LcoreState& l = l_;
  for (size_t i = 0; i < l.engine_tx.size(); ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(l.engine_tx[i].handle);
    if (l.capture.is_open()) l.capture.write(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, now_ns);
    send(m, now_ns);
  }
  l.engine_tx.clear();
}

// Bridges one frame: to the learned port, flooded, or dropped when it would go back where it
// came from. Consumes one reference of m.
void LcoreLoop::send(rte_mbuf* m, uint64_t now_ns) {
  LcoreState& l = l_;
  const uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  const int in = m->port < dp_.index_of_port.size() ? dp_.index_of_port[m->port] : -1;
  const uint16_t in_port = in >= 0 ? static_cast<uint16_t>(in) : kNoPort;
  uint16_t out = kFlood;
  if (m->data_len >= 6) {
    const uint64_t dst = MacTable::key(data);
    if (dst == l.lookup_cache_mac && m->port == l.lookup_cache_port && now_ns - l.lookup_cache_ns < 1'000'000) {
      out = l.lookup_cache_out;
    } else {
      out = l.macs->lookup(data, m->port, now_ns);
      l.lookup_cache_mac = dst;
      l.lookup_cache_port = m->port;
      l.lookup_cache_out = out;
      l.lookup_cache_ns = now_ns;
    }
  }
  if (out == kDrop) {
    ++l.c.same_port_drops;
    rte_pktmbuf_free(m);
    return;
  }
  if (out != kFlood) {
    const int oi = out < dp_.index_of_port.size() ? dp_.index_of_port[out] : -1;
    if (oi >= 0) {
      ++l.c.bridged;
      enqueue_tx(static_cast<unsigned>(oi), m);
      return;
    }
  }
  ++l.c.flooded;
  const unsigned nports = static_cast<unsigned>(dp_.port_ids.size());
  const unsigned copies = nports - (in_port != kNoPort ? 1 : 0);
  if (copies == 0) {
    rte_pktmbuf_free(m);
    return;
  }
  if (copies > 1) rte_mbuf_refcnt_update(m, static_cast<int16_t>(copies - 1));
  for (unsigned p = 0; p < nports; ++p)
    if (p != in_port) enqueue_tx(p, m);
}

void LcoreLoop::enqueue_tx(unsigned pi, rte_mbuf* m) {
  TxBuffer& b = l_.tx[pi];
  b.pkts[b.n++] = m;
  if (b.n == dp_.burst) send_burst(pi);
}

// Hands a port's TX buffer to the PMD; whatever it does not take is freed and counted.
void LcoreLoop::send_burst(unsigned pi) {
  TxBuffer& b = l_.tx[pi];
  const uint16_t sent = rte_eth_tx_burst(dp_.port_ids[pi], l_.queue, b.pkts, b.n);
  l_.c.tx += sent;
  for (uint16_t i = sent; i < b.n; ++i) rte_pktmbuf_free(b.pkts[i]);
  l_.c.tx_dropped += b.n - sent;
  b.n = 0;
}

void LcoreLoop::flush_tx() {
  for (unsigned pi = 0; pi < l_.tx.size(); ++pi) {
    if (l_.tx[pi].n) send_burst(pi);
  }
}

}  // namespace

void run_lcore_loop(const Datapath& dp, LcoreState& l) {
  if (dp.idle_sleep_us > 0)
    LcoreLoop(dp, l).run<true>();
  else
    LcoreLoop(dp, l).run<false>();
}

// Whether this lcore's TX queue towards DPDK port `port` holds at least `threshold` packets: those
// waiting in its TX buffer, plus, where the PMD reports descriptor status, those still in the NIC's
// TX ring (the descriptor `threshold` places before the ring's tail is not done yet). Virtual
// devices report no descriptor status: there only the TX buffer counts.
bool tx_queue_above(void* ctx, uint16_t port, uint32_t threshold) {
  const LcoreState& l = *static_cast<const LcoreState*>(ctx);
  const int pi = port < l.index_of_port->size() ? (*l.index_of_port)[port] : -1;
  if (pi < 0) return false;
  const uint32_t buffered = l.tx[pi].n;
  if (buffered >= threshold) return true;
  const uint32_t in_ring = threshold - buffered;
  const uint16_t ring = l.tx_ring_size[pi];
  if (in_ring >= ring) return false;
  return rte_eth_tx_descriptor_status(port, l.queue, static_cast<uint16_t>(ring - in_ring)) == RTE_ETH_TX_DESC_FULL;
}

}  // namespace inagg::dataplane
