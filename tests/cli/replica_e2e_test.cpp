// What `pagoda serve` does for running as one replica of several (stories260K on loopback):
// its replica id in log lines and /v1/cache/stats, the SIGTERM drain (/health 503 while
// requests are still served), and --busy-status 503.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::http;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using Clock = std::chrono::steady_clock;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

std::string completion(int max_tokens) {
  return json{{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true}}.dump();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls until `pred` holds or `timeout_s` passes.
template <class Pred>
bool eventually(Pred pred, double timeout_s = 10) {
  const auto start = Clock::now();
  while (seconds_since(start) < timeout_s) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Replica, ItsIdStartsEveryRequestLogLineAndIsInCacheStats) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--replica-id", "east-2.r7"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  ASSERT_EQ(http(port, "POST", "/v1/completions", completion(2)).status, 200);
  json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
  ASSERT_TRUE(st.is_object());
  EXPECT_EQ(st["replica_id"], "east-2.r7");
  EXPECT_TRUE(eventually([&] { return s.log().find("[east-2.r7] POST /v1/completions 200") != std::string::npos; }))
      << s.log();
  EXPECT_NE(s.log().find("replica east-2.r7"), std::string::npos) << "the start-up summary names it\n" << s.log();
  // Health checks that pass are not logged (a load balancer polls every second).
  ASSERT_EQ(http(port, "GET", "/health").status, 200);
  EXPECT_EQ(s.log().find("GET /health"), std::string::npos) << s.log();
}

TEST(Replica, ItsIdDefaultsToHostNameAndPort) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
  ASSERT_TRUE(st.is_object());
  const std::string id = st["replica_id"];
  std::string suffix = ":";
  suffix += std::to_string(port);
  EXPECT_GT(id.size(), suffix.size()) << id;
  EXPECT_TRUE(id.ends_with(suffix)) << id;
}

TEST(Replica, ABadIdIsAUsageError) {
  for (const char* bad : {"", "has space", "semi;colon", "x/y"}) {
    ServerProcess s({"-m", kStories, "--replica-id", bad});
    EXPECT_EQ(s.wait_exit(20), 2) << bad << "\n" << s.log();
  }
  ServerProcess s({"-m", kStories, "--busy-status", "500"});
  EXPECT_EQ(s.wait_exit(20), 2) << s.log();
}

TEST(Replica, SigtermDrainsHealthFirstWhileRequestsAreStillServed) {
  // A 4 s drain: the checks that the request came inside it (< 3 s) and that the exit came
  // after it (>= 3.9 s) leave a loaded machine a second either way.
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--drain-seconds", "4"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  ASSERT_EQ(http(port, "GET", "/health").status, 200);
  const auto sent = Clock::now();
  ::kill(s.pid(), SIGTERM);
  ASSERT_TRUE(eventually([&] { return http(port, "GET", "/health").status == 503; })) << s.log();
  HttpResult health = http(port, "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("unavailable_error"), std::string::npos) << health.body;
  // Still serving during the drain: a load balancer sends until its next check fails.
  HttpResult r = http(port, "POST", "/v1/completions", completion(4));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(seconds_since(sent), 3.0) << "the drain lasts --drain-seconds";
  EXPECT_EQ(s.wait_exit(20), 0) << s.log();
  EXPECT_GE(seconds_since(sent), 3.9) << "it stopped before the drain ended\n" << s.log();
}

TEST(Replica, ASecondSignalEndsTheDrain) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--drain-seconds", "120"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  ::kill(s.pid(), SIGTERM);
  ASSERT_TRUE(eventually([&] { return http(port, "GET", "/health").status == 503; })) << s.log();
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 10), 0) << s.log();
}

TEST(Replica, SigintSkipsTheDrain) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--drain-seconds", "120"});
  ASSERT_NE(s.start(), 0) << s.log();
  EXPECT_EQ(s.signal_and_wait(SIGINT, 10), 0) << s.log();
  EXPECT_EQ(s.log().find("draining"), std::string::npos) << s.log();
}

TEST(Replica, BusyStatus503RefusesAFullQueueWith503AndRetryAfter) {
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "8MiB", "--parallel", "1", "--max-queue", "0",
                   "--busy-status", "503"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  HttpResult slow_result;
  std::thread slow([&] { slow_result = http(port, "POST", "/v1/completions", completion(600)); });
  ASSERT_TRUE(eventually([&] {
    json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
    return st.is_object() && st["engine"]["running"] == 1;
  }));
  HttpResult refused = http(port, "POST", "/v1/completions", completion(2));
  HttpResult refused_messages = http(port, "POST", "/v1/messages",
                                     json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}.dump());
  slow.join();
  EXPECT_EQ(slow_result.status, 200);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_EQ(refused_messages.status, 503) << "not Anthropic's 529 either\n" << refused_messages.body;
}

}  // namespace
