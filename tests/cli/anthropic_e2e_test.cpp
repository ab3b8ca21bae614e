// `pagoda serve`'s Anthropic Messages API end to end on stories260K: the real binary on
// a free loopback port, driven by a plain-socket HTTP client. Checks the message and
// SSE event shapes, that a stream's text_deltas concatenate to the non-streaming text
// (greedy), tool_use under a forced tool_choice, thinking blocks (a template that opens
// the thinking block), stop sequences, the prefix cache in
// usage, count_tokens, x-api-key auth and Anthropic-shaped errors with their statuses.
// (The official @anthropic-ai/sdk is not in the offline npm cache, so no SDK test.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::vector<std::string> kKey = {"x-api-key: sekrit"};

// The events of an Anthropic SSE body: ("event" name, parsed data), in order. Every event
// must have both lines and the data's "type" must equal the event name.
std::vector<std::pair<std::string, json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t i = 0;
  while (i < body.size()) {
    const size_t end = body.find("\n\n", i);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(i, end - i);
    i = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_NE(nl, std::string::npos) << ev;
    if (nl == std::string::npos) continue;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    json data = json::parse(ev.substr(nl + 7), nullptr, false);
    EXPECT_FALSE(data.is_discarded()) << ev;
    const std::string name = ev.substr(7, nl - 7);
    EXPECT_EQ(data["type"], name) << ev;
    out.emplace_back(name, std::move(data));
  }
  return out;
}

// An Anthropic error object with the given status and error type.
void expect_error(const HttpResult& r, int status, const std::string& type, const std::string& needle = {}) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["type"], "error") << r.body;
  EXPECT_EQ(j["error"]["type"], type) << r.body;
  ASSERT_TRUE(j["error"]["message"].is_string()) << r.body;
  if (!needle.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
}

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

class Anthropic : public pagoda::testing::SuiteServer<Anthropic> {
 protected:
  static void SetUpTestSuite() {
    start_server({"-m", kStories, "-t", "1", "--parallel", "2", "--ctx-size", "512",
                  "--kv-cache-bytes", "16MiB", "--api-key", "sekrit"});
  }
  static HttpResult post(const std::string& path, const json& body, const std::vector<std::string>& headers = kKey) {
    return http(port_, "POST", path, body.dump(), headers);
  }
  static json ok(const HttpResult& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  }

};

TEST_F(Anthropic, StreamedTextDeltasEqualTheNonStreamingMessage) {
  json req{{"model", "stories260K.gguf"},
           {"system", json::array({{{"type", "text"}, {"text", "You tell stories."}}})},
           {"messages", json::array({user("Tell me a story.")})},
           {"max_tokens", 24},
           {"temperature", 0},
           {"metadata", {{"user_id", "u"}}}};
  json m = ok(post("/v1/messages", req));
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u) << m;
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "stories260K.gguf");
  ASSERT_EQ(m["content"].size(), 1u) << m;
  EXPECT_EQ(m["content"][0]["type"], "text");
  const std::string text = m["content"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_EQ(m["usage"]["output_tokens"], 24);
  EXPECT_EQ(m["usage"]["cache_creation_input_tokens"], 0);

  req["stream"] = true;
  HttpResult s = post("/v1/messages", req);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["content-type"].rfind("text/event-stream", 0), 0u);
  auto events = sse_events(s.body);
  ASSERT_GE(events.size(), 7u) << s.body;
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  EXPECT_EQ(names[0], "message_start");
  EXPECT_EQ(names[1], "ping");
  EXPECT_EQ(names[2], "content_block_start");
  EXPECT_EQ(names[names.size() - 3], "content_block_stop");
  EXPECT_EQ(names[names.size() - 2], "message_delta");
  EXPECT_EQ(names.back(), "message_stop");
  const json& start = events[0].second["message"];
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_TRUE(start["content"].empty());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(events[2].second["content_block"], json({{"type", "text"}, {"text", ""}}));
  std::string streamed;
  for (size_t i = 3; i + 3 < events.size(); ++i) {
    EXPECT_EQ(names[i], "content_block_delta");
    EXPECT_EQ(events[i].second["index"], 0);
    EXPECT_EQ(events[i].second["delta"]["type"], "text_delta");
    streamed += events[i].second["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  const json& delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(delta["usage"]["output_tokens"], 24);
  // The whole prompt is accounted for, whatever part of it came from the cache.
  EXPECT_EQ(delta["usage"]["input_tokens"].get<int>() + delta["usage"]["cache_read_input_tokens"].get<int>(),
            start["usage"]["input_tokens"].get<int>());
}

TEST_F(Anthropic, RepeatedConversationReadsThePrefixCacheAndCountTokensMatches) {
  json req{{"system", "Once upon a time, there was a little dog named Max. Max liked to run in the park."},
           {"messages", json::array({user("What did Max do next?")})},
           {"max_tokens", 4},
           {"temperature", 0}};
  json first = ok(post("/v1/messages", req));
  json second = ok(post("/v1/messages", req));
  const int prompt = first["usage"]["input_tokens"].get<int>() + first["usage"]["cache_read_input_tokens"].get<int>();
  EXPECT_GT(second["usage"]["cache_read_input_tokens"].get<int>(), 16) << second;
  EXPECT_EQ(second["usage"]["input_tokens"].get<int>() + second["usage"]["cache_read_input_tokens"].get<int>(), prompt);

  json count_req = req;
  count_req.erase("max_tokens");  // count_tokens takes the body without it
  json count = ok(post("/v1/messages/count_tokens", count_req));
  EXPECT_EQ(count, json({{"input_tokens", prompt}}));
  // Another turn makes the prompt longer.
  count_req["messages"].push_back({{"role", "assistant"}, {"content", "He ran."}});
  count_req["messages"].push_back(user("And then?"));
  EXPECT_GT(ok(post("/v1/messages/count_tokens", count_req))["input_tokens"].get<int>(), prompt);
}

// A last assistant message is continued: the same greedy text as a completion of the
// rendered conversation followed by that text.
TEST_F(Anthropic, AssistantPrefillIsContinued) {
  const json history = json::array({user("Tell me a story.")});
  json req{{"messages", history}, {"max_tokens", 12}, {"temperature", 0}};
  req["messages"].push_back({{"role", "assistant"}, {"content", "Once upon a time, a dog"}});
  json m = ok(post("/v1/messages", req));
  ASSERT_EQ(m["content"].size(), 1u) << m;

  const std::string rendered = ok(post("/apply-template", {{"messages", history}}))["prompt"];
  json c = ok(post("/v1/completions",
                   {{"prompt", rendered + "Once upon a time, a dog"}, {"max_tokens", 12}, {"temperature", 0}}));
  EXPECT_EQ(m["content"][0]["text"], c["choices"][0]["text"]) << m << c;
  EXPECT_EQ(m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>(),
            c["usage"]["prompt_tokens"].get<int>());
}

TEST_F(Anthropic, StopSequenceEndsTheMessage) {
  json req{{"messages", json::array({user("Tell me a story.")})}, {"max_tokens", 40}, {"temperature", 0}};
  const std::string text = ok(post("/v1/messages", req))["content"][0]["text"];
  ASSERT_GE(text.size(), 12u) << text;
  const std::string stop = text.substr(8, 3);
  req["stop_sequences"] = {stop};
  json m = ok(post("/v1/messages", req));
  EXPECT_EQ(m["stop_reason"], "stop_sequence") << m;
  EXPECT_EQ(m["stop_sequence"], stop);
  const std::string cut = m["content"].empty() ? "" : m["content"][0]["text"].get<std::string>();
  EXPECT_EQ(cut, text.substr(0, text.find(stop))) << m;
}

TEST_F(Anthropic, ForcedToolGivesAToolUseBlockStreamedAsInputJsonDeltas) {
  json tools = json::parse(R"([{"name":"get_time","description":"The time in a zone","input_schema":
    {"type":"object","properties":{"zone":{"type":"string","pattern":"^[A-Z]{3}$"}},"required":["zone"],
     "additionalProperties":false}}])");
  json req{{"messages", json::array({user("What time is it?")})},
           {"tools", tools},
           {"tool_choice", {{"type", "tool"}, {"name", "get_time"}, {"disable_parallel_tool_use", true}}},
           {"max_tokens", 200},
           {"temperature", 0}};
  json m = ok(post("/v1/messages", req));
  EXPECT_EQ(m["stop_reason"], "tool_use") << m;
  ASSERT_EQ(m["content"].size(), 1u) << m;
  const json& block = m["content"][0];
  EXPECT_EQ(block["type"], "tool_use");
  EXPECT_EQ(block["name"], "get_time");
  EXPECT_EQ(block["id"].get<std::string>().rfind("toolu_", 0), 0u) << block;
  ASSERT_TRUE(block["input"].is_object()) << block;
  ASSERT_TRUE(block["input"]["zone"].is_string()) << block;
  EXPECT_EQ(block["input"]["zone"].get<std::string>().size(), 3u);

  req["stream"] = true;
  HttpResult s = post("/v1/messages", req);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string partial;
  json started;
  std::string stop_reason;
  for (const auto& [name, data] : sse_events(s.body)) {
    if (name == "content_block_start") started = data["content_block"];
    if (name == "content_block_delta") {
      EXPECT_EQ(data["delta"]["type"], "input_json_delta") << data;
      partial += data["delta"]["partial_json"].get<std::string>();
    }
    if (name == "message_delta") stop_reason = data["delta"]["stop_reason"];
  }
  EXPECT_EQ(started["type"], "tool_use");
  EXPECT_EQ(started["name"], "get_time");
  EXPECT_EQ(started["input"], json::object());
  EXPECT_EQ(json::parse(partial), block["input"]) << partial;
  EXPECT_EQ(stop_reason, "tool_use");

  // The next turn sends the call and its result back; the template renders them.
  json turn{{"messages", json::array({user("What time is it?"),
                                      {{"role", "assistant"}, {"content", json::array({block})}},
                                      {{"role", "user"},
                                       {"content", json::array({{{"type", "tool_result"},
                                                                 {"tool_use_id", block["id"]},
                                                                 {"content", "12:00"}}})}}})},
            {"tools", tools},
            {"max_tokens", 4}};
  json next = ok(post("/v1/messages", turn));
  EXPECT_EQ(next["type"], "message") << next;
}

TEST_F(Anthropic, ApiKeyByHeaderOrBearerAndErrorsInAnthropicShape) {
  const json good{{"messages", json::array({user("Hi")})}, {"max_tokens", 2}};
  EXPECT_EQ(post("/v1/messages", good, {"Authorization: Bearer sekrit"}).status, 200);
  expect_error(post("/v1/messages", good, {}), 401, "authentication_error");
  expect_error(post("/v1/messages", good, {"x-api-key: wrong"}), 401, "authentication_error");
  expect_error(post("/v1/messages/count_tokens", good, {}), 401, "authentication_error");
  expect_error(http(port_, "GET", "/v1/messages", {}, kKey), 405, "invalid_request_error");

  expect_error(http(port_, "POST", "/v1/messages", "{not json", kKey), 400, "invalid_request_error", "invalid JSON");
  expect_error(post("/v1/messages", {{"messages", json::array({user("Hi")})}}), 400, "invalid_request_error",
               "max_tokens");
  json image = good;
  image["messages"][0]["content"] = json::array({{{"type", "image"}, {"source", json::object()}}});
  expect_error(post("/v1/messages", image), 400, "invalid_request_error", "source.type");
  image["messages"][0]["content"][0]["source"] = {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}};
  expect_error(post("/v1/messages", image), 400, "invalid_request_error", "--mmproj");  // no projector
  json choice = good;
  choice["tool_choice"] = {{"type", "any"}};
  expect_error(post("/v1/messages", choice), 400, "invalid_request_error", "tools");
  json model = good;
  model["model"] = "claude-opus-9";
  // Another model's name is served by the loaded model (404 only with --strict-model-names).
  EXPECT_EQ(post("/v1/messages", model).status, 200);
  EXPECT_EQ(post("/v1/messages/count_tokens", model).status, 200);
  json big = good;
  big["messages"][0]["content"] = std::string(3000, 'a');
  expect_error(post("/v1/messages", big), 400, "invalid_request_error", "512");
  // The server is still fine.
  EXPECT_EQ(post("/v1/messages", good).status, 200);
}

// DeepSeek-R1-Distill's template opens "<think>\n" when enable_thinking is set (and closes it
// otherwise), so stories260K's output is then all reasoning: a thinking block, streamed as
// thinking_deltas.
TEST(AnthropicOptions, ThinkingEnabledGivesAThinkingBlockStreamedAsThinkingDeltas) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--chat-template-file",
                   std::string(PAGODA_SHARED_DIR) + "/chat-templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  json req{{"messages", json::array({user("Tell me a story.")})},
           {"max_tokens", 16},
           {"temperature", 0},
           {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}};
  HttpResult r = http(port, "POST", "/v1/messages", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json m = json::parse(r.body);
  ASSERT_EQ(m["content"].size(), 1u) << m;
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["signature"], "");
  const std::string thinking = m["content"][0]["thinking"];
  EXPECT_FALSE(thinking.empty());

  req["stream"] = true;
  HttpResult st = http(port, "POST", "/v1/messages", req.dump());
  ASSERT_EQ(st.status, 200) << st.body;
  std::string streamed;
  int starts = 0;
  for (const auto& [name, data] : sse_events(st.body)) {
    if (name == "content_block_start") {
      ++starts;
      EXPECT_EQ(data["content_block"]["type"], "thinking") << data;
    }
    if (name == "content_block_delta") {
      EXPECT_EQ(data["delta"]["type"], "thinking_delta") << data;
      streamed += data["delta"]["thinking"].get<std::string>();
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(streamed, thinking);

  // The template sees the choice: the prompts differ.
  json count = req;
  count.erase("stream");
  const HttpResult on = http(port, "POST", "/v1/messages/count_tokens", count.dump());
  count["thinking"] = {{"type", "disabled"}};
  const HttpResult off = http(port, "POST", "/v1/messages/count_tokens", count.dump());
  ASSERT_EQ(on.status, 200) << on.body;
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_NE(json::parse(on.body)["input_tokens"], json::parse(off.body)["input_tokens"]);
}

TEST(AnthropicOptions, FullQueueAnswers529Overloaded) {
  ServerProcess s({"-m", kStories, "-t", "1", "--parallel", "1", "--max-queue", "0", "--kv-cache-bytes", "8MiB"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  std::thread slow([&] {
    http(port, "POST", "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1500}, {"ignore_eos", true}}.dump());
  });
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
    if (st.is_object() && st["engine"]["running"] == 1) break;
  }
  const json req{{"messages", json::array({user("Hi")})}, {"max_tokens", 2}};
  HttpResult r = http(port, "POST", "/v1/messages", req.dump());
  expect_error(r, 529, "overloaded_error");
  EXPECT_EQ(r.headers["retry-after"], "1");
  json streamed = req;
  streamed["stream"] = true;
  expect_error(http(port, "POST", "/v1/messages", streamed.dump()), 529, "overloaded_error");
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  slow.join();
}

}  // namespace
