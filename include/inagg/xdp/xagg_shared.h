/* The XDP aggregation tier's head (ALEPH-style, docs/protocol.md section 17): the structs its BPF maps
 * share with userspace. Plain C, included by the BPF programs (src/xdp/bpf) and by the C++ agent;
 * maps are the only interface between the two sides. The tier's wire format, which the workers
 * speak too, is in inagg/wire/xagg.h.
 */
#ifndef INAGG_XDP_XAGG_SHARED_H
#define INAGG_XDP_XAGG_SHARED_H

#include <linux/bpf.h> /* struct bpf_spin_lock */
#include <linux/types.h>

#include "inagg/wire/xagg.h"

/* Slot states. */
enum xagg_slot_state {
  XAGG_SLOT_EMPTY = 0,
  XAGG_SLOT_COLLECTING = 1, /* some members in */
  XAGG_SLOT_UP = 2,         /* complete; the partial sum went to the parent, waiting for its result */
  XAGG_SLOT_FINAL = 3,      /* holds the final result (retained for late members) */
};

/* How a head returns a finished sum to its group. */
enum xagg_fanout {
  XAGG_FANOUT_MULTICAST = 0, /* one XDP_TX to the group's IPv4 multicast address: the fabric copies */
  XAGG_FANOUT_UNICAST = 1,   /* XDP_PASS with a mark (XAGG_FANOUT_TYPE); the TC program xagg_fanout
                                clones the result to every member (xagg_members): for fabrics
                                without multicast */
};

/* xagg_members (array, key = job id * XAGG_MAX_MEMBERS + rank): a member's bound address, from its
 * job file's member line (the MAC resolved by the agent when the line gives none). A rank's DATA is
 * taken only from this IP; a retained result answers it at this IP and MAC (never at a frame's own
 * source), and unicast fan-out sends here. */
struct xagg_member {
  __be32 ip;
  __u8 mac[6];
  __u16 pad;
};

/* The mark xagg_head leaves on a result it passes up for xagg_fanout: the header's type. Never on
 * the wire: a frame arriving with it is neither DATA nor RESULT, so xagg_head drops it as
 * malformed before the stack (and xagg_fanout behind it) could see it; what xagg_fanout sees with
 * this type therefore came from xagg_head. (XDP metadata would carry it too, but some kernels
 * refuse bpf_xdp_adjust_meta to XDP programs: this works on every one.) */
#define XAGG_FANOUT_TYPE 0x80

/* xagg_jobs (hash, key = job id): a job's configuration on this head, written by the agent. */
struct xagg_job {
  __u32 active;       /* 0: no such job, its packets are counted and dropped */
  __u32 gen;          /* bumped on every (re)configuration: older slot contents are ignored */
  __u16 members;      /* contributors to this head, 1..XAGG_MAX_MEMBERS */
  __u16 max_values;   /* values per packet, <= XAGG_MAX_VALUES */
  __u16 nslots;       /* 2 x window, <= XAGG_MAX_SLOTS */
  __u16 slot_base;    /* first entry of this job in xagg_slots (allocated by the agent) */
  __u32 total_weight; /* workers in the whole job; a top head checks results against it */
  __u64 member_mask;  /* (1 << members) - 1 */
  __u32 has_parent;   /* 1: send complete partial sums up; 0: this head finishes the sum */
  __u16 parent_rank;  /* our rank in the parent's group */
  __u16 fanout;       /* enum xagg_fanout */
  __be32 group_ip;    /* multicast group of our members: results go there */
  __be32 parent_ip;
  __u8 group_mac[6]; /* 01:00:5e + low 23 bits of group_ip */
  __u8 parent_mac[6];
  __u64 key[2]; /* the job's MAC key, SipHash's k0 and k1 (inagg/wire/xagg.h) */
};

/* xagg_slots (array, key = slot_base + seq % nslots): one chunk in aggregation. */
struct xagg_slot {
  struct bpf_spin_lock lock; /* taken by the head program; the agent never writes live slots */
  __u32 gen;                 /* the job generation that filled it */
  __u32 seq;
  __u32 state;  /* enum xagg_slot_state */
  __u32 weight; /* sum of the contributors' weights */
  __u32 count;  /* values per packet of this chunk */
  __u64 bitmap; /* ranks already added */
  __s32 acc[XAGG_MAX_VALUES];
};

/* Counters: one row per job id plus a last row (index XAGG_MAX_JOBS) for packets of no known job.
 * Declared once here; the BPF side uses the enum, the agent prints the names and help texts. */
#define XAGG_COUNTERS(X)                                                                                             \
  X(rx_data, "DATA packets received")                                                                                \
  X(rx_result, "RESULT packets received from the parent")                                                            \
  X(added, "contributions added to a slot")                                                                          \
  X(completed, "slots that received every member")                                                                   \
  X(results_sent, "finished sums sent to the group")                                                                 \
  X(up_sent, "partial sums sent to the parent")                                                                      \
  X(up_resent, "partial sums sent to the parent again, because a member asked again")                                \
  X(retained_answers, "late DATA of a finished slot answered with the retained result")                              \
  X(parent_results, "results from the parent passed down to the group")                                              \
  X(duplicates, "DATA for a rank already in a collecting slot, dropped (never added twice)")                         \
  X(parent_duplicates, "results from the parent for a slot already final, dropped")                                  \
  X(stale, "packets older than their slot's epoch, dropped")                                                         \
  X(ahead, "DATA beyond the next epoch of an unfinished slot (window contract broken), dropped")                     \
  X(bad_rank, "DATA with a rank outside the job's members, or weight 0, dropped")                                    \
  X(bad_count, "DATA with more values than the job's packets carry, or another count than its slot's")               \
  X(wrong_source, "DATA not from its rank's member address, or a RESULT to us not from the parent")                  \
  X(bad_mac, "DATA or RESULT whose MAC does not verify under the job's key, dropped (never summed or passed on)")    \
  X(weight_mismatch, "finished sums whose weight is not the job's total_weight (sent anyway)")                       \
  X(unknown_job, "packets for a job id this head has no job for, dropped")                                           \
  X(fanout_copies, "unicast fan-out: copies of results sent to members (TC clone-redirect)")                         \
  X(fanout_errors, "unicast fan-out: a result the TC program could not copy or readdress")                           \
  X(malformed,                                                                                                       \
    "packets to the tier's port with a bad version, type or count, or not the UDP length (IPv4 with options is not " \
    "looked at)")

enum xagg_counter {
#define XAGG_COUNTER_ENUM(name, text) XAGG_C_##name,
  XAGG_COUNTERS(XAGG_COUNTER_ENUM)
#undef XAGG_COUNTER_ENUM
      XAGG_NUM_COUNTERS
};

/* xagg_stats (per-CPU array, XAGG_MAX_JOBS + 1 entries). */
struct xagg_counters {
  __u64 c[XAGG_NUM_COUNTERS];
};

/* xagg_config (array, 1 entry): settings of the whole program; port 0 = not configured, all passes. */
struct xagg_config {
  __be32 self_ip;   /* the head's address: DATA to other addresses passes untouched */
  __be16 port;      /* UDP port the program looks at; packets to other ports pass untouched */
  __u8 self_mac[6]; /* source of everything the head sends */
};

#endif
