// AccessLog (server/access_log.h): one line per request whichever part (transport or
// engine) arrives second, the status always the transport's (499 for a client that left),
// tok/s from the engine's timings, the reason of a 4xx / 5xx from its error body (OpenAI
// and Anthropic shapes, plain text, cut), levels, and what -v adds or shows.
#include "server/access_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

class AccessLogTest : public ::testing::Test {
 protected:
  AccessLogTest() : dir_("pagoda_access_log_test") {
    std::filesystem::create_directories(dir_.path);
    path_ = dir_.path + "/access.log";
    logger_.set_format(LogFormat::Json);
    logger_.open_file(path_);
  }
  std::vector<json> lines() const {
    std::vector<json> out;
    std::ifstream f(path_);
    std::string line;
    while (std::getline(f, line)) out.push_back(json::parse(line));
    return out;
  }
  static http::HttpRequest request(uint64_t seq, std::string method = "POST", std::string path = "/v1/completions") {
    http::HttpRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.id = "req-" + std::to_string(seq);
    r.seq = seq;
    r.remote = "127.0.0.1:5555";
    r.body = "{\"prompt\":\"hi\"}";
    return r;
  }
  static http::HttpCompletion completion(int status, std::string_view error_body = {}, bool closed = false) {
    http::HttpCompletion c;
    c.status = status;
    c.seconds = 0.25;
    c.error_body = error_body;
    c.closed = closed;
    return c;
  }
  // prompt 100 (20 cached), queued 10 ms, first token at 50 ms, 11 tokens by 150 ms.
  static GenerationRecord generation(const char* finish = "length") {
    GenerationRecord g;
    g.response_id = "cmpl-1";
    g.finish = finish;
    g.prompt_tokens = 100;
    g.cached_tokens = 20;
    g.generated_tokens = 11;
    g.queue_ms = 10;
    g.ttft_ms = 50;
    g.total_ms = 150;
    return g;
  }

  test::TempDir dir_;
  std::string path_;
  Logger logger_;
};

TEST_F(AccessLogTest, ARequestNeverHandedToTheEngineIsLoggedWhenAnswered) {
  AccessLog log(logger_, true);
  const std::string body = R"({"error":{"message":"'messages' must be an array","type":"invalid_request_error"}})";
  log.http_done(request(1, "POST", "/v1/chat/completions"), completion(400, body));
  const std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["level"], "warn");
  EXPECT_EQ(l[0]["method"], "POST");
  EXPECT_EQ(l[0]["path"], "/v1/chat/completions");
  EXPECT_EQ(l[0]["status"], 400);
  EXPECT_EQ(l[0]["request_id"], "req-1");
  EXPECT_EQ(l[0]["duration_ms"], 250.0);
  EXPECT_EQ(l[0]["reason"], "'messages' must be an array");
  EXPECT_FALSE(l[0].contains("prompt_tokens"));
  EXPECT_FALSE(l[0].contains("remote")) << "-v only";
}

TEST_F(AccessLogTest, TheEnginesPartFirstThenTheAnswerMakeOneLineWithTokensAndRates) {
  AccessLog log(logger_, true);
  log.expect_generation(7);
  log.generation_done(7, generation());
  EXPECT_TRUE(lines().empty()) << "waits for the transport";
  log.http_done(request(7), completion(200));
  const std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 1u);
  const json& j = l[0];
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["response_id"], "cmpl-1");
  EXPECT_EQ(j["finish"], "length");
  EXPECT_EQ(j["prompt_tokens"], 100);
  EXPECT_EQ(j["cached_tokens"], 20);
  EXPECT_EQ(j["generated_tokens"], 11);
  EXPECT_EQ(j["prompt_tok_s"], 2000.0) << "80 uncached tokens in 50 - 10 ms";
  EXPECT_EQ(j["gen_tok_s"], 100.0) << "10 tokens after the first in 150 - 50 ms";
  EXPECT_EQ(j["queue_ms"], 10.0);
  EXPECT_EQ(j["ttft_ms"], 50.0);
  EXPECT_EQ(j["stream"], false);
  EXPECT_FALSE(j.contains("reason"));
  log.http_done(request(7), completion(200));  // the seq is forgotten: a plain line
  EXPECT_FALSE(lines()[1].contains("prompt_tokens"));
}

TEST_F(AccessLogTest, AClientThatLeftIs499AndTheEngineWritesTheLineWhenItStops) {
  AccessLog log(logger_, true);
  log.expect_generation(3);
  log.http_done(request(3), completion(http::kStatusClientClosedRequest, {}, /*closed=*/true));
  EXPECT_TRUE(lines().empty()) << "waits for the engine";
  log.generation_done(3, generation("cancelled"));
  const std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["status"], 499);
  EXPECT_EQ(l[0]["level"], "info") << "a client's choice, not a fault";
  EXPECT_EQ(l[0]["finish"], "cancelled");
  EXPECT_EQ(l[0]["generated_tokens"], 11);
  EXPECT_EQ(l[0]["reason"], "the client closed the connection before the answer was complete");
}

TEST_F(AccessLogTest, ARefusedSubmitIsForgottenAndTheAnswerLogsAlone) {
  AccessLog log(logger_, true);
  log.expect_generation(4);
  log.forget_generation(4);
  log.http_done(request(4), completion(429, R"({"error":{"message":"the queue is full"}})"));
  const std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["status"], 429);
  EXPECT_EQ(l[0]["reason"], "the queue is full");
  log.generation_done(4, generation());  // nothing waits for it any more
  EXPECT_EQ(lines().size(), 1u);
}

TEST_F(AccessLogTest, RatesAreNullWhenThereIsNothingToDivide) {
  AccessLog log(logger_, true);
  GenerationRecord g = generation();
  g.cached_tokens = g.prompt_tokens;  // all cached
  g.generated_tokens = 1;             // no interval after the first token
  log.expect_generation(5);
  log.generation_done(5, g);
  log.http_done(request(5), completion(200));
  GenerationRecord none = generation("cancelled");
  none.ttft_ms = 0;  // cancelled before its first token
  none.generated_tokens = 0;
  log.expect_generation(6);
  log.generation_done(6, none);
  log.http_done(request(6), completion(200));
  const std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_TRUE(l[0]["prompt_tok_s"].is_null()) << l[0].dump();
  EXPECT_TRUE(l[0]["gen_tok_s"].is_null()) << l[0].dump();
  EXPECT_TRUE(l[1]["prompt_tok_s"].is_null()) << l[1].dump();
  EXPECT_TRUE(l[1]["ttft_ms"].is_null()) << l[1].dump();
  EXPECT_EQ(l[1]["level"], "info");
  EXPECT_EQ(l[1]["reason"], "cancelled before it finished (request timeout or shutdown)");
}

TEST_F(AccessLogTest, AStreamThatFailedIsAnErrorWithItsMessageThoughItsStatusIs200) {
  AccessLog log(logger_, true);
  GenerationRecord g = generation("error");
  g.stream = true;
  g.error = "non-finite logits";
  log.expect_generation(8);
  log.generation_done(8, g);
  log.http_done(request(8), completion(200));
  const json j = lines().at(0);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["reason"], "generation failed: non-finite logits");
}

TEST_F(AccessLogTest, ReasonsFromEveryErrorShapeAreCut) {
  EXPECT_EQ(error_reason(R"({"type":"error","error":{"type":"not_found_error","message":"no such model"}})"),
            "no such model");
  EXPECT_EQ(error_reason("plain text body"), "plain text body");
  EXPECT_EQ(error_reason(R"({"error":"a string"})"), R"({"error":"a string"})");
  const std::string long_message(5000, 'm');
  const std::string cut = error_reason(json{{"error", {{"message", long_message}}}}.dump());
  EXPECT_LE(cut.size(), kMaxReasonBytes);
  EXPECT_EQ(cut.substr(0, 100), long_message.substr(0, 100));
}

TEST_F(AccessLogTest, PassingHealthChecksAndQuietReadsOnlyWithVerbose) {
  AccessLog log(logger_, true);
  log.http_done(request(1, "GET", "/health"), completion(200));
  log.http_done(request(2, "GET", "/v1/cache/stats"), completion(200));
  log.http_done(request(3, "GET", "/webui/app.js"), completion(304));
  log.http_done(request(4, "GET", "/health"), completion(503, R"({"error":{"message":"Loading model"}})"));
  std::vector<json> l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["level"], "error");
  EXPECT_EQ(l[0]["reason"], "Loading model");

  logger_.set_verbose(true);
  log.http_done(request(5, "GET", "/health"), completion(200));
  l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1]["level"], "debug");
  EXPECT_EQ(l[1]["remote"], "127.0.0.1:5555");
  EXPECT_EQ(l[1]["request_bytes"], 15);
}

TEST_F(AccessLogTest, DisabledWritesNothing) {
  AccessLog log(logger_, false);
  log.expect_generation(1);
  log.generation_done(1, generation());
  log.http_done(request(1), completion(500, R"({"error":{"message":"boom"}})"));
  EXPECT_TRUE(lines().empty());
}

}  // namespace
}  // namespace pagoda::server
