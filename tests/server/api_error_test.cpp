// The OpenAI-style error object (server/api_error.h), and the app giving it to the
// transport: `pagoda serve`'s error_body makes the HTTP server's own errors (404, 405,
// 401, 413) read like the API's.
#include "server/api_error.h"

#include <map>
#include <nlohmann/json.hpp>

#include "http/http_test_harness.h"

namespace pagoda::server {
namespace {

using namespace http::http_test;

TEST(ErrorJson, HasOpenAiShapeWithTypeFromStatus) {
  const auto j = nlohmann::json::parse(error_json(400, "bad temperature", {}, "temperature"));
  EXPECT_EQ(j["error"]["message"], "bad temperature");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], 400);
  const std::map<int, std::string> types = {
      {401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
      {405, "invalid_request_error"}, {413, "invalid_request_error"}, {429, "rate_limit_error"},
      {500, "server_error"}, {503, "server_error"}};
  for (const auto& [status, type] : types) {
    const auto e = nlohmann::json::parse(error_json(status, "m"));
    EXPECT_EQ(e["error"]["type"], type) << status;
    EXPECT_TRUE(e["error"]["param"].is_null()) << status;
    EXPECT_EQ(e["error"]["code"], status);
  }
  EXPECT_EQ(nlohmann::json::parse(error_json(503, "m", "overloaded_error"))["error"]["type"], "overloaded_error");
  // Client bytes that are not UTF-8 do not break the body.
  EXPECT_NO_THROW(nlohmann::json::parse(error_json(404, "no route for /\xff\xfe")));
  const http::HttpResponse r = error_response(429, "slow down");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["type"], "rate_limit_error");
}

TEST(ErrorJson, TheTransportsErrorsHaveTheApisShape) {
  http::HttpServerOptions o;
  o.port = 0;
  o.api_key = "k";
  o.max_body_bytes = 16;
  o.error_body = transport_error_response;
  const http::HttpHandler ok = [](const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
    ex->respond({});
  };
  http::HttpServer server(o, {{"POST", "/v1/x", true, ok}});
  server.start();
  const std::map<int, std::pair<std::string, std::string>> cases = {
      {404, {get("/v1/nope"), "not_found_error"}},
      {405, {get("/v1/x"), "invalid_request_error"}},
      {401, {post("/v1/x", "{}"), "authentication_error"}},
      {413, {post("/v1/x", std::string(64, 'a'), "Authorization: Bearer k\r\n"), "invalid_request_error"}},
  };
  for (const auto& [status, c] : cases) {
    Client client(server.port());
    client.send(c.first);
    const std::optional<Response> r = client.read_response();
    ASSERT_TRUE(r) << status;
    EXPECT_EQ(r->status, status);
    EXPECT_EQ(r->header("content-type"), "application/json");
    const auto j = nlohmann::json::parse(r->body);
    EXPECT_EQ(j["error"]["type"], c.second) << status;
    EXPECT_EQ(j["error"]["code"], status);
    EXPECT_TRUE(j["error"]["param"].is_null()) << status;
  }
  server.stop();
}

}  // namespace
}  // namespace pagoda::server
