// Shared by the HttpServer tests: a small blocking HTTP/1.x client on raw POSIX sockets
// (so a test controls buffer sizes, half-closes and abrupt closes byte by byte), request
// builders, a box for exchanges that handlers answer later, an on_close probe, and the
// fixture that starts a server on an ephemeral port with toy routes.
#pragma once

#include "http/http_server.h"

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

namespace pagoda::http::http_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls `cond` until it holds or `timeout` passes.
template <typename F>
inline bool eventually(F cond, std::chrono::milliseconds timeout = 2000ms) {
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

  // Closes with a reset (SO_LINGER 0): the server's next read fails with ECONNRESET,
  // unlike close() after which it reads EOF (the same as a half-close).
  void abort() {
    if (fd_ < 0) return;
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close();
  }

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

// Host: localhost passes the keyless server's DNS-rebinding check (a local name).
inline std::string get(const std::string& path, const std::string& extra_headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "\r\n";
}

inline std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
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

// The app's error body these tests give the server (HttpServerOptions::error_body): a JSON
// object with the status and the message, so a test reads both back. The API's own shape
// is the app's (tests/server/api_error_test.cpp).
inline HttpResponse test_error_body(int status, std::string_view message) {
  const nlohmann::json j = {{"error", {{"message", std::string(message)}, {"code", status}}}};
  return {status, "application/json", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), {}};
}

class HttpServerTest : public ::testing::Test {
 protected:
  // Routes: GET /health (open), GET /v1/models, POST /echo (echoes body, query and
  // the x-test header), POST /stream (starts an SSE stream and hands the exchange to
  // `box`), GET /hold (hands the exchange to `box` unanswered), GET /throw, GET /items/*
  // (answers its path). Errors: test_error_body unless `options` names another.
  void start(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (!options.error_body) options.error_body = test_error_body;
    if (!options.on_complete) {
      options.on_complete = [this](const HttpRequest& req, const HttpCompletion& done) {
        std::lock_guard lock(mu);
        completed.push_back(req.method + " " + req.path + " " + std::to_string(done.status));
        EXPECT_GE(done.seconds, 0.0);
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
    routes.push_back({"GET", "/items/*", true, [](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
                        ex->respond({200, "text/plain", req.path, {}});
                      }});
    routes.push_back({"GET", "/throw", true, [](const HttpRequest&, std::shared_ptr<HttpExchange>) {
                        throw std::runtime_error("boom");
                      }});
    server = std::make_unique<HttpServer>(std::move(options), std::move(routes));
    server->start();
    port = server->port();
  }

  // The server goes first: its stop() fires on_close for exchanges left unanswered,
  // and their callbacks use `probe` and `box`, members destroyed before `server` is.
  void TearDown() override { server.reset(); }

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

}  // namespace pagoda::http::http_test
