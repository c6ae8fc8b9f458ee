// The workers' control-socket client against a real control::ControlServer on a temporary Unix
// socket, served on a thread of its own by a handler that keeps jobs and refusals as the
// appliance does (control::RefusedJobs). Rank 0 adds, every rank waits; a refusal reaches every
// rank, with the same reason, within a second or two; an absent appliance and a job that never
// becomes active are told apart.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/control_client.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/refused_jobs.hpp"
#include "inagg/control/socket.hpp"

using inagg::client::ControlClient;
using inagg::client::now_ns;
using inagg::client::RackPlan;
using inagg::client::Registration;
using Outcome = Registration::Outcome;
namespace control = inagg::control;

namespace {

const char* kRefusal =
    "job 1: needs up to 16384 held packet buffers (n x window x M / P) but only 8192 of the mbuf budget are free";

// A stand-in for the appliance's control thread: jobs in a map, refusals remembered.
class FakeAppliance {
 public:
  explicit FakeAppliance(const std::string& path) {
    std::string err;
    if (!server_.open(path, &err)) throw std::runtime_error(err);
    thread_ = std::thread([this] {
      while (!stop_) server_.poll([this](const control::Request& r) { return handle(r); }), ::usleep(1000);
    });
  }
  ~FakeAppliance() {
    stop_ = true;
    thread_.join();
  }
  std::atomic<bool> refuse{false};   // refuse every add with kRefusal
  std::atomic<bool> activate{true};  // false: added jobs stay out of `list` (never active)
  std::atomic<int> adds{0};

 private:
  std::string handle(const control::Request& r) {
    switch (r.verb) {
      case control::Request::Verb::add:
        ++adds;
        if (refuse) {
          refused_.record(r.job, kRefusal);
          return control::format_error(kRefusal);
        }
        if (jobs_.count(r.job.id))
          return control::format_error("job " + std::to_string(r.job.id) +
                                       ": already exists and is active; remove it first");
        refused_.forget(r.job.id);
        if (activate) jobs_[r.job.id] = r.job;
        return control::format_job_added(r.job.id);
      case control::Request::Verb::list: {
        std::vector<control::JobStatus> list;
        for (const auto& [id, spec] : jobs_) {
          control::JobStatus s;
          s.id = id;
          s.dtype = spec.dtype;
          s.workers = spec.workers;
          s.spec_digest = control::job_digest(spec);
          list.push_back(s);
        }
        refused_.add_to(&list);
        return control::format_job_list(list);
      }
      default:
        return control::format_error("not in this test");
    }
  }

  control::ControlServer server_;
  control::RefusedJobs refused_;
  std::map<uint32_t, control::JobSpec> jobs_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "inagg-client-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    path_ = dir_ + "/ctl.sock";
    plan_.workers = 4;
    plan_.ip_base = *inagg::util::parse_ip("10.77.0.0");
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  // Ranks 1..3 wait first, then rank 0 adds: the order a launcher that starts rank 0 last gives.
  std::vector<Registration> register_all(uint64_t deadline_ns, std::vector<double>* seconds = nullptr) {
    std::vector<Registration> out(plan_.workers);
    std::vector<double> took(plan_.workers);
    std::vector<std::thread> threads;
    const uint64_t t0 = now_ns();
    for (unsigned r = plan_.workers; r-- > 0;) {
      threads.emplace_back([&, r] {
        out[r] = ControlClient(path_).register_job(r == 0, plan_.job_text(), plan_.job_id, deadline_ns);
        took[r] = static_cast<double>(now_ns() - t0) / 1e9;
      });
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others are polling by now
    }
    for (std::thread& t : threads) t.join();
    if (seconds) *seconds = took;
    return out;
  }
  std::string dir_, path_;
  RackPlan plan_;
};

}  // namespace

TEST_F(ControlClientTest, RankZeroAddsEveryRankSeesTheJobActive) {
  FakeAppliance app(path_);
  for (const Registration& r : register_all(now_ns() + 10'000'000'000ull))
    EXPECT_EQ(r.outcome, Outcome::active) << r.reason;
  EXPECT_EQ(app.adds, 1);
  // A second run while the job is still there: "already exists" is no refusal.
  for (const Registration& r : register_all(now_ns() + 10'000'000'000ull))
    EXPECT_EQ(r.outcome, Outcome::active) << r.reason;
  std::string err;
  const auto line = ControlClient(path_).job_state(1, &err);
  ASSERT_TRUE(line) << err;
  EXPECT_EQ(line->state, "active");
}

TEST_F(ControlClientTest, ARefusalReachesEveryRankWithTheSameReasonAtOnce) {
  FakeAppliance app(path_);
  app.refuse = true;
  std::vector<double> took;
  const std::vector<Registration> regs = register_all(now_ns() + 30'000'000'000ull, &took);
  for (unsigned r = 0; r < regs.size(); ++r) {
    EXPECT_EQ(regs[r].outcome, Outcome::refused) << "rank " << r << ": " << regs[r].reason;
    EXPECT_EQ(regs[r].reason, "error: " + std::string(kRefusal) + "\n") << "rank " << r;
    EXPECT_LT(took[r], 2.0) << "rank " << r << " took " << took[r] << " s to learn of the refusal";
  }
  EXPECT_EQ(app.adds, 1);  // only rank 0 adds
}

TEST_F(ControlClientTest, AnEarlierRefusalOfAnotherJobWithTheSameIdIsNotOurs) {
  FakeAppliance app(path_);
  app.refuse = true;
  RackPlan big = plan_;
  big.window = 64;
  EXPECT_EQ(ControlClient(path_).register_job(true, big.job_text(), 1, now_ns() + 1'000'000'000ull).outcome,
            Outcome::refused);
  // The rerun with a window that fits: its ranks 1..3 poll before rank 0 adds and see the old
  // refusal in `list`, which names another spec; they wait, and the new job becomes active.
  app.refuse = false;
  for (const Registration& r : register_all(now_ns() + 10'000'000'000ull))
    EXPECT_EQ(r.outcome, Outcome::active) << r.reason;
}

// A job with this id is active with another spec (here: another window): rank 0's `add` meets
// "already exists", and neither it nor the others take that job for theirs; they all stop at
// once with the same reason, naming both digests.
TEST_F(ControlClientTest, AnActiveJobWithTheSameIdAndAnotherSpecIsRefusedOnEveryRank) {
  FakeAppliance app(path_);
  RackPlan other = plan_;
  other.window = 4;
  ASSERT_EQ(ControlClient(path_).register_job(true, other.job_text(), 1, now_ns() + 1'000'000'000ull).outcome,
            Outcome::active);
  std::string unparsed;
  const std::string theirs = control::job_digest(*control::parse_job(other.job_text(), &unparsed));
  const std::string ours = control::job_digest(*control::parse_job(plan_.job_text(), &unparsed));
  ASSERT_NE(theirs, ours);
  const std::string digests = "(spec digest " + theirs + ", this job's " + ours + ")";
  const std::string want = "error: job 1 is already active on the appliance with another spec " + std::string(digests) +
                           ": remove it first (inagg-ctl remove 1) or give this job another id\n";
  std::vector<double> took;
  const std::vector<Registration> regs = register_all(now_ns() + 30'000'000'000ull, &took);
  for (unsigned r = 0; r < regs.size(); ++r) {
    EXPECT_EQ(regs[r].outcome, Outcome::refused) << "rank " << r << ": " << regs[r].reason;
    EXPECT_EQ(regs[r].reason, want) << "rank " << r;
    EXPECT_LT(took[r], 2.0) << "rank " << r << " took " << took[r] << " s to see the other spec";
  }
  // The same spec as the active job's joins it, as before.
  plan_.window = 4;
  for (const Registration& r : register_all(now_ns() + 10'000'000'000ull))
    EXPECT_EQ(r.outcome, Outcome::active) << r.reason;
}

TEST_F(ControlClientTest, AbsentApplianceAndInactiveJobAreToldApart) {
  const Registration absent = ControlClient(path_).register_job(true, plan_.job_text(), 1, now_ns() + 1'000'000'000ull);
  EXPECT_EQ(absent.outcome, Outcome::unreachable);
  EXPECT_NE(absent.reason.find("cannot connect to " + path_), std::string::npos) << absent.reason;

  // Ranks other than 0 keep asking while the appliance is not there yet; the deadline ends it.
  const uint64_t t0 = now_ns();
  const Registration waited = ControlClient(path_).register_job(false, plan_.job_text(), 1, t0 + 300'000'000ull);
  EXPECT_EQ(waited.outcome, Outcome::not_active);
  EXPECT_GE(now_ns() - t0, 300'000'000ull);

  FakeAppliance app(path_);
  app.activate = false;
  const Registration inactive = ControlClient(path_).register_job(true, plan_.job_text(), 1, now_ns() + 300'000'000ull);
  EXPECT_EQ(inactive.outcome, Outcome::not_active) << inactive.reason;
  EXPECT_EQ(app.adds, 1);
}
