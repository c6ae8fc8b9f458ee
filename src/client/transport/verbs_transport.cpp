#include "inagg/client/transport/verbs_transport.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "inagg/client/clock.hpp"

namespace inagg::client {
namespace {

// Work request ids: which completion is which.
constexpr uint64_t kWriteWr = 1, kRecvWr = 2;
constexpr unsigned kMaxRecvDepth = 1024;

std::string errno_text(int e) { return std::strerror(e ? e : EINVAL); }

std::optional<ibv_mtu> mtu_of_payload(uint32_t p) {
  switch (p) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return std::nullopt;
  }
}

unsigned mtu_bytes(ibv_mtu m) { return 128u << m; }  // IBV_MTU_256 = 1

util::IpAddr gid_to_ip(const uint8_t raw[16]) {
  std::array<uint8_t, 16> b{};
  std::memcpy(b.data(), raw, 16);
  return util::IpAddr::v6(b);
}

}  // namespace

VerbsTransport::VerbsTransport() = default;
VerbsTransport::~VerbsTransport() { close(); }

void VerbsTransport::close() {
  if (send_qp_) ibv_destroy_qp(send_qp_);
  if (recv_qp_) ibv_destroy_qp(recv_qp_);
  if (send_mr_) ibv_dereg_mr(send_mr_);
  if (recv_mr_) ibv_dereg_mr(recv_mr_);
  if (send_cq_) ibv_destroy_cq(send_cq_);
  if (recv_cq_) ibv_destroy_cq(recv_cq_);
  if (channel_) ibv_destroy_comp_channel(channel_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
  std::free(send_buf_);
  std::free(recv_buf_);
  send_qp_ = recv_qp_ = nullptr;
  send_mr_ = recv_mr_ = nullptr;
  send_cq_ = recv_cq_ = nullptr;
  channel_ = nullptr;
  pd_ = nullptr;
  ctx_ = nullptr;
  send_buf_ = recv_buf_ = nullptr;
}

bool VerbsTransport::open(const VerbsConfig& cfg, std::string* error) {
  close();
  cfg_ = cfg;
  auto failed = [&](const std::string& why) {
    *error = why;
    close();
    return false;
  };
  const std::optional<ibv_mtu> mtu = mtu_of_payload(cfg.payload);
  if (!mtu) return failed("--payload must be an RDMA path MTU (256, 512, 1024, 2048 or 4096) with --transport verbs");

  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    return failed(
        "no RDMA device (ibv_get_device_list found none): load the NIC's driver (mlx5_ib), or create a Soft-RoCE "
        "device (rdma link add rxe0 type rxe netdev eth0)");
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + name;
    if (!dev && (cfg.dev.device.empty() || cfg.dev.device == name)) dev = list[i];
  }
  if (!dev) {
    ibv_free_device_list(list);
    return failed("no RDMA device '" + cfg.dev.device + "' (this host has " + names + "): check --ib-dev");
  }
  const std::string dev_name = ibv_get_device_name(dev);
  ctx_ = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!ctx_) return failed("cannot open RDMA device " + dev_name + ": " + errno_text(errno));

  ibv_port_attr port{};
  if (cfg.dev.port < 1 || cfg.dev.port > 255 || ibv_query_port(ctx_, static_cast<uint8_t>(cfg.dev.port), &port) != 0)
    return failed("device " + dev_name + " has no port " + std::to_string(cfg.dev.port) + ": check --ib-port");
  if (port.state != IBV_PORT_ACTIVE)
    return failed(dev_name + " port " + std::to_string(cfg.dev.port) + " is not ACTIVE (" +
                  ibv_port_state_str(port.state) + "): is its Ethernet link up?");
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET)
    return failed(dev_name + " port " + std::to_string(cfg.dev.port) +
                  " is not RoCE (its link layer is InfiniBand): inagg aggregates RoCEv2 only");
  if (mtu_bytes(*mtu) > mtu_bytes(port.active_mtu))
    return failed("--payload " + std::to_string(cfg.payload) + " exceeds " + dev_name + "'s active MTU " +
                  std::to_string(mtu_bytes(port.active_mtu)) +
                  " (raise the netdev's MTU, e.g. 4200 for 4096, or lower --payload)");

  // The GID: the given index, or the first RoCEv2 one that is an IPv4-mapped address.
  ibv_gid_entry entry{};
  if (cfg.dev.gid_index >= 0) {
    if (ibv_query_gid_ex(ctx_, cfg.dev.port, static_cast<uint32_t>(cfg.dev.gid_index), &entry, 0) != 0)
      return failed(dev_name + " port " + std::to_string(cfg.dev.port) + " has no GID at index " +
                    std::to_string(cfg.dev.gid_index) +
                    ": list them with `show_gids` or `rdma link`, check --gid-index");
    if (entry.gid_type != IBV_GID_TYPE_ROCE_V2)
      return failed("GID index " + std::to_string(cfg.dev.gid_index) + " of " + dev_name +
                    " is not RoCEv2 (inagg sees only RoCEv2, UDP port 4791): choose a RoCEv2 index");
  } else {
    bool found = false;
    for (int i = 0; i < port.gid_tbl_len && !found; ++i) {
      if (ibv_query_gid_ex(ctx_, cfg.dev.port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
      found = entry.gid_type == IBV_GID_TYPE_ROCE_V2 && gid_to_ip(entry.gid.raw).is_v4_mapped();
    }
    if (!found)
      return failed(dev_name + " port " + std::to_string(cfg.dev.port) +
                    " has no RoCEv2 GID with an IPv4 address: give its netdev an IPv4 address, or pass --gid-index");
  }
  gid_index_ = static_cast<int>(entry.gid_index);
  std::memcpy(gid_, entry.gid.raw, 16);
  const util::IpAddr gid_ip = gid_to_ip(gid_);
  description_ = dev_name + " port " + std::to_string(cfg.dev.port) + " GID " + std::to_string(gid_index_) + " " +
                 util::ip_text(gid_ip) + " MTU " + std::to_string(mtu_bytes(port.active_mtu));

  ibv_device_attr dattr{};
  if (ibv_query_device(ctx_, &dattr) != 0) return failed("ibv_query_device on " + dev_name + ": " + errno_text(errno));
  recv_depth_ = std::min<unsigned>(kMaxRecvDepth, static_cast<unsigned>(dattr.max_qp_wr));
  if (cfg.window + 1 > static_cast<unsigned>(dattr.max_qp_wr))
    return failed("--window " + std::to_string(cfg.window) + " exceeds " + dev_name + "'s " +
                  std::to_string(dattr.max_qp_wr) + " work requests per QP");

  pd_ = ibv_alloc_pd(ctx_);
  if (!pd_) return failed("ibv_alloc_pd: " + errno_text(errno));
  channel_ = ibv_create_comp_channel(ctx_);
  if (!channel_) return failed("ibv_create_comp_channel: " + errno_text(errno));
  send_cq_ = ibv_create_cq(ctx_, static_cast<int>(cfg.window + 1), nullptr, channel_, 0);
  recv_cq_ = ibv_create_cq(ctx_, static_cast<int>(recv_depth_), nullptr, channel_, 0);
  if (!send_cq_ || !recv_cq_) return failed("ibv_create_cq: " + errno_text(errno));

  // Page-aligned regions, at least a page each (a zero-length MR is refused).
  const long page = sysconf(_SC_PAGESIZE);
  auto alloc = [&](uint64_t bytes) -> uint8_t* {
    void* p = nullptr;
    const uint64_t size = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
    if (posix_memalign(&p, static_cast<size_t>(page), size) != 0) return nullptr;
    std::memset(p, 0, size);
    return static_cast<uint8_t*>(p);
  };
  send_buf_ = alloc(cfg.send_bytes);
  recv_buf_ = alloc(cfg.receive_bytes);
  if (!send_buf_ || !recv_buf_) return failed("cannot allocate the registered regions");
  // The receive region is addressed at a random VA (an IOVA of its own), not at its place in this
  // process: a heap address is a guess away, and the rkey is the device's, with as few as 8
  // random bits (Soft-RoCE's). A WRITE must name both.
  std::string why;
  const std::optional<RegionKey> key = random_region_key(&why);
  if (!key) return failed(why);
  send_mr_ = ibv_reg_mr(pd_, send_buf_, std::max<uint64_t>(cfg.send_bytes, 1), IBV_ACCESS_LOCAL_WRITE);
  recv_mr_ = ibv_reg_mr_iova(pd_, recv_buf_, std::max<uint64_t>(cfg.receive_bytes, 1), key->va,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!send_mr_ || !recv_mr_)
    return failed("ibv_reg_mr: " + errno_text(errno) + " (is the locked-memory limit, ulimit -l, large enough?)");

  auto make_qp = [&](ibv_cq* cq, unsigned send_wr, unsigned recv_wr) -> ibv_qp* {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq_;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = send_wr;
    a.cap.max_recv_wr = recv_wr;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return ibv_create_qp(pd_, &a);
  };
  // The send QP takes no receives; the receive QP posts no sends (but the CQ must exist).
  send_qp_ = make_qp(send_cq_, cfg.window + 1, 1);
  recv_qp_ = make_qp(recv_cq_, 1, recv_depth_);
  if (!send_qp_ || !recv_qp_) return failed("ibv_create_qp (RC): " + errno_text(errno));
  for (ibv_qp* qp : {send_qp_, recv_qp_}) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(cfg.dev.port);
    a.qp_access_flags = qp == recv_qp_ ? IBV_ACCESS_REMOTE_WRITE : 0;
    if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS); e != 0)
      return failed("ibv_modify_qp to INIT: " + errno_text(e));
  }

  local_ = {};
  local_.rank = cfg.rank;
  local_.gid = gid_ip;
  local_.send_qpn = send_qp_->qp_num;
  local_.recv_qpn = recv_qp_->qp_num;
  local_.start_psn = cfg.start_psn & 0xffffff;
  local_.recv_addr = key->va;
  local_.recv_rkey = recv_mr_->rkey;
  local_.payload = cfg.payload;
  last_arrival_ns_ = now_ns();
  return true;
}

bool VerbsTransport::connect(const RankEndpoint& successor, const RankEndpoint& predecessor, std::string* error) {
  successor_ = successor;
  const ibv_mtu mtu = *mtu_of_payload(cfg_.payload);
  // qp: ours; remote_qpn/remote_gid: the peer's QP; rq_psn: the peer's first PSN to us; sq_psn: ours.
  auto to_rts = [&](ibv_qp* qp, uint32_t remote_qpn, const util::IpAddr& remote_gid, uint32_t rq_psn, uint32_t sq_psn,
                    const char* which) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = rq_psn & 0xffffff;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;  // 0.64 ms
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote_gid.bytes.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = static_cast<uint8_t>(cfg_.dev.port);
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        e != 0) {
      *error = std::string("ibv_modify_qp of the QP ") + which + " to RTR: " + errno_text(e);
      return false;
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(cfg_.dev.qp_timeout);
    a.retry_cnt = static_cast<uint8_t>(std::min(cfg_.retry, 7u));
    a.rnr_retry = 7;  // infinite: a receiver that has not posted its WRs yet is waited for
    a.sq_psn = sq_psn & 0xffffff;
    a.max_rd_atomic = 1;
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC);
        e != 0) {
      *error = std::string("ibv_modify_qp of the QP ") + which + " to RTS: " + errno_text(e);
      return false;
    }
    return true;
  };
  // Receives first: the predecessor may write as soon as its QP is up.
  if (!post_receives()) {
    *error = error_;
    return false;
  }
  if (!to_rts(recv_qp_, predecessor.send_qpn, predecessor.gid, predecessor.start_psn, 0, "from the predecessor") ||
      !to_rts(send_qp_, successor.recv_qpn, successor.gid, 0, local_.start_psn, "to the successor"))
    return false;
  // A WRITE that reaches a receive QP still in INIT is dropped without a NAK: the sender would
  // wait a whole ACK timeout (a second) to send it again.
  std::string why;
  if (!rendezvous_.barrier("connected", &why)) {
    *error = "after connecting the QPs: " + why;
    return false;
  }
  connected_ = true;
  last_arrival_ns_ = now_ns();
  return true;
}

void VerbsTransport::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

bool VerbsTransport::post_receives() {
  while (recv_posted_ < recv_depth_) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = kRecvWr;
    wr.num_sge = 0;  // WRITE WITH IMMEDIATE: the data goes to the RETH's address, only the immediate here
    if (int e = ibv_post_recv(recv_qp_, &wr, &bad); e != 0) {
      fail("ibv_post_recv: " + errno_text(e));
      return false;
    }
    ++recv_posted_;
  }
  return true;
}

void VerbsTransport::post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) {
  queued_.push_back({src_offset, len, dst_offset, imm});
  post_queued();
}

bool VerbsTransport::post_queued() {
  while (error_.empty() && connected_ && !queued_.empty() && in_flight_ < cfg_.window) {
    const Write& w = queued_.front();
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(send_buf_ + w.src_offset);
    sge.length = w.len;
    sge.lkey = send_mr_->lkey;
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = kWriteWr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(w.imm);
    wr.wr.rdma.remote_addr = successor_.recv_addr + w.dst_offset;
    wr.wr.rdma.rkey = successor_.recv_rkey;
    if (int e = ibv_post_send(send_qp_, &wr, &bad); e != 0) {
      fail("ibv_post_send (RDMA WRITE WITH IMMEDIATE): " + errno_text(e));
      return false;
    }
    queued_.pop_front();
    ++in_flight_;
  }
  return error_.empty();
}

bool VerbsTransport::drain_cqs() {
  ibv_wc wc[16];
  bool any = false;
  for (ibv_cq* cq : {send_cq_, recv_cq_}) {
    int n;
    while ((n = ibv_poll_cq(cq, 16, wc)) > 0) {
      any = true;
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          // The receive QP posts nothing itself, so its receives are flushed only when its RC
          // responder stopped it: it refused a WRITE (the device's answer to a wrong rkey or
          // address), which the appliance's sums never carry.
          const bool responder_stopped = wc[i].wr_id != kWriteWr && wc[i].status == IBV_WC_WR_FLUSH_ERR;
          fail(std::string(wc[i].wr_id == kWriteWr ? "an RDMA WRITE to the successor"
                                                   : "a receive from the predecessor") +
               " completed with " + ibv_wc_status_str(wc[i].status) + " (status " + std::to_string(wc[i].status) +
               ", vendor error " + std::to_string(wc[i].vendor_err) + ")" +
               (responder_stopped ? ": the receive QP's responder refused a WRITE naming a wrong rkey or address "
                                    "and stopped the QP (a forged WRITE, sent around the appliance by a host that "
                                    "is not the predecessor); nothing it refused was written"
                                  : ""));
          continue;
        }
        if (wc[i].wr_id == kWriteWr) {
          --in_flight_;
          ++writes_completed_;
        } else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          --recv_posted_;
          ++received_;
        }
      }
    }
    if (n < 0) fail("ibv_poll_cq failed");
  }
  return any;
}

void VerbsTransport::poll(int wait_ms) {
  if (!error_.empty() || !connected_) return;
  bool any = drain_cqs();
  if (!any && wait_ms > 0) {
    // Sleep on the completion channel, as a NIC lets a host do: arm both CQs, look once more (a
    // completion between the poll and the arming raises no event), then wait.
    ibv_req_notify_cq(send_cq_, 0);
    ibv_req_notify_cq(recv_cq_, 0);
    any = drain_cqs();
    if (!any) {
      pollfd p{channel_->fd, POLLIN, 0};
      if (::poll(&p, 1, wait_ms) > 0) {
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
        any = drain_cqs();
      }
    }
  }
  if (any) last_arrival_ns_ = now_ns();
  post_receives();
  post_queued();
}

void VerbsTransport::finish(uint64_t deadline_ns) {
  while (error_.empty() && !writes_done() && now_ns() < deadline_ns) poll(1);
  std::string why;
  if (error_.empty() && !rendezvous_.barrier("done", &why)) fail("the final barrier: " + why);
}

TransportCounters VerbsTransport::counters() const {
  // The NIC counts packets and retransmissions, not this process (rdma statistic shows them).
  TransportCounters c;
  c.messages_written = writes_completed_;
  c.messages_received = received_;
  return c;
}

}  // namespace inagg::client
