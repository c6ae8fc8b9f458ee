// Job files: one aggregation job (JobSpec, job.hpp) as INI-style `key = value` text, read by `inagg`
// at start-up and by `inagg-ctl add`, and sent as the body of the control socket's `add` request.
//
//   # comment (also `;`), anywhere after a value too
//   id            = 7                       uint32
//   dtype         = fp32                    fp32 | fp16 | bf16 | int32
//   workers       = 4                       1..64
//   message_bytes = 65536                   >= 1
//   payload_bytes = 1024                    >= 1
//   window        = 8                       >= 1, messages outstanding per QP
//   replay        = false                   optional: true | false
//   tier          = flat                    optional: flat | leaf | spine (a job across racks,
//                                           control::Tier; docs/protocol.md section 21)
//   channels      = 1                       optional: 1..16 RC connections per rank (section 22);
//                                           workers x channels conn lines, channel by channel
//   conn = RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN[,PORT]     one line per worker
//   conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x000012, 0
//   conn = 1, 10.0.0.2, 0x000013, 10.0.0.1, 0x000014, 0, 1     (rank 1's host behind port 1)
//
// PORT, optional: the appliance port (DPDK port id, 0..65534) the rank's host is behind; its
// packets from any other port are dropped from the first one on. Without it the rank's first
// packet that fits pins its port. Numbers are decimal or 0x-hex; QPNs and PSNs are 24-bit;
// addresses IPv4 or IPv6 (one version per conn line; an IPv4-mapped GID such as ::ffff:10.0.0.1
// means the IPv4 address 10.0.0.1). Only syntax, per-field ranges and, with channels above 1, the
// conn lines' count and ranks per channel (check_channels) are checked here: how the other fields
// relate (ranks below workers, one conn per rank, sizes that divide, a ring) is the appliance's
// engine's to check, so both the file and the control socket get the same answer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::control {

// Job files the appliance and inagg-ctl accept are at most this large (a 64-worker job is ~5 KiB).
inline constexpr size_t kMaxJobFileBytes = 1 << 20;

// On failure sets *error to "line N: <key>: <what is wrong and what to write instead>" (no line
// number for a missing key or missing conn lines).
std::optional<JobSpec> parse_job(std::string_view text, std::string* error);

// Reads and parses a job file; errors name it ("conf/jobs/x.job:7: conn: ..."). When `text` is not
// null it receives the file's contents (what inagg-ctl sends, so it is read only once).
std::optional<JobSpec> load_job_file(const std::string& path, std::string* error, std::string* text = nullptr);

// Canonical text for `spec` (fixed key order, hex QPNs/PSNs, a header comment); parse_job reads it
// back identically for any spec whose fields are in range.
std::string format_job(const JobSpec& spec);

// "flat", "leaf" or "spine".
const char* tier_name(Tier t);

// "allreduce", "reduce_scatter" or "all_gather"; and back (nullopt for any other name).
const char* collective_name(Collective c);
std::optional<Collective> collective_of(std::string_view name);

// Whether the job, registered again after the appliance restarted (its state directory), can find
// where its ranks are from their packets alone; false with the reason. A leaf cannot (its rack's
// ranks and its uplink's receiver stand apart). A reduce-scatter or all-gather places each packet
// in a round by its sequence from the start PSN; the 24-bit PSNs tell that sequence only modulo
// 2^24, so its place is known only when a round ((workers - 1) x chunk x message_bytes /
// payload_bytes packets) divides 2^24.
bool resumable(const JobSpec& spec, std::string* why);

// SHA-256 of format_job(spec) less the MACs its conn lines report, 64 lower-case hex digits:
// `list` shows it, so a rank can tell its own job from another job with the same id (an earlier
// run's, or one a host made to pass for it: a digest that can be collided would let a forged spec
// pass for the rank's own). The MACs are left out because each rank knows only its own (the
// registering rank reports it, the others compare the digest of a text without it); the appliance
// checks a reported MAC against the rank's frames instead (docs/binding.md).
inline constexpr size_t kJobDigestHexDigits = 64;
std::string job_digest(const JobSpec& spec);
// SHA-256 of format_job(spec) whole, MACs included: what job_digest was before it left them out
// (state files saved then still load, JobStore).
std::string job_text_digest(const JobSpec& spec);

}  // namespace inagg::control
