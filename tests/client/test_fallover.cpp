// auto mode's fall-over state machine, fed events as the ranks of a job would see them: the
// appliance absent or refusing the job, a wrong tally, a broken connection, silence, the tier's
// heads silent, the deadline. Whole jobs of n ranks are simulated by summing their contributions
// the way the tier does, and every rank must take every allreduce's sum from the same tier.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "inagg/client/fallover.hpp"

using inagg::client::FallOver;
using inagg::client::FallOverCause;
using inagg::client::Tier;
using State = FallOver::State;
using Resume = FallOver::Resume;

namespace {

// What the tier does with the ranks' agreement vectors: an element-wise int32 sum.
FallOver::Agreement tier_sum(const std::vector<FallOver*>& ranks) {
  FallOver::Agreement s{};
  for (const FallOver* r : ranks) {
    const FallOver::Agreement c = r->contribution();
    for (size_t i = 0; i < s.size(); ++i) s[i] += c[i];
  }
  return s;
}

}  // namespace

TEST(FallOver, HealthyJobEndsWithTheClosingAgreement) {
  FallOver a(4), b(4), c(4), d(4);
  std::vector<FallOver*> ranks{&a, &b, &c, &d};
  for (FallOver* r : ranks) {
    EXPECT_EQ(r->tier(), Tier::appliance);
    for (int i = 0; i < 3; ++i) r->appliance_done();
    r->finish();
    EXPECT_EQ(r->state(), State::closing);
    EXPECT_EQ(r->contribution(), (FallOver::Agreement{1, 3, 0, 0}));
  }
  const FallOver::Agreement sum = tier_sum(ranks);
  for (FallOver* r : ranks) {
    r->closing_agreed(sum);
    EXPECT_EQ(r->state(), State::done) << r->error();
    EXPECT_EQ(r->index(), 3u);
    EXPECT_EQ(r->tier(), Tier::appliance);  // the tier only agreed; it summed nothing
  }
}

TEST(FallOver, RegistrationFailuresMeanTheTierFromAllreduceZero) {
  for (FallOverCause cause :
       {FallOverCause::appliance_absent, FallOverCause::job_refused, FallOverCause::job_not_active}) {
    FallOver a(2), b(2);
    a.registration_failed(cause, "the appliance refused the job: error: needs 16384 buffers");
    b.registration_failed(cause, "same");
    EXPECT_EQ(a.state(), State::agreeing);
    EXPECT_EQ(a.tier(), Tier::xdp);
    EXPECT_EQ(a.cause(), cause);
    EXPECT_EQ(a.contribution(), (FallOver::Agreement{1, 0, 0, 0}));
    const FallOver::Agreement sum = tier_sum({&a, &b});
    EXPECT_EQ(a.agreed(sum), Resume::redo_on_tier);
    EXPECT_EQ(a.fell_over_at(), 0u);
    EXPECT_EQ(a.resume_point(), 0u);
    EXPECT_EQ(a.reason(), "the appliance refused the job: error: needs 16384 buffers");
    a.tier_done();
    a.finish();
    EXPECT_EQ(a.state(), State::done);
    EXPECT_EQ(a.index(), 1u);
    EXPECT_EQ(a.tier(), Tier::xdp);
  }
}

TEST(FallOver, WrongTallyOnEveryRankRedoesTheAllreduceOnTheTier) {
  std::vector<FallOver> r(3, FallOver(3));
  std::vector<FallOver*> ranks{&r[0], &r[1], &r[2]};
  for (FallOver* x : ranks) {
    x->appliance_done();
    x->appliance_done();
    x->appliance_failed(FallOverCause::tally_wrong, "message 0 arrived without the appliance's sum (tally 1, want 3)",
                        false);
  }
  const FallOver::Agreement sum = tier_sum(ranks);
  EXPECT_EQ(sum[0], 3);
  for (FallOver* x : ranks) {
    EXPECT_EQ(x->agreed(sum), Resume::redo_on_tier);
    EXPECT_EQ(x->resume_point(), 2u);
    EXPECT_EQ(x->index(), 2u);
  }
}

TEST(FallOver, CommitLostEverywhereKeepsTheApplianceSums) {
  // Every rank holds allreduce 5's sums, no commit arrived (the appliance died after the data).
  std::vector<FallOver> r(4, FallOver(4));
  std::vector<FallOver*> ranks{&r[0], &r[1], &r[2], &r[3]};
  for (FallOver* x : ranks) {
    for (int i = 0; i < 5; ++i) x->appliance_done();
    x->appliance_failed(FallOverCause::retry_exceeded, "retry count (7) exceeded", true);
  }
  const FallOver::Agreement sum = tier_sum(ranks);
  for (FallOver* x : ranks) {
    EXPECT_EQ(x->agreed(sum), Resume::keep_appliance_sums);
    EXPECT_EQ(x->fell_over_at(), 5u);
    EXPECT_EQ(x->resume_point(), 6u);
    EXPECT_EQ(x->index(), 6u);
    EXPECT_EQ(x->tier(), Tier::xdp);
  }
}

TEST(FallOver, SomeRanksHoldTheDataOthersDoNotAllRedo) {
  // Ranks 0 and 1 hold allreduce 7's data (their commit was lost); 2 and 3 saw silence before
  // their data was in: nobody finished 7, so all do it again on the tier.
  std::vector<FallOver> r(4, FallOver(4));
  for (size_t i = 0; i < r.size(); ++i) {
    for (int k = 0; k < 7; ++k) r[i].appliance_done();
    r[i].appliance_failed(i < 2 ? FallOverCause::retry_exceeded : FallOverCause::predecessor_silent, "x", i < 2);
  }
  const FallOver::Agreement sum = tier_sum({&r[0], &r[1], &r[2], &r[3]});
  for (FallOver& x : r) {
    EXPECT_EQ(x.agreed(sum), Resume::redo_on_tier) << x.error();
    EXPECT_EQ(x.resume_point(), 7u);
    EXPECT_EQ(x.index(), 7u);
  }
}

TEST(FallOver, HeadSilentFailsTheJobWithTheStepItHappenedIn) {
  FallOver a(2);
  a.appliance_failed(FallOverCause::timed_out, "timed out", false);
  a.tier_failed("XDP tier: no result for chunk 0");
  EXPECT_EQ(a.state(), State::failed);
  EXPECT_EQ(a.error(), "fall-over agreement on the XDP tier: XDP tier: no result for chunk 0");

  FallOver b(2);
  b.registration_failed(FallOverCause::appliance_absent, "cannot connect");
  EXPECT_EQ(b.agreed({2, 0, 0, 0}), Resume::redo_on_tier);
  b.tier_failed("XDP tier: no result for chunk 1");
  EXPECT_EQ(b.error(), "XDP tier: no result for chunk 1");

  FallOver c(2);
  c.appliance_done();
  c.finish();
  c.tier_failed("no result");
  EXPECT_EQ(
      c.error(),
      "the job's closing agreement on the XDP tier (auto mode needs its heads up, as the fall-back it is): no result");
}

TEST(FallOver, AgreementsBeyondTheProtocolAreErrors) {
  FallOver a(4);
  a.appliance_done();
  a.appliance_failed(FallOverCause::tally_wrong, "x", false);
  EXPECT_EQ(a.agreed({4, 16, 0, 0}), Resume::error);  // everyone else claims allreduce 4
  EXPECT_EQ(a.error(),
            "fall-over agreement: the ranks resume at allreduce 4, this rank is at 1 (a rank that does not follow the "
            "protocol?)");

  FallOver b(2);
  b.appliance_failed(FallOverCause::tally_wrong, "x", false);  // h = 0
  EXPECT_EQ(b.agreed({2, 1, 0, 0}), Resume::redo_on_tier);     // sum 1 != 2 x 0: floor(1 / 2) = 0
  FallOver c(2);
  c.appliance_failed(FallOverCause::tally_wrong, "x", false);
  EXPECT_EQ(c.agreed({2, 2, 0, 0}), Resume::error);  // all say "after this one", but this rank lacks the sums
  EXPECT_EQ(c.error(), "fall-over agreement: resume after this allreduce, but this rank lacks its sums");

  FallOver d(3);
  d.appliance_done();
  d.finish();
  d.closing_agreed({3, 2, 0, 0});
  EXPECT_EQ(d.state(), State::failed);
  EXPECT_EQ(d.error(), "closing agreement: the ranks hold 2 allreduces in all, not 3");
}

TEST(FallOver, EventsOutOfOrderAreReportedNotFollowed) {
  FallOver a(2);
  a.tier_done();
  EXPECT_EQ(a.state(), State::failed);
  EXPECT_NE(a.error().find("tier_done in state appliance"), std::string::npos) << a.error();
  FallOver b(2);
  b.appliance_done();
  b.registration_failed(FallOverCause::job_refused, "late");
  EXPECT_EQ(b.state(), State::failed);
  FallOver c(2);
  EXPECT_EQ(c.agreed({2, 0, 0, 0}), Resume::error);
}

// The appliance dies at a random allreduce d and a random phase; each rank notices in its own way.
// Phases: 0 before any data was summed (nobody holds d), 1 after every rank's data but before any
// commit (everybody holds d), 2 after some ranks' commits (they finished d and fail at d + 1), 3
// while the sums were being released (some ranks hold d, others do not, nobody committed).
// Every rank must end with the same tier for every allreduce, and the same count.
TEST(FallOver, SimulatedJobsAgreeOnEveryAllreduce) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 2000; ++trial) {
    const unsigned n = 2 + rng() % 7, total = 6, d = rng() % 4, phase = rng() % 4;
    std::vector<FallOver> r(n, FallOver(n));
    std::vector<std::vector<Tier>> done(n);  // per rank: the tier of each finished allreduce
    std::vector<FallOver*> ranks;
    for (unsigned i = 0; i < n; ++i) {
      ranks.push_back(&r[i]);
      for (unsigned k = 0; k < d; ++k) {
        r[i].appliance_done();
        done[i].push_back(Tier::appliance);
      }
      const bool committed = phase == 2 && (i == 0 || rng() % 2);  // at least one rank's commit arrived
      if (committed) {
        r[i].appliance_done();
        done[i].push_back(Tier::appliance);
      }
      const bool have_data =
          phase == 1 || (phase == 2 && !committed) || (phase == 3 && (i == 0 || (i != 1 && rng() % 2)));
      r[i].appliance_failed(have_data ? FallOverCause::retry_exceeded : FallOverCause::tally_wrong, "x", have_data);
    }
    const FallOver::Agreement sum = tier_sum(ranks);
    for (unsigned i = 0; i < n; ++i) {
      const Resume res = r[i].agreed(sum);
      ASSERT_NE(res, Resume::error) << "trial " << trial << " rank " << i << ": " << r[i].error();
      if (res == Resume::keep_appliance_sums) done[i].push_back(Tier::appliance);
      while (r[i].index() < total) {
        r[i].tier_done();
        done[i].push_back(Tier::xdp);
      }
      r[i].finish();
      ASSERT_EQ(r[i].state(), State::done) << r[i].error();
    }
    for (unsigned i = 1; i < n; ++i)
      ASSERT_EQ(done[i], done[0]) << "trial " << trial << ": n " << n << ", died at " << d << ", phase " << phase;
    EXPECT_EQ(done[0][d], phase == 0 || phase == 3 ? Tier::xdp : Tier::appliance) << "trial " << trial;
  }
}
