// A job on one head of the XDP tier: what `inagg-xdp run --job FILE` and `inagg-xdp add FILE`
// read, and what the agent writes into the head program's xagg_jobs map.
//
//   # comment (also ';'), anywhere after a value too
//   id           = 1             the job id, 0..255: the same on every head of the job and in the
//                                workers' --job-id
//   members      = 4             contributors to this head: workers, or heads of the level below
//   values       = 256           int32 values per packet, a multiple of 4, at most 1024
//   window       = 8             chunks a member keeps in flight (the head keeps 2 x window slots)
//   total_weight = 4             workers in the whole job; finished sums are checked against it
//   group        = 239.77.0.1    IPv4 multicast group of this head's members: sums go there
//   parent       = 10.77.0.203   optional: the head one level up, which gets this group's sum
//   parent_group = 239.77.0.100  with parent: the parent's `group`; the agent joins it on the
//                                interface, so NIC filters and IGMP-snooping switches let the
//                                parent's results in
//   parent_rank  = 0             with parent: this head's rank in the parent's group
//   parent_mac   = 02:77:..      optional with parent: resolved by ARP when left out
//   fanout       = multicast     optional: multicast (one frame to `group`, the fabric copies it)
//                                or unicast (a copy per member, by TC clone-redirect: for fabrics
//                                without multicast; needs a member line per rank)
//   member       = 0, 10.77.0.1[, 02:77:..]   a member's address (repeatable); MAC by ARP if left out:
//                                the head takes the rank's DATA only from this IP, and answers it
//                                only at this IP and MAC
//   key_file     = /etc/inagg/xdp/job1.key   the job's MAC key (inagg/wire/xagg.h): an absolute
//                                path to a private file the agent reads when it adds the job, made
//                                by `inagg-xdp key FILE`; the same key on every head of the job and
//                                in its workers (--xdp-key-file)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/wire/build.hpp"
#include "inagg/wire/xagg_mac.hpp"

namespace inagg::xdp {

struct HeadJob {
  unsigned id = 0;
  unsigned members = 0;
  unsigned values = 0;
  unsigned window = 0;
  unsigned total_weight = 0;
  util::IpAddr group;                        // IPv4 multicast
  std::optional<util::IpAddr> parent;        // IPv4 unicast
  std::optional<util::IpAddr> parent_group;  // IPv4 multicast, required with parent
  unsigned parent_rank = 0;
  std::optional<wire::MacAddr> parent_mac;  // nullopt: resolve
  bool unicast = false;                     // fanout = unicast
  struct Member {
    util::IpAddr ip;
    std::optional<wire::MacAddr> mac;  // nullopt: resolve
  };
  std::vector<std::optional<Member>> member;  // by rank; required for every rank
  std::string key_file;                       // absolute
  std::optional<wire::XaggKey> key;           // read from key_file by the agent (HeadAgent::add_job)
};

// On failure sets *error to "line N: <key>: <what is wrong and what to write instead>", or names
// the missing key.
std::optional<HeadJob> parse_head_job(std::string_view text, std::string* error);

// Reads and parses a file; errors start with the file's name.
std::optional<HeadJob> load_head_job(const std::string& path, std::string* error, std::string* text = nullptr);

// Canonical text, which parse_head_job reads back identically.
std::string format_head_job(const HeadJob& job);

// "01:00:5e:..": the Ethernet address of an IPv4 multicast group (RFC 1112).
wire::MacAddr multicast_mac(const util::IpAddr& group);

std::optional<wire::MacAddr> parse_mac(std::string_view text);
std::string mac_text(const wire::MacAddr& mac);

}  // namespace inagg::xdp
