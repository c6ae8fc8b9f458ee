// RefusedJobs: a refused add shows in `list` as state=refused with its reason, until the id is
// added or removed, or the memory time has passed; a job that exists hides an older refusal.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "inagg/control/job_file.hpp"
#include "inagg/control/refused_jobs.hpp"

namespace inagg::control {
namespace {

JobSpec spec(uint32_t id, unsigned workers) {
  JobSpec s;
  s.id = id;
  s.workers = workers;
  s.dtype = util::Dtype::int32;
  return s;
}

TEST(RefusedJobs, ListedUntilAddedOrRemoved) {
  RefusedJobs r;
  std::vector<JobStatus> jobs;
  r.add_to(&jobs);
  EXPECT_TRUE(jobs.empty());

  r.record(spec(7, 4), "needs up to 16384 held packet buffers");
  r.record(spec(8, 2), "first reason");
  r.record(spec(8, 2), "second reason");  // replaces the first
  r.add_to(&jobs);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].spec_digest, job_digest(spec(7, 4)));
  EXPECT_EQ(jobs[1].spec_digest, job_digest(spec(8, 2)));
  jobs[0].spec_digest = jobs[1].spec_digest = std::nullopt;
  EXPECT_EQ(format_job_list(jobs),
            "id=7 state=refused dtype=int32 workers=4 released_slots=0 held_packets=0 retained_packets=0 "
            "memory_bytes=0 mbuf_quota=0 error=\"needs up to 16384 held packet buffers\"\n"
            "id=8 state=refused dtype=int32 workers=2 released_slots=0 held_packets=0 retained_packets=0 "
            "memory_bytes=0 mbuf_quota=0 error=\"second reason\"\n");

  // An existing job of the same id says more than an older refusal ("already exists").
  jobs.clear();
  JobStatus active;
  active.id = 7;
  jobs.push_back(active);
  r.add_to(&jobs);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].state, JobStatus::State::active);
  EXPECT_EQ(jobs[1].id, 8u);

  EXPECT_TRUE(r.forget(7));
  EXPECT_FALSE(r.forget(7));
  EXPECT_TRUE(r.forget(8));
  jobs.clear();
  r.add_to(&jobs);
  EXPECT_TRUE(jobs.empty());
}

TEST(RefusedJobs, ForgottenAfterTheirTime) {
  RefusedJobs r(std::chrono::milliseconds(50));
  r.record(spec(1, 2), "no");
  std::vector<JobStatus> jobs;
  r.add_to(&jobs);
  EXPECT_EQ(jobs.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past the memory: a state, not a race
  jobs.clear();
  r.add_to(&jobs);
  EXPECT_TRUE(jobs.empty());
  EXPECT_FALSE(r.forget(1));
}

TEST(RefusedJobs, BoundedMemory) {
  RefusedJobs r;
  for (uint32_t id = 0; id < RefusedJobs::kMaxRemembered + 10; ++id) r.record(spec(id, 2), "no");
  std::vector<JobStatus> jobs;
  r.add_to(&jobs);
  ASSERT_EQ(jobs.size(), RefusedJobs::kMaxRemembered);
  EXPECT_EQ(jobs.front().id, 10u);  // the oldest went first
}

}  // namespace
}  // namespace inagg::control
