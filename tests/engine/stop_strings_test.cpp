#include "engine/stop_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace pagoda {
namespace {

// Everything the matcher would stream for `pieces`, plus the flush at the end
// when no stop matched; checks the invariants after every call.
struct Streamed {
  std::string text;
  bool stopped = false;
  std::string matched;
};

Streamed stream(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopStringMatcher m(std::move(stops));
  Streamed out;
  for (const auto& piece : pieces) {
    auto r = m.push(piece);
    m.check_invariants();
    out.text += r.emit;
    if (r.stopped) {
      out.stopped = true;
      out.matched = r.matched;
      break;
    }
  }
  if (!out.stopped) out.text += m.flush();
  m.check_invariants();
  return out;
}

TEST(StopStrings, StopSplitAcrossPushesEmitsTextBeforeIt) {
  StopStringMatcher m({"o w"});
  auto r1 = m.push("Hel");
  EXPECT_EQ(r1.emit, "Hel");
  EXPECT_FALSE(r1.stopped);
  auto r2 = m.push("lo wor");
  EXPECT_EQ(r2.emit, "l");
  EXPECT_TRUE(r2.stopped);
  EXPECT_EQ(r2.matched, "o w");
  const auto s = stream({"o w"}, {"Hel", "lo wor", "ld"});
  EXPECT_EQ(s.text, "Hell");
  EXPECT_TRUE(s.stopped);
}

TEST(StopStrings, StopCompletingOneByteAtATime) {
  const auto s = stream({"</s>"}, {"ok", "<", "/", "s", ">", "more"});
  EXPECT_EQ(s.text, "ok");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.matched, "</s>");
}

TEST(StopStrings, FalseStartIsReleased) {
  StopStringMatcher m({"abd"});
  auto r1 = m.push("ab");
  EXPECT_EQ(r1.emit, "");
  EXPECT_EQ(m.held_bytes(), 2u);
  auto r2 = m.push("c");
  EXPECT_EQ(r2.emit, "abc");
  EXPECT_FALSE(r2.stopped);
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopStrings, HoldsBackOnlyThePossibleStopPrefix) {
  StopStringMatcher m({"world"});
  auto r = m.push("Hello w");
  EXPECT_EQ(r.emit, "Hello ");
  EXPECT_EQ(m.held_bytes(), 1u);
  // A false start inside the held tail that leaves a shorter possible start.
  StopStringMatcher n({"aab"});
  EXPECT_EQ(n.push("aa").emit, "");
  EXPECT_EQ(n.push("a").emit, "a");  // "aaa": only the last "aa" can still become "aab"
  EXPECT_EQ(n.held_bytes(), 2u);
  auto r2 = n.push("b");
  EXPECT_TRUE(r2.stopped);
  EXPECT_EQ(r2.emit, "");  // the first "a" went out with the previous push
}

TEST(StopStrings, EarliestStopWins) {
  const auto s = stream({"world", "lo"}, {"hello world"});
  EXPECT_EQ(s.text, "hel");
  EXPECT_EQ(s.matched, "lo");
  const auto t = stream({"lo", "world"}, {"say: world, hello"});
  EXPECT_EQ(t.text, "say: ");
  EXPECT_EQ(t.matched, "world");
}

TEST(StopStrings, OverlappingStopsResolveByEarliestEnd) {
  // "bc" is complete at byte 3, before "abcd" is at byte 4.
  const auto whole = stream({"abcd", "bc"}, {"abcd"});
  EXPECT_EQ(whole.text, "a");
  EXPECT_EQ(whole.matched, "bc");
  const auto split = stream({"abcd", "bc"}, {"abc", "d"});
  EXPECT_EQ(split.text, "a");
  // Same end: the longer one (earlier start) wins.
  const auto same_end = stream({"c", "abc"}, {"xabc"});
  EXPECT_EQ(same_end.text, "x");
  EXPECT_EQ(same_end.matched, "abc");
}

TEST(StopStrings, StopAtVeryStart) {
  StopStringMatcher m({"###"});
  auto r = m.push("### rest");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(r.matched, "###");
}

TEST(StopStrings, FlushReturnsHeldText) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.push("end ST").emit, "end ");
  EXPECT_EQ(m.flush(), "ST");
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, NothingMoreAfterStopping) {
  StopStringMatcher m({"x"});
  EXPECT_TRUE(m.push("axb").stopped);
  auto r = m.push("more x");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(r.matched, "x");
  EXPECT_EQ(m.flush(), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStrings, EmptyStopsAreIgnored) {
  StopStringMatcher m({"", "z", ""});
  EXPECT_EQ(m.stops(), std::vector<std::string>{"z"});
  auto r = m.push("abc");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "abc");
}

TEST(StopStrings, NoStopsPassTextThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.push("anything at all").emit, "anything at all");
  EXPECT_EQ(m.push("").emit, "");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopStrings, MultiByteStopSplitInsideACharacter) {
  // "世界" is E4 B8 96 E7 95 8C; the pushes cut it inside both characters.
  const std::string text = "你好世界!";
  const auto s = stream({"世界"}, {text.substr(0, 7), text.substr(7, 3), text.substr(10)});
  EXPECT_EQ(s.text, "你好");
  EXPECT_TRUE(s.stopped);
}

TEST(StopStrings, HoldsIncompleteUtf8TailUntilItCompletes) {
  StopStringMatcher m({"zzz"});
  const std::string e_acute = "\xC3\xA9";  // é
  auto r1 = m.push("caf" + e_acute.substr(0, 1));
  EXPECT_EQ(r1.emit, "caf");
  EXPECT_EQ(m.held_bytes(), 1u);
  auto r2 = m.push(e_acute.substr(1));
  EXPECT_EQ(r2.emit, e_acute);
  // A 4-byte emoji fed one byte at a time comes out whole.
  const std::string emoji = "\xF0\x9F\x98\x80";
  std::string out;
  for (char c : emoji) {
    out += '|';
    out += m.push(std::string(1, c)).emit;
  }
  EXPECT_EQ(out, std::string("||||").append(emoji));
}

TEST(StopStrings, InvalidUtf8BytesPassThrough) {
  StopStringMatcher m({"zzz"});
  EXPECT_EQ(m.push("a\xFF").emit, "a\xFF");
  EXPECT_EQ(m.push("\x80\x80").emit, "\x80\x80");
}

TEST(StopStrings, ResultDoesNotDependOnHowTextIsCut) {
  // Any cut into pushes streams the same text and stop as feeding one byte at a
  // time; small alphabet so stops and partial stops occur often.
  std::mt19937 rng(3);
  const std::vector<std::vector<std::string>> stop_sets = {
      {"ab"}, {"aba", "b"}, {"abcd", "bc"}, {"aab", "abb", "c"}, {"ccc"}, {"ba", "aab", "cab"}};
  for (int trial = 0; trial < 2000; ++trial) {
    const auto& stops = stop_sets[trial % stop_sets.size()];
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < len; ++i) text += static_cast<char>('a' + rng() % 3);
    std::vector<std::string> bytes, pieces;
    for (char c : text) bytes.emplace_back(1, c);
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 5;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    const auto want = stream(stops, bytes);
    const auto got = stream(stops, pieces);
    ASSERT_EQ(got.text, want.text) << "text '" << text << "' trial " << trial;
    ASSERT_EQ(got.stopped, want.stopped) << "text '" << text << "'";
    ASSERT_EQ(got.matched, want.matched) << "text '" << text << "'";
    // Against a direct search: the stop that ends first.
    size_t best_end = std::string::npos, best_start = 0;
    for (const auto& s : stops) {
      const size_t pos = text.find(s);
      if (pos == std::string::npos) continue;
      if (pos + s.size() < best_end || (pos + s.size() == best_end && pos < best_start)) {
        best_end = pos + s.size();
        best_start = pos;
      }
    }
    const std::string expect = best_end == std::string::npos ? text : text.substr(0, best_start);
    ASSERT_EQ(got.text, expect) << "text '" << text << "'";
  }
}

}  // namespace
}  // namespace pagoda
