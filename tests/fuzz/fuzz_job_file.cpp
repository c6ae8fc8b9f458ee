// libFuzzer: the job-file parser on any text. Invariants: a refusal says why; an accepted job
// formats (format_job) into canonical text that parses back to the same job and formats the same.
#include <string>

#include "check.hpp"
#include "inagg/control/job_file.hpp"

using namespace inagg::control;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string err;
  const auto spec = parse_job(text, &err);
  if (!spec) {
    FUZZ_CHECK(!err.empty(), "refused without a reason");
    return 0;
  }
  const std::string canon = format_job(*spec);
  std::string err2;
  const auto back = parse_job(canon, &err2);
  FUZZ_CHECK(back.has_value(), "accepted, formatted, then refused: %s\n%s", err2.c_str(), canon.c_str());
  FUZZ_CHECK(format_job(*back) == canon, "not canonical after a round trip:\n%s", canon.c_str());
  FUZZ_CHECK(back->id == spec->id && back->workers == spec->workers && back->conns.size() == spec->conns.size() &&
                 back->window == spec->window && back->message_bytes == spec->message_bytes,
             "the job changed in a round trip");
  return 0;
}
