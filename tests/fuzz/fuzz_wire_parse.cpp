// libFuzzer: the wire parser on any bytes. Each input is copied into a heap buffer of exactly its
// size, so ASan catches a one-byte over-read. Invariants: a RoCEv2 verdict's offsets lie inside the
// frame and in order, and its ICRC can be computed in bounds; whenever the parser reached a BTH
// the datapath's pre-filter passes the frame (else a packet the engine must drop could be bridged
// raw) and the destination it names lies inside the frame.
#include <cstring>
#include <memory>

#include "check.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"

using namespace inagg::wire;
using inagg::util::IpVersion;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(buf.get(), data, size);
  const uint8_t* f = buf.get();
  Layout l;
  const ParseStatus st = parse_frame({f, size}, l);
  FUZZ_CHECK(!parse_status_name(st).empty(), "status %d has no name", static_cast<int>(st));
  if (st == ParseStatus::roce) {
    FUZZ_CHECK(l.info != nullptr, "no opcode info");
    FUZZ_CHECK(l.end <= size, "end %u past the frame (%zu)", l.end, size);
    FUZZ_CHECK(l.l3 < l.l4 && l.l4 < l.bth && l.bth < l.payload && l.payload <= l.icrc && l.icrc + 4u == l.end,
               "offsets out of order: l3 %u l4 %u bth %u payload %u icrc %u end %u", l.l3, l.l4, l.bth, l.payload,
               l.icrc, l.end);
    FUZZ_CHECK(static_cast<size_t>(l.payload) + l.padded_payload_len() == l.icrc, "payload %u + %zu != icrc %u",
               l.payload, l.padded_payload_len(), l.icrc);
    (void)icrc_verify(f, l);
    (void)bth_of(f, l).psn();
    if (l.aeth) (void)aeth_of(f, l).msn();
    if (l.reth) (void)reth_of(f, l).dma_len();
  }
  if (l.bth) {
    FUZZ_CHECK(is_roce_candidate({f, size}), "status %s reached the BTH but the pre-filter says not RoCE",
               parse_status_name(st).data());
    RoceDestination d;
    FUZZ_CHECK(roce_destination(f, l, &d), "BTH but no destination");
    FUZZ_CHECK(d.addr >= f && d.addr + (d.ip == IpVersion::v4 ? 4 : 16) <= f + size,
               "destination address outside the frame");
    FUZZ_CHECK(static_cast<size_t>(l.bth) + 12 <= size, "BTH past the frame");
  }
  return 0;
}
