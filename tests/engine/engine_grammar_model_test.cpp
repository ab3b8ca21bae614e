// Grammar-constrained requests through the Engine on stories260K: every sampled token
// keeps the text inside the grammar (checked with std::regex, an independent
// recognizer of the same language), the request ends by itself where nothing but EOS
// could follow, and a constrained request gives the same tokens alone, with others and
// across forced preemptions (the Matcher stays with the sequence).
#include <regex>

#include "engine/engine_harness.h"

namespace pagoda {
namespace {

using namespace engine_test;

// "The cat is N." where N is one to three digits, or a short lower-case word list.
const char* kGbnf = R"(root ::= "The " animal " is " ([0-9] | [1-9] [0-9] | [1-9] [0-9] [0-9]) "." | "words:" (" " [a-z]{1,6}){1,4} "!"
animal ::= "cat" | "dog" | "bird")";
const std::regex kLanguage(R"(The (cat|dog|bird) is ([0-9]|[1-9][0-9]|[1-9][0-9][0-9])\.|words:( [a-z]{1,6}){1,4}!)");

Request constrained(const Tokenizer& tok, uint64_t seed) {
  Request r;
  r.prompt = tok.encode("Once upon a time", true, false);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = -1;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  r.max_tokens = 64;
  r.grammar = grammar::Grammar::from_gbnf(kGbnf);
  return r;
}

TEST(EngineGrammar, EveryOutputIsASentenceOfTheGrammar) {
  Loaded l = load(kStories, true);
  std::vector<Request> rs;
  for (uint64_t seed = 0; seed < 16; ++seed) rs.push_back(constrained(*l.tokenizer, seed));
  RunResult out = run_all(*l.model, l.tokenizer.get(), engine_config(*l.model, 4, 256, true), rs);
  std::set<std::string> distinct;
  for (const RequestResult& r : out.results) {
    EXPECT_EQ(r.finish, FinishReason::Stop) << r.text;
    EXPECT_TRUE(std::regex_match(r.text, kLanguage)) << "'" << r.text << "'";
    distinct.insert(r.text);
  }
  EXPECT_GT(distinct.size(), 4u);  // temperature 1 explores the language
}

TEST(EngineGrammar, SameTokensAloneAndUnderPreemption) {
  Loaded l = load(kStories, true);
  std::vector<Request> rs;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    rs.push_back(constrained(*l.tokenizer, 100 + seed));
    // 30 prompt tokens: two blocks at admission, a third as soon as it generates 3.
    rs.back().prompt = random_tokens(30, 512, static_cast<uint32_t>(seed));
    rs.back().prompt[0] = l.tokenizer->bos();
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : rs)
    alone.push_back(run_all(*l.model, l.tokenizer.get(), engine_config(*l.model, 1, 256, false), {r}).tokens[0]);
  // 6 running sequences in 8 blocks of 16 tokens: they cannot all grow, so some are
  // preempted and recomputed.
  RunResult tight = run_all(*l.model, l.tokenizer.get(), engine_config(*l.model, 6, 8, true), rs);
  EXPECT_GT(tight.stats.preemptions, 0);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(tight.tokens[i], alone[i]) << "request " << i;
}

TEST(EngineGrammar, MinTokensCannotForceTextPastTheGrammarsEnd) {
  Loaded l = load(kStories, true);
  Request r = constrained(*l.tokenizer, 5);
  r.grammar = grammar::Grammar::from_gbnf(R"(root ::= "ok")");
  r.min_tokens = 10;  // more than "ok" takes: the grammar still ends it
  RunResult out = run_all(*l.model, l.tokenizer.get(), engine_config(*l.model, 1, 64, false), {r});
  EXPECT_EQ(out.results[0].text, "ok");
  EXPECT_EQ(out.results[0].finish, FinishReason::Stop);
}

TEST(EngineGrammar, NeedsATokenizer) {
  Loaded l = load(kStories, false);
  Request r;
  r.prompt = {1, 2, 3};
  r.grammar = grammar::Grammar::from_gbnf(R"(root ::= "ok")");
  Engine e(*l.model, nullptr, engine_config(*l.model, 1, 64, false));
  EXPECT_EQ(e.submit(r, std::make_shared<RecordingSink>()).status, SubmitResult::Status::Invalid);
}

}  // namespace
}  // namespace pagoda
