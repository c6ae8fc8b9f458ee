// The control socket's replies as JSON (inagg-ctl -j): one object per reply, for scripts and
// monitoring agents. The names are those of the text replies (the job fields of INAGG_JOB_FIELDS
// and the engine's counters, as `stats` prints them); numbers are JSON numbers.
//
//   any refusal      {"ok": false, "error": "<why>"}
//   add, remove      {"ok": true, "job": <id>, "result": "added" | "removed"}
//   list             {"ok": true, "jobs": [{"id": 1, "state": "active", "dtype": "fp32", ...,
//                     "error": ""}, ...]}
//   stats            {"ok": true, "counters": {"rx_packets": 12, ...}}
//   stats <id>       {"ok": true, "job": {"id": 1, "state": "active", ...}, "counters": {...}}
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "inagg/control/protocol.hpp"

namespace inagg::control {

// `reply` is the appliance's answer to a request of `verb` (with an id for stats <id>). nullopt
// when the reply is not in the form the protocol gives (*error says which line), so that a
// mismatch between the appliance and inagg-ctl is an error, never a half-read object.
std::optional<std::string> reply_to_json(Request::Verb verb, bool has_id, std::string_view reply, std::string* error);

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace inagg::control
