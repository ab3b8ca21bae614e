// The tokenizer's character split. Decoding, encoding, validation and the sanitizing
// scan behind StreamDecoder are common/utf8.h's (one implementation for the whole
// program); they are brought into tokenizer_detail here for the tokenizer's files.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/utf8.h"

namespace pagoda::tokenizer_detail {

using pagoda::append_utf8;
using pagoda::is_valid_utf8;
using pagoda::kReplacementChar;
using pagoda::sanitize_utf8;

// Length of the character at s[i]: the length its lead byte announces when
// that many bytes follow and all are continuation bytes (10xxxxxx), else 1.
// On valid UTF-8 this is the usual character split (what llama.cpp and HF
// use). On invalid input a stray lead byte stands alone instead of swallowing
// the next character (llama.cpp would glue "\xC3" to the '▁' after it, so the
// space came back as "▁" from decode). Not decode_utf8_char's maximal subparts:
// this split decides which byte runs the vocabulary is searched for, and an
// overlong the lead announces (C1 A1) stays one unit here as it does in
// llama.cpp, so byte-fallback tokenization matches it on any input. Requires:
// i < s.size().
inline size_t utf8_char_len(std::string_view s, size_t i) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const size_t len = kLen[static_cast<uint8_t>(s[i]) >> 4];
  if (len == 1 || i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

}  // namespace pagoda::tokenizer_detail
