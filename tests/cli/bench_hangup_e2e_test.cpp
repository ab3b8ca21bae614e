// Half the clients hang up mid-stream (`pagoda bench --hangup-fraction 0.5`) against a real
// `pagoda serve` (stories260K on loopback): the other half must all finish with their full
// output, and once the run is over no KV block may stay live (a hung-up request that was
// not cancelled, or cancelled without releasing its table, would leave blocks_live > 0).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::ServerProcess;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

json get_json(uint16_t port, const std::string& path) {
  pagoda::testing::HttpResult r = pagoda::testing::http(port, "GET", path, "");
  EXPECT_EQ(r.status, 200) << path << ": " << r.body;
  return json::parse(r.body, nullptr, false);
}

TEST(BenchHangUp, HalfTheClientsHangUpTheRestFinishAndNoBlockLeaks) {
  // 16 streams on 8 engine slots, 200 tokens each: a hung-up request is still generating
  // (or still queued) when its client goes, so the server has to cancel it.
  ServerProcess server({"-m", kStories, "-t", "1", "--parallel", "8", "--kv-cache-bytes", "16MiB",
                        "--no-log-requests"});
  const uint16_t port = server.start();
  ASSERT_NE(port, 0) << server.log();

  const std::string out = "/tmp/pagoda_bench_hangup_" + std::to_string(::getpid()) + ".json";
  const std::string cmd = std::string(PAGODA_BINARY) + " bench --quiet --url http://127.0.0.1:" +
                          std::to_string(port) + " -m " + kStories + " --out " + out +
                          " --workload random --concurrency 16 --requests 32 --input-len 40 --output-len 200"
                          " --hangup-fraction 0.5 --hangup-after 2 --timeout 600 > /dev/null 2>&1";  // a bound, not a speed check:
                          // under TSan on 2 busy cores the run takes minutes
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  json r = json::parse(f, nullptr, false);
  std::remove(out.c_str());
  ASSERT_TRUE(r.is_object());
  const json& s = r["summary"];
  EXPECT_EQ(s["requests_sent"], 32);
  EXPECT_EQ(s["requests_hung_up"], 16);
  EXPECT_EQ(s["requests_ok"], 16);
  EXPECT_EQ(s["requests_failed"], 0) << s["errors"].dump();
  EXPECT_EQ(s["output_len_honoured"], 16) << "every stream that stayed got its 200 tokens";
  for (const json& q : r["requests"]) {
    if (q["result"] == "hung_up") {
      EXPECT_EQ(q["content_chunks"], 2) << q.dump();
    }
  }

  // The hung-up requests are cancelled and their blocks released (the prefix cache may keep
  // full blocks as cached, never as live).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  json st;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    st = get_json(port, "/v1/cache/stats");
  } while ((st["engine"]["running"] != 0 || st["pool"]["blocks_live"] != 0) &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(st["engine"]["running"], 0) << st.dump();
  EXPECT_EQ(st["pool"]["blocks_live"], 0) << st.dump();

  // And the server goes on serving.
  pagoda::testing::HttpResult after = pagoda::testing::http(
      port, "POST", "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 4}}.dump());
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 20), 0) << server.log();
}

}  // namespace
