// The head program (src/xdp/bpf/xagg_head.bpf.c) in the kernel, as the agent drives it: loads the
// BPF object built into this binary, sizes and fills its maps, attaches it to an interface and
// reads its counters. Maps are the only interface to the program (include/inagg/xdp/xagg_shared.h).
//
// Attachment is a bpf_link that only this process holds: the kernel detaches the program when the
// last descriptor closes, so an agent that exits, crashes or is killed leaves no stale attachment
// and nothing pinned. Needs CAP_BPF and CAP_NET_ADMIN (root).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/wire/build.hpp"
#include "inagg/xdp/head_job.hpp"
#include "inagg/xdp/xagg_shared.h"

struct bpf_object;

namespace inagg::xdp {

enum class AttachMode {
  native,   // in the driver (veth: the peer needs an XDP program too, for XDP_TX to work)
  generic,  // on the skb, after the driver: works on any interface, slower
};
std::optional<AttachMode> parse_attach_mode(std::string_view text);
std::string_view attach_mode_name(AttachMode mode);

using Counters = std::array<uint64_t, XAGG_NUM_COUNTERS>;
std::string_view counter_name(size_t index);
std::string_view counter_help(size_t index);

// One BPF_PROG_TEST_RUN of a program on a frame.
struct TestRun {
  int error = 0;         // 0, or -errno from the kernel
  uint32_t verdict = 0;  // XDP_DROP, XDP_PASS, XDP_TX, ...
  std::vector<uint8_t> out;
  uint32_t duration_ns = 0;  // mean per repetition, as the kernel measured it
};

class HeadProgram {
 public:
  // Loads the embedded object with slots for `max_jobs` jobs at once (XAGG_MAX_SLOTS each, about
  // 260 KiB a job). nullptr with *error saying why (no privileges, a kernel without BPF, ...).
  static std::unique_ptr<HeadProgram> load(unsigned max_jobs, std::string* error);
  ~HeadProgram();
  HeadProgram(const HeadProgram&) = delete;
  HeadProgram& operator=(const HeadProgram&) = delete;

  // The head's own address and UDP port (xagg_config): DATA to other addresses passes untouched.
  bool set_identity(uint16_t port, const util::IpAddr& ip, const wire::MacAddr& mac, std::string* error);

  bool attach(int ifindex, AttachMode mode, std::string* error);
  void detach();
  bool attached() const { return link_fd_ >= 0; }

  // Adds job.id, or replaces it (its slots start empty again). A job needs its key and every
  // member's MAC resolved, one with a parent parent_mac; while a job with unicast fan-out exists the
  // TC program xagg_fanout is attached (a TCX link, which needs Linux 6.6). Checks that the job
  // fits. A job added again (replaced, or after its removal) starts its chunk numbers over, so it
  // must come with a key this head has not used for that id yet: under the old one, the earlier
  // run's packets would verify and be summed into the new run's slots. On failure nothing changed.
  bool add_job(const HeadJob& job, std::string* error);
  bool remove_job(unsigned id, std::string* error);
  const std::map<unsigned, HeadJob>& jobs() const { return jobs_; }

  // Counters summed over CPUs; row XAGG_MAX_JOBS counts packets of no known job.
  Counters counters(unsigned row) const;

  // The slot that holds chunk `seq` of job `id` (for tests and `inagg-xdp slots`).
  std::optional<xagg_slot> slot(unsigned id, uint32_t seq) const;

  // BPF_PROG_TEST_RUN: the program on `frame`, `repeat` times; the kernel's mean duration.
  TestRun test_run(std::span<const uint8_t> frame, uint32_t repeat = 1) const;
  int program_fd() const;

 private:
  HeadProgram() = default;
  bpf_object* obj_ = nullptr;
  // Attaches xagg_fanout while a job uses unicast fan-out (or `also_needed`), detaches it when
  // none does.
  bool update_fanout(bool also_needed = false, std::string* error = nullptr);
  int link_fd_ = -1;         // the bpf_link
  int fanout_link_fd_ = -1;  // xagg_fanout's TCX link, while a job uses unicast fan-out
  int ifindex_ = 0;
  int prog_fd_ = -1, fanout_fd_ = -1, config_fd_ = -1, jobs_fd_ = -1, slots_fd_ = -1, stats_fd_ = -1, members_fd_ = -1;
  unsigned max_jobs_ = 0;
  uint32_t next_gen_ = 1;
  std::map<unsigned, HeadJob> jobs_;
  std::map<unsigned, unsigned> block_of_;  // job id -> its block of XAGG_MAX_SLOTS slots
  // Every key each job id has been added with since the program was loaded: never taken again
  // for that id (add_job).
  std::set<std::pair<unsigned, std::array<uint8_t, XAGG_KEY_BYTES>>> used_keys_;
};

// The XDP_PASS program for the other end of a veth whose head runs in native mode (XDP_TX on veth
// needs an XDP program on the peer). Attached through netlink, so it stays after this process:
// `inagg-xdp peer --iface X` / `--off`. Returns false with *error.
bool attach_pass_program(int ifindex, AttachMode mode, std::string* error);
bool detach_pass_program(int ifindex, std::string* error);

// An XDP program attached to an interface, in one of its modes; the run counts only while
// sysctl kernel.bpf_stats_enabled=1.
struct XdpAttachment {
  std::string mode;  // native, generic or offload
  uint32_t prog_id = 0;
  std::string name;
  uint64_t run_cnt = 0, run_time_ns = 0;
};

// The XDP programs an interface has, one per mode (`inagg-xdp status --json`); nullopt when the
// kernel cannot be asked.
std::optional<std::vector<XdpAttachment>> xdp_attachments(int ifindex);

// The same as a line (`inagg-xdp status`): "none", or "NAME (id N, MODE)[: R runs, T ns each]".
std::string xdp_status(int ifindex);

}  // namespace inagg::xdp
