// Who may use the control socket over TCP (socket.hpp): the tenants' file, a client's credential,
// the frames' MACs and what a tenant may ask.
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

}  // namespace

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
    } else if (w.size() == 3) {
      t.name = w[0];
      t.secret = w[2];
      if (!parse_job_range(w[1], &t)) {
        *error = where + "'" + w[1] + "' is not a job range (*, N or N-M)";
        return false;
      }
    } else {
      *error = where + "not TENANT JOBS SECRET (e.g. 'alice 100-199 <24 random bytes in base64>')";
      return false;
    }
    if (t.secret.size() < 16) {
      *error = where + "tenant " + t.name + "'s secret is shorter than 16 characters";
      return false;
    }
    for (const Tenant& o : *tenants)
      if (o.name == t.name) {
        *error = where + "tenant " + t.name + " appears twice";
        return false;
      }
    tenants->push_back(t);
  }
  if (tenants->empty()) {
    *error = "no tenant (one line per tenant: TENANT JOBS SECRET)";
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

std::string tenant_refusal(const Tenant& t, const Request& r) {
  if (t.every_job()) return "";
  const std::string range =
      "tenant " + t.name + " manages jobs " + std::to_string(t.first_job) + ".." + std::to_string(t.last_job) + " only";
  switch (r.verb) {
    case Request::Verb::list:
      return "";  // filtered
    case Request::Verb::stats:
      if (!r.has_id) return "stats without a job id covers every tenant's jobs; ask stats <id> (" + range + ")";
      [[fallthrough]];
    case Request::Verb::add:
    case Request::Verb::remove:
      if (!t.owns(r.id)) return "job " + std::to_string(r.id) + " is not yours: " + range;
      return "";
  }
  return "unknown request";
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
