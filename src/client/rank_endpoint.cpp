// The lines of the ranks' exchange (rendezvous.hpp): one rank's endpoint as text and back.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "inagg/client/rendezvous.hpp"

namespace inagg::client {
namespace {

// "key=value" fields of a line.
std::optional<std::string> field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string tok;
  while (in >> tok)
    if (tok.compare(0, key.size() + 1, key + "=") == 0) return tok.substr(key.size() + 1);
  return std::nullopt;
}

std::optional<uint64_t> number(const std::string& line, const std::string& key, uint64_t max) {
  const std::optional<std::string> v = field(line, key);
  if (!v || v->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 0);
  if (errno || *end || n > max) return std::nullopt;
  return n;
}

}  // namespace

std::optional<unsigned> rank_field(const std::string& line) {
  const std::optional<uint64_t> r = number(line, "rank", 63);
  return r ? std::optional<unsigned>(static_cast<unsigned>(*r)) : std::nullopt;
}

std::vector<RankConnection> connections_of(const std::vector<RankEndpoint>& all) {
  std::vector<RankConnection> c;
  for (const RankEndpoint& e : all) c.push_back({e.gid, e.send_qpn, e.recv_qpn, e.start_psn});
  return c;
}

std::string format_endpoint(const RankEndpoint& e) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "endpoint rank=%u gid=%s send_qpn=0x%x recv_qpn=0x%x start_psn=0x%x recv_addr=0x%" PRIx64
                " recv_rkey=0x%x payload=%u workers=%u",
                e.rank, util::ip_text(e.gid).c_str(), e.send_qpn, e.recv_qpn, e.start_psn, e.recv_addr, e.recv_rkey,
                e.payload, e.workers);
  return buf;
}

std::optional<RankEndpoint> parse_endpoint(const std::string& line, std::string* error) {
  RankEndpoint e;
  const std::optional<uint64_t> rank = number(line, "rank", 63), sq = number(line, "send_qpn", 0xffffff),
                                rq = number(line, "recv_qpn", 0xffffff), psn = number(line, "start_psn", 0xffffff),
                                addr = number(line, "recv_addr", UINT64_MAX),
                                rkey = number(line, "recv_rkey", UINT32_MAX), p = number(line, "payload", 1 << 16);
  const std::optional<std::string> gid_text = field(line, "gid");
  const std::optional<util::IpAddr> gid = gid_text ? util::parse_ip(*gid_text) : std::nullopt;
  if (line.rfind("endpoint ", 0) != 0 || !rank || !sq || !rq || !psn || !addr || !rkey || !p || !gid) {
    *error = "not an endpoint line (rank, gid, send_qpn, recv_qpn, start_psn, recv_addr, recv_rkey, payload): '" +
             line.substr(0, 200) + "'";
    return std::nullopt;
  }
  e.rank = static_cast<unsigned>(*rank);
  e.gid = *gid;
  e.send_qpn = static_cast<uint32_t>(*sq);
  e.recv_qpn = static_cast<uint32_t>(*rq);
  e.start_psn = static_cast<uint32_t>(*psn);
  e.recv_addr = *addr;
  e.recv_rkey = static_cast<uint32_t>(*rkey);
  e.payload = static_cast<uint32_t>(*p);
  e.workers = static_cast<unsigned>(number(line, "workers", 64).value_or(0));
  return e;
}

}  // namespace inagg::client
