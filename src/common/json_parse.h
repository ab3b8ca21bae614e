// Parsing JSON text that came from outside (a request body, a tool call's arguments, a
// schema given as a string, a Hub response) with a nesting limit, in time linear in the text.
// Pure; thread-safe.
//
// Why not nlohmann's parser callback: with a callback, the DOM builder scans the parent
// container for discarded values after every object or array it closes, so an array of n
// `{}` costs O(n^2) (512 KB of `{}` took 5.6 s, 8 MiB ~24 min). Here one pass counts the
// bracket depth outside strings first (exact for valid JSON; invalid text is rejected by the
// parse after it anyway), then nlohmann parses without a callback.
//
// The limit exists for what comes after the parse: nlohmann's parser is iterative, but
// dump(), the template engine's value conversion and the schema compiler recurse.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace pagoda {

// 64 levels leave room for nested tool schemas (rarely past 10) and keep a recursive
// walk's stack use trivial. Rejected: no limit (8 MiB of '[' is 8M levels).
inline constexpr int kMaxJsonDepth = 64;

// True when no array or object in `text` is nested deeper than max_depth levels (a
// top-level `{}` is depth 1). Brackets inside strings do not count.
bool json_depth_within(std::string_view text, int max_depth = kMaxJsonDepth);

// The parsed value, or a discarded value (is_discarded()) when the text is not JSON or is
// nested deeper than max_depth.
nlohmann::json parse_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace pagoda
