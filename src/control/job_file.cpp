#include "inagg/control/job_file.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <vector>

#include "inagg/util/hmac.hpp"
#include "inagg/util/key_value.hpp"
#include "inagg/util/text.hpp"

namespace inagg::control {

using util::NumberError;
using util::parse_unsigned;
using util::quote_for_error;
using util::read_small_file;
using util::split_fields;
namespace {

constexpr uint32_t kMax24 = 0xffffff;
constexpr unsigned kMaxWorkers = 64;  // the engine's rank bitmasks are 64-bit

enum class Key {
  id,
  dtype,
  workers,
  message_bytes,
  payload_bytes,
  window,
  replay,
  tier,
  collective,
  chunk,
  channels,
  conn
};

// In Key order.
constexpr std::array<util::KeySpec, 12> kKeys{{
    {"id", true, false, "id = 7"},
    {"dtype", true, false, "dtype = fp32"},
    {"workers", true, false, "workers = 4"},
    {"message_bytes", true, false, "message_bytes = 65536"},
    {"payload_bytes", true, false, "payload_bytes = 1024"},
    {"window", true, false, "window = 8"},
    {"replay", false, false, "replay = false"},
    {"tier", false, false, "tier = flat"},
    {"collective", false, false, "collective = allreduce"},
    {"chunk", false, false, "chunk = 1"},
    {"channels", false, false, "channels = 2"},
    {"conn", true, true, "conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x000012, 0"},
}};

constexpr std::string_view kConnFields = "RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN[,PORT[,MAC]]";

// "<what>'<text>' is not a number ..." and friends; `range` is what the caller may write.
std::string number_text(std::string_view what, std::string_view text, NumberError e, std::string_view range) {
  const std::string q = std::string(what) + quote_for_error(text);
  switch (e) {
    case NumberError::negative:
      return q + " is negative; write a number in " + std::string(range);
    case NumberError::out_of_range:
      return q + " is out of range; write a number in " + std::string(range);
    default:
      return q + " is not a number (hex 0x... or decimal)";
  }
}

bool parse_number_field(std::string_view what, std::string_view text, uint64_t min, uint64_t max,
                        std::string_view range, uint64_t* out, std::string* problem) {
  NumberError e = NumberError::none;
  const std::optional<uint64_t> v = parse_unsigned(text, max, &e);
  if (v && *v < min) e = NumberError::out_of_range;
  if (!v || e != NumberError::none) {
    *problem = number_text(what, text, e, range);
    return false;
  }
  *out = *v;
  return true;
}

// "02:00:00:00:00:01": the Ethernet source the rank's packets carry.
bool parse_mac_field(std::string_view t, std::array<uint8_t, 6>* mac, std::string* problem) {
  bool ok = t.size() == 17;
  for (size_t i = 0; ok && i < 6; ++i) {
    ok = (i == 0 || t[3 * i - 1] == ':') && std::isxdigit(static_cast<unsigned char>(t[3 * i])) &&
         std::isxdigit(static_cast<unsigned char>(t[3 * i + 1]));
    if (ok) (*mac)[i] = static_cast<uint8_t>(std::stoul(std::string(t.substr(3 * i, 2)), nullptr, 16));
  }
  if (!ok || (((*mac)[0] | (*mac)[1] | (*mac)[2] | (*mac)[3] | (*mac)[4] | (*mac)[5]) == 0) || ((*mac)[0] & 1)) {
    *problem = "MAC " + quote_for_error(t) + " is not a station's MAC address (six hex pairs, e.g. 02:00:00:00:00:01)";
    return false;
  }
  return true;
}

bool parse_conn(std::string_view value, ConnectionSpec* c, std::string* problem) {
  const std::vector<std::string_view> f = split_fields(value);
  if (f.size() < 6 || f.size() > 8) {
    *problem =
        "expected 6 to 8 comma-separated fields " + std::string(kConnFields) + ", got " + std::to_string(f.size());
    return false;
  }
  static constexpr std::array<std::string_view, 8> kNames = {"RANK",    "SRC_IP",    "SRC_QPN", "DST_IP",
                                                             "DST_QPN", "START_PSN", "PORT",    "MAC"};
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].empty()) {
      *problem = "field " + std::to_string(i + 1) + " (" + std::string(kNames[i]) + ") is empty; write " +
                 std::string(kConnFields);
      return false;
    }
  }
  uint64_t rank = 0, src_qpn = 0, dst_qpn = 0, psn = 0, port = kAnyPort;
  if (!parse_number_field("rank ", f[0], 0, kMaxWorkers - 1, "0..63", &rank, problem)) return false;
  // A GID written as an IPv4-mapped IPv6 address (::ffff:10.0.0.1, as rdma-core and Soft-RoCE show
  // RoCEv2 GIDs) is the IPv4 address: the packets of such a QP are IPv4.
  const std::optional<util::IpAddr> src = util::parse_gid(f[1]), dst = util::parse_gid(f[3]);
  for (const auto& [ip, text] : {std::pair{src, f[1]}, std::pair{dst, f[3]}}) {
    if (!ip) {
      *problem = quote_for_error(text) + " is not an IPv4 or IPv6 address (e.g. 10.0.0.1 or fd00::1)";
      return false;
    }
  }
  if (!parse_number_field("QPN ", f[2], 0, kMax24, "0..0xffffff (QPNs are 24-bit)", &src_qpn, problem) ||
      !parse_number_field("QPN ", f[4], 0, kMax24, "0..0xffffff (QPNs are 24-bit)", &dst_qpn, problem) ||
      !parse_number_field("PSN ", f[5], 0, kMax24, "0..0xffffff (PSNs are 24-bit)", &psn, problem))
    return false;
  // PORT may be `any` where a MAC follows (the port left to the appliance's binding).
  if (f.size() >= 7 && f[6] != "any" &&
      !parse_number_field("port ", f[6], 0, kAnyPort - 1, "0..65534 (the appliance's DPDK port id) or any", &port,
                          problem))
    return false;
  std::array<uint8_t, 6> mac{};
  if (f.size() == 8 && !parse_mac_field(f[7], &mac, problem)) return false;
  if (src->version != dst->version) {
    *problem = "source " + std::string(f[1]) + " and destination " + std::string(f[3]) +
               " are of different IP versions; use IPv4 for both or IPv6 for both";
    return false;
  }
  c->rank = static_cast<unsigned>(rank);
  c->src_ip = *src;
  c->dst_ip = *dst;
  c->src_qpn = static_cast<uint32_t>(src_qpn);
  c->dst_qpn = static_cast<uint32_t>(dst_qpn);
  c->start_psn = static_cast<uint32_t>(psn);
  c->port = static_cast<uint16_t>(port);
  c->mac = mac;
  return true;
}

// Parses one `key = value` into *spec; returns false with *problem (the key is prefixed later).
bool parse_value(Key key, std::string_view value, JobSpec* spec, std::string* problem) {
  constexpr uint64_t kU32 = UINT32_MAX;
  uint64_t v = 0;
  switch (key) {
    case Key::id:
      if (!parse_number_field("", value, 0, kU32, "0..4294967295", &v, problem)) return false;
      spec->id = static_cast<uint32_t>(v);
      return true;
    case Key::dtype: {
      const std::optional<util::Dtype> d = util::parse_dtype(value);
      if (!d) {
        *problem = "unknown dtype " + quote_for_error(value) + "; valid: fp32, fp16, bf16, int32";
        return false;
      }
      spec->dtype = *d;
      return true;
    }
    case Key::workers:
      if (!parse_number_field("", value, 1, kMaxWorkers, "1..64", &v, problem)) return false;
      spec->workers = static_cast<unsigned>(v);
      return true;
    case Key::message_bytes:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->message_bytes = static_cast<uint32_t>(v);
      return true;
    case Key::payload_bytes:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->payload_bytes = static_cast<uint32_t>(v);
      return true;
    case Key::window:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->window = static_cast<unsigned>(v);
      return true;
    case Key::replay:
      if (value == "true" || value == "false") {
        spec->replay = value == "true";
        return true;
      }
      *problem = quote_for_error(value) + " is not a boolean; write true or false";
      return false;
    case Key::tier:
      if (value == "flat" || value == "leaf" || value == "spine") {
        spec->tier = value == "leaf" ? Tier::leaf : value == "spine" ? Tier::spine : Tier::flat;
        return true;
      }
      *problem = "unknown tier " + quote_for_error(value) +
                 "; valid: flat (all ranks behind this appliance), leaf (a rack of a job across racks), spine "
                 "(the racks' uplinks)";
      return false;
    case Key::collective:
      if (const std::optional<Collective> c = collective_of(value)) {
        spec->collective = *c;
        return true;
      }
      *problem = "unknown collective " + quote_for_error(value) +
                 "; valid: allreduce, reduce_scatter (rotated shards), all_gather (rotated placeholders)";
      return false;
    case Key::chunk:
      if (!parse_number_field("", value, 1, 1u << 20, "1..1048576 (messages per chunk)", &v, problem)) return false;
      spec->chunk = static_cast<uint32_t>(v);
      return true;
    case Key::channels:
      if (!parse_number_field("", value, 1, kMaxChannels, "1.." + std::to_string(kMaxChannels), &v, problem))
        return false;
      spec->channels = static_cast<uint16_t>(v);
      return true;
    case Key::conn: {
      ConnectionSpec c;
      if (!parse_conn(value, &c, problem)) return false;
      // A job has at most 64 ranks and kMaxChannels channels: more conn lines are refused here,
      // before any of them reaches the appliance's lcores.
      if (spec->conns.size() >= size_t{kMaxWorkers} * kMaxChannels) {
        *problem = "more than " + std::to_string(kMaxWorkers * kMaxChannels) +
                   " conn lines (a job has at most 64 workers and " + std::to_string(kMaxChannels) +
                   " channels, one conn line each)";
        return false;
      }
      spec->conns.push_back(c);
      return true;
    }
  }
  return false;
}

std::optional<JobSpec> parse(std::string_view text, util::ParseProblem* p) {
  JobSpec spec;
  bool any_conn = false;
  const bool ok = util::parse_key_values(
      text, kKeys,
      [&](size_t key, std::string_view value, std::string* problem) {
        any_conn |= static_cast<Key>(key) == Key::conn;
        return parse_value(static_cast<Key>(key), value, &spec, problem);
      },
      p);
  if (ok && spec.conns.size() > size_t{kMaxWorkers} * spec.channels) {
    p->line = 0;
    p->text = "conn: " + std::to_string(spec.conns.size()) + " conn lines for " + std::to_string(spec.channels) +
              " channel(s): a job has at most 64 workers, one conn line each per channel";
    return std::nullopt;
  }
  if (ok && spec.channels == 1) return spec;
  if (ok) {  // channel by channel: the first `workers` conn lines are channel 0's, and so on
    for (size_t i = 0; i < spec.conns.size(); ++i)
      spec.conns[i].channel = static_cast<uint16_t>(spec.workers ? i / spec.workers : 0);
    if (check_channels(spec, &p->text)) return spec;
    p->line = 0;
    return std::nullopt;
  }
  if (p->line == 0 && !any_conn) p->text += " (conn: one line per worker, " + std::string(kConnFields) + ")";
  return std::nullopt;
}

}  // namespace

std::optional<JobSpec> parse_job(std::string_view text, std::string* error) {
  util::ParseProblem p;
  std::optional<JobSpec> spec = parse(text, &p);
  if (!spec) *error = p.message();
  return spec;
}

std::optional<JobSpec> load_job_file(const std::string& path, std::string* error, std::string* text_out) {
  std::string text;
  if (!read_small_file(path, "job file", kMaxJobFileBytes, "1 MiB (a 64-worker job is about 5 KiB)", &text, error))
    return std::nullopt;
  util::ParseProblem p;
  std::optional<JobSpec> spec = parse(text, &p);
  if (!spec) *error = p.message(path);
  if (spec && text_out) *text_out = std::move(text);
  return spec;
}

std::string format_job(const JobSpec& s) {
  char buf[160];
  std::string out = "# inagg job " + std::to_string(s.id) + "\n";
  out += "id = " + std::to_string(s.id) + "\n";
  out += "dtype = " + std::string(util::dtype_name(s.dtype)) + "\n";
  out += "workers = " + std::to_string(s.workers) + "\n";
  out += "message_bytes = " + std::to_string(s.message_bytes) + "\n";
  out += "payload_bytes = " + std::to_string(s.payload_bytes) + "\n";
  out += "window = " + std::to_string(s.window) + "\n";
  out += std::string("replay = ") + (s.replay ? "true" : "false") + "\n";
  if (s.tier != Tier::flat) out += std::string("tier = ") + tier_name(s.tier) + "\n";  // a flat job keeps its digest
  if (s.collective != Collective::allreduce) {  // (so an allreduce keeps its digest)
    out += std::string("collective = ") + collective_name(s.collective) + "\n";
    out += "chunk = " + std::to_string(s.chunk) + "\n";
  }
  if (s.channels != 1) out += "channels = " + std::to_string(s.channels) + "\n";  // (a job of one keeps its digest)
  out += "# conn = " + std::string(kConnFields) + "\n";
  auto conn_line = [&](const ConnectionSpec& c) {
    std::snprintf(buf, sizeof buf, "conn = %u, %s, 0x%06x, %s, 0x%06x, 0x%06x", c.rank, util::ip_text(c.src_ip).c_str(),
                  c.src_qpn, util::ip_text(c.dst_ip).c_str(), c.dst_qpn, c.start_psn);
    out += buf;
    if (c.port != kAnyPort || c.has_mac())  // (so a job naming neither keeps its digest)
      out += ", " + (c.port != kAnyPort ? std::to_string(c.port) : std::string("any"));
    if (c.has_mac()) {
      std::snprintf(buf, sizeof buf, ", %02x:%02x:%02x:%02x:%02x:%02x", c.mac[0], c.mac[1], c.mac[2], c.mac[3],
                    c.mac[4], c.mac[5]);
      out += buf;
    }
    out += "\n";
  };
  if (s.channels == 1) {
    for (const ConnectionSpec& c : s.conns) conn_line(c);
    return out;
  }
  for (unsigned ch = 0; ch < s.channels; ++ch) {  // channel by channel, as parse_job reads them
    out += "# channel " + std::to_string(ch) + "\n";
    for (const ConnectionSpec& c : s.conns)
      if (c.channel == ch) conn_line(c);
  }
  return out;
}

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::leaf:
      return "leaf";
    case Tier::spine:
      return "spine";
    default:
      return "flat";
  }
}

bool resumable(const JobSpec& spec, std::string* why) {
  if (spec.tier == Tier::leaf) {
    *why = "a leaf does not resume after a restart";
    return false;
  }
  if (spec.collective == Collective::allreduce) return true;
  const uint64_t ppm = spec.payload_bytes ? spec.message_bytes / spec.payload_bytes : 0;
  const uint64_t round = uint64_t{spec.workers > 1 ? spec.workers - 1 : 1} * std::max<uint32_t>(spec.chunk, 1) * ppm;
  if (round == 0 || (uint64_t{1} << 24) % round != 0) {
    *why = std::string(spec.collective == Collective::all_gather ? "an " : "a ") + collective_name(spec.collective) +
           " resumes after a restart only when its rounds divide the 2^24 PSNs, and its are " + std::to_string(round) +
           " packets ((workers - 1) x chunk x message_bytes / payload_bytes): past a wrap of its PSNs, where its "
           "ranks stand in a round cannot be told";
    return false;
  }
  return true;
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    default:
      return "allreduce";
  }
}

std::optional<Collective> collective_of(std::string_view name) {
  for (Collective c : {Collective::allreduce, Collective::reduce_scatter, Collective::all_gather})
    if (name == collective_name(c)) return c;
  return std::nullopt;
}

std::string job_digest(const JobSpec& spec) {
  JobSpec s = spec;
  for (ConnectionSpec& c : s.conns) c.mac = {};
  return util::sha256_hex(format_job(s));
}

std::string job_text_digest(const JobSpec& spec) { return util::sha256_hex(format_job(spec)); }

}  // namespace inagg::control
