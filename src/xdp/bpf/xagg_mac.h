/* The tier's packet MAC in BPF: SipHash-2-4 under the job's key over the header (its mac field
 * zeroed) and the values, as inagg/wire/xagg.h defines it; the C++ side is inagg/wire/xagg_mac.hpp,
 * and tests/xdp checks that both agree on random packets (BPF_PROG_TEST_RUN).
 *
 * A global function: the verifier checks it once, not at each of its callers, and its loop (up to
 * 256 iterations of two message words) works on the per-CPU scratch copy of the packet, where no
 * packet bounds are needed. eBPF has no rotate instruction: each rotation is two shifts and an or.
 * Its cost per packet is measured by bench/run xdp (docs/xdp-tier.md). */
#ifndef INAGG_XDP_BPF_MAC_H
#define INAGG_XDP_BPF_MAC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xagg_maps.h"

#define XAGG_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

#define XAGG_SIPROUND       \
  do {                      \
    v0 += v1;               \
    v1 = XAGG_ROTL(v1, 13); \
    v1 ^= v0;               \
    v0 = XAGG_ROTL(v0, 32); \
    v2 += v3;               \
    v3 = XAGG_ROTL(v3, 16); \
    v3 ^= v2;               \
    v0 += v3;               \
    v3 = XAGG_ROTL(v3, 21); \
    v3 ^= v0;               \
    v2 += v1;               \
    v1 = XAGG_ROTL(v1, 17); \
    v1 ^= v2;               \
    v2 = XAGG_ROTL(v2, 32); \
  } while (0)

/* One message word: c = 2 rounds. */
#define XAGG_SIP_ABSORB(m) \
  do {                     \
    const __u64 m_ = (m);  \
    v3 ^= m_;              \
    XAGG_SIPROUND;         \
    XAGG_SIPROUND;         \
    v0 ^= m_;              \
  } while (0)

/* The MAC of the packet copied into `m` (header and `count` values), the header's mac field read
 * as zeros; k0, k1: the job's key. count is a multiple of XAGG_VALUE_ALIGN (xagg_parse checked). */
__attribute__((noinline)) __u64 xagg_mac(const struct xagg_values* m, __u32 count, __u64 k0, __u64 k1) {
  if (!m || count > XAGG_MAX_VALUES) return 0; /* never: the callers pass the scratch, a parsed count */
  __u64 v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
  __u64 v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
  const __u64* h = (const __u64*)&m->hdr;
  XAGG_SIP_ABSORB(h[0]);
  XAGG_SIP_ABSORB(h[1]);
  XAGG_SIP_ABSORB(0); /* the mac field */
  const __u64* w = (const __u64*)m->v;
  /* Two words (4 values, XAGG_VALUE_ALIGN) per iteration. */
  for (__u32 i = 0; i < XAGG_MAX_VALUES / 2; i += 2) {
    if (2 * i >= count) break;
    XAGG_SIP_ABSORB(w[i]);
    XAGG_SIP_ABSORB(w[i + 1]);
  }
  /* The message is a whole number of words: the last one holds only its length mod 256. */
  XAGG_SIP_ABSORB((__u64)((sizeof(struct xagg_hdr) + 4 * count) & 0xff) << 56);
  v2 ^= 0xff; /* d = 4 finalization rounds */
  XAGG_SIPROUND;
  XAGG_SIPROUND;
  XAGG_SIPROUND;
  XAGG_SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

#endif
