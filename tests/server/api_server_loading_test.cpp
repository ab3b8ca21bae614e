// ApiServer before attach() (the model is still loading): every route, /health
// included, answers llama-server's 503 error object (the Anthropic routes Anthropic's), so a client or load balancer
// polling either server reads the same thing; the routes are called directly with a
// recording exchange (no sockets, no model).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_server.h"

namespace pagoda::server {
namespace {

// Records the one answer a handler gives.
class RecordingExchange final : public http::HttpExchange {
 public:
  bool respond(http::HttpResponse response) override {
    ++answers;
    last = std::move(response);
    return true;
  }
  bool start_stream(int status, std::string, std::vector<std::pair<std::string, std::string>>) override {
    ++answers;
    last.status = status;
    return true;
  }
  bool send(std::string) override { return true; }
  void finish() override {}
  void on_close(std::function<void()>) override {}
  bool closed() const override { return false; }

  int answers = 0;
  http::HttpResponse last;
};

http::HttpResponse call(ApiServer& api, const std::string& method, const std::string& path,
                  const std::string& body = "") {
  for (const http::Route& r : api.routes()) {
    if (r.method != method || r.path != path) continue;
    http::HttpRequest req;
    req.method = method;
    req.path = path;
    req.body = body;
    auto ex = std::make_shared<RecordingExchange>();
    r.handler(req, ex);
    EXPECT_EQ(ex->answers, 1) << method << " " << path;
    return ex->last;
  }
  ADD_FAILURE() << "no route " << method << " " << path;
  return {};
}

// llama-server (tools/server/server.cpp) answers this while loading:
// {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}.
void expect_loading(const http::HttpResponse& r) {
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.content_type, "application/json");
  const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j["error"]["code"], 503) << r.body;
  EXPECT_EQ(j["error"]["message"], "Loading model") << r.body;
  EXPECT_EQ(j["error"]["type"], "unavailable_error") << r.body;
  EXPECT_FALSE(j.contains("status")) << r.body;
}

TEST(ApiServerLoading, HealthAnswersLlamaServersLoadingError) {
  ApiServerOptions o;
  o.log_requests = false;
  ApiServer api(o);
  ASSERT_FALSE(api.ready());
  expect_loading(call(api, "GET", "/health"));
}

// Every route of the table (not a hand list: a route added later is covered), with a body
// its handler would accept once loaded; the Anthropic routes answer in their own shape
// (below), and these answer before loading ends, by design:
const std::vector<std::string> kAnswerWhileLoading = {
    "GET /health",   // the loading 503 itself (above)
    "GET /metrics",  // Prometheus scrapes a loading server too
};

TEST(ApiServerLoading, EveryOtherRouteAnswersTheSame) {
  ApiServerOptions o;
  o.log_requests = false;
  ApiServer api(o);
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"prompt":"hi","content":"hi",)"
                           R"("tokens":[1],"input":"hi","query":"q","documents":["d"]})";
  size_t checked = 0;
  const std::vector<http::Route> routes = api.routes();
  for (const http::Route& r : routes) {
    const std::string name = r.method + " " + r.path;
    if (std::find(kAnswerWhileLoading.begin(), kAnswerWhileLoading.end(), name) != kAnswerWhileLoading.end()) continue;
    if (r.path.rfind("/v1/messages", 0) == 0) continue;  // Anthropic's shape: the next test
    std::string path = r.path;
    if (!path.empty() && path.back() == '*') path.back() = 'x';  // /v1/responses/* -> an id
    http::HttpRequest req;
    req.method = r.method;
    req.path = path;
    req.body = r.method == "POST" ? chat : "";
    auto ex = std::make_shared<RecordingExchange>();
    r.handler(req, ex);
    ASSERT_EQ(ex->answers, 1) << name;
    SCOPED_TRACE(name);
    expect_loading(ex->last);
    ++checked;
  }
  EXPECT_EQ(checked, routes.size() - kAnswerWhileLoading.size() - 2);  // less the two Anthropic routes
}

// Anthropic's routes answer in Anthropic's shape: 503 overloaded_error (its SDKs retry it).
TEST(ApiServerLoading, AnthropicRoutesAnswerOverloadedInAnthropicsShape) {
  ApiServerOptions o;
  o.log_requests = false;
  ApiServer api(o);
  const std::string body = R"({"max_tokens":4,"messages":[{"role":"user","content":"hi"}]})";
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    const http::HttpResponse r = call(api, "POST", path, body);
    EXPECT_EQ(r.status, 503) << path;
    EXPECT_EQ(r.body, R"({"type":"error","error":{"type":"overloaded_error","message":"Loading model"}})") << path;
  }
}

}  // namespace
}  // namespace pagoda::server
