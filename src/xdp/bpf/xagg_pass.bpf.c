/* xagg_pass: passes every frame. A veth only delivers a native-mode XDP_TX when its peer runs an
 * XDP program too (docs/xdp-tier.md), so a head in native mode on a veth needs this on the other end. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int xagg_pass(struct xdp_md* ctx) {
  (void)ctx;
  return XDP_PASS;
}
