#include "inagg/dataplane/eal_args.hpp"

#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace inagg::dataplane {
namespace {

bool number(std::string_view s, unsigned* out) {
  if (s.empty() || s.size() > 6) return false;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  *out = v;
  return true;
}

// "3" or "0-3" into `out`.
bool add_range(std::string_view s, std::set<unsigned>* out) {
  const size_t dash = s.find('-');
  unsigned a = 0, b = 0;
  if (dash == std::string_view::npos) {
    if (!number(s, &a)) return false;
    out->insert(a);
    return true;
  }
  if (!number(s.substr(0, dash), &a) || !number(s.substr(dash + 1), &b) || a > b) return false;
  for (unsigned i = a; i <= b; ++i) out->insert(i);
  return true;
}

// Splits at commas outside parentheses.
bool split_top(std::string_view s, std::vector<std::string_view>* parts) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    const char c = i < s.size() ? s[i] : ',';
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) return false;
    if (c == ',' && depth == 0) {
      parts->push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return depth == 0;
}

// -l "0-3,5"
bool parse_list(std::string_view s, std::set<unsigned>* out) {
  std::vector<std::string_view> parts;
  if (!split_top(s, &parts)) return false;
  for (std::string_view p : parts)
    if (!add_range(p, out)) return false;
  return !out->empty();
}

// --lcores "(0,2)@0,1@1,4-5": lcore ids before each '@'.
bool parse_map(std::string_view s, std::set<unsigned>* out) {
  std::vector<std::string_view> parts;
  if (!split_top(s, &parts)) return false;
  for (std::string_view p : parts) {
    std::string_view ids = p.substr(0, p.find('@'));
    if (!ids.empty() && ids.front() == '(') {
      if (ids.back() != ')' || !parse_list(ids.substr(1, ids.size() - 2), out)) return false;
    } else if (!add_range(ids, out)) {
      return false;
    }
  }
  return !out->empty();
}

// -c "0xf"
bool parse_mask(std::string_view s, std::set<unsigned>* out) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty()) return false;
  unsigned bit = 0;
  for (size_t i = s.size(); i-- > 0; bit += 4) {
    const char c = s[i];
    unsigned v;
    if (c >= '0' && c <= '9')
      v = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v = static_cast<unsigned>(c - 'A' + 10);
    else
      return false;
    for (unsigned k = 0; k < 4; ++k)
      if (v >> k & 1) out->insert(bit + k);
  }
  return !out->empty();
}

// The value of option `opt` at args[*i]: "-lX", "-l X", "--opt=X", "--opt X" (then *i moves past X).
bool option_value(std::span<char* const> args, size_t* i, std::string_view opt, std::string_view* v) {
  const std::string_view a = args[*i];
  if (a == opt) {
    if (*i + 1 >= args.size()) return false;
    *v = args[++*i];
    return true;
  }
  if (opt.size() == 2 && a.substr(0, 2) == opt && a.size() > 2) {
    *v = a.substr(2);
    return true;
  }
  if (a.substr(0, opt.size()) == opt && a.size() > opt.size() && a[opt.size()] == '=') {
    *v = a.substr(opt.size() + 1);
    return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> read_eal_vdevs(std::span<char* const> args) {
  std::vector<std::string> names;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view v;
    if (option_value(args, &i, "--vdev", &v) && !v.empty()) names.emplace_back(v.substr(0, v.find(',')));
  }
  return names;
}

std::optional<EalLcores> read_eal_lcores(std::span<char* const> args, std::string* error) {
  EalLcores r;
  std::optional<unsigned> main;
  bool given = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&](std::string_view opt, std::string_view* v) { return option_value(args, &i, opt, v); };
    std::string_view v;
    bool ok = true;
    if (value("-l", &v)) {
      r.lcores.clear(), ok = parse_list(v, &r.lcores), given = true;
    } else if (value("--lcores", &v)) {
      r.lcores.clear(), ok = parse_map(v, &r.lcores), given = true;
    } else if (value("-c", &v)) {
      r.lcores.clear(), ok = parse_mask(v, &r.lcores), given = true;
    } else if (value("--main-lcore", &v)) {
      unsigned m = 0;
      ok = number(v, &m);
      main = m;
    } else {
      continue;
    }
    if (!ok) {
      std::string msg = "EAL option ";
      msg.append(a);
      if (a.find(v) == std::string_view::npos) msg.append(" ").append(v);
      msg.append(": cannot read the lcores in '").append(v).append("' (e.g. -l 0-3, --lcores '(0,2)@0,1@1', -c 0xf)");
      *error = std::move(msg);
      return std::nullopt;
    }
  }
  if (!given) {  // EAL's default: every CPU this process may run on
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (unsigned c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) r.lcores.insert(c);
    if (r.lcores.empty()) r.lcores.insert(0);
  }
  r.main_lcore = main.value_or(*r.lcores.begin());
  if (!r.lcores.count(r.main_lcore)) {
    *error = "--main-lcore " + std::to_string(r.main_lcore) + " is not one of the lcores EAL is given";
    return std::nullopt;
  }
  return r;
}

}  // namespace inagg::dataplane
