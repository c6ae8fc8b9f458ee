// Text helpers of inagg's `key = value` files (job files, the XDP tier's head job files), control
// requests and command lines: below every module that reads such text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inagg::util {

std::string_view trim(std::string_view s);  // spaces, tabs, CR, VT and FF off both ends
// "a, b ,c" -> {"a", "b", "c"}: comma-separated fields, each trimmed; one field when there is no comma.
std::vector<std::string_view> split_fields(std::string_view value);
// Calls fn(line number, content) for every line with something left once its comment (from '#' or
// ';') and the spaces around it are cut; stops at the first call that returns false, and then
// returns false itself.
bool for_each_content_line(std::string_view text, const std::function<bool(size_t, std::string_view)>& fn);

// Strict unsigned numbers, as job files and control requests write them: decimal or 0x/0X hex, the
// whole text, no sign, no spaces, at most `max`.
enum class NumberError { none, not_a_number, negative, out_of_range };
std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t max, NumberError* why = nullptr);

// `text` in single quotes for an error message, control characters escaped and cut at 64 bytes, so
// a garbled input cannot garble the message.
std::string quote_for_error(std::string_view text);

// Reads a whole regular file of at most max_bytes. On failure *error is a sentence naming the file
// as `what` ("cannot open job file 'x.job': No such file or directory"); `size_note` describes the
// limit ("1 MiB (...)").
bool read_small_file(const std::string& path, std::string_view what, size_t max_bytes, std::string_view size_note,
                     std::string* text, std::string* error);

}  // namespace inagg::util
