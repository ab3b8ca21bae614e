// HttpServer's request ids and completions over real sockets (harness: http_test_harness.h):
// X-Request-Id on every answer (routes, the transport's own errors, framing and Host
// refusals included, OPTIONS, a stream, a connection refused at the cap),
// the client's id kept when fit and replaced when not (request_id.h); on_complete's
// HttpCompletion: an error's body, a unique seq, and exactly one report for a client that
// leaves before its answer (a reset, or a refused write after a close: 499, before
// on_close), none early for one that only half-closed, or an exchange cut by stop() (503).
#include "http/request_id.h"

#include <regex>

#include "http/http_test_harness.h"

namespace pagoda::http {
namespace {

using namespace http_test;

const std::regex kGenerated(R"(req_[0-9a-f]{24})");

struct Report {
  std::string what;  // "METHOD PATH STATUS"
  std::string id;
  uint64_t seq = 0;
  std::string error_body;
  bool closed = false;
  int on_close_fired_before = 0;
};

class RequestIdTest : public HttpServerTest {
 protected:
  void start_recording(HttpServerOptions options = {}) {
    options.on_complete = [this](const HttpRequest& req, const HttpCompletion& done) {
      std::lock_guard lock(mu);
      reports.push_back({req.method + " " + req.path + " " + std::to_string(done.status), req.id, req.seq,
                         std::string(done.error_body), done.closed, probe.count.load()});
    };
    start(std::move(options));
  }
  std::vector<Report> snapshot() {
    std::lock_guard lock(mu);
    return reports;
  }
  std::vector<Report> reports;  // guarded by mu
};

TEST(RequestId, FitIdsAreKeptAndOthersReplaced) {
  EXPECT_TRUE(is_acceptable_request_id("a"));
  EXPECT_TRUE(is_acceptable_request_id("3f2b8c1e-9d4a-4f6b-8e2d-1a2b3c4d5e6f"));
  EXPECT_TRUE(is_acceptable_request_id(std::string(kMaxRequestIdBytes, '~')));
  EXPECT_TRUE(is_acceptable_request_id("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"));
  for (const std::string& bad : {std::string(), std::string(kMaxRequestIdBytes + 1, 'a'), std::string("a b"),
                                 std::string("a\tb"), std::string("a\nb"), std::string("caf\xc3\xa9"),
                                 std::string("x\x7f"), std::string("nul\0x", 5), std::string("one, two")})
    EXPECT_FALSE(is_acceptable_request_id(bad)) << bad;
  EXPECT_EQ(request_id_for("client-7"), "client-7");
  EXPECT_TRUE(std::regex_match(request_id_for("a b"), kGenerated));
  const std::string a = new_request_id(), b = new_request_id();
  EXPECT_TRUE(std::regex_match(a, kGenerated)) << a;
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, 20), b.substr(0, 20)) << "one stem per process";
}

TEST_F(RequestIdTest, EveryAnswerCarriesTheRequestsId) {
  HttpServerOptions options;
  options.max_body_bytes = 16;
  start_recording(options);
  struct Case {
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {get("/v1/models"), 200},
      {get("/v1/nope"), 404},
      {post("/v1/models", "{}"), 405},
      {post("/echo", std::string(64, 'x')), 413},
      {"OPTIONS /echo HTTP/1.1\r\nHost: localhost\r\n\r\n", 204},
      {"GARBAGE\r\n\r\n", 400},
      // The framing's refusals (http_wire.h, request_framing / ChunkedDecoder).
      {"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400},
      {"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      // The Host checks.
      {"GET /v1/models HTTP/1.1\r\n\r\n", 400},
      {"GET /v1/models HTTP/1.1\r\nHost: rebound.example\r\n\r\n", 403},
  };
  for (const Case& c : cases) {
    Client client(port);
    client.send(c.request);
    auto r = client.read_response();
    ASSERT_TRUE(r) << c.request;
    EXPECT_EQ(r->status, c.status) << c.request;
    EXPECT_TRUE(std::regex_match(r->header("x-request-id"), kGenerated)) << c.request << ": " << r->header("x-request-id");
  }
  const std::vector<Report> reps = snapshot();
  ASSERT_EQ(reps.size(), cases.size());
  for (size_t i = 0; i < reps.size(); ++i) {
    EXPECT_TRUE(std::regex_match(reps[i].id, kGenerated)) << reps[i].what;
    if (i > 0) {
      EXPECT_GT(reps[i].seq, reps[i - 1].seq) << reps[i].what;
    }
    EXPECT_FALSE(reps[i].closed) << reps[i].what;
  }
  // An error's body travels to on_complete; a success's does not.
  EXPECT_EQ(reps[0].error_body, "");
  EXPECT_EQ(nlohmann::json::parse(reps[1].error_body)["error"]["message"], "no route for GET /v1/nope");
  EXPECT_NE(reps[3].error_body.find("exceeds the limit of 16 bytes"), std::string::npos) << reps[3].error_body;
}

TEST_F(RequestIdTest, AFitClientIdComesBackOnResponsesAndStreamsAndAnUnfitOneIsReplaced) {
  start_recording();
  Client c(port);
  c.send(get("/v1/models", "X-Request-Id: trace-0001\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("x-request-id"), "trace-0001");

  c.send(post("/stream", "{}", "x-request-id: stream-0002\r\n"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  ex->send("data: 1\n\n");
  ex->finish();
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("x-request-id"), "stream-0002");
  EXPECT_EQ(r->body, "data: 1\n\n");

  // Given twice, the header arrives as "a, b": not an id.
  c.send(get("/v1/models", "X-Request-Id: a\r\nX-Request-Id: b\r\n"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_TRUE(std::regex_match(r->header("x-request-id"), kGenerated)) << r->header("x-request-id");
  const std::vector<Report> reps = snapshot();
  ASSERT_EQ(reps.size(), 3u);
  EXPECT_EQ(reps[0].id, "trace-0001");
  EXPECT_EQ(reps[1].id, "stream-0002");
  EXPECT_EQ(reps[2].id, r->header("x-request-id"));
}

TEST_F(RequestIdTest, AClientThatLeavesBeforeItsAnswerIsReportedOnceAs499BeforeOnClose) {
  start_recording();
  {
    Client c(port);
    c.send(get("/hold"));
    ASSERT_TRUE(box.take());
    c.abort();  // a reset: gone at once, unanswered
  }
  ASSERT_TRUE(probe.wait(2000ms));
  {
    Client c(port);
    c.send(post("/stream", "{}"));
    auto ex = box.take();
    ASSERT_TRUE(ex);
    ex->send("data: 1\n\n");
    c.read_response(0.2);  // the head and a chunk; the stream goes on
    c.close();  // a plain close reads as a half-close: noticed when the next chunk is refused
    ASSERT_TRUE(eventually([&] {
      ex->send("data: 2\n\n");
      return snapshot().size() == 2;
    }));
  }
  std::this_thread::sleep_for(50ms);  // a second report for either would come now
  const std::vector<Report> reps = snapshot();
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0].what, "GET /hold 499");
  EXPECT_EQ(reps[1].what, "POST /stream 499");
  for (const Report& rep : reps) {
    EXPECT_TRUE(rep.closed);
    EXPECT_EQ(rep.error_body, "");
  }
  EXPECT_EQ(reps[0].on_close_fired_before, 0) << "reported before on_close cancels the work";
}

TEST_F(RequestIdTest, AHalfClosedClientIsAnsweredAndReportedWithItsStatusNot499) {
  start_recording();
  Client c(port);
  c.send(get("/hold", "X-Request-Id: half-1\r\n"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  c.shutdown_write();  // EOF after a complete request: it still waits for the answer
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(snapshot().empty()) << "EOF is not a hang-up";
  ex->respond({200, "text/plain", "late", {}});
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-request-id"), "half-1");
  ASSERT_TRUE(eventually([&] { return snapshot().size() == 1; }));
  std::this_thread::sleep_for(50ms);
  const std::vector<Report> reps = snapshot();
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].what, "GET /hold 200");
  EXPECT_FALSE(reps[0].closed);
  EXPECT_EQ(probe.count.load(), 0);
}

TEST_F(RequestIdTest, AConnectionRefusedAtTheCapGetsAGeneratedIdAndNoReport) {
  HttpServerOptions options;
  options.max_connections = 1;
  start_recording(options);
  Client busy(port);
  busy.send(get("/hold"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  Client late(port);
  late.send(get("/v1/models", "X-Request-Id: never-read\r\n"));
  auto r = late.read_response(5.0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(std::regex_match(r->header("x-request-id"), kGenerated)) << r->header("x-request-id");
  EXPECT_TRUE(snapshot().empty()) << "no request was read";
  ex->respond({200, "text/plain", "held", {}});
  ASSERT_TRUE(busy.read_response());
  ASSERT_TRUE(eventually([&] { return snapshot().size() == 1; }));
  EXPECT_EQ(snapshot()[0].what, "GET /hold 200");
}

TEST_F(RequestIdTest, AnExchangeCutByStopIsReportedAs503) {
  start_recording();
  Client c(port);
  c.send(get("/hold"));
  auto ex = box.take();
  ASSERT_TRUE(ex);
  server->stop();
  const std::vector<Report> reps = snapshot();
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].what, "GET /hold 503");
  EXPECT_TRUE(reps[0].closed);
}

}  // namespace
}  // namespace pagoda::http
