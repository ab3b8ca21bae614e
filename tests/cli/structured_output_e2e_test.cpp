// Structured outputs and tool calls end to end: `pagoda serve` on stories260K (a real
// 512-token SentencePiece vocabulary, no chat template: ChatML and the generic call
// format), sampled at temperature 1 over many seeds, every output checked by an
// independent validator (Debian's python3-jsonschema; std::regex for regexes).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;
using pagoda::testing::sse_data;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
constexpr int kSeeds = 24;

bool have_jsonschema() {
  return std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
}

// Validates every instance against the schema with python3-jsonschema (Draft 2020-12
// and the format checker); returns one line per failure ("" when all are valid).
std::string validate_with_python(const json& schema, const std::vector<std::string>& instances) {
  char dir[] = "/tmp/pagoda-schema-XXXXXX";
  if (!mkdtemp(dir)) return "mkdtemp failed";
  const std::string base(dir);
  std::ofstream(base + "/schema.json") << schema.dump();
  {
    std::ofstream out(base + "/instances.jsonl");
    for (const std::string& s : instances) out << json(s).dump() << "\n";
  }
  std::ofstream(base + "/check.py") << R"PY(
import json, sys, jsonschema
schema = json.load(open(sys.argv[1] + "/schema.json"))
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
for n, line in enumerate(open(sys.argv[1] + "/instances.jsonl")):
    text = json.loads(line)
    try:
        doc = json.loads(text)
    except Exception as e:
        print("instance %d does not parse: %r (%s)" % (n, text, e)); continue
    for err in validator.iter_errors(doc):
        print("instance %d %r: %s" % (n, text, err.message))
)PY";
  std::string cmd = "/usr/bin/python3 " + base + "/check.py " + base + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  std::system(("rm -rf " + base).c_str());
  return out;
}

class Structured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"-m", kStories, "-t", "2", "--parallel", "4", "--ctx-size", "2048",
                                 "--kv-cache-bytes", "32MiB", "--no-log-requests"});
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(port_, 0) << server_->log(); }
  static HttpResult post(const std::string& path, const json& body) { return http(port_, "POST", path, body.dump()); }
  static json chat(json extra) {
    json body{{"messages", json::array({{{"role", "user"}, {"content", "Tell me about a cat."}}})},
              {"temperature", 1.0},
              {"max_tokens", 400}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    HttpResult r = post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.body;
    return j;
  }
  static ServerProcess* server_;
  static uint16_t port_;
};
ServerProcess* Structured::server_ = nullptr;
uint16_t Structured::port_ = 0;

// Bounded everywhere (enum, maxLength, maxItems, integer range), so every sample ends
// well inside max_tokens and every one must validate.
const json kPersonSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "mood": {"enum": ["happy", "sad", "sleepy"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/pet"}]},
    "nick": {"type": "string", "pattern": "^[a-z]{2,5}$"}
  },
  "required": ["name", "age", "mood", "tags", "pet"],
  "additionalProperties": false,
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "cat"}, "legs": {"type": "integer", "minimum": 3, "maximum": 4}},
                    "required": ["kind", "legs"], "additionalProperties": false}}
})");

TEST_F(Structured, JsonSchemaOutputValidatesOverManySeeds) {
  if (!have_jsonschema()) GTEST_SKIP() << "python3-jsonschema is not installed";
  std::vector<std::string> outputs;
  for (int seed = 0; seed < kSeeds; ++seed) {
    json j = chat({{"seed", seed},
                   {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}}}}}});
    ASSERT_EQ(j["choices"][0]["finish_reason"], "stop") << j.dump();
    outputs.push_back(j["choices"][0]["message"]["content"].get<std::string>());
  }
  EXPECT_EQ(validate_with_python(kPersonSchema, outputs), "");
  // Different seeds explore the schema: not all outputs are the same.
  EXPECT_GT(std::set<std::string>(outputs.begin(), outputs.end()).size(), 1u);
}

TEST_F(Structured, JsonObjectOutputParsesWhenItFinishes) {
  // Left alone stories260K never closes an open object (it keeps adding keys), so '"'
  // and '}' are favoured with logit_bias; the grammar still decides what is allowed.
  auto token_of = [&](const std::string& text) {
    HttpResult r = post("/tokenize", {{"content", text}});
    json ids = json::parse(r.body)["tokens"];
    return ids.back().get<int>();  // SPM puts a "▁" token first
  };
  const json bias{{std::to_string(token_of("}")), 8}, {std::to_string(token_of("\"")), 4}};
  int finished = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    json j = chat({{"seed", seed}, {"max_tokens", 300}, {"logit_bias", bias}, {"response_format", {{"type", "json_object"}}}});
    const std::string text = j["choices"][0]["message"]["content"].get<std::string>();
    if (j["choices"][0]["finish_reason"] != "stop") continue;  // cut by max_tokens: may be partial
    ++finished;
    json doc = json::parse(text, nullptr, false);
    EXPECT_TRUE(doc.is_object()) << text;
  }
  EXPECT_GT(finished, 0);
}

TEST_F(Structured, ChoiceRegexAndGrammarExtensions) {
  const std::vector<std::string> choices{"red", "green", "blue sky"};
  const std::regex re("[A-Z][a-z]{1,6}-[0-9]{2,3}");
  for (int seed = 0; seed < 8; ++seed) {
    json c = chat({{"seed", seed}, {"guided_choice", choices}});
    const std::string choice = c["choices"][0]["message"]["content"];
    EXPECT_NE(std::find(choices.begin(), choices.end(), choice), choices.end()) << choice;
    json r = chat({{"seed", seed}, {"guided_regex", "[A-Z][a-z]{1,6}-[0-9]{2,3}"}});
    const std::string text = r["choices"][0]["message"]["content"];
    EXPECT_TRUE(std::regex_match(text, re)) << text;
    json g = chat({{"seed", seed}, {"grammar", "root ::= (\"yes\" | \"no\") \", \" [0-9]+ \".\""}, {"max_tokens", 40}});
    const std::string gt = g["choices"][0]["message"]["content"];
    if (g["choices"][0]["finish_reason"] == "stop") {
      EXPECT_TRUE(std::regex_match(gt, std::regex("(yes|no), [0-9]+\\."))) << gt;
    }
  }
  // The completions endpoint too.
  HttpResult r = post("/v1/completions", {{"prompt", "Once upon a time"}, {"guided_choice", choices}, {"seed", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = json::parse(r.body)["choices"][0]["text"];
  EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
}

TEST_F(Structured, StreamedStructuredOutputIsTheSameText) {
  json body{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
            {"temperature", 1.0}, {"seed", 7}, {"max_tokens", 400},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", kPersonSchema}}}}}};
  HttpResult plain = post("/v1/chat/completions", body);
  ASSERT_EQ(plain.status, 200);
  body["stream"] = true;
  HttpResult streamed = post("/v1/chat/completions", body);
  ASSERT_EQ(streamed.status, 200);
  std::string text;
  for (const std::string& d : sse_data(streamed.body)) {
    if (d == "[DONE]") break;
    json c = json::parse(d);
    if (c["choices"].empty()) continue;
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, json::parse(plain.body)["choices"][0]["message"]["content"].get<std::string>());
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                   "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["zone"], "additionalProperties": false}}}
])");

json tool_schema(const std::string& name) {
  for (const json& t : kTools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  return nullptr;
}

TEST_F(Structured, RequiredToolCallsAreValidCallsOverManySeeds) {
  if (!have_jsonschema()) GTEST_SKIP() << "python3-jsonschema is not installed";
  std::map<std::string, std::vector<std::string>> args_by_tool;
  for (int seed = 0; seed < kSeeds; ++seed) {
    // One call each: with parallel calls a model this small rarely stops adding calls.
    json j = chat({{"seed", seed}, {"tools", kTools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
    const json& choice = j["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << j.dump();
    ASSERT_TRUE(choice["message"]["content"].is_null()) << j.dump();
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u) << j.dump();
    for (const json& call : choice["message"]["tool_calls"]) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_TRUE(call["id"].is_string() && !call["id"].get<std::string>().empty());
      const std::string name = call["function"]["name"];
      ASSERT_FALSE(tool_schema(name).is_null()) << name;
      args_by_tool[name].push_back(call["function"]["arguments"].get<std::string>());
    }
  }
  for (const auto& [name, args] : args_by_tool) EXPECT_EQ(validate_with_python(tool_schema(name), args), "") << name;
}

TEST_F(Structured, NamedToolStreamingThenASecondTurnHitsTheCache) {
  json tool_choice{{"type", "function"}, {"function", {{"name", "get_time"}}}};
  json messages = json::array({{{"role", "user"}, {"content", "What time is it in Paris?"}}});
  json body{{"messages", messages}, {"tools", kTools}, {"tool_choice", tool_choice}, {"temperature", 1.0},
            {"seed", 3}, {"max_tokens", 200}, {"parallel_tool_calls", false}};
  HttpResult plain = post("/v1/chat/completions", body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json message = json::parse(plain.body)["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << plain.body;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_time");

  // Streaming: one start delta (index, id, type, name) then argument fragments that
  // concatenate to the non-streaming arguments.
  body["stream"] = true;
  HttpResult streamed = post("/v1/chat/completions", body);
  ASSERT_EQ(streamed.status, 200);
  std::string name, args, finish;
  int starts = 0;
  for (const std::string& d : sse_data(streamed.body)) {
    if (d == "[DONE]") break;
    json c = json::parse(d);
    if (c["choices"].empty()) continue;
    const json& delta = c["choices"][0]["delta"];
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    if (!delta.contains("tool_calls")) {
      if (delta.contains("content")) EXPECT_EQ(delta["content"], "") << d;
      continue;
    }
    const json& call = delta["tool_calls"][0];
    EXPECT_EQ(call["index"], 0);
    if (call.contains("id")) {
      ++starts;
      EXPECT_EQ(call["type"], "function");
      name = call["function"]["name"];
    }
    args += call["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(name, "get_time");
  EXPECT_EQ(args, message["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");

  // The next turn carries the call and its result; its prompt starts with the first
  // turn's prompt, so the prefix cache serves that part.
  messages.push_back(message);
  messages.push_back({{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "12:00"}});
  HttpResult second = post("/v1/chat/completions", {{"messages", messages}, {"tools", kTools}, {"max_tokens", 8}});
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_GT(json::parse(second.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second.body;
}

TEST_F(Structured, UnsupportedSchemasAndBadGrammarsAre400AndTheServerGoesOn) {
  auto expect_400 = [&](const json& extra, const std::string& needle) {
    json body{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 4}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    HttpResult r = post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find(needle), std::string::npos) << r.body;
  };
  expect_400({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"not", {{"type", "string"}}}}}}}}}},
             "not");
  expect_400({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "object"}, {"patternProperties", json::object()}}}}}}}},
             "patternProperties");
  expect_400({{"response_format", {{"type", "xml"}}}}, "response_format.type");
  expect_400({{"grammar", "root ::= undefined-rule"}}, "undefined-rule");
  expect_400({{"grammar", std::string(100000, '(')}}, "grammar");
  expect_400({{"guided_regex", "(a)\\1"}}, "guided_regex");
  json bad_tool = kTools;
  bad_tool[0]["function"]["parameters"]["properties"]["city"]["not"] = {{"const", "x"}};
  expect_400({{"tools", bad_tool}, {"tool_choice", "required"}}, "not");
  HttpResult ok = post("/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 4}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace

namespace {

// stories260K served with real model-family templates: the Qwen2.5 template (Hermes
// <tool_call> format) renders tool definitions, the assistant's tool_calls and the tool
// result; the Qwen3 template makes the server extract <think> reasoning.
class FamilyTemplates : public ::testing::Test {
 protected:
  static uint16_t start(ServerProcess*& p, const std::string& tmpl, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"-m", kStories, "-t", "2", "--ctx-size", "1024", "--kv-cache-bytes", "32MiB",
                                  "--no-log-requests", "--chat-template-file",
                                  std::string(PAGODA_SHARED_DIR) + "/chat-templates/" + tmpl};
    args.insert(args.end(), extra.begin(), extra.end());
    p = new ServerProcess(args);
    return p->start();
  }
  static json post_chat(uint16_t port, const json& body) {
    HttpResult r = http(port, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  }
};

TEST_F(FamilyTemplates, HermesToolCallRoundTripThroughTheQwenTemplate) {
  ServerProcess* p = nullptr;
  const uint16_t port = start(p, "Qwen-Qwen2.5-7B-Instruct.jinja");
  std::unique_ptr<ServerProcess> owner(p);
  ASSERT_NE(port, 0) << p->log();
  EXPECT_NE(p->log().find("tool calls: hermes"), std::string::npos) << p->log();
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}});
  json first = post_chat(port, {{"messages", messages}, {"tools", kTools}, {"tool_choice", "required"},
                                {"parallel_tool_calls", false}, {"temperature", 1.0}, {"seed", 11},
                                {"max_tokens", 200}});
  const json& msg = first["choices"][0]["message"];
  ASSERT_EQ(first["choices"][0]["finish_reason"], "tool_calls") << first.dump();
  ASSERT_GE(msg["tool_calls"].size(), 1u);
  EXPECT_TRUE(msg["content"].is_null());
  json args = json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(args.is_object()) << msg.dump();

  // The rendered history shows the call in the template's own <tool_call> syntax.
  messages.push_back(msg);
  messages.push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "sunny"}});
  HttpResult rendered = http(port, "POST", "/apply-template", json{{"messages", messages}, {"tools", kTools}}.dump());
  ASSERT_EQ(rendered.status, 200);
  const std::string prompt = json::parse(rendered.body)["prompt"];
  EXPECT_NE(prompt.find("<tool_call>\n{\"name\": \"" + msg["tool_calls"][0]["function"]["name"].get<std::string>()),
            std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << prompt;
  json second = post_chat(port, {{"messages", messages}, {"tools", kTools}, {"max_tokens", 8}});
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second.dump();
}

// A call of a function the request did not offer is content, not a tool call, on every
// route and both ways of answering: the grammar makes stories260K write a Hermes call of
// "rm_rf" while only get_weather and get_time are offered (tool_choice auto). The same
// output naming get_time is a call, so the setup can produce calls.
TEST_F(FamilyTemplates, ACallOfAFunctionThatWasNotOfferedIsContent) {
  ServerProcess* p = nullptr;
  const uint16_t port = start(p, "Qwen-Qwen2.5-7B-Instruct.jinja");
  std::unique_ptr<ServerProcess> owner(p);
  ASSERT_NE(port, 0) << p->log();
  const std::string unoffered = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>";
  auto body_writing = [](const std::string& text) {
    std::string literal = json(text).dump();  // a GBNF string literal: JSON's escapes are GBNF's
    return json{{"messages", json::array({{{"role", "user"}, {"content", "Clean up."}}})},
                {"tools", kTools},
                {"grammar", "root ::= " + literal},
                {"max_tokens", 120}};
  };

  json offered =
      post_chat(port, body_writing("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"));
  ASSERT_EQ(offered["choices"][0]["finish_reason"], "tool_calls") << offered.dump();
  EXPECT_EQ(offered["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");

  json plain = post_chat(port, body_writing(unoffered));
  const json& msg = plain["choices"][0]["message"];
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop") << plain.dump();
  EXPECT_EQ(msg["content"], unoffered) << plain.dump();
  EXPECT_FALSE(msg.contains("tool_calls")) << plain.dump();

  json sbody = body_writing(unoffered);
  sbody["stream"] = true;
  HttpResult s = http(port, "POST", "/v1/chat/completions", sbody.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  std::string content, finish;
  for (const std::string& d : sse_data(s.body)) {
    if (d == "[DONE]") break;
    json c = json::parse(d);
    if (c["choices"].empty()) continue;
    const json& delta = c["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("tool_calls")) << d;
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, unoffered);
  EXPECT_EQ(finish, "stop");

  // /v1/responses parses through the same options: a message item, no function_call item.
  json rbody = body_writing(unoffered);
  rbody.erase("messages");
  rbody.erase("max_tokens");
  rbody["max_output_tokens"] = 120;
  rbody["input"] = "Clean up.";
  rbody["tools"] = json::array();
  for (const json& t : kTools) rbody["tools"].push_back(json{{"type", "function"}, {"name", t["function"]["name"]},
                                                             {"parameters", t["function"]["parameters"]}});
  HttpResult r = http(port, "POST", "/v1/responses", rbody.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json response = json::parse(r.body);
  std::string text;
  for (const json& item : response["output"]) {
    EXPECT_NE(item["type"], "function_call") << r.body;
    if (item["type"] == "message")
      for (const json& part : item["content"]) text += part.value("text", "");
  }
  EXPECT_EQ(text, unoffered) << r.body;
}

TEST_F(FamilyTemplates, ThinkingGoesToReasoningContentUnlessReasoningFormatIsNone) {
  // The grammar makes stories260K "think": the output is <think>...</think> then text.
  const json body{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                  {"grammar", "root ::= \"<think>\\nI ponder\\n</think>\\n\\nHello there.\""},
                  {"max_tokens", 64}};
  for (const bool none : {false, true}) {
    ServerProcess* p = nullptr;
    const uint16_t port = start(p, "Qwen-Qwen3-0.6B.jinja", none ? std::vector<std::string>{"--reasoning-format", "none"}
                                                                 : std::vector<std::string>{});
    std::unique_ptr<ServerProcess> owner(p);
    ASSERT_NE(port, 0) << p->log();
    json j = post_chat(port, body);
    const json& msg = j["choices"][0]["message"];
    if (none) {
      EXPECT_EQ(msg["content"], "<think>\nI ponder\n</think>\n\nHello there.") << j.dump();
      EXPECT_FALSE(msg.contains("reasoning_content"));
      continue;
    }
    EXPECT_EQ(msg["reasoning_content"], "I ponder") << j.dump();
    EXPECT_EQ(msg["content"], "Hello there.") << j.dump();
    // Streaming: reasoning_content deltas, then content deltas, the same texts.
    json sbody = body;
    sbody["stream"] = true;
    HttpResult s = http(port, "POST", "/v1/chat/completions", sbody.dump());
    std::string reasoning, content;
    for (const std::string& d : sse_data(s.body)) {
      if (d == "[DONE]") break;
      json c = json::parse(d);
      if (c["choices"].empty()) continue;
      const json& delta = c["choices"][0]["delta"];
      if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
      if (delta.contains("content")) content += delta["content"].get<std::string>();
    }
    EXPECT_EQ(reasoning, "I ponder");
    EXPECT_EQ(content, "Hello there.");
  }
}

}  // namespace

namespace {

TEST_F(FamilyTemplates, ThinkingModelsMayReasonBeforeAConstrainedAnswer) {
  // Qwen3's template (the model opens <think> itself): the schema constrains the answer,
  // and a thinking block may come first. stories260K seldom thinks on its own, so a
  // logit_bias on '<' makes some seeds open the block.
  ServerProcess* p = nullptr;
  const uint16_t port = start(p, "Qwen-Qwen3-0.6B.jinja");
  std::unique_ptr<ServerProcess> owner(p);
  ASSERT_NE(port, 0) << p->log();
  HttpResult tok = http(port, "POST", "/tokenize", json{{"content", "<"}}.dump());
  const int lt = json::parse(tok.body)["tokens"].back().get<int>();
  const std::vector<std::string> choices{"alpha", "beta"};
  int finished = 0, thought = 0;
  for (int seed = 0; seed < 16; ++seed) {
    json j = post_chat(port, {{"messages", json::array({{{"role", "user"}, {"content", "Pick one."}}})},
                              {"guided_choice", choices}, {"temperature", 1.0}, {"seed", seed},
                              {"logit_bias", {{std::to_string(lt), 15}}}, {"max_tokens", 60}});
    const json& msg = j["choices"][0]["message"];
    // An unclosed block (cut by max_tokens) is all reasoning, as the parsers read it.
    if (msg.contains("reasoning_content")) ++thought;
    if (j["choices"][0]["finish_reason"] != "stop") continue;
    ++finished;
    const std::string content = msg["content"];
    EXPECT_NE(std::find(choices.begin(), choices.end(), content), choices.end()) << j.dump();
  }
  EXPECT_GT(finished, 0);
  EXPECT_GT(thought, 0);
}

}  // namespace

namespace {

// Mutated tool / schema / grammar requests: each gets 200 or a 4xx error object (never
// 5xx or a dropped connection: a schema or grammar the converter or the parser cannot
// take is the client's error), and the server keeps serving. Fixed seed.
TEST_F(Structured, FuzzedToolAndSchemaRequestsNeverCrashTheServer) {
  const std::vector<std::string> seeds = {
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"enum":[1,"x",null]}},"required":["a"]}}}],"tool_choice":"required"})",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":50},"s":{"type":"string","pattern":"^[a-c]{1,3}$"},"l":{"type":"array","items":{"$ref":"#/$defs/x"},"maxItems":2}},"$defs":{"x":{"anyOf":[{"type":"boolean"},{"const":"k"}]}}}}}})",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"grammar":"root ::= (\"a\" | [b-d]+) x{1,3}\nx ::= \"-\" [0-9]"})",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"guided_regex":"(ab|c[d-f]){1,3}\\d?","stream":true})",
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f"}}]})",
  };
  const std::string alphabet = std::string("{}[]()\":,0123456789-.^$*+?|\\ truefalsenul\xff") + '\0' + "abcx";
  std::mt19937_64 rng(777);
  int answered = 0, ok = 0;
  for (int iter = 0; iter < 250; ++iter) {
    const std::string body = pagoda::testing::mutate_body(seeds[iter % seeds.size()], rng, alphabet);
    HttpResult r = http(port_, "POST", "/v1/chat/completions", body);
    ASSERT_NE(r.status, 0) << "no answer for " << body;
    EXPECT_LT(r.status, 500) << body << " -> " << r.body;
    if (r.status >= 400) {
      json j = json::parse(r.body, nullptr, false);
      EXPECT_TRUE(j.is_object() && j.contains("error")) << body << " -> " << r.body;
    } else {
      ++ok;
    }
    ++answered;
  }
  EXPECT_EQ(answered, 250);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(http(port_, "GET", "/health").status, 200);
}

}  // namespace

namespace {

// reasoning_effort and chat_template_kwargs reach the template as variables: a template
// that writes them makes the prompt (counted in usage.prompt_tokens) longer.
TEST(TemplateVariables, ReasoningEffortAndKwargsReachTheTemplate) {
  const std::string path = "/tmp/pagoda_vars_template_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}]{% endif %}"
                         "{% if enable_thinking is defined and not enable_thinking %}[no thinking]{% endif %}";
  ServerProcess server({"-m", kStories, "-t", "1", "--kv-cache-bytes", "16MiB", "--no-log-requests",
                        "--chat-template-file", path});
  const uint16_t port = server.start();
  ASSERT_NE(port, 0) << server.log();
  auto prompt_tokens = [&](json extra) {
    json body{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 1}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    HttpResult r = http(port, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["usage"]["prompt_tokens"].get<int>();
  };
  const int plain = prompt_tokens(json::object());
  const int effort = prompt_tokens({{"reasoning_effort", "high"}});
  const int no_thinking = prompt_tokens({{"chat_template_kwargs", {{"enable_thinking", false}}}});
  // chat_template_kwargs wins over reasoning_effort for the same variable.
  const int kwargs_effort = prompt_tokens({{"reasoning_effort", "high"}, {"chat_template_kwargs", {{"reasoning_effort", "low"}}}});
  EXPECT_GT(effort, plain + 5);
  EXPECT_GT(no_thinking, plain + 5);
  EXPECT_LT(kwargs_effort, effort);  // "low" is shorter than "high"
  std::remove(path.c_str());
}

}  // namespace
