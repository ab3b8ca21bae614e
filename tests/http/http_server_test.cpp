// HttpServer over real sockets (harness: http_test_harness.h): routing (200 / 404 / 405 +
// Allow / OPTIONS), error bodies, limits (413 without reading the body, 431), the API
// key, the Host check (DNS rebinding) and CORS, keep-alive, pipelining, HTTP/1.0,
// 100-continue, on_complete, bind errors.
// Streaming, disconnects, slow clients, timeouts, load, garbage and stop() are in
// http_connections_test.cpp.
#include "http/http_test_harness.h"
#include "http/http_wire.h"

namespace pagoda::http {
namespace {

using namespace http_test;

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
  EXPECT_EQ(r->header("access-control-allow-origin"), "");  // no --cors-origin: no CORS

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
  auto j = nlohmann::json::parse(r->body);  // the app's error body (test_error_body)
  EXPECT_EQ(j["error"]["message"], "no route for GET /v1/nope");
  EXPECT_EQ(j["error"]["code"], 404);

  c.send(get("/echo"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("allow"), "POST, OPTIONS");
  j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], 405);

  c.send("OPTIONS /echo HTTP/1.1\r\nHost: localhost\r\nOrigin: http://ui\r\nAccess-Control-Request-Method: POST\r\n\r\n");
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->header("allow"), "POST, OPTIONS");
  // No allowed origins: the preflight gets no CORS headers (see CorsOnlyForTheGivenOrigins).
  EXPECT_EQ(r->header("access-control-allow-origin"), "");
  EXPECT_EQ(r->header("access-control-allow-methods"), "");
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
  c.send("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1073741824\r\n\r\n" + std::string(100, 'a'));
  // Bounds far from both the answer (milliseconds) and the failure (reading 1 GiB that
  // never comes: no answer at all), so a loaded machine cannot flake them.
  auto r = c.read_response(10.0);
  ASSERT_TRUE(r);
  EXPECT_LT(seconds_since(t0), 5.0);
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
  c2.send("POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'c') +
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
    EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["code"], 401);
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
  c.send("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 100);
  c.send("hello");
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
}

// DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 reaches a
// loopback server as its own origin; its requests still say Host: evil.example.
TEST_F(HttpServerTest, WithoutAnApiKeyOnlyHostHeadersNamingThisServerAreServed) {
  start();
  Client c(port);
  for (const std::string host : {"localhost", "localhost:8080", "LocalHost:1", "localhost.", "localhost.:8080",
                                 "127.0.0.1", "127.0.0.1:8080", "127.200.3.4:80", "[::1]", "[::1]:8080",
                                 "[::ffff:127.0.0.1]"}) {
    c.send("GET /v1/models HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 200) << host;
  }
  for (const std::string host : {"evil.example", "evil.example:8080", "localhost.evil.example", "evil.localhost",
                                 "127.0.0.1.evil.example", "127.1", "10.0.0.1", "0.0.0.0", "[::2]", "[::1",
                                 "::1", "localhost:", "localhost:http", "localhost:8080:1", ""}) {
    for (const std::string path : {"/v1/models", "/health", "/nope"}) {
      c.send("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
      auto r = c.read_response();
      ASSERT_TRUE(r) << host;
      EXPECT_EQ(r->status, 403) << host << " " << path;
      const auto j = nlohmann::json::parse(r->body);
      EXPECT_EQ(j["error"]["code"], 403);
      EXPECT_NE(j["error"]["message"].get<std::string>().find("Host"), std::string::npos);
    }
  }
  // A text/plain POST from another origin (a "simple" request, no preflight): refused too.
  c.send("POST /echo HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://evil.example\r\n"
         "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  // RFC 9112 3.2: HTTP/1.1 without a Host, or two Host lines, is 400; HTTP/1.0 needs none.
  for (const std::string& request : {std::string("GET /health HTTP/1.1\r\n\r\n"),
                                    std::string("GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n"),
                                    std::string("GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil\r\n\r\n")}) {
    c.send(request);
    ASSERT_TRUE(r = c.read_response()) << request;
    EXPECT_EQ(r->status, 400) << request;
  }
  Client old(port);
  old.send("GET /health HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(r = old.read_response());
  EXPECT_EQ(r->status, 200);
  std::lock_guard lock(mu);
  for (const std::string& line : completed) EXPECT_NE(line, "POST /echo 200");
}

TEST_F(HttpServerTest, WithAnApiKeyAnyHostHeaderIsServed) {
  HttpServerOptions o;
  o.api_key = "sk-1";
  start(o);
  Client c(port);
  c.send("GET /v1/models HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer sk-1\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  c.send("GET /v1/models HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  ASSERT_TRUE(r = c.read_response());
  EXPECT_EQ(r->status, 401);
  c.send("GET /health HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  ASSERT_TRUE(r = c.read_response());
  EXPECT_EQ(r->status, 200);
}

TEST(HostHeader, NamesTheBindAddressAndWildcardsAcceptIpLiterals) {
  using wire::host_header_allowed;
  // A name or address given to bind (--host): accepted as written, any port.
  EXPECT_TRUE(host_header_allowed("gpu-box.lan:8080", "gpu-box.lan"));
  EXPECT_TRUE(host_header_allowed("GPU-BOX.lan", "gpu-box.lan"));
  EXPECT_TRUE(host_header_allowed("192.168.1.5:8080", "192.168.1.5"));
  EXPECT_TRUE(host_header_allowed("[fe80::1]:8080", "fe80::1"));
  EXPECT_TRUE(host_header_allowed("[fe80::1]", "[fe80::1]"));
  EXPECT_FALSE(host_header_allowed("192.168.1.6", "192.168.1.5"));
  EXPECT_FALSE(host_header_allowed("evil.example", "gpu-box.lan"));
  EXPECT_TRUE(host_header_allowed("localhost", "gpu-box.lan"));
  // A wildcard bind: any IP literal (a Kubernetes probe's pod IP), still no other name.
  for (const char* wildcard : {"0.0.0.0", "::", ""}) {
    EXPECT_TRUE(host_header_allowed("10.1.2.3:8080", wildcard)) << wildcard;
    EXPECT_TRUE(host_header_allowed("[2001:db8::7]:8080", wildcard)) << wildcard;
    EXPECT_TRUE(host_header_allowed("127.0.0.1", wildcard)) << wildcard;
    EXPECT_FALSE(host_header_allowed("evil.example", wildcard)) << wildcard;
    EXPECT_FALSE(host_header_allowed("0.0.0.0.evil.example", wildcard)) << wildcard;
  }
  // A loopback bind: nothing but the local names.
  EXPECT_FALSE(host_header_allowed("10.1.2.3", "127.0.0.1"));
}

TEST(CorsHeaders, OnlyListedOriginsAndStar) {
  using wire::cors_headers;
  using H = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(cors_headers({}, "http://a.example"), H{});
  EXPECT_EQ(cors_headers({"http://a.example"}, "http://a.example"),
            (H{{"Vary", "Origin"},
               {"Access-Control-Allow-Origin", "http://a.example"},
               {"Access-Control-Expose-Headers", "X-Request-Id"}}));
  EXPECT_EQ(cors_headers({"http://a.example"}, "HTTP://A.example"),
            (H{{"Vary", "Origin"},
               {"Access-Control-Allow-Origin", "HTTP://A.example"},
               {"Access-Control-Expose-Headers", "X-Request-Id"}}));
  EXPECT_EQ(cors_headers({"http://a.example"}, "http://a.example:8080"), (H{{"Vary", "Origin"}}));
  EXPECT_EQ(cors_headers({"http://a.example"}, "null"), (H{{"Vary", "Origin"}}));
  EXPECT_EQ(cors_headers({"http://a.example"}, ""), (H{{"Vary", "Origin"}}));
  EXPECT_EQ(cors_headers({"http://a.example", "*"}, "http://b.example"),
            (H{{"Access-Control-Allow-Origin", "*"}, {"Access-Control-Expose-Headers", "X-Request-Id"}}));
}

TEST_F(HttpServerTest, CorsOnlyForTheGivenOrigins) {
  {  // none given: no page of another origin may read anything
    start();
    Client c(port);
    c.send(post("/echo", "hi", "Origin: http://evil.example\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("access-control-allow-origin"), "");
    server.reset();
  }
  HttpServerOptions o;
  o.cors_origins = {"http://app.example:3000"};
  start(o);
  Client c(port);
  const std::string app = "Origin: http://app.example:3000\r\n";
  c.send(post("/echo", "hi", app));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("access-control-allow-origin"), "http://app.example:3000");
  EXPECT_EQ(r->header("vary"), "Origin");
  EXPECT_EQ(r->header("access-control-expose-headers"), "X-Request-Id");  // the page may read its id
  c.send(get("/nope", app));  // errors too, so the page can read why
  ASSERT_TRUE(r = c.read_response());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->header("access-control-allow-origin"), "http://app.example:3000");
  c.send("OPTIONS /echo HTTP/1.1\r\nHost: localhost\r\n" + app + "Access-Control-Request-Method: POST\r\n\r\n");
  ASSERT_TRUE(r = c.read_response());
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->header("access-control-allow-origin"), "http://app.example:3000");
  EXPECT_EQ(r->header("access-control-allow-methods"), "POST, OPTIONS");
  EXPECT_NE(r->header("access-control-allow-headers").find("Authorization"), std::string::npos);
  EXPECT_NE(r->header("access-control-allow-headers").find("X-Request-Id"), std::string::npos);
  c.send(post("/stream", "{}", app));  // a streamed answer's head
  auto ex = box.take();
  ASSERT_TRUE(ex);
  ex->finish();
  ASSERT_TRUE(r = c.read_response());
  EXPECT_EQ(r->header("access-control-allow-origin"), "http://app.example:3000");
  for (const std::string other : {"http://evil.example", "http://app.example", "https://app.example:3000"}) {
    c.send(post("/echo", "hi", "Origin: " + other + "\r\n"));
    ASSERT_TRUE(r = c.read_response());
    EXPECT_EQ(r->header("access-control-allow-origin"), "") << other;
    EXPECT_EQ(r->header("access-control-expose-headers"), "") << other;
    c.send("OPTIONS /echo HTTP/1.1\r\nHost: localhost\r\nOrigin: " + other + "\r\n\r\n");
    ASSERT_TRUE(r = c.read_response());
    EXPECT_EQ(r->header("access-control-allow-methods"), "") << other;
  }
}

TEST_F(HttpServerTest, CorsStarAllowsEveryOrigin) {
  HttpServerOptions o;
  o.cors_origins = {"*"};
  start(o);
  Client c(port);
  c.send(get("/v1/models", "Origin: http://anything.example\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("access-control-allow-origin"), "*");
  EXPECT_EQ(r->header("access-control-expose-headers"), "X-Request-Id");
  EXPECT_EQ(r->header("vary"), "");
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

// The transport knows no API's error shape: the app's error_body makes every error body,
// a route's own error_body its 405 and 401, and a server given none answers plain text.
HttpResponse route_error_body(int status, std::string_view message) {
  return {status, "text/x-route", "route " + std::to_string(status) + ": " + std::string(message), {}};
}

TEST(HttpServer, ErrorBodiesComeFromTheApp) {
  const auto answer = [](uint16_t port, const std::string& request) {
    Client c(port);
    c.send(request);
    return c.read_response().value_or(Response{});
  };
  const HttpHandler ok = [](const HttpRequest&, std::shared_ptr<HttpExchange> ex) { ex->respond({}); };
  {  // none given: text/plain, the message (client bytes that are not UTF-8 replaced)
    HttpServerOptions o;
    o.port = 0;
    HttpServer server(o, {{"POST", "/a", true, ok}});
    server.start();
    Response r = answer(server.port(), get("/nope\xff"));
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(r.header("content-type"), "text/plain; charset=utf-8");
    EXPECT_EQ(r.body, "no route for GET /nope\xEF\xBF\xBD\n");
    r = answer(server.port(), get("/a"));
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.body, "method GET not allowed on /a\n");
    server.stop();
  }
  {  // the app's, and a route's own for its 405 and 401
    HttpServerOptions o;
    o.port = 0;
    o.api_key = "k";
    o.error_body = test_error_body;
    HttpServer server(o, {{"POST", "/a", true, ok, route_error_body}, {"POST", "/b", true, ok}});
    server.start();
    Response r = answer(server.port(), get("/a"));
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.header("content-type"), "text/x-route");
    EXPECT_EQ(r.body, "route 405: method GET not allowed on /a");
    EXPECT_EQ(r.header("allow"), "POST, OPTIONS");
    r = answer(server.port(), post("/a", "{}"));
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.body.rfind("route 401: ", 0), 0u) << r.body;
    r = answer(server.port(), post("/b", "{}"));
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], 401);
    r = answer(server.port(), get("/c"));
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["message"], "no route for GET /c");
    server.stop();
  }
}

TEST(HttpServer, DestroyingWithoutStartIsFine) {
  HttpServerOptions o;
  o.port = 0;
  HttpServer server(o, {});
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.connections(), 0);
}

}  // namespace
}  // namespace pagoda::http
