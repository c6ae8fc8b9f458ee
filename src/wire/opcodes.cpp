#include "inagg/wire/opcodes.hpp"

#include <array>

namespace inagg::wire {
namespace {

using K = OpKind;
using P = OpPosition;

// Extension header sizes, IBTA Vol 1 §9.3.
constexpr uint8_t kReth = 16, kImm = 4, kAeth = 4, kIeth = 4, kDeth = 8, kAtomicEth = 28, kAtomicAck = 8,
                  kCnpReserved = 16;

struct Entry {
  uint8_t opcode;
  OpcodeInfo info;
};

constexpr OpcodeInfo make(std::string_view name, K kind, P pos, bool reth, bool imm, bool aeth, bool ieth = false,
                          bool deth = false, bool atomic = false, bool atomic_ack = false, uint8_t extra = 0) {
  const bool payload = kind == K::send || kind == K::write || kind == K::read_response;
  const uint8_t ext =
      static_cast<uint8_t>((reth ? kReth : 0) + (imm ? kImm : 0) + (aeth ? kAeth : 0) + (ieth ? kIeth : 0) +
                           (deth ? kDeth : 0) + (atomic ? kAtomicEth : 0) + (atomic_ack ? kAtomicAck : 0) + extra);
  return {name, kind, pos, reth, imm, aeth, ieth, deth, atomic, atomic_ack, payload, ext};
}

// SEND and RDMA WRITE exist for RC and UC; the rest of the table is RC only (plus UD SEND_ONLY and
// CNP, which inagg only ever passes through).
#define INAGG_SEND_WRITE(T, base)                                                                                   \
  {base | op::kSendFirst, make(T "_SEND_FIRST", K::send, P::first, false, false, false)},                           \
      {base | op::kSendMiddle, make(T "_SEND_MIDDLE", K::send, P::middle, false, false, false)},                    \
      {base | op::kSendLast, make(T "_SEND_LAST", K::send, P::last, false, false, false)},                          \
      {base | op::kSendLastImm, make(T "_SEND_LAST_WITH_IMMEDIATE", K::send, P::last, false, true, false)},         \
      {base | op::kSendOnly, make(T "_SEND_ONLY", K::send, P::only, false, false, false)},                          \
      {base | op::kSendOnlyImm, make(T "_SEND_ONLY_WITH_IMMEDIATE", K::send, P::only, false, true, false)},         \
      {base | op::kWriteFirst, make(T "_RDMA_WRITE_FIRST", K::write, P::first, true, false, false)},                \
      {base | op::kWriteMiddle, make(T "_RDMA_WRITE_MIDDLE", K::write, P::middle, false, false, false)},            \
      {base | op::kWriteLast, make(T "_RDMA_WRITE_LAST", K::write, P::last, false, false, false)},                  \
      {base | op::kWriteLastImm, make(T "_RDMA_WRITE_LAST_WITH_IMMEDIATE", K::write, P::last, false, true, false)}, \
      {base | op::kWriteOnly, make(T "_RDMA_WRITE_ONLY", K::write, P::only, true, false, false)}, {                 \
    base | op::kWriteOnlyImm, make(T "_RDMA_WRITE_ONLY_WITH_IMMEDIATE", K::write, P::only, true, true, false)       \
  }

constexpr Entry kEntries[] = {
    INAGG_SEND_WRITE("RC", op::kRc),
    {op::kRc | op::kReadRequest, make("RC_RDMA_READ_REQUEST", K::read_request, P::none, true, false, false)},
    {op::kRc | op::kReadResponseFirst,
     make("RC_RDMA_READ_RESPONSE_FIRST", K::read_response, P::first, false, false, true)},
    {op::kRc | op::kReadResponseMiddle,
     make("RC_RDMA_READ_RESPONSE_MIDDLE", K::read_response, P::middle, false, false, false)},
    {op::kRc | op::kReadResponseLast,
     make("RC_RDMA_READ_RESPONSE_LAST", K::read_response, P::last, false, false, true)},
    {op::kRc | op::kReadResponseOnly,
     make("RC_RDMA_READ_RESPONSE_ONLY", K::read_response, P::only, false, false, true)},
    {op::kRc | op::kAcknowledge, make("RC_ACKNOWLEDGE", K::acknowledge, P::none, false, false, true)},
    {op::kRc | op::kAtomicAcknowledge,
     make("RC_ATOMIC_ACKNOWLEDGE", K::atomic_ack, P::none, false, false, true, false, false, false, true)},
    {op::kRc | op::kCompareSwap, make("RC_CMP_SWAP", K::atomic, P::none, false, false, false, false, false, true)},
    {op::kRc | op::kFetchAdd, make("RC_FETCH_ADD", K::atomic, P::none, false, false, false, false, false, true)},
    {op::kRc | op::kSendLastInv, make("RC_SEND_LAST_WITH_INVALIDATE", K::send, P::last, false, false, false, true)},
    {op::kRc | op::kSendOnlyInv, make("RC_SEND_ONLY_WITH_INVALIDATE", K::send, P::only, false, false, false, true)},
    INAGG_SEND_WRITE("UC", op::kUc),
    {op::kUd | op::kSendOnly, make("UD_SEND_ONLY", K::send, P::only, false, false, false, false, true)},
    {op::kUd | op::kSendOnlyImm,
     make("UD_SEND_ONLY_WITH_IMMEDIATE", K::send, P::only, false, true, false, false, true)},
    {op::kCnp, make("CNP", K::cnp, P::none, false, false, false, false, false, false, false, kCnpReserved)},
};
#undef INAGG_SEND_WRITE

using Table = std::array<const OpcodeInfo*, 256>;

const Table& table() {
  static const Table t = [] {
    Table tab{};
    for (const Entry& e : kEntries) tab[e.opcode] = &e.info;
    return tab;
  }();
  return t;
}

}  // namespace

const OpcodeInfo* opcode_info(uint8_t opcode) { return table()[opcode]; }

std::string_view opcode_name(uint8_t opcode) {
  const OpcodeInfo* info = opcode_info(opcode);
  return info ? info->name : std::string_view("UNKNOWN");
}

}  // namespace inagg::wire
