// JSON serialization for the wire and for logs: one place that decides how a JSON
// value becomes text. Pure; thread-safe.
//
// Contract: compact (no spaces or newlines), and invalid UTF-8 inside a string becomes
// U+FFFD instead of an exception (nlohmann's default dump() throws type_error 316,
// and a string quoting client bytes or a token piece may be any bytes). Rejected:
// error_handler_t::ignore, which drops the bytes silently.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace pagoda {

std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace pagoda
