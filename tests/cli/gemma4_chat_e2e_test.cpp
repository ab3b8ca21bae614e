// Gemma 4's chat format end to end: `pagoda serve` on synth's tiny gemma4 (stories260K's
// vocabulary) with Gemma 4's chat template (shared/chat-templates, as llama.cpp's models/
// templates has it). /apply-template renders tools and an OpenAI conversation's tool
// results the Gemma 4 way (thinking on / off: tests/server/chat_format_render_test.cpp); a forced tool call (Chat Completions, streamed and not, and
// Anthropic Messages) comes out in Gemma's call syntax, grammar-constrained, and is parsed
// into tool_calls / tool_use with JSON arguments.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;
using pagoda::testing::sse_data;

const std::string kTemplate = std::string(PAGODA_SHARED_DIR) + "/chat-templates/google-gemma-4-31B-it-interleaved.jinja";
const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}}, "required": ["zone"]}}},
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
])");

class Gemma4Chat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = "/tmp/pagoda_gemma4_chat_" + std::to_string(::getpid()) + ".gguf";
    const std::string cmd = std::string(PAGODA_BINARY) + " synth --arch gemma4 --shape tiny --vocab-from " + kStories +
                            " -o " + model_ + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return;
    server_ = new ServerProcess({"-m", model_, "--chat-template-file", kTemplate, "-t", "2", "--ctx-size", "1024",
                                 "--kv-cache-bytes", "32MiB", "--no-log-requests"});
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    ::unlink(model_.c_str());
  }
  void SetUp() override { ASSERT_NE(port_, 0) << (server_ ? server_->log() : "synth failed"); }
  static HttpResult post(const std::string& path, const json& body) { return http(port_, "POST", path, body.dump()); }

  static std::string model_;
  static ServerProcess* server_;
  static uint16_t port_;
};
std::string Gemma4Chat::model_;
ServerProcess* Gemma4Chat::server_ = nullptr;
uint16_t Gemma4Chat::port_ = 0;

const json kConversation = json::parse(R"([
  {"role": "user", "content": "Time in Tokyo?"},
  {"role": "assistant", "content": null,
   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": \"JST\"}"}}]},
  {"role": "tool", "tool_call_id": "c1", "content": "{\"time\": \"09:30\"}"},
  {"role": "assistant", "content": "It is 09:30."},
  {"role": "user", "content": "And in Paris?"}
])");

TEST_F(Gemma4Chat, TheTemplateRendersToolsThinkingAndToolResults) {
  HttpResult r = post("/apply-template", {{"messages", kConversation}, {"tools", kTools}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = json::parse(r.body)["prompt"];
  EXPECT_NE(prompt.find("<|tool>declaration:get_time{description:<|\"|>Time in a zone<|\"|>"), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|tool_call>call:get_time{zone:<|\"|>JST<|\"|>}<tool_call|><|tool_response>response:get_time"
                        "{time:<|\"|>09:30<|\"|>}<tool_response|>It is 09:30.<turn|>"),
            std::string::npos)
      << prompt;
  // Thinking off (no enable_thinking): the model turn starts with a closed, empty thought.
  EXPECT_TRUE(prompt.ends_with("<|turn>model\n<|channel>thought\n<channel|>")) << prompt;
}

TEST_F(Gemma4Chat, AForcedToolCallStreamsAndParses) {
  json body{{"messages", kConversation},
            {"tools", kTools},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
            {"temperature", 1.0},
            {"seed", 5},
            {"max_tokens", 64},
            {"parallel_tool_calls", false}};
  HttpResult plain = post("/v1/chat/completions", body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json choice = json::parse(plain.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << plain.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << plain.body;
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_time");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(args.contains("zone")) << args;
  EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET" || args["zone"] == "JST") << args;

  body["stream"] = true;
  HttpResult streamed = post("/v1/chat/completions", body);
  ASSERT_EQ(streamed.status, 200);
  std::string name, arguments, finish;
  int starts = 0;
  for (const std::string& d : sse_data(streamed.body)) {
    if (d == "[DONE]") break;
    const json c = json::parse(d);
    if (c["choices"].empty()) continue;
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    const json& delta = c["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    const json& tc = delta["tool_calls"][0];
    if (tc.contains("id")) {
      ++starts;
      name = tc["function"]["name"];
    }
    if (tc["function"].contains("arguments")) arguments += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(name, "get_time");
  EXPECT_EQ(arguments, call["function"]["arguments"]);  // the same seed: the same call
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(Gemma4Chat, AnthropicMessagesGetTheCallAsToolUse) {
  json tools = json::array();
  for (const json& t : kTools)
    tools.push_back({{"name", t["function"]["name"]},
                     {"description", t["function"]["description"]},
                     {"input_schema", t["function"]["parameters"]}});
  const json body{{"model", "m"},
                  {"max_tokens", 64},
                  {"messages", json::array({{{"role", "user"}, {"content", "Time in Tokyo?"}}})},
                  {"tools", tools},
                  {"tool_choice", {{"type", "tool"}, {"name", "get_time"}, {"disable_parallel_tool_use", true}}},
                  {"temperature", 1.0}};
  HttpResult r = post("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["stop_reason"], "tool_use") << r.body;
  bool found = false;
  for (const json& block : j["content"])
    if (block["type"] == "tool_use") {
      found = true;
      EXPECT_EQ(block["name"], "get_time");
      EXPECT_TRUE(block["input"].contains("zone")) << r.body;
    }
  EXPECT_TRUE(found) << r.body;
}

}  // namespace
