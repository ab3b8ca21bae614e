// The OpenAI Responses API of `pagoda serve` end to end on stories260K: the response
// object, the streamed event sequence against the non-streaming text (greedy), the
// store (previous_response_id hitting the prefix cache, GET, DELETE), text.format
// json_schema, a required function call, and the error matrix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

class Responses : public pagoda::testing::SuiteServer<Responses> {
 protected:
  static void SetUpTestSuite() {
    start_server({"-m", kStories, "-t", "1", "--parallel", "2", "--ctx-size", "1024",
                  "--kv-cache-bytes", "16MiB", "--responses-store-entries", "8"});
  }
  static HttpResult post(const json& body) { return http(port_, "POST", "/v1/responses", body.dump()); }
  static json ok(const HttpResult& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.body;
    return j;
  }
  static void expect_error(const HttpResult& r, int status, const json& param) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
    EXPECT_TRUE(j["error"]["type"].is_string()) << r.body;
    EXPECT_EQ(j["error"]["param"], param) << r.body;
  }
  static std::string text_of(const json& response) {
    for (const json& item : response["output"])
      if (item["type"] == "message") return item["content"][0]["text"];
    return "<no message>";
  }

};

const std::string kStoryStart =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.";

TEST_F(Responses, NonStreamingResponseHasTheResponsesShape) {
  json j = ok(post({{"model", "stories260K.gguf"}, {"input", kStoryStart}, {"temperature", 0},
                    {"max_output_tokens", 16}, {"store", false}}));
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(j["object"], "response");
  EXPECT_TRUE(j["created_at"].is_number_integer());
  EXPECT_EQ(j["model"], "stories260K.gguf");
  EXPECT_EQ(j["status"], "incomplete");  // 16 tokens do not end a story
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(j["output"].size(), 1u);
  const json& msg = j["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_FALSE(msg["content"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(msg["content"][0]["annotations"], json::array());
  EXPECT_EQ(j["usage"]["output_tokens"], 16);
  EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 20);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["input_tokens"].get<int>() + 16);
  EXPECT_TRUE(j["usage"]["input_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_EQ(j["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(j["max_output_tokens"], 16);
  EXPECT_EQ(j["store"], false);
  // Not stored: GET does not know it.
  expect_error(http(port_, "GET", "/v1/responses/" + j["id"].get<std::string>()), 404, nullptr);
}

TEST_F(Responses, StreamedEventsComeInOrderAndTheirDeltasAreTheGreedyText) {
  json req{{"input", "Tell me a story about a dog."}, {"temperature", 0}, {"max_output_tokens", 24}, {"store", false}};
  const std::string whole = text_of(ok(post(req)));
  req["stream"] = true;
  HttpResult s = post(req);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["content-type"].rfind("text/event-stream", 0), 0u);
  // Parse "event: X\ndata: {...}\n\n" blocks.
  std::vector<std::pair<std::string, json>> ev;
  for (size_t pos = 0; pos < s.body.size();) {
    const size_t end = s.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << s.body.substr(pos);
    const std::string block = s.body.substr(pos, end - pos);
    const size_t nl = block.find('\n');
    ASSERT_EQ(block.rfind("event: ", 0), 0u) << block;
    ev.emplace_back(block.substr(7, nl - 7), json::parse(block.substr(nl + 7 /* "\ndata: " */)));
    pos = end + 2;
  }
  ASSERT_GE(ev.size(), 8u);
  std::string deltas;
  std::vector<std::string> kinds;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].second["type"], ev[i].first);
    EXPECT_EQ(ev[i].second["sequence_number"], i);
    if (ev[i].first == "response.output_text.delta") {
      deltas += ev[i].second["delta"].get<std::string>();
      if (kinds.back() == "delta") continue;
      kinds.push_back("delta");
      continue;
    }
    kinds.push_back(ev[i].first);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "delta", "response.output_text.done",
                                             "response.content_part.done", "response.output_item.done",
                                             "response.incomplete"}));
  EXPECT_EQ(deltas, whole);
  const json& done = ev[ev.size() - 4].second;
  EXPECT_EQ(done["text"], whole);
  const json& final_response = ev.back().second["response"];
  EXPECT_EQ(final_response["status"], "incomplete");
  EXPECT_EQ(text_of(final_response), whole);
  EXPECT_EQ(final_response["usage"]["output_tokens"], 24);
  EXPECT_EQ(ev[0].second["response"]["id"], final_response["id"]);
}

TEST_F(Responses, PreviousResponseIdContinuesFromTheCacheAndGetDeleteWork) {
  json first = ok(post({{"input", kStoryStart}, {"temperature", 0}, {"max_output_tokens", 12}}));
  const std::string id = first["id"];
  EXPECT_EQ(first["store"], true);

  // GET answers the stored response.
  json got = ok(http(port_, "GET", "/v1/responses/" + id));
  EXPECT_EQ(got, first);

  // The continuation's prompt extends the first one (its input and output): the first
  // request's prompt blocks come from the prefix cache.
  json second = ok(post({{"input", "What did Lily do next?"}, {"previous_response_id", id}, {"temperature", 0},
                         {"max_output_tokens", 8}}));
  EXPECT_EQ(second["previous_response_id"], id);
  const int first_total = first["usage"]["total_tokens"];
  EXPECT_GT(second["usage"]["input_tokens"].get<int>(), first_total);
  EXPECT_GT(second["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << second.dump();
  EXPECT_LE(second["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), first_total);

  // A chain of three: the third sees both earlier turns.
  json third = ok(post({{"input", "And then?"}, {"previous_response_id", second["id"]}, {"temperature", 0},
                        {"max_output_tokens", 4}}));
  EXPECT_GT(third["usage"]["input_tokens"].get<int>(), second["usage"]["total_tokens"].get<int>());

  // DELETE removes it; then GET, DELETE and continuing from it are 404s.
  HttpResult del = http(port_, "DELETE", "/v1/responses/" + id);
  EXPECT_EQ(ok(del), json::parse(R"({"id":")" + id + R"(","object":"response","deleted":true})"));
  expect_error(http(port_, "GET", "/v1/responses/" + id), 404, nullptr);
  expect_error(http(port_, "DELETE", "/v1/responses/" + id), 404, nullptr);
  expect_error(post({{"input", "x"}, {"previous_response_id", id}}), 404, "previous_response_id");
}

TEST_F(Responses, JsonSchemaTextFormatGivesJsonOfTheSchema) {
  const json schema = json::parse(R"({"type":"object","properties":{"mood":{"enum":["happy","sad"]},
      "age":{"type":"integer","minimum":0,"maximum":9}},"required":["mood","age"],"additionalProperties":false})");
  json j = ok(post({{"input", "Tell me about a cat."}, {"temperature", 0}, {"max_output_tokens", 60}, {"store", false},
                    {"text", {{"format", {{"type", "json_schema"}, {"name", "cat"}, {"strict", true}, {"schema", schema}}}}}}));
  EXPECT_EQ(j["status"], "completed");
  json out = json::parse(text_of(j), nullptr, false);
  ASSERT_TRUE(out.is_object()) << text_of(j);
  EXPECT_TRUE(out["mood"] == "happy" || out["mood"] == "sad") << out;
  ASSERT_TRUE(out["age"].is_number_integer()) << out;
  EXPECT_GE(out["age"].get<int>(), 0);
  EXPECT_LE(out["age"].get<int>(), 9);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(j["text"]["format"]["type"], "json_schema");
}

TEST_F(Responses, RequiredToolChoiceGivesAFunctionCallItemAndItsOutputContinues) {
  json tools = json::parse(R"([{"type":"function","name":"get_time","parameters":{"type":"object",
      "properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}}])");
  json req{{"input", "What time is it?"}, {"temperature", 0}, {"max_output_tokens", 80}, {"tools", tools},
           {"tool_choice", "required"}, {"parallel_tool_calls", false}};
  json j = ok(post(req));
  EXPECT_EQ(j["status"], "completed");
  ASSERT_EQ(j["output"].size(), 1u) << j.dump();
  const json& call = j["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_time");
  EXPECT_EQ(call["status"], "completed");
  json args = json::parse(call["arguments"].get<std::string>());
  EXPECT_TRUE(args["tz"] == "UTC" || args["tz"] == "CET") << args;

  // Streaming: the same call, as output_item.added / arguments deltas / done.
  req["stream"] = true;
  HttpResult s = post(req);
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("event: response.function_call_arguments.delta"), std::string::npos) << s.body;
  EXPECT_NE(s.body.find("event: response.function_call_arguments.done"), std::string::npos);
  EXPECT_NE(s.body.find("event: response.completed"), std::string::npos);

  // The tool's result goes back as a function_call_output on top of the stored call.
  json next = ok(post({{"previous_response_id", j["id"]}, {"temperature", 0}, {"max_output_tokens", 6},
                       {"tools", tools},
                       {"input", {{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "noon"}}}}}));
  EXPECT_GT(next["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << next.dump();
}

TEST_F(Responses, ErrorMatrix) {
  expect_error(http(port_, "POST", "/v1/responses", "{"), 400, nullptr);
  expect_error(post(json::object()), 400, "input");
  expect_error(post({{"input", json::array()}}), 400, "input");
  expect_error(post({{"input", {{{"role", "user"}, {"content", {{{"type", "input_file"}}}}}}}}), 400,
               "input[0].content[0]");
  expect_error(post({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}), 400,
               "input[0].content[0].image_url");
  expect_error(post({{"input", "hi"}, {"tools", {{{"type", "web_search"}}}}}), 400, "tools");
  expect_error(post({{"input", "hi"}, {"text", {{"format", {{"type", "xml"}}}}}}), 400, "text.format.type");
  expect_error(post({{"input", "hi"}, {"max_output_tokens", 0}}), 400, "max_output_tokens");
  // Another model's name is served by the loaded model (404 only with --strict-model-names).
  EXPECT_EQ(post({{"input", "hi"}, {"model", "gpt-5"}, {"max_output_tokens", 1}}).status, 200);
  std::string long_input;
  for (int i = 0; i < 400; ++i) long_input += "the dog ran ";
  expect_error(post({{"input", long_input}}), 400, "input");  // longer than the context
  expect_error(http(port_, "GET", "/v1/responses/resp_unknown"), 404, nullptr);
  expect_error(http(port_, "DELETE", "/v1/responses/resp_unknown"), 404, nullptr);
  EXPECT_EQ(http(port_, "POST", "/v1/responses/resp_unknown", "{}").status, 405);
  EXPECT_EQ(http(port_, "GET", "/v1/responses").status, 405);
}

}  // namespace

namespace {

// Mutated Responses bodies: each gets 200 or a 4xx OpenAI error object, never a 5xx or a
// dropped connection. Fixed seed, so a failure reproduces.
TEST_F(Responses, FuzzedBodiesNeverCrashTheServer) {
  const std::vector<std::string> seeds = {
      R"({"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}],"instructions":"be brief","max_output_tokens":3,"temperature":0.5,"store":false})",
      R"({"input":"Once","max_output_tokens":2,"stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"auto","store":false})",
      R"({"input":"Once","max_output_tokens":4,"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}},"store":false})",
      R"({"input":"Once","previous_response_id":"resp_x","reasoning":{"effort":"low"},"max_output_tokens":2})",
  };
  const std::string alphabet = std::string("{}[]\":,0123456789-.eE truefalsenul\\u00ff\xff") + '\0' + "abc";
  std::mt19937_64 rng(4242);
  for (int iter = 0; iter < 120; ++iter) {
    const std::string body = pagoda::testing::mutate_body(seeds[iter % seeds.size()], rng, alphabet);
    HttpResult r = http(port_, "POST", "/v1/responses", body);
    ASSERT_NE(r.status, 0) << "no answer for " << body;
    EXPECT_LT(r.status, 500) << body << " -> " << r.body;
    if (r.status >= 400) {
      json j = json::parse(r.body, nullptr, false);
      EXPECT_TRUE(j.is_object() && j.contains("error")) << body << " -> " << r.body;
    }
  }
  EXPECT_EQ(http(port_, "GET", "/health").status, 200);
}

// Reasoning through Qwen3's template: a grammar makes stories260K "think"; the thinking
// becomes a reasoning item (and reasoning_tokens), the rest the message, streamed as
// reasoning_text deltas then output_text deltas.
TEST(ResponsesReasoning, ThinkingBecomesAReasoningItem) {
  ServerProcess p({"-m", kStories, "-t", "1", "--ctx-size", "1024", "--kv-cache-bytes", "16MiB", "--no-log-requests",
                   "--chat-template-file", std::string(PAGODA_SHARED_DIR) + "/chat-templates/Qwen-Qwen3-0.6B.jinja"});
  const uint16_t port = p.start();
  ASSERT_NE(port, 0) << p.log();
  json req{{"input", "Hi"}, {"temperature", 0}, {"max_output_tokens", 40}, {"reasoning", {{"effort", "low"}}},
           {"store", false}, {"grammar", "root ::= \"<think>\\nI ponder\\n</think>\\n\\nHello there.\""}};
  HttpResult r = http(port, "POST", "/v1/responses", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["output"].size(), 2u) << j.dump();
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "I ponder");
  EXPECT_EQ(j["output"][1]["type"], "message");
  EXPECT_EQ(j["output"][1]["content"][0]["text"], "Hello there.");
  EXPECT_GT(j["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  EXPECT_EQ(j["reasoning"]["effort"], "low");

  req["stream"] = true;
  HttpResult s = http(port, "POST", "/v1/responses", req.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  std::string reasoning, text;
  for (const std::string& data : pagoda::testing::sse_data(s.body)) {
    json ev = json::parse(data);
    if (ev["type"] == "response.reasoning_text.delta") {
      EXPECT_TRUE(text.empty()) << "reasoning after text";
      reasoning += ev["delta"].get<std::string>();
    }
    if (ev["type"] == "response.output_text.delta") text += ev["delta"].get<std::string>();
    if (ev["type"] == "response.completed") {
      // The same items as the non-streamed response (whose ids differ: another response).
      json streamed = ev["response"]["output"], whole = j["output"];
      for (json* items : {&streamed, &whole})
        for (json& item : *items) item.erase("id");
      EXPECT_EQ(streamed, whole) << data;
    }
  }
  EXPECT_EQ(reasoning, "I ponder");
  EXPECT_EQ(text, "Hello there.");
}

}  // namespace
