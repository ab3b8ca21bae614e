// `pagoda serve`'s log end to end (stories260K on loopback): timestamps, request ids (the
// client's X-Request-Id kept when sane, else generated; sent back on every answer), a 4xx's
// reason, tokens and tok/s on completion lines, a client that hangs up logged as 499 and
// counted as 499 in /metrics, --log-format json (every line parses), --log-file, -v and
// --no-log-requests.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::http;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using Clock = std::chrono::steady_clock;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::regex kTimestamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
const std::regex kGeneratedId(R"(req_[0-9a-f]{24})");

// Polls until `pred` holds or `timeout_s` passes.
template <class Pred>
bool eventually(Pred pred, double timeout_s = 20) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// The first line of `log` holding `needle` ("" when none).
std::string line_with(const std::string& log, const std::string& needle) {
  for (const std::string& line : lines_of(log))
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

// A text line's key=value (bare values only: what these tests read), "" when absent.
std::string field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 2;
  return line.substr(start, line.find(' ', start) - start);
}

std::string header_id(const std::string& id) { return "X-Request-Id: " + id; }

// pagoda_http_requests_total{status="S"} in a /metrics body (0 when absent).
double http_count(const std::string& metrics, int status) {
  const std::string key = "pagoda_http_requests_total{status=\"" + std::to_string(status) + "\"} ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? 0 : std::stod(metrics.substr(at + key.size()));
}

const std::string kCompletion16 =
    json{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"ignore_eos", true}}.dump();

// The text log on stderr: one server for the tests below. A long context, so a generation
// can run for seconds (the hang-up test closes while it runs).
class ServeLog : public pagoda::testing::SuiteServer<ServeLog> {
 protected:
  static void SetUpTestSuite() {
    start_server({"-m", kStories, "-t", "1", "--replica-id", "log-r1", "--ctx-size", "16384", "--kv-cache-bytes",
                  "32MiB"});
  }
  static std::string log() { return server_->log(); }
  // Waits for the line naming request id `id` and returns it.
  static std::string line_of(const std::string& id) {
    std::string line;
    eventually([&] { return !(line = line_with(log(), "request_id=" + id + " ")).empty(); });
    return line;
  }
};

TEST_F(ServeLog, StartUpLinesAreStampedAndTagged) {
  const std::string ready = line_with(log(), "pagoda serve: ready:");
  ASSERT_FALSE(ready.empty()) << log();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ready, m, kTimestamp)) << ready;
  EXPECT_EQ(m.position(0), 0) << ready;
  EXPECT_NE(ready.find(" INFO [log-r1] pagoda serve: ready:"), std::string::npos) << ready;
}

TEST_F(ServeLog, ABadRequestsLineHasItsReasonAndTheClientsRequestId) {
  HttpResult r = http(port_, "POST", "/v1/chat/completions", R"({"messages":"x"})", {header_id("client-id-42")});
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.headers["x-request-id"], "client-id-42");
  const std::string message = json::parse(r.body)["error"]["message"];
  const std::string line = line_of("client-id-42");
  ASSERT_FALSE(line.empty()) << log();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, kTimestamp)) << line;
  EXPECT_EQ(m.position(0), 0) << line;
  EXPECT_NE(line.find(" WARN [log-r1] POST /v1/chat/completions 400 request_id=client-id-42 duration_ms="),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(" reason=\"" + message + "\""), std::string::npos) << line;
}

TEST_F(ServeLog, EveryAnswerCarriesARequestIdGeneratedWhenTheClientsIsUnfit) {
  // Generated: for a success, an error of the transport (404, 405), /health and a stream.
  std::vector<HttpResult> answers = {
      http(port_, "POST", "/v1/completions", kCompletion16), http(port_, "GET", "/no/such/route"),
      http(port_, "GET", "/v1/completions"), http(port_, "GET", "/health"),
      http(port_, "POST", "/v1/completions",
           json{{"prompt", "Once"}, {"max_tokens", 4}, {"stream", true}}.dump())};
  std::vector<std::string> ids;
  for (const HttpResult& a : answers) {
    ASSERT_NE(a.status, 0);
    EXPECT_TRUE(std::regex_match(a.headers.at("x-request-id"), kGeneratedId)) << a.headers.at("x-request-id");
    ids.push_back(a.headers.at("x-request-id"));
  }
  EXPECT_EQ(answers[4].headers.at("content-type"), "text/event-stream");
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "ids repeat";
  EXPECT_NE(line_of(answers[1].headers.at("x-request-id")).find("GET /no/such/route 404"), std::string::npos)
      << log();

  // Unfit client ids (too long, a space, UTF-8, a control byte) are replaced, not echoed.
  for (const std::string& unfit : {std::string(129, 'a'), std::string("two words"), std::string("caf\xc3\xa9"),
                                   std::string("tab\there")}) {
    HttpResult r = http(port_, "POST", "/v1/completions", kCompletion16, {header_id(unfit)});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(std::regex_match(r.headers["x-request-id"], kGeneratedId)) << r.headers["x-request-id"];
    EXPECT_FALSE(line_of(r.headers["x-request-id"]).empty()) << log();
  }
  // The longest fit id comes back as sent.
  const std::string longest(128, 'z');
  EXPECT_EQ(http(port_, "GET", "/v1/models", "", {header_id(longest)}).headers["x-request-id"], longest);
}

TEST_F(ServeLog, CompletionLinesHaveTokensAndSpeeds) {
  HttpResult r = http(port_, "POST", "/v1/completions", kCompletion16, {header_id("speed-1")});
  ASSERT_EQ(r.status, 200) << r.body;
  const json usage = json::parse(r.body)["usage"];
  const std::string line = line_of("speed-1");
  ASSERT_FALSE(line.empty()) << log();
  EXPECT_NE(line.find(" INFO [log-r1] POST /v1/completions 200 request_id=speed-1 "), std::string::npos) << line;
  EXPECT_EQ(field(line, "prompt_tokens"), std::to_string(usage["prompt_tokens"].get<int>())) << line;
  EXPECT_EQ(field(line, "cached_tokens"),
            std::to_string(usage["prompt_tokens_details"]["cached_tokens"].get<int>()))
      << line;
  EXPECT_EQ(field(line, "generated_tokens"), "16") << line;
  EXPECT_EQ(field(line, "finish"), "length") << line;
  EXPECT_EQ(field(line, "stream"), "false") << line;
  for (const char* rate : {"prompt_tok_s", "gen_tok_s", "ttft_ms", "duration_ms"}) {
    const std::string v = field(line, rate);
    ASSERT_FALSE(v.empty()) << rate << ": " << line;
    EXPECT_GT(std::stod(v), 0) << rate << ": " << line;
  }
  EXPECT_EQ(field(line, "reason"), "") << "a success has no reason\n" << line;

  HttpResult s = http(port_, "POST", "/v1/chat/completions",
                      json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}, {"stream", true}}.dump(),
                      {header_id("speed-2")});
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(field(line_of("speed-2"), "stream"), "true") << log();
}

TEST_F(ServeLog, AClientThatHangsUpIs499InTheLogAndInMetrics) {
  const std::string before = http(port_, "GET", "/metrics").body;
  int fd = pagoda::testing::connect_to(port_);
  ASSERT_GE(fd, 0);
  // 16000 tokens: seconds of generation, so it is still running when the close arrives.
  const json req{{"prompt", "Once upon a time"}, {"max_tokens", 16000}, {"ignore_eos", true}, {"stream", true}};
  ASSERT_TRUE(pagoda::testing::send_all(
      fd, pagoda::testing::build_request("POST", "/v1/completions", req.dump(), {header_id("hangup-1")})));
  char buf[512];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // the stream has started
  ::close(fd);

  const std::string line = line_of("hangup-1");
  ASSERT_FALSE(line.empty()) << log();
  EXPECT_NE(line.find(" INFO [log-r1] POST /v1/completions 499 request_id=hangup-1 "), std::string::npos) << line;
  EXPECT_EQ(field(line, "finish"), "cancelled") << line;
  EXPECT_NE(line.find("reason=\"the client closed the connection"), std::string::npos) << line;
  const std::string after = http(port_, "GET", "/metrics").body;
  EXPECT_EQ(http_count(after, 499) - http_count(before, 499), 1) << after;
  EXPECT_EQ(http_count(after, 503), http_count(before, 503)) << after;
  EXPECT_EQ(http_count(after, 200), http_count(before, 200) + 1) << "only the first /metrics GET\n" << after;
}

TEST_F(ServeLog, PassingHealthChecksAndQuietReadsAreNotLoggedWithoutVerbose) {
  ASSERT_EQ(http(port_, "GET", "/health", "", {header_id("health-1")}).status, 200);
  ASSERT_EQ(http(port_, "GET", "/v1/cache/stats", "", {header_id("stats-1")}).status, 200);
  // A later request's line is there, so these two would be by now.
  ASSERT_EQ(http(port_, "GET", "/v1/models", "", {header_id("models-1")}).status, 200);
  ASSERT_FALSE(line_of("models-1").empty()) << log();
  EXPECT_EQ(line_with(log(), "health-1"), "") << log();
  EXPECT_EQ(line_with(log(), "stats-1"), "") << log();
}

// A server whose log is JSON, in a file, verbose; with --strict-model-names, so that a
// request naming another model is a 404 whose reason quotes the name.
class ServeJsonLog : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_path_ = "/tmp/pagoda_serve_log_e2e_" + std::to_string(::getpid()) + ".jsonl";
    std::filesystem::remove(log_path_);
    server_ = new ServerProcess({"-m", kStories, "-t", "1", "--replica-id", "json-r2", "--kv-cache-bytes", "8MiB",
                                 "--log-format", "json", "--log-file", log_path_, "-v", "--strict-model-names"});
    // The start-up lines are in the file too, so the port is read from there.
    eventually([] {
      const std::string log = read_file(log_path_);
      const size_t at = log.find("listening on http://127.0.0.1:");
      if (at == std::string::npos || log.find("pagoda serve: ready:") == std::string::npos) return false;
      port_ = static_cast<uint16_t>(std::atoi(log.c_str() + at + std::strlen("listening on http://127.0.0.1:")));
      return true;
    });
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::filesystem::remove(log_path_);
  }
  void SetUp() override { ASSERT_NE(port_, 0) << server_->log() << read_file(log_path_); }

  // Every line of the file, parsed; a line that does not parse fails the test.
  static std::vector<json> entries() {
    std::vector<json> out;
    for (const std::string& line : lines_of(read_file(log_path_))) {
      json j = json::parse(line, nullptr, false);
      EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
      if (j.is_object()) out.push_back(std::move(j));
    }
    return out;
  }
  // Waits for the entry with this request id.
  static json entry_of(const std::string& id) {
    json found;
    eventually([&] {
      for (json& j : entries())
        if (j.value("request_id", "") == id) {
          found = std::move(j);
          return true;
        }
      return false;
    });
    return found;
  }

  static inline ServerProcess* server_ = nullptr;
  static inline uint16_t port_ = 0;
  static inline std::string log_path_;
};

TEST_F(ServeJsonLog, EveryLineIsAJsonObjectWithTimeLevelAndReplica) {
  ASSERT_EQ(http(port_, "POST", "/v1/completions", kCompletion16, {header_id("json-any")}).status, 200);
  ASSERT_FALSE(entry_of("json-any").is_null());
  const std::vector<json> all = entries();
  ASSERT_GE(all.size(), 5u);
  for (const json& j : all) {
    EXPECT_TRUE(std::regex_match(j.value("ts", ""), kTimestamp)) << j.dump();
    EXPECT_TRUE(j["level"] == "debug" || j["level"] == "info" || j["level"] == "warn" || j["level"] == "error")
        << j.dump();
    EXPECT_EQ(j["replica"], "json-r2") << j.dump();
  }
  EXPECT_EQ(server_->log().find("POST"), std::string::npos) << "requests go to the file only\n" << server_->log();
}

TEST_F(ServeJsonLog, ACompletionEntryHasTypedTokensSpeedsAndTheVerboseBreakdown) {
  ASSERT_EQ(http(port_, "POST", "/v1/completions", kCompletion16, {header_id("json-speed")}).status, 200);
  const json j = entry_of("json-speed");
  ASSERT_TRUE(j.is_object()) << read_file(log_path_);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/completions");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["generated_tokens"], 16);
  EXPECT_TRUE(j["prompt_tokens"].is_number_integer()) << j.dump();
  EXPECT_TRUE(j["cached_tokens"].is_number_integer()) << j.dump();
  for (const char* number : {"duration_ms", "prompt_tok_s", "gen_tok_s", "queue_ms", "ttft_ms", "prefill_ms",
                             "decode_ms", "engine_ms"})
    EXPECT_TRUE(j[number].is_number()) << number << ": " << j.dump();
  EXPECT_EQ(j["stream"], false);
  EXPECT_EQ(j["request_bytes"], static_cast<int64_t>(kCompletion16.size())) << "-v";
  EXPECT_TRUE(j["remote"].get<std::string>().starts_with("127.0.0.1:")) << j.dump();
  EXPECT_FALSE(j.contains("reason")) << j.dump();
}

TEST_F(ServeJsonLog, HostileTextInAReasonStaysOneParsableLine) {
  const std::string evil = "evil\"}\n{\"level\":\"info\"\x01\x1b[2J\xff name";
  HttpResult r = http(port_, "POST", "/v1/completions", json{{"model", evil}, {"prompt", "x"}}.dump(-1, ' ', false, json::error_handler_t::replace),
                      {header_id("json-evil")});
  ASSERT_EQ(r.status, 404) << r.body;
  const json j = entry_of("json-evil");  // entries() fails the test on any unparsable line
  ASSERT_TRUE(j.is_object()) << read_file(log_path_);
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["status"], 404);
  EXPECT_EQ(j["reason"], json::parse(r.body)["error"]["message"]) << j.dump();
  EXPECT_NE(j["reason"].get<std::string>().find("evil\"}\n{"), std::string::npos) << j.dump();
}

TEST_F(ServeJsonLog, VerboseLogsPassingHealthChecksAtDebug) {
  ASSERT_EQ(http(port_, "GET", "/health", "", {header_id("json-health")}).status, 200);
  const json j = entry_of("json-health");
  ASSERT_TRUE(j.is_object()) << read_file(log_path_);
  EXPECT_EQ(j["level"], "debug");
  EXPECT_EQ(j["path"], "/health");
}

TEST(ServeLogOptions, ALogFileThatCannotBeOpenedStopsStartUpInOneLine) {
  ServerProcess s({"-m", kStories, "--log-file", "/nonexistent-dir/pagoda.log"});
  EXPECT_EQ(s.wait_exit(20), 1) << s.log();
  const std::string log = s.log();
  EXPECT_EQ(log, "pagoda: error: cannot open the log file /nonexistent-dir/pagoda.log for appending: No such file or "
                 "directory\n");
}

TEST(ServeLogOptions, ABadLogFormatIsAUsageError) {
  ServerProcess s({"-m", kStories, "--log-format", "xml"});
  EXPECT_EQ(s.wait_exit(20), 2) << s.log();
  EXPECT_NE(s.log().find("--log-format"), std::string::npos) << s.log();
}

TEST(ServeLogOptions, NoLogRequestsKeepsTheStartUpLinesOnly) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--no-log-requests"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  ASSERT_EQ(http(port, "POST", "/v1/chat/completions", R"({"messages":"x"})").status, 400);
  ASSERT_EQ(http(port, "POST", "/v1/completions", kCompletion16).status, 200);
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  const std::string log = s.log();
  EXPECT_EQ(log.find("request_id="), std::string::npos) << log;
  EXPECT_NE(log.find("pagoda serve: stopped"), std::string::npos) << log;
}

}  // namespace
