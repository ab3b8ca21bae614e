// Request fields for tools and structured outputs, and the response / chunk shapes of
// parsed messages (src/server/openai_tools.cpp).
#include <gtest/gtest.h>

#include <string>

#include "server/api_error_expect.h"
#include "server/openai_protocol.h"

namespace pagoda::server {
namespace {

constexpr int32_t kVocab = 1000;
const char* kTools = R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":
    {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
    {"type":"function","function":{"name":"get_time"}}])";

CompletionRequest chat(const std::string& extra) {
  return parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", kVocab);
}
CompletionRequest completion(const std::string& extra) {
  return parse_completion_request(R"({"prompt":"hi")" + extra + "}", kVocab);
}


TEST(ToolChoice, DefaultsAreAutoWithToolsAndNoneWithout) {
  EXPECT_EQ(chat("").tool_choice, ToolChoice::None);
  CompletionRequest r = chat(std::string(",") + kTools);
  EXPECT_EQ(r.tool_choice, ToolChoice::Auto);
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_EQ(chat(std::string(",") + kTools + R"(,"tool_choice":"none")").tool_choice, ToolChoice::None);
  EXPECT_EQ(chat(std::string(",") + kTools + R"(,"tool_choice":"required")").tool_choice, ToolChoice::Required);
  EXPECT_FALSE(chat(std::string(",") + kTools + R"(,"parallel_tool_calls":false)").parallel_tool_calls);
}

TEST(ToolChoice, NamedFunctionMustBeAmongTheTools) {
  CompletionRequest r =
      chat(std::string(",") + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tool_choice_name, "get_time");
  EXPECT_API_ERROR(chat(std::string(",") + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})"),
                   "tool_choice", "not in 'tools'");
  EXPECT_API_ERROR(chat(R"(,"tool_choice":"required")"), "tool_choice", "no 'tools'");
  EXPECT_API_ERROR(chat(std::string(",") + kTools + R"(,"tool_choice":"sometimes")"), "tool_choice", "must be");
  EXPECT_API_ERROR(chat(std::string(",") + kTools + R"(,"tool_choice":3)"), "tool_choice", "must be a string or an object");
  EXPECT_API_ERROR(chat(std::string(",") + kTools + R"(,"tool_choice":{"type":"function"})"), "tool_choice", "must be");
}

TEST(Tools, BadShapesAre400) {
  EXPECT_API_ERROR(chat(R"(,"tools":[{"type":"function"}])"), "tools", "function' must be an object");
  EXPECT_API_ERROR(chat(R"(,"tools":[{"type":"function","function":{}}])"), "tools", "name' is required");
  EXPECT_API_ERROR(chat(R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}])"), "tools", "must be \"function\"");
  EXPECT_API_ERROR(chat(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":3}}])"), "tools",
                   "parameters' must be a JSON schema object");
  EXPECT_API_ERROR(chat(R"(,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])"),
                   "tools", "two tools are named");
  EXPECT_API_ERROR(chat(R"(,"tools":[1])"), "tools", "must be an object");
}

TEST(ResponseFormat, Types) {
  EXPECT_EQ(chat(R"(,"response_format":{"type":"text"})").constraint.kind, OutputConstraint::Kind::None);
  EXPECT_EQ(chat(R"(,"response_format":{"type":"json_object"})").constraint.kind, OutputConstraint::Kind::JsonObject);
  CompletionRequest r = chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})");
  EXPECT_EQ(r.constraint.kind, OutputConstraint::Kind::JsonSchema);
  EXPECT_EQ(r.constraint.schema["properties"]["a"]["type"], "integer");
  EXPECT_EQ(r.constraint.param, "response_format");
  // llama-server's json_object with a schema member.
  EXPECT_EQ(chat(R"(,"response_format":{"type":"json_object","schema":{"type":"string"}})").constraint.kind,
            OutputConstraint::Kind::JsonSchema);
  EXPECT_API_ERROR(chat(R"(,"response_format":{"type":"yaml"})"), "response_format.type", "must be one of");
  EXPECT_API_ERROR(chat(R"(,"response_format":{})"), "response_format.type", "is required");
  EXPECT_API_ERROR(chat(R"(,"response_format":"json")"), "response_format", "must be an object");
  EXPECT_API_ERROR(chat(R"(,"response_format":{"type":"json_schema"})"), "response_format.json_schema",
                   "must be an object");
  EXPECT_API_ERROR(chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":[1]}})"),
                   "response_format.json_schema.schema", "must be a JSON schema");
}

TEST(ExtensionConstraints, EachFieldAndConflicts) {
  EXPECT_EQ(chat(R"(,"grammar":"root ::= \"a\"")").constraint.kind, OutputConstraint::Kind::Grammar);
  EXPECT_EQ(chat(R"(,"grammar":"")").constraint.kind, OutputConstraint::Kind::None);
  EXPECT_EQ(chat(R"(,"json_schema":{"type":"integer"})").constraint.kind, OutputConstraint::Kind::JsonSchema);
  // guided_json as JSON text (vLLM clients send both shapes).
  CompletionRequest gj = chat(R"(,"guided_json":"{\"type\":\"boolean\"}")");
  EXPECT_EQ(gj.constraint.kind, OutputConstraint::Kind::JsonSchema);
  EXPECT_EQ(gj.constraint.schema["type"], "boolean");
  EXPECT_EQ(chat(R"(,"guided_regex":"[a-z]+")").constraint.kind, OutputConstraint::Kind::Regex);
  CompletionRequest gc = chat(R"(,"guided_choice":["yes","no"])");
  EXPECT_EQ(gc.constraint.kind, OutputConstraint::Kind::Choice);
  EXPECT_EQ(gc.constraint.choices, (std::vector<std::string>{"yes", "no"}));
  // The completions endpoint takes them too.
  EXPECT_EQ(completion(R"(,"guided_choice":["a"])").constraint.kind, OutputConstraint::Kind::Choice);
  EXPECT_API_ERROR(chat(R"(,"guided_choice":[])"), "guided_choice", "non-empty");
  EXPECT_API_ERROR(chat(R"(,"guided_choice":["a",""])"), "guided_choice", "must not be empty");
  EXPECT_API_ERROR(chat(R"(,"guided_choice":["a",1])"), "guided_choice", "must be a string");
  EXPECT_API_ERROR(chat(R"(,"guided_json":"not json")"), "guided_json", "JSON schema");
  EXPECT_API_ERROR(chat(R"(,"grammar":"root ::= \"a\"","guided_regex":"a")"), "guided_regex", "cannot be combined");
  EXPECT_API_ERROR(chat(R"(,"response_format":{"type":"json_object"},"json_schema":{"type":"integer"})"), "json_schema",
                   "cannot be combined");
  EXPECT_API_ERROR(chat(std::string(",") + kTools + R"(,"tool_choice":"required","response_format":{"type":"json_object"})"),
                   "response_format", "tool_choice");
}

TEST(ReasoningEffort, ValuesAndErrors) {
  EXPECT_EQ(chat(R"(,"reasoning_effort":"low")").reasoning_effort, "low");
  EXPECT_API_ERROR(chat(R"(,"reasoning_effort":"extreme")"), "reasoning_effort", "must be");
}

TEST(ParsedResponses, ToolCallsMessageShape) {
  chat::ParsedMessage m;
  m.tool_calls.push_back({"call_1", "get_weather", R"({"city":"Paris"})"});
  const auto j = nlohmann::json::parse(chat_message_response_json("id", 1, "m", m, "tool_calls", Usage{3, 4, 1}, nullptr));
  const auto& msg = j["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_FALSE(msg.contains("reasoning_content"));
  EXPECT_EQ(msg["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);

  chat::ParsedMessage r;
  r.content = "answer";
  r.reasoning_content = "thought";
  const auto k = nlohmann::json::parse(chat_message_response_json("id", 1, "m", r, "stop", Usage{}, nullptr));
  EXPECT_EQ(k["choices"][0]["message"]["content"], "answer");
  EXPECT_EQ(k["choices"][0]["message"]["reasoning_content"], "thought");
  EXPECT_FALSE(k["choices"][0]["message"].contains("tool_calls"));
}

TEST(ParsedResponses, DeltaChunkShapes) {
  using Kind = chat::ChatDelta::Kind;
  chat::ChatDelta start{Kind::ToolCallStart, "", 1, "call_9", "f"};
  auto c = chat_chunk_delta("id", 1, "m", start, nullptr, false);
  const auto& call = c["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(call["index"], 1);
  EXPECT_EQ(call["id"], "call_9");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "f");
  EXPECT_EQ(call["function"]["arguments"], "");
  chat::ChatDelta args{Kind::ToolCallArguments, "{\"a\":", 1, "", ""};
  auto a = chat_chunk_delta("id", 1, "m", args, nullptr, true);
  EXPECT_EQ(a["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\":");
  EXPECT_FALSE(a["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  EXPECT_TRUE(a["usage"].is_null());
  chat::ChatDelta reasoning{Kind::Reasoning, "hmm", 0, "", ""};
  EXPECT_EQ(chat_chunk_delta("id", 1, "m", reasoning, nullptr, false)["choices"][0]["delta"]["reasoning_content"], "hmm");
  EXPECT_EQ(chat_chunk_delta("id", 1, "m", reasoning, nullptr, false)["object"], "chat.completion.chunk");
}

}  // namespace
}  // namespace pagoda::server
