// Binding a job's ranks to the wire before their first packet (docs/binding.md), as switches bind hosts to ports (port
// security, IP source guard, DHCP snooping's binding table): where each rank is (port, MAC, address) is decided at
// registration, never by whichever packet of the job comes first.
//
// For each rank, in this order:
//   - the port its registration names (a job file's or a registrant's `conn` line), which must
//     agree with the binding table and with where its address was seen;
//   - the operator's binding table (--bindings FILE: ADDRESS PORT [MAC] a line);
//   - the one port its address has been seen on lately (StationTable, every lcore's), with the one
//     MAC it came with there.
// An address or MAC seen on two ports, or an address seen with two MACs, is ambiguous: the job is
// refused with that reason, never bound to a pick. An address not seen yet leaves the job waiting
// (its packets dropped, counted as drop_closed) until it is. A registration's MAC must be the one
// seen. The same claims made while the job runs stop it (claimed_since). Pure logic: the caller
// gives the sightings.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "inagg/control/job.hpp"
#include "inagg/dataplane/stations.hpp"

namespace inagg::dataplane {

// One line of the operator's binding table.
struct BoundStation {
  util::IpAddr address;
  uint16_t port = 0;
  std::optional<Mac> mac;
};

// Parses a binding table ("ADDRESS PORT [MAC]" a line, # comments); false with a message naming
// the line. An address bound twice is refused.
bool parse_bindings(const std::string& text, std::vector<BoundStation>* out, std::string* error);
bool load_bindings(const std::string& path, std::vector<BoundStation>* out, std::string* error);
// Writes `table` to `path` in that form, whole or not at all (a temporary file beside it, created
// afresh and never through a link, then renamed); false with *error.
bool save_bindings(const std::string& path, const std::vector<BoundStation>& table, std::string* error);

std::optional<Mac> parse_mac(std::string_view text);
std::string mac_text(const Mac& m);

struct BindOutcome {
  enum class Kind : uint8_t { bound, waiting, refused };
  Kind kind = Kind::refused;
  control::JobSpec spec;  // bound: every conn's port (and MAC where known) filled in
  std::string why;        // waiting: what it waits for; refused: the reason
};

// Where an address or a MAC was seen within the ageing time, on any lcore. `now_ns` is the clock
// of their seen_ns and first_ns; `settle_ns`: a rank is bound by where its address was seen only
// once it has been seen for that long (a second claim of it within that time, from another port
// or with another MAC, makes it ambiguous instead of losing a race to the first frame).
struct Sightings {
  std::function<std::vector<StationTable::Sighting>(const util::IpAddr&)> of_address;
  std::function<std::vector<StationTable::Sighting>(const Mac&)> of_mac;
  uint64_t now_ns = 0;
  uint64_t settle_ns = 0;
};

BindOutcome bind_ranks(const control::JobSpec& spec, const std::vector<BoundStation>& table, const Sightings& seen);

// A claim of a bound rank's place seen after `since_ns` (when its job was bound): its address from
// another port or with another MAC than the rank's, or its MAC from another port. `bound` is the
// spec bind_ranks() gave. The reason, naming the rank, the address or MAC and the ports, or "" when
// nothing claims them: a job whose rank is claimed while it runs is stopped, as it would have been
// refused had the claim come before (docs/binding.md, "While the job runs").
std::string claimed_since(const control::JobSpec& bound, const Sightings& seen, uint64_t since_ns);

}  // namespace inagg::dataplane
