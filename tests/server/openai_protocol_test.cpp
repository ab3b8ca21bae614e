#include "server/openai_protocol.h"

#include "server/api_error_expect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace pagoda::server {
namespace {

constexpr int32_t kVocab = 1000;

// A chat body with one user message plus `extra` fields ("" or a ",..." tail).
std::string chat_body(const std::string& extra = "") {
  return R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + extra + "}";
}
std::string completion_body(const std::string& extra = "") {
  return R"({"model":"m","prompt":"hello")" + extra + "}";
}

CompletionRequest chat(const std::string& extra) { return parse_chat_request(chat_body(extra), kVocab); }
CompletionRequest completion(const std::string& extra) {
  return parse_completion_request(completion_body(extra), kVocab);
}


// valid / sanitized UTF-8: tests/common/utf8_test.cpp.

// ---- body ------------------------------------------------------------------------

TEST(ParseBody, InvalidJsonIs400WithOneLineMessage) {
  EXPECT_API_ERROR(parse_chat_request("{", kVocab), "", "invalid JSON: ");
  EXPECT_API_ERROR(parse_chat_request("", kVocab), "", "invalid JSON: ");
  EXPECT_API_ERROR(parse_chat_request("{\"a\":\n\n}", kVocab), "", "invalid JSON: ");
  EXPECT_API_ERROR(parse_completion_request("{'prompt':'x'}", kVocab), "", "invalid JSON: ");
  EXPECT_API_ERROR(parse_chat_request(chat_body() + "x", kVocab), "", "invalid JSON: ");
  // A number beyond double's range is nlohmann's out_of_range, still a 400.
  EXPECT_API_ERROR(chat(R"(,"temperature":1e999)"), "", "invalid JSON: number overflow");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"1":-1e400})"), "", "invalid JSON: ");
  // A huge bad token is not quoted whole.
  try {
    parse_completion_request("{\"prompt\":\"" + std::string(100000, 'a') + "\xC3\"}", kVocab);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_TRUE(is_valid_utf8(e.what()));
  }
  // No "[json.exception..." prefix leaks out.
  try {
    parse_chat_request("{", kVocab);
  } catch (const ApiError& e) {
    EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
  }
}

TEST(ParseBody, InvalidUtf8InJsonTextIsRejectedByTheParser) {
  // nlohmann's lexer refuses ill-formed UTF-8 in strings, so it never reaches a field.
  EXPECT_API_ERROR(parse_completion_request("{\"prompt\":\"a\xC3\"}", kVocab), "", "invalid JSON");
  EXPECT_API_ERROR(parse_completion_request("{\"prompt\":\"\xED\xA0\x80\"}", kVocab), "",
                   "invalid JSON");
  EXPECT_API_ERROR(parse_completion_request("{\"prompt\":\"\xC0\xAF\"}", kVocab), "", "invalid JSON");
  EXPECT_API_ERROR(parse_completion_request("{\"prompt\":\"\xF4\x90\x80\x80\"}", kVocab), "",
                   "invalid JSON");
  EXPECT_API_ERROR(parse_chat_request("{\"messages\":[{\"role\":\"user\",\"content\":\"\xFF\"}]}", kVocab),
                   "", "invalid JSON");
  EXPECT_API_ERROR(parse_chat_request(chat_body(",\"stop\":\"\xE2\x82\""), kVocab), "", "invalid JSON");
  // A lone surrogate written as an escape is refused too.
  EXPECT_API_ERROR(parse_completion_request(R"({"prompt":"\ud800"})", kVocab), "", "invalid JSON");
  // The echoed bytes in the message are made valid UTF-8.
  try {
    parse_completion_request("{\"prompt\":\"a\xC3\"}", kVocab);
  } catch (const ApiError& e) {
    EXPECT_TRUE(is_valid_utf8(e.what())) << e.what();
  }
  // A well-formed escape pair decodes to one code point.
  auto r = parse_completion_request(R"({"prompt":"\ud83d\ude00"})", kVocab);
  EXPECT_EQ(*r.prompt_text, "\xF0\x9F\x98\x80");
}

TEST(ParseBody, NonObjectBodyIs400) {
  EXPECT_API_ERROR(parse_chat_request("[]", kVocab), "", "must be a JSON object");
  EXPECT_API_ERROR(parse_chat_request("\"text\"", kVocab), "", "must be a JSON object");
  EXPECT_API_ERROR(parse_completion_request("42", kVocab), "", "must be a JSON object");
  EXPECT_API_ERROR(parse_completion_request("null", kVocab), "", "must be a JSON object");
}

TEST(ParseBody, DeepNestingIsRefused) {
  std::string deep = completion_body(",\"x\":" + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_API_ERROR(parse_completion_request(deep, kVocab), "", "nested deeper than");
  // 60 levels are fine (ignored unknown field).
  std::string ok = completion_body(",\"x\":" + std::string(60, '[') + std::string(60, ']'));
  EXPECT_NO_THROW(parse_completion_request(ok, kVocab));
}

TEST(ParseBody, UnknownFieldsAreIgnored) {
  EXPECT_NO_THROW(chat(R"(,"frobnicate":{"a":[1,2]},"service_tier":"auto")"));
}

// ---- defaults ----------------------------------------------------------------------

TEST(ParseChat, DefaultsAreOpenAIs) {
  CompletionRequest r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}]})", kVocab);
  EXPECT_EQ(r.kind, ApiKind::Chat);
  EXPECT_EQ(r.model, "");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_TRUE(r.sampling.top_k == -1 || r.sampling.top_k == 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(r.sampling.seed, SamplingParams::kRandomSeed);
  EXPECT_TRUE(r.sampling.logit_bias.empty());
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_EQ(r.min_tokens, 0);
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(r.cache_key, "");
  EXPECT_TRUE(r.cache_prompt);
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_TRUE(r.chat_template_kwargs.is_null());
  EXPECT_FALSE(r.prompt_text.has_value());
  EXPECT_FALSE(r.prompt_tokens.has_value());
  EXPECT_FALSE(r.sampling.validate(kVocab).has_value());
}

TEST(ParseChat, NullMeansNotGiven) {
  CompletionRequest r = chat(R"(,"temperature":null,"max_tokens":null,"stop":null,"logit_bias":null,
      "seed":null,"n":null,"stream":null,"stream_options":null,"tools":null,"user":null,"logprobs":null)");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_TRUE(r.tools.is_null());
}

// ---- sampling fields: good and bad -------------------------------------------------

TEST(ParseSampling, Temperature) {
  EXPECT_FLOAT_EQ(chat(R"(,"temperature":0)").sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(chat(R"(,"temperature":0.7)").sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(chat(R"(,"temperature":2)").sampling.temperature, 2.0f);
  EXPECT_API_ERROR(chat(R"(,"temperature":"0.7")"), "temperature", "'temperature' must be a number");
  EXPECT_API_ERROR(chat(R"(,"temperature":true)"), "temperature", "must be a number");
  EXPECT_API_ERROR(chat(R"(,"temperature":2.01)"), "temperature", "'temperature' must be in [0, 2]");
  EXPECT_API_ERROR(chat(R"(,"temperature":-0.1)"), "temperature", "(got -0.1)");
}

TEST(ParseSampling, TopP) {
  EXPECT_FLOAT_EQ(chat(R"(,"top_p":0.9)").sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(chat(R"(,"top_p":1)").sampling.top_p, 1.0f);
  EXPECT_API_ERROR(chat(R"(,"top_p":0)"), "top_p", "'top_p' must be in (0, 1]");
  EXPECT_API_ERROR(chat(R"(,"top_p":1.5)"), "top_p", "must be in (0, 1]");
  EXPECT_API_ERROR(chat(R"(,"top_p":[1])"), "top_p", "must be a number");
}

TEST(ParseSampling, TopK) {
  EXPECT_EQ(chat(R"(,"top_k":40)").sampling.top_k, 40);
  EXPECT_EQ(chat(R"(,"top_k":-1)").sampling.top_k, -1);
  EXPECT_EQ(chat(R"(,"top_k":0)").sampling.top_k, 0);
  EXPECT_EQ(chat(R"(,"top_k":40.0)").sampling.top_k, 40);  // an integral number is an integer
  EXPECT_API_ERROR(chat(R"(,"top_k":-2)"), "top_k", "'top_k' must be >= -1");
  EXPECT_API_ERROR(chat(R"(,"top_k":4.5)"), "top_k", "'top_k' must be an integer");
  EXPECT_API_ERROR(chat(R"(,"top_k":"40")"), "top_k", "must be an integer");
  EXPECT_EQ(chat(R"(,"top_k":10000000000)").sampling.top_k, INT32_MAX);  // more than the vocab: off
}

TEST(ParseSampling, MinP) {
  EXPECT_FLOAT_EQ(chat(R"(,"min_p":0.05)").sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(chat(R"(,"min_p":1)").sampling.min_p, 1.0f);
  EXPECT_API_ERROR(chat(R"(,"min_p":-0.01)"), "min_p", "'min_p' must be in [0, 1]");
  EXPECT_API_ERROR(chat(R"(,"min_p":1.01)"), "min_p", "must be in [0, 1]");
  EXPECT_API_ERROR(chat(R"(,"min_p":{})"), "min_p", "must be a number");
}

TEST(ParseSampling, Penalties) {
  CompletionRequest r = chat(R"(,"presence_penalty":-2,"frequency_penalty":2,"repetition_penalty":1.1)");
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.sampling.penalty_last_n, -1);  // OpenAI: over every generated token
  EXPECT_API_ERROR(chat(R"(,"presence_penalty":2.5)"), "presence_penalty", "must be in [-2, 2]");
  EXPECT_API_ERROR(chat(R"(,"frequency_penalty":-3)"), "frequency_penalty", "must be in [-2, 2]");
  EXPECT_API_ERROR(chat(R"(,"presence_penalty":"1")"), "presence_penalty", "must be a number");
  EXPECT_API_ERROR(chat(R"(,"repetition_penalty":0)"), "repetition_penalty", "must be > 0");
  EXPECT_API_ERROR(chat(R"(,"repetition_penalty":-1)"), "repetition_penalty", "must be > 0");
  EXPECT_API_ERROR(chat(R"(,"repetition_penalty":null,"frequency_penalty":false)"), "frequency_penalty",
                   "must be a number");
}

TEST(ParseSampling, SeedTakesAnyInt64) {
  EXPECT_EQ(chat(R"(,"seed":42)").sampling.seed, 42u);
  EXPECT_EQ(chat(R"(,"seed":0)").sampling.seed, 0u);
  EXPECT_EQ(chat(R"(,"seed":-2)").sampling.seed, static_cast<uint64_t>(int64_t{-2}));
  EXPECT_EQ(chat(R"(,"seed":-1)").sampling.seed, SamplingParams::kRandomSeed);
  EXPECT_EQ(chat(R"(,"seed":9223372036854775807)").sampling.seed, uint64_t{9223372036854775807u});
  EXPECT_EQ(chat(R"(,"seed":-9223372036854775808)").sampling.seed, uint64_t{1} << 63);
  EXPECT_API_ERROR(chat(R"(,"seed":9223372036854775808)"), "seed", "'seed' is out of range");
  EXPECT_API_ERROR(chat(R"(,"seed":1.5)"), "seed", "'seed' must be an integer");
  EXPECT_API_ERROR(chat(R"(,"seed":"7")"), "seed", "must be an integer");
  EXPECT_API_ERROR(chat(R"(,"seed":1e300)"), "seed", "must be an integer");
}

TEST(ParseSampling, LogitBias) {
  CompletionRequest r = chat(R"(,"logit_bias":{"5":-100,"999":100,"0":2.5})");
  ASSERT_EQ(r.sampling.logit_bias.size(), 3u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));
  EXPECT_EQ(r.sampling.logit_bias[1], (std::pair<int32_t, float>{999, 100.0f}));
  EXPECT_EQ(r.sampling.logit_bias[2], (std::pair<int32_t, float>{0, 2.5f}));
  EXPECT_TRUE(chat(R"(,"logit_bias":{})").sampling.logit_bias.empty());
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"abc":1})"), "logit_bias", "key \"abc\" is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"05":1})"), "logit_bias", "is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"+5":1})"), "logit_bias", "is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"5 ":1})"), "logit_bias", "is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"":1})"), "logit_bias", "is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"99999999999999999999999":1})"), "logit_bias",
                   "is not a token id");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"1000":1})"), "logit_bias",
                   "token id 1000 is outside the vocabulary [0, 1000)");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"-1":1})"), "logit_bias", "token id -1 is outside");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"5":100.5})"), "logit_bias", "must be in [-100, 100]");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"5":"1"})"), "logit_bias", "value for token 5 must be a number");
  EXPECT_API_ERROR(chat(R"(,"logit_bias":[1,2])"), "logit_bias", "'logit_bias' must be an object");
  // A key with a newline is echoed escaped: the message stays on one line.
  EXPECT_API_ERROR(chat(R"(,"logit_bias":{"a\nb":1})"), "logit_bias", "\"a\\nb\"");
}

TEST(ParseSampling, ValidateIsTheFinalCheck) {
  // n_vocab bounds ids through SamplingParams::validate too; all good here.
  CompletionRequest r = chat(R"(,"temperature":0,"top_k":1,"logit_bias":{"1":-100})");
  EXPECT_FALSE(r.sampling.validate(kVocab).has_value());
}

// ---- generation limits, n, stop -----------------------------------------------------

TEST(ParseLimits, MaxTokensAndAlias) {
  EXPECT_EQ(chat(R"(,"max_tokens":16)").max_tokens, 16);
  EXPECT_EQ(chat(R"(,"max_completion_tokens":8)").max_tokens, 8);
  EXPECT_EQ(chat(R"(,"max_tokens":16,"max_completion_tokens":8)").max_tokens, 8);  // alias wins
  EXPECT_EQ(chat(R"(,"max_completion_tokens":8,"max_tokens":16)").max_tokens, 8);
  EXPECT_API_ERROR(chat(R"(,"max_tokens":0)"), "max_tokens", "'max_tokens' must be >= 1 (got 0)");
  EXPECT_API_ERROR(chat(R"(,"max_tokens":-1)"), "max_tokens", "must be >= 1");
  EXPECT_API_ERROR(chat(R"(,"max_completion_tokens":0)"), "max_completion_tokens", "must be >= 1");
  EXPECT_API_ERROR(chat(R"(,"max_tokens":"16")"), "max_tokens", "'max_tokens' must be an integer");
  EXPECT_API_ERROR(chat(R"(,"max_tokens":1.5)"), "max_tokens", "must be an integer");
  // The losing alias is still validated.
  EXPECT_API_ERROR(chat(R"(,"max_tokens":0,"max_completion_tokens":8)"), "max_tokens", "must be >= 1");
}

TEST(ParseLimits, MinTokens) {
  EXPECT_EQ(chat(R"(,"min_tokens":0)").min_tokens, 0);
  EXPECT_EQ(chat(R"(,"min_tokens":5,"max_tokens":5)").min_tokens, 5);
  EXPECT_EQ(chat(R"(,"min_tokens":500)").min_tokens, 500);  // no max_tokens: no bound
  EXPECT_API_ERROR(chat(R"(,"min_tokens":-1)"), "min_tokens", "'min_tokens' must be >= 0");
  EXPECT_API_ERROR(chat(R"(,"min_tokens":6,"max_tokens":5)"), "min_tokens", "must not exceed 'max_tokens'");
  EXPECT_API_ERROR(chat(R"(,"min_tokens":"1")"), "min_tokens", "must be an integer");
}

TEST(ParseLimits, NMustBeOne) {
  EXPECT_NO_THROW(chat(R"(,"n":1)"));
  EXPECT_API_ERROR(chat(R"(,"n":2)"), "n", "'n' must be 1");
  EXPECT_API_ERROR(chat(R"(,"n":0)"), "n", "'n' must be 1");
  EXPECT_API_ERROR(chat(R"(,"n":"1")"), "n", "must be an integer");
  EXPECT_API_ERROR(completion(R"(,"n":3)"), "n", "'n' must be 1");
}

TEST(ParseLimits, IgnoreEos) {
  EXPECT_TRUE(chat(R"(,"ignore_eos":true)").ignore_eos);
  EXPECT_API_ERROR(chat(R"(,"ignore_eos":1)"), "ignore_eos", "'ignore_eos' must be a boolean");
}

TEST(ParseStop, StringOrArray) {
  EXPECT_EQ(chat(R"(,"stop":"END")").stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(chat(R"(,"stop":["a","\n\n"])").stop, (std::vector<std::string>{"a", "\n\n"}));
  EXPECT_TRUE(chat(R"(,"stop":[])").stop.empty());
  std::string sixteen = R"(,"stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16")";
  EXPECT_EQ(chat(sixteen + "]").stop.size(), 16u);
  EXPECT_API_ERROR(chat(sixteen + ",\"17\"]"), "stop", "at most 16 strings (got 17)");
  EXPECT_API_ERROR(chat(R"(,"stop":"")"), "stop", "must not be empty");
  EXPECT_API_ERROR(chat(R"(,"stop":["a",""])"), "stop", "must not be empty");
  EXPECT_API_ERROR(chat(R"(,"stop":["a",1])"), "stop", "'stop' must be a string or an array of strings");
  EXPECT_API_ERROR(chat(R"(,"stop":5)"), "stop", "must be a string or an array");
  EXPECT_API_ERROR(chat(R"(,"stop":{"a":1})"), "stop", "must be a string or an array");
}

// ---- stream, logprobs ------------------------------------------------------------------

TEST(ParseStream, StreamAndOptions) {
  CompletionRequest r = chat(R"(,"stream":true,"stream_options":{"include_usage":true})");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(chat(R"(,"stream":true,"stream_options":{})").include_usage);
  // stream_options without stream is accepted (OpenAI refuses it; harmless here).
  EXPECT_TRUE(chat(R"(,"stream_options":{"include_usage":true})").include_usage);
  EXPECT_API_ERROR(chat(R"(,"stream":"yes")"), "stream", "'stream' must be a boolean");
  EXPECT_API_ERROR(chat(R"(,"stream_options":true)"), "stream_options", "must be an object");
  EXPECT_API_ERROR(chat(R"(,"stream_options":{"include_usage":1})"), "stream_options.include_usage",
                   "must be a boolean");
}

TEST(ParseLogprobs, ChatBoolAndTopLogprobs) {
  CompletionRequest r = chat(R"(,"logprobs":true,"top_logprobs":20)");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_TRUE(chat(R"(,"logprobs":true)").logprobs);
  EXPECT_EQ(chat(R"(,"logprobs":true)").top_logprobs, 0);
  EXPECT_NO_THROW(chat(R"(,"top_logprobs":0)"));
  EXPECT_API_ERROR(chat(R"(,"top_logprobs":3)"), "top_logprobs", "requires 'logprobs': true");
  EXPECT_API_ERROR(chat(R"(,"logprobs":false,"top_logprobs":3)"), "top_logprobs", "requires");
  EXPECT_API_ERROR(chat(R"(,"logprobs":true,"top_logprobs":21)"), "top_logprobs", "must be in [0, 20]");
  EXPECT_API_ERROR(chat(R"(,"logprobs":true,"top_logprobs":-1)"), "top_logprobs", "must be in [0, 20]");
  EXPECT_API_ERROR(chat(R"(,"logprobs":1)"), "logprobs", "'logprobs' must be a boolean");
  EXPECT_API_ERROR(chat(R"(,"logprobs":true,"top_logprobs":"2")"), "top_logprobs", "must be an integer");
}

TEST(ParseLogprobs, CompletionIntegerMeansOnWithAlternatives) {
  CompletionRequest r = completion(R"(,"logprobs":3)");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  r = completion(R"(,"logprobs":0)");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_FALSE(completion("").logprobs);
  EXPECT_FALSE(completion(R"(,"logprobs":null)").logprobs);
  EXPECT_API_ERROR(completion(R"(,"logprobs":6)"), "logprobs", "must be in [0, 5]");
  EXPECT_API_ERROR(completion(R"(,"logprobs":-1)"), "logprobs", "must be in [0, 5]");
  EXPECT_API_ERROR(completion(R"(,"logprobs":true)"), "logprobs", "'logprobs' must be an integer");
}

// ---- cache key and the rest ---------------------------------------------------------------

TEST(ParseCache, CacheKeyConstruction) {
  EXPECT_EQ(chat("").cache_key, "");
  EXPECT_EQ(chat(R"(,"prompt_cache_key":"k1")").cache_key, "k:k1");
  EXPECT_EQ(chat(R"(,"cache_salt":"s1")").cache_key, "s:s1");
  EXPECT_EQ(chat(R"(,"prompt_cache_key":"k1","cache_salt":"s1")").cache_key, "k:k1\x1fs:s1");
  EXPECT_EQ(chat(R"(,"prompt_cache_key":"","cache_salt":"")").cache_key, "");
  // Same salt, different keys: different namespaces.
  EXPECT_NE(chat(R"(,"prompt_cache_key":"a","cache_salt":"s")").cache_key,
            chat(R"(,"prompt_cache_key":"b","cache_salt":"s")").cache_key);
  // A key alone never equals a salt alone.
  EXPECT_NE(chat(R"(,"prompt_cache_key":"x")").cache_key, chat(R"(,"cache_salt":"x")").cache_key);
  // No key can spell another tenant's salt.
  EXPECT_API_ERROR(chat(R"(,"prompt_cache_key":"a\u001fs:s")"), "prompt_cache_key", "U+001F");
  EXPECT_API_ERROR(chat(R"(,"cache_salt":"a\u001f")"), "cache_salt", "U+001F");
  EXPECT_API_ERROR(chat(R"(,"prompt_cache_key":5)"), "prompt_cache_key", "must be a string");
  EXPECT_API_ERROR(chat(R"(,"cache_salt":["s"])"), "cache_salt", "must be a string");
}

TEST(ParseCache, CachePromptUserModel) {
  CompletionRequest r = chat(R"(,"cache_prompt":false,"user":"u-1")");
  EXPECT_FALSE(r.cache_prompt);
  EXPECT_EQ(r.model, "m");
  EXPECT_API_ERROR(chat(R"(,"cache_prompt":"no")"), "cache_prompt", "must be a boolean");
  EXPECT_API_ERROR(chat(R"(,"user":1)"), "user", "'user' must be a string");
  EXPECT_API_ERROR(parse_chat_request(R"({"model":1,"messages":[{"role":"user","content":"x"}]})", kVocab),
                   "model", "'model' must be a string");
}

// ---- chat messages ---------------------------------------------------------------------------

TEST(ParseMessages, KeepsMessagesAndJoinsTextParts) {
  CompletionRequest r = parse_chat_request(R"({"messages":[
      {"role":"system","content":"be brief"},
      {"role":"developer","content":"dev"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"bob"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","content":"42","tool_call_id":"c1"},
      {"role":"user","content":[]}]})",
                                           kVocab);
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[1]["role"], "developer");
  EXPECT_EQ(r.messages[2]["content"], "ab");
  EXPECT_EQ(r.messages[2]["name"], "bob");
  EXPECT_TRUE(r.messages[3]["content"].is_null());
  EXPECT_EQ(r.messages[3]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[4]["tool_call_id"], "c1");
  EXPECT_EQ(r.messages[5]["content"], "");
}

TEST(ParseMessages, AssistantWithToolCallsMayOmitContent) {
  CompletionRequest r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[]}]})", kVocab);
  EXPECT_TRUE(r.messages[1].contains("content"));
  EXPECT_TRUE(r.messages[1]["content"].is_null());
}

TEST(ParseMessages, BadShapesAre400) {
  auto parse = [](const std::string& messages) {
    return parse_chat_request(R"({"messages":)" + messages + "}", kVocab);
  };
  EXPECT_API_ERROR(parse_chat_request("{}", kVocab), "messages", "'messages' is required");
  EXPECT_API_ERROR(parse("[]"), "messages", "'messages' must not be empty");
  EXPECT_API_ERROR(parse(R"("hi")"), "messages", "'messages' must be an array");
  EXPECT_API_ERROR(parse(R"(["hi"])"), "messages[0]", "'messages[0]' must be an object");
  EXPECT_API_ERROR(parse(R"([{"content":"x"}])"), "messages[0].role", "is required");
  EXPECT_API_ERROR(parse(R"([{"role":1,"content":"x"}])"), "messages[0].role", "must be a string");
  EXPECT_API_ERROR(parse(R"([{"role":"robot","content":"x"}])"), "messages[0].role",
                   "must be one of system, user, assistant, tool, developer (got \"robot\")");
  EXPECT_API_ERROR(parse(R"([{"role":"user"}])"), "messages[0].content", "is required");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":null}])"), "messages[0].content", "is required");
  EXPECT_API_ERROR(parse(R"([{"role":"assistant","content":null}])"), "messages[0].content", "is required");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":"a"},{"role":"user","content":5}])"),
                   "messages[1].content", "must be a string or an array of content parts");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}])"),
                   "messages[0].content[0]", "only text and image_url content parts are supported");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":[{"type":"image_url"}]}])"),
                   "messages[0].content[0].image_url", "is required");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":5}}]}])"),
                   "messages[0].content[0].image_url", "must be an object");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":[{"text":"no type"}]}])"), "messages[0].content[0]",
                   "only text and image_url content parts are supported");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":["raw"]}])"), "messages[0].content[0]",
                   "must be an object");
  EXPECT_API_ERROR(parse(R"([{"role":"user","content":[{"type":"text","text":5}]}])"),
                   "messages[0].content[0].text", "must be a string");
  EXPECT_API_ERROR(parse(R"([{"role":"assistant","content":"x","tool_calls":{}}])"),
                   "messages[0].tool_calls", "must be an array");
}

TEST(ParseChat, ToolsAndTemplateKwargs) {
  CompletionRequest r = chat(R"(,"tools":[{"type":"function","function":{"name":"f"}}],
      "chat_template_kwargs":{"enable_thinking":false})");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_API_ERROR(chat(R"(,"tools":{})"), "tools", "'tools' must be an array");
  EXPECT_API_ERROR(chat(R"(,"chat_template_kwargs":[])"), "chat_template_kwargs", "must be an object");
}

// ---- completion prompts ---------------------------------------------------------------------

TEST(ParsePrompt, StringTokensOrSingletonArray) {
  CompletionRequest r = completion("");
  EXPECT_EQ(r.kind, ApiKind::Completion);
  ASSERT_TRUE(r.prompt_text.has_value());
  EXPECT_EQ(*r.prompt_text, "hello");
  EXPECT_FALSE(r.prompt_tokens.has_value());

  r = parse_completion_request(R"({"prompt":[1,2,999]})", kVocab);
  ASSERT_TRUE(r.prompt_tokens.has_value());
  EXPECT_EQ(*r.prompt_tokens, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_FALSE(r.prompt_text.has_value());

  r = parse_completion_request(R"({"prompt":["only one"]})", kVocab);
  EXPECT_EQ(*r.prompt_text, "only one");
  r = parse_completion_request(R"({"prompt":[[7,8]]})", kVocab);
  EXPECT_EQ(*r.prompt_tokens, (std::vector<int32_t>{7, 8}));
}

TEST(ParsePrompt, BadPromptsAre400) {
  auto parse = [](const std::string& prompt) {
    return parse_completion_request(R"({"prompt":)" + prompt + "}", kVocab);
  };
  EXPECT_API_ERROR(parse_completion_request("{}", kVocab), "prompt", "'prompt' is required");
  EXPECT_API_ERROR(parse("null"), "prompt", "'prompt' is required");
  EXPECT_API_ERROR(parse(R"("")"), "prompt", "must not be empty");
  EXPECT_API_ERROR(parse("[]"), "prompt", "must not be empty");
  EXPECT_API_ERROR(parse(R"([""])"), "prompt", "must not be empty");
  EXPECT_API_ERROR(parse("[[]]"), "prompt", "must not be empty");
  EXPECT_API_ERROR(parse(R"(["a","b"])"), "prompt", "batches of prompts are not supported");
  EXPECT_API_ERROR(parse("[[1],[2]]"), "prompt", "batches of prompts are not supported");
  EXPECT_API_ERROR(parse("[1000]"), "prompt", "token id 1000 is outside the vocabulary [0, 1000)");
  EXPECT_API_ERROR(parse("[-1]"), "prompt", "token id -1 is outside");
  EXPECT_API_ERROR(parse("[1,2.5]"), "prompt", "array of token ids");
  EXPECT_API_ERROR(parse(R"([1,"a"])"), "prompt", "array of token ids");
  EXPECT_API_ERROR(parse("5"), "prompt", "must be a string or an array of token ids");
  EXPECT_API_ERROR(parse("{}"), "prompt", "must be a string or an array of token ids");
}

TEST(ParsePrompt, CompletionOnlyFields) {
  EXPECT_FALSE(completion(R"(,"echo":false)").echo);
  EXPECT_API_ERROR(completion(R"(,"echo":true)"), "echo", "'echo' is not supported");
  EXPECT_NO_THROW(completion(R"(,"best_of":1)"));
  EXPECT_API_ERROR(completion(R"(,"best_of":2)"), "best_of", "'best_of' must be 1");
  EXPECT_NO_THROW(completion(R"(,"suffix":"")"));
  EXPECT_API_ERROR(completion(R"(,"suffix":"x")"), "suffix", "not supported");
  // The shared fields work on completions too.
  CompletionRequest r = completion(R"(,"max_tokens":4,"stop":"\n","temperature":0,"seed":3)");
  EXPECT_EQ(r.max_tokens, 4);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.seed, 3u);
}

// ---- llama-server utility endpoints -------------------------------------------------------------
TEST(Tokenize, ParseRequest) {
  TokenizeRequest r = parse_tokenize_request(R"({"content":"hello"})");
  EXPECT_EQ(r.content, "hello");
  EXPECT_FALSE(r.add_special);
  EXPECT_FALSE(r.with_pieces);
  r = parse_tokenize_request(R"({"content":"","add_special":true,"with_pieces":true})");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.add_special);
  EXPECT_TRUE(r.with_pieces);
  EXPECT_API_ERROR(parse_tokenize_request("{}"), "content", "'content' is required");
  EXPECT_API_ERROR(parse_tokenize_request(R"({"content":1})"), "content", "must be a string");
  EXPECT_API_ERROR(parse_tokenize_request(R"({"content":"x","add_special":"yes"})"), "add_special",
                   "must be a boolean");
  EXPECT_API_ERROR(parse_tokenize_request("[1]"), "", "must be a JSON object");
}

TEST(Tokenize, ResponseShapes) {
  EXPECT_EQ(tokenize_response_json({1, 2, 3}, nullptr), R"({"tokens":[1,2,3]})");
  EXPECT_EQ(tokenize_response_json({}, nullptr), R"({"tokens":[]})");
  std::vector<std::string> pieces = {"He", "\xE2\x82", "\xAC"};
  std::string body = tokenize_response_json({5, 6, 7}, &pieces);
  EXPECT_TRUE(is_valid_utf8(body));
  EXPECT_EQ(ordered_json::parse(body), ordered_json::parse(
      R"({"tokens":[{"id":5,"piece":"He"},{"id":6,"piece":[226,130]},{"id":7,"piece":[172]}]})"));
}

TEST(Detokenize, ParseRequest) {
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2,999]})", kVocab), (std::vector<int32_t>{1, 2, 999}));
  EXPECT_TRUE(parse_detokenize_request("{}", kVocab).empty());
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens":[]})", kVocab).empty());
  EXPECT_API_ERROR(parse_detokenize_request(R"({"tokens":[1000]})", kVocab), "tokens", "outside the vocabulary");
  EXPECT_API_ERROR(parse_detokenize_request(R"({"tokens":[-1]})", kVocab), "tokens", "outside the vocabulary");
  EXPECT_API_ERROR(parse_detokenize_request(R"({"tokens":["a"]})", kVocab), "tokens", "token ids");
  EXPECT_API_ERROR(parse_detokenize_request(R"({"tokens":"1 2"})", kVocab), "tokens", "must be an array");
}

TEST(ApplyTemplate, ParseRequest) {
  ApplyTemplateRequest r = parse_apply_template_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[]})");
  EXPECT_EQ(r.messages[0]["content"], "x");
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_TRUE(r.add_generation_prompt);
  r = parse_apply_template_request(R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false})");
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_API_ERROR(parse_apply_template_request("{}"), "messages", "is required");
  EXPECT_API_ERROR(parse_apply_template_request(R"({"messages":[]})"), "messages", "must not be empty");
  EXPECT_API_ERROR(parse_apply_template_request(R"({"messages":[{"role":"user","content":"x"}],
      "add_generation_prompt":1})"), "add_generation_prompt", "must be a boolean");
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
TEST(SamplingDefaults, FillOnlyTheFieldsARequestLeavesOut) {
  SamplingDefaults d;
  d.temperature = 0.6f;
  d.top_k = 20;
  CompletionRequest r = parse_completion_request(R"({"prompt":"x","top_k":5})", 100, d);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.6f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  CompletionRequest c = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"temperature":0})", 100, d);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.0f);
  EXPECT_EQ(c.sampling.top_k, 20);
}
}  // namespace pagoda::server
