// The text stages under the tokenizer: HF split behaviours (pinned on the
// example from the HF `tokenizers` docs), Metaspace and ByteLevel
// pre-tokenizers, the GPT-2 byte alphabet, Unicode classes in the regexes,
// and the UTF-8 sanitizer behind StreamDecoder.
#include <gtest/gtest.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

namespace pagoda::tokenizer_detail {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view text, SplitBehavior behavior, bool invert = false) {
  Regex dash("-");
  Pieces out;
  split_piece(text, dash.find_all(text), behavior, invert, out);
  return out;
}

TEST(SplitPiece, FoldsDelimitersLikeHfTokenizers) {
  const std::string_view s = "the-final--countdown";
  EXPECT_EQ(split(s, SplitBehavior::removed), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split(s, SplitBehavior::isolated), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(s, SplitBehavior::merged_with_previous), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(s, SplitBehavior::merged_with_next), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(s, SplitBehavior::contiguous), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(SplitPiece, DelimitersAtTheEdgesStandAlone) {
  EXPECT_EQ(split("-a-", SplitBehavior::merged_with_previous), (Pieces{"-", "a-"}));
  EXPECT_EQ(split("-a-", SplitBehavior::merged_with_next), (Pieces{"-a", "-"}));
  EXPECT_EQ(split("---", SplitBehavior::contiguous), (Pieces{"---"}));
  EXPECT_EQ(split("", SplitBehavior::isolated), Pieces{});
}

TEST(SplitPiece, InvertKeepsTheMatchesAsPieces) {
  EXPECT_EQ(split("a-b--c", SplitBehavior::removed, /*invert=*/true), (Pieces{"-", "-", "-"}));
}

TEST(Regex, UsesUnicodeClasses) {
  Regex letters(R"(\p{L}+)");
  const std::string s = "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 42";  // café 日本 42
  const auto m = letters.find_all(s);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(s.substr(m[0].first, m[0].second - m[0].first), "caf\xC3\xA9");
  EXPECT_EQ(s.substr(m[1].first, m[1].second - m[1].first), "\xE6\x97\xA5\xE6\x9C\xAC");
}

TEST(Regex, InvalidUtf8NeverMatchesAndNeverFails) {
  Regex any(R"(.+)");
  const std::string s = "ab\xFF" "cd";
  const auto m = any.find_all(s);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{0, 2}));
  EXPECT_EQ(m[1], (std::pair<size_t, size_t>{3, 5}));
}

TEST(Regex, EscapeMatchesTheLiteral) {
  Regex r(Regex::escape("a.b*(c)"));
  EXPECT_EQ(r.find_all("xa.b*(c)y").size(), 1u);
  EXPECT_TRUE(r.find_all("aXbbc").empty());
}

TEST(PreTokenize, MetaspaceReplacesSpacesAndSplitsBeforeThem) {
  PreTokenizerStep meta;
  meta.kind = PreTokenizerStep::Kind::metaspace;
  EXPECT_EQ(pre_tokenize({meta}, "Hey friend!", true),
            (Pieces{"\xE2\x96\x81Hey", "\xE2\x96\x81" "friend!"}));
  meta.prepend_scheme = PrependScheme::first;
  EXPECT_EQ(pre_tokenize({meta}, "Hey", false), (Pieces{"Hey"}));
  EXPECT_EQ(pre_tokenize({meta}, "Hey", true), (Pieces{"\xE2\x96\x81Hey"}));
}

TEST(PreTokenize, ByteLevelSplitsWithTheGpt2RegexAndMapsBytes) {
  PreTokenizerStep bl;
  bl.kind = PreTokenizerStep::Kind::byte_level;
  bl.regex = std::make_shared<Regex>(kGpt2Regex);
  EXPECT_EQ(pre_tokenize({bl}, "Hello world's\n", true),
            (Pieces{"Hello", "\xC4\xA0world", "'s", "\xC4\x8A"}));  // Ġworld, Ċ
  bl.add_prefix_space = true;
  EXPECT_EQ(pre_tokenize({bl}, "Hi", true), (Pieces{"\xC4\xA0Hi"}));
}

TEST(ByteLevel, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = byte_level_encode(all);
  EXPECT_TRUE(is_valid_utf8(mapped));
  EXPECT_EQ(byte_level_decode(mapped), all);
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("A"), "A");
}

// What is not a character of the alphabet is copied as it is: characters outside it,
// and ill-formed UTF-8 (the overlong "C1 A1" spells 'a' in two bytes, but is not 'a').
TEST(ByteLevel, DecodeCopiesWhatIsNotInTheAlphabet) {
  EXPECT_EQ(byte_level_decode("\xC4\xA0" "a\xE2\x82\xAC"), " a\xE2\x82\xAC");  // Ġa€
  EXPECT_EQ(byte_level_decode("\xC1\xA1"), "\xC1\xA1");
  EXPECT_EQ(byte_level_decode("x\xC4"), "x\xC4");                // Ġ cut short
  EXPECT_EQ(byte_level_decode("\xED\xA0\x80"), "\xED\xA0\x80");  // a surrogate
}

TEST(Normalize, PrependSkipsEmptyRunsAndReplaceIsLiteral) {
  const std::vector<NormalizerStep> steps = {
      {NormalizerStep::Kind::replace, " ", nullptr, "\xE2\x96\x81"},
      {NormalizerStep::Kind::prepend, "", nullptr, "\xE2\x96\x81"},
  };
  EXPECT_EQ(normalize(steps, "a b"), "\xE2\x96\x81" "a\xE2\x96\x81" "b");
  EXPECT_EQ(normalize(steps, ""), "");
}

// ---- UTF-8 sanitizer ----------------------------------------------------------

std::string sanitize(std::string_view in, bool final, size_t* consumed = nullptr) {
  std::string out;
  const size_t n = sanitize_utf8(in, final, out);
  if (consumed != nullptr) *consumed = n;
  return out;
}

TEST(Utf8, KeepsATruncatedCharacterForLaterUnlessFinal) {
  size_t consumed = 0;
  EXPECT_EQ(sanitize("ab\xF0\x9F\xA6", false, &consumed), "ab");
  EXPECT_EQ(consumed, 2u);
  EXPECT_EQ(sanitize("ab\xF0\x9F\xA6", true, &consumed), "ab\xEF\xBF\xBD");
  EXPECT_EQ(consumed, 5u);
}

TEST(Utf8, ReplacesEachMaximalIllFormedSubpart) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(sanitize("\x80", false), fffd);                // stray continuation
  EXPECT_EQ(sanitize("\xC0\xAF", false), fffd + fffd);     // C0 never starts a character
  EXPECT_EQ(sanitize("\xED\xA0\x80", false), fffd + fffd + fffd);  // surrogate: ED then 2 strays
  EXPECT_EQ(sanitize("\xF0\x9F" "A", false), fffd + "A");  // cut short by ASCII
  EXPECT_EQ(sanitize("\xF4\x90\x80\x80", false), fffd + fffd + fffd + fffd);  // > U+10FFFF
}

TEST(Utf8, PassesValidTextThrough) {
  const std::string s = "a\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA6\x99";
  EXPECT_EQ(sanitize(s, false), s);
  EXPECT_TRUE(is_valid_utf8(s));
  EXPECT_FALSE(is_valid_utf8("\xC3"));
}

TEST(Utf8, AppendEncodesEveryLength) {
  std::string s;
  append_utf8(s, 0x41);
  append_utf8(s, 0xE9);
  append_utf8(s, 0x65E5);
  append_utf8(s, 0x1F999);
  EXPECT_EQ(s, "A\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA6\x99");
}

}  // namespace
}  // namespace pagoda::tokenizer_detail
