// Who may use the control socket over TCP (socket.hpp): the tenants' file, a client's credential,
// the frames' MACs and what a tenant may ask.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <sstream>

#include "inagg/control/socket.hpp"
#include "inagg/util/hmac.hpp"

namespace inagg::control {
namespace {

bool parse_job_range(const std::string& text, Tenant* t) {
  if (text == "*") return true;
  const size_t dash = text.find('-');
  char* end = nullptr;
  const std::string a = text.substr(0, dash), b = dash == std::string::npos ? a : text.substr(dash + 1);
  if (a.empty() || b.empty() || a[0] == '-' || b[0] == '-') return false;
  const unsigned long long lo = std::strtoull(a.c_str(), &end, 10);
  if (*end) return false;
  const unsigned long long hi = std::strtoull(b.c_str(), &end, 10);
  if (*end || lo > hi || hi > UINT32_MAX) return false;
  t->first_job = static_cast<uint32_t>(lo);
  t->last_job = static_cast<uint32_t>(hi);
  return true;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

// A decimal count, optionally with K, M or G (binary) when `sizes`; nullopt when it is not one.
std::optional<size_t> parse_amount(const std::string& text, bool sizes) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  unsigned shift = 0;
  if (sizes && *end && !end[1]) {
    shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
    if (shift) ++end;
  }
  if (*end || errno == ERANGE || v > (SIZE_MAX >> shift)) return std::nullopt;
  return static_cast<size_t>(v) << shift;
}

std::string range_text(const Tenant& t) {
  return t.first_job == t.last_job ? std::to_string(t.first_job)
                                   : std::to_string(t.first_job) + "-" + std::to_string(t.last_job);
}

std::string list_text(const std::vector<uint16_t>& ports) {
  std::string s;
  for (uint16_t p : ports) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

// One OPTION of a tenant's line (socket.hpp); "" when taken, else why not.
std::string parse_option(const std::string& word, Tenant* t) {
  const size_t eq = word.find('=');
  const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
  if (eq == std::string::npos || value.empty())
    return "'" + word +
           "' is not an option (prefixes=, ports=, max_jobs=, max_memory=, max_mbufs=) and the secret "
           "comes last";
  if (key == "prefixes") {
    if (!t->prefixes.empty()) return "prefixes= is given twice (list them all in one, comma-separated)";
    for (const std::string& p : split_commas(value)) {
      const std::optional<AddressPrefix> prefix = parse_prefix(p);
      if (!prefix)
        return "'" + p +
               "' is not an address prefix with no host bits set (e.g. 10.0.1.0/24, fd00:1::/64, or one address)";
      t->prefixes.push_back(*prefix);
    }
    return "";
  }
  if (key == "ports") {
    if (!t->ports.empty()) return "ports= is given twice (list them all in one, comma-separated)";
    for (const std::string& p : split_commas(value)) {
      const std::optional<size_t> port = parse_amount(p, false);
      if (!port || *port >= kAnyPort) return "'" + p + "' is not an appliance port (its DPDK port id, 0..65534)";
      if (std::find(t->ports.begin(), t->ports.end(), *port) != t->ports.end())
        return "port " + p + " is listed twice in ports=";
      t->ports.push_back(static_cast<uint16_t>(*port));
    }
    return "";
  }
  std::optional<size_t>* budget = key == "max_jobs"     ? &t->max_jobs
                                  : key == "max_memory" ? &t->max_memory_bytes
                                  : key == "max_mbufs"  ? &t->max_mbufs
                                                        : nullptr;
  if (!budget) return "unknown option '" + key + "' (prefixes=, ports=, max_jobs=, max_memory=, max_mbufs=)";
  if (budget->has_value()) return key + "= is given twice";
  *budget = parse_amount(value, key == "max_memory");
  if (!budget->has_value())
    return key + "=" + value + " is not a number" + (key == "max_memory" ? " of bytes (or with K, M, G)" : "");
  return "";
}

// Whether two tenants with ranges share anything; "" when not, else what (for the operator: it
// names both).
std::string overlap(const Tenant& a, const Tenant& b) {
  if (a.first_job <= b.last_job && b.first_job <= a.last_job)
    return "its jobs " + range_text(a) + " overlap tenant " + b.name + "'s " + range_text(b);
  for (const AddressPrefix& p : a.prefixes)
    for (const AddressPrefix& q : b.prefixes)
      if (p.overlaps(q)) return "its prefix " + prefix_text(p) + " overlaps tenant " + b.name + "'s " + prefix_text(q);
  for (uint16_t p : a.ports)
    if (std::find(b.ports.begin(), b.ports.end(), p) != b.ports.end())
      return "its port " + std::to_string(p) + " is tenant " + b.name + "'s too";
  return "";
}

}  // namespace

bool AddressPrefix::contains(const util::IpAddr& ip_in) const {
  const util::IpAddr ip = util::gid_address(ip_in);
  if (ip.version != net.version) return false;
  for (unsigned bit = 0; bit < length; ++bit) {
    const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
    if ((ip.bytes[bit / 8] & mask) != (net.bytes[bit / 8] & mask)) return false;
  }
  return true;
}

std::optional<AddressPrefix> parse_prefix(std::string_view text) {
  const size_t slash = text.find('/');
  std::optional<util::IpAddr> ip = util::parse_ip(text.substr(0, slash));
  if (!ip) return std::nullopt;
  AddressPrefix p;
  const unsigned bits = ip->version == util::IpVersion::v4 ? 32 : 128;
  p.length = bits;
  if (slash != std::string_view::npos) {
    const std::optional<size_t> len = parse_amount(std::string(text.substr(slash + 1)), false);
    if (!len || *len > bits) return std::nullopt;
    p.length = static_cast<unsigned>(*len);
  }
  if (ip->is_v4_mapped() && p.length >= 96) {  // the IPv4 prefix a GID names
    *ip = util::gid_address(*ip);
    p.length -= 96;
  }
  p.net = *ip;
  // No host bits: 10.0.1.5/24 is most likely a typo for an address or for 10.0.1.0/24.
  for (unsigned bit = p.length; bit < (ip->version == util::IpVersion::v4 ? 32u : 128u); ++bit)
    if (ip->bytes[bit / 8] & (0x80u >> (bit % 8))) return std::nullopt;
  return p;
}

std::string prefix_text(const AddressPrefix& p) { return util::ip_text(p.net) + "/" + std::to_string(p.length); }

bool parse_tenants(std::string_view text, std::vector<Tenant>* tenants, std::string* error) {
  tenants->clear();
  std::istringstream in{std::string(text)};
  std::string line;
  std::vector<std::vector<std::string>> lines;
  std::vector<unsigned> numbers;
  for (unsigned n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    lines.push_back(w);
    numbers.push_back(n);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string>& w = lines[i];
    const std::string where = "line " + std::to_string(numbers[i]) + ": ";
    Tenant t;
    if (w.size() == 1 && lines.size() == 1) {
      t.name = "admin";
      t.secret = w[0];
    } else if (w.size() >= 3) {
      t.name = w[0];
      t.secret = w.back();
      if (!parse_job_range(w[1], &t)) {
        *error = where + "'" + w[1] + "' is not a job range (*, N or N-M)";
        return false;
      }
      for (size_t k = 2; k + 1 < w.size(); ++k)
        if (std::string why = parse_option(w[k], &t); !why.empty()) {
          *error = where + "tenant " + t.name + ": " + why;
          return false;
        }
      if (t.every_job() && w.size() > 3) {
        *error = where + "tenant " + t.name +
                 " manages every job (*): that is the operator's credential, which no prefixes, ports or budgets "
                 "restrict; give it a range of job ids (N-M) to restrict it";
        return false;
      }
    } else {
      *error = where +
               "not TENANT JOBS [OPTION...] SECRET (e.g. 'alice 100-199 prefixes=10.0.1.0/24 <24 random bytes in "
               "base64>')";
      return false;
    }
    if (t.secret.size() < 16) {
      *error = where + "tenant " + t.name + "'s secret is shorter than 16 characters";
      return false;
    }
    for (size_t k = 0; k < tenants->size(); ++k) {
      const Tenant& o = (*tenants)[k];
      if (o.name == t.name) {
        *error = where + "tenant " + t.name + " appears twice";
        return false;
      }
      if (t.every_job() || o.every_job()) continue;  // the operator's: it may touch every job anyway
      if (std::string what = overlap(t, o); !what.empty()) {
        *error = where + "tenant " + t.name + ": " + what + " (line " + std::to_string(numbers[k]) +
                 "): no two tenants may share a job id, an address or a port";
        return false;
      }
    }
    tenants->push_back(t);
  }
  if (tenants->empty()) {
    *error = "no tenant (one line per tenant: TENANT JOBS [OPTION...] SECRET)";
    return false;
  }
  return true;
}

bool load_tenants(const std::string& path, std::vector<Tenant>* tenants, std::string* error) {
  std::string text;
  if (!util::read_private_file(path, &text, error)) return false;
  if (parse_tenants(text, tenants, error)) return true;
  *error = path + ": " + *error;
  return false;
}

bool load_secret_file(const std::string& path, std::string* credential, std::string* error) {
  return util::load_secret(kControlSecretEnv, path, credential, error);
}

std::string request_mac(std::string_view secret, std::string_view nonce, std::string_view tenant,
                        std::string_view request) {
  std::string m = "inagg-control request\n";
  m.append(nonce).append("\n").append(tenant).append("\n").append(request);
  return util::hmac_sha256_hex(secret, m);
}

std::string reply_mac(std::string_view secret, std::string_view nonce, std::string_view reply) {
  std::string m = "inagg-control reply\n";
  m.append(nonce).append("\n").append(reply);
  return util::hmac_sha256_hex(secret, m);
}

std::string tenant_refusal(const Tenant& t, const Request& r, const std::vector<Tenant>& tenants) {
  if (t.every_job()) return "";
  const std::string range =
      "tenant " + t.name + " manages jobs " + std::to_string(t.first_job) + ".." + std::to_string(t.last_job) + " only";
  switch (r.verb) {
    case Request::Verb::list:
      return "";  // filtered
    case Request::Verb::stats:
      if (!r.has_id) return "stats without a job id covers every tenant's jobs; ask stats <id> (" + range + ")";
      [[fallthrough]];
    case Request::Verb::remove:
      if (!t.owns(r.id)) return "job " + std::to_string(r.id) + " is not yours: " + range;
      return "";
    case Request::Verb::add:
      break;
  }
  const std::string job = "job " + std::to_string(r.id) + ": ";
  if (!t.owns(r.id)) return "job " + std::to_string(r.id) + " is not yours: " + range;
  if (t.prefixes.empty())
    return job + "tenant " + t.name +
           " owns no addresses: the appliance's tenants file (--control-secret-file) gives it none (prefixes=); "
           "ask the operator to add its hosts' prefixes";
  std::string own;
  for (const AddressPrefix& p : t.prefixes) own += (own.empty() ? "" : ", ") + prefix_text(p);
  for (const ConnectionSpec& c : r.job.conns) {
    for (const auto& [addr, what] : {std::pair{c.src_ip, "source"}, std::pair{c.dst_ip, "destination"}}) {
      const util::IpAddr& ip = addr;  // clang 14 cannot capture a structured binding
      if (std::none_of(t.prefixes.begin(), t.prefixes.end(), [&](const AddressPrefix& p) { return p.contains(ip); }))
        return job + "rank " + std::to_string(c.rank) + "'s " + what + " address " +
               util::ip_text(util::gid_address(ip)) + " is not one of tenant " + t.name + "'s (" + own + ")";
    }
    const std::string rank = job + "rank " + std::to_string(c.rank);
    if (!t.ports.empty()) {
      if (c.port == kAnyPort)
        return rank + " names no appliance port; tenant " + t.name + "'s connections must name one of its ports (" +
               list_text(t.ports) + ")";
      if (std::find(t.ports.begin(), t.ports.end(), c.port) == t.ports.end())
        return rank + " names port " + std::to_string(c.port) + ", which is not one of tenant " + t.name +
               "'s ports (" + list_text(t.ports) + ")";
    } else if (c.port != kAnyPort) {
      for (const Tenant& o : tenants)
        if (o.name != t.name && std::find(o.ports.begin(), o.ports.end(), c.port) != o.ports.end())
          return rank + " names port " + std::to_string(c.port) + ", which is not open to tenant " + t.name +
                 " (leave the port out, or ask the operator for ports of its own)";
    }
  }
  return "";
}

std::string budget_refusal(const Tenant& t, uint32_t id, const TenantUse& used, size_t memory_bytes, size_t mbufs) {
  if (t.every_job()) return "";
  const std::string job = "job " + std::to_string(id) + ": tenant " + t.name + "'s ";
  if (t.max_jobs && used.jobs + 1 > *t.max_jobs)
    return job + "budget of " + std::to_string(*t.max_jobs) + " jobs is used up (" + std::to_string(used.jobs) +
           " registered): remove one first";
  if (t.max_memory_bytes && used.memory_bytes + memory_bytes > *t.max_memory_bytes)
    return job + "memory budget: it needs " + std::to_string(memory_bytes >> 10) + " KiB of slot memory, " +
           std::to_string((*t.max_memory_bytes - std::min(used.memory_bytes, *t.max_memory_bytes)) >> 10) + " of " +
           std::to_string(*t.max_memory_bytes >> 10) + " KiB are free; lower window or message_bytes";
  if (t.max_mbufs && used.mbufs + mbufs > *t.max_mbufs)
    return job + "mbuf budget: it needs up to " + std::to_string(mbufs) + " held packet buffers, " +
           std::to_string(*t.max_mbufs - std::min(used.mbufs, *t.max_mbufs)) + " of " + std::to_string(*t.max_mbufs) +
           " are free; lower window or message_bytes";
  return "";
}

std::string filter_job_list(const Tenant& t, std::string_view reply) {
  if (t.every_job()) return std::string(reply);
  std::string out;
  for (size_t start = 0; start < reply.size();) {
    size_t end = reply.find('\n', start);
    if (end == std::string_view::npos) end = reply.size();
    const std::string_view line = reply.substr(start, end - start);
    const std::optional<JobListLine> l = parse_job_list_line(line);
    if (l && t.owns(l->id)) out.append(line).append("\n");
    start = end + 1;
  }
  return out.empty() ? "no jobs\n" : out;
}

}  // namespace inagg::control
