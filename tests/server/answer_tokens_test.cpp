// AnswerTokens with the real Qwen3 tokenizer: ids a model sampled that their text does
// not tokenize back to (the case that breaks a conversation's cached prefix) are fed
// back exactly, and only under the contract's conditions; everything else tokenizes as
// the whole rendered prompt does.
#include "server/answer_tokens.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace pagoda {
namespace {

using json = nlohmann::ordered_json;

const std::string kQwen3 = std::string(PAGODA_SHARED_DIR) + "/models/qwen3-tokenizer/tokenizer.json";

std::unique_ptr<Tokenizer> qwen3() { return Tokenizer::from_hf_json(kQwen3, ""); }

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::string& pieces_joined_by_bar) {
  // Each '|'-separated piece tokenized alone: a segmentation the whole text would not get.
  std::vector<int32_t> ids;
  size_t from = 0;
  for (;;) {
    const size_t bar = pieces_joined_by_bar.find('|', from);
    const std::string piece = pieces_joined_by_bar.substr(from, bar == std::string::npos ? std::string::npos : bar - from);
    for (int32_t id : tok.encode(piece, false, false)) ids.push_back(id);
    if (bar == std::string::npos) return ids;
    from = bar + 1;
  }
}

// chatml, as the templates render it.
std::string chatml(const json& messages, bool generation_prompt) {
  std::string s;
  for (const auto& m : messages)
    s += "<|im_start|>" + m["role"].get<std::string>() + "\n" + m["content"].get<std::string>() + "<|im_end|>\n";
  if (generation_prompt) s += "<|im_start|>assistant\n";
  return s;
}

TEST(AnswerTokens, ARememberedAnswerIsFedBackAsTheIdsTheModelProduced) {
  const auto tok = qwen3();
  // "there" sampled as "the" + "re": its text tokenizes to one id, not these two.
  const std::vector<int32_t> sampled = ids_of(*tok, "Hello the|re, how| are you");
  const std::string answer = tok->decode(sampled);
  ASSERT_NE(tok->encode(answer, false, false), sampled) << "the test needs an answer that does not round-trip";
  AnswerTokens answers(1 << 20);
  answers.remember(*tok, answer, sampled);
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}},
                                     {{"role", "assistant"}, {"content", answer}},
                                     {{"role", "user"}, {"content", "And you?"}}});
  const std::string turn1 = chatml(json::array({messages[0]}), true);
  const std::string turn2 = chatml(messages, true);
  const std::vector<int32_t> ids = tokenize_chat(*tok, turn2, messages, &answers);
  // Turn 2 is turn 1's prompt, then exactly the sampled ids, then the rest as text.
  std::vector<int32_t> want = tokenize_prompt(*tok, turn1);
  want.insert(want.end(), sampled.begin(), sampled.end());
  const std::vector<int32_t> rest = tok->encode("<|im_end|>\n<|im_start|>user\nAnd you?<|im_end|>\n<|im_start|>assistant\n", false, true);
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(ids, want);
  EXPECT_NE(ids, tokenize_prompt(*tok, turn2));
  EXPECT_EQ(tok->decode(ids), tok->decode(tokenize_prompt(*tok, turn2))) << "the text changed";
  const AnswerTokensStats st = answers.stats();
  EXPECT_EQ(st.entries, 1);
  EXPECT_EQ(st.remembered, 1);
  EXPECT_EQ(st.spliced, 1);
  EXPECT_EQ(st.bytes, answer.size() + sampled.size() * sizeof(int32_t));
}

TEST(AnswerTokens, OnlyWhatTheContractAllowsIsSpliced) {
  const auto tok = qwen3();
  const std::vector<int32_t> sampled = ids_of(*tok, "the|re it| is");
  const std::string answer = tok->decode(sampled);
  AnswerTokens answers(1 << 20);
  // Text that is not the ids' (a stop string cut it): not remembered.
  answers.remember(*tok, answer.substr(0, answer.size() - 2), sampled);
  EXPECT_EQ(answers.stats().entries, 0);
  answers.remember(*tok, answer, sampled);
  ASSERT_EQ(answers.stats().entries, 1);
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", answer}}});
  // Followed by text, not a special token: the pieces would not tokenize as the whole.
  const std::string plain = "User: Hi\nAssistant: " + answer + " and more\nUser:";
  EXPECT_EQ(tokenize_chat(*tok, plain, messages, &answers), tokenize_prompt(*tok, plain));
  // Not in the rendered text (a template that rewrote it), or a user message with the
  // same text: tokenized as text.
  const json as_user = json::array({{{"role", "user"}, {"content", answer}}});
  EXPECT_EQ(tokenize_chat(*tok, chatml(as_user, true), as_user, &answers), tokenize_prompt(*tok, chatml(as_user, true)));
  const std::string rewritten = chatml(json::array({messages[0], {{"role", "assistant"}, {"content", "x"}}}), true);
  EXPECT_EQ(tokenize_chat(*tok, rewritten, messages, &answers), tokenize_prompt(*tok, rewritten));
  EXPECT_EQ(answers.stats().spliced, 0);
  // Off: plain tokenization.
  EXPECT_EQ(tokenize_chat(*tok, chatml(messages, true), messages, nullptr), tokenize_prompt(*tok, chatml(messages, true)));
}

TEST(AnswerTokens, APartialCharacterTheClientSawAsReplacementStillMatches) {
  const auto tok = qwen3();
  // "é" is 2 bytes; its first byte alone is a byte-level token: the client gets U+FFFD.
  std::vector<int32_t> sampled = tok->encode("ok ", false, false);
  const auto lead = tok->find_token("Ã");  // byte 0xC3 in the byte-level alphabet
  ASSERT_TRUE(lead.has_value());
  sampled.push_back(*lead);
  const std::string seen = "ok \xEF\xBF\xBD";  // what the JSON writer sent
  AnswerTokens answers(1 << 20);
  answers.remember(*tok, seen, sampled);
  EXPECT_EQ(answers.stats().entries, 1);
  EXPECT_EQ(answers.find(seen), sampled);
}

TEST(AnswerTokens, TheCapEvictsTheLeastRecentlyUsed) {
  const auto tok = qwen3();
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  for (int i = 0; i < 4; ++i) {
    texts.push_back("answer number " + std::to_string(i));
    ids.push_back(tok->encode(texts.back(), false, false));
  }
  const uint64_t one = texts[0].size() + ids[0].size() * sizeof(int32_t);
  AnswerTokens answers(3 * one);
  for (int i = 0; i < 3; ++i) answers.remember(*tok, texts[static_cast<size_t>(i)], ids[static_cast<size_t>(i)]);
  EXPECT_FALSE(answers.find(texts[0]).empty());  // 0 used: 1 is the oldest now
  answers.remember(*tok, texts[3], ids[3]);
  EXPECT_TRUE(answers.find(texts[1]).empty());
  EXPECT_FALSE(answers.find(texts[0]).empty());
  EXPECT_FALSE(answers.find(texts[3]).empty());
  EXPECT_LE(answers.stats().bytes, 3 * one);
  AnswerTokens off(0);
  off.remember(*tok, texts[0], ids[0]);
  EXPECT_EQ(off.stats().entries, 0);
}

}  // namespace
}  // namespace pagoda
