// libFuzzer: the control socket's request parser on any text. Invariants: a refusal says why; a
// request it accepts formats back (format_request, or format_job for an add's job) into text it
// parses again to the same request.
#include <string>
#include <string_view>

#include "check.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/protocol.hpp"

using namespace inagg::control;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string err;
  const auto r = parse_request(text, &err);
  if (!r) {
    FUZZ_CHECK(!err.empty(), "refused without a reason");
    FUZZ_CHECK(is_error_reply(format_error(err)), "an error reply that is not one");
    return 0;
  }
  Request again = *r;
  if (r->verb == Request::Verb::add) again.body = format_job(r->job);
  const std::string formatted = format_request(again);
  std::string err2;
  const auto back = parse_request(formatted, &err2);
  FUZZ_CHECK(back.has_value(), "accepted, formatted, then refused: %s", err2.c_str());
  FUZZ_CHECK(back->verb == r->verb && back->has_id == r->has_id && back->id == r->id,
             "the request changed in a round trip");
  if (r->verb == Request::Verb::add)
    FUZZ_CHECK(format_job(back->job) == format_job(r->job), "the job changed in a round trip");
  return 0;
}
