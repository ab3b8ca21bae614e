#include "common/json_parse.h"

#include <cstring>

namespace pagoda {

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const char c = *p++;
    if (c == '"') {
      // Skip the string: to the next quote not escaped by a backslash. memchr keeps a long
      // string at memory speed.
      for (;;) {
        const void* q = std::memchr(p, '"', static_cast<size_t>(end - p));
        if (!q) return true;  // unterminated: the parse rejects it
        const char* quote = static_cast<const char*>(q);
        size_t backslashes = 0;
        for (const char* b = quote; b > p && b[-1] == '\\'; --b) ++backslashes;
        p = quote + 1;
        if (backslashes % 2 == 0) break;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

namespace {
template <class Json>
Json parse_or_discarded(std::string_view text, int max_depth) {
  if (!json_depth_within(text, max_depth)) return Json(Json::value_t::discarded);
  // allow_exceptions = false still throws out_of_range 406 for a number beyond double's range
  // (1e999) in some versions; treat any exception as "not JSON".
  try {
    return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const typename Json::exception&) {
    return Json(Json::value_t::discarded);
  }
}
}  // namespace

nlohmann::json parse_json_or_discarded(std::string_view text, int max_depth) {
  return parse_or_discarded<nlohmann::json>(text, max_depth);
}

nlohmann::ordered_json parse_ordered_json_or_discarded(std::string_view text, int max_depth) {
  return parse_or_discarded<nlohmann::ordered_json>(text, max_depth);
}

}  // namespace pagoda
