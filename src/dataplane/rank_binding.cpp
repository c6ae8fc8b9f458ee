#include "inagg/dataplane/rank_binding.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "inagg/util/text.hpp"

namespace inagg::dataplane {
namespace {

std::string port_list(std::vector<uint16_t> ports) {
  std::sort(ports.begin(), ports.end());
  std::string s;
  for (size_t i = 0; i < ports.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ports.size() ? " and " : ", ") + std::to_string(ports[i]);
  return s;
}

std::vector<uint16_t> ports_of(const std::vector<StationTable::Sighting>& seen) {
  std::vector<uint16_t> ports;
  for (const StationTable::Sighting& s : seen)
    if (std::find(ports.begin(), ports.end(), s.port) == ports.end()) ports.push_back(s.port);
  return ports;
}

const BoundStation* find_bound(const std::vector<BoundStation>& table, const util::IpAddr& a) {
  for (const BoundStation& b : table)
    if (b.address == a) return &b;
  return nullptr;
}

}  // namespace

std::optional<Mac> parse_mac(std::string_view t) {
  Mac m{};
  if (t.size() != 17) return std::nullopt;
  for (size_t i = 0; i < 6; ++i) {
    if (i > 0 && t[3 * i - 1] != ':' && t[3 * i - 1] != '-') return std::nullopt;
    unsigned v = 0;
    const auto [p, ec] = std::from_chars(t.data() + 3 * i, t.data() + 3 * i + 2, v, 16);
    if (ec != std::errc() || p != t.data() + 3 * i + 2) return std::nullopt;
    m[i] = static_cast<uint8_t>(v);
  }
  return m;
}

std::string mac_text(const Mac& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

bool parse_bindings(const std::string& text, std::vector<BoundStation>* out, std::string* error) {
  std::istringstream in(text);
  std::string line;
  for (unsigned n = 1; std::getline(in, line); ++n) {
    const std::string_view body = util::trim(std::string_view(line).substr(0, line.find('#')));
    if (body.empty()) continue;
    std::istringstream words{std::string(body)};
    std::string addr, port, mac, extra;
    words >> addr >> port >> mac >> extra;
    const std::string where = "line " + std::to_string(n) + ": ";
    const std::optional<util::IpAddr> a = util::parse_gid(addr);
    if (!a) {
      *error = where + "'" + addr + "' is not an IPv4 or IPv6 address; write ADDRESS PORT [MAC]";
      return false;
    }
    unsigned p = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p >= control::kAnyPort) {
      *error =
          where + "'" + port + "' is not a port id (0..65534, the appliance's DPDK port); write ADDRESS PORT [MAC]";
      return false;
    }
    BoundStation b{*a, static_cast<uint16_t>(p), std::nullopt};
    if (!mac.empty()) {
      b.mac = parse_mac(mac);
      if (!b.mac) {
        *error = where + "'" + mac + "' is not a MAC address (six hex pairs, e.g. 02:00:00:00:00:01)";
        return false;
      }
    }
    if (!extra.empty()) {
      *error = where + "'" + extra + "' after the MAC; write ADDRESS PORT [MAC]";
      return false;
    }
    if (find_bound(*out, b.address)) {
      *error = where + addr + " is bound twice; an address is behind one port";
      return false;
    }
    out->push_back(b);
  }
  return true;
}

bool load_bindings(const std::string& path, std::vector<BoundStation>* out, std::string* error) {
  std::string text;
  if (!util::read_small_file(path, "binding table", 4 << 20, "4 MiB", &text, error)) return false;
  if (!parse_bindings(text, out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

bool save_bindings(const std::string& path, const std::vector<BoundStation>& table, std::string* error) {
  std::string text = "# inagg: the ranks its jobs bind (ADDRESS PORT MAC); read again at the next start\n";
  for (const BoundStation& b : table)
    text += util::ip_text(b.address) + " " + std::to_string(b.port) + (b.mac ? " " + mac_text(*b.mac) : "") + "\n";
  const size_t slash = path.rfind('/');
  const std::string tmp = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "." +
                          path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ok && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    *error = "cannot write the bound ranks to '" + path + "': " + std::strerror(errno);
    ::unlink(tmp.c_str());
  }
  return ok;
}

BindOutcome bind_ranks(const control::JobSpec& spec, const std::vector<BoundStation>& table, const Sightings& seen) {
  BindOutcome out;
  out.spec = spec;
  std::string waiting;
  for (control::ConnectionSpec& c : out.spec.conns) {
    const std::string who =
        "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + "'s address " + util::ip_text(c.src_ip);
    const BoundStation* b = find_bound(table, c.src_ip);
    const std::vector<StationTable::Sighting> at = seen.of_address(c.src_ip);
    const std::vector<uint16_t> ports = ports_of(at);
    uint16_t port = control::kAnyPort;
    if (c.port != control::kAnyPort) {
      if (b && b->port != c.port) {
        out.why = who + " is bound to port " + std::to_string(b->port) +
                  " by the binding table, but the job names port " + std::to_string(c.port) +
                  "; name the bound port or none";
        return out;
      }
      if (!b && std::any_of(ports.begin(), ports.end(), [&](uint16_t p) { return p != c.port; })) {
        out.why = who + " was seen on port " + port_list(ports) + ", but the job names port " + std::to_string(c.port) +
                  ": another host claims the address, or the job names the wrong port; the job is not added";
        return out;
      }
      port = c.port;
    } else if (b) {
      port = b->port;
    } else if (ports.size() > 1) {
      out.why = who + " was seen on ports " + port_list(ports) +
                " lately: another host claims it, so the rank cannot be told where it is; the job is not added "
                "(bind the address in the binding table, --bindings, to say which port is the rank's)";
      return out;
    } else if (ports.empty()) {
      if (waiting.find(who) == std::string::npos)  // (a rank of several channels is said once)
        waiting += (waiting.empty() ? "" : "; ") + who + " has not been seen on any port yet";
      continue;
    } else {
      const uint64_t first = std::min_element(at.begin(), at.end(), [](const auto& a, const auto& b) {
                               return a.first_ns < b.first_ns;
                             })->first_ns;
      if (seen.now_ns - first < seen.settle_ns) {  // seen only just now: a second claim may follow
        if (waiting.find(who) == std::string::npos)
          waiting += (waiting.empty() ? "" : "; ") + who + " has been seen on port " + std::to_string(ports[0]) +
                     " only just now";
        continue;
      }
      port = ports[0];
    }
    // The MAC: the table's, else the one the address came with on its port.
    std::vector<Mac> macs;
    for (const StationTable::Sighting& s : at)
      if (s.port == port && std::find(macs.begin(), macs.end(), s.mac) == macs.end()) macs.push_back(s.mac);
    std::optional<Mac> mac;
    if (b && b->mac) {
      mac = b->mac;
    } else if (macs.size() > 1) {
      out.why = who + " was seen with MAC addresses " + mac_text(macs[0]) + " and " + mac_text(macs[1]) + " on port " +
                std::to_string(port) +
                ": another host claims it; the job is not added (bind the address with its MAC "
                "in the binding table, --bindings)";
      return out;
    } else if (macs.size() == 1) {
      mac = macs[0];
    }
    if (c.has_mac() && mac && c.mac != *mac) {
      out.why = who + " registered with MAC " + mac_text(c.mac) + " but came with " + mac_text(*mac) + " on port " +
                std::to_string(port) + "; the job is not added";
      return out;
    }
    if (c.has_mac() && !mac) mac = c.mac;
    if (mac && !(b && b->mac)) {
      const std::vector<uint16_t> mac_ports = ports_of(seen.of_mac(*mac));
      if (std::any_of(mac_ports.begin(), mac_ports.end(), [&](uint16_t p) { return p != port; })) {
        out.why = who + "'s MAC " + mac_text(*mac) + " was seen on ports " +
                  port_list(std::vector<uint16_t>(mac_ports)) +
                  " lately: another host claims it; the job is not added (bind the address with its MAC in the "
                  "binding table, --bindings)";
        return out;
      }
    }
    c.port = port;
    if (mac) c.mac = *mac;
  }
  if (!waiting.empty()) {
    out.kind = BindOutcome::Kind::waiting;
    out.why = waiting;
    return out;
  }
  out.kind = BindOutcome::Kind::bound;
  return out;
}

std::string claimed_since(const control::JobSpec& bound, const Sightings& seen, uint64_t since_ns) {
  static constexpr const char* kStopped =
      ": another host claims it; the job is stopped (find that host and take it off, then register the job again)";
  for (const control::ConnectionSpec& c : bound.conns) {
    if (c.port == control::kAnyPort) continue;
    const std::string who = "job " + std::to_string(bound.id) + ": rank " + std::to_string(c.rank) + "'s ";
    const std::string place = "port " + std::to_string(c.port) + (c.has_mac() ? " with MAC " + mac_text(c.mac) : "");
    for (const StationTable::Sighting& s : seen.of_address(c.src_ip)) {
      if (s.seen_ns <= since_ns) continue;
      if (s.port != c.port)
        return who + "address " + util::ip_text(c.src_ip) + " was seen on port " + std::to_string(s.port) + " (MAC " +
               mac_text(s.mac) + ") while the job ran, but the rank is bound to " + place + kStopped;
      if (c.has_mac() && s.mac != c.mac)
        return who + "address " + util::ip_text(c.src_ip) + " was seen with MAC " + mac_text(s.mac) + " on port " +
               std::to_string(s.port) + " while the job ran, but the rank is bound to " + place + kStopped;
    }
    if (!c.has_mac()) continue;
    for (const StationTable::Sighting& s : seen.of_mac(c.mac))
      if (s.seen_ns > since_ns && s.port != c.port)
        return who + "MAC " + mac_text(c.mac) + " was seen on port " + std::to_string(s.port) +
               " while the job ran, but the rank is bound to " + place + kStopped;
  }
  return "";
}

}  // namespace inagg::dataplane
