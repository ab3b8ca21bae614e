#include "common/utf8.h"

namespace pagoda {

namespace {

// For a lead byte: the sequence length and the allowed range of the second byte,
// which is what excludes overlongs (E0 80..9F, F0 80..8F), surrogates (ED A0..BF)
// and code points above U+10FFFF (F4 90..BF), per Unicode Table 3-7. Length 0 marks
// a byte that never starts a character (80..C1, F5..FF).
struct LeadInfo {
  uint32_t len;
  uint8_t lo, hi;
};

constexpr LeadInfo lead_info(uint8_t b) {
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

Utf8Char decode_utf8_char(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const LeadInfo info = lead_info(b0);
  if (info.len == 1) return {b0, 1, true, false};
  if (info.len == 0) return {kReplacementCodePoint, 1, false, false};
  // The payload bits of the lead: 5 for a 2-byte form, 4 for 3, 3 for 4.
  char32_t cp = b0 & (0x7Fu >> info.len);
  uint32_t good = 1;
  while (good < info.len && i + good < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + good]);
    const bool ok = good == 1 ? (b >= info.lo && b <= info.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    cp = (cp << 6) | (b & 0x3Fu);
    ++good;
  }
  if (good == info.len) return {cp, good, true, false};
  // A maximal subpart: the lead and the continuation bytes that were still allowed.
  return {kReplacementCodePoint, good, false, /*truncated=*/i + good == s.size()};
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8_char(s, i);
    out.push_back(c.cp);
    i += c.len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementCodePoint;
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

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
}

size_t sanitize_utf8(std::string_view in, bool final, std::string& out) {
  size_t i = 0;
  while (i < in.size()) {
    // ASCII runs are most text: copy them without decoding.
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      out.push_back(in[i++]);
      continue;
    }
    const Utf8Char c = decode_utf8_char(in, i);
    if (c.valid) {
      out.append(in.substr(i, c.len));
    } else if (c.truncated && !final) {
      break;  // a valid prefix cut by the end of the input: wait for more bytes
    } else {
      out += kReplacementChar;  // one U+FFFD for the maximal subpart
    }
    i += c.len;
  }
  return i;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  sanitize_utf8(s, /*final=*/true, out);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Char c = decode_utf8_char(s, i);
    if (!c.valid) return false;
    i += c.len;
  }
  return true;
}

}  // namespace pagoda
