#include "inagg/client/transport/roce_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "inagg/wire/parse.hpp"

namespace inagg::client {

RoceSocket::~RoceSocket() {
  if (fd_ >= 0) ::close(fd_);
  if (raw_fd_ >= 0) ::close(raw_fd_);
  for (const auto& [port, fd] : source_fds_) ::close(fd);
}

bool RoceSocket::add_source_port(uint16_t port, std::string* error) {
  if (port == wire::kRoceV2Port || fd_for(port) >= 0) return true;
  // Nothing is ever sent to it (RoCEv2 goes to 4791): a small receive buffer is enough.
  const int fd = open_udp(port, error);
  if (fd < 0) return false;
  const int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  source_fds_.push_back({port, fd});
  return true;
}

int RoceSocket::fd_for(uint16_t port) const {
  if (port == wire::kRoceV2Port) return fd_;
  for (const auto& [p, fd] : source_fds_)
    if (p == port) return fd;
  return -1;
}

// A non-blocking UDP socket bound to (local, port) with the options every RoCEv2 datagram needs
// (DF, the TOS); -1 with *error.
int RoceSocket::open_udp(uint16_t port, std::string* error) const {
  const bool v6 = local_.version == util::IpVersion::v6;
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  int pmtu = v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;  // DF: the ICRC covers the flags, and Linux then sends ID 0
  int tclass = tos_;
  bool ok;
  if (v6) {
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof tclass) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0;
  } else {
    ok = setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_TOS, &tclass, sizeof tclass) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0;
  }
  const int buf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (!ok) {
    *error = std::string("setsockopt: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, local_.bytes.data(), 16);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, local_.bytes.data(), 4);
    len = sizeof *a;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    char ip[INET6_ADDRSTRLEN];
    inet_ntop(v6 ? AF_INET6 : AF_INET, local_.bytes.data(), ip, sizeof ip);
    *error = std::string("cannot bind ") + ip + " UDP port " + std::to_string(port) + ": " + std::strerror(errno) +
             (errno == EADDRINUSE ? port == wire::kRoceV2Port
                                        ? " (is another worker or the kernel's RoCE driver using this address?)"
                                        : " (is another worker using this address?)"
                                  : "");
    ::close(fd);
    return -1;
  }
  return fd;
}

bool RoceSocket::open(const util::IpAddr& local, uint8_t tos, std::string* error) {
  local_ = local;
  tos_ = tos;
  fd_ = open_udp(wire::kRoceV2Port, error);
  if (fd_ < 0) return false;
  rx_.assign(size_t{kRxBatch} * kSlot, 0);
  rx_from_.assign(kRxBatch, {});
  rx_ctl_.assign(kRxBatch, {});
  rx_msgs_.assign(kRxBatch, {});
  rx_iov_.assign(kRxBatch, {});
  tx_.assign(size_t{kBatch} * kSlot, 0);
  tx_to_.assign(kBatch, {});
  tx_fd_.assign(kBatch, -1);
  tx_msgs_.assign(kBatch, {});
  tx_iov_.assign(kBatch, {});
  return true;
}

bool RoceSocket::receive_ip_headers(std::string* error) {
  if (local_.version != util::IpVersion::v4 || raw_fd_ >= 0) return true;
  const int fd = ::socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) {
    *error = std::string("cannot open a raw IPv4 socket to receive RoCEv2 with its IP headers: ") +
             std::strerror(errno) +
             (errno == EPERM ? " (it needs CAP_NET_RAW: run as root, or give inagg-worker cap_net_raw)" : "");
    return false;
  }
  // Only UDP to port 4791 (a raw socket's data starts at the IP header), only to our address (bind).
  sock_filter only_roce[] = {
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),                        // x = IP header length
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),                         // the UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, wire::kRoceV2Port, 0, 1),  //
      BPF_STMT(BPF_RET | BPF_K, 0xffff),                             // all of it
      BPF_STMT(BPF_RET | BPF_K, 0),                                  // not RoCEv2
  };
  sock_filter nothing[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
  const sock_fprog roce{static_cast<unsigned short>(std::size(only_roce)), only_roce};
  const sock_fprog none{1, nothing};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::memcpy(&a.sin_addr, local_.bytes.data(), 4);
  const int buf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &roce, sizeof roce) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      // The UDP socket's own copies: dropped by the kernel (the namespace's Udp InErrors counts them).
      setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &none, sizeof none) != 0) {
    *error = std::string("cannot set up the raw IPv4 socket for RoCEv2: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  // What the UDP socket had queued before the filter: its headers are unknown now; RC recovers it.
  for (char b[1]; ::recv(fd_, b, sizeof b, MSG_DONTWAIT) >= 0;) {}
  raw_fd_ = fd;
  rx_next_ = rx_count_ = 0;
  return true;
}

void RoceSocket::set_batching(bool on) {
  if (!on) flush();
  batching_ = on;
}

void RoceSocket::flush() {
  unsigned done = 0;
  while (done < tx_count_) {
    unsigned run = 1;  // the datagrams in a row that leave by the same socket (source port)
    while (done + run < tx_count_ && tx_fd_[done + run] == tx_fd_[done]) ++run;
    const int k = ::sendmmsg(tx_fd_[done], tx_msgs_.data() + done, run, 0);
    ++send_calls_;
    if (k <= 0) {  // ENOBUFS and friends for the first one left: the same as a loss, RC recovers
      ++send_errors_;
      ++done;
      continue;
    }
    sent_ += static_cast<unsigned>(k);
    done += static_cast<unsigned>(k);
  }
  tx_count_ = 0;
  tx_bytes_ = 0;
}

size_t RoceSocket::queued_bytes() const {
  int n = 0;
  if (::ioctl(fd_, SIOCOUTQ, &n) != 0 || n < 0) n = 0;
  return static_cast<size_t>(n) + tx_bytes_;
}

void RoceSocket::fill_spec(wire::RoceFrameSpec& s, const util::IpAddr& dst, uint16_t src_port) const {
  s.src_ip = local_;
  s.dst_ip = dst;
  s.src_port = src_port;
  s.ip_id = 0;
  s.dont_fragment = true;
  s.tos = tos_;
  s.flow_label = 0;
}

void RoceSocket::set_loss(double p, uint32_t seed) {
  loss_threshold_ = p <= 0 ? 0 : p >= 1 ? UINT32_MAX : static_cast<uint32_t>(p * 4294967296.0);
  rng_ = seed * 0x9e3779b97f4a7c15ull + 1;
}

bool RoceSocket::send_frame(std::span<const uint8_t> frame) {
  if (loss_threshold_) {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    if (static_cast<uint32_t>(rng_ >> 32) < loss_threshold_) {
      ++dropped_;
      return true;  // lost on the wire, as far as the sender can tell
    }
  }
  wire::Layout l;
  if (wire::parse_frame(frame, l) != wire::ParseStatus::roce) {
    ++send_errors_;
    return false;
  }
  sockaddr_storage ss{};
  socklen_t len;
  const uint8_t* ip = frame.data() + l.l3;
  if (l.ip == util::IpVersion::v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(wire::kRoceV2Port);
    std::memcpy(&a->sin6_addr, ip + 24, 16);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&a->sin_addr, ip + 16, 4);
    len = sizeof *a;
  }
  const int fd = fd_for(wire::load_be16(frame.data() + l.l4));
  if (fd < 0) {  // a source port no socket was bound to (add_source_port)
    ++send_errors_;
    return false;
  }
  const uint8_t* payload = frame.data() + l.l4 + wire::kUdpHeaderLen;
  const size_t n = l.end - (l.l4 + wire::kUdpHeaderLen);
  if (batching_ && n <= kSlot) {
    const unsigned i = tx_count_++;
    uint8_t* slot = tx_.data() + size_t{i} * kSlot;
    std::memcpy(slot, payload, n);
    tx_to_[i] = ss;
    tx_fd_[i] = fd;
    tx_iov_[i] = {slot, n};
    tx_bytes_ += n;
    tx_msgs_[i] = {};
    tx_msgs_[i].msg_hdr.msg_name = &tx_to_[i];
    tx_msgs_[i].msg_hdr.msg_namelen = len;
    tx_msgs_[i].msg_hdr.msg_iov = &tx_iov_[i];
    tx_msgs_[i].msg_hdr.msg_iovlen = 1;
    if (tx_count_ == kBatch) flush();
    return true;
  }
  ++send_calls_;
  if (::sendto(fd, payload, n, 0, reinterpret_cast<sockaddr*>(&ss), len) != static_cast<ssize_t>(n)) {
    ++send_errors_;  // ENOBUFS and friends: the same as a loss, RC recovers
    return false;
  }
  ++sent_;
  return true;
}

bool RoceSocket::receive(Datagram* d) {
  while (rx_next_ == rx_count_) {
    for (unsigned i = 0; i < kRxBatch; ++i) {
      rx_iov_[i] = {rx_.data() + size_t{i} * kSlot, kSlot};
      msghdr& h = rx_msgs_[i].msg_hdr;
      h = {};
      h.msg_name = &rx_from_[i];
      h.msg_namelen = sizeof rx_from_[i];
      h.msg_iov = &rx_iov_[i];
      h.msg_iovlen = 1;
      h.msg_control = rx_ctl_[i].data();
      h.msg_controllen = rx_ctl_[i].size();
    }
    const int k = ::recvmmsg(fd(), rx_msgs_.data(), kRxBatch, MSG_DONTWAIT, nullptr);
    if (k <= 0) return false;
    ++receive_calls_;
    rx_next_ = 0;
    rx_count_ = static_cast<unsigned>(k);
  }
  const unsigned i = rx_next_++;
  const mmsghdr& m = rx_msgs_[i];
  if (m.msg_hdr.msg_flags & MSG_TRUNC) {  // larger than any RoCE packet: not one of ours
    d->frame.clear();
    d->roce = false;
    return true;
  }
  if (raw_fd_ >= 0)
    decode_raw(i, m.msg_len, d);
  else
    decode(i, m.msg_len, d);
  return true;
}

// Datagram `slot` of a raw socket's batch (n bytes from the IPv4 header on): the frame is that
// header and what follows, as they arrived, behind an Ethernet header.
void RoceSocket::decode_raw(unsigned slot, size_t n, Datagram* d) {
  const uint8_t* ip = rx_.data() + size_t{slot} * kSlot;
  d->roce = false;
  d->frame.clear();
  const size_t ihl = n >= wire::kIpv4HeaderLen ? size_t{ip[0] & 0x0fu} * 4 : 0;
  if (ihl < wire::kIpv4HeaderLen || (ip[0] >> 4) != 4 || n < ihl + wire::kUdpHeaderLen) return;
  const size_t len = std::min<size_t>(n, wire::load_be16(ip + 2));
  if (len < ihl + wire::kUdpHeaderLen) return;
  d->src.version = d->dst.version = util::IpVersion::v4;
  d->src.bytes = {};
  d->dst.bytes = {};
  std::memcpy(d->src.bytes.data(), ip + 12, 4);
  std::memcpy(d->dst.bytes.data(), ip + 16, 4);
  d->tos = ip[1];
  d->src_port = wire::load_be16(ip + ihl);
  d->frame.assign(wire::kEthHeaderLen + len, 0);
  wire::store_be16(d->frame.data() + 12, wire::kEtherTypeIpv4);
  std::memcpy(d->frame.data() + wire::kEthHeaderLen, ip, len);
  d->roce = wire::parse_frame(d->frame, d->layout) == wire::ParseStatus::roce;
}

// Rebuilds datagram `slot` of the receive batch (n bytes) as the frame its sender's kernel sent.
void RoceSocket::decode(unsigned slot, size_t n, Datagram* d) {
  msghdr& msg = rx_msgs_[slot].msg_hdr;
  const sockaddr_storage& from = rx_from_[slot];
  const bool v6 = local_.version == util::IpVersion::v6;
  d->src.version = d->dst.version = local_.version;
  d->dst = local_;
  d->tos = 0;
  if (v6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&from);
    std::memcpy(d->src.bytes.data(), &a->sin6_addr, 16);
    d->src_port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<const sockaddr_in*>(&from);
    d->src.bytes = {};
    std::memcpy(d->src.bytes.data(), &a->sin_addr, 4);
    d->src_port = ntohs(a->sin_port);
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (!v6 && c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      auto* pi = reinterpret_cast<in_pktinfo*>(CMSG_DATA(c));
      std::memcpy(d->dst.bytes.data(), &pi->ipi_addr, 4);
    } else if (!v6 && c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      d->tos = *reinterpret_cast<uint8_t*>(CMSG_DATA(c));
    } else if (v6 && c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      auto* pi = reinterpret_cast<in6_pktinfo*>(CMSG_DATA(c));
      std::memcpy(d->dst.bytes.data(), &pi->ipi6_addr, 16);
    } else if (v6 && c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      d->tos = static_cast<uint8_t>(*reinterpret_cast<int*>(CMSG_DATA(c)));
    }
  }
  // Rebuild the headers the ICRC covers, as the sender's kernel wrote them.
  const size_t l3 = wire::kEthHeaderLen, iplen = v6 ? wire::kIpv6HeaderLen : wire::kIpv4HeaderLen;
  const size_t udp_len = wire::kUdpHeaderLen + n;
  d->frame.assign(l3 + iplen + udp_len, 0);
  uint8_t* f = d->frame.data();
  wire::store_be16(f + 12, v6 ? wire::kEtherTypeIpv6 : wire::kEtherTypeIpv4);
  uint8_t* ip = f + l3;
  if (v6) {
    wire::store_be32(ip, 6u << 28 | static_cast<uint32_t>(d->tos) << 20);
    wire::store_be16(ip + 4, static_cast<uint16_t>(udp_len));
    ip[6] = wire::kIpProtoUdp;
    ip[7] = 64;
    std::memcpy(ip + 8, d->src.bytes.data(), 16);
    std::memcpy(ip + 24, d->dst.bytes.data(), 16);
  } else {
    ip[0] = 0x45;
    ip[1] = d->tos;
    wire::store_be16(ip + 2, static_cast<uint16_t>(iplen + udp_len));
    wire::store_be16(ip + 6, 0x4000);
    ip[8] = 64;
    ip[9] = wire::kIpProtoUdp;
    std::memcpy(ip + 12, d->src.bytes.data(), 4);
    std::memcpy(ip + 16, d->dst.bytes.data(), 4);
  }
  uint8_t* udp = ip + iplen;
  wire::store_be16(udp, d->src_port);
  wire::store_be16(udp + 2, wire::kRoceV2Port);
  wire::store_be16(udp + 4, static_cast<uint16_t>(udp_len));
  std::memcpy(udp + wire::kUdpHeaderLen, rx_.data() + size_t{slot} * kSlot, n);
  d->roce = wire::parse_frame(d->frame, d->layout) == wire::ParseStatus::roce;
}

}  // namespace inagg::client
