#include "cache/prefix_cache_config.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "common/ascii.h"
#include "common/error.h"
#include "kv/kv_config.h"

namespace pagoda {

namespace {

[[noreturn]] void bad(std::string_view flag, std::string_view text, std::string_view want) {
  throw Error(std::string(flag) + ": '" + std::string(text) + "' is not " + std::string(want));
}

// A non-negative decimal integer, the whole text.
bool parse_count(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size() && out >= 0;
}

}  // namespace

bool parse_prompt_cache_switch(std::string_view text, std::string_view flag) {
  const std::string t = ascii_lower(text);
  if (t == "on" || t == "true" || t == "1" || t == "yes") return true;
  if (t == "off" || t == "false" || t == "0" || t == "no") return false;
  bad(flag, text, "on or off");
}

uint64_t parse_prompt_cache_bytes(std::string_view text, std::string_view flag) {
  if (ascii_lower(text) == "unlimited") return PrefixCacheConfig::kUnlimitedBytes;
  return parse_byte_size(text, flag);
}

int64_t parse_prompt_cache_max_entries(std::string_view text, std::string_view flag) {
  if (ascii_lower(text) == "unlimited") return PrefixCacheConfig::kUnlimitedEntries;
  int64_t n = 0;
  if (!parse_count(text, n)) bad(flag, text, "a number of entries or 'unlimited'");
  return n;
}

int64_t parse_prompt_cache_ttl(std::string_view text, std::string_view flag) {
  const std::string t = ascii_lower(text);
  if (t == "none" || t == "off") return PrefixCacheConfig::kNoTtl;
  // number + optional unit: ms, s, m, h (no unit: seconds).
  size_t unit_at = t.size();
  while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(t[unit_at - 1]))) --unit_at;
  const std::string num = t.substr(0, unit_at), unit = t.substr(unit_at);
  double ms_per = 0;
  if (unit.empty() || unit == "s") ms_per = 1000;
  else if (unit == "ms") ms_per = 1;
  else if (unit == "m" || unit == "min") ms_per = 60e3;
  else if (unit == "h") ms_per = 3600e3;
  else bad(flag, text, "a duration (300, 300s, 250ms, 5m, 1.5h) or 'none'");
  double v = 0;
  const auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (num.empty() || ec != std::errc() || p != num.data() + num.size() || !(v >= 0) || !std::isfinite(v) ||
      v * ms_per > 9.2e18)
    bad(flag, text, "a duration (300, 300s, 250ms, 5m, 1.5h) or 'none'");
  return static_cast<int64_t>(std::llround(v * ms_per));
}

int64_t parse_prompt_cache_min_prefix(std::string_view text, std::string_view flag) {
  int64_t n = 0;
  if (!parse_count(text, n)) bad(flag, text, "a number of tokens");
  return n;
}

}  // namespace pagoda
