// `pagoda serve` end to end: the real binary on a free loopback port, driven by a
// plain-socket HTTP client, with stories260K (a trained model with its tokenizer).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "model/hf_fixture.h"
#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;
using pagoda::testing::sse_data;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
// The first 32 greedy tokens after BOS, from ../shared/models/stories260K/README.md (ids
// 403 407 261 ... 426 385 from an independent numpy forward pass), as their vocabulary
// pieces concatenated ('▁' as a space; the same text as llama2.c run.c -t 0). The
// leading space of " Once" stays: a completion's text continues its prompt, and only a
// whole sequence's decode drops the space the tokenizer prepended.
const std::string kGolden32 =
    " Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One";

json body_json(const HttpResult& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.body;
  return j;
}

// An OpenAI-style error object with the given status.
void expect_error(const HttpResult& r, int status, const std::string& needle = {}) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("type"));
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
  if (!needle.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
}

// One server for the tests that do not need special flags.
class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"-m", kStories, "-t", "2", "--parallel", "4", "--ctx-size", "256",
                                 "--max-body-bytes", "64KiB", "--kv-cache-bytes", "16MiB"});
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(port_, 0) << server_->log(); }
  static HttpResult post(const std::string& path, const json& body) { return http(port_, "POST", path, body.dump()); }
  static HttpResult get(const std::string& path) { return http(port_, "GET", path); }

  static ServerProcess* server_;
  static uint16_t port_;
};
ServerProcess* Serve::server_ = nullptr;
uint16_t Serve::port_ = 0;

TEST_F(Serve, HealthAndModels) {
  HttpResult h = get("/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(body_json(h)["status"], "ok");
  HttpResult m = get("/v1/models");
  ASSERT_EQ(m.status, 200);
  json j = body_json(m);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories260K.gguf");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(Serve, GreedyCompletionFromBosIsTheGoldenStory) {
  HttpResult r = post("/v1/completions", {{"prompt", {1}}, {"temperature", 0}, {"max_tokens", 32}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = body_json(r);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(j["model"], "stories260K.gguf");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], kGolden32) << r.body;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 1);
  EXPECT_EQ(j["usage"]["completion_tokens"], 32);
  EXPECT_EQ(j["usage"]["total_tokens"], 33);
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(Serve, StreamingCompletionEqualsNonStreaming) {
  json req{{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 30}};
  HttpResult whole = post("/v1/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.body;
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  HttpResult s = post("/v1/completions", req);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["content-type"].rfind("text/event-stream", 0), 0u);
  std::vector<std::string> events = sse_data(s.body);
  ASSERT_GE(events.size(), 3u) << s.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    if (!c["usage"].is_null()) {
      usage = c["usage"];
      EXPECT_TRUE(c["choices"].empty());
      EXPECT_EQ(i + 2, events.size()) << "the usage chunk comes last";
      continue;
    }
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, body_json(whole)["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 30);
}

TEST_F(Serve, ChatCompletionStreamsRoleThenContentThenFinish) {
  json req{{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
           {"temperature", 0},
           {"max_tokens", 12},
           {"stream", true},
           {"stream_options", {{"include_usage", true}}}};
  HttpResult s = post("/v1/chat/completions", req);
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<std::string> ev = sse_data(s.body);
  ASSERT_GE(ev.size(), 4u);
  json first = json::parse(ev[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev.back(), "[DONE]");
  json usage_chunk = json::parse(ev[ev.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 12);
  json last_choice = json::parse(ev[ev.size() - 3]);
  EXPECT_EQ(last_choice["choices"][0]["finish_reason"], "length");

  req["stream"] = false;
  req.erase("stream_options");
  HttpResult whole = post("/v1/chat/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json j = body_json(whole);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  std::string streamed;
  for (size_t i = 1; i + 2 < ev.size(); ++i) {
    json c = json::parse(ev[i]);
    if (c["choices"][0]["delta"].contains("content")) streamed += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, j["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(Serve, SecondRequestReusesThePrefixAndTenantsDoNotShare) {
  std::string prompt = "Once upon a time, there was a little dog named Max. Max liked to run in the park with his friends.";
  json req{{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 4}, {"prompt_cache_key", "tenant-a"}};
  ASSERT_EQ(post("/v1/completions", req).status, 200);
  json j = body_json(post("/v1/completions", req));
  EXPECT_GT(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << j.dump();
  json other = req;
  other["prompt_cache_key"] = "tenant-b";
  EXPECT_EQ(body_json(post("/v1/completions", other))["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json off = req;
  off["cache_prompt"] = false;
  EXPECT_EQ(body_json(post("/v1/completions", off))["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  HttpResult stats = get("/v1/cache/stats");
  ASSERT_EQ(stats.status, 200);
  json s = body_json(stats);
  EXPECT_GT(s["prefix_cache"]["hit_tokens"].get<int64_t>(), 0);
  EXPECT_GT(s["pool"]["bytes_per_block"].get<int64_t>(), 0);
  EXPECT_GT(s["memory"]["resident_weight_bytes"].get<int64_t>(), 0);
  EXPECT_GT(s["memory"]["file_tensor_bytes"].get<int64_t>(), 0);
  EXPECT_GT(s["memory"]["process_rss_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(s["pool"]["bytes_in_use"].get<int64_t>(),
            (s["pool"]["blocks_live"].get<int64_t>() + s["pool"]["blocks_evictable"].get<int64_t>()) *
                s["pool"]["bytes_per_block"].get<int64_t>());
}

TEST_F(Serve, LogprobsListTopAlternatives) {
  HttpResult r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                               {"temperature", 0},
                                               {"max_tokens", 3},
                                               {"logprobs", true},
                                               {"top_logprobs", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  json content = body_json(r)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << r.body;
  for (const json& t : content) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);  // greedy: the best one
  }
}

TEST_F(Serve, BadRequestsGetOpenAiErrors) {
  expect_error(http(port_, "POST", "/v1/chat/completions", "{not json"), 400);
  expect_error(http(port_, "POST", "/v1/chat/completions", "[1,2]"), 400);
  expect_error(post("/v1/chat/completions", {{"messages", json::array()}}), 400);
  expect_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"n", 2}}), 400);
  expect_error(post("/v1/completions", {{"prompt", "x"}, {"temperature", "hot"}}), 400, "temperature");
  expect_error(post("/v1/completions", {{"prompt", {1, 99999}}}), 400);
  std::vector<int> long_prompt(300, 5);
  expect_error(post("/v1/completions", {{"prompt", long_prompt}}), 400, "300");
  // Another model's name is served (llama_server_habits_e2e_test: 404 with --strict-model-names).
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-17"}, {"max_tokens", 1}}).status, 200);
  expect_error(get("/v1/nothing"), 404);
  HttpResult wrong_method = get("/v1/chat/completions");
  expect_error(wrong_method, 405);
  std::string big(100 * 1024, 'a');
  expect_error(http(port_, "POST", "/v1/completions", "{\"prompt\":\"" + big + "\"}"), 413);
  // Invalid UTF-8 inside a JSON string.
  expect_error(http(port_, "POST", "/v1/completions", std::string("{\"prompt\":\"a\xff\xfe\"}")), 400);
  // The server is still fine.
  EXPECT_EQ(get("/health").status, 200);
}

// Mutated and random request bodies on every POST route: each gets a well-formed HTTP answer
// (200, or a 4xx OpenAI or Anthropic error object, both with an "error" member; never 5xx,
// never a dropped connection), and the server keeps serving. Fixed seed, so a failure
// reproduces.
TEST_F(Serve, FuzzedRequestBodiesNeverCrashTheServer) {
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"/v1/chat/completions",
       R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3,"temperature":0.5,"top_p":0.9,"stop":["x"],"logit_bias":{"5":-100},"logprobs":true,"top_logprobs":2,"stream":false})"},
      {"/v1/completions", R"({"prompt":[1,2,3],"max_tokens":3,"min_tokens":1,"seed":7,"stream":true,"logprobs":2})"},
      {"/v1/completions", R"({"prompt":"Once","max_tokens":2,"stop":"z","presence_penalty":1,"cache_prompt":false})"},
      {"/tokenize", R"({"content":"Once upon","add_special":true,"with_pieces":true})"},
      {"/detokenize", R"({"tokens":[1,400,401]})"},
      {"/apply-template", R"({"messages":[{"role":"user","content":"hello"}],"add_generation_prompt":false})"},
      {"/v1/messages",
       R"({"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}],"is_error":false}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"},"max_tokens":3,"stop_sequences":["x"],"temperature":0.5,"stream":true})"},
      {"/v1/messages/count_tokens", R"({"system":"s","messages":[{"role":"user","content":"hi"}],"thinking":{"type":"enabled","budget_tokens":1024}})"},
  };
  const std::string alphabet = std::string("{}[]\":,0123456789-.eE truefalsenul\\u00ff\xff") + '\0' + "abc";
  std::mt19937_64 rng(12345);
  int answered = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const auto& [path, seed] = seeds[iter % seeds.size()];
    const std::string body = pagoda::testing::mutate_body(seed, rng, alphabet);
    HttpResult r = http(port_, "POST", path, body);
    ASSERT_NE(r.status, 0) << "no answer for " << path << " " << body;
    EXPECT_LT(r.status, 500) << path << " " << body << " -> " << r.body;
    if (r.status >= 400) {
      json j = json::parse(r.body, nullptr, false);
      EXPECT_TRUE(j.is_object() && j.contains("error")) << body << " -> " << r.body;
    }
    ++answered;
  }
  EXPECT_EQ(answered, 300);
  EXPECT_EQ(get("/health").status, 200);
  // The stats snapshot is published after the step that answered the last request.
  json s;
  for (int i = 0; i < 100; ++i) {
    s = body_json(get("/v1/cache/stats"));
    if (s["engine"]["running"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s["engine"]["running"], 0);
}

TEST_F(Serve, TokenizeDetokenizeAndApplyTemplate) {
  HttpResult t = post("/tokenize", {{"content", "Once upon a time"}, {"with_pieces", false}});
  ASSERT_EQ(t.status, 200) << t.body;
  json ids = body_json(t)["tokens"];
  ASSERT_FALSE(ids.empty());
  HttpResult d = post("/detokenize", {{"tokens", ids}});
  ASSERT_EQ(d.status, 200);
  EXPECT_NE(body_json(d)["content"].get<std::string>().find("Once upon a time"), std::string::npos);
  HttpResult a = post("/apply-template", {{"messages", {{{"role", "user"}, {"content", "hello"}}}}});
  ASSERT_EQ(a.status, 200) << a.body;
  std::string prompt = body_json(a)["prompt"];
  EXPECT_NE(prompt.find("hello"), std::string::npos);
  EXPECT_NE(prompt.find("<|im_start|>assistant\n"), std::string::npos) << "ChatML fallback: " << prompt;
}

TEST_F(Serve, MetricsExposeCountersGaugesAndHistograms) {
  ASSERT_EQ(post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
  HttpResult m = get("/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.headers["content-type"].rfind("text/plain", 0), 0u);
  for (const char* name :
       {"pagoda_http_requests_total", "pagoda_requests_finished_total", "pagoda_prompt_tokens_total",
        "pagoda_generation_tokens_total", "pagoda_prefix_cache_hit_tokens_total", "pagoda_requests_running",
        "pagoda_kv_bytes_reserved", "pagoda_time_to_first_token_seconds_bucket", "pagoda_e2e_request_latency_seconds_count"})
    EXPECT_NE(m.body.find(name), std::string::npos) << name;
}

TEST_F(Serve, CacheResetFreesCachedEntries) {
  ASSERT_EQ(post("/v1/completions", {{"prompt", "A cat sat on the mat and looked at the sun."}, {"max_tokens", 2}}).status,
            200);
  HttpResult r = post("/v1/cache/reset", json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = body_json(r);
  EXPECT_GT(j["freed_entries"].get<int64_t>(), 0);
  EXPECT_GT(j["freed_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["prefix_cache"]["entries"], 0);
}

TEST_F(Serve, ClientThatDisconnectsMidStreamIsCancelledAndItsBlocksReleased) {
  int fd = pagoda::testing::connect_to(port_);
  ASSERT_GE(fd, 0);
  json req{{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}};
  ASSERT_TRUE(pagoda::testing::send_all(fd, pagoda::testing::build_request("POST", "/v1/completions", req.dump())));
  char buf[512];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // the stream has started
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  json s;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = body_json(get("/v1/cache/stats"));
  } while ((s["engine"]["running"] != 0 || s["pool"]["blocks_live"] != 0) && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(s["engine"]["running"], 0) << s.dump();
  EXPECT_EQ(s["pool"]["blocks_live"], 0) << s.dump();
}

TEST_F(Serve, ManyConcurrentStreamsAllComplete) {
  constexpr int kClients = 24;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      json req{{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 8}, {"stream", true}, {"seed", i}};
      HttpResult r = post("/v1/completions", req);
      std::vector<std::string> ev = sse_data(r.body);
      if (r.status == 200 && !ev.empty() && ev.back() == "[DONE]") ok.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients);
}

TEST(ServeOptions, ApiKeyFromTheEnvironmentGuardsEverythingButHealth) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB"}, {"PAGODA_API_KEY=sekrit"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  EXPECT_EQ(http(port, "GET", "/health").status, 200);
  expect_error(http(port, "GET", "/v1/models"), 401);
  expect_error(http(port, "GET", "/v1/models", {}, {"Authorization: Bearer wrong"}), 401);
  EXPECT_EQ(http(port, "GET", "/v1/models", {}, {"Authorization: Bearer sekrit"}).status, 200);
}

TEST(ServeOptions, ApiKeyFileIsReadAndAnEmptyOneIsRefused) {
  const std::string path = "/tmp/pagoda_api_key_" + std::to_string(::getpid());
  {
    std::ofstream f(path);
    f << "from-a-file\n";
  }
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--api-key-file", path});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  expect_error(http(port, "GET", "/v1/models", {}, {"Authorization: Bearer from-a-fil"}), 401);
  EXPECT_EQ(http(port, "GET", "/v1/models", {}, {"Authorization: Bearer from-a-file"}).status, 200);
  {
    std::ofstream f(path);
  }
  ServerProcess empty({"-m", kStories, "--api-key-file", path});
  EXPECT_EQ(empty.wait_exit(20), 1);
  EXPECT_NE(empty.log().find("empty"), std::string::npos) << empty.log();
  ::unlink(path.c_str());
}

// "" means "no auth" to the HTTP server, so an API key that is given but empty or blank
// (`--api-key "$UNSET"`, `PAGODA_API_KEY=` in a compose file) must stop start-up with one
// line naming where it came from, not serve every route open.
TEST(ServeOptions, AnEmptyOrBlankApiKeyStopsStartUpInOneLine) {
  const std::string blank_file = "/tmp/pagoda_blank_api_key_" + std::to_string(::getpid());
  {
    std::ofstream f(blank_file);
    f << "  \n\t\n";
  }
  struct Case {
    std::vector<std::string> args, env;
    std::string names;  // the flag or variable the error must name
  };
  const std::vector<Case> cases = {
      {{"--api-key", ""}, {}, "--api-key is empty"},
      {{"--api-key", " \t "}, {}, "--api-key is only whitespace"},
      {{}, {"PAGODA_API_KEY="}, "PAGODA_API_KEY is set but empty"},
      {{}, {"PAGODA_API_KEY=   "}, "PAGODA_API_KEY is only whitespace"},
      {{"--api-key-file", ""}, {}, "--api-key-file names no file"},
      {{}, {"PAGODA_API_KEY_FILE="}, "PAGODA_API_KEY_FILE is set but empty"},
      {{"--api-key-file", blank_file}, {}, "--api-key-file " + blank_file + ": the file is empty or only whitespace"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    ServerProcess s(args, c.env);
    EXPECT_EQ(s.wait_exit(20), 1) << c.names << "\n" << s.log();
    const std::string log = s.log();
    EXPECT_EQ(log.rfind("pagoda: error: ", 0), 0u) << log;
    EXPECT_NE(log.find(c.names), std::string::npos) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;  // nothing listened, nothing loaded
  }
  ::unlink(blank_file.c_str());
  // A key with blanks around it is the key without them (as from a file): a header value's
  // surrounding spaces never reach the comparison, so " sekrit " could not be sent anyway.
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--api-key", " sekrit "});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  expect_error(http(port, "GET", "/v1/models"), 401);
  EXPECT_EQ(http(port, "GET", "/v1/models", {}, {"Authorization: Bearer sekrit"}).status, 200);
}

// A raw request to `port` with its own Host line (http() always says 127.0.0.1).
HttpResult http_with_host(uint16_t port, const std::string& host, const std::string& head_and_body) {
  const int fd = pagoda::testing::connect_to(port);
  if (fd < 0) return {};
  pagoda::testing::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" +
                                    head_and_body);
  const std::string raw = pagoda::testing::read_all(fd, 60);
  ::close(fd);
  return pagoda::testing::parse_response(raw);
}

// A keyless server on loopback: a web page that rebinds its own DNS name to 127.0.0.1
// gets 403, and no page of another origin can read an answer (no CORS headers) unless
// --cors-origin names its origin. With a key, the key guards it and any Host is served.
TEST(ServeOptions, KeylessServerServesOnlyItsOwnHostNamesAndCorsOnlyForGivenOrigins) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--cors-origin", "http://app.example:3000"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 2}}.dump();
  // What a page of evil.example sends after its name resolves to 127.0.0.1: a "simple"
  // cross-origin POST (text/plain, so no preflight).
  const std::string simple_post = "Origin: http://evil.example:" + std::to_string(port) +
                                  "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                                  "\r\n\r\n" + body;
  HttpResult r = http_with_host(port, "evil.example:" + std::to_string(port), simple_post);
  expect_error(r, 403, "Host");
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
  EXPECT_FALSE(r.headers["x-request-id"].empty()) << "the refusal names its request too";
  r = http_with_host(port, "localhost:" + std::to_string(port), simple_post);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u) << "evil.example may not read it";
  r = http(port, "GET", "/v1/models", {}, {"Origin: http://app.example:3000"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "http://app.example:3000");
  EXPECT_EQ(r.headers["access-control-expose-headers"], "X-Request-Id") << "the page may read the request id";
  EXPECT_FALSE(r.headers["x-request-id"].empty());

  ServerProcess keyed({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--api-key", "k"});
  const uint16_t keyed_port = keyed.start();
  ASSERT_NE(keyed_port, 0) << keyed.log();
  r = http_with_host(keyed_port, "pagoda.example.com",
                     "Authorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
}

TEST(ServeOptions, CorsOriginThatNoBrowserSendsFailsAtStartUp) {
  for (const char* bad : {"http://app.example/", "app.example", "http://app.example/path", "http://"}) {
    ServerProcess s({"-m", kStories, "--cors-origin", bad});
    EXPECT_NE(s.wait_exit(20), 0) << bad;
    EXPECT_NE(s.log().find("--cors-origin"), std::string::npos) << s.log();
  }
}

// The issue's case: under a 64-descriptor limit, 60 idle connections locked a normal
// client out (accept() failed with EMFILE every 50 ms, a log line each, and the client
// waited forever). The default cap is then 48: each connection past it closes the least
// recently used idle one, and the cap is logged once.
TEST(ServeOptions, IdleConnectionsUnderA64DescriptorLimitDoNotLockOutAClient) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB"});  // the child inherits it
  ::setrlimit(RLIMIT_NOFILE, &saved);
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  EXPECT_NE(s.log().find("max connections 48"), std::string::npos) << s.log();
  std::vector<int> idle;
  for (int i = 0; i < 60; ++i) {
    const int fd = pagoda::testing::connect_to(port);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const HttpResult r = http(port, "GET", "/health", {}, {}, 30);
  EXPECT_EQ(r.status, 200) << s.log();
  const std::string log = s.log();
  size_t cap_lines = 0;
  for (size_t at = 0; (at = log.find("(--max-connections 48)", at)) != std::string::npos; ++at) ++cap_lines;
  EXPECT_EQ(cap_lines, 1u) << log;
  EXPECT_EQ(log.find("accept:"), std::string::npos) << log;
  for (int fd : idle) ::close(fd);
}

TEST(ServeOptions, FullQueueAnswers429) {
  ServerProcess s({"-m", kStories, "-t", "1", "--parallel", "1", "--max-queue", "0", "--kv-cache-bytes", "8MiB"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  std::thread slow([&] {
    http(port, "POST", "/v1/completions",
         json{{"prompt", "Once"}, {"max_tokens", 1500}, {"ignore_eos", true}}.dump());
  });
  // Wait until the slow one is running, then a second one is refused.
  HttpResult r;
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
    if (st.is_object() && st["engine"]["running"] == 1) break;
  }
  r = http(port, "POST", "/v1/completions", json{{"prompt", "Twice"}, {"max_tokens", 2}}.dump());
  expect_error(r, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  // A streaming request that is refused gets the status too, not a 200 with an error event.
  expect_error(http(port, "POST", "/v1/completions", json{{"prompt", "Thrice"}, {"stream", true}}.dump()), 429);
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  slow.join();
}

TEST(ServeOptions, SigtermLetsARunningRequestFinishThenExitsZero) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--shutdown-timeout", "30"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  HttpResult r;
  std::thread client([&] {
    r = http(port, "POST", "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 100}, {"ignore_eos", true}}.dump());
  });
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
    if (st.is_object() && st["engine"]["running"] == 1) break;
  }
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 30), 0) << s.log();
  client.join();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 100);
}

TEST(ServeOptions, TwoHundredConcurrentStreamsNeedAFixedNumberOfThreads) {
  ServerProcess s({"-m", kStories, "-t", "1", "--parallel", "8", "--max-queue", "512", "--kv-cache-bytes", "16MiB"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  constexpr int kClients = 200;
  std::vector<int> fds;
  json req{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"stream", true}, {"ignore_eos", true}};
  const std::string wire = pagoda::testing::build_request("POST", "/v1/completions", req.dump());
  for (int i = 0; i < kClients; ++i) {
    int fd = pagoda::testing::connect_to(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(pagoda::testing::send_all(fd, wire));
    fds.push_back(fd);
  }
  const int threads_under_load = s.threads();
  int ok = 0;
  for (int fd : fds) {
    std::vector<std::string> ev = sse_data(pagoda::testing::parse_response(pagoda::testing::read_all(fd, 120)).body);
    if (!ev.empty() && ev.back() == "[DONE]") ++ok;
    ::close(fd);
  }
  EXPECT_EQ(ok, kClients);
  // main + 2 I/O threads + the engine thread + 1 kernel worker, and a few short-lived ones.
  EXPECT_GT(threads_under_load, 0);
  EXPECT_LT(threads_under_load, 16) << "threads must not grow with connections";
}

TEST(ServeOptions, ChatTemplateWithAnUnsupportedFeatureFailsAtStartUp) {
  const std::string path = "/tmp/pagoda_bad_template_" + std::to_string(::getpid()) + ".jinja";
  {
    std::ofstream f(path);
    f << "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}";
  }
  ServerProcess s({"-m", kStories, "--chat-template-file", path});
  EXPECT_EQ(s.wait_exit(20), 1);
  EXPECT_NE(s.log().find("no_such_filter"), std::string::npos) << s.log();
  ::unlink(path.c_str());
}

TEST(ServeOptions, HuggingFaceDirectoryIsServedWithItsOwnChatTemplate) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagoda_serve_hf_" + std::to_string(::getpid()));
  pagoda::test::HfSpec spec;
  spec.model_type = "qwen3";
  spec.tokenizer = "qwen3-tokenizer";
  spec.dtype = pagoda::GgmlType::BF16;
  pagoda::test::write_hf_dir(spec, dir);
  // chat_template.jinja takes precedence over tokenizer_config.json's template.
  pagoda::test::write_text(dir / "chat_template.jinja",
                           "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                           "{% if add_generation_prompt %}[assistant]{% endif %}");
  ServerProcess s({"-m", dir.string(), "-t", "1", "--kv-cache-bytes", "8MiB"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const json messages = {{{"role", "user"}, {"content", "hello"}}};
  HttpResult a = http(port, "POST", "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(body_json(a)["prompt"], "[user]hello[assistant]");
  HttpResult t = http(port, "POST", "/tokenize", json{{"content", "[user]hello[assistant]"}}.dump());
  const size_t n_prompt = body_json(t)["tokens"].size();
  HttpResult c = http(port, "POST", "/v1/chat/completions",
                      json{{"messages", messages}, {"max_tokens", 4}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  json j = body_json(c);
  EXPECT_EQ(j["usage"]["prompt_tokens"], n_prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["model"], dir.filename().string());
  s.signal_and_wait(SIGTERM, 10);
  fs::remove_all(dir);
}

TEST(ServeOptions, UnreadableChatTemplateFileFailsAtStartUp) {
  ServerProcess s({"-m", kStories, "--chat-template-file", "/nonexistent/template.jinja"});
  EXPECT_EQ(s.wait_exit(20), 1);
  EXPECT_NE(s.log().find("--chat-template-file"), std::string::npos) << s.log();
}

}  // namespace
