// The bounded JSON parse (common/json_parse.h): the depth scan equals the depth of the
// parsed value (an independent recursive walk over nlohmann's DOM) on random documents
// whose strings hold brackets, quotes and backslashes; the limit is exact (64 levels
// parse, 65 do not); invalid text, numbers past double's range and deep invalid text
// are discarded, never thrown; and the parse is linear: 8 MiB of `{}` in an ignored
// field, which the old callback parser took ~24 minutes over, parses in well under a second.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "common/json_parse.h"
#include "sanitizer_sampling.h"

namespace pagoda {
namespace {

// Depth of a parsed value, by recursion over the DOM (the reference).
int dom_depth(const nlohmann::json& j) {
  if (!j.is_structured()) return 0;
  int inner = 0;
  for (const auto& v : j) inner = std::max(inner, dom_depth(v));
  return inner + 1;
}

// A random document of at most `max_depth` levels whose strings hold the characters that
// could fool a bracket counter.
nlohmann::json random_value(std::mt19937& rng, int depth_left) {
  static const std::string kTricky[] = {"[", "]", "{", "}", "\"", "\\", "\\\"", "\\\\", "[[{\"", "a\\\\\"]"};
  const int kind = depth_left > 0 ? static_cast<int>(rng() % 5) : static_cast<int>(rng() % 3);
  switch (kind) {
    case 0: return kTricky[rng() % 10] + kTricky[rng() % 10];
    case 1: return static_cast<int>(rng() % 1000);
    case 2: return nullptr;
    case 3: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) a.push_back(random_value(rng, depth_left - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
        o[kTricky[rng() % 10] + std::to_string(i)] = random_value(rng, depth_left - 1);
      return o;
    }
  }
}

TEST(JsonParse, DepthScanEqualsTheParsedValuesDepth) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; ++i) {
    const nlohmann::json v = random_value(rng, 1 + static_cast<int>(rng() % 12));
    const std::string text = v.dump(static_cast<int>(rng() % 2) - 1);  // compact or indented
    const int depth = dom_depth(v);
    ASSERT_TRUE(json_depth_within(text, depth)) << text;
    if (depth > 0) ASSERT_FALSE(json_depth_within(text, depth - 1)) << text;
    ASSERT_EQ(parse_json_or_discarded(text, depth), v) << text;
  }
}

TEST(JsonParse, TheLimitIsExact) {
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_FALSE(parse_json_or_discarded(nested(kMaxJsonDepth)).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded(nested(kMaxJsonDepth + 1)).is_discarded());
  EXPECT_FALSE(parse_ordered_json_or_discarded("{\"a\":" + nested(kMaxJsonDepth - 1) + "}").is_discarded());
  EXPECT_TRUE(parse_ordered_json_or_discarded("{\"a\":" + nested(kMaxJsonDepth) + "}").is_discarded());
  // Brackets inside strings are text, however many.
  EXPECT_FALSE(parse_json_or_discarded("[\"" + std::string(10000, '[') + "\"]", 1).is_discarded());
  EXPECT_FALSE(parse_json_or_discarded(R"(["\\", ["x"]])", 2).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded(R"(["\\", [["x"]]])", 2).is_discarded());
  EXPECT_FALSE(parse_json_or_discarded(R"(["\"[[[", 1])", 1).is_discarded());
}

TEST(JsonParse, BadTextIsDiscardedNeverThrown) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"unterminated", "1e999", "[1e999]", "nul", "{\"a\":[}",
                          "\"\\", "[\"\\\"]"}) {
    EXPECT_TRUE(parse_json_or_discarded(bad).is_discarded()) << bad;
    EXPECT_TRUE(parse_ordered_json_or_discarded(bad).is_discarded()) << bad;
  }
  // 8 MiB of '[': refused by the scan before the parser builds anything.
  EXPECT_TRUE(parse_json_or_discarded(std::string(8 << 20, '[')).is_discarded());
}

TEST(JsonParse, EightMebibytesOfEmptyObjectsParseInLinearTime) {
  std::string body = R"({"model":"m","prompt":"hi","ignored":[)";
  while (body.size() < (8u << 20) - 16) body += "{},";
  body += "{}]}";
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::ordered_json j = parse_ordered_json_or_discarded(body);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["ignored"].size(), (body.size() - 40) / 3 + 1);
  // Measured ~0.2 s on one Xeon core (3.2 s once with the whole suite running beside it);
  // the quadratic parse took ~24 min. The bound only has to tell those apart, on a loaded
  // 2-core CI machine and in the sanitizer builds.
  EXPECT_LT(seconds, 30.0 * (test::kUnderSanitizer ? 5 : 1)) << seconds << " s";
}

}  // namespace
}  // namespace pagoda
