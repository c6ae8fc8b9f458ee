#include "inagg/xdp/head_job.hpp"

#include <array>
#include <cstdio>
#include <functional>

#include "inagg/util/key_value.hpp"
#include "inagg/xdp/xagg_shared.h"

namespace inagg::xdp {
namespace {

using util::quote_for_error;

bool number(std::string_view v, unsigned min, unsigned max, unsigned* out, std::string* why) {
  const std::optional<uint64_t> n = util::parse_unsigned(v, max);
  if (!n || *n < min) {
    *why = quote_for_error(v) + " is not a number in " + std::to_string(min) + ".." + std::to_string(max);
    return false;
  }
  *out = static_cast<unsigned>(*n);
  return true;
}

bool ipv4(std::string_view v, std::optional<util::IpAddr>* out, std::string* why) {
  const std::optional<util::IpAddr> a = util::parse_ip(v);
  if (!a || a->version != util::IpVersion::v4) {
    *why = quote_for_error(v) + " is not an IPv4 address (the tier runs over IPv4)";
    return false;
  }
  *out = a;
  return true;
}

bool multicast(std::string_view v, std::optional<util::IpAddr>* out, std::string* why) {
  if (!ipv4(v, out, why)) return false;
  if (((*out)->bytes[0] & 0xf0) == 0xe0) return true;
  *why = quote_for_error(v) + " is not a multicast address (224.0.0.0/4; e.g. 239.77.0.1)";
  return false;
}

struct Key {
  util::KeySpec spec;  // name, required, repeatable, a line to suggest
  std::function<bool(HeadJob&, std::string_view, std::string*)> set;
};

const std::array<Key, 13>& keys() {
  static const std::array<Key, 13> k{{
      {{"id", true, false, "id = 1"},
       [](HeadJob& j, std::string_view v, std::string* w) { return number(v, 0, XAGG_MAX_JOBS - 1, &j.id, w); }},
      {{"members", true, false, "members = 4"},
       [](HeadJob& j, std::string_view v, std::string* w) { return number(v, 1, XAGG_MAX_MEMBERS, &j.members, w); }},
      {{"values", true, false, "values = 256"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         if (!number(v, XAGG_VALUE_ALIGN, XAGG_MAX_VALUES, &j.values, w)) return false;
         if (j.values % XAGG_VALUE_ALIGN == 0) return true;
         *w = std::to_string(j.values) + " is not a multiple of " + std::to_string(XAGG_VALUE_ALIGN);
         return false;
       }},
      {{"window", true, false, "window = 8"},
       [](HeadJob& j, std::string_view v, std::string* w) { return number(v, 1, XAGG_MAX_SLOTS / 2, &j.window, w); }},
      {{"total_weight", true, false, "total_weight = 4"},
       [](HeadJob& j, std::string_view v, std::string* w) { return number(v, 1, 1u << 20, &j.total_weight, w); }},
      {{"group", true, false, "group = 239.77.0.1"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         std::optional<util::IpAddr> a;
         if (!multicast(v, &a, w)) return false;
         j.group = *a;
         return true;
       }},
      {{"parent", false, false, "parent = 10.77.0.203"},
       [](HeadJob& j, std::string_view v, std::string* w) { return ipv4(v, &j.parent, w); }},
      {{"parent_group", false, false, "parent_group = 239.77.0.100"},
       [](HeadJob& j, std::string_view v, std::string* w) { return multicast(v, &j.parent_group, w); }},
      {{"parent_rank", false, false, "parent_rank = 0"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         return number(v, 0, XAGG_MAX_MEMBERS - 1, &j.parent_rank, w);
       }},
      {{"parent_mac", false, false, "parent_mac = 02:77:00:00:00:01"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         j.parent_mac = parse_mac(v);
         if (!j.parent_mac) *w = quote_for_error(v) + " is not an Ethernet address (aa:bb:cc:dd:ee:ff)";
         return j.parent_mac.has_value();
       }},
      {{"fanout", false, false, "fanout = multicast"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         if (v != "multicast" && v != "unicast") *w = quote_for_error(v) + " is not multicast or unicast";
         j.unicast = v == "unicast";
         return v == "multicast" || v == "unicast";
       }},
      {{"member", false, true, "member = 0, 10.77.0.1"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         const std::vector<std::string_view> f = util::split_fields(v);
         unsigned rank = 0;
         std::optional<util::IpAddr> ip;
         if (f.size() < 2 || f.size() > 3) {
           *w = "expected RANK, IP[, MAC], got " + quote_for_error(v);
           return false;
         }
         if (!number(f[0], 0, XAGG_MAX_MEMBERS - 1, &rank, w) || !ipv4(f[1], &ip, w)) return false;
         HeadJob::Member m{*ip, std::nullopt};
         if (f.size() == 3 && !(m.mac = parse_mac(f[2]))) {
           *w = quote_for_error(f[2]) + " is not an Ethernet address (aa:bb:cc:dd:ee:ff)";
           return false;
         }
         if (j.member.size() <= rank) j.member.resize(rank + 1);
         if (j.member[rank]) {
           *w = "rank " + std::to_string(rank) + " given twice";
           return false;
         }
         j.member[rank] = m;
         return true;
       }},
      {{"key_file", false, false, "key_file = /etc/inagg/xdp/job1.key"},
       [](HeadJob& j, std::string_view v, std::string* w) {
         if (v.empty() || v[0] != '/') {
           *w = quote_for_error(v) + " is not an absolute path (the agent reads it, whatever its working directory)";
           return false;
         }
         j.key_file = std::string(v);
         return true;
       }},
  }};
  return k;
}

}  // namespace

std::optional<wire::MacAddr> parse_mac(std::string_view text) {
  wire::MacAddr m{};
  unsigned b[6];
  char tail;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6 ||
      s.size() != 17)
    return std::nullopt;
  for (int i = 0; i < 6; ++i) m[i] = static_cast<uint8_t>(b[i]);
  return m;
}

std::string mac_text(const wire::MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return buf;
}

wire::MacAddr multicast_mac(const util::IpAddr& g) {
  return {0x01, 0x00, 0x5e, static_cast<uint8_t>(g.bytes[1] & 0x7f), g.bytes[2], g.bytes[3]};
}

std::optional<HeadJob> parse_head_job(std::string_view text, std::string* error) {
  HeadJob job;
  std::array<bool, 13> seen{};
  static const std::array<util::KeySpec, 13> specs = [] {
    std::array<util::KeySpec, 13> a;
    for (size_t k = 0; k < a.size(); ++k) a[k] = keys()[k].spec;
    return a;
  }();
  util::ParseProblem problem;
  const bool ok = util::parse_key_values(
      text, specs,
      [&](size_t k, std::string_view value, std::string* why) {
        seen[k] = true;
        return keys()[k].set(job, value, why);
      },
      &problem);
  if (!ok) {
    *error = problem.message();
    if (problem.line == 0) *error += " (see conf/xdp/*.job for commented examples)";
    return std::nullopt;
  }
  if (!job.parent && (job.parent_group || seen[8] || seen[9])) {
    *error = "parent_group, parent_rank and parent_mac need 'parent = IP', the head one level up";
    return std::nullopt;
  }
  if (job.parent && !job.parent_group) {
    *error = "a head with a parent needs 'parent_group = IP', the parent's group (its results come there)";
    return std::nullopt;
  }
  if (job.member.size() > job.members) {
    *error =
        "member " + std::to_string(job.member.size() - 1) + " is not below members = " + std::to_string(job.members);
    return std::nullopt;
  }
  if (job.total_weight < job.members) {
    *error = "total_weight " + std::to_string(job.total_weight) + " is below members " + std::to_string(job.members) +
             "; it counts the workers of the whole job, at least one per member";
    return std::nullopt;
  }
  // Every rank's address: the head takes DATA for a rank only from its member's address.
  job.member.resize(job.members);
  for (unsigned r = 0; r < job.members; ++r) {
    if (!job.member[r]) {
      *error =
          "every member needs a 'member = RANK, IP' line (the head takes a rank's DATA only from its address); "
          "rank " +
          std::to_string(r) + " has none";
      return std::nullopt;
    }
  }
  if (job.key_file.empty()) {
    *error =
        "a head job needs 'key_file = PATH', the job's MAC key (every packet of the tier carries a MAC under it): "
        "`inagg-xdp key PATH` makes one; give the same file to every head of the job and to its workers "
        "(--xdp-key-file)";
    return std::nullopt;
  }
  return job;
}

std::optional<HeadJob> load_head_job(const std::string& path, std::string* error, std::string* text_out) {
  std::string text;
  if (!util::read_small_file(path, "head job file", 64 << 10, "64 KiB", &text, error)) return std::nullopt;
  std::optional<HeadJob> job = parse_head_job(text, error);
  if (!job) *error = path + ": " + *error;
  if (job && text_out) *text_out = std::move(text);
  return job;
}

std::string format_head_job(const HeadJob& j) {
  std::string out = "# inagg-xdp head job " + std::to_string(j.id) + "\n";
  out += "id = " + std::to_string(j.id) + "\nmembers = " + std::to_string(j.members) +
         "\nvalues = " + std::to_string(j.values) + "\nwindow = " + std::to_string(j.window) +
         "\ntotal_weight = " + std::to_string(j.total_weight) + "\ngroup = " + util::ip_text(j.group) + "\n";
  if (j.parent) {
    out += "parent = " + util::ip_text(*j.parent) + "\nparent_group = " + util::ip_text(*j.parent_group) +
           "\nparent_rank = " + std::to_string(j.parent_rank) + "\n";
    if (j.parent_mac) out += "parent_mac = " + mac_text(*j.parent_mac) + "\n";
  }
  if (j.unicast) out += "fanout = unicast\n";
  for (size_t r = 0; r < j.member.size(); ++r) {
    if (!j.member[r]) continue;
    out += "member = " + std::to_string(r) + ", " + util::ip_text(j.member[r]->ip);
    if (j.member[r]->mac) out += ", " + mac_text(*j.member[r]->mac);
    out += "\n";
  }
  out += "key_file = " + j.key_file + "\n";
  return out;
}

}  // namespace inagg::xdp
