// RoCEv2 over a kernel UDP socket, as the software workers speak it: the kernel writes
// the IP and UDP headers, inagg the BTH onward, including the ICRC, which covers those IP/UDP
// headers. So the sender fixes the fields the ICRC covers but the kernel chooses: DF is set and
// the socket stays unconnected, which makes Linux send IP ID 0; the source port is the bound
// port, 4791, or for a QP given a source port of its own (a channel's, as a NIC takes each QP's
// from its flow label so that RSS spreads them) that of a send-only socket bound to it. The receiver rebuilds the same
// headers (from the datagram's addresses, length and TOS) to verify the ICRC with the wire layer.
//
// A peer that is a NIC does not send IP ID 0: the kernel's Soft-RoCE (rdma_rxe) sends the IDs
// of the kernel's IP stack, and the ICRC covers the ID, which a UDP socket never shows. With
// receive_ip_headers() on, datagrams are taken from a raw IPv4 socket instead, which delivers them
// with their IP header as it arrived; the UDP socket keeps the port (so the kernel answers no
// ICMP port unreachable) and a socket filter drops its own copies.
//
// System calls are batched: receive() takes what recvmmsg() brought in one call, and with
// batching on, send_frame() queues datagrams that flush() (or a full queue) hands to the kernel in
// one sendmmsg().
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inagg/wire/build.hpp"

namespace inagg::client {

struct Datagram {
  util::IpAddr src, dst;
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
  bool open(const util::IpAddr& local, uint8_t tos, std::string* error);
  // The socket receive() reads: wait on it for datagrams.
  int fd() const { return raw_fd_ >= 0 ? raw_fd_ : fd_; }
  // IPv4: from now on, datagrams come with the IP header their sender's stack wrote (a raw socket,
  // which needs CAP_NET_RAW), so a peer's ICRC over a non-zero IP ID verifies. IPv6 has no ID (the
  // flow label the ICRC masks): nothing to do. False with *error when the raw socket is refused.
  bool receive_ip_headers(std::string* error);
  const util::IpAddr& local() const { return local_; }

  // Binds a send-only socket to (local, port) for the frames whose UDP source port is `port`. False
  // with *error (the port in use).
  bool add_source_port(uint16_t port, std::string* error);

  // Sends a frame built by wire::build_roce_frame for this socket (src = local, src port 4791 or
  // one add_source_port() bound, IP ID 0, DF): only its UDP payload goes to the kernel, at once or,
  // with batching on, at the next flush(). A frame from another source port is refused (false,
  // send_errors()).
  bool send_frame(std::span<const uint8_t> frame);

  // With batching on, send_frame() queues up to kBatch datagrams; the caller must flush() before
  // it waits. Off (the default): every send_frame() is one sendto().
  static constexpr unsigned kBatch = 64;
  void set_batching(bool on);
  // Sends what send_frame() queued (sendmmsg). A datagram the kernel refuses counts as an error,
  // which to RC is a loss.
  void flush();

  // The frame spec fields this socket's packets must carry for their ICRC to verify at the peer.
  void fill_spec(wire::RoceFrameSpec& s, const util::IpAddr& dst, uint16_t src_port = wire::kRoceV2Port) const;

  // Non-blocking receive of one datagram (from a recvmmsg() batch); false when none is waiting.
  bool receive(Datagram* d);

  // Drops each outgoing packet with probability p (seeded): loss injection for tests and demos,
  // where netem is not available.
  void set_loss(double p, uint32_t seed);

  uint64_t sent() const { return sent_; }
  uint64_t dropped() const { return dropped_; }
  // Bytes of this socket's datagrams the kernel holds but has not handed to a device yet (a
  // qdisc's queue, e.g. a rate-limiting tbf), plus those queued for flush(): SIOCOUTQ.
  size_t queued_bytes() const;

  uint64_t send_errors() const { return send_errors_; }
  uint64_t send_calls() const { return send_calls_; }        // sendto/sendmmsg system calls
  uint64_t receive_calls() const { return receive_calls_; }  // recvmmsg system calls that returned datagrams

 private:
  static constexpr unsigned kRxBatch = 32;
  static constexpr size_t kSlot = 9216;  // a datagram slot: RoCE MTU 4096 and then some
  void decode(unsigned slot, size_t n, Datagram* d);
  int open_udp(uint16_t port, std::string* error) const;
  int fd_for(uint16_t src_port) const;                    // -1: no socket sends from it
  void decode_raw(unsigned slot, size_t n, Datagram* d);  // a raw socket's IPv4 datagram

  int fd_ = -1, raw_fd_ = -1;
  std::vector<std::pair<uint16_t, int>> source_fds_;  // add_source_port(): port, send-only socket
  util::IpAddr local_;
  uint8_t tos_ = 0;
  uint64_t sent_ = 0, send_errors_ = 0, dropped_ = 0, send_calls_ = 0, receive_calls_ = 0;
  uint32_t loss_threshold_ = 0;  // of 2^32
  uint64_t rng_ = 0;
  // Receive batch: kRxBatch slots, their addresses and control data; [rx_next_, rx_count_) waits.
  std::vector<uint8_t> rx_;
  std::vector<sockaddr_storage> rx_from_;
  std::vector<std::array<char, 256>> rx_ctl_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iov_;
  unsigned rx_next_ = 0, rx_count_ = 0;
  // Send queue (batching on): kBatch slots.
  bool batching_ = false;
  std::vector<uint8_t> tx_;
  std::vector<sockaddr_storage> tx_to_;
  std::vector<int> tx_fd_;  // the socket each queued datagram leaves by
  std::vector<mmsghdr> tx_msgs_;
  std::vector<iovec> tx_iov_;
  unsigned tx_count_ = 0;
  size_t tx_bytes_ = 0;
};

}  // namespace inagg::client
