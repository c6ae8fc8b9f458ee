// Job files: one aggregation job (agg::JobSpec) as INI-style `key = value` text, read by `inagg`
// at start-up and by `inagg-ctl add`, and sent as the body of the control socket's `add` request.
//
//   # comment (also `;`), anywhere after a value too
//   id            = 7                       uint32
//   dtype         = fp32                    fp32 | fp16 | bf16 | int32
//   workers       = 4                       1..64
//   message_bytes = 65536                   >= 1
//   payload_bytes = 1024                    >= 1
//   window        = 8                       >= 1, messages outstanding per QP
//   replay        = false                   optional: true | false
//   conn = RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN     one line per worker
//   conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x000012, 0
//
// Numbers are decimal or 0x-hex; QPNs and PSNs are 24-bit; addresses IPv4 or IPv6 (one version per
// conn line). Only syntax and per-field ranges are checked here: how fields relate (ranks below
// workers, one conn per rank, sizes that divide) is agg::Engine::add_job's to check, so both the
// file and the control socket get the same answer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/agg/engine.hpp"

namespace inagg::control {

// Job files the appliance and inagg-ctl accept are at most this large (a 64-worker job is ~5 KiB).
inline constexpr size_t kMaxJobFileBytes = 1 << 20;

// On failure sets *error to "line N: <key>: <what is wrong and what to write instead>" (no line
// number for a missing key or missing conn lines).
std::optional<agg::JobSpec> parse_job(std::string_view text, std::string* error);

// Reads and parses a job file; errors name it ("conf/jobs/x.job:7: conn: ..."). When `text` is not
// null it receives the file's contents (what inagg-ctl sends, so it is read only once).
std::optional<agg::JobSpec> load_job_file(const std::string& path, std::string* error, std::string* text = nullptr);

// Text helpers of the INI-style files (job files here, the XDP tier's head job files).
std::string_view trim(std::string_view s);  // spaces, tabs, CR, VT and FF off both ends
// "a, b ,c" -> {"a", "b", "c"}: comma-separated fields, each trimmed; one field when there is no comma.
std::vector<std::string_view> split_fields(std::string_view value);
// Calls fn(line number, content) for every line with something left once its comment (from '#' or
// ';') and the spaces around it are cut; stops at the first call that returns false, and then
// returns false itself.
bool for_each_content_line(std::string_view text, const std::function<bool(size_t, std::string_view)>& fn);

// Reads a whole regular file of at most max_bytes. On failure *error is a sentence naming the file
// as `what` ("cannot open job file 'x.job': No such file or directory"); `size_note` describes the
// limit ("1 MiB (...)").
bool read_small_file(const std::string& path, std::string_view what, size_t max_bytes, std::string_view size_note,
                     std::string* text, std::string* error);

// Canonical text for `spec` (fixed key order, hex QPNs/PSNs, a header comment); parse_job reads it
// back identically for any spec whose fields are in range.
std::string format_job(const agg::JobSpec& spec);

// Strict unsigned numbers, as job files and control requests write them: decimal or 0x/0X hex, the
// whole text, no sign, no spaces, at most `max`.
enum class NumberError { none, not_a_number, negative, out_of_range };
std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t max, NumberError* why = nullptr);

// `text` in single quotes for an error message, control characters escaped and cut at 64 bytes, so
// a garbled input cannot garble the message.
std::string quote_for_error(std::string_view text);

}  // namespace inagg::control
