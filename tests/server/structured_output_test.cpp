// output_grammar_gbnf (what a request's output must match) and GrammarCache (compiled
// once, shared, bounded).
#include <gtest/gtest.h>

#include "server/structured_output.h"

namespace pagoda::server {
namespace {

CompletionRequest chat(const std::string& extra) {
  return parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", 1000);
}

TEST(OutputGrammar, NoneWithoutAConstraintOrARequiredCall) {
  EXPECT_EQ(output_grammar_gbnf(chat(""), chat::ChatFormat{}), "");
  EXPECT_EQ(output_grammar_gbnf(chat(R"(,"tools":[{"type":"function","function":{"name":"f"}}])"), chat::ChatFormat{}), "");
  EXPECT_EQ(output_grammar_gbnf(chat(R"(,"response_format":{"type":"text"})"), chat::ChatFormat{}), "");
}

TEST(OutputGrammar, EachConstraintCompiles) {
  for (const char* extra : {R"(,"response_format":{"type":"json_object"})",
                            R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"integer"}}})",
                            R"(,"guided_regex":"[0-9]{3}")", R"(,"guided_choice":["a","b"])",
                            R"(,"grammar":"root ::= \"x\"")",
                            R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required")"}) {
    const std::string g = output_grammar_gbnf(chat(extra), chat::ChatFormat{});
    ASSERT_FALSE(g.empty()) << extra;
    EXPECT_NO_THROW(grammar::Grammar::from_gbnf(g)) << extra << "\n" << g;
  }
}

TEST(OutputGrammar, UnsupportedKeywordsAre400NamingThem) {
  try {
    output_grammar_gbnf(chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"uniqueItems":true,"type":"array"}}})"),
                        chat::ChatFormat{});
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "response_format");
    EXPECT_NE(std::string(e.what()).find("uniqueItems"), std::string::npos) << e.what();
  }
  try {
    output_grammar_gbnf(chat(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"not":{}}}}}}],"tool_choice":"required")"),
                        chat::ChatFormat{});
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(std::string(e.what()).find("not"), std::string::npos) << e.what();
  }
  EXPECT_THROW(output_grammar_gbnf(chat(R"(,"guided_regex":"(?=a)b")"), chat::ChatFormat{}), ApiError);
}

TEST(GrammarCache, SameTextSameGrammarBoundedLru) {
  GrammarCache cache(2);
  auto a = cache.get("root ::= \"a\"", "grammar");
  EXPECT_EQ(cache.get("root ::= \"a\"", "grammar"), a);  // shared: its mask cache too
  EXPECT_EQ(cache.hits(), 1u);
  auto b = cache.get("root ::= \"b\"", "grammar");
  EXPECT_NE(a, b);
  // Another start rule is another grammar.
  EXPECT_NE(cache.get("root ::= \"b\"\nother ::= \"c\"", "grammar", "other"), b);
  EXPECT_EQ(cache.size(), 2u);  // "a" was the least recently used and went
  EXPECT_NE(cache.get("root ::= \"a\"", "grammar"), a);
  EXPECT_EQ(a.use_count(), 1);  // a request holding the old one keeps it alive
}

// Bounded in bytes, booked at what the entries hold (their text twice, the compiled
// grammar, its mask cache): a 1 MB grammar is several MiB, and the count bound alone let
// 64 of them hold 300-430 MiB.
TEST(GrammarCache, BoundedInBytesBookedAtWhatEntriesHold) {
  auto big = [](int seed) {  // ~200 KiB of GBNF: 10k alternatives
    std::string g = "root ::= \"" + std::to_string(seed) + "\" (";
    for (int i = 0; i < 10000; ++i) g += (i ? " | \"" : "\"") + std::to_string(i * 7919 % 100003) + "\"";
    return g + ")";
  };
  const std::string g0 = big(0);
  GrammarCache probe;
  const auto compiled = probe.get(g0, "grammar");
  const uint64_t one = probe.stats().bytes;
  EXPECT_GE(one, 2 * g0.size() + compiled->memory_bytes());
  EXPECT_GT(compiled->memory_bytes(), g0.size()) << "the compiled form is booked below its text";

  GrammarCache cache(64, 3 * one + one / 2);  // room for three
  for (int i = 0; i < 8; ++i) cache.get(big(i), "grammar");
  const GrammarCacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_LE(s.bytes, s.capacity_bytes);
  EXPECT_EQ(s.evictions, 5u);
  // One alone over the cap is served, not kept.
  GrammarCache tiny(64, 1000);
  EXPECT_NE(tiny.get(g0, "grammar"), nullptr);
  EXPECT_EQ(tiny.stats().entries, 0);
  EXPECT_EQ(tiny.stats().bytes, 0u);
}

TEST(GrammarCache, BadGrammarIs400WithTheParam) {
  GrammarCache cache;
  try {
    cache.get("root ::= nowhere", "guided_grammar");
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "guided_grammar");
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace pagoda::server
