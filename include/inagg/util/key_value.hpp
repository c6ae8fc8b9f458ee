// `key = value` text: the one syntax and the one parser of inagg's config files (inagg --config),
// job files (control socket `add`, inagg --job, inagg-ctl add) and the XDP tier's head job files,
// so all three accept the same lines and report mistakes the same way:
//
//   # a comment (also `;`), anywhere after a value too
//   key = value                one setting per line; spaces around both are ignored
//
// No sections. A key the schema does not name, a key given twice (unless repeatable), a key with
// no value and a required key left out are refused here with a sentence that says what to write;
// what a value means is the caller's to check. Below every module that reads such text, as text.hpp.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "inagg/util/text.hpp"  // trim, split_fields, parse_unsigned, quote_for_error: the values' helpers

namespace inagg::util {

struct KeySpec {
  std::string_view name;
  bool required = false;
  bool repeatable = false;
  std::string_view example;  // a whole line to suggest when the key is missing or empty
};

// Where parsing stopped and why. line == 0: not tied to a line (a required key left out).
struct ParseProblem {
  size_t line = 0;
  std::string text;
  // "line 7: <text>" (or just <text>), and "<file>:7: <text>" for messages that name a file.
  std::string message() const;
  std::string message(std::string_view file) const;
};

// Calls set(key index into `keys`, value, &problem) for every `key = value` line, in order; a false
// return stops parsing with *p = {that line, "<key>: <problem>"}. Returns false on the first
// problem. The set callback is not called for lines the schema refuses.
bool parse_key_values(std::string_view text, std::span<const KeySpec> keys,
                      const std::function<bool(size_t key, std::string_view value, std::string* problem)>& set,
                      ParseProblem* p);

}  // namespace inagg::util
