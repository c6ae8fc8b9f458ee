#include "inagg/xdp/head_program.hpp"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "embedded_objects.hpp"

namespace inagg::xdp {
namespace {

constexpr std::array<std::string_view, XAGG_NUM_COUNTERS> kNames = {
#define XAGG_COUNTER_NAME(name, text) #name,
    XAGG_COUNTERS(XAGG_COUNTER_NAME)
#undef XAGG_COUNTER_NAME
};
constexpr std::array<std::string_view, XAGG_NUM_COUNTERS> kHelp = {
#define XAGG_COUNTER_HELP(name, text) text,
    XAGG_COUNTERS(XAGG_COUNTER_HELP)
#undef XAGG_COUNTER_HELP
};

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

std::string bpf_hint(int err) {
  if ((err == -EPERM || err == -EACCES) && ::geteuid() != 0)
    return " (loading BPF programs needs root: CAP_BPF and CAP_NET_ADMIN)";
  return "";
}

// BPF_TCX_INGRESS (Linux 6.6): this system's uapi headers predate it.
constexpr int kTcxIngress = 46;

uint32_t mode_flags(AttachMode mode) { return mode == AttachMode::native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE; }

// Opens and loads an embedded object; `resize` may change map sizes before the load.
template <typename Resize>
bpf_object* load_object(const unsigned char* bytes, size_t size, const char* name, Resize resize, std::string* error) {
  LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = name);
  bpf_object* obj = bpf_object__open_mem(bytes, size, &opts);
  if (!obj) {
    *error = std::string("cannot open the BPF object ") + name + ": " + errno_text(errno);
    return nullptr;
  }
  if (!resize(obj)) {
    bpf_object__close(obj);
    *error = std::string("cannot size the maps of ") + name;
    return nullptr;
  }
  if (const int err = bpf_object__load(obj); err) {
    bpf_object__close(obj);
    *error = std::string("the kernel refused the BPF object ") + name + ": " + errno_text(err) + bpf_hint(err) +
             " (libbpf printed the verifier's reason above)";
    return nullptr;
  }
  return obj;
}

int map_fd(bpf_object* obj, const char* name) {
  bpf_map* m = bpf_object__find_map_by_name(obj, name);
  return m ? bpf_map__fd(m) : -1;
}

// A loaded program's name and run counts (the counts only while sysctl kernel.bpf_stats_enabled=1).
struct ProgramInfo {
  std::string name = "?";
  uint64_t run_cnt = 0, run_time_ns = 0;
};

ProgramInfo program_info(uint32_t id) {
  ProgramInfo p;
  const int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return p;
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) p = {info.name, info.run_cnt, info.run_time_ns};
  ::close(fd);
  return p;
}

}  // namespace

std::optional<AttachMode> parse_attach_mode(std::string_view t) {
  if (t == "native") return AttachMode::native;
  if (t == "generic") return AttachMode::generic;
  return std::nullopt;
}

std::string_view attach_mode_name(AttachMode m) { return m == AttachMode::native ? "native" : "generic"; }
std::string_view counter_name(size_t i) { return i < kNames.size() ? kNames[i] : "?"; }
std::string_view counter_help(size_t i) { return i < kHelp.size() ? kHelp[i] : "?"; }

std::unique_ptr<HeadProgram> HeadProgram::load(unsigned max_jobs, std::string* error) {
  if (max_jobs == 0 || max_jobs > XAGG_MAX_JOBS) {
    *error = "max jobs must be 1.." + std::to_string(XAGG_MAX_JOBS);
    return nullptr;
  }
  std::unique_ptr<HeadProgram> h(new HeadProgram);
  h->max_jobs_ = max_jobs;
  h->obj_ = load_object(
      embedded::xagg_head, embedded::xagg_head_size, "xagg_head",
      [max_jobs](bpf_object* obj) {
        bpf_map* slots = bpf_object__find_map_by_name(obj, "xagg_slots");
        return slots && bpf_map__set_max_entries(slots, max_jobs * XAGG_MAX_SLOTS) == 0;
      },
      error);
  if (!h->obj_) return nullptr;
  bpf_program* prog = bpf_object__find_program_by_name(h->obj_, "xagg_head");
  h->prog_fd_ = prog ? bpf_program__fd(prog) : -1;
  h->config_fd_ = map_fd(h->obj_, "xagg_config");
  h->jobs_fd_ = map_fd(h->obj_, "xagg_jobs");
  h->slots_fd_ = map_fd(h->obj_, "xagg_slots");
  h->stats_fd_ = map_fd(h->obj_, "xagg_stats");
  h->members_fd_ = map_fd(h->obj_, "xagg_members");
  bpf_program* fanout = bpf_object__find_program_by_name(h->obj_, "xagg_fanout");
  h->fanout_fd_ = fanout ? bpf_program__fd(fanout) : -1;
  if (h->prog_fd_ < 0 || h->fanout_fd_ < 0 || h->config_fd_ < 0 || h->jobs_fd_ < 0 || h->slots_fd_ < 0 ||
      h->stats_fd_ < 0 || h->members_fd_ < 0) {
    *error = "the embedded BPF object lacks the xagg_head program or one of its maps (a build problem)";
    return nullptr;
  }
  return h;
}

HeadProgram::~HeadProgram() {
  detach();
  if (obj_) bpf_object__close(obj_);
}

bool HeadProgram::set_identity(uint16_t port, const util::IpAddr& ip, const wire::MacAddr& mac, std::string* error) {
  if (ip.version != util::IpVersion::v4 || port == 0) {
    *error = "the head needs an IPv4 address and a non-zero UDP port";
    return false;
  }
  xagg_config c{};
  std::memcpy(&c.self_ip, ip.bytes.data(), 4);
  c.port = htons(port);
  std::memcpy(c.self_mac, mac.data(), 6);
  const uint32_t key = 0;
  if (const int err = bpf_map_update_elem(config_fd_, &key, &c, BPF_ANY); err) {
    *error = "cannot write xagg_config: " + errno_text(err);
    return false;
  }
  return true;
}

bool HeadProgram::attach(int ifindex, AttachMode mode, std::string* error) {
  detach();
  LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = mode_flags(mode));
  const int fd = bpf_link_create(prog_fd_, ifindex, BPF_XDP, &opts);
  if (fd < 0) {
    *error = "cannot attach xagg_head in " + std::string(attach_mode_name(mode)) + " mode: " + errno_text(fd);
    if (fd == -EBUSY || fd == -EEXIST)
      *error += " (the interface already has an XDP program: `inagg-xdp status --iface` shows it)";
    if (fd == -EOPNOTSUPP && mode == AttachMode::native)
      *error += " (the driver has no native XDP: use --mode generic)";
    return false;
  }
  link_fd_ = fd;
  ifindex_ = ifindex;
  if (!update_fanout(false, error)) {
    detach();
    return false;
  }
  return true;
}

bool HeadProgram::update_fanout(bool also_needed, std::string* error) {
  bool needed = also_needed;
  for (const auto& [id, j] : jobs_) needed |= j.unicast;
  if (!needed && fanout_link_fd_ >= 0) {
    ::close(fanout_link_fd_);
    fanout_link_fd_ = -1;
  }
  if (!needed || fanout_link_fd_ >= 0 || link_fd_ < 0) return true;
  const int fd = bpf_link_create(fanout_fd_, ifindex_, static_cast<bpf_attach_type>(kTcxIngress), nullptr);
  if (fd < 0) {
    if (error)
      *error = "cannot attach xagg_fanout (TC ingress, for fanout = unicast): " + errno_text(fd) +
               (fd == -EINVAL ? " (TCX links need Linux 6.6 or later; use fanout = multicast)" : "");
    return false;
  }
  fanout_link_fd_ = fd;
  return true;
}

void HeadProgram::detach() {
  if (link_fd_ >= 0) ::close(link_fd_);
  if (fanout_link_fd_ >= 0) ::close(fanout_link_fd_);
  link_fd_ = fanout_link_fd_ = -1;
}

bool HeadProgram::add_job(const HeadJob& job, std::string* error) {
  if (job.id >= XAGG_MAX_JOBS) {
    *error = "job id " + std::to_string(job.id) + " is above " + std::to_string(XAGG_MAX_JOBS - 1);
    return false;
  }
  if (job.parent && !job.parent_mac) {
    *error = "job " + std::to_string(job.id) + ": the parent's Ethernet address is not known (give parent_mac)";
    return false;
  }
  for (size_t r = 0; r < job.members; ++r) {
    if (r >= job.member.size() || !job.member[r] || !job.member[r]->mac) {
      *error = "job " + std::to_string(job.id) + ": the Ethernet address of member " + std::to_string(r) +
               " is not known (the head answers a member only at its bound address: give member = RANK, IP, MAC)";
      return false;
    }
  }
  if (!job.key) {
    *error = "job " + std::to_string(job.id) + ": no MAC key (key_file, read by the agent)";
    return false;
  }
  if (used_keys_.count({job.id, job.key->bytes})) {
    *error = "job " + std::to_string(job.id) +
             " was added on this head before with this key: its chunk numbers start " +
             "over, so the earlier run's packets would verify and be summed into this one; make a new key for every " +
             "run (inagg-xdp key FILE) and give it to the heads' key_file and the workers' --xdp-key-file";
    return false;
  }
  // The TC program first: a job that cannot have its fan-out leaves the maps as they were.
  if (job.unicast && !update_fanout(true, error)) return false;
  unsigned block = 0;
  if (auto it = block_of_.find(job.id); it != block_of_.end()) {
    block = it->second;
  } else {
    std::vector<bool> used(max_jobs_);
    for (const auto& [id, b] : block_of_) used[b] = true;
    block = static_cast<unsigned>(std::find(used.begin(), used.end(), false) - used.begin());
    if (block == max_jobs_) {
      *error = "no room for job " + std::to_string(job.id) + ": this head holds " + std::to_string(max_jobs_) +
               " jobs at once (remove one, or restart the agent with a larger --max-jobs)";
      return false;
    }
  }
  xagg_job j{};
  j.active = 1;
  j.gen = next_gen_++;
  j.members = static_cast<uint16_t>(job.members);
  j.max_values = static_cast<uint16_t>(job.values);
  j.nslots = static_cast<uint16_t>(2 * job.window);
  j.slot_base = static_cast<uint16_t>(block * XAGG_MAX_SLOTS);
  j.total_weight = job.total_weight;
  j.member_mask = job.members >= 64 ? ~0ull : (1ull << job.members) - 1;
  j.fanout = job.unicast ? XAGG_FANOUT_UNICAST : XAGG_FANOUT_MULTICAST;
  std::memcpy(&j.group_ip, job.group.bytes.data(), 4);
  const wire::MacAddr gm = multicast_mac(job.group);
  std::memcpy(j.group_mac, gm.data(), 6);
  if (job.parent) {
    j.has_parent = 1;
    j.parent_rank = static_cast<uint16_t>(job.parent_rank);
    std::memcpy(&j.parent_ip, job.parent->bytes.data(), 4);
    std::memcpy(j.parent_mac, job.parent_mac->data(), 6);
  }
  j.key[0] = job.key->k0();
  j.key[1] = job.key->k1();
  for (uint32_t r = 0; r < XAGG_MAX_MEMBERS; ++r) {
    xagg_member m{};
    if (r < job.member.size() && job.member[r]) {
      std::memcpy(&m.ip, job.member[r]->ip.bytes.data(), 4);
      if (job.member[r]->mac) std::memcpy(m.mac, job.member[r]->mac->data(), 6);
    }
    const uint32_t mkey = job.id * XAGG_MAX_MEMBERS + r;
    bpf_map_update_elem(members_fd_, &mkey, &m, BPF_ANY);
  }
  const uint32_t key = job.id;
  if (const int err = bpf_map_update_elem(jobs_fd_, &key, &j, BPF_ANY); err) {
    *error = "cannot write job " + std::to_string(job.id) + " into xagg_jobs: " + errno_text(err);
    return false;
  }
  jobs_[job.id] = job;
  block_of_[job.id] = block;
  used_keys_.insert({job.id, job.key->bytes});
  update_fanout();  // a job that replaced the last unicast one lets the TC program go
  // A job's counters start from zero whenever it is (re)configured.
  const int cpus = libbpf_num_possible_cpus();
  if (cpus > 0) {
    const std::vector<xagg_counters> zero(static_cast<size_t>(cpus));
    bpf_map_update_elem(stats_fd_, &key, zero.data(), BPF_ANY);
  }
  return true;
}

bool HeadProgram::remove_job(unsigned id, std::string* error) {
  if (!jobs_.count(id)) {
    *error = "no job " + std::to_string(id) + " on this head";
    return false;
  }
  const uint32_t key = id;
  if (const int err = bpf_map_delete_elem(jobs_fd_, &key); err && err != -ENOENT) {
    *error = "cannot remove job " + std::to_string(id) + ": " + errno_text(err);
    return false;
  }
  jobs_.erase(id);
  block_of_.erase(id);
  update_fanout();
  return true;
}

Counters HeadProgram::counters(unsigned row) const {
  Counters sum{};
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0 || row > XAGG_MAX_JOBS) return sum;
  std::vector<xagg_counters> per_cpu(static_cast<size_t>(cpus));
  const uint32_t key = row;
  if (bpf_map_lookup_elem(stats_fd_, &key, per_cpu.data()) != 0) return sum;
  for (const xagg_counters& c : per_cpu)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += c.c[i];
  return sum;
}

std::optional<xagg_slot> HeadProgram::slot(unsigned id, uint32_t seq) const {
  const auto it = block_of_.find(id);
  if (it == block_of_.end()) return std::nullopt;
  const unsigned nslots = 2 * jobs_.at(id).window;
  const uint32_t key = it->second * XAGG_MAX_SLOTS + seq % nslots;
  auto s = std::make_unique<xagg_slot>();
  if (bpf_map_lookup_elem_flags(slots_fd_, &key, s.get(), BPF_F_LOCK) != 0) return std::nullopt;
  return *s;
}

TestRun HeadProgram::test_run(std::span<const uint8_t> frame, uint32_t repeat) const {
  TestRun r;
  r.out.resize(frame.size() + 256);
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.out.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()), .data_size_out = static_cast<uint32_t>(r.out.size()),
              .repeat = static_cast<int>(repeat));
  r.error = bpf_prog_test_run_opts(prog_fd_, &opts);
  r.verdict = opts.retval;
  r.duration_ns = opts.duration;
  r.out.resize(r.error ? 0 : opts.data_size_out);
  return r;
}

int HeadProgram::program_fd() const { return prog_fd_; }

bool attach_pass_program(int ifindex, AttachMode mode, std::string* error) {
  bpf_object* obj = load_object(
      embedded::xagg_pass, embedded::xagg_pass_size, "xagg_pass", [](bpf_object*) { return true; }, error);
  if (!obj) return false;
  bpf_program* prog = bpf_object__find_program_by_name(obj, "xagg_pass");
  const int err = prog ? bpf_xdp_attach(ifindex, bpf_program__fd(prog), mode_flags(mode), nullptr) : -ENOENT;
  bpf_object__close(obj);  // the attachment holds its own reference to the program
  if (err) {
    *error = "cannot attach xagg_pass: " + errno_text(err) +
             (err == -EBUSY || err == -EEXIST ? " (the interface already has an XDP program)" : "");
    return false;
  }
  return true;
}

bool detach_pass_program(int ifindex, std::string* error) {
  LIBBPF_OPTS(bpf_xdp_query_opts, q);
  if (const int err = bpf_xdp_query(ifindex, 0, &q); err) {
    *error = "cannot query the interface's XDP program: " + errno_text(err);
    return false;
  }
  for (const auto& [id, flags] :
       {std::pair{q.drv_prog_id, XDP_FLAGS_DRV_MODE}, std::pair{q.skb_prog_id, XDP_FLAGS_SKB_MODE}}) {
    if (!id) continue;
    if (const std::string name = program_info(id).name; name != "xagg_pass") {
      *error = "the interface's XDP program (id " + std::to_string(id) + ", " + name + ") is not xagg_pass; left alone";
      return false;
    }
    if (const int err = bpf_xdp_detach(ifindex, flags, nullptr); err) {
      *error = "cannot detach xagg_pass: " + errno_text(err);
      return false;
    }
  }
  return true;
}

std::optional<std::vector<XdpAttachment>> xdp_attachments(int ifindex) {
  LIBBPF_OPTS(bpf_xdp_query_opts, q);
  if (bpf_xdp_query(ifindex, 0, &q) != 0) return std::nullopt;
  std::vector<XdpAttachment> out;
  for (const auto& [id, mode] :
       {std::pair{q.drv_prog_id, "native"}, std::pair{q.skb_prog_id, "generic"}, std::pair{q.hw_prog_id, "offload"}}) {
    if (!id) continue;
    const ProgramInfo p = program_info(id);
    out.push_back({mode, id, p.name, p.run_cnt, p.run_time_ns});
  }
  return out;
}

std::string xdp_status(int ifindex) {
  const std::optional<std::vector<XdpAttachment>> attached = xdp_attachments(ifindex);
  if (!attached) return "unknown (query failed)";
  std::string out;
  for (const XdpAttachment& a : *attached) {
    if (!out.empty()) out += ", ";
    out += a.name + " (id " + std::to_string(a.prog_id) + ", " + a.mode + ")";
    if (a.run_cnt)
      out.append(": ")
          .append(std::to_string(a.run_cnt))
          .append(" runs, ")
          .append(std::to_string(a.run_time_ns / a.run_cnt))
          .append(" ns each");
  }
  return out.empty() ? "none" : out;
}

}  // namespace inagg::xdp
