// auto mode's fall-over from the appliance to the XDP tier (docs/xdp-tier.md, "Fall-over"; the spin model
// tests/model/fallover.pml), as a state machine with no I/O: the driver (Worker) feeds it what
// happened and does what it says, so a unit test can feed it any sequence of events.
//
//   appliance --appliance_done()--> appliance (next allreduce)
//   appliance --registration_failed() / appliance_failed()--> agreeing
//   agreeing  --agreed(sum)--> tier                       (the allreduce is redone on the tier, or
//                                                          kept from the appliance's sums)
//   agreeing  --tier_failed()--> failed                   (the tier's heads are silent)
//   tier      --tier_done()--> tier;  --tier_failed()--> failed
//   appliance --finish()--> closing --closing_agreed(sum)--> done | failed
//   tier      --finish()--> done
//
// The agreement: every rank that falls over contributes h, the number of allreduces whose data it
// holds summed, to a sum on the tier (contribution()). Ranks differ by at most one, and nobody
// finished an allreduce before every rank held its data. So if every h is the same, allreduces
// below h are done everywhere and the tier takes over from h; otherwise allreduce floor(H / n) is
// held by some and not by others, finished by nobody, and is done again on the tier by all. A rank
// that finished on the appliance still meets the tier once, for the closing agreement, where a
// rank that fell over during the last allreduce is waiting.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace inagg::client {

enum class Tier : uint8_t { appliance, xdp };

// Why a rank leaves the appliance (the reason text says more).
enum class FallOverCause : uint8_t {
  appliance_absent,    // the control socket cannot be reached
  job_refused,         // the appliance refused the job
  job_not_active,      // the job did not become active in time
  tally_wrong,         // a message arrived without the appliance's sum
  retry_exceeded,      // the connection broke: the RC requester gave up, or a broken stream
  predecessor_silent,  // nothing arrived for twice the retry budget
  timed_out,           // the job's deadline passed
};
std::string_view cause_name(FallOverCause cause);

class FallOver {
 public:
  enum class State : uint8_t { appliance, agreeing, tier, closing, done, failed };
  // What agreed() decided for the allreduce in progress.
  enum class Resume : uint8_t {
    redo_on_tier,         // do allreduce index() on the tier
    keep_appliance_sums,  // every rank holds its appliance sums: it is done (index() moved on)
    error,                // the ranks disagree beyond the protocol (error())
  };
  using Agreement = std::array<int32_t, 4>;  // {1, h, 0, 0}: the tier sums it over the ranks

  explicit FallOver(unsigned workers) : workers_(workers) {}
  static std::string_view state_name(State s);

  State state() const { return state_; }
  // The tier the next allreduce runs on: the XDP tier once the rank fell over, for the rest of the job.
  Tier tier() const { return fell_over_ ? Tier::xdp : Tier::appliance; }
  uint64_t index() const { return index_; }  // allreduces done in this job
  FallOverCause cause() const { return cause_; }
  const std::string& reason() const { return reason_; }  // why it fell over
  uint64_t fell_over_at() const { return fell_at_; }     // the allreduce in progress when it fell over
  uint64_t resume_point() const { return resume_; }      // where the tier took over
  const std::string& error() const { return error_; }

  // Before allreduce 0: the job could not be registered; allreduce 0 starts with the agreement.
  void registration_failed(FallOverCause cause, std::string reason);
  // The appliance summed allreduce index(), its commit included.
  void appliance_done();
  // The appliance path of allreduce index() failed; have_data: this rank holds the appliance's
  // sums of every data message of it (only the commit was missing).
  void appliance_failed(FallOverCause cause, std::string reason, bool have_data);

  // agreeing or closing: what this rank adds to the sum on the tier.
  Agreement contribution() const;
  // agreeing: the tier's sum of every rank's contribution.
  Resume agreed(const Agreement& sum);
  // The tier summed allreduce index().
  void tier_done();
  // The tier gave no answer (agreeing, tier, closing): the job fails with `why`.
  void tier_failed(const std::string& why);

  // After the last allreduce: on the appliance, the closing agreement follows; on the tier, done.
  void finish();
  // closing: the tier's sum of every rank's {1, index()}.
  void closing_agreed(const Agreement& sum);

 private:
  void fail(std::string why);
  bool expect(State s, std::string_view event);

  unsigned workers_;
  State state_ = State::appliance;
  uint64_t index_ = 0;
  bool have_data_ = false;
  bool fell_over_ = false;
  FallOverCause cause_ = FallOverCause::tally_wrong;
  std::string reason_, error_;
  uint64_t fell_at_ = 0, resume_ = 0;
};

}  // namespace inagg::client
