/* The head program's maps: the only interface to the agent (inagg-xdp), which sizes xagg_slots at
 * load time and writes xagg_jobs / xagg_config. */
#ifndef INAGG_XDP_BPF_MAPS_H
#define INAGG_XDP_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "inagg/xdp/xagg_shared.h"

/* Program-wide settings (the UDP port). */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct xagg_config);
} xagg_config SEC(".maps");

/* Job configuration by job id. A hash without preallocation: the agent's update of a running job
 * swaps in a new element under RCU, so the program reads the old job or the new, never a mix. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, XAGG_MAX_JOBS);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, __u32);
  __type(value, struct xagg_job);
} xagg_jobs SEC(".maps");

/* Aggregation slots of every job, job by job (xagg_job.slot_base); resized by the agent. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 16 * XAGG_MAX_SLOTS);
  __type(key, __u32);
  __type(value, struct xagg_slot);
} xagg_slots SEC(".maps");

/* Members' bound addresses, by job id * XAGG_MAX_MEMBERS + rank: where their DATA must come from
 * and where replies to them go. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, XAGG_MAX_JOBS* XAGG_MAX_MEMBERS);
  __type(key, __u32);
  __type(value, struct xagg_member);
} xagg_members SEC(".maps");

/* Counters per job id, the last row for packets of no known job. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, XAGG_MAX_JOBS + 1);
  __type(key, __u32);
  __type(value, struct xagg_counters);
} xagg_stats SEC(".maps");

/* One packet's header and values, per CPU: the slot loops and the MAC work on this copy, where
 * the verifier needs no packet bounds (bpf_xdp_load_bytes / store_bytes move it in and out of the
 * packet). The header comes first, as on the wire: the MAC covers both at once. */
struct xagg_values {
  struct xagg_hdr hdr;
  __s32 v[XAGG_MAX_VALUES];
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct xagg_values);
} xagg_scratch SEC(".maps");

#endif
