// common/utf8.h: decoding (Unicode Table 3-7, maximal-subpart U+FFFD), encoding,
// validation and the sanitizing scan, against known vectors and CPython's UTF-8 codec
// (bytes.decode("utf-8", "replace"), which substitutes maximal subparts too), plus
// exhaustive round trips over every code point.
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {
namespace {

using namespace std::literals;

const std::string R(kReplacementChar);

// ---- decode_utf8_char ---------------------------------------------------------

TEST(DecodeUtf8Char, DecodesEachLength) {
  struct Case {
    std::string_view s;
    char32_t cp;
    uint32_t len;
  };
  for (const Case& c : {Case{"A"sv, U'A', 1}, Case{"\0"sv, 0, 1}, Case{"\x7F"sv, 0x7F, 1},
                        Case{"\xC2\x80"sv, 0x80, 2}, Case{"\xC3\xA9"sv, 0xE9, 2}, Case{"\xDF\xBF"sv, 0x7FF, 2},
                        Case{"\xE0\xA0\x80"sv, 0x800, 3}, Case{"\xE2\x82\xAC"sv, 0x20AC, 3},
                        Case{"\xED\x9F\xBF"sv, 0xD7FF, 3}, Case{"\xEE\x80\x80"sv, 0xE000, 3},
                        Case{"\xEF\xBF\xBF"sv, 0xFFFF, 3}, Case{"\xF0\x90\x80\x80"sv, 0x10000, 4},
                        Case{"\xF0\x9F\x98\x80"sv, 0x1F600, 4}, Case{"\xF4\x8F\xBF\xBF"sv, 0x10FFFF, 4}}) {
    const Utf8Char d = decode_utf8_char(c.s, 0);
    EXPECT_TRUE(d.valid) << std::hex << static_cast<uint32_t>(c.cp);
    EXPECT_EQ(d.cp, c.cp);
    EXPECT_EQ(d.len, c.len);
    EXPECT_FALSE(d.truncated);
  }
}

// An ill-formed unit: U+FFFD, how many bytes the maximal subpart spans, and whether
// only the end of the input made it ill-formed.
void expect_ill_formed(std::string_view s, uint32_t len, bool truncated) {
  const Utf8Char d = decode_utf8_char(s, 0);
  EXPECT_FALSE(d.valid) << testing::PrintToString(std::string(s));
  EXPECT_EQ(d.cp, kReplacementCodePoint);
  EXPECT_EQ(d.len, len) << testing::PrintToString(std::string(s));
  EXPECT_EQ(d.truncated, truncated) << testing::PrintToString(std::string(s));
}

TEST(DecodeUtf8Char, OverlongsAreOneByteSubparts) {
  expect_ill_formed("\xC0\xAF"sv, 1, false);          // '/' in two bytes
  expect_ill_formed("\xC1\xBF"sv, 1, false);
  expect_ill_formed("\xE0\x80\xAF"sv, 1, false);      // '/' in three
  expect_ill_formed("\xE0\x9F\xBF"sv, 1, false);      // U+07FF in three
  expect_ill_formed("\xF0\x8F\xBF\xBF"sv, 1, false);  // U+FFFF in four
}

TEST(DecodeUtf8Char, SurrogatesAreRejected) {
  expect_ill_formed("\xED\xA0\x80"sv, 1, false);  // U+D800
  expect_ill_formed("\xED\xBF\xBF"sv, 1, false);  // U+DFFF
  EXPECT_EQ(decode_utf8("\xED\xA0\xBD\xED\xB8\x80"sv), std::u32string(6, kReplacementCodePoint));  // CESU-8
}

TEST(DecodeUtf8Char, CodePointsAboveTheLastAreRejected) {
  expect_ill_formed("\xF4\x90\x80\x80"sv, 1, false);  // U+110000
  expect_ill_formed("\xF5\x80\x80\x80"sv, 1, false);
  expect_ill_formed("\xF7\xBF\xBF\xBF"sv, 1, false);  // U+1FFFFF, the old 4-byte range
  expect_ill_formed("\xF8\x88\x80\x80\x80"sv, 1, false);  // old 5-byte form
  expect_ill_formed("\xFE"sv, 1, false);
  expect_ill_formed("\xFF"sv, 1, false);
}

TEST(DecodeUtf8Char, TruncatedSequencesAreOneSubpartMarkedTruncated) {
  expect_ill_formed("\xC3"sv, 1, true);
  expect_ill_formed("\xE2\x82"sv, 2, true);
  expect_ill_formed("\xF0\x9F\x98"sv, 3, true);
  expect_ill_formed("\xF4\x8F"sv, 2, true);
  // Cut by a byte that cannot continue it: not truncated, the subpart ends there.
  expect_ill_formed("\xE2\x82("sv, 2, false);
  expect_ill_formed("\xF0\x9F\x98Z"sv, 3, false);
  expect_ill_formed("\xC3("sv, 1, false);
  // A lead whose second byte is out of range is not a prefix of anything, at the end too.
  expect_ill_formed("\xE0\x80"sv, 1, false);
  expect_ill_formed("\xF4\x90"sv, 1, false);
}

TEST(DecodeUtf8Char, StrayContinuationBytesStandAlone) {
  expect_ill_formed("\x80"sv, 1, false);
  expect_ill_formed("\xBF\x80"sv, 1, false);
  EXPECT_EQ(decode_utf8("\xC3\xA9\xA9"sv), (std::u32string{0xE9, kReplacementCodePoint}));
}

TEST(DecodeUtf8Char, DecodesAtAnOffset) {
  const std::string_view s = "a\xE2\x82\xAC\xC3"sv;
  EXPECT_EQ(decode_utf8_char(s, 1).cp, 0x20ACu);
  EXPECT_EQ(decode_utf8_char(s, 1).len, 3u);
  EXPECT_TRUE(decode_utf8_char(s, 4).truncated);
}

// Independent of the decoder: the well-formed 1-3 byte sequences are exactly the
// encodings of the scalar values below U+10000 (the encoder is pinned by the vectors
// above). Every 1-, 2- and 3-byte string decodes as one valid unit iff it is one.
TEST(DecodeUtf8Char, ExhaustiveOverAllShortByteStrings) {
  // is_encoding[len][v]: the big-endian bytes of v, len long, encode one scalar value.
  std::vector<std::vector<bool>> is_encoding(4);
  for (int len = 1; len <= 3; ++len) is_encoding[len].assign(size_t{1} << (8 * len), false);
  for (char32_t cp = 0; cp < 0x10000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string e;
    append_utf8(e, cp);
    uint32_t v = 0;
    for (char c : e) v = (v << 8) | static_cast<uint8_t>(c);
    is_encoding[e.size()][v] = true;
  }
  std::string s;
  for (int len = 1; len <= 3; ++len) {
    const uint32_t n = 1u << (8 * len);
    for (uint32_t v = 0; v < n; ++v) {
      s.clear();
      for (int k = len - 1; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
      const Utf8Char d = decode_utf8_char(s, 0);
      const bool one_char = d.valid && d.len == s.size();
      ASSERT_EQ(one_char, is_encoding[len][v]) << testing::PrintToString(s);
      ASSERT_GE(d.len, 1u);
      ASSERT_LE(d.len, s.size());
      if (one_char) {
        std::string back;
        append_utf8(back, d.cp);
        ASSERT_EQ(back, s);
      }
    }
  }
}

// ---- encoding ---------------------------------------------------------------------

TEST(AppendUtf8, EncodesBoundaries) {
  auto enc = [](char32_t cp) {
    std::string s;
    append_utf8(s, cp);
    return s;
  };
  EXPECT_EQ(enc(0), "\0"s);
  EXPECT_EQ(enc(0x7F), "\x7F");
  EXPECT_EQ(enc(0x80), "\xC2\x80");
  EXPECT_EQ(enc(0x7FF), "\xDF\xBF");
  EXPECT_EQ(enc(0x800), "\xE0\xA0\x80");
  EXPECT_EQ(enc(0xFFFF), "\xEF\xBF\xBF");
  EXPECT_EQ(enc(0x10000), "\xF0\x90\x80\x80");
  EXPECT_EQ(enc(0x10FFFF), "\xF4\x8F\xBF\xBF");
}

TEST(AppendUtf8, NeverWritesIllFormedUtf8) {
  for (char32_t cp : {char32_t{0xD800}, char32_t{0xDBFF}, char32_t{0xDC00}, char32_t{0xDFFF}, char32_t{0x110000},
                      char32_t{0x7FFFFFFF}, char32_t{0xFFFFFFFF}}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_EQ(s, R) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(EncodeUtf8, RoundTripsEveryScalarValue) {
  std::u32string all;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp)
    if (cp < 0xD800 || cp > 0xDFFF) all.push_back(cp);
  const std::string text = encode_utf8(all);
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(decode_utf8(text), all);
  EXPECT_EQ(sanitize_utf8(text), text);
}

// ---- validation and sanitizing ------------------------------------------------------

TEST(IsValidUtf8, AcceptsWellFormedAndRejectsEachKindOfIllFormed) {
  for (std::string_view s : {""sv, "plain ascii"sv, "caf\xC3\xA9"sv, "\xF4\x8F\xBF\xBF"sv,
                             "\xED\x9F\xBF\xEE\x80\x80"sv, "a\0b"sv})
    EXPECT_TRUE(is_valid_utf8(s)) << testing::PrintToString(std::string(s));
  for (std::string_view s : {"\xC0\xAF"sv, "\xE0\x9F\xBF"sv, "\xF0\x8F\xBF\xBF"sv, "\xED\xA0\x80"sv,
                             "\xF4\x90\x80\x80"sv, "\xFF"sv, "\xC3"sv, "ab\xF0\x9F"sv, "\x80"sv,
                             "\xC3\xA9\xA9"sv, "\xE2\x28\xA1"sv})
    EXPECT_FALSE(is_valid_utf8(s)) << testing::PrintToString(std::string(s));
}

TEST(SanitizeUtf8, ReplacesEachMaximalSubpartWithOneReplacementChar) {
  EXPECT_EQ(sanitize_utf8(""), "");
  EXPECT_EQ(sanitize_utf8("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), R);              // truncated: one U+FFFD
  EXPECT_EQ(sanitize_utf8("a\xF0\x9F\x98"), "a" + R);
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), R + R);           // overlong lead is not a prefix
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), R + R + R);   // surrogate: ED then two strays
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(sanitize_utf8("\xE2\x82("), R + "(");
  EXPECT_EQ(sanitize_utf8("\x80\x80"), R + R);
}

TEST(SanitizeUtf8, NotFinalKeepsAValidPrefixForLater) {
  std::string out;
  EXPECT_EQ(sanitize_utf8("ab\xE2\x82"sv, /*final=*/false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  // Not a prefix of anything: replaced at once.
  EXPECT_EQ(sanitize_utf8("ab\xE0\x80"sv, /*final=*/false, out), 4u);
  EXPECT_EQ(out, "ab" + R + R);
  out.clear();
  EXPECT_EQ(sanitize_utf8("ab\xE2\x82"sv, /*final=*/true, out), 4u);
  EXPECT_EQ(out, "ab" + R);
}

// CPython 3 (bytes.decode("utf-8", "replace").encode()), generated with a fixed seed
// from lead bytes of every class, stray continuations, and whole / cut characters.
TEST(SanitizeUtf8, MatchesCPythonsReplaceDecoder) {
  const std::pair<std::string_view, std::string_view> cases[] = {
    {"\xF8"sv, "\xEF\xBF\xBD"sv},
    {"\xA0\xED\xC0\xDF\x80\xEE\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xDF\x80\xEE\x80\x80"sv},
    {"\xF1\x8F\xED\x9F\xBF"sv, "\xEF\xBF\xBD\xED\x9F\xBF"sv},
    {"\xEE\x80"sv, "\xEF\xBF\xBD"sv},
    {"\xDF\xE1"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xE2\x82\xAC\xC2\xE2\x82\xAC\xF3\xEF\xBF\xBD"sv, "\xE2\x82\xAC\xEF\xBF\xBD\xE2\x82\xAC\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xED\xE2\x82\xAC\xED\x80"sv, "\xEF\xBF\xBD\xE2\x82\xAC\xEF\xBF\xBD"sv},
    {"\x7F\xF3\xDF\xBF\xE0\xFF\xEF\xBF\xBD"sv, "\x7F\xEF\xBF\xBD\xDF\xBF\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEC\xF0\x9F\x98\x80\xEF\xBF\xBD\xE0"sv, "\xEF\xBF\xBD\xF0\x9F\x98\x80\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEE\x80\x80"sv, "\xEE\x80\x80"sv},
    {"\xED\xEF\xBF\xBD\xE2\x82"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEF"sv, "\xEF\xBF\xBD"sv},
    {"\xEE\x80\x80\xF0\x9F\x98\x80\xED\x9F\xBF\xF4\x8F\xBF\xEE\x80\x80"sv, "\xEE\x80\x80\xF0\x9F\x98\x80\xED\x9F\xBF\xEF\xBF\xBD\xEE\x80\x80"sv},
    {"\xF8\xF4\x8F\xBF\xBF\xDF\xF8\xEC\xF0"sv, "\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xDF\xBF"sv, "\xDF\xBF"sv},
    {"\xE2\x8F\xEF\xBF\xBD"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\x41\xBF\xEE\x8F\x7F"sv, "\x41\xEF\xBF\xBD\xEF\xBF\xBD\x7F"sv},
    {"\x90\xF4\x8F\xBF\xBF"sv, "\xEF\xBF\xBD\xF4\x8F\xBF\xBF"sv},
    {"\xF0\xEE\xEF\xBF\xC1\xC2"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xF1"sv, "\xEF\xBF\xBD"sv},
    {"\x80\x7F\x80\xFF\x90\xED\x9F"sv, "\xEF\xBF\xBD\x7F\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEF\xBF\xBD\xF4\xC0\xED\x9F\xBF\xED"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xED\x9F\xBF\xEF\xBF\xBD"sv},
    {"\xFE"sv, "\xEF\xBF\xBD"sv},
    {"\x00\x80"sv, "\x00\xEF\xBF\xBD"sv},
    {"\xE1"sv, "\xEF\xBF\xBD"sv},
    {"\xEE\xED\x9F\xBF\xFF"sv, "\xEF\xBF\xBD\xED\x9F\xBF\xEF\xBF\xBD"sv},
    {"\xE2\x82\xAC\xDF\xBF\xF3\xE0"sv, "\xE2\x82\xAC\xDF\xBF\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xDF\xEC"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xED\xF8"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\x9F\xE2"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEE\xF4\x8F\xBF\xBF\xF1\xDF\xBF"sv, "\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xEF\xBF\xBD\xDF\xBF"sv},
    {"\xE2\x82\xAC\xEE\x80\x80\xE2\x82\xAC\xF8\xC1\xFF"sv, "\xE2\x82\xAC\xEE\x80\x80\xE2\x82\xAC\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xEF\xBF\xC0\x8F"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xF3"sv, "\xEF\xBF\xBD"sv},
    {"\xF1\xF0\xE2\x82\xAC"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xE2\x82\xAC"sv},
    {"\xED\x9F\xBF\xFF\xC2\xF4\x8F\xBF\xBF\xC2"sv, "\xED\x9F\xBF\xEF\xBF\xBD\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xEF\xBF\xBD"sv},
    {"\xE0\xC3\xA9\x90"sv, "\xEF\xBF\xBD\xC3\xA9\xEF\xBF\xBD"sv},
    {"\xF4\x8F\xC0\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv},
    {"\xE1\xF0\x7F\xEE"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\x7F\xEF\xBF\xBD"sv},
    {"\xF4\x8F\xBF\xBF\xEF"sv, "\xF4\x8F\xBF\xBF\xEF\xBF\xBD"sv},
    {"\xE2\x82\xAC\x80\xE2\x82\xAC\xA0"sv, "\xE2\x82\xAC\xEF\xBF\xBD\xE2\x82\xAC\xEF\xBF\xBD"sv},
    {"\xEF\xBF\xBD"sv, "\xEF\xBF\xBD"sv},
    {"\xEE\x80\x80\xED\x9F\xF8\xEE\x80\xC3\xA9"sv, "\xEE\x80\x80\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xC3\xA9"sv},
    {"\xE2\x82\xAC\x90"sv, "\xE2\x82\xAC\xEF\xBF\xBD"sv},
    {"\x90\x7F\xC1"sv, "\xEF\xBF\xBD\x7F\xEF\xBF\xBD"sv},
    {"\xEE\xF4\xE0\xDF\xBF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xDF\xBF"sv},
    {"\x9F\xE2\x82\xAC"sv, "\xEF\xBF\xBD\xE2\x82\xAC"sv},
    {"\xF0\x9F\x98\xF4\x8F\xBF\xED\x9F\xBF\xF0\x9F\x98\x00\xFF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xED\x9F\xBF\xEF\xBF\xBD\x00\xEF\xBF\xBD"sv},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(sanitize_utf8(in), want) << testing::PrintToString(std::string(in));
    EXPECT_EQ(encode_utf8(decode_utf8(in)), want) << testing::PrintToString(std::string(in));
    EXPECT_EQ(is_valid_utf8(in), in == want) << testing::PrintToString(std::string(in));
  }
}

}  // namespace
}  // namespace pagoda
