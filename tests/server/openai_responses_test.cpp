// OpenAI response bodies and SSE chunks: exact shapes (parsed back and checked field by
// field, key order included), usage, logprob JSON in the chat and legacy formats
// (including a token that is a fragment of a UTF-8 character), and the SSE framing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace pagoda::server {
namespace {

// ---- responses ---------------------------------------------------------------------------------

TEST(Responses, UsageJson) {
  ordered_json u = usage_json({.prompt_tokens = 10, .completion_tokens = 5, .cached_tokens = 4});
  EXPECT_EQ(u.dump(), R"({"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,)"
                      R"("prompt_tokens_details":{"cached_tokens":4}})");
}

TEST(Responses, ChatCompletionShape) {
  std::string body = chat_response_json("chatcmpl-1", 1700000000, "m", "Hello!", "stop",
                                        {.prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 1},
                                        nullptr);
  ordered_json j = ordered_json::parse(body);
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["choices"].size(), 1u);
  const ordered_json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hello!");
  EXPECT_TRUE(c.contains("logprobs"));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  // Field order as OpenAI's.
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"id", "object", "created", "model", "choices", "usage"}));
}

TEST(Responses, TextCompletionShape) {
  ordered_json lp = completion_logprobs_json({{"a", -0.5f, {}}}, 0);
  std::string body = completion_response_json("cmpl-1", 5, "m", "abc", "length",
                                              {.prompt_tokens = 1, .completion_tokens = 3}, lp);
  ordered_json j = ordered_json::parse(body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"][0], "a");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(Responses, InvalidUtf8TextStillGivesValidJson) {
  std::string body = chat_response_json("id", 0, "m", "ab\xE2\x82", "length", {}, nullptr);
  EXPECT_TRUE(is_valid_utf8(body));
  ordered_json j = ordered_json::parse(body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "ab\xEF\xBF\xBD");
}

TEST(Responses, ChatLogprobsWithInvalidUtf8Token) {
  // "\xE2\x82" is the first two bytes of U+20AC: a token that cuts a character.
  std::vector<TokenLogprobInfo> toks = {
      {"\xE2\x82", -0.25f, {{"\xE2\x82", -0.25f}, {"x", -2.0f}}},
      {"\xAC!", -1.0f, {}},
      {"ok", -std::numeric_limits<float>::infinity(), {}},
  };
  ordered_json lp = chat_logprobs_json(toks);
  std::string text = dump_json(lp);
  ASSERT_TRUE(is_valid_utf8(text));
  ordered_json j = ordered_json::parse(text);
  ASSERT_EQ(j["content"].size(), 3u);
  const ordered_json& t0 = j["content"][0];
  EXPECT_EQ(t0["token"], "\xEF\xBF\xBD");  // one U+FFFD for the cut sequence
  EXPECT_EQ(t0["bytes"], ordered_json::parse("[226,130]"));
  EXPECT_DOUBLE_EQ(t0["logprob"].get<double>(), -0.25);
  ASSERT_EQ(t0["top_logprobs"].size(), 2u);
  EXPECT_EQ(t0["top_logprobs"][0]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(t0["top_logprobs"][0]["bytes"], ordered_json::parse("[226,130]"));
  EXPECT_EQ(t0["top_logprobs"][1]["token"], "x");
  EXPECT_EQ(t0["top_logprobs"][1]["bytes"], ordered_json::parse("[120]"));
  EXPECT_EQ(j["content"][1]["token"], "\xEF\xBF\xBD!");
  EXPECT_EQ(j["content"][1]["bytes"], ordered_json::parse("[172,33]"));
  EXPECT_TRUE(j["content"][1]["top_logprobs"].is_array());
  EXPECT_EQ(j["content"][2]["logprob"], -9999.0);  // -inf: JSON has no infinity
  // Logprobs print as the float's shortest decimal.
  std::string one = dump_json(chat_logprobs_json({{"a", -0.1f, {}}}));
  EXPECT_NE(one.find("\"logprob\":-0.1,"), std::string::npos) << one;
}

TEST(Responses, CompletionLogprobsLegacyFormat) {
  std::vector<TokenLogprobInfo> toks = {
      {"He", -0.5f, {{"He", -0.5f}, {"She", -1.5f}}},
      {"llo", -0.25f, {{"llo", -0.25f}}},
      {"\xE2\x82", -1.0f, {{"\xE2\x82", -1.0f}, {"\xE2\x83", -2.0f}}},  // both map to U+FFFD
  };
  ordered_json j = ordered_json::parse(dump_json(completion_logprobs_json(toks, 10)));
  EXPECT_EQ(j["tokens"], ordered_json::parse(R"(["He","llo","\ufffd"])"));
  EXPECT_EQ(j["token_logprobs"], ordered_json::parse("[-0.5,-0.25,-1.0]"));
  EXPECT_EQ(j["top_logprobs"][0], ordered_json::parse(R"({"He":-0.5,"She":-1.5})"));
  EXPECT_EQ(j["top_logprobs"][1], ordered_json::parse(R"({"llo":-0.25})"));
  EXPECT_EQ(j["top_logprobs"][2], ordered_json::parse(R"({"\ufffd":-1.0})"));  // the better stays
  EXPECT_EQ(j["text_offset"], ordered_json::parse("[10,12,15]"));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"tokens", "token_logprobs", "top_logprobs", "text_offset"}));
}

// ---- streaming -------------------------------------------------------------------------------

TEST(Streaming, SseEventFormat) {
  ordered_json c = chat_chunk_content("id", 1, "m", "hi", nullptr, false);
  std::string ev = sse_event(c);
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev.substr(0, 6), "data: ");
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  std::string payload = ev.substr(6, ev.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos);  // one line of JSON
  EXPECT_EQ(ordered_json::parse(payload), c);
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 in a chunk does not throw.
  std::string bad = sse_event(chat_chunk_content("id", 1, "m", "\xF0\x9F", nullptr, false));
  EXPECT_TRUE(is_valid_utf8(bad));
}

TEST(Streaming, ChatChunks) {
  ordered_json role = chat_chunk_role("chatcmpl-1", 7, "m");
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-1");
  EXPECT_EQ(role["created"], 7);
  EXPECT_EQ(role["choices"][0]["index"], 0);
  EXPECT_EQ(role["choices"][0]["delta"], ordered_json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(role.contains("usage"));
  EXPECT_TRUE(chat_chunk_role("c", 7, "m", true)["usage"].is_null());
  EXPECT_TRUE(chat_chunk_role("c", 7, "m", true).contains("usage"));

  ordered_json lp = chat_logprobs_json({{"hi", -0.5f, {}}});
  ordered_json content = chat_chunk_content("chatcmpl-1", 7, "m", "hi", lp, true);
  EXPECT_EQ(content["choices"][0]["delta"], ordered_json::parse(R"({"content":"hi"})"));
  EXPECT_EQ(content["choices"][0]["logprobs"]["content"][0]["token"], "hi");
  EXPECT_TRUE(content["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(content.contains("usage"));
  EXPECT_TRUE(content["usage"].is_null());
  EXPECT_FALSE(chat_chunk_content("c", 7, "m", "hi", nullptr, false).contains("usage"));

  ordered_json fin = chat_chunk_finish("chatcmpl-1", 7, "m", "length", false);
  EXPECT_EQ(fin["choices"][0]["delta"], ordered_json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(fin.contains("usage"));
  EXPECT_TRUE(chat_chunk_finish("c", 7, "m", "stop", true)["usage"].is_null());

  ordered_json usage = usage_chunk(ApiKind::Chat, "chatcmpl-1", 7, "m", {.prompt_tokens = 2, .completion_tokens = 3});
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], ordered_json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 5);
}

TEST(Streaming, CompletionChunks) {
  ordered_json c = completion_chunk("cmpl-1", 9, "m", "tok", nullptr, std::nullopt, false);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "tok");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(c["choices"][0].contains("logprobs"));
  EXPECT_FALSE(c.contains("usage"));
  ordered_json last = completion_chunk("cmpl-1", 9, "m", "", nullptr, std::string("stop"), true);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["usage"].is_null());
  ordered_json usage = usage_chunk(ApiKind::Completion, "cmpl-1", 9, "m", {.prompt_tokens = 1});
  EXPECT_EQ(usage["object"], "text_completion");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 1);
}

}  // namespace
}  // namespace pagoda::server
