// The BPF objects built from src/xdp/bpf, as bytes inside the binary (src/xdp/embed.py).
#pragma once

#include <cstddef>

namespace inagg::xdp::embedded {
extern const unsigned char xagg_head[];  // xagg_head.bpf.c: the head program and its maps
extern const size_t xagg_head_size;
extern const unsigned char xagg_pass[];  // xagg_pass.bpf.c: XDP_PASS for a native-mode veth's peer
extern const size_t xagg_pass_size;
}  // namespace inagg::xdp::embedded
