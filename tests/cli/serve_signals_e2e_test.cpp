// Signals to `pagoda serve` in each phase of its life (#32): while the model loads, SIGTERM
// stops the load at once (the model here is a FIFO nobody writes to, so the load would
// wait forever); while stopping, a second Ctrl-C exits at once instead of waiting out
// --shutdown-timeout for a long request.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;
using Clock = std::chrono::steady_clock;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

TEST(ServeSignals, ASignalDuringTheLoadStopsIt) {
  const std::string fifo = "/tmp/pagoda_signal_fifo_" + std::to_string(::getpid()) + ".gguf";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ServerProcess s({"-m", fifo, "-t", "1"});
  ASSERT_NE(s.wait_listening(30), 0) << s.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside the load's open()
  EXPECT_EQ(http(s.port(), "GET", "/health").status, 503);
  const auto t0 = Clock::now();
  EXPECT_EQ(s.signal_and_wait(SIGTERM, 10), 128 + SIGTERM) << s.log();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_NE(s.log().find("SIGTERM while loading the model: stopping"), std::string::npos) << s.log();
  ::unlink(fifo.c_str());
}

TEST(ServeSignals, ASecondCtrlCWhileStoppingExitsAtOnce) {
  // A request that runs for tens of seconds: 60k tokens of a 260K model.
  ServerProcess s({"-m", kStories, "-t", "1", "-c", "65536", "--kv-cache-bytes", "64MiB", "--shutdown-timeout", "60"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  std::thread client([&] {
    http(port, "POST", "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 60000}, {"ignore_eos", true}}.dump(),
         {}, 90);
  });
  for (int i = 0; i < 500; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    json st = json::parse(http(port, "GET", "/v1/cache/stats").body, nullptr, false);
    if (st.is_object() && st["engine"]["running"] == 1) break;
  }
  EXPECT_EQ(s.signal_and_wait(SIGINT, 0.5), -1) << "the first Ctrl-C did not wait for the request";
  const auto t0 = Clock::now();
  EXPECT_EQ(s.signal_and_wait(SIGINT, 10), 128 + SIGINT) << s.log();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_NE(s.log().find("second SIGINT: exiting now"), std::string::npos) << s.log();
  client.join();
}

}  // namespace
