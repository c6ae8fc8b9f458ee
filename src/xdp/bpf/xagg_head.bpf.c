/* xagg_head: the aggregation head of the XDP tier (ALEPH), one program per head interface.
 *
 * DATA from a member (from its bound address, with a valid MAC under the job's key) is added into
 * its chunk's slot under the slot's lock, once per rank (the arrival bitmap). The member that
 * completes the slot gets its own packet back rewritten: as the group's RESULT, multicast to the
 * group (top head), or as this head's DATA to the parent, carrying the group's weight (a head below
 * the top). Late DATA of a member that already contributed is answered from the slot: with the
 * retained RESULT, unicast to the member's bound address, or, while the parent's result is still
 * missing, by sending the partial sum up again, so a lost packet anywhere in the tree is recovered
 * by the leaves' own retransmissions. A RESULT from the parent finishes the slot and is multicast
 * down to the group. Everything the head sends carries its MAC (inagg/wire/xagg.h); a DATA or
 * RESULT without a valid one is dropped and counted. Everything else passes to the stack untouched.
 *
 * Maps (xagg_maps.h) are the only interface to the agent; layouts and counters are in
 * include/inagg/xdp/xagg_shared.h (the wire format: include/inagg/wire/xagg.h).
 */
#include <linux/pkt_cls.h>
#include <stddef.h>

#include "xagg_mac.h"
#include "xagg_maps.h"
#include "xagg_parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline void bump(struct xagg_counters* c, enum xagg_counter k) {
  if (c) c->c[k]++;
}

static __always_inline struct xagg_counters* counters_of(__u32 row) { return bpf_map_lookup_elem(&xagg_stats, &row); }

/* The slot loops run under the slot's lock, where no calls are allowed, between the slot and the
 * packet copied into a per-CPU scratch value (xagg_scratch): map memory needs no packet
 * bounds checks, which would make the verifier walk each exit of these loops separately (600k
 * instructions and 5 s to load, against 100k and 0.1 s). They add two int32 lanes per 64-bit word
 * with the carry between them cut (SWAR): the same wrapping sums as 32-bit adds, in fewer
 * instructions, 16 values per iteration. */
#define LANE_HIGH 0x8000000080000000ULL

static __always_inline __u64 add_lanes(__u64 a, __u64 b) {
  return ((a & ~LANE_HIGH) + (b & ~LANE_HIGH)) ^ ((a ^ b) & LANE_HIGH);
}

enum slot_op {
  SLOT_LOAD,      /* acc = values */
  SLOT_STORE,     /* values = acc */
  SLOT_ADD,       /* acc += values */
  SLOT_ADD_STORE, /* acc += values, values = acc: the completing member's packet becomes the result */
};

/* Words (two values each) per iteration. The last iteration may run past `count` into values no
 * packet carries (count is a multiple of 4, the arrays hold XAGG_MAX_VALUES, a multiple of
 * 2 * WORDS): harmless, since only `count` values ever leave the slot. */
#define WORDS 8

static __always_inline void slot_values(struct xagg_slot* s, struct xagg_values* sc, __u32 count, enum slot_op op) {
  __u64 *acc = (__u64*)s->acc, *v = (__u64*)sc->v;
  for (__u32 i = 0; i < XAGG_MAX_VALUES / 2; i += WORDS) {
    if (2 * i >= count) break;
#pragma clang loop unroll(full)
    for (__u32 k = i; k < i + WORDS; k++) {
      switch (op) {
        case SLOT_LOAD:
          acc[k] = v[k];
          break;
        case SLOT_STORE:
          v[k] = acc[k];
          break;
        case SLOT_ADD:
          acc[k] = add_lanes(acc[k], v[k]);
          break;
        case SLOT_ADD_STORE:
          v[k] = acc[k] = add_lanes(acc[k], v[k]);
          break;
      }
    }
  }
}

/* The packet's header and values <-> scratch. count is 1..XAGG_MAX_VALUES (xagg_parse checked it). */
static __always_inline int packet_in(struct xdp_md* ctx, struct xagg_pkt* p, struct xagg_values* sc) {
  const __u32 len = sizeof(sc->hdr) + p->count * 4;
  if (len <= sizeof(sc->hdr) || len > sizeof(*sc)) return -1;
  return bpf_xdp_load_bytes(ctx, p->hdr_off, sc, len);
}

static __always_inline int packet_out(struct xdp_md* ctx, struct xagg_pkt* p, struct xagg_values* sc) {
  const __u32 len = sizeof(sc->hdr) + p->count * 4;
  if (len <= sizeof(sc->hdr) || len > sizeof(*sc)) return -1;
  return bpf_xdp_store_bytes(ctx, p->hdr_off, sc, len);
}

/* Everything a handler needs about the packet in hand. */
struct xagg_ctx {
  struct xdp_md* xdp;
  struct xagg_pkt p;
  const struct xagg_config* cfg;
  const struct xagg_job* job;
  __u32 job_id;
  struct xagg_counters* c;
  struct xagg_values* sc;
};

/* True when the packet copied into scratch carries its MAC under the job's key. Leaves the
 * header's mac field zeroed. One 64-bit compare: its time does not depend on the bytes. */
static __always_inline int mac_ok(struct xagg_ctx* x) {
  __u64 got;
  __builtin_memcpy(&got, x->sc->hdr.mac, sizeof(got));
  __builtin_memset(x->sc->hdr.mac, 0, sizeof(x->sc->hdr.mac));
  return xagg_mac(x->sc, x->p.count, x->job->key[0], x->job->key[1]) == got;
}

/* The header in scratch becomes what the head sends, and is signed with the values. */
static __always_inline void set_header(struct xagg_ctx* x, __u8 type, __u16 rank, __u32 weight) {
  struct xagg_hdr* h = &x->sc->hdr;
  h->type = type;
  h->rank = bpf_htons(rank);
  h->weight = bpf_htonl(weight);
  __builtin_memset(h->mac, 0, sizeof(h->mac));
  const __u64 mac = xagg_mac(x->sc, x->p.count, x->job->key[0], x->job->key[1]);
  __builtin_memcpy(h->mac, &mac, sizeof(mac));
}

/* The packet in hand leaves with the header and values in scratch; the addresses are rewritten
 * first because storing the rest may invalidate packet pointers. */
static __always_inline int transmit(struct xagg_ctx* x) {
  if (packet_out(x->xdp, &x->p, x->sc)) return XDP_ABORTED;
  return XDP_TX;
}

static __always_inline int send_up(struct xagg_ctx* x, __u32 weight) {
  xagg_readdress(&x->p, x->cfg->self_mac, x->job->parent_mac, x->cfg->self_ip, x->job->parent_ip, x->cfg->port);
  set_header(x, XAGG_DATA, x->job->parent_rank, weight);
  return transmit(x);
}

/* The finished sum to the whole group: one multicast frame, or (unicast fan-out) the frame passed
 * up with a mark for xagg_fanout, which copies it to each member. */
static __always_inline int send_to_group(struct xagg_ctx* x, __u32 weight) {
  xagg_readdress(&x->p, x->cfg->self_mac, x->job->group_mac, x->cfg->self_ip, x->job->group_ip, x->cfg->port);
  set_header(x, XAGG_RESULT, 0, weight);
  if (weight != x->job->total_weight) bump(x->c, XAGG_C_weight_mismatch);
  if (x->job->fanout != XAGG_FANOUT_UNICAST) {
    bump(x->c, XAGG_C_results_sent);
    return transmit(x);
  }
  /* The mark for xagg_fanout, in the header after the MAC was computed over the RESULT type, which
   * xagg_fanout writes back. A failure is counted; the members' repeats get the result back from
   * the retained sum, one by one. */
  x->sc->hdr.type = XAGG_FANOUT_TYPE;
  if (packet_out(x->xdp, &x->p, x->sc)) {
    bump(x->c, XAGG_C_fanout_errors);
    return XDP_DROP;
  }
  bump(x->c, XAGG_C_results_sent);
  return XDP_PASS;
}

/* The retained result to one member, at the address it is bound to (xagg_members), never at the
 * frame's own source: a forged repeat cannot steer the answer elsewhere. */
static __always_inline int send_back(struct xagg_ctx* x, const struct xagg_member* mb, __u32 weight) {
  xagg_readdress(&x->p, x->cfg->self_mac, mb->mac, x->cfg->self_ip, mb->ip, x->cfg->port);
  set_header(x, XAGG_RESULT, 0, weight);
  return transmit(x);
}

static __always_inline struct xagg_slot* slot_of(const struct xagg_job* job, __u32 seq) {
  const __u32 nslots = job->nslots;
  if (nslots == 0 || nslots > XAGG_MAX_SLOTS) return 0; /* the agent never writes this */
  __u32 key = job->slot_base + seq % nslots;
  return bpf_map_lookup_elem(&xagg_slots, &key);
}

/* DATA from a member (a worker, or a head below us). */
static __always_inline int on_data(struct xagg_ctx* x) {
  const struct xagg_job* job = x->job;
  struct xagg_hdr* h = x->p.hdr;
  const __u32 rank = bpf_ntohs(h->rank), weight = bpf_ntohl(h->weight), seq = bpf_ntohl(h->seq);
  const __u32 count = x->p.count;
  bump(x->c, XAGG_C_rx_data);
  if (rank >= job->members || rank >= XAGG_MAX_MEMBERS || weight == 0) {
    bump(x->c, XAGG_C_bad_rank);
    return XDP_DROP;
  }
  if (count > job->max_values) {
    bump(x->c, XAGG_C_bad_count);
    return XDP_DROP;
  }
  /* DATA for a rank must come from its member's address (the job file names every member) and
   * from the tier's port. */
  __u32 mkey = x->job_id * XAGG_MAX_MEMBERS + rank;
  const struct xagg_member* mb = bpf_map_lookup_elem(&xagg_members, &mkey);
  if (!mb || !mb->ip || mb->ip != x->p.ip->saddr || x->p.udp->source != x->cfg->port) {
    bump(x->c, XAGG_C_wrong_source);
    return XDP_DROP;
  }
  if (packet_in(x->xdp, &x->p, x->sc)) return XDP_ABORTED;
  if (!mac_ok(x)) {
    bump(x->c, XAGG_C_bad_mac);
    return XDP_DROP;
  }
  struct xagg_slot* s = slot_of(job, seq);
  if (!s) return XDP_ABORTED;
  const __u64 bit = 1ULL << rank;

  bpf_spin_lock(&s->lock);
  if (s->gen == job->gen && s->state != XAGG_SLOT_EMPTY && s->seq != seq) {
    const __s32 ahead = (__s32)(seq - s->seq);
    if (ahead < 0) {
      bpf_spin_unlock(&s->lock);
      bump(x->c, XAGG_C_stale);
      return XDP_DROP;
    }
    /* Only the next epoch may reuse a slot, and only once it is final: every member then has its
     * result (xagg_shared.h). Anything else breaks the window contract. */
    if (ahead != (__s32)job->nslots || s->state != XAGG_SLOT_FINAL) {
      bpf_spin_unlock(&s->lock);
      bump(x->c, XAGG_C_ahead);
      return XDP_DROP;
    }
    s->state = XAGG_SLOT_EMPTY;
  }
  if (s->gen != job->gen || s->state == XAGG_SLOT_EMPTY) {
    s->gen = job->gen;
    s->seq = seq;
    s->state = XAGG_SLOT_COLLECTING;
    s->bitmap = 0;
    s->weight = 0;
    s->count = count;
  }
  if (s->count != count) {
    bpf_spin_unlock(&s->lock);
    bump(x->c, XAGG_C_bad_count);
    return XDP_DROP;
  }
  if (s->bitmap & bit) {
    const __u32 state = s->state, w = s->weight;
    if (state == XAGG_SLOT_COLLECTING) {
      bpf_spin_unlock(&s->lock);
      bump(x->c, XAGG_C_duplicates);
      return XDP_DROP;
    }
    slot_values(s, x->sc, count, SLOT_STORE);
    bpf_spin_unlock(&s->lock);
    if (state == XAGG_SLOT_UP) { /* our parent's result is missing: ask again */
      bump(x->c, XAGG_C_up_resent);
      return send_up(x, w);
    }
    bump(x->c, XAGG_C_retained_answers); /* the member lost the result: answer it alone */
    return send_back(x, mb, w);
  }
  const int first = s->bitmap == 0;
  const int complete = (s->bitmap | bit) == job->member_mask;
  if (first)
    slot_values(s, x->sc, count, SLOT_LOAD); /* a lone member's values already are the sum */
  else if (complete)
    slot_values(s, x->sc, count, SLOT_ADD_STORE);
  else
    slot_values(s, x->sc, count, SLOT_ADD);
  s->bitmap |= bit;
  s->weight += weight;
  const __u32 w = s->weight;
  if (complete) s->state = job->has_parent ? XAGG_SLOT_UP : XAGG_SLOT_FINAL;
  bpf_spin_unlock(&s->lock);
  bump(x->c, XAGG_C_added);
  if (!complete) return XDP_DROP;
  bump(x->c, XAGG_C_completed);
  if (job->has_parent) {
    bump(x->c, XAGG_C_up_sent);
    return send_up(x, w);
  }
  return send_to_group(x, w);
}

/* A RESULT from our parent: finish the slot and pass the sum down. */
static __always_inline int on_result(struct xagg_ctx* x) {
  const struct xagg_job* job = x->job;
  const __u32 seq = bpf_ntohl(x->p.hdr->seq), weight = bpf_ntohl(x->p.hdr->weight), count = x->p.count;
  bump(x->c, XAGG_C_rx_result);
  if (packet_in(x->xdp, &x->p, x->sc)) return XDP_ABORTED;
  if (!mac_ok(x)) {
    bump(x->c, XAGG_C_bad_mac);
    return XDP_DROP;
  }
  struct xagg_slot* s = slot_of(job, seq);
  if (!s) return XDP_ABORTED;
  bpf_spin_lock(&s->lock);
  if (s->gen != job->gen || s->seq != seq || s->state == XAGG_SLOT_EMPTY || s->state == XAGG_SLOT_COLLECTING) {
    /* An older epoch, or a slot the parent cannot have finished without us: nothing to do. */
    bpf_spin_unlock(&s->lock);
    bump(x->c, XAGG_C_stale);
    return XDP_DROP;
  }
  if (s->state == XAGG_SLOT_FINAL) {
    bpf_spin_unlock(&s->lock);
    bump(x->c, XAGG_C_parent_duplicates);
    return XDP_DROP;
  }
  if (s->count != count) {
    bpf_spin_unlock(&s->lock);
    bump(x->c, XAGG_C_bad_count);
    return XDP_DROP;
  }
  slot_values(s, x->sc, count, SLOT_LOAD);
  s->weight = weight;
  s->state = XAGG_SLOT_FINAL;
  bpf_spin_unlock(&s->lock);
  bump(x->c, XAGG_C_parent_results);
  return send_to_group(x, weight);
}

SEC("xdp")
int xagg_head(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* data_end = (void*)(long)ctx->data_end;
  __u32 zero = 0;
  struct xagg_ctx x = {.xdp = ctx};
  x.cfg = bpf_map_lookup_elem(&xagg_config, &zero);
  if (!x.cfg || !x.cfg->port) return XDP_PASS;
  const enum xagg_parse_result r = xagg_parse(data, data_end, x.cfg->port, &x.p);
  if (r == XAGG_NOT_OURS) return XDP_PASS;
  if (r == XAGG_MALFORMED) {
    bump(counters_of(XAGG_MAX_JOBS), XAGG_C_malformed);
    return XDP_DROP;
  }
  __u32 job_id = bpf_ntohs(x.p.hdr->job);
  x.job = job_id < XAGG_MAX_JOBS ? bpf_map_lookup_elem(&xagg_jobs, &job_id) : 0;
  if (x.job && !x.job->active) x.job = 0;
  const int to_us = x.p.ip->daddr == x.cfg->self_ip;
  if (x.p.hdr->type == XAGG_DATA) {
    /* On a shared segment a head sees DATA flooded to other heads (before the bridge learns
     * their MACs): only DATA to our own address is ours. */
    if (!to_us) return XDP_PASS;
  } else if (!x.job || !x.job->has_parent || x.p.ip->saddr != x.job->parent_ip || x.p.udp->source != x.cfg->port) {
    /* Results of other groups reach us when the fabric floods multicast; the stack drops them
     * unless this host joined the group. A result sent to us that is not from our parent is odd. */
    if (!to_us) return XDP_PASS;
    bump(counters_of(x.job ? job_id : XAGG_MAX_JOBS), x.job ? XAGG_C_wrong_source : XAGG_C_unknown_job);
    return XDP_DROP;
  }
  if (!x.job) {
    bump(counters_of(XAGG_MAX_JOBS), XAGG_C_unknown_job);
    return XDP_DROP;
  }
  x.job_id = job_id;
  x.c = counters_of(job_id);
  x.sc = bpf_map_lookup_elem(&xagg_scratch, &zero);
  if (!x.sc) return XDP_ABORTED;
  return x.p.hdr->type == XAGG_DATA ? on_data(&x) : on_result(&x);
}

/* xagg_fanout (TC ingress): a result xagg_head passed up with the unicast fan-out mark (its header's
 * type XAGG_FANOUT_TYPE, which xagg_head drops on frames from outside) is cloned out of the same
 * interface once per member of its job as a RESULT, readdressed to each (xagg_members), and the
 * original dropped. Everything else passes. Attached only while a job uses unicast fan-out. */
SEC("tc")
int xagg_fanout(struct __sk_buff* skb) {
  void *data = (void*)(long)skb->data, *data_end = (void*)(long)skb->data_end;
  __u32 zero = 0;
  const struct xagg_config* cfg = bpf_map_lookup_elem(&xagg_config, &zero);
  if (!cfg || !cfg->port) return TC_ACT_OK;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end) return TC_ACT_OK;
  __u32 ip_off = sizeof(*eth);
  __be16 proto = eth->h_proto;
  if (proto == bpf_htons(ETH_P_8021Q)) {
    const struct vlan_tag* v = data + ip_off;
    if ((void*)(v + 1) > data_end) return TC_ACT_OK;
    proto = v->proto;
    ip_off += sizeof(struct vlan_tag);
  }
  struct iphdr* ip = data + ip_off;
  /* As xagg_parse reads frames (fragments and IP options are not the tier's), so that nothing
   * xagg_head passed as not its own can carry the mark. */
  if (proto != bpf_htons(ETH_P_IP) || (void*)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
      (ip->frag_off & bpf_htons(0x3fff)))
    return TC_ACT_OK;
  const struct udphdr* udp = (void*)(ip + 1);
  const struct xagg_hdr* h = (void*)(udp + 1);
  if ((void*)(h + 1) > data_end || udp->dest != cfg->port || h->type != XAGG_FANOUT_TYPE) return TC_ACT_OK;
  const __u32 hdr_off = ip_off + sizeof(*ip) + sizeof(*udp);
  __u32 job_id = bpf_ntohs(h->job);
  const struct xagg_job* job = job_id < XAGG_MAX_JOBS ? bpf_map_lookup_elem(&xagg_jobs, &job_id) : 0;
  struct xagg_counters* c = counters_of(job_id < XAGG_MAX_JOBS ? job_id : XAGG_MAX_JOBS);
  if (!c) return TC_ACT_SHOT; /* never: the map has every row; checked once, out of the loop */
  const __u8 result = XAGG_RESULT;
  if (!job || bpf_skb_store_bytes(skb, hdr_off + offsetof(struct xagg_hdr, type), &result, 1, 0)) {
    bump(c, XAGG_C_fanout_errors);
    return TC_ACT_SHOT;
  }
  /* The store may have moved the packet: the headers again. */
  data = (void*)(long)skb->data;
  data_end = (void*)(long)skb->data_end;
  ip = data + ip_off;
  if ((void*)(ip + 1) > data_end) {
    bump(c, XAGG_C_fanout_errors);
    return TC_ACT_SHOT;
  }
  __be32 cur = ip->daddr;
  const __u32 members = job->members;
  for (__u32 r = 0; r < XAGG_MAX_MEMBERS; r++) {
    if (r >= members) break;
    __u32 key = job_id * XAGG_MAX_MEMBERS + r;
    const struct xagg_member* mb = bpf_map_lookup_elem(&xagg_members, &key);
    if (!mb || !mb->ip) {
      bump(c, XAGG_C_fanout_errors);
      continue;
    }
    /* The UDP checksum is 0 (xagg_readdress), so only the IP header's needs fixing. */
    if (bpf_skb_store_bytes(skb, 0, mb->mac, ETH_ALEN, 0) ||
        bpf_l3_csum_replace(skb, ip_off + offsetof(struct iphdr, check), cur, mb->ip, 4) ||
        bpf_skb_store_bytes(skb, ip_off + offsetof(struct iphdr, daddr), &mb->ip, 4, 0)) {
      bump(c, XAGG_C_fanout_errors);
      return TC_ACT_SHOT;
    }
    cur = mb->ip;
    if (bpf_clone_redirect(skb, skb->ifindex, 0) == 0)
      bump(c, XAGG_C_fanout_copies);
    else
      bump(c, XAGG_C_fanout_errors);
  }
  return TC_ACT_SHOT;
}
