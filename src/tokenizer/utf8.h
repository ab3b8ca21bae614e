// UTF-8 helpers for the tokenizer: character lengths, code point encoding and
// the sanitizing scan behind StreamDecoder. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::tokenizer_detail {

// Length of the character at s[i]: the length its lead byte announces when
// that many bytes follow and all are continuation bytes (10xxxxxx), else 1.
// On valid UTF-8 this is the usual character split (what llama.cpp and HF
// use). On invalid input a stray lead byte stands alone instead of swallowing
// the next character (llama.cpp would glue "\xC3" to the '▁' after it, so the
// space came back as "▁" from decode). Requires: i < s.size().
inline size_t utf8_char_len(std::string_view s, size_t i) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const size_t len = kLen[static_cast<uint8_t>(s[i]) >> 4];
  if (len == 1 || i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

// Appends the UTF-8 encoding of code point cp (cp <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Copies the well-formed characters of `in` to `out`, writing U+FFFD for each
// maximal ill-formed subpart (Unicode ch. 3, "U+FFFD substitution of maximal
// subparts"). When !final, a trailing prefix that could still become a valid
// character is not consumed. Returns the number of bytes of `in` consumed.
size_t sanitize_utf8(std::string_view in, bool final, std::string& out);

bool is_valid_utf8(std::string_view s);

}  // namespace pagoda::tokenizer_detail
