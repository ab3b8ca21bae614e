// The Responses API mapping (src/server/responses_api.cpp): request items -> chat
// messages, tools, text.format, the error matrix, continuation from a stored
// conversation, and the response object / SSE events against hand-written JSON.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "server/api_error_expect.h"
#include "server/responses_api.h"
#include "server/responses_store.h"

namespace pagoda::server {
namespace {

using json = ordered_json;
constexpr int32_t kVocab = 1000;

std::optional<json> no_history(const std::string&) { return std::nullopt; }

ResponsesRequest parse(const std::string& body, const HistoryLookup& history = no_history) {
  return parse_responses_request(body, kVocab, {}, history);
}

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
  ResponsesRequest r = parse(R"({"model":"m","input":"Hello"})");
  EXPECT_EQ(r.chat.messages, json::parse(R"([{"role":"user","content":"Hello"}])"));
  EXPECT_EQ(r.turn_messages, r.chat.messages);
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.chat.stream);
  EXPECT_EQ(r.chat.max_tokens, -1);
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::None);
}

TEST(ResponsesRequest, EveryItemTypeBecomesChatMessages) {
  ResponsesRequest r = parse(R"({"instructions":"Be brief.","input":[
    {"role":"developer","content":"dev note"},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather "},{"type":"input_text","text":"in Paris?"}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look."}]},
    {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"call_2","name":"get_time","arguments":"{}"},
    {"type":"reasoning","id":"rs_1","summary":[]},
    {"type":"function_call_output","call_id":"call_1","output":"sunny"},
    {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"noon"}]},
    {"type":"function_call","call_id":"call_3","name":"get_time","arguments":"{}"}
  ]})");
  EXPECT_EQ(r.chat.messages, json::parse(R"([
    {"role":"system","content":"Be brief."},
    {"role":"developer","content":"dev note"},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":"Let me look.","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
      {"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"sunny"},
    {"role":"tool","tool_call_id":"call_2","content":"noon"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"call_3","type":"function","function":{"name":"get_time","arguments":"{}"}}]}
  ])"));
  // The instructions are not part of what a continuation carries over.
  EXPECT_EQ(r.turn_messages.size(), r.chat.messages.size() - 1);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
}

TEST(ResponsesRequest, FunctionToolsAndToolChoiceMapToTheChatShape) {
  ResponsesRequest r = parse(R"({"input":"hi","tools":[
    {"type":"function","name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},
    {"type":"function","name":"get_time"}],
    "tool_choice":{"type":"function","name":"get_time"},"parallel_tool_calls":false})");
  EXPECT_EQ(r.chat.tools, json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
    {"type":"function","function":{"name":"get_time"}}])"));
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.chat.tool_choice_name, "get_time");
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(parse(R"({"input":"hi","tools":[{"type":"function","name":"f"}]})").chat.tool_choice, ToolChoice::Auto);
  EXPECT_EQ(parse(R"({"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":"required"})").chat.tool_choice,
            ToolChoice::Required);
  // The response repeats the tools as sent (Responses shape).
  EXPECT_EQ(r.echo["tools"][1], json::parse(R"({"type":"function","name":"get_time"})"));
}

TEST(ResponsesRequest, TextFormatIsTheStructuredOutputConstraint) {
  ResponsesRequest s = parse(R"({"input":"hi","text":{"format":{"type":"json_schema","name":"p","strict":true,
      "schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}}})");
  EXPECT_EQ(s.chat.constraint.kind, OutputConstraint::Kind::JsonSchema);
  EXPECT_EQ(s.chat.constraint.schema, json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})"));
  EXPECT_EQ(s.echo["text"]["format"]["name"], "p");
  EXPECT_EQ(parse(R"({"input":"hi","text":{"format":{"type":"json_object"}}})").chat.constraint.kind,
            OutputConstraint::Kind::JsonObject);
  EXPECT_EQ(parse(R"({"input":"hi","text":{"format":{"type":"text"}}})").chat.constraint.kind,
            OutputConstraint::Kind::None);
}

TEST(ResponsesRequest, SamplingLimitsAndReasoningFields) {
  ResponsesRequest r = parse(R"({"input":"hi","max_output_tokens":7,"temperature":0.5,"top_p":0.9,"stream":true,
      "store":false,"reasoning":{"effort":"low"},"metadata":{"k":"v"}})");
  EXPECT_EQ(r.chat.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.chat.reasoning_effort, "low");
  EXPECT_EQ(r.echo["max_output_tokens"], 7);
  EXPECT_EQ(r.echo["temperature"].get<double>(), 0.5);
  EXPECT_EQ(r.echo["top_p"].get<double>(), 0.9);  // the decimal sent, not the float's 0.899999976...
  EXPECT_EQ(r.echo["reasoning"]["effort"], "low");
  EXPECT_EQ(r.echo["metadata"], json::parse(R"({"k":"v"})"));
  EXPECT_EQ(r.echo["store"], false);
}

TEST(ResponsesRequest, PreviousResponseIdPrependsTheStoredConversation) {
  ResponsesStore store(4, 0);
  const json history = json::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}])");
  store.put("resp_1", ResponsesStore::Entry{json::object(), history});
  auto lookup = [&](const std::string& id) -> std::optional<json> {
    auto e = store.get(id);
    if (!e) return std::nullopt;
    return e->messages;
  };
  ResponsesRequest r = parse(R"({"instructions":"Sys","previous_response_id":"resp_1","input":"More"})", lookup);
  EXPECT_EQ(r.chat.messages, json::parse(R"([{"role":"system","content":"Sys"},{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello!"},{"role":"user","content":"More"}])"));
  EXPECT_EQ(r.turn_messages, json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello!"},{"role":"user","content":"More"}])"));
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
  try {
    parse(R"({"previous_response_id":"resp_gone","input":"x"})", lookup);
    ADD_FAILURE() << "no 404";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.param, "previous_response_id");
  }
}

TEST(ResponsesRequest, ErrorMatrix) {
  EXPECT_API_ERROR(parse("{"), "", "invalid JSON");
  EXPECT_API_ERROR(parse("[]"), "", "must be a JSON object");
  EXPECT_API_ERROR(parse("{}"), "input", "'input' is required");
  EXPECT_API_ERROR(parse(R"({"input":""})"), "input", "must not be empty");
  EXPECT_API_ERROR(parse(R"({"input":[]})"), "input", "must not be empty");
  EXPECT_API_ERROR(parse(R"({"input":5})"), "input", "string or an array");
  EXPECT_API_ERROR(parse(R"({"input":[5]})"), "input[0]", "must be an object");
  EXPECT_API_ERROR(parse(R"({"input":[{"role":"tool","content":"x"}]})"), "input[0].role", "must be one of");
  EXPECT_API_ERROR(parse(R"({"input":[{"role":"user"}]})"), "input[0].content", "is required");
  EXPECT_API_ERROR(parse(R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"x"}]}]})"),
                   "input[0].content[0]", "only text and image content parts");
  EXPECT_API_ERROR(parse(R"({"input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]})"),
                   "input[0].content[0].image_url", "file_id is not supported");
  EXPECT_API_ERROR(parse(R"({"input":[{"type":"item_reference","id":"x"}]})"), "input[0].type", "must be message");
  EXPECT_API_ERROR(parse(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})"),
                   "input[0].call_id", "is required");
  EXPECT_API_ERROR(parse(R"({"input":[{"type":"function_call_output","call_id":"c"}]})"), "input[0].output",
                   "is required");
  EXPECT_API_ERROR(parse(R"({"input":"hi","tools":[{"type":"web_search"}]})"), "tools", "built-in tools");
  EXPECT_API_ERROR(parse(R"({"input":"hi","tools":[{"type":"function"}]})"), "tools", "name' is required");
  EXPECT_API_ERROR(parse(R"({"input":"hi","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]})"),
                   "tools", "two tools");
  EXPECT_API_ERROR(parse(R"({"input":"hi","tool_choice":"required"})"), "tool_choice", "no 'tools'");
  EXPECT_API_ERROR(parse(R"({"input":"hi","tool_choice":{"type":"file_search"}})"), "tool_choice", "must be");
  EXPECT_API_ERROR(parse(R"({"input":"hi","text":{"format":{"type":"yaml"}}})"), "text.format.type", "must be one of");
  EXPECT_API_ERROR(parse(R"({"input":"hi","text":{"format":{"type":"json_schema","name":"x"}}})"),
                   "text.format.schema", "is required");
  EXPECT_API_ERROR(parse(R"({"input":"hi","text":{"format":{"type":"json_schema","schema":5}}})"), "text.format",
                   "JSON schema");
  EXPECT_API_ERROR(parse(R"({"input":"hi","max_output_tokens":0})"), "max_output_tokens", "'max_output_tokens' must be >= 1");
  EXPECT_API_ERROR(parse(R"({"input":"hi","temperature":3})"), "temperature", "must be in");
  EXPECT_API_ERROR(parse(R"({"input":"hi","top_p":0})"), "top_p", "must be in");
  EXPECT_API_ERROR(parse(R"({"input":"hi","reasoning":{"effort":"max"}})"), "reasoning.effort", "'reasoning.effort'");
  EXPECT_API_ERROR(parse(R"({"input":"hi","reasoning":"high"})"), "reasoning", "must be an object");
  EXPECT_API_ERROR(parse(R"({"input":"hi","store":"yes"})"), "store", "must be a boolean");
  EXPECT_API_ERROR(parse(R"({"input":"hi","stream":1})"), "stream", "must be a boolean");
  EXPECT_API_ERROR(parse(R"({"input":"hi","background":true})"), "background", "not supported");
  EXPECT_API_ERROR(parse(R"({"input":"hi","metadata":[]})"), "metadata", "must be an object");
  EXPECT_API_ERROR(parse(R"({"input":"hi","previous_response_id":5})"), "previous_response_id", "must be a string");
}

// ---- responses ----------------------------------------------------------------------

ResponseMeta meta() {
  ResponseMeta m;
  m.id = "resp_abc";
  m.created_at = 1700000000;
  m.model = "tiny";
  m.echo = json::parse(R"({"store":true})");
  return m;
}

TEST(ResponseObject, MessageReasoningAndCallsAsOutputItems) {
  chat::ParsedMessage m;
  m.content = "It is sunny.";
  m.reasoning_content = "Think.";
  m.tool_calls.push_back({"call_9", "get_weather", "{\"city\":\"Paris\"}"});
  json r = response_object(meta(), "completed", response_output_items("resp_abc", m, false),
                           responses_usage_json(Usage{10, 5, 4}, 2));
  EXPECT_EQ(r, json::parse(R"({"id":"resp_abc","object":"response","created_at":1700000000,"status":"completed",
    "error":null,"incomplete_details":null,"model":"tiny","output":[
      {"type":"reasoning","id":"rs_abc","summary":[],"content":[{"type":"reasoning_text","text":"Think."}]},
      {"type":"message","id":"msg_abc","status":"completed","role":"assistant",
       "content":[{"type":"output_text","text":"It is sunny.","annotations":[],"logprobs":[]}]},
      {"type":"function_call","id":"fc_abc_0","call_id":"call_9","name":"get_weather",
       "arguments":"{\"city\":\"Paris\"}","status":"completed"}],
    "store":true,
    "usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":5,
             "output_tokens_details":{"reasoning_tokens":2},"total_tokens":15}})"));
}

TEST(ResponseObject, IncompleteNamesMaxOutputTokensAndOnlyCallsHaveNoMessage) {
  chat::ParsedMessage text;
  text.content = "Once";
  json r = response_object(meta(), "incomplete", response_output_items("resp_abc", text, true), nullptr);
  EXPECT_EQ(r["incomplete_details"], json::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  chat::ParsedMessage calls;
  calls.tool_calls.push_back({"c", "f", "{}"});
  json items = response_output_items("resp_abc", calls, false);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0]["type"], "function_call");
  EXPECT_EQ(assistant_turn_message(calls), json::parse(R"({"role":"assistant","content":null,
      "tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]})"));
  EXPECT_EQ(response_deleted_json("resp_x"), json::parse(R"({"id":"resp_x","object":"response","deleted":true})"));
}

// The events of a stream, parsed: (event line, data JSON).
std::vector<std::pair<std::string, json>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << sse.substr(pos);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    out.emplace_back(block.substr(7, nl - 7), json::parse(block.substr(nl + 7)));
    pos = end + 2;
  }
  return out;
}

chat::ChatDelta delta(chat::ChatDelta::Kind kind, std::string text, std::string id = {}, std::string name = {}) {
  chat::ChatDelta d;
  d.kind = kind;
  d.text = std::move(text);
  d.id = std::move(id);
  d.name = std::move(name);
  return d;
}

TEST(ResponsesStream, TextEventsInOrderWithSequenceNumbers) {
  ResponsesStreamWriter w(meta());
  std::string sse = w.begin();
  sse += w.push(delta(chat::ChatDelta::Kind::Content, "Hel"));
  sse += w.push(delta(chat::ChatDelta::Kind::Content, "lo"));
  json final_response;
  sse += w.finish(false, responses_usage_json(Usage{3, 2, 0}, 0), &final_response);
  auto ev = events_of(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].first, ev[i].second["type"]);
    EXPECT_EQ(ev[i].second["sequence_number"], i);
    types.push_back(ev[i].first);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.delta", "response.output_text.done",
                                             "response.content_part.done", "response.output_item.done",
                                             "response.completed"}));
  EXPECT_EQ(ev[0].second["response"]["status"], "in_progress");
  EXPECT_TRUE(ev[0].second["response"]["usage"].is_null());
  EXPECT_EQ(ev[4].second, json::parse(R"({"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_abc",
      "output_index":0,"content_index":0,"delta":"Hel","logprobs":[]})"));
  EXPECT_EQ(ev[6].second["text"], "Hello");
  EXPECT_EQ(ev[8].second["item"], json::parse(R"({"type":"message","id":"msg_abc","status":"completed",
      "role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}]})"));
  // The final response equals the non-streaming one for the same output.
  chat::ParsedMessage m;
  m.content = "Hello";
  EXPECT_EQ(final_response, response_object(meta(), "completed", response_output_items("resp_abc", m, false),
                                            responses_usage_json(Usage{3, 2, 0}, 0)));
  EXPECT_EQ(ev.back().second["response"], final_response);
}

TEST(ResponsesStream, ReasoningThenToolCallEvents) {
  ResponsesStreamWriter w(meta());
  w.begin();
  std::string sse = w.push(delta(chat::ChatDelta::Kind::Reasoning, "hmm"));
  sse += w.push(delta(chat::ChatDelta::Kind::ToolCallStart, "", "call_1", "get_time"));
  sse += w.push(delta(chat::ChatDelta::Kind::ToolCallArguments, "{\"tz\":"));
  sse += w.push(delta(chat::ChatDelta::Kind::ToolCallArguments, "\"UTC\"}"));
  json final_response;
  sse += w.finish(false, nullptr, &final_response);
  auto ev = events_of(sse);
  std::vector<std::string> types;
  for (auto& e : ev) types.push_back(e.first);
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done",
                       "response.output_item.done", "response.output_item.added",
                       "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  EXPECT_EQ(ev[0].second["sequence_number"], 2);  // after created / in_progress
  EXPECT_EQ(ev[4].second["item"], json::parse(R"({"type":"function_call","id":"fc_abc_0","call_id":"call_1",
      "name":"get_time","arguments":"","status":"in_progress"})"));
  EXPECT_EQ(ev[5].second, json::parse(R"({"type":"response.function_call_arguments.delta","sequence_number":7,
      "item_id":"fc_abc_0","output_index":1,"delta":"{\"tz\":"})"));
  EXPECT_EQ(ev[7].second["arguments"], "{\"tz\":\"UTC\"}");
  chat::ParsedMessage m;
  m.reasoning_content = "hmm";
  m.tool_calls.push_back({"call_1", "get_time", "{\"tz\":\"UTC\"}"});
  EXPECT_EQ(final_response["output"], response_output_items("resp_abc", m, false));
}

TEST(ResponsesStream, NothingGeneratedStillGivesAnEmptyMessageAndFailureEndsWithFailed) {
  ResponsesStreamWriter w(meta());
  w.begin();
  json final_response;
  auto ev = events_of(w.finish(true, nullptr, &final_response));
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev.back().first, "response.incomplete");
  chat::ParsedMessage empty;
  EXPECT_EQ(final_response["output"], response_output_items("resp_abc", empty, true));

  ResponsesStreamWriter f(meta());
  f.begin();
  auto fev = events_of(f.fail(500, "generation failed: boom"));
  ASSERT_EQ(fev.size(), 2u);
  EXPECT_EQ(fev[0].first, "error");
  EXPECT_EQ(fev[0].second["message"], "generation failed: boom");
  EXPECT_EQ(fev[1].first, "response.failed");
  EXPECT_EQ(fev[1].second["response"]["status"], "failed");
  EXPECT_EQ(fev[1].second["response"]["error"]["code"], "server_error");
}

}  // namespace
}  // namespace pagoda::server
