// GBNF parser: what it accepts (checked through the language it defines) and every
// error class, with the line:column it names; hostile inputs end in an error (or a
// grammar) quickly, never a crash or a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

namespace pagoda::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> byte_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.push_back("");  // EOG
  return std::make_shared<TokenVocabulary>(std::move(pieces), std::vector<int32_t>{256});
}

// Whether `text` is a whole sentence of the grammar.
bool matches(const std::string& gbnf, const std::string& text) {
  Matcher m(Grammar::from_gbnf(gbnf), byte_vocab());
  return m.accept_bytes(text) && m.is_accepting();
}

// The message of the GrammarError from_gbnf throws ("" when it does not).
std::string error_of(const std::string& gbnf, const GrammarLimits& limits = {}) {
  try {
    Grammar::from_gbnf(gbnf, "root", limits);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(gbnf, ...) EXPECT_PRED_FORMAT2(contains_all, error_of(gbnf), (std::vector<std::string>{__VA_ARGS__}))

testing::AssertionResult contains_all(const char*, const char*, const std::string& msg,
                                      const std::vector<std::string>& parts) {
  if (msg.empty()) return testing::AssertionFailure() << "no error thrown";
  for (const auto& p : parts)
    if (msg.find(p) == std::string::npos) return testing::AssertionFailure() << "'" << msg << "' lacks '" << p << "'";
  return testing::AssertionSuccess();
}

TEST(GbnfParser, LiteralsAndEscapes) {
  EXPECT_TRUE(matches(R"(root ::= "a\n\r\t\\\"\x41\u00e9\U0001F600")", "a\n\r\t\\\"A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches("root ::= \"h\xC3\xA9llo\"", "h\xC3\xA9llo"));  // raw UTF-8 in the text
  // \xNN is a code point (llama.cpp): \xE9 is U+00E9, two bytes.
  EXPECT_TRUE(matches(R"(root ::= "\xE9")", "\xC3\xA9"));
  EXPECT_FALSE(matches(R"(root ::= "\xE9")", "\xE9"));
  EXPECT_TRUE(matches(R"(root ::= "")", ""));
}

TEST(GbnfParser, CharClasses) {
  const std::string g = R"(root ::= [a-c] [^a-z0-9] [\]\-x] [a-] .)";
  EXPECT_TRUE(matches(g, "bZ]a\xE2\x82\xAC"));
  EXPECT_TRUE(matches(g, "c!-- "));
  EXPECT_TRUE(matches(g, "a\xC3\xA9xa."));
  EXPECT_FALSE(matches(g, "dZ]a."));
  EXPECT_FALSE(matches(g, "aa]a."));
  EXPECT_FALSE(matches(g, "a9]a."));
  EXPECT_FALSE(matches(g, "aZya."));
  EXPECT_TRUE(matches(R"(root ::= [\u0391-\u03A9]+)", "\xCE\x91\xCE\xA9"));
  // An empty class matches nothing (beside a live alternative: a grammar of nothing at all
  // is refused, see AGrammarThatAcceptsNoTextIsRejected).
  EXPECT_FALSE(matches(R"(root ::= [^\x00-\U0010FFFF] | "b")", "a"));
}

TEST(GbnfParser, RepetitionOperators) {
  const std::string g = R"(root ::= "a"* "b"+ "c"? "d"{2} "e"{1,} "f"{0,2} ("gh"){1,2})";
  EXPECT_TRUE(matches(g, "bddegh"));
  EXPECT_TRUE(matches(g, "aaabbcddeeeffghgh"));
  EXPECT_FALSE(matches(g, "ddegh"));       // b+ needs one
  EXPECT_FALSE(matches(g, "bdegh"));       // d{2}
  EXPECT_FALSE(matches(g, "bddgh"));       // e{1,}
  EXPECT_FALSE(matches(g, "bddefffgh"));   // f{0,2}
  EXPECT_FALSE(matches(g, "bddeghghgh"));  // (gh){1,2}
  EXPECT_TRUE(matches(R"(root ::= "ab"{3})", "ababab"));  // the whole literal repeats
  EXPECT_FALSE(matches(R"(root ::= "ab"{3})", "abbb"));
  EXPECT_TRUE(matches(R"(root ::= "x"{ 2 , 3 })", "xxx"));
  EXPECT_TRUE(matches(R"(root ::= "x"{0})", ""));
}

TEST(GbnfParser, RulesCommentsAndLineContinuation) {
  const std::string g =
      "# a comment\n"
      "root ::= greeting ( \" \" name )?   # trailing comment\n"
      "\n"
      "greeting ::= \"hi\" |\n"
      "             \"hello\"\n"
      "  | \"hey\"\n"
      "name ::= (\n"
      "  [A-Z] # first letter\n"
      "  [a-z]*\n"
      ")\r\n"
      "unused_rule-2 ::= \"never\"\n";
  EXPECT_TRUE(matches(g, "hi"));
  EXPECT_TRUE(matches(g, "hello Ada"));
  EXPECT_TRUE(matches(g, "hey Bo"));
  EXPECT_FALSE(matches(g, "hello ada"));
  EXPECT_FALSE(matches(g, "never"));
}

TEST(GbnfParser, NonRootStartRule) {
  auto g = Grammar::from_gbnf("a ::= \"x\" b\nb ::= \"y\"\n", "a");
  Matcher m(g, byte_vocab());
  EXPECT_TRUE(m.accept_bytes("xy"));
  EXPECT_TRUE(m.is_accepting());
}

TEST(GbnfParser, ErrorsNameTheLineAndColumn) {
  EXPECT_ERROR("root ::= foo\n", "line 1:10", "undefined rule 'foo'");
  EXPECT_ERROR("a ::= \"x\"\n", "no rule named 'root'");
  EXPECT_ERROR("root ::= \"x\"\nroot ::= \"y\"\n", "line 2:1", "defined twice");
  EXPECT_ERROR("root ::= \"abc\n", "line 1:10", "unterminated string");
  EXPECT_ERROR("root ::= [abc\n", "line 1:10", "unterminated character class");
  EXPECT_ERROR("root ::= \"\\q\"", "line 1:11", "unknown escape");
  EXPECT_ERROR("root ::= \"\\x4\"", "hex digits");
  EXPECT_ERROR("root ::= \"\\uD800\"", "not a Unicode scalar value");
  EXPECT_ERROR("root ::= [z-a]", "line 1:11", "out of order");
  EXPECT_ERROR("root = \"x\"", "line 1:6", "expecting '::='");
  EXPECT_ERROR("root ::= \"x\" )", "line 1:14", "expecting end of line");
  EXPECT_ERROR("root ::= * \"x\"", "line 1:10", "expecting an item before '*'");
  EXPECT_ERROR("root ::= \"x\"**", "line 1:14", "expecting an item before '*'");
  EXPECT_ERROR("root ::= \"x\"{3,2}", "n < m");
  EXPECT_ERROR("root ::= \"x\"{a}", "expecting a number");
  EXPECT_ERROR("root ::= (\"x\"\n", "expecting ')'", "opened at 1:10");
  EXPECT_ERROR("root ::= \"x\"\n\"y\"\n", "line 2:1", "expecting a rule name");
  EXPECT_ERROR("root ::= \"\xFF\"", "invalid UTF-8");
  EXPECT_ERROR("root ::= \"\xC0\x80\"", "invalid UTF-8");  // overlong
}

TEST(GbnfParser, LeftRecursionIsRejected) {
  EXPECT_ERROR("root ::= root \"a\" | \"b\"", "line 1:1", "left recursion", "'root'");
  EXPECT_ERROR("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"\n", "left recursion", "a -> b -> a");
  // Through a nullable prefix: opt can be empty, so root starts with root.
  EXPECT_ERROR("root ::= opt root \"x\" | \"y\"\nopt ::= \"o\"?\n", "left recursion", "'root'");
  EXPECT_ERROR("root ::= (\"a\"? root) | \"b\"", "left recursion");
  // A repeated item that can match the empty text loops the same way.
  EXPECT_ERROR("root ::= (\"a\"?)*", "left recursion", "empty text");
  // Right recursion and recursion after a terminal are fine.
  EXPECT_EQ(error_of("root ::= \"a\" root | \"b\""), "");
  EXPECT_EQ(error_of("root ::= \"(\" root \")\" root | \"\""), "");
}

// A grammar no text satisfies (an empty language) is an error, not a grammar that lets
// only the end through (which answered "" with finish "stop"). Checked against the
// matcher: each accepted grammar below has a sentence, each refused one has none.
TEST(GbnfParser, AGrammarThatAcceptsNoTextIsRejected) {
  EXPECT_ERROR("root ::= [^\\x00-\\U0010FFFF]", "accepts no text", "'root'");
  EXPECT_ERROR("root ::= \"a\" [^\\x00-\\U0010FFFF]*  [^\\x00-\\U0010FFFF]", "accepts no text");
  EXPECT_ERROR("root ::= x\nx ::= \"a\" y\ny ::= \"b\" x\n", "accepts no text");  // only recursion
  EXPECT_ERROR("root ::= x | y\nx ::= \"(\" x \")\"\ny ::= [^\\x00-\\U0010FFFF] \"z\"\n", "accepts no text");
  // A dead alternative or rule beside a live one is fine, and so is the empty string.
  EXPECT_EQ(error_of("root ::= [^\\x00-\\U0010FFFF] | \"b\""), "");
  EXPECT_TRUE(matches("root ::= [^\\x00-\\U0010FFFF] | \"b\"", "b"));
  EXPECT_EQ(error_of("root ::= \"a\" dead?\ndead ::= [^\\x00-\\U0010FFFF]"), "");
  EXPECT_TRUE(matches("root ::= \"a\" dead?\ndead ::= [^\\x00-\\U0010FFFF]", "a"));
  EXPECT_EQ(error_of("root ::= \"\""), "");
  EXPECT_EQ(error_of("root ::= x\nx ::= \"(\" x \")\" | \"\""), "");
  EXPECT_TRUE(matches("root ::= x\nx ::= \"(\" x \")\" | \"\"", "(())"));
}

TEST(GbnfParser, LimitsGiveErrors) {
  GrammarLimits small;
  small.max_text_bytes = 10;
  EXPECT_PRED_FORMAT2(contains_all, error_of("root ::= \"0123456789\"", small),
                      (std::vector<std::string>{"max_text_bytes"}));
  GrammarLimits few_rules;
  few_rules.max_rules = 3;
  EXPECT_PRED_FORMAT2(contains_all, error_of("root ::= a b c\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"\n", few_rules),
                      (std::vector<std::string>{"max_rules"}));
  GrammarLimits few_stacks;
  few_stacks.max_stacks = 4;
  EXPECT_PRED_FORMAT2(contains_all, error_of("root ::= \"a\" | \"b\" | \"c\" | \"d\" | \"e\"", few_stacks),
                      (std::vector<std::string>{"max_stacks"}));
}

// Each hostile input finishes (error or grammar) well within a second.
class Hostile : public testing::Test {
 protected:
  void expect_fast_error(const std::string& gbnf, const std::string& part) {
    GrammarLimits limits;
    limits.max_text_bytes = 8 << 20;
    auto t0 = std::chrono::steady_clock::now();
    std::string err = error_of(gbnf, limits);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(err.find(part), std::string::npos) << err.substr(0, 200);
    EXPECT_LT(s, 20.0);  // catches a hang or blow-up, not speed
  }
};

TEST_F(Hostile, HundredThousandNestedParentheses) {
  expect_fast_error("root ::= " + std::string(100000, '(') + "\"x\"" + std::string(100000, ')'), "max_nesting");
}

TEST_F(Hostile, HugeRepetitions) {
  expect_fast_error("root ::= \"x\"{1000000}", "max_repetition");
  expect_fast_error("root ::= \"x\"{0,99999}", "max_rules");
  std::string many = "root ::=";  // 100 rules of 50k elements each: 5M elements from 1.6 kB
  for (int i = 0; i < 100; ++i) many += " (\"x\"{50000})";
  expect_fast_error(many, "max_elements");
  // Nested repetition stays small (groups are referenced, not copied) and matches.
  auto g = Grammar::from_gbnf("root ::= ((\"ab\"{1000}){1000}){1000}");
  EXPECT_LT(g->impl().elems.size(), 10000u);
}

TEST_F(Hostile, FiftyThousandAlternatives) {
  std::string g = "root ::= \"v0\"";
  for (int i = 1; i < 50000; ++i) g += " | \"v" + std::to_string(i) + "\"";
  expect_fast_error(g, "max_stacks");
}

TEST_F(Hostile, DeepRuleChains) {
  // Over the rule limit.
  std::string over;
  for (int i = 0; i < 70000; ++i) over += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  expect_fast_error("root ::= r0\n" + over, "max_rules");
  // A 40k-rule left-recursive cycle is found without deep recursion.
  std::string cycle = "root ::= r0\n";
  for (int i = 0; i < 40000; ++i) cycle += "r" + std::to_string(i) + " ::= r" + std::to_string((i + 1) % 40000) + "\n";
  expect_fast_error(cycle, "left recursion");
  // A legal 40k-deep chain builds and matches 40k x's.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 40000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  chain += "r40000 ::= \"y\"\n";
  auto t0 = std::chrono::steady_clock::now();
  Matcher m(Grammar::from_gbnf(chain), byte_vocab());
  EXPECT_TRUE(m.accept_bytes("y" + std::string(40000, 'x')));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST_F(Hostile, AmbiguousGrammarStaysBounded) {
  // Exponentially many parses of "aaaa..."; the stack set must stay bounded.
  auto g = Grammar::from_gbnf("root ::= (a | a a | a a a)*\na ::= \"a\" | \"a\"\n");
  Matcher m(g, byte_vocab());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.accept_bytes("a")) << i;
  EXPECT_TRUE(m.is_accepting());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST_F(Hostile, GarbageNeverCrashes) {
  std::mt19937 rng(7);
  const std::string alphabet = "root::=\"[]()|*+?{},.^-\\ax0\n#";
  for (int n = 0; n < 3000; ++n) {
    std::string s = (n % 2) ? "root ::= " : "";
    int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    try {
      auto g = Grammar::from_gbnf(s);
      Matcher m(g, byte_vocab());
      m.accept_bytes("ax0");
    } catch (const GrammarError&) {
    }
  }
}

}  // namespace
}  // namespace pagoda::grammar
