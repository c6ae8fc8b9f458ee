// The appliance's counters in the Prometheus text format: one family per quantity, with units and
// _total, drops split by a `reason` label (the HTTP endpoint that serves it: metrics_server.cpp).
#include "inagg/dataplane/metrics.hpp"

#include <rte_ethdev.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <variant>

#include "inagg/agg/slot_completion.hpp"
#include "inagg/dataplane/appliance.hpp"

namespace inagg::dataplane {
namespace {

// One metric family: its HELP and TYPE lines, then samples added with sample().
class Family {
 public:
  Family(std::ostringstream& out, std::string_view name, std::string_view help, std::string_view type)
      : out_(out), name_(name) {
    out_ << "# HELP " << name << ' ';
    for (const char c : help) {  // HELP escapes backslash and newline
      if (c == '\\')
        out_ << "\\\\";
      else if (c == '\n')
        out_ << "\\n";
      else
        out_ << c;
    }
    out_ << "\n# TYPE " << name << ' ' << type << '\n';
  }
  Family& sample(const std::string& labels, double v) { return sample("", labels, v); }
  Family& sample(const std::string& labels, uint64_t v) { return sample("", labels, v); }
  // With a suffix: a histogram's samples (name_bucket, name_sum, name_count).
  Family& sample(std::string_view suffix, const std::string& labels, uint64_t v) {
    out_ << name_ << suffix;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << v << '\n';
    return *this;
  }
  Family& sample(std::string_view suffix, const std::string& labels, double v) {
    out_ << name_ << suffix;
    if (!labels.empty()) out_ << '{' << labels << '}';
    char buf[40];
    std::snprintf(buf, sizeof buf, " %.17g\n", v);
    out_ << buf;
    return *this;
  }

 private:
  std::ostringstream& out_;
  std::string name_;
};

// A label value as the text format wants it (backslash, quote and newline escaped).
std::string label(std::string_view key, std::string_view value) {
  std::string s(key);
  s += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s + '"';
}

// How a counter of the appliance is exported: the family it goes to (the part after the
// inagg_lcore_ / inagg_engine_ / inagg_job_ prefix, with its unit and _total) and, for a family
// that splits one quantity by cause, the `reason` label's value (empty otherwise). A counter of
// a split family is one cause of it, so that sum by (reason) is the whole: drops are one family
// with a reason, not one family per reason.
struct CounterExport {
  std::string_view counter, family, reason;
};

// Families split by reason have one HELP for all their causes.
struct SplitFamily {
  std::string_view family, help;
};

constexpr SplitFamily kSplitFamilies[] = {
    {"dropped_packets_total", "packets dropped, by reason (the control socket's stats name each reason's counter)"},
    {"contract_violations_total",
     "packets that broke a rule of the job contract, by rule (dropped; the job goes on unless its release could "
     "never happen)"},
    {"naks_sent_total",
     "NAKs the engine sent: psn_gap (a loss before the appliance), missing_tail (a message whose tail never "
     "arrived), repeated (the sender had not gone back)"},
    {"ecn_marked_packets_total",
     "released packets CE-marked: input_marked (an input of their slot was), queue_threshold (the TX queue towards "
     "their receiver was past the ECN threshold)"},
    {"handover_packets_total",
     "RoCEv2 packets handed between lcores: out (to the lcore that owns their job), in (received from another "
     "lcore)"},
    {"mac_learning_refused_total",
     "frames whose source MAC was not learned: sticky_move (a rank's pinned MAC seen on another port), port_limit "
     "(the port at its --mac-limit-per-port)"},
    {"loop_seconds_total",
     "time the lcore's loop spent, by state: busy (iterations that moved packets), idle (iterations that found "
     "nothing)"},
};

constexpr CounterExport kEngineExports[] = {
    {"rx_packets", "rx_packets_total", ""},
    {"passthrough", "passthrough_packets_total", ""},
    {"malformed", "dropped_packets_total", "malformed"},
    {"bad_icrc", "dropped_packets_total", "bad_icrc"},
    {"drop_wrong_source", "dropped_packets_total", "wrong_source"},
    {"drop_wrong_port", "dropped_packets_total", "wrong_port"},
    {"drop_wrong_mac", "dropped_packets_total", "wrong_mac"},
    {"drop_unplaceable", "dropped_packets_total", "unplaceable"},
    {"drop_closed", "dropped_packets_total", "connection_closed"},
    {"cnp_forwarded", "cnp_forwarded_packets_total", ""},
    {"aggregated_packets", "aggregated_packets_total", ""},
    {"aggregated_bytes", "aggregated_bytes_total", ""},
    {"slots_completed", "slots_completed_total", ""},
    {"slots_released", "slots_released_total", ""},
    {"released_packets", "released_packets_total", ""},
    {"duplicates_collecting", "duplicates_replaced_packets_total", ""},
    {"duplicates_dropped", "dropped_packets_total", "duplicate"},
    {"retransmits_answered", "retransmits_answered_packets_total", ""},
    {"stale", "dropped_packets_total", "stale_epoch"},
    {"forwarded_unchanged", "forwarded_unchanged_packets_total", ""},
    {"placeholders_filled", "placeholders_filled_packets_total", ""},
    {"drop_slot_busy", "dropped_packets_total", "slot_busy"},
    {"acks_observed", "acks_forwarded_packets_total", ""},
    {"naks_sent", "naks_sent_total", "psn_gap"},
    {"tail_naks", "naks_sent_total", "missing_tail"},
    {"naks_resent", "naks_sent_total", "repeated"},
    {"nak_alloc_failed", "nak_alloc_failures_total", ""},
    {"resends", "resent_packets_total", ""},
    {"resend_budget_spent", "resend_budgets_spent_total", ""},
    {"ecn_marked", "ecn_marked_packets_total", "input_marked"},
    {"ecn_marked_queue", "ecn_marked_packets_total", "queue_threshold"},
    {"failed_job_drops", "dropped_packets_total", "job_failed"},
    {"job_errors", "job_errors_total", ""},
    {"drop_unfit", "dropped_packets_total", "contract"},
    {"drop_ack_unpinned", "dropped_packets_total", "ack_port_unpinned"},
    {"err_length_or_opcode", "contract_violations_total", "message_size"},
    {"err_ahead_of_window", "contract_violations_total", "window"},
    {"err_ack_bypass", "contract_violations_total", "ack_bypass"},
    {"err_not_write", "contract_violations_total", "writes_only"},
    {"err_not_rc", "contract_violations_total", "rc_only"},
    {"timeouts", "job_timeouts_total", ""},
    {"generations", "replay_generations_total", ""},
    {"resumed_mid_round", "jobs_resumed_mid_round_total", ""},
    {"drop_resuming", "dropped_packets_total", "resuming"},
    {"tx_full", "dropped_packets_total", "tx_list_full"},
};

// busy_cycles and idle_cycles are exported in seconds (loop_seconds_total), not here.
constexpr CounterExport kLcoreExports[] = {
    {"rx", "rx_packets_total", ""},
    {"tx", "tx_packets_total", ""},
    {"tx_dropped", "dropped_packets_total", "pmd_refused"},
    {"bridged", "bridged_packets_total", ""},
    {"flooded", "flooded_packets_total", ""},
    {"same_port_drops", "dropped_packets_total", "same_port"},
    {"mac_moves_refused", "mac_learning_refused_total", "sticky_move"},
    {"mac_limit_refused", "mac_learning_refused_total", "port_limit"},
    {"roce", "roce_packets_total", ""},
    {"handover_out", "handover_packets_total", "out"},
    {"handover_in", "handover_packets_total", "in"},
    {"handover_full", "dropped_packets_total", "handover_full"},
    {"multiseg_linearize_failed", "linearize_failures_total", ""},
    {"idle_sleeps", "idle_sleeps_total", ""},
};

// Where each job field (INAGG_JOB_FIELDS) goes. A label's values must stay few: free text, or a
// value unique per job, would make a new series for every value, so those fields are left to the
// log and `inagg-ctl list`.
enum class JobFieldPlace : uint8_t {
  job_label,     // the job_id label of every job family
  state_set,     // inagg_job_state{state}: one sample per state, 1 for the current one
  info_label,    // a label of inagg_job_info (a field with few values)
  gauge,         // inagg_job_<field>
  not_exported,  // said elsewhere, or not fit for a label (the comment says which)
};
struct JobFieldExport {
  std::string_view field;
  JobFieldPlace place;
};
constexpr JobFieldExport kJobFieldExports[] = {
    {"id", JobFieldPlace::job_label},
    {"state", JobFieldPlace::state_set},
    {"dtype", JobFieldPlace::info_label},
    {"workers", JobFieldPlace::gauge},
    {"released_slots", JobFieldPlace::not_exported},  // inagg_job_slots_released_total counts the same
    {"held_packets", JobFieldPlace::gauge},
    {"retained_packets", JobFieldPlace::gauge},
    {"memory_bytes", JobFieldPlace::gauge},
    {"mbuf_quota", JobFieldPlace::gauge},
    {"spec", JobFieldPlace::not_exported},   // a digest, unique per job
    {"error", JobFieldPlace::not_exported},  // free text
};

std::optional<JobFieldPlace> find_job_field_place(std::string_view field) {
  for (const JobFieldExport& e : kJobFieldExports)
    if (e.field == field) return e.place;
  return std::nullopt;
}
JobFieldPlace job_field_place(std::string_view field) {
  return find_job_field_place(field).value_or(JobFieldPlace::not_exported);
}

// When this process started, in seconds since the Unix epoch, as Prometheus's client libraries
// compute it: the boot time (btime in /proc/stat) plus the process's start in clock ticks after
// boot (field 22 of /proc/self/stat). 0 when /proc cannot be read (the family is left out then).
double process_start_time() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t comm_end = line.rfind(')');  // the command name may hold spaces and parentheses
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(line.substr(comm_end + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // fields 3 (state) to 22 (starttime)
    if (!(fields >> field)) return 0;
  std::ifstream system_stat("/proc/stat");
  double boot = 0;
  for (std::string key; system_stat >> key;) {
    if (key == "btime") {
      system_stat >> boot;
      break;
    }
    std::getline(system_stat, line);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  char* end = nullptr;
  const double ticks = std::strtod(field.c_str(), &end);
  if (boot <= 0 || hz <= 0 || end == field.c_str()) return 0;
  return boot + ticks / static_cast<double>(hz);
}

template <size_t N>
const CounterExport* find_export(const CounterExport (&table)[N], std::string_view counter) {
  for (const CounterExport& e : table)
    if (e.counter == counter) return &e;
  return nullptr;
}

std::string_view split_help(std::string_view family) {
  for (const SplitFamily& f : kSplitFamilies)
    if (f.family == family) return f.help;
  return {};
}

// One counter's value with the labels of its owner ("lcore=..." or "job_id=..." or none).
struct CounterSample {
  std::string owner_labels;
  uint64_t value;
};

// Renders counters named in `table` as their families, each family once with all its samples
// (a family's samples must not interleave with another's). `values(counter)` gives the samples
// of one counter, `help_of(counter)` its own description.
template <size_t N, class Values, class Help>
void render_counters(std::ostringstream& o, std::string_view prefix, const CounterExport (&table)[N], Values&& values,
                     Help&& help_of) {
  std::vector<std::string_view> done;
  for (const CounterExport& first : table) {
    if (std::find(done.begin(), done.end(), first.family) != done.end()) continue;
    done.push_back(first.family);
    const std::string_view split = split_help(first.family);
    Family f(o, std::string(prefix) + std::string(first.family), split.empty() ? help_of(first.counter) : split,
             "counter");
    for (const CounterExport& e : table) {
      if (e.family != first.family) continue;
      for (const CounterSample& s : values(e.counter)) {
        std::string labels = s.owner_labels;
        if (!e.reason.empty()) labels += (labels.empty() ? "" : ",") + label("reason", e.reason);
        f.sample(labels, s.value);
      }
    }
  }
}

}  // namespace

bool every_counter_exported(std::string* missing) {
  agg::for_each_counter(agg::EngineCounters{}, [&](std::string_view name, std::string_view, uint64_t) {
    if (!find_export(kEngineExports, name)) *missing += "engine counter " + std::string(name) + "; ";
  });
#define X(name, text)                                                                         \
  if (std::string_view(#name) != "busy_cycles" && std::string_view(#name) != "idle_cycles" && \
      !find_export(kLcoreExports, #name))                                                     \
    *missing += "lcore counter " #name "; ";
  INAGG_LCORE_COUNTERS(X)
#undef X
  control::for_each_job_field(control::JobStatus{},
                              [&](std::string_view name, std::string_view, const control::JobFieldValue&) {
                                if (!find_job_field_place(name)) *missing += "job field " + std::string(name) + "; ";
                              });
  return missing->empty();
}

PrometheusRenderer::PrometheusRenderer(Appliance& app, std::string version, std::string revision, uint64_t tsc_hz)
    : app_(app),
      version_(std::move(version)),
      revision_(std::move(revision)),
      tsc_hz_(tsc_hz),
      start_time_seconds_(process_start_time()) {}

std::string PrometheusRenderer::render() {
  std::ostringstream o;
  Family(o, "inagg_build_info", "1, with the version inagg was built from", "gauge")
      .sample(label("version", version_) + "," + label("revision", revision_), uint64_t{1});

  const std::vector<PortInfo>& ports = app_.ports();
  std::vector<rte_eth_stats> st(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) rte_eth_stats_get(ports[i].port, &st[i]);
  auto port_labels = [&](size_t i) {
    return label("port", std::to_string(ports[i].port)) + "," + label("driver", ports[i].name);
  };
  auto port_family = [&](const char* name, const char* help, uint64_t rte_eth_stats::*field) {
    Family f(o, name, help, "counter");
    for (size_t i = 0; i < ports.size(); ++i) f.sample(port_labels(i), st[i].*field);
  };
  port_family("inagg_port_rx_packets_total", "packets received by the port", &rte_eth_stats::ipackets);
  port_family("inagg_port_tx_packets_total", "packets sent by the port", &rte_eth_stats::opackets);
  port_family("inagg_port_rx_bytes_total", "bytes received by the port", &rte_eth_stats::ibytes);
  port_family("inagg_port_tx_bytes_total", "bytes sent by the port", &rte_eth_stats::obytes);
  {
    Family f(o, "inagg_port_rx_dropped_packets_total",
             "packets the port dropped on receive: no_descriptor (its RX ring was full), no_mbuf (no packet buffer)",
             "counter");
    for (size_t i = 0; i < ports.size(); ++i) {
      f.sample(port_labels(i) + "," + label("reason", "no_descriptor"), st[i].imissed);
      f.sample(port_labels(i) + "," + label("reason", "no_mbuf"), st[i].rx_nombuf);
    }
  }
  port_family("inagg_port_rx_errors_total", "erroneous packets received", &rte_eth_stats::ierrors);
  port_family("inagg_port_tx_errors_total", "packets the port failed to send", &rte_eth_stats::oerrors);
  {
    Family f(o, "inagg_port_link_up", "1 while the port's link is up, 0 while it is down", "gauge");
    for (size_t i = 0; i < ports.size(); ++i) {
      rte_eth_link link{};
      const bool up = rte_eth_link_get_nowait(ports[i].port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
      f.sample(port_labels(i), uint64_t{up});
    }
  }
  {
    Family f(o, "inagg_port_info",
             "the port's driver, MTU and how RoCE is steered: rte_flow RSS by UDP source port (rss), rte_flow to "
             "queue 0 (queue), or classified in software",
             "gauge");
    for (size_t i = 0; i < ports.size(); ++i)
      f.sample(port_labels(i) + "," + label("mtu", std::to_string(ports[i].mtu)) + "," +
                   label("steering", ports[i].flow_mode),
               uint64_t{1});
  }

  const auto lcores = app_.lcore_counters();
  auto lcore_values = [&](std::string_view counter) {
    std::vector<CounterSample> v;
    for (const auto& [id, c] : lcores) {
      uint64_t x = 0;
#define X(name, text) \
  if (counter == #name) x = c.name;
      INAGG_LCORE_COUNTERS(X)
#undef X
      v.push_back({label("lcore", std::to_string(id)), x});
    }
    return v;
  };
  auto lcore_help = [](std::string_view counter) {
    std::string_view h;
#define X(name, text) \
  if (counter == #name) h = text;
    INAGG_LCORE_COUNTERS(X)
#undef X
    return h;
  };
  render_counters(o, "inagg_lcore_", kLcoreExports, lcore_values, lcore_help);
  {
    Family f(o, "inagg_lcore_loop_seconds_total", split_help("loop_seconds_total"), "counter");
    const double hz = static_cast<double>(tsc_hz_ ? tsc_hz_ : 1);
    for (const auto& [id, c] : lcores) {
      f.sample(label("lcore", std::to_string(id)) + "," + label("state", "busy"), c.busy_cycles / hz);
      f.sample(label("lcore", std::to_string(id)) + "," + label("state", "idle"), c.idle_cycles / hz);
    }
  }

  {
    const Appliance::MbufUse use = app_.mbuf_use();
    Family(o, "inagg_mbufs_in_use", "packet buffers in use: held by jobs, queued, or in per-lcore caches", "gauge")
        .sample("", use.in_use);
    Family(o, "inagg_mbufs", "packet buffers in the pools", "gauge").sample("", static_cast<uint64_t>(use.total));
  }
  {
    const Appliance::FlowRuleCounts rules = app_.flow_rules();
    Family(o, "inagg_flow_job_rules",
           "per-job rte_flow rules steering jobs' connections to the queue of the lcore that takes them first", "gauge")
        .sample("", rules.in_place);
    Family(o, "inagg_flow_job_rules_refused_total",
           "per-job rte_flow rules a port's PMD refused (those packets reach the owner through a handover ring)",
           "counter")
        .sample("", rules.refused);
    Family(o, "inagg_flow_job_rules_contended_total",
           "per-job rte_flow rules not made because another job's rule steers the same address pair to another "
           "queue (those packets reach their lcore through a handover ring)",
           "counter")
        .sample("", rules.contended);
  }

  auto engine_help = [](std::string_view counter) {
    std::string_view h;
    agg::for_each_counter(agg::EngineCounters{}, [&](std::string_view name, std::string_view text, uint64_t) {
      if (name == counter) h = text;
    });
    return h;
  };
  const agg::EngineCounters totals = app_.engine_totals();
  render_counters(
      o, "inagg_engine_", kEngineExports,
      [&](std::string_view counter) {
        std::vector<CounterSample> v;
        agg::for_each_counter(totals, [&](std::string_view name, std::string_view, uint64_t x) {
          if (name == counter) v.push_back({"", x});
        });
        return v;
      },
      engine_help);

  // Per job, from the job description (INAGG_JOB_FIELDS) as kJobFieldExports places its fields,
  // then the engine's counters and the slots' waits. The job's label is job_id: Prometheus gives
  // every target a `job` label of its own.
  const std::vector<control::JobStatus> jobs = app_.describe_jobs();
  auto job_label = [](const control::JobStatus& j) { return label("job_id", std::to_string(j.id)); };
  auto field_text = [](const control::JobStatus& j, std::string_view field) {
    std::string text;
    control::for_each_job_field(j, [&](std::string_view name, std::string_view, const control::JobFieldValue& v) {
      if (name != field) return;
      const std::string* t = std::get_if<std::string>(&v);
      text = t ? *t : std::to_string(std::get<uint64_t>(v));
    });
    return text;
  };
  {
    std::string help = "1 for a registered job, with its";
    for (const JobFieldExport& e : kJobFieldExports)
      if (e.place == JobFieldPlace::info_label) help += " " + std::string(e.field);
    Family f(o, "inagg_job_info", help + " (its state: inagg_job_state)", "gauge");
    for (const control::JobStatus& j : jobs) {
      std::string labels = job_label(j);
      for (const JobFieldExport& e : kJobFieldExports)
        if (e.place == JobFieldPlace::info_label) labels += "," + label(e.field, field_text(j, e.field));
      f.sample(labels, uint64_t{1});
    }
  }
  {
    std::string states;
    for (const control::JobStatus::State s : control::kJobStates)
      states += (states.empty() ? "" : ", ") + std::string(control::state_name(s));
    Family f(o, "inagg_job_state",
             "1 for the job's state, 0 for the others (" + states +
                 "); why a job failed or what it waits for is in the log and inagg-ctl list",
             "gauge");
    for (const control::JobStatus& j : jobs)
      for (const control::JobStatus::State s : control::kJobStates)
        f.sample(job_label(j) + "," + label("state", control::state_name(s)), uint64_t{j.state == s});
  }
  if (!jobs.empty()) {
    control::for_each_job_field(
        jobs[0], [&](std::string_view name, std::string_view help, const control::JobFieldValue& v) {
          if (job_field_place(name) != JobFieldPlace::gauge || !std::holds_alternative<uint64_t>(v)) return;
          Family f(o, "inagg_job_" + std::string(name), help, "gauge");
          for (const control::JobStatus& j : jobs)
            control::for_each_job_field(j, [&](std::string_view n, std::string_view, const control::JobFieldValue& x) {
              if (n == name) f.sample(job_label(j), std::get<uint64_t>(x));
            });
        });
  }
  render_counters(
      o, "inagg_job_", kEngineExports,
      [&](std::string_view counter) {
        std::vector<CounterSample> v;
        for (const control::JobStatus& j : jobs)
          for (const auto& c : j.counters)
            if (c.name == counter) v.push_back({job_label(j), c.value});
        return v;
      },
      engine_help);
  {
    // Bucket bounds as exact decimals: 2^k ns has at most 10 significant digits in seconds.
    using H = agg::SlotCompletionHistogram;
    Family f(o, "inagg_job_slot_completion_seconds",
             "how long a slot waited for its last rank: from the first rank's packet to the last rank's (allreduce "
             "and reduce-scatter slots)",
             "histogram");
    for (const control::JobStatus& j : jobs) {
      if (j.slot_completion_counts.size() != H::kBuckets) continue;  // no engine holds it (refused, binding)
      uint64_t cumulative = 0;
      for (unsigned i = 0; i < H::kBuckets; ++i) {
        cumulative += j.slot_completion_counts[i];
        char le[32] = "+Inf";
        if (i < H::kBounds) std::snprintf(le, sizeof le, "%.10g", static_cast<double>(H::upper_bound_ns(i)) / 1e9);
        f.sample("_bucket", job_label(j) + "," + label("le", le), cumulative);
      }
      f.sample("_sum", job_label(j), static_cast<double>(j.slot_completion_sum_ns) / 1e9);
      f.sample("_count", job_label(j), cumulative);
    }
  }
  if (start_time_seconds_ > 0)
    Family(o, "process_start_time_seconds", "start time of the process since the Unix epoch", "gauge")
        .sample("", start_time_seconds_);
  return o.str();
}

}  // namespace inagg::dataplane
