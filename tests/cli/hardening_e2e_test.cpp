// Hostile and careless requests against the real `pagoda serve` binary, over plain
// sockets (issue #31's findings that live in request handling): a body of 8 MiB of `{}`
// in an ignored field is parsed in linear time on every JSON route and does not hold up
// /health; nesting past the limit is a 400, also in the cache-reset body; a tool call's
// arguments nested 600 levels deep (a client's input) never answer 500 on chat
// completions, /v1/responses or /apply-template; a grammar that accepts no text is a 400;
// `metadata` is bounded as OpenAI bounds it; the grammar cache is booked in /metrics.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;
using Clock = std::chrono::steady_clock;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

class Hardening : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"-m", kStories, "-t", "1", "--parallel", "2", "--ctx-size", "2048",
                                 "--max-body-bytes", "9MiB", "--kv-cache-bytes", "16MiB"});
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(port_, 0) << server_->log(); }
  static HttpResult post(const std::string& path, const std::string& body) { return http(port_, "POST", path, body); }
  static HttpResult post(const std::string& path, const json& body) { return post(path, body.dump()); }
  static std::string error_message(const HttpResult& r) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
  }

  static ServerProcess* server_;
  static uint16_t port_;
};
ServerProcess* Hardening::server_ = nullptr;
uint16_t Hardening::port_ = 0;

// `prefix` + `"ignored":[{},{},...]}` of about `bytes` bytes.
std::string with_empty_objects(const std::string& prefix, size_t bytes) {
  std::string body = prefix + R"(,"ignored":[)";
  body.reserve(bytes + 8);
  while (body.size() < bytes) body += "{},";
  return body + "{}]}";
}

TEST_F(Hardening, EightMebibytesOfEmptyObjectsAreParsedInLinearTimeOnEveryJsonRoute) {
  const std::string chat =
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"temperature":0)";
  struct Route {
    std::string path, prefix;
    int status;
  };
  const Route routes[] = {
      {"/v1/chat/completions", chat, 200},
      {"/v1/completions", R"({"prompt":"Once","max_tokens":1)", 200},
      {"/v1/responses", R"({"input":"Hi","max_output_tokens":1)", 200},
      {"/v1/messages", R"({"model":"stories260K.gguf","max_tokens":1,"messages":[{"role":"user","content":"Hi"}])", 200},
      {"/tokenize", R"({"content":"Hi")", 200},
      {"/apply-template", R"({"messages":[{"role":"user","content":"Hi"}])", 200},
  };
  for (const Route& r : routes) {
    const std::string body = with_empty_objects(r.prefix, 8u << 20);
    const auto t0 = Clock::now();
    const HttpResult res = post(r.path, body);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(res.status, r.status) << r.path << ": " << res.body.substr(0, 300);
    // The quadratic parse took ~24 minutes for this; linear is ~0.2 s a core, plus sending
    // 8 MiB over loopback and one token of a 260K model: 20 s tells the two apart on any
    // machine load.
    EXPECT_LT(seconds, 20.0) << r.path;
  }
}

TEST_F(Hardening, TwoLargeBodiesAtOnceDoNotHoldUpHealth) {
  const std::string body =
      with_empty_objects(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1)", 8u << 20);
  auto a = std::async(std::launch::async, [&] { return post("/v1/chat/completions", body).status; });
  auto b = std::async(std::launch::async, [&] { return post("/v1/chat/completions", body).status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  EXPECT_EQ(http(port_, "GET", "/health").status, 200);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_EQ(a.get(), 200);
  EXPECT_EQ(b.get(), 200);
}

TEST_F(Hardening, NestingPastTheLimitIs400OnEveryJsonBody) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  for (const char* path : {"/v1/chat/completions", "/v1/responses", "/v1/cache/reset", "/tokenize"}) {
    const HttpResult r = post(path, R"({"x":)" + deep + "}");
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
  }
  EXPECT_NE(error_message(post("/v1/completions", R"({"x":)" + deep + "}")).find("nested deeper than 64"),
            std::string::npos);
}

TEST_F(Hardening, ToolCallArgumentsNestedSixHundredDeepNeverAnswer500) {
  const std::string args = std::string(600, '[') + std::string(600, ']');
  const json turn = {{"role", "assistant"},
                     {"content", nullptr},
                     {"tool_calls", json::array({{{"id", "c1"},
                                                  {"type", "function"},
                                                  {"function", {{"name", "f"}, {"arguments", args}}}}})}};
  const json tool = {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}};
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}, turn, tool});
  const HttpResult chat = post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(chat.status, 200) << chat.body;
  const HttpResult tmpl = post("/apply-template", json{{"messages", messages}});
  EXPECT_EQ(tmpl.status, 200) << tmpl.body;
  const json input = json::array({{{"role", "user"}, {"content", "Hi"}},
                                  {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", args}},
                                  {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "ok"}}});
  const HttpResult resp = post("/v1/responses", json{{"input", input}, {"max_output_tokens", 1}});
  EXPECT_EQ(resp.status, 200) << resp.body;
}

TEST_F(Hardening, AGrammarThatAcceptsNoTextIs400) {
  const HttpResult r = post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4},
                                                    {"grammar", "root ::= [^\\x00-\\U0010FFFF]"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(error_message(r).find("accepts no text"), std::string::npos) << r.body;
}

TEST_F(Hardening, MetadataIsBoundedAsOpenAiBoundsIt) {
  json ok = json::object();
  for (int i = 0; i < 16; ++i) ok["k" + std::to_string(i)] = std::string(512, 'v');
  ok[std::string(64, 'k')] = "v";
  ok.erase("k0");
  const json base_resp = {{"input", "Hi"}, {"max_output_tokens", 1}};
  const json base_chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 1}};
  for (const auto& [path, base] : {std::pair{"/v1/responses", base_resp}, std::pair{"/v1/chat/completions", base_chat}}) {
    json b = base;
    b["metadata"] = ok;
    EXPECT_EQ(post(path, b).status, 200) << path;
    json too_many = ok;
    too_many["k0"] = "v";
    b["metadata"] = too_many;
    HttpResult r = post(path, b);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(error_message(r).find("at most 16"), std::string::npos) << r.body;
    b["metadata"] = {{std::string(65, 'k'), "v"}};
    r = post(path, b);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(error_message(r).find("64 characters"), std::string::npos) << r.body;
    b["metadata"] = {{"k", std::string(513, 'v')}};
    r = post(path, b);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(error_message(r).find("512 characters"), std::string::npos) << r.body;
    b["metadata"] = {{"k", 1}};
    EXPECT_EQ(post(path, b).status, 400) << path;
    // Characters, not bytes: 512 two-byte characters are fine.
    std::string wide;
    for (int i = 0; i < 512; ++i) wide += "\xC3\xA9";
    b["metadata"] = {{"k", wide}};
    EXPECT_EQ(post(path, b).status, 200) << path;
  }
}

TEST_F(Hardening, TheGrammarCacheIsBookedInMetrics) {
  ASSERT_EQ(post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 2}, {"grammar", "root ::= [a-z]+"}}).status,
            200);
  const std::string m = http(port_, "GET", "/metrics").body;
  for (const char* name : {"pagoda_grammar_cache_entries ", "pagoda_grammar_cache_bytes ",
                           "pagoda_grammar_cache_capacity_bytes 67108864", "pagoda_grammar_cache_hits_total ",
                           "pagoda_grammar_cache_evictions_total "})
    EXPECT_NE(m.find(name), std::string::npos) << name;
  EXPECT_EQ(m.find("pagoda_grammar_cache_bytes 0\n"), std::string::npos);
}

}  // namespace
