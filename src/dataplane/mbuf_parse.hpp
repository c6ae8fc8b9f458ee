// A frame's parse, carried with its mbuf in the pool's private area (as VPP carries vnet_buffer()
// opaque data), so that a RoCEv2 frame is parsed once: by the lcore that received it, also when it
// hands the frame to the lcore that owns its job.
#pragma once

#include <rte_mbuf.h>

#include "inagg/wire/parse.hpp"

namespace inagg::dataplane {

struct MbufParse {
  wire::Layout layout;
  wire::ParseStatus status = wire::ParseStatus::not_ip;
};

// Every pool the ports receive into reserves this much private space per mbuf: whole cache lines,
// so that the packet data behind it (after the headroom) stay cache-line aligned, as without one.
inline constexpr uint16_t kMbufPrivSize = RTE_ALIGN(sizeof(MbufParse), RTE_CACHE_LINE_SIZE);
static_assert(kMbufPrivSize % RTE_MBUF_PRIV_ALIGN == 0);

// The parse area of an mbuf from such a pool; nullptr for an mbuf from a pool without one.
inline MbufParse* mbuf_parse(rte_mbuf* m) {
  return m->priv_size >= sizeof(MbufParse) ? static_cast<MbufParse*>(rte_mbuf_to_priv(m)) : nullptr;
}

}  // namespace inagg::dataplane
