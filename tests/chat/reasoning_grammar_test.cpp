// with_reasoning_prefix: a constrained output may start with a thinking block. The
// language is checked against std::regex (ECMAScript, whose negative lookahead states
// "no </think> inside" independently of the grammar's automaton construction) on
// random strings over the marker's own alphabet, and on hand-written cases.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "chat/chat_format.h"
#include "grammar/grammar.h"

namespace pagoda::chat {
namespace {

const std::string kBody = "root ::= \"{\" [a-z]? \"}\"\n";

bool accepts(const ReasoningGrammar& g, const std::string& text) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  static const auto vocab = std::make_shared<grammar::TokenVocabulary>(pieces, std::vector<int32_t>{});
  grammar::Matcher m(grammar::Grammar::from_gbnf(g.gbnf, g.root), vocab);
  return m.accept_bytes(text) && m.is_accepting();
}

const ChatFormat kThink{ToolCallFormat::Hermes, ReasoningFormat::Think};

TEST(ReasoningGrammar, OtherFormatsAreUnchanged) {
  ReasoningGrammar g = with_reasoning_prefix(ChatFormat{}, kBody, false);
  EXPECT_EQ(g.gbnf, kBody);
  EXPECT_EQ(g.root, "root");
}

TEST(ReasoningGrammar, OptionalBlockBeforeTheBody) {
  ReasoningGrammar g = with_reasoning_prefix(kThink, kBody, false);
  EXPECT_EQ(g.root, kReasoningRoot);
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, "{x}"));
  EXPECT_TRUE(accepts(g, "<think>\nLet me see: a < b, </th, <<//think>.\n</think>\n\n{x}"));
  EXPECT_TRUE(accepts(g, "<think></think>{}"));
  EXPECT_TRUE(accepts(g, "<think>ends in a prefix </thin</think>{}"));
  EXPECT_TRUE(accepts(g, "<think>日本語の思考</think> {}"));
  EXPECT_FALSE(accepts(g, "<think>a</think>b</think>{}"));   // text after the block must be the body
  EXPECT_FALSE(accepts(g, "<think>unclosed {}"));
  EXPECT_FALSE(accepts(g, "hello {}"));
  EXPECT_FALSE(accepts(g, "<think>x</think>\n\n\n\n{}"));  // at most three blanks
}

TEST(ReasoningGrammar, OpenedBlockMustBeClosedFirst) {
  ReasoningGrammar g = with_reasoning_prefix(kThink, kBody, true);
  EXPECT_TRUE(accepts(g, "I think.</think>\n\n{}"));
  EXPECT_TRUE(accepts(g, "</think>{}"));
  EXPECT_FALSE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "<think>x</think>{}x</think>{}"));
}

// gpt-oss (harmony): an optional analysis message before the body, ended by <|end|> and
// followed by the next message's <|start|>assistant; a non-tool body is the final channel's
// message; a tool-call body (which spells its own commentary header) stands as it is.
TEST(ReasoningGrammar, HarmonyAnalysisMessageBeforeTheBody) {
  const ChatFormat oss{ToolCallFormat::GptOss, ReasoningFormat::GptOss};
  const std::string kFinal = "<|channel|>final<|message|>";
  ReasoningGrammar g = with_reasoning_prefix(oss, kBody, false);
  EXPECT_EQ(g.root, kReasoningRoot);
  EXPECT_TRUE(accepts(g, kFinal + "{x}"));
  EXPECT_TRUE(accepts(g, "<|channel|>analysis<|message|>a < b, <|en <|end <|<|end|><|start|>assistant" + kFinal + "{}"));
  EXPECT_TRUE(accepts(g, "<|channel|>analysis<|message|><|end|><|start|>assistant" + kFinal + "{}"));
  EXPECT_FALSE(accepts(g, "{x}"));  // the answer is a final-channel message
  EXPECT_FALSE(accepts(g, "<|channel|>analysis<|message|>x<|end|>" + kFinal + "{}"));  // no <|start|>assistant
  EXPECT_FALSE(accepts(g, "<|channel|>analysis<|message|>x<|end|>y<|end|><|start|>assistant" + kFinal + "{}"));
  ReasoningGrammar opened = with_reasoning_prefix(oss, kBody, true);
  EXPECT_TRUE(accepts(opened, "thinking<|end|><|start|>assistant" + kFinal + "{}"));
  EXPECT_FALSE(accepts(opened, kFinal + "{}"));
  const std::string calls = "root ::= \"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>\"\n";
  ReasoningGrammar tools = with_reasoning_prefix(oss, calls, false, /*tool_calls=*/true);
  EXPECT_TRUE(accepts(tools, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"));
  EXPECT_TRUE(accepts(tools, "<|channel|>analysis<|message|>Need f.<|end|><|start|>assistant"
                             "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"));
}

TEST(ReasoningGrammar, MatchesARegexWithLookaheadOnRandomStrings) {
  ReasoningGrammar opened = with_reasoning_prefix(kThink, kBody, true);
  ReasoningGrammar optional = with_reasoning_prefix(kThink, kBody, false);
  const std::regex re_opened(R"(((?!</think>)[\s\S])*</think>[ \t\n]{0,3}\{[a-z]?\})");
  const std::regex re_optional(R"((<think>((?!</think>)[\s\S])*</think>[ \t\n]{0,3})?\{[a-z]?\})");
  const std::string alphabet = "</thinkx>{}\n";
  const std::vector<std::string> pieces{"</think>", "<think>", "</th", "<", "{}", "{a}"};
  std::mt19937 rng(13);
  int positive = 0;
  for (int i = 0; i < 4000; ++i) {
    auto random_text = [&](int max_len) {
      std::string t;
      const int n = static_cast<int>(rng() % static_cast<unsigned>(max_len));
      for (int j = 0; j < n; ++j) t += rng() % 3 == 0 ? pieces[rng() % pieces.size()] : std::string(1, alphabet[rng() % alphabet.size()]);
      return t;
    };
    // Half free-form, half shaped like the language (a block, blanks, a body) with
    // random text in each slot, so both answers are common.
    std::string s = random_text(8);
    if (i % 2) {
      s = (rng() % 2 ? "<think>" : "") + random_text(6) + "</think>" + std::string(rng() % 5, '\n') +
          (rng() % 4 ? pieces[4 + rng() % 2] : random_text(3));
    }
    const bool want_opened = std::regex_match(s, re_opened);
    const bool want_optional = std::regex_match(s, re_optional);
    positive += want_opened + want_optional;
    EXPECT_EQ(accepts(opened, s), want_opened) << "opened: '" << s << "'";
    EXPECT_EQ(accepts(optional, s), want_optional) << "optional: '" << s << "'";
  }
  EXPECT_GT(positive, 100);  // the sample reaches both answers
}

}  // namespace
}  // namespace pagoda::chat
