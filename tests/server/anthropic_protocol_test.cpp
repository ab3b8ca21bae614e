// Anthropic Messages protocol (src/server/anthropic_request.cpp, anthropic_response.cpp):
// the mapping of every block type onto the chat messages the template renders, the
// tool_choice variants, the error matrix, and the response / SSE event shapes against
// hand-written JSON.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/anthropic_protocol.h"
#include "server/api_error_expect.h"

namespace pagoda::server {
namespace {

constexpr int32_t kVocab = 1000;

AnthropicRequest parse(const std::string& body) { return parse_anthropic_request(body, kVocab, {}); }
// A body with one user message and max_tokens, plus `extra` fields.
AnthropicRequest with(const std::string& extra) {
  return parse(R"({"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}])" + extra + "}");
}
const char* kWeatherTool =
    R"(,"tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}])";

TEST(AnthropicRequest, MinimalRequestMapsToAChatRequest) {
  AnthropicRequest r = with("");
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_EQ(r.chat.max_tokens, 16);
  EXPECT_EQ(r.chat.messages.dump(), R"([{"role":"user","content":"hi"}])");
  EXPECT_FALSE(r.chat.stream);
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::None);
  EXPECT_TRUE(r.template_kwargs.is_null());
}

TEST(AnthropicRequest, SystemAsStringOrTextBlocksBecomesTheFirstMessage) {
  AnthropicRequest a = with(R"(,"system":"Be brief.")");
  EXPECT_EQ(a.chat.messages.dump(), R"([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}])");
  AnthropicRequest b = with(R"(,"system":[{"type":"text","text":"Be "},{"type":"text","text":"brief.","cache_control":{"type":"ephemeral"}}])");
  EXPECT_EQ(b.chat.messages[0].dump(), R"({"role":"system","content":"Be brief."})");
}

TEST(AnthropicRequest, ToolUseAndToolResultBlocksBecomeToolCallsAndToolMessages) {
  AnthropicRequest r = parse(R"({"max_tokens":8,"messages":[
    {"role":"user","content":[{"type":"text","text":"Weather in "},{"type":"text","text":"Paris?"}]},
    {"role":"assistant","content":[{"type":"thinking","thinking":"Use the tool.","signature":"x"},
      {"type":"text","text":"Checking."},
      {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"},
      {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"no such city"}],"is_error":true},
      {"type":"text","text":"Thanks"}]}]})");
  EXPECT_EQ(r.chat.messages.dump(),
            R"([{"role":"user","content":"Weather in Paris?"},)"
            R"({"role":"assistant","content":"Checking.","reasoning_content":"Use the tool.",)"
            R"("tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},)"
            R"({"role":"tool","tool_call_id":"toolu_1","content":"18C"},)"
            R"({"role":"tool","tool_call_id":"toolu_2","content":"Error: no such city"},)"
            R"({"role":"user","content":"Thanks"}])");
}

TEST(AnthropicRequest, AssistantTurnWithOnlyToolUseHasNullContent) {
  AnthropicRequest r = parse(R"({"max_tokens":8,"messages":[{"role":"user","content":"hi"},
    {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]})");
  EXPECT_TRUE(r.chat.messages[1]["content"].is_null());
  EXPECT_EQ(r.chat.messages[1]["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(AnthropicRequest, LastAssistantTextIsAPrefill) {
  AnthropicRequest r = parse(R"({"max_tokens":8,"messages":[{"role":"user","content":"Story?"},
    {"role":"assistant","content":[{"type":"text","text":"Once "},{"type":"text","text":"upon"}]}]})");
  EXPECT_EQ(r.prefill, "Once upon");
  EXPECT_EQ(r.chat.messages.dump(), R"([{"role":"user","content":"Story?"}])");
  // Not a prefill: a tool call turn, an assistant turn before a user turn.
  EXPECT_EQ(parse(R"({"max_tokens":8,"messages":[{"role":"user","content":"x"},
    {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]})").prefill, "");
  EXPECT_EQ(parse(R"({"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"},
    {"role":"user","content":"z"}]})").chat.messages.size(), 3u);
}

TEST(AnthropicRequest, ToolsMapToFunctionTools) {
  AnthropicRequest r = with(kWeatherTool);
  EXPECT_EQ(r.chat.tools.dump(),
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::Auto);
}

TEST(AnthropicRequest, ToolChoiceVariants) {
  const std::string tools = kWeatherTool;
  EXPECT_EQ(with(tools + R"(,"tool_choice":{"type":"auto"})").chat.tool_choice, ToolChoice::Auto);
  EXPECT_EQ(with(tools + R"(,"tool_choice":{"type":"any"})").chat.tool_choice, ToolChoice::Required);
  EXPECT_EQ(with(tools + R"(,"tool_choice":{"type":"none"})").chat.tool_choice, ToolChoice::None);
  AnthropicRequest named = with(tools + R"(,"tool_choice":{"type":"tool","name":"get_weather"})");
  EXPECT_EQ(named.chat.tool_choice, ToolChoice::Named);
  EXPECT_EQ(named.chat.tool_choice_name, "get_weather");
  EXPECT_TRUE(with(tools).chat.parallel_tool_calls);
  EXPECT_FALSE(with(tools + R"(,"tool_choice":{"type":"auto","disable_parallel_tool_use":true})").chat.parallel_tool_calls);
}

TEST(AnthropicRequest, SamplingStopSequencesAndThinking) {
  AnthropicRequest r = with(R"(,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\n"],"stream":true,)"
                            R"("metadata":{"user_id":"u1"},"thinking":{"type":"enabled","budget_tokens":2048})");
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
  EXPECT_EQ(r.chat.sampling.top_k, 40);
  EXPECT_EQ(r.chat.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_TRUE(r.chat.stream);
  EXPECT_EQ(r.template_kwargs.dump(), R"({"enable_thinking":true})");
  EXPECT_EQ(with(R"(,"thinking":{"type":"disabled"})").template_kwargs.dump(), R"({"enable_thinking":false})");
}

TEST(AnthropicRequest, CountTokensDoesNotNeedMaxTokens) {
  AnthropicRequest r = parse_anthropic_request(R"({"messages":[{"role":"user","content":"hi"}]})", kVocab, {}, true);
  EXPECT_EQ(r.chat.messages.size(), 1u);
}

// Every bad input is a 400 naming the Anthropic field.
TEST(AnthropicRequest, ErrorMatrix) {
  const std::string msg = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_API_ERROR(parse("{not json"), "", "invalid JSON");
  EXPECT_API_ERROR(parse("[1]"), "", "JSON object");
  EXPECT_API_ERROR(parse("{" + msg + "}"), "max_tokens", "'max_tokens' is required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":0,)" + msg + "}"), "max_tokens", ">= 1");
  EXPECT_API_ERROR(parse(R"({"max_tokens":"9",)" + msg + "}"), "max_tokens", "integer");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9})"), "messages", "'messages' is required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[]})"), "messages", "must not be empty");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"system","content":"x"}]})"), "messages[0].role",
                   "top-level 'system'");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user"}]})"), "messages[0].content", "required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user","content":5}]})"), "messages[0].content",
                   "string or an array");
  EXPECT_API_ERROR(
      parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})"),
      "messages[0].content[0].source.type", "must be \"base64\" or \"url\"");
  EXPECT_API_ERROR(
      parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]}]})"),
      "messages[0].content[0].source.media_type", "is required");
  EXPECT_API_ERROR(
      parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]})"),
      "messages[0].content[0]", "unsupported content block type \"document\"");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"text":"x"}]}]})"),
                   "messages[0].content[0].type", "required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
                   "messages[0].content[0].text", "must be a string");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"x"}]}]})"),
                   "messages[0].content[0].input", "object");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]})"),
                   "messages[0].content[0].id", "required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]})"),
                   "messages[0].content[0].tool_use_id", "required");
  EXPECT_API_ERROR(parse(R"({"max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]})"),
                   "messages[0].content[0].content[0]", "only text blocks");
  EXPECT_API_ERROR(with(R"(,"system":7)"), "system", "string or an array");
  EXPECT_API_ERROR(with(R"(,"tools":{})"), "tools", "must be an array");
  EXPECT_API_ERROR(with(R"(,"tools":[{"name":"f"}])"), "tools", "input_schema");
  EXPECT_API_ERROR(with(R"(,"tools":[{"type":"bash_20250124","name":"bash"}])"), "tools", "not supported");
  EXPECT_API_ERROR(with(R"(,"tool_choice":{"type":"any"})"), "tool_choice", "no 'tools'");
  EXPECT_API_ERROR(with(std::string(kWeatherTool) + R"(,"tool_choice":{"type":"tool","name":"nope"})"), "tool_choice",
                   "not in 'tools'");
  EXPECT_API_ERROR(with(std::string(kWeatherTool) + R"(,"tool_choice":{"type":"tool"})"), "tool_choice",
                   "'tool_choice.name' is required");
  EXPECT_API_ERROR(with(std::string(kWeatherTool) + R"(,"tool_choice":{"type":"some"})"), "tool_choice",
                   "auto, any, tool or none");
  EXPECT_API_ERROR(with(R"(,"tool_choice":"auto")"), "tool_choice", "must be an object");
  EXPECT_API_ERROR(with(R"(,"stop_sequences":"END")"), "stop_sequences", "array");
  EXPECT_API_ERROR(with(R"(,"stop_sequences":[""])"), "stop_sequences", "non-empty");
  EXPECT_API_ERROR(with(R"(,"temperature":3)"), "temperature", "[0, 2]");
  EXPECT_API_ERROR(with(R"(,"top_p":0)"), "top_p", "(0, 1]");
  EXPECT_API_ERROR(with(R"(,"stream":"yes")"), "stream", "boolean");
  EXPECT_API_ERROR(with(R"(,"thinking":{"type":"enabled"})"), "thinking.budget_tokens", "required");
  EXPECT_API_ERROR(with(R"(,"thinking":{"type":"maybe"})"), "thinking.type", "enabled");
  EXPECT_API_ERROR(with(R"(,"metadata":"x")"), "metadata", "object");
  EXPECT_API_ERROR(parse(R"({"model":5,"max_tokens":9,)" + msg + "}"), "model", "string");
}

// ---- responses -----------------------------------------------------------------------------

TEST(AnthropicResponse, ErrorShapeAndTypeByStatus) {
  EXPECT_EQ(anthropic_error_json(400, "bad"),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"bad"}})");
  const std::vector<std::pair<int, std::string>> types = {
      {401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
      {405, "invalid_request_error"}, {413, "request_too_large"}, {429, "rate_limit_error"},
      {500, "api_error"}, {503, "overloaded_error"}, {529, "overloaded_error"}};
  for (const auto& [status, type] : types)
    EXPECT_EQ(ordered_json::parse(anthropic_error_json(status, "m"))["error"]["type"], type) << status;
}

TEST(AnthropicResponse, StopReasons) {
  EXPECT_EQ(anthropic_stop_reason(false, false, ""), "end_turn");
  EXPECT_EQ(anthropic_stop_reason(true, false, ""), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(true, true, ""), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(false, false, "END"), "stop_sequence");
  EXPECT_EQ(anthropic_stop_reason(false, true, ""), "tool_use");
}

TEST(AnthropicResponse, MessageWithEveryBlockType) {
  chat::ParsedMessage m;
  m.reasoning_content = "Think.";
  m.content = "Checking.";
  m.tool_calls = {{"toolu_x_0", "get_weather", R"({"city":"Paris"})"}};
  EXPECT_EQ(anthropic_message_json("msg_1", "m", m, "tool_use", "", {10, 4, 7}),
            R"({"id":"msg_1","type":"message","role":"assistant","model":"m","content":[)"
            R"({"type":"thinking","thinking":"Think.","signature":""},)"
            R"({"type":"text","text":"Checking."},)"
            R"({"type":"tool_use","id":"toolu_x_0","name":"get_weather","input":{"city":"Paris"}}],)"
            R"("stop_reason":"tool_use","stop_sequence":null,)"
            R"("usage":{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":7}})");
}

TEST(AnthropicResponse, TextMessageStoppedBySequence) {
  chat::ParsedMessage m;
  m.content = "Once";
  EXPECT_EQ(anthropic_message_json("msg_2", "m", m, "stop_sequence", "END", {3, 0, 1}),
            R"({"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Once"}],)"
            R"("stop_reason":"stop_sequence","stop_sequence":"END",)"
            R"("usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}})");
  m.content = "";
  EXPECT_EQ(ordered_json::parse(anthropic_message_json("i", "m", m, "end_turn", "", {}))["content"].dump(), "[]");
}

using Kind = chat::ChatDelta::Kind;
chat::ChatDelta delta(Kind k, std::string text, int index = 0, std::string id = "", std::string name = "") {
  chat::ChatDelta d;
  d.kind = k;
  d.text = std::move(text);
  d.index = index;
  d.id = std::move(id);
  d.name = std::move(name);
  return d;
}

TEST(AnthropicStream, EventSequenceOverEveryBlockType) {
  AnthropicStreamWriter w("msg_1", "m");
  std::string s = w.start(12);
  s += w.delta(delta(Kind::Reasoning, "Hmm"));
  s += w.delta(delta(Kind::Reasoning, "."));
  s += w.delta(delta(Kind::Content, ""));  // nothing
  s += w.delta(delta(Kind::Content, "Hi"));
  s += w.delta(delta(Kind::ToolCallStart, "", 0, "toolu_0", "f"));
  s += w.delta(delta(Kind::ToolCallArguments, R"({"a":)"));
  s += w.delta(delta(Kind::ToolCallArguments, "1}"));
  s += w.finish("tool_use", "", {12, 8, 5});
  const std::string expected =
      "event: message_start\n"
      R"(data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],)"
      R"("stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}})"
      "\n\n"
      "event: ping\ndata: {\"type\":\"ping\"}\n\n"
      "event: content_block_start\n"
      R"(data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"."}})"
      "\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\n"
      R"(data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}})"
      "\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: content_block_start\n"
      R"(data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_0","name":"f","input":{}}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}})"
      "\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
      "event: message_delta\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},)"
      R"("usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":5}})"
      "\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  EXPECT_EQ(s, expected);
}

TEST(AnthropicStream, TwoToolCallsAreTwoBlocksAndAnEmptyMessageHasNone) {
  AnthropicStreamWriter w("id", "m");
  std::string s = w.delta(delta(Kind::ToolCallStart, "", 0, "a", "f"));
  s += w.delta(delta(Kind::ToolCallStart, "", 1, "b", "g"));
  EXPECT_NE(s.find(R"("index":1,"content_block":{"type":"tool_use","id":"b")"), std::string::npos) << s;
  EXPECT_NE(s.find(R"({"type":"content_block_stop","index":0})"), std::string::npos) << s;

  AnthropicStreamWriter empty("id", "m");
  const std::string end = empty.finish("end_turn", "", {});
  EXPECT_EQ(end.find("content_block"), std::string::npos) << end;
  EXPECT_EQ(end.rfind("event: message_delta\n", 0), 0u) << end;
}

TEST(AnthropicStream, ErrorEvent) {
  EXPECT_EQ(AnthropicStreamWriter::error_event(500, "boom"),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n");
}

}  // namespace
}  // namespace pagoda::server
