// RoCEv2 over a kernel UDP socket, as the software workers speak it (issue 5): the kernel writes
// the IP and UDP headers, inagg the BTH onward, including the ICRC, which covers those IP/UDP
// headers. So the sender fixes the fields the ICRC covers but the kernel chooses: DF is set and
// the socket stays unconnected, which makes Linux send IP ID 0; the source port is the bound
// port, 4791. The receiver rebuilds the same headers (from the datagram's addresses, length and
// TOS) to verify the ICRC with the wire layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inagg/wire/build.hpp"

namespace inagg::client {

struct Datagram {
  wire::IpAddr src, dst;
  uint16_t src_port = 0;
  uint8_t tos = 0;
  std::vector<uint8_t> frame;  // rebuilt Ethernet + IP + UDP + the datagram, for parse_frame()
  wire::Layout layout;         // valid when parsed
  bool roce = false;           // parsed as RoCEv2
};

class RoceSocket {
 public:
  RoceSocket() = default;
  ~RoceSocket();
  RoceSocket(const RoceSocket&) = delete;
  RoceSocket& operator=(const RoceSocket&) = delete;

  // Binds (local, 4791). `tos` is sent on every packet (DSCP << 2 | ECN; 2 = ECT(0)).
  bool open(const wire::IpAddr& local, uint8_t tos, std::string* error);
  int fd() const { return fd_; }
  const wire::IpAddr& local() const { return local_; }

  // Sends a frame built by wire::build_roce_frame for this socket (src = local, src port 4791,
  // IP ID 0, DF): only its UDP payload goes to the kernel.
  bool send_frame(std::span<const uint8_t> frame);

  // The frame spec fields this socket's packets must carry for their ICRC to verify at the peer.
  void fill_spec(wire::RoceFrameSpec& s, const wire::IpAddr& dst) const;

  // Non-blocking receive of one datagram; false when none is waiting.
  bool receive(Datagram* d);

  // Drops each outgoing packet with probability p (seeded): loss injection for tests and demos,
  // where netem is not available.
  void set_loss(double p, uint32_t seed);

  uint64_t sent() const { return sent_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t send_errors() const { return send_errors_; }

 private:
  int fd_ = -1;
  wire::IpAddr local_;
  uint8_t tos_ = 0;
  uint64_t sent_ = 0, send_errors_ = 0, dropped_ = 0;
  uint32_t loss_threshold_ = 0;  // of 2^32
  uint64_t rng_ = 0;
  std::vector<uint8_t> rx_;
};

}  // namespace inagg::client
