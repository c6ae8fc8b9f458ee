// InfiniBand BTH opcodes as RoCEv2 carries them, with the extension headers each one implies.
#pragma once

#include <cstdint>
#include <string_view>

namespace inagg::wire {

// Opcode = transport (top 3 bits) | operation (low 5 bits), IBTA Vol 1 §9.2.
namespace op {
inline constexpr uint8_t kRc = 0x00, kUc = 0x20, kRd = 0x40, kUd = 0x60;
inline constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendLastImm = 0x03, kSendOnly = 0x04,
                         kSendOnlyImm = 0x05, kWriteFirst = 0x06, kWriteMiddle = 0x07, kWriteLast = 0x08,
                         kWriteLastImm = 0x09, kWriteOnly = 0x0a, kWriteOnlyImm = 0x0b, kReadRequest = 0x0c,
                         kReadResponseFirst = 0x0d, kReadResponseMiddle = 0x0e, kReadResponseLast = 0x0f,
                         kReadResponseOnly = 0x10, kAcknowledge = 0x11, kAtomicAcknowledge = 0x12, kCompareSwap = 0x13,
                         kFetchAdd = 0x14, kSendLastInv = 0x16, kSendOnlyInv = 0x17;
inline constexpr uint8_t kCnp = 0x81;  // RoCEv2 congestion notification packet
}  // namespace op

// What a packet of this opcode does.
enum class OpKind : uint8_t { send, write, read_request, read_response, acknowledge, atomic, atomic_ack, cnp };

// Where it sits in a multi-packet message.
enum class OpPosition : uint8_t { first, middle, last, only, none };

struct OpcodeInfo {
  std::string_view name;  // e.g. "RC_RDMA_WRITE_FIRST" (scapy's and Wireshark's spelling)
  OpKind kind;
  OpPosition position;
  bool has_reth;         // RDMA extended transport header, 16 bytes
  bool has_immdt;        // immediate data, 4 bytes
  bool has_aeth;         // ACK extended transport header, 4 bytes
  bool has_ieth;         // invalidate, 4 bytes
  bool has_deth;         // datagram (UD), 8 bytes
  bool has_atomic_eth;   // 28 bytes
  bool has_atomic_ack;   // 8 bytes
  bool carries_payload;  // SEND, WRITE, READ response
  uint8_t ext_bytes;     // total extension header bytes after the BTH (CNP: its 16 reserved bytes)
};

// nullptr for an opcode inagg does not know (RD, UD other than SEND_ONLY, vendor ranges, ...).
const OpcodeInfo* opcode_info(uint8_t opcode);

// "RC_RDMA_WRITE_FIRST", or "UNKNOWN_0xNN" is not built: unknown opcodes give "UNKNOWN".
std::string_view opcode_name(uint8_t opcode);

inline constexpr bool is_rdma_write(uint8_t opcode) {
  const uint8_t t = opcode & 0xe0, o = opcode & 0x1f;
  return (t == op::kRc || t == op::kUc) && o >= op::kWriteFirst && o <= op::kWriteOnlyImm;
}

}  // namespace inagg::wire
