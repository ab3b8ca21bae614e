#include "tokenizer/utf8.h"

namespace pagoda::tokenizer_detail {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// For a lead byte: the sequence length and the allowed range of the second
// byte (which is what excludes overlongs, surrogates and code points above
// U+10FFFF, per Unicode Table 3-7). Length 0 marks a byte that never starts a
// character.
struct LeadInfo {
  size_t len;
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b >= 0xE1 && b <= 0xEC) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xEE && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t sanitize_utf8(std::string_view in, bool final, std::string& out) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(in[i]);
    const LeadInfo info = lead_info(b0);
    if (info.len == 1) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    if (info.len == 0) {
      out += kReplacementChar;
      ++i;
      continue;
    }
    // Count how many bytes after the lead continue the character correctly.
    size_t good = 1;
    while (good < info.len && i + good < n) {
      const auto b = static_cast<uint8_t>(in[i + good]);
      const bool ok = good == 1 ? (b >= info.lo && b <= info.hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++good;
    }
    if (good == info.len) {
      out.append(in.substr(i, good));
      i += good;
    } else if (i + good == n && !final) {
      break;  // a valid prefix cut by the end of the input: wait for more bytes
    } else {
      out += kReplacementChar;  // one U+FFFD for the maximal subpart
      i += good;
    }
  }
  return i;
}

bool is_valid_utf8(std::string_view s) {
  std::string scratch;
  scratch.reserve(s.size());
  return sanitize_utf8(s, true, scratch) == s.size() && scratch.size() == s.size() &&
         scratch == s;
}

}  // namespace pagoda::tokenizer_detail
