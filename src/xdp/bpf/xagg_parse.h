/* Packet parsing and rewriting helpers of the head program. */
#ifndef INAGG_XDP_BPF_PARSE_H
#define INAGG_XDP_BPF_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "inagg/xdp/xagg_shared.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "values are little-endian int32 and are added without conversion: little-endian hosts only"
#endif

struct vlan_tag {
  __be16 tci;
  __be16 proto;
};

/* Where the headers of a packet of the tier are. */
struct xagg_pkt {
  struct ethhdr* eth;
  struct iphdr* ip;
  struct udphdr* udp;
  struct xagg_hdr* hdr;
  __u32 hdr_off; /* offset of the header from the frame's start: the header and values follow */
  __u32 count;
};

enum xagg_parse_result {
  XAGG_NOT_OURS,  /* not IPv4/UDP to the tier's port: pass it on */
  XAGG_MALFORMED, /* to the tier's port but unusable: count and drop */
  XAGG_OK,
};

/* Parses Ethernet [one 802.1Q tag] / IPv4 without options / UDP to `port` / xagg_hdr, and checks
 * that the UDP length is exactly the header plus `count` values and that the frame holds them. */
static __always_inline enum xagg_parse_result xagg_parse(void* data, void* data_end, __be16 port, struct xagg_pkt* p) {
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end) return XAGG_NOT_OURS;
  void* l3 = eth + 1;
  __be16 proto = eth->h_proto;
  if (proto == bpf_htons(ETH_P_8021Q)) {
    struct vlan_tag* v = l3;
    if ((void*)(v + 1) > data_end) return XAGG_NOT_OURS;
    proto = v->proto;
    l3 = v + 1;
  }
  if (proto != bpf_htons(ETH_P_IP)) return XAGG_NOT_OURS;
  struct iphdr* ip = l3;
  if ((void*)(ip + 1) > data_end) return XAGG_NOT_OURS;
  if (ip->protocol != IPPROTO_UDP) return XAGG_NOT_OURS;
  if (ip->frag_off & bpf_htons(0x3fff)) return XAGG_NOT_OURS; /* fragments: the stack's business */
  struct udphdr* udp = (void*)(ip + 1);
  if (ip->ihl != 5) {
    /* Options move the UDP header; the tier's senders never use them. Only ours are counted. */
    return XAGG_NOT_OURS;
  }
  if ((void*)(udp + 1) > data_end) return XAGG_NOT_OURS;
  if (udp->dest != port) return XAGG_NOT_OURS;
  struct xagg_hdr* h = (void*)(udp + 1);
  if ((void*)(h + 1) > data_end) return XAGG_MALFORMED;
  if (h->version != XAGG_VERSION || (h->type != XAGG_DATA && h->type != XAGG_RESULT)) return XAGG_MALFORMED;
  __u32 count = bpf_ntohs(h->count);
  if (count == 0 || count > XAGG_MAX_VALUES || count % XAGG_VALUE_ALIGN) return XAGG_MALFORMED;
  if (bpf_ntohs(udp->len) != sizeof(*udp) + sizeof(*h) + count * 4) return XAGG_MALFORMED;
  if ((void*)(h + 1) + count * 4 > data_end) return XAGG_MALFORMED;
  p->eth = eth;
  p->ip = ip;
  p->udp = udp;
  p->hdr = h;
  p->hdr_off = (void*)h - data;
  p->count = count;
  return XAGG_OK;
}

static __always_inline __u16 ipv4_checksum(struct iphdr* ip) {
  __u32 sum = 0;
  __u16* w = (__u16*)ip;
  ip->check = 0;
#pragma clang loop unroll(full)
  for (int i = 0; i < (int)(sizeof(*ip) / 2); i++) sum += w[i];
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return (__u16)~sum;
}

/* Readdresses the packet in place (same length): Ethernet and IPv4 addresses, TTL, checksums;
 * both UDP ports become the tier's port; the UDP checksum is left out (0), as IPv4 allows. */
static __always_inline void xagg_readdress(struct xagg_pkt* p, const __u8* src_mac, const __u8* dst_mac, __be32 src_ip,
                                           __be32 dst_ip, __be16 port) {
  __builtin_memcpy(p->eth->h_source, src_mac, ETH_ALEN);
  __builtin_memcpy(p->eth->h_dest, dst_mac, ETH_ALEN);
  p->ip->saddr = src_ip;
  p->ip->daddr = dst_ip;
  p->ip->ttl = 64;
  p->ip->check = ipv4_checksum(p->ip);
  p->udp->source = port;
  p->udp->dest = port;
  p->udp->check = 0;
}

#endif
