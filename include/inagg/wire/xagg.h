/* The XDP aggregation tier's wire format (ALEPH-style, docs/protocol.md section 17): what workers
 * (include/inagg/client/transport/xagg_client.hpp) and heads (the BPF programs in src/xdp/bpf)
 * send each other. Plain C, so the BPF programs include it too; here in wire, below both, so the
 * workers' client needs nothing of the XDP tier's own code. The head's maps are in
 * inagg/xdp/xagg_shared.h.
 *
 * Packets, UDP to port XAGG_UDP_PORT (the default; one port per head, xagg_config):
 *
 *   Ethernet [802.1Q] | IPv4 (no options) | UDP | struct xagg_hdr (24 bytes) | count x int32 (LE)
 *
 * A DATA packet carries one contributor's values for one chunk `seq` of a job: a worker's
 * fixed-point gradient (weight 1), or a head's partial sum going up to its parent (weight = the
 * workers it stands for). A RESULT carries the finished sum of chunk `seq` and the total weight,
 * multicast to a head's group or unicast to one member that asked again. Header fields are network
 * byte order; values are little-endian two's complement int32, as in host memory, and wrap on
 * overflow (the client chooses a scale that leaves headroom, and reports saturation).
 *
 * Every packet carries a MAC under the job's key (128 bits, the same on every head and worker of
 * the job): SipHash-2-4 (Aumasson & Bernstein 2012) over the header with its `mac` field zeroed,
 * followed by the count values, as they are on the wire (24 + 4 x count bytes). The key's 16
 * bytes are the paper's k (k0 = bytes 0-7, k1 = bytes 8-15, each little-endian); `mac` holds the
 * 64-bit result little-endian (the paper's vector 0xa129ca6149be45e5 is e5 45 be .. a1). A DATA or
 * RESULT whose MAC does not verify is dropped and counted, never summed, never taken as a result.
 * The C++ side is inagg/wire/xagg_mac.hpp, the BPF side src/xdp/bpf/xagg_mac.h.
 *
 * A head keeps 2 x window slots per job: chunk seq lives in slot seq % nslots, and the epoch
 * (seq / nslots) is told apart by keeping the slot's full seq. Two epochs suffice for the reason
 * docs/protocol.md section 6 gives for the appliance: a member sends chunk s only after it has the results of
 * every chunk up to s - window, so when chunk s + nslots arrives every member already holds the
 * result of chunk s.
 */
#ifndef INAGG_WIRE_XAGG_H
#define INAGG_WIRE_XAGG_H

#include <linux/types.h>

#define XAGG_UDP_PORT 4792   /* default UDP port of the tier (RoCEv2 is 4791) */
#define XAGG_VERSION 2       /* 2: the header carries the MAC */
#define XAGG_MAX_VALUES 1024 /* int32 values per packet: 4 KiB of payload */
#define XAGG_VALUE_ALIGN 4   /* count is a multiple of this (the client pads with zeros) */
#define XAGG_MAX_MEMBERS 64  /* contributors per head (bits of the arrival bitmap) */
#define XAGG_MAX_JOBS 256    /* job ids 0..255 index the job table directly */
#define XAGG_MAX_SLOTS 64    /* slots per job: window <= 32 */

enum xagg_type {
  XAGG_DATA = 1,   /* a contribution: member -> head, or head -> parent */
  XAGG_RESULT = 2, /* a finished sum: head -> its group (or one member) */
};

struct xagg_hdr {
  __u8 version;  /* XAGG_VERSION */
  __u8 type;     /* enum xagg_type */
  __be16 job;    /* < XAGG_MAX_JOBS */
  __be16 rank;   /* DATA: the contributor's index in the receiving head's group; RESULT: 0 */
  __be16 count;  /* int32 values that follow: a multiple of XAGG_VALUE_ALIGN, <= XAGG_MAX_VALUES */
  __be32 seq;    /* chunk sequence number, counted from 0 per job, wraps */
  __be32 weight; /* workers this contribution stands for; in a RESULT, all of them */
  __u8 mac[8];   /* SipHash-2-4 under the job's key, little-endian: see above */
};

#define XAGG_KEY_BYTES 16
#define XAGG_MAC_BYTES 8

#endif
