// The first Transport: RoCEv2 RC in software over a kernel UDP socket (roce_socket.hpp), one
// RcRequester to the successor and one RcResponder for the predecessor (rc.hpp). The receive
// region is addressed as [kRegionVa, kRegionVa + size) with kRegionRkey on every rank, so no
// addresses need exchanging.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inagg/client/rc.hpp"
#include "inagg/client/roce_socket.hpp"
#include "inagg/client/transport.hpp"

namespace inagg::client {

struct UdpRcConfig {
  util::IpAddr local;
  uint8_t tos = 2;          // ECT(0)
  RcConfig send;            // the requester: our QP -> the successor's receive QP
  RcConfig receive;         // the responder: the predecessor's QP -> our receive QP
  uint64_t send_bytes = 0;  // sizes of the two regions
  uint64_t receive_bytes = 0;
};

class UdpRcTransport final : public Transport {
 public:
  static constexpr uint64_t kRegionVa = 0x7f0000000000ull;
  static constexpr uint32_t kRegionRkey = 0x1234;

  UdpRcTransport() = default;
  UdpRcTransport(const UdpRcTransport&) = delete;
  UdpRcTransport& operator=(const UdpRcTransport&) = delete;

  // Binds (local, 4791) and allocates the regions. False with *error ("cannot bind ...").
  bool open(const UdpRcConfig& cfg, std::string* error);

  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override;
  bool writes_done() const override { return req_->idle(); }
  uint64_t messages_received() const override { return rsp_->messages(); }
  uint64_t last_arrival_ns() const override { return last_arrival_ns_; }
  const std::string& error() const override;
  void finish(uint64_t deadline_ns) override;
  TransportCounters counters() const override;

  RoceSocket& socket() { return sock_; }  // loss injection (set_loss) for tests

 private:
  bool drain(uint64_t now_ns);  // dispatches every waiting datagram; true when there was any

  UdpRcConfig cfg_;
  RoceSocket sock_;
  std::vector<uint8_t> send_, recv_;
  std::unique_ptr<RcRequester> req_;
  std::unique_ptr<RcResponder> rsp_;
  Datagram dg_;
  uint64_t last_arrival_ns_ = 0;
  std::string no_error_;
};

}  // namespace inagg::client
