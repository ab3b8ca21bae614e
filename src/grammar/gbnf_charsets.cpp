// Code point sets and repetitions in GBNF, shared by the regex and schema compilers:
// set algebra over Unicode scalar values, char classes, a set written inside a JSON
// string (raw or escaped), and {m,n} built from blocks for large counts.
#include <algorithm>
#include <string>

#include "common/utf8.h"
#include "grammar/json_schema_internal.h"

namespace pagoda::grammar::detail {

CodepointRanges normalize(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (const auto& [a, b] : r) {
    if (a > b) continue;
    if (!out.empty() && a <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

CodepointRanges complement(const CodepointRanges& r) {
  CodepointRanges full = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
  CodepointRanges norm = normalize(r);
  CodepointRanges out;
  for (auto [a, b] : full) {
    uint32_t next = a;
    for (const auto& [x, y] : norm) {
      if (y < next || x > b) continue;
      if (x > next) out.emplace_back(next, x - 1);
      next = std::max(next, y + 1);
      if (next > b) break;
    }
    if (next <= b) out.emplace_back(next, b);
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  append_utf8(s, static_cast<char32_t>(cp));
  return s;
}

namespace {

const char* kHex = "0123456789ABCDEF";

std::string hex2(uint32_t c) { return std::string("\\x") + kHex[(c >> 4) & 15] + kHex[c & 15]; }

// A code point inside [...]: ASCII controls, DEL and the class metacharacters as \xNN
// (the one escape every GBNF reader takes the same way), the rest as UTF-8.
std::string class_char(uint32_t c) {
  if (c < 0x20 || c == 0x7F || c == ']' || c == '[' || c == '\\' || c == '^' || c == '-' || c == '"')
    return hex2(c);
  return utf8_encode(c);
}

}  // namespace

std::string char_class(const CodepointRanges& r) {
  const CodepointRanges pos = normalize(r);
  const CodepointRanges neg = complement(pos);
  const bool negate = neg.size() < pos.size();
  std::string out = negate ? "[^" : "[";
  for (const auto& [a, b] : negate ? neg : pos) {
    out += class_char(a);
    if (b > a) {
      if (b > a + 1) out += "-";
      out += class_char(b);
    }
  }
  return out + "]";
}

std::string json_string_char_set(GbnfBuilder::Impl& b, const CodepointRanges& r) {
  const CodepointRanges set = normalize(r);
  // Raw: the set minus '"', '\\' and U+0000..U+001F.
  const CodepointRanges must_escape = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  CodepointRanges raw;
  const CodepointRanges allowed_raw = complement(must_escape);
  for (const auto& [a, b2] : set)
    for (const auto& [x, y] : allowed_raw) {
      const uint32_t lo = std::max(a, x), hi = std::min(b2, y);
      if (lo <= hi) raw.emplace_back(lo, hi);
    }
  std::vector<std::string> alts;
  if (!raw.empty()) alts.push_back(char_class(raw));
  auto contains = [&](uint32_t c) {
    for (const auto& [a, b2] : set)
      if (c >= a && c <= b2) return true;
    return false;
  };
  std::string short_escapes;  // the characters after '\\' in a class
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!contains(c)) continue;
    switch (c) {
      case '\b': short_escapes += "b"; break;
      case '\f': short_escapes += "f"; break;
      case '\n': short_escapes += "n"; break;
      case '\r': short_escapes += "r"; break;
      case '\t': short_escapes += "t"; break;
      default: alts.push_back(std::string("\"\\\\u00") + kHex[c >> 4] + kHex[c & 15] + "\"");
    }
  }
  if (contains('"')) short_escapes += "\\x22";
  if (contains('\\')) short_escapes += "\\x5C";
  if (!short_escapes.empty()) alts.push_back("\"\\\\\" [" + short_escapes + "]");
  if (alts.empty()) return "";
  if (alts.size() == 1 && alts[0][0] == '[') return alts[0];
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return b.define("char-set", body);
}

std::string repeat(GbnfBuilder::Impl& b, const std::string& item, int64_t min, int64_t max,
                   std::string_view keyword, const std::string& path) {
  // 1,000,000: past it a bound is a mistake or an attack, not a document a model writes.
  constexpr int64_t kMaxCount = 1000000;
  if (min > kMaxCount || max > kMaxCount)
    throw UnsupportedSchema("'" + std::string(keyword) + "' at " + (path.empty() ? "/" : path) +
                                " is over the supported count of 1000000",
                            std::string(keyword), path);
  if (max != kUnbounded && max < min) return "";  // callers check; nothing fits
  if (max == 0) return "";
  // Small counts: the grammar compiler expands {m,n} itself.
  constexpr int64_t kDirect = 1000, kBlock = 32;
  if (min <= kDirect && (max == kUnbounded || max <= kDirect)) {
    if (min == 0 && max == kUnbounded) return item + "*";
    if (min == 1 && max == kUnbounded) return item + "+";
    if (min == 0 && max == 1) return item + "?";
    if (min == 1 && max == 1) return item;
    if (max == kUnbounded) return item + "{" + std::to_string(min) + ",}";
    if (min == max) return item + "{" + std::to_string(min) + "}";
    return item + "{" + std::to_string(min) + "," + std::to_string(max) + "}";
  }
  // item{min} = block{min/32} item{min%32}; then up to (max-min) more, written as
  // "fewer than a whole number q of extra blocks, then 0..31 items" or "exactly q
  // blocks, then 0..r items" (the two cannot both match one length).
  const std::string block = b.define("rep", item + "{" + std::to_string(kBlock) + "}");
  std::string out;
  auto append = [&](const std::string& s) {
    if (s.empty()) return;
    if (!out.empty()) out += " ";
    out += s;
  };
  append(repeat(b, block, min / kBlock, min / kBlock, keyword, path));
  append(repeat(b, item, min % kBlock, min % kBlock, keyword, path));
  if (max == kUnbounded) {
    append(item + "*");
    return out;
  }
  const int64_t extra = max - min;
  const int64_t q = extra / kBlock, r = extra % kBlock;
  std::string fewer;
  if (q > 0) {
    std::string head = repeat(b, block, 0, q - 1, keyword, path);
    std::string tail = repeat(b, item, 0, kBlock - 1, keyword, path);
    fewer = head.empty() ? tail : head + " " + tail;
  }
  std::string exact = repeat(b, block, q, q, keyword, path);
  const std::string tail = repeat(b, item, 0, r, keyword, path);
  if (!tail.empty()) exact = exact.empty() ? tail : exact + " " + tail;
  if (fewer.empty()) {
    append("(" + exact + ")");
  } else {
    append("(" + fewer + " | " + exact + ")");
  }
  return out;
}

}  // namespace pagoda::grammar::detail
