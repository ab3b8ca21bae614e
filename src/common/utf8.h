// UTF-8 decoding, encoding, validation and sanitizing: the one implementation the
// tokenizer, the server and the template engine share. Pure functions; thread-safe.
//
// Contract:
// - Well-formed means Unicode's Table 3-7: no overlong forms, no surrogates
//   (U+D800..U+DFFF), nothing above U+10FFFF, no stray continuation bytes, no
//   sequence cut short.
// - Ill-formed input is never an error: each maximal ill-formed subpart (Unicode
//   ch. 3, "U+FFFD substitution of maximal subparts", the policy of the WHATWG
//   decoder and of Python's errors="replace") counts as one unit and decodes to
//   U+FFFD. E.g. "\xE2\x82(" is U+FFFD then '('; "\xED\xA0\x80" (a surrogate) is three
//   U+FFFD, since ED's second byte must be 80..9F.
// - Encoding never writes ill-formed UTF-8: a surrogate or a value above U+10FFFF is
//   encoded as U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

inline constexpr char32_t kReplacementCodePoint = 0xFFFD;
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// One decoded unit of a UTF-8 string.
struct Utf8Char {
  char32_t cp = 0;         // the code point; U+FFFD when !valid
  uint32_t len = 1;        // bytes consumed: the character, or the maximal ill-formed subpart (>= 1)
  bool valid = false;
  // Ill-formed only because the input ended: the bytes are a proper prefix of a
  // well-formed character (a streaming decoder waits for more).
  bool truncated = false;
};

// Decodes the unit that starts at s[i]. Requires i < s.size().
Utf8Char decode_utf8_char(std::string_view s, size_t i);

// Every unit of s, ill-formed subparts as U+FFFD.
std::u32string decode_utf8(std::string_view s);

// Appends the UTF-8 encoding of cp (U+FFFD for a surrogate or cp > U+10FFFF).
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view s);

// Copies the well-formed characters of `in` to `out`, writing U+FFFD for each
// maximal ill-formed subpart. When !final, a trailing prefix that could still become
// a well-formed character is not consumed. Returns the number of bytes consumed
// (in.size() when final).
size_t sanitize_utf8(std::string_view in, bool final, std::string& out);
// `s` with each ill-formed subpart replaced by U+FFFD; well-formed input comes back
// unchanged.
std::string sanitize_utf8(std::string_view s);

bool is_valid_utf8(std::string_view s);

}  // namespace pagoda
