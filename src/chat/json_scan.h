// Internal to src/chat: finds where a JSON value written by a model ends, without
// building it, so a parser can keep the model's own bytes (arguments text) and tell a
// value cut off by max_tokens (Incomplete: more text could finish it) from one that
// can never become valid (Invalid).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::chat::detail {

enum class ScanStatus { Complete, Incomplete, Invalid };

struct ScanResult {
  ScanStatus status = ScanStatus::Invalid;
  size_t end = 0;  // one past the value (Complete only)
};

// Nesting deeper than this is Invalid: no real tool call nests 128 levels, and the
// scanner must stay bounded on hostile text.
inline constexpr int kMaxJsonDepth = 128;

// Scans one JSON value starting exactly at `pos` (no leading whitespace skipped).
// Strict RFC 8259 lexing (strings with escapes, numbers, true/false/null); a number at
// the very end of the text is Incomplete (more digits could follow).
ScanResult scan_json_value(std::string_view text, size_t pos);

// Members of the JSON object text[begin, end) (a Complete scan): each key decoded,
// each value as a byte range. Empty when `text` is not an object.
struct JsonMember {
  std::string key;
  size_t value_begin = 0, value_end = 0;
};
std::vector<JsonMember> object_members(std::string_view text, size_t begin, size_t end);

size_t skip_ws(std::string_view text, size_t pos);
bool is_ws(char c);

}  // namespace pagoda::chat::detail
