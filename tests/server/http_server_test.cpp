// HttpServer over real sockets: a server on an ephemeral port with toy routes, driven by
// a small blocking POSIX client (so the test controls buffer sizes, half-closes and
// abrupt closes byte by byte). Covers routing (200 / 404 / 405 + Allow / OPTIONS),
// error bodies, limits (413 without reading the body, 431), the API key, keep-alive,
// pipelining, HTTP/1.0, 100-continue, streaming from another thread with chunked
// decoding, on_close on client disconnects (mid-stream and unanswered), slow-client
// drops (pending bytes and write timeout), header / idle timeouts, 200 idle
// connections on two I/O threads, garbage input, handler exceptions, on_complete,
// bind errors and stop() with open connections.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace pagoda::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls `cond` until it holds or `timeout` passes.
template <typename F>
bool eventually(F cond, std::chrono::milliseconds timeout = 2000ms) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return cond();
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;                            // de-chunked
  std::vector<std::string> chunks;             // when chunked
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A blocking HTTP/1.x client on a raw socket, every read bounded by a deadline.
class Client {
 public:
  // rcvbuf_bytes > 0 shrinks the receive buffer (set before connect, so the window
  // stays small): a client that does not read then stalls the server quickly.
  explicit Client(uint16_t port, int rcvbuf_bytes = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf_bytes > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof(rcvbuf_bytes));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads one response (1xx included). nullopt on EOF, reset or timeout.
  std::optional<Response> read_response(double timeout_s = 2.0) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return std::nullopt;
    }
    Response r;
    const std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers[name] = line.substr(v);
    }
    if (r.status < 200 || r.status == 204 || r.status == 304) return r;
    if (r.header("transfer-encoding") == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!fill(deadline)) return std::nullopt;
        }
        const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
        buf_.erase(0, eol + 2);
        while (buf_.size() < size + 2) {
          if (!fill(deadline)) return std::nullopt;
        }
        if (size == 0) {
          buf_.erase(0, 2);
          return r;
        }
        r.chunks.push_back(buf_.substr(0, size));
        r.body += r.chunks.back();
        buf_.erase(0, size + 2);
      }
    }
    if (!r.header("content-length").empty()) {
      const size_t size = std::stoul(r.header("content-length"));
      while (buf_.size() < size) {
        if (!fill(deadline)) return std::nullopt;
      }
      r.body = buf_.substr(0, size);
      buf_.erase(0, size);
      return r;
    }
    while (fill(deadline)) {
    }
    r.body = std::move(buf_);  // delimited by the close of the connection
    buf_.clear();
    return r;
  }

  // Reads until the headers of a response and the first `n` bytes of its body.
  // True when the server closed the connection (EOF or reset) within the timeout;
  // whatever arrives meanwhile is discarded.
  bool wait_closed(double timeout_s = 2.0) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    while (Clock::now() < deadline) {
      buf_.clear();
      if (!fill(deadline)) return !timed_out_;
    }
    return false;
  }

 private:
  bool fill(Clock::time_point deadline) {
    timed_out_ = false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready == 0) continue;
      if (ready < 0) return false;
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  int fd_ = -1;
  bool connected_ = false;
  bool timed_out_ = false;
  std::string buf_;
};

std::string get(const std::string& path, const std::string& extra_headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra_headers + "\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// Exchanges handed out by handlers that answer later, for the test thread to drive.
class ExchangeBox {
 public:
  void put(std::shared_ptr<HttpExchange> ex) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(ex));
    cv_.notify_all();
  }
  std::shared_ptr<HttpExchange> take(std::chrono::milliseconds timeout = 2000ms) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return nullptr;
    auto ex = std::move(items_.front());
    items_.pop_front();
    return ex;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<HttpExchange>> items_;
};

// Counts on_close calls and when the first came.
struct CloseProbe {
  std::atomic<int> count{0};
  std::promise<void> fired;
  std::function<void()> callback() {
    return [this] {
      if (count.fetch_add(1) == 0) fired.set_value();
    };
  }
  bool wait(std::chrono::milliseconds timeout) { return fired.get_future().wait_for(timeout) == std::future_status::ready; }
};

class HttpServerTest : public ::testing::Test {
 protected:
  // Routes: GET /health (open), GET /v1/models, POST /echo (echoes body, query and
  // the x-test header), POST /stream (starts an SSE stream and hands the exchange to
  // `box`), GET /hold (hands the exchange to `box` unanswered), GET /throw.
  void start(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (!options.on_complete) {
      options.on_complete = [this](const HttpRequest& req, int status, double seconds) {
        std::lock_guard lock(mu);
        completed.push_back(req.method + " " + req.path + " " + std::to_string(status));
        EXPECT_GE(seconds, 0.0);
      };
    }
    std::vector<Route> routes;
    routes.push_back({"GET", "/health", false, [](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
                        ex->respond({200, "application/json", R"({"status":"ok"})", {}});
                      }});
    routes.push_back({"GET", "/v1/models", true, [](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
                        ex->respond({200, "application/json", R"({"object":"list","data":[]})", {}});
                      }});
    routes.push_back({"POST", "/echo", true, [](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
                        HttpResponse r{200, "text/plain", req.body, {}};
                        r.headers.emplace_back("X-Query", req.query);
                        auto it = req.headers.find("x-test");
                        r.headers.emplace_back("X-Test-Seen", it == req.headers.end() ? "-" : it->second);
                        ex->respond(std::move(r));
                      }});
    routes.push_back({"POST", "/stream", true, [this](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
                        ex->on_close(probe.callback());
                        ex->start_stream(200, "text/event-stream");
                        box.put(ex);
                      }});
    routes.push_back({"GET", "/hold", true, [this](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
                        ex->on_close(probe.callback());
                        box.put(ex);
                      }});
    routes.push_back({"GET", "/throw", true, [](const HttpRequest&, std::shared_ptr<HttpExchange>) {
                        throw std::runtime_error("boom");
                      }});
    server = std::make_unique<HttpServer>(std::move(options), std::move(routes));
    server->start();
    port = server->port();
  }

  int health_status() {
    Client c(port);
    c.send(get("/health"));
    auto r = c.read_response();
    return r ? r->status : -1;
  }

  std::unique_ptr<HttpServer> server;
  uint16_t port = 0;
  ExchangeBox box;
  CloseProbe probe;
  std::mutex mu;
  std::vector<std::string> completed;
};

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
        std::string("Authorization: sk-secret-123\r\n"), std::string("Authorization: Bearer \r\n")}) {
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

TEST_F(HttpServerTest, StreamsChunksFromAnotherThreadInOrder) {
  start();
  Client c(port);
  c.send(post("/stream", "{}"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  EXPECT_EQ(server->in_flight(), 1);
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  std::thread engine([ex] {
    for (int i = 0; i < 100; ++i) EXPECT_TRUE(ex->send("data: " + std::to_string(i) + "\n\n"));
    ex->finish();
    EXPECT_FALSE(ex->send("late"));  // after finish: ignored
    EXPECT_FALSE(ex->respond({}));   // a second answer: ignored
  });
  auto r = c.read_response();
  engine.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "text/event-stream");
  EXPECT_EQ(r->header("cache-control"), "no-cache");
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  ASSERT_EQ(r->chunks.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(r->chunks[i], "data: " + std::to_string(i) + "\n\n");
  EXPECT_EQ(r->body, expected);
  EXPECT_EQ(server->in_flight(), 0);
  EXPECT_EQ(probe.count.load(), 0);
  // The connection is kept alive after the stream.
  c.send(get("/health"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::lock_guard lock(mu);
  EXPECT_EQ(completed.front(), "POST /stream 200");
}

TEST_F(HttpServerTest, ClientCloseMidStreamFiresOnCloseWithinASecond) {
  start();
  Client c(port);
  c.send(post("/stream", "{}"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  std::atomic<bool> stop{false};
  std::thread engine([&] {
    while (!stop.load() && ex->send("data: tick\n\n")) std::this_thread::sleep_for(5ms);
  });
  auto first = c.read_response(0.2);  // the stream never ends: times out after some chunks
  EXPECT_FALSE(first);
  const auto t0 = Clock::now();
  c.close();
  EXPECT_TRUE(probe.wait(1000ms));
  EXPECT_LT(seconds_since(t0), 1.0);
  stop.store(true);
  engine.join();
  EXPECT_EQ(probe.count.load(), 1);
  EXPECT_TRUE(ex->closed());
  EXPECT_FALSE(ex->send("more"));
  ex->finish();  // no-op
  EXPECT_EQ(probe.count.load(), 1);
  EXPECT_TRUE(eventually([&] { return server->in_flight() == 0 && server->connections() == 0; }));
}

TEST_F(HttpServerTest, ClientCloseWhileUnansweredFiresOnCloseOnce) {
  start();
  Client c(port);
  c.send(get("/hold"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  EXPECT_EQ(server->in_flight(), 1);
  EXPECT_FALSE(ex->closed());
  c.close();
  EXPECT_TRUE(probe.wait(1000ms));
  EXPECT_TRUE(ex->closed());
  EXPECT_FALSE(ex->respond({200, "text/plain", "late", {}}));
  EXPECT_EQ(server->in_flight(), 0);
  // Set after the close: called at once, on this thread.
  bool called = false;
  ex->on_close([&] { called = true; });
  EXPECT_TRUE(called);
  EXPECT_EQ(probe.count.load(), 1);
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
}

TEST_F(HttpServerTest, AnsweredExchangeNeverFiresOnClose) {
  start();
  Client c(port);
  c.send(get("/hold"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->respond({200, "text/plain", "done", {}}));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "done");
  c.close();
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
  bool called = false;
  ex->on_close([&] { called = true; });
  EXPECT_FALSE(called);
  EXPECT_EQ(probe.count.load(), 0);
}

TEST_F(HttpServerTest, SlowClientIsDroppedOverPendingBytesAndOthersAreServed) {
  HttpServerOptions o;
  o.max_pending_bytes = 256u << 10;
  o.write_timeout_s = 30;  // the drop must come from the byte bound
  start(o);
  Client slow(port, 4096);
  slow.send(post("/stream", "{}"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  const auto t0 = Clock::now();
  size_t sent = 0;
  const std::string chunk(64u << 10, 'x');
  std::thread engine([&] {
    // The kernel buffers a few MiB on loopback before the server's queue grows.
    while (sent < (512u << 20) && ex->send(chunk)) sent += chunk.size();
  });
  EXPECT_TRUE(probe.wait(1500ms));
  engine.join();
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_LT(sent, 512u << 20);
  EXPECT_TRUE(ex->closed());
  EXPECT_EQ(probe.count.load(), 1);
  EXPECT_EQ(health_status(), 200);
  EXPECT_TRUE(eventually([&] { return server->in_flight() == 0 && server->connections() == 0; }));
}

TEST_F(HttpServerTest, StalledWriteIsDroppedAfterWriteTimeout) {
  HttpServerOptions o;
  o.max_pending_bytes = 256u << 20;
  o.write_timeout_s = 0.3;
  start(o);
  Client slow(port, 4096);
  slow.send(post("/stream", "{}"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  std::atomic<bool> stop{false};
  std::thread engine([&] {
    const std::string chunk(64u << 10, 'y');
    while (!stop.load() && ex->send(chunk)) std::this_thread::sleep_for(1ms);
  });
  EXPECT_TRUE(probe.wait(1500ms));
  stop.store(true);
  engine.join();
  EXPECT_EQ(probe.count.load(), 1);
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
  EXPECT_EQ(health_status(), 200);
}

TEST_F(HttpServerTest, HeaderAndIdleTimeoutsCloseConnections) {
  HttpServerOptions o;
  o.header_timeout_s = 0.2;
  o.idle_timeout_s = 0.3;
  start(o);
  Client silent(port);  // connects, says nothing
  Client partial(port);
  partial.send("GET /health HTTP/1.1\r\nHost:");
  const auto t0 = Clock::now();
  EXPECT_TRUE(silent.wait_closed(1.5));
  EXPECT_TRUE(partial.wait_closed(1.5));
  EXPECT_LT(seconds_since(t0), 1.0);

  Client idle(port);
  idle.send(get("/health"));
  ASSERT_TRUE(idle.read_response());
  const auto t1 = Clock::now();
  EXPECT_TRUE(idle.wait_closed(1.5));
  EXPECT_GT(seconds_since(t1), 0.2);
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
}

TEST_F(HttpServerTest, TwoHundredIdleConnectionsOnTwoThreads) {
  HttpServerOptions o;
  o.io_threads = 2;
  start(o);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(clients.back()->connected());
  }
  EXPECT_TRUE(eventually([&] { return server->connections() == 200; }));
  for (auto& c : clients) c->send(get("/health"));
  for (auto& c : clients) {
    auto r = c->read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  clients.clear();
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
}

TEST_F(HttpServerTest, GarbageGets400AndTheServerSurvives) {
  start();
  std::mt19937 rng(7);
  std::string random_bytes(4096, '\0');
  for (char& ch : random_bytes) ch = static_cast<char>(rng());
  random_bytes[0] = '\x01';  // not a token character: the request line is refused at once
  const std::vector<std::string> inputs = {
      std::string("\0\x01\x02garbage\r\n\r\n", 14),
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "GET /health HTTP/1.1\r\nBad Header\r\n\r\n",
      "GET /health HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      random_bytes + "\r\n\r\n",
  };
  for (const std::string& input : inputs) {
    Client c(port);
    c.send(input);
    auto r = c.read_response();
    ASSERT_TRUE(r) << input.substr(0, 40);
    EXPECT_EQ(r->status, 400) << input.substr(0, 40);
    EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(c.wait_closed());
  }
  {  // headers over 64 KiB
    Client c(port);
    c.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(100u << 10, 'a') + "\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {  // half a request, then a half-close: closed quietly
    Client c(port);
    c.send("GET /hea");
    c.shutdown_write();
    EXPECT_TRUE(c.wait_closed());
  }
  {  // connect and vanish
    Client c(port);
    c.send(std::string(1, '\xff'));
  }
  EXPECT_EQ(health_status(), 200);
  EXPECT_TRUE(eventually([&] { return server->connections() == 0; }));
}

TEST_F(HttpServerTest, HandlerThatThrowsGets500WithItsMessage) {
  start();
  Client c(port);
  c.send(get("/throw"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  const auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["error"]["message"], "boom");
  EXPECT_EQ(j["error"]["type"], "server_error");
  c.send(get("/health"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, StopWithOpenConnectionsIsPromptAndFiresOnClose) {
  start();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::shared_ptr<HttpExchange>> held;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(port));
    clients.back()->send(get("/hold"));
    held.push_back(box.take());
    ASSERT_TRUE(held.back());
  }
  clients.push_back(std::make_unique<Client>(port));
  clients.back()->send(post("/stream", "{}"));
  held.push_back(box.take());
  ASSERT_TRUE(held.back());
  for (int i = 0; i < 2; ++i) clients.push_back(std::make_unique<Client>(port));  // idle
  EXPECT_TRUE(eventually([&] { return server->connections() == 6; }));
  EXPECT_EQ(server->in_flight(), 4);
  const auto t0 = Clock::now();
  server->stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(probe.count.load(), 4);
  EXPECT_EQ(server->connections(), 0);
  EXPECT_EQ(server->in_flight(), 0);
  for (auto& ex : held) {
    EXPECT_TRUE(ex->closed());
    EXPECT_FALSE(ex->respond({}));
  }
  for (auto& c : clients) EXPECT_TRUE(c->wait_closed(1.0));
  server->stop();  // idempotent
  Client late(port);
  EXPECT_FALSE(late.connected());
}

TEST_F(HttpServerTest, StopAcceptingRefusesNewConnectionsAndKeepsServingOpenOnes) {
  start();
  Client c(port);
  c.send(get("/hold"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  server->stop_accepting();
  Client late(port);
  EXPECT_FALSE(late.connected());
  EXPECT_EQ(server->in_flight(), 1);
  EXPECT_TRUE(ex->respond({200, "text/plain", "drained", {}}));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "drained");
  EXPECT_EQ(server->in_flight(), 0);
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
