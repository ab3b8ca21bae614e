// The prompt-cache flag parsers: accepted spellings and one-line errors naming the flag.
#include <gtest/gtest.h>

#include "cache/prefix_cache_config.h"
#include "common/error.h"

namespace pagoda {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PrefixCacheConfig, SwitchAcceptsOnOffSpellings) {
  for (const char* t : {"on", "ON", "true", "1", "yes"}) EXPECT_TRUE(parse_prompt_cache_switch(t)) << t;
  for (const char* t : {"off", "false", "0", "No"}) EXPECT_FALSE(parse_prompt_cache_switch(t)) << t;
  EXPECT_EQ(error_of([] { parse_prompt_cache_switch("maybe"); }), "--prompt-cache: 'maybe' is not on or off");
}

TEST(PrefixCacheConfig, BytesTakeSizesOrUnlimited) {
  EXPECT_EQ(parse_prompt_cache_bytes("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_prompt_cache_bytes("0"), 0u);
  EXPECT_EQ(parse_prompt_cache_bytes("unlimited"), PrefixCacheConfig::kUnlimitedBytes);
  EXPECT_NE(error_of([] { parse_prompt_cache_bytes("lots"); }).find("--prompt-cache-bytes"), std::string::npos);
}

TEST(PrefixCacheConfig, MaxEntriesTakeCountsOrUnlimited) {
  EXPECT_EQ(parse_prompt_cache_max_entries("64"), 64);
  EXPECT_EQ(parse_prompt_cache_max_entries("0"), 0);
  EXPECT_EQ(parse_prompt_cache_max_entries("Unlimited"), PrefixCacheConfig::kUnlimitedEntries);
  for (const char* t : {"-1", "1.5", "", "12x"})
    EXPECT_NE(error_of([&] { parse_prompt_cache_max_entries(t); }).find("--prompt-cache-max-entries"),
              std::string::npos)
        << t;
}

TEST(PrefixCacheConfig, TtlTakesDurationsAndNone) {
  EXPECT_EQ(parse_prompt_cache_ttl("300"), 300000);
  EXPECT_EQ(parse_prompt_cache_ttl("300s"), 300000);
  EXPECT_EQ(parse_prompt_cache_ttl("250ms"), 250);
  EXPECT_EQ(parse_prompt_cache_ttl("5m"), 300000);
  EXPECT_EQ(parse_prompt_cache_ttl("1.5h"), 5400000);
  EXPECT_EQ(parse_prompt_cache_ttl("0"), PrefixCacheConfig::kNoTtl);
  EXPECT_EQ(parse_prompt_cache_ttl("none"), PrefixCacheConfig::kNoTtl);
  EXPECT_EQ(parse_prompt_cache_ttl("off"), PrefixCacheConfig::kNoTtl);
  for (const char* t : {"", "s", "-5", "5d", "abc", "1e300h"})
    EXPECT_NE(error_of([&] { parse_prompt_cache_ttl(t); }).find("--prompt-cache-ttl: '"), std::string::npos) << t;
}

TEST(PrefixCacheConfig, MinPrefixTakesTokenCounts) {
  EXPECT_EQ(parse_prompt_cache_min_prefix("32"), 32);
  EXPECT_EQ(error_of([] { parse_prompt_cache_min_prefix("x"); }),
            "--prompt-cache-min-prefix: 'x' is not a number of tokens");
}

}  // namespace
}  // namespace pagoda
