// RankOptions::validate (rank.hpp): every option a rank takes, checked once, each refusal one
// sentence naming the option as the front end's user spells it.
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "inagg/client/rank.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/util/hmac.hpp"
#include "inagg/wire/xagg_mac.hpp"

namespace inagg::client {

std::optional<util::Dtype> parse_dtype_name(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "float" || n == "float32" || n == "fp32") return util::Dtype::fp32;
  if (n == "half" || n == "float16" || n == "fp16") return util::Dtype::fp16;
  if (n == "bfloat16" || n == "bf16") return util::Dtype::bf16;
  if (n == "int32" || n == "int") return util::Dtype::int32;
  return std::nullopt;
}

std::string RankOptions::validate_job(const RankOptionNames& n) {
  RankGeometry& g = geometry;
  const std::optional<util::Dtype> dt = parse_dtype_name(g.dtype);
  if (!dt)
    return n.dtype + " must be fp32, fp16, bf16 or int32 (or nccl-tests' float, half, bfloat16, int32); got '" +
           g.dtype + "'";
  if (g.ranks < 2 || g.ranks > 64) return n.ranks + " must be between 2 and 64";
  if (rank_given && g.rank >= g.ranks) return n.rank + " must be below " + n.ranks;
  RackPlan& rack = resolved.rack;
  if (address) {
    // The plan's rank-r address is this rank's own: its interface gives the payload (auto) and
    // the checks against its MTU. The peers' addresses come from their endpoints.
    if (address->version != util::IpVersion::v4)
      return n.address + " must be an IPv4 address (RoCEv2 over IPv4), not " + util::ip_text(*address);
    rack.ip_base = util::IpAddr::v4(address->v4_host_order() - g.rank - 1);
  } else {
    const std::optional<util::IpAddr> base = util::parse_ip(ip_base);
    if (!base || base->version != util::IpVersion::v4) return n.ip_base + " must be an IPv4 address";
    rack.ip_base = *base;
  }
  rack.mac = interface_mac(rack.ip_of(g.rank));
  std::string dev;
  const std::optional<uint32_t> mtu = interface_mtu(rack.ip_of(g.rank), &dev);
  const std::string where = mtu ? dev + " (MTU " + std::to_string(*mtu) + ")" : "";
  if (g.payload == 0) {
    g.payload = payload_for_mtu(mtu.value_or(1500), g.message);
    if (g.payload == 0)
      return n.payload + " auto: no path MTU payload of 256..4096 bytes fits " +
             (mtu ? where : std::string("an MTU of 1500")) + " and divides " + n.message + " " +
             std::to_string(g.message) + ": give " + n.payload + " and a " + n.message + " that is a multiple of it";
  } else if (mtu && g.payload + kRoceV4Overhead > *mtu) {
    return n.payload + " " + std::to_string(g.payload) + " needs an MTU of " +
           std::to_string(g.payload + kRoceV4Overhead) + " or more, but this rank's address is on " + where +
           ": give " + n.payload + " " + std::to_string(std::max(256u, payload_for_mtu(*mtu, 1u << 30))) +
           " or raise the link's MTU";
  }
  if (g.payload % 4 || g.message % g.payload)
    return n.message + " must be a multiple of " + n.payload + ", and " + n.payload + " a multiple of 4";
  if (g.window == 0) return n.window + " must be at least 1";
  const std::optional<control::Collective> c = control::collective_of(g.collective);
  if (!c) return n.collective + " must be allreduce, reduce_scatter or all_gather; got '" + g.collective + "'";
  if (g.chunk == 0) return n.chunk + " must be at least 1 message";
  if (g.channels < 1 || g.channels > control::kMaxChannels)
    return n.channels + " must be 1.." + std::to_string(control::kMaxChannels);
  if (g.channels > 1 && *c != control::Collective::allreduce)
    return n.channels + " " + std::to_string(g.channels) + ": a " + g.collective +
           " runs on one channel (its rotated rounds are one connection's; channels of it are not built yet)";
  resolved.dtype = *dt;
  resolved.collective = *c;
  rack.workers = g.ranks;
  rack.rank = g.rank;
  rack.job_id = job_id;
  rack.dtype = *dt;
  rack.message = g.message;
  rack.payload = g.payload;
  rack.window = g.window;
  rack.max_queued_bytes = max_queued_kib * 1024;
  rack.rto_min_ms = rto_min_ms;
  rack.cwnd_min_bytes = cwnd_min_kib * 1024;
  rack.collective = *c;
  rack.chunk = g.chunk;
  rack.channels = g.channels;
  return "";
}

uint64_t RankOptions::chunk_bytes_for(uint64_t data_bytes) const {
  // The chunk formula's inverse (Rank): whole messages, each carrying its data besides the tallies.
  const uint64_t per = geometry.message - 2 * util::dtype_size(resolved.dtype);
  return std::max<uint64_t>(1, (data_bytes + per - 1) / per) * geometry.message;
}

namespace {

// The XDP tier's plan (xdp, auto): the heads, the groups' multicast addresses, the job's key.
std::string resolve_tier(RankOptions& o, const RankOptionNames& n) {
  XdpPlan& x = o.resolved.xdp;
  const unsigned ranks = o.geometry.ranks;
  x.heads.clear();
  for (size_t start = 0; start <= o.xdp_heads.size();) {
    const size_t comma = std::min(o.xdp_heads.find(',', start), o.xdp_heads.size());
    const std::optional<util::IpAddr> h = util::parse_ip(o.xdp_heads.substr(start, comma - start));
    if (!h || h->version != util::IpVersion::v4)
      return n.xdp_heads + " must list the heads' IPv4 addresses, comma-separated";
    x.heads.push_back(*h);
    start = comma + 1;
  }
  x.group_size = o.xdp_group_size;
  const unsigned group_size = x.size_of_groups(ranks), groups = (ranks + group_size - 1) / group_size;
  if (x.heads.size() != groups)
    return std::to_string(ranks) + " workers in groups of " + std::to_string(group_size) + " need " +
           std::to_string(groups) + " " + n.xdp_heads + ", got " + std::to_string(x.heads.size());
  const std::optional<util::IpAddr> mcast = util::parse_ip(o.xdp_mcast);
  if (!mcast || mcast->version != util::IpVersion::v4 || (mcast->bytes[0] & 0xf0) != 0xe0)
    return n.xdp_mcast + " must be an IPv4 multicast address (e.g. 239.77.0.1)";
  if (o.job_id > 255 || o.xdp_scale <= 0 || o.xdp_timeout_ms <= 0 || o.xdp_port == 0 || o.xdp_port > 65535)
    return "the XDP tier needs " + n.job_id + " 0..255, " + n.xdp_scale + " > 0, " + n.xdp_timeout_ms +
           " > 0 and a UDP port";
  x.mcast = *mcast;
  if (o.xdp_key_file.empty() && !std::getenv(wire::kXaggKeyEnv))
    return n.mode + " " + o.mode +
           " needs the job's key for the XDP tier (every packet carries a MAC under it): " + n.xdp_key_file +
           " FILE, the file the heads' key_file names (inagg-xdp key FILE makes one), or $" + wire::kXaggKeyEnv;
  std::string why;
  if (!wire::load_xagg_key(wire::kXaggKeyEnv, o.xdp_key_file, &x.key, &why)) return why;
  x.values = o.xdp_values;
  x.window = o.xdp_window;
  x.port = static_cast<uint16_t>(o.xdp_port);
  x.timeout_ms = o.xdp_timeout_ms;
  return "";
}

// The ranks' meeting's secret: $INAGG_EXCHANGE_SECRET, the file, the one given; or none by name.
std::string resolve_meeting_secret(RankOptions& o, const RankOptionNames& n) {
  std::string why;
  if (std::getenv(kExchangeSecretEnv) || !o.exchange_secret_file.empty()) {
    if (!util::load_secret(kExchangeSecretEnv, o.exchange_secret_file, &o.exchange_secret, &why))
      return std::string("the ranks' meeting secret: ") + why;
    return "";
  }
  if (!o.exchange_secret.empty() || o.insecure_exchange) return "";
  return n.meeting + " needs the job's secret, the same on every rank: set $" + kExchangeSecretEnv +
         " where the job is launched (e.g. export " + kExchangeSecretEnv +
         "=$(head -c 24 /dev/urandom | base64); mpirun -x " + kExchangeSecretEnv + " and srun pass it on) or give " +
         n.exchange_secret_file + " FILE (mode 0600)" + n.exchange_secret_hint + "; on a lab network of your own, " +
         n.insecure_exchange + " runs the meeting without one";
}

}  // namespace

std::string RankOptions::validate(const RankOptionNames& n) {
  if (!rank_given) return n.rank + " must be given and below " + n.ranks;
  if (std::string why = validate_job(n); !why.empty()) return why;
  Mode& m = resolved.mode;
  if (mode == "ina")
    m = Mode::ina;
  else if (mode == "ring")
    m = Mode::ring;
  else if (mode == "xdp")
    m = Mode::xdp;
  else if (mode == "auto")
    m = Mode::automatic;
  else
    return n.mode + " must be ina (through the appliance), ring (the classic ring allreduce), xdp (the XDP tier) or " +
           "auto (ina, falling over to xdp)";
  if (address && (m != Mode::ina || transport != "udp"))
    return n.address + " (the ranks' endpoints through the caller's channel) runs " + n.mode + " ina over " +
           n.transport + " udp";
  if (resolved.collective != control::Collective::allreduce) {
    const std::string what = n.collective + " " + geometry.collective;
    if (m != Mode::ina)
      return what + " runs through the appliance only (" + n.mode +
             " ina); the ring, the XDP tier and auto do allreduce";
    if (!rack_of.empty()) return what + " runs on one appliance: it cannot be split across racks (" + n.racks + ") yet";
  }
  if (geometry.channels > 1) {
    // Channels are the appliance's: each its own engine job. The ring's QPs are not summed, and
    // the exchange's (verbs ranks) have one QP pair a rank yet. A caller's channel of endpoints
    // (address) derives every channel from the endpoint's channel 0, as the rack plan does.
    const std::string what = n.channels + " " + std::to_string(geometry.channels);
    if (m != Mode::ina && m != Mode::automatic)
      return what + " stripes a job over the appliance's lcores: it runs " + n.mode + " ina or auto";
    if (transport != "udp" || exchange)
      return what + " runs on the software transport (" + n.transport +
             " udp); channels over verbs or an exchange of endpoints are not built yet";
    if (!rack_of.empty()) return what + ": a job across racks (" + n.racks + ") has one channel yet";
  }
  if (geometry.chunk_bytes == 0) return n.chunk_bytes + " must be positive";
  if (!(ack_timeout_ms > 0)) return n.ack_timeout_ms + " must be positive";
  if (!(timeout_s > 0)) return n.timeout_s + " must be positive";
  if (stall_s < 0) return n.stall_s + " must be positive, or 0 for none";
  if (uses_tier())
    if (std::string why = resolve_tier(*this, n); !why.empty()) return why;
  if (control.rfind(control::kTcpScheme, 0) == 0) {
    if (control_secret_file.empty() && !std::getenv(control::kControlSecretEnv))
      return n.control + " " + control + " needs a tenant's credential: " + n.control_secret_file +
             " or $INAGG_CONTROL_SECRET (one of the tenants the appliance's --control-secret-file names)";
    std::string why;
    if (!control::load_secret_file(control_secret_file, &resolved.control_secret, &why))
      return n.control_secret_file + ": " + why;
  }
  resolved.use_verbs = transport == "verbs";
  const bool exchange_port_ok = exchange_port > 0 && exchange_port <= 65535;
  if (resolved.use_verbs) {
    if (!verbs_supported())
      return n.transport +
             " verbs: this build has no verbs support (meson did not find libibverbs; install "
             "libibverbs-dev and rebuild)";
    if (m != Mode::ina && m != Mode::ring)
      return n.transport + " verbs runs " + n.mode + " ina or ring (auto's fall-over over verbs is not done yet)";
    if (!exchange_port_ok) return n.exchange_port + " must be a TCP port";
    if (verbs.qp_timeout < 1 || verbs.qp_timeout > 31) return n.qp_timeout + " must be 1..31 (4.096 us x 2^t)";
  } else if (transport == "udp" && exchange) {
    if (m != Mode::ina && m != Mode::ring)
      return n.exchange + " runs " + n.mode + " ina or ring (auto's fall-over with verbs ranks is not done yet)";
    if (!exchange_port_ok) return n.exchange_port + " must be a TCP port";
  } else if (transport != "udp") {
    return n.transport + " must be udp (the software RoCE endpoint) or verbs (rdma-core: an RDMA NIC or Soft-RoCE)";
  }
  // Every rank with a transport on the rack plan meets the others at rank 0 (the exchange, or the
  // meeting on the plan): with the job's secret, or, by name only, without one on a lab network.
  if (m != Mode::xdp && !address && (meet || resolved.use_verbs || exchange)) {
    if (!exchange_port_ok) return n.exchange_port + " must be a TCP port";
    if (std::string why = resolve_meeting_secret(*this, n); !why.empty()) return why;
  }
  return "";
}

}  // namespace inagg::client
