// HttpServer over real sockets (harness: http_test_harness.h): routing (200 / 404 / 405 +
// Allow / OPTIONS), error bodies, limits (413 without reading the body, 431), the API
// key, keep-alive, pipelining, HTTP/1.0, 100-continue, on_complete, bind errors.
// Streaming, disconnects, slow clients, timeouts, load, garbage and stop() are in
// http_connections_test.cpp.
#include "server/http_test_harness.h"

namespace pagoda::server {
namespace {

using namespace http_test;

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
  const HttpResponse r = error_response(429, "slow down");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["type"], "rate_limit_error");
}

TEST_F(HttpServerTest, GetAndPostRoundTripOnOneKeepAliveConnection) {
  start();
  EXPECT_NE(port, 0);
  Client c(port);
  c.send(get("/v1/models?x=1"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"object":"list","data":[]})");
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->header("access-control-allow-origin"), "*");

  c.send(post("/echo?a=b&c", R"({"prompt":"hi"})", "X-Test: yes\r\n"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"prompt":"hi"})");
  EXPECT_EQ(r->header("x-query"), "a=b&c");
  EXPECT_EQ(r->header("x-test-seen"), "yes");
  EXPECT_EQ(server->in_flight(), 0);
  EXPECT_EQ(server->connections(), 1);
  std::lock_guard lock(mu);
  EXPECT_EQ(completed, (std::vector<std::string>{"GET /v1/models 200", "POST /echo 200"}));
}

TEST_F(HttpServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  start();
  Client c(port);
  c.send(get("/v1/nope"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["code"], 404);

  c.send(get("/echo"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("allow"), "POST, OPTIONS");
  j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");

  c.send("OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://ui\r\nAccess-Control-Request-Method: POST\r\n\r\n");
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->header("access-control-allow-origin"), "*");
  EXPECT_NE(r->header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_NE(r->header("access-control-allow-headers").find("Authorization"), std::string::npos);
  // Still the same connection: errors keep it alive.
  c.send(get("/health"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, WildcardRouteMatchesOneFinalSegment) {
  start();
  Client c(port);
  c.send(get("/items/resp_1?x=1"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "/items/resp_1");
  for (const char* path : {"/items/", "/items", "/items/a/b", "/other/x"}) {
    c.send(get(path));
    r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  c.send(post("/items/x", "{}"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
}

TEST_F(HttpServerTest, BodyOverLimitIs413WithoutReadingIt) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  start(o);
  Client c(port);
  const auto t0 = Clock::now();
  // Announces 1 GiB and sends 100 bytes of it: the answer cannot wait for the rest.
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n" + std::string(100, 'a'));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["code"], 413);
  EXPECT_TRUE(c.wait_closed());

  // At the limit is fine; a chunked body over it is 413 too.
  Client c2(port);
  c2.send(post("/echo", std::string(1024, 'b')));
  r = c2.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), 1024u);
  c2.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'c') +
          "\r\n0\r\n\r\n");
  r = c2.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(health_status(), 200);
  std::lock_guard lock(mu);
  EXPECT_EQ(completed.front(), "POST /echo 413");
}

TEST_F(HttpServerTest, ApiKeyGuardsAuthRoutesOnly) {
  HttpServerOptions o;
  o.api_key = "sk-secret-123";
  start(o);
  Client c(port);
  for (const std::string& auth :
       {std::string(), std::string("Authorization: Bearer sk-wrong-123\r\n"),
        std::string("Authorization: Bearer sk-secret-1234\r\n"), std::string("Authorization: Bearer sk-secret-12\r\n"),
        std::string("Authorization: sk-secret-123\r\n"), std::string("Authorization: Bearer \r\n"),
        std::string("x-api-key: sk-wrong-123\r\n"), std::string("x-api-key: sk-secret-1234\r\n"),
        std::string("x-api-key: Bearer sk-secret-123\r\n"), std::string("x-api-key: \r\n")}) {
    c.send(get("/v1/models", auth));
    auto r = c.read_response();
    ASSERT_TRUE(r) << auth;
    EXPECT_EQ(r->status, 401) << auth;
    EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["type"], "authentication_error");
  }
  c.send(get("/v1/models", "Authorization: Bearer sk-secret-123\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  c.send(get("/v1/models", "authorization: bearer sk-secret-123\r\n"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // Anthropic's header, alone or next to a wrong bearer token.
  for (const char* auth : {"X-Api-Key: sk-secret-123\r\n", "x-api-key: sk-secret-123\r\nAuthorization: Bearer sk-wrong\r\n"}) {
    c.send(get("/v1/models", auth));
    ASSERT_TRUE(r = c.read_response()) << auth;
    EXPECT_EQ(r->status, 200) << auth;
  }
  c.send(get("/health"));  // open route, no key
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, PipelinedRequestsAnswerInOrder) {
  start();
  Client c(port);
  c.send(get("/health") + post("/echo", "one") + post("/echo", "two") + get("/nope"));
  auto r1 = c.read_response();
  auto r2 = c.read_response();
  auto r3 = c.read_response();
  auto r4 = c.read_response();
  ASSERT_TRUE(r1 && r2 && r3 && r4);
  EXPECT_EQ(r1->status, 200);
  EXPECT_EQ(r2->body, "one");
  EXPECT_EQ(r3->body, "two");
  EXPECT_EQ(r4->status, 404);
}

TEST_F(HttpServerTest, Http10GetsAnAnswerAndTheConnectionCloses) {
  start();
  Client c(port);
  c.send("GET /health HTTP/1.0\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
  EXPECT_TRUE(c.wait_closed());

  // HTTP/1.0 keep-alive on request; streams are close-delimited (no chunked coding).
  Client k(port);
  k.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  r = k.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("connection"), "keep-alive");
  k.send("POST /stream HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  auto ex = box.take();
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->send("data: a\n\n"));
  EXPECT_TRUE(ex->send("data: b\n\n"));
  ex->finish();
  r = k.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("transfer-encoding"), "");
  EXPECT_EQ(r->body, "data: a\n\ndata: b\n\n");
  EXPECT_EQ(probe.count.load(), 0);
}

TEST_F(HttpServerTest, ExpectContinueGets100BeforeTheBody) {
  start();
  Client c(port);
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 100);
  c.send("hello");
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
}

TEST(HttpServer, BindErrorNamesHostAndPort) {
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  HttpServer first(o, {});
  o.port = first.port();
  try {
    HttpServer second(o, {});
    FAIL() << "bound the same port twice";
  } catch (const pagoda::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(o.port)), std::string::npos)
        << e.what();
  }
  o.host = "192.0.2.1";  // TEST-NET-1: not an address of this machine
  EXPECT_THROW(HttpServer(o, {}), pagoda::Error);
}

TEST(HttpServer, DestroyingWithoutStartIsFine) {
  HttpServerOptions o;
  o.port = 0;
  HttpServer server(o, {});
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.connections(), 0);
}

}  // namespace
}  // namespace pagoda::server
