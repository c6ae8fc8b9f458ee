#include "inagg/client/fallover.hpp"

namespace inagg::client {

std::string_view cause_name(FallOverCause cause) {
  switch (cause) {
    case FallOverCause::appliance_absent:
      return "appliance absent";
    case FallOverCause::job_refused:
      return "job refused";
    case FallOverCause::job_not_active:
      return "job not active";
    case FallOverCause::tally_wrong:
      return "tally wrong";
    case FallOverCause::retry_exceeded:
      return "connection broken";
    case FallOverCause::predecessor_silent:
      return "predecessor silent";
    case FallOverCause::timed_out:
      return "timed out";
  }
  return "unknown";
}

void FallOver::fail(std::string why) {
  state_ = State::failed;
  error_ = std::move(why);
}

std::string_view FallOver::state_name(State s) {
  switch (s) {
    case State::appliance:
      return "appliance";
    case State::agreeing:
      return "agreeing";
    case State::tier:
      return "tier";
    case State::closing:
      return "closing";
    case State::done:
      return "done";
    case State::failed:
      return "failed";
  }
  return "unknown";
}

bool FallOver::expect(State s, std::string_view event) {
  if (state_ == s) return true;
  if (state_ != State::failed)
    fail("fall-over state machine: " + std::string(event) + " in state " + std::string(state_name(state_)) +
         " (a bug in the caller)");
  return false;
}

void FallOver::registration_failed(FallOverCause cause, std::string reason) {
  if (!expect(State::appliance, "registration_failed")) return;
  if (index_ != 0) return fail("fall-over state machine: registration_failed after allreduce 0 (a bug in the caller)");
  appliance_failed(cause, std::move(reason), false);
}

void FallOver::appliance_done() {
  if (expect(State::appliance, "appliance_done")) ++index_;
}

void FallOver::appliance_failed(FallOverCause cause, std::string reason, bool have_data) {
  if (!expect(State::appliance, "appliance_failed")) return;
  state_ = State::agreeing;
  fell_over_ = true;
  fell_at_ = index_;
  cause_ = cause;
  reason_ = std::move(reason);
  have_data_ = have_data;
}

FallOver::Agreement FallOver::contribution() const {
  if (state_ == State::closing) return {1, static_cast<int32_t>(index_), 0, 0};
  return {1, static_cast<int32_t>(index_ + (have_data_ ? 1 : 0)), 0, 0};
}

FallOver::Resume FallOver::agreed(const Agreement& sum) {
  if (!expect(State::agreeing, "agreed")) return Resume::error;
  const uint64_t h = index_ + (have_data_ ? 1 : 0);
  const uint64_t total = static_cast<uint32_t>(sum[1]);
  resume_ = total == workers_ * h ? h : total / workers_;
  state_ = State::tier;
  if (resume_ != index_ && resume_ != index_ + 1) {
    fail("fall-over agreement: the ranks resume at allreduce " + std::to_string(resume_) + ", this rank is at " +
         std::to_string(index_) + " (a rank that does not follow the protocol?)");
    return Resume::error;
  }
  if (resume_ == index_) return Resume::redo_on_tier;
  if (!have_data_) {
    fail("fall-over agreement: resume after this allreduce, but this rank lacks its sums");
    return Resume::error;
  }
  ++index_;  // every rank holds this allreduce's appliance sums
  return Resume::keep_appliance_sums;
}

void FallOver::tier_done() {
  if (expect(State::tier, "tier_done")) ++index_;
}

void FallOver::tier_failed(const std::string& why) {
  switch (state_) {
    case State::agreeing:
      return fail("fall-over agreement on the XDP tier: " + why);
    case State::closing:
      return fail(
          "the job's closing agreement on the XDP tier (auto mode needs its heads up, as the fall-back it is): " + why);
    case State::tier:
      return fail(why);
    default:
      expect(State::tier, "tier_failed");
  }
}

void FallOver::finish() {
  if (state_ == State::appliance)
    state_ = State::closing;
  else if (expect(State::tier, "finish"))
    state_ = State::done;
}

void FallOver::closing_agreed(const Agreement& sum) {
  if (!expect(State::closing, "closing_agreed")) return;
  const uint64_t total = static_cast<uint32_t>(sum[1]);
  if (total != workers_ * index_)
    return fail("closing agreement: the ranks hold " + std::to_string(total) + " allreduces in all, not " +
                std::to_string(workers_ * index_));
  state_ = State::done;
}

}  // namespace inagg::client
