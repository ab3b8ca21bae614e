// `pagoda bench` against a real `pagoda serve` (stories260K on loopback), for every
// workload, with the prefix cache on and off: the results JSON must add up.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::ServerProcess;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

std::string tmp_path(const std::string& name) {
  return "/tmp/pagoda_bench_e2e_" + std::to_string(::getpid()) + "_" + name;
}

// Runs `pagoda bench` with `args` (+ --url, --out, -m), returns the results JSON.
json run_bench(uint16_t port, const std::string& args, const std::string& name) {
  const std::string out = tmp_path(name + ".json");
  const std::string cmd = std::string(PAGODA_BINARY) + " bench --quiet --url http://127.0.0.1:" +
                          std::to_string(port) + " -m " + kStories + " --out " + out + " " + args +
                          " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  json j = json::parse(f, nullptr, false);
  std::remove(out.c_str());
  EXPECT_TRUE(j.is_object()) << cmd;
  return j;
}

// Counts add up and percentiles are ordered.
void expect_consistent(const json& r, int64_t expected_requests) {
  const json& s = r["summary"];
  EXPECT_EQ(s["requests_sent"], expected_requests);
  EXPECT_EQ(s["requests_ok"].get<int64_t>() + s["requests_failed"].get<int64_t>(), s["requests_sent"].get<int64_t>());
  EXPECT_EQ(s["requests_failed"], 0) << s["errors"].dump();
  EXPECT_EQ(r["requests"].size(), static_cast<size_t>(expected_requests));
  EXPECT_EQ(s["requests_with_usage"], expected_requests);
  EXPECT_EQ(s["output_len_honoured"], expected_requests) << "ignore_eos + min_tokens are honoured";
  for (const char* m : {"ttft_ms", "e2e_ms", "tpot_ms"}) {
    const json& p = s[m];
    EXPECT_LE(p["p50"].get<double>(), p["p90"].get<double>()) << m;
    EXPECT_LE(p["p90"].get<double>(), p["p99"].get<double>()) << m;
    EXPECT_LE(p["min"].get<double>(), p["p50"].get<double>()) << m;
    EXPECT_LE(p["p99"].get<double>(), p["max"].get<double>()) << m;
  }
  int64_t completion = 0;
  for (const json& q : r["requests"]) completion += q["completion_tokens"].get<int64_t>();
  EXPECT_EQ(completion, s["completion_tokens"].get<int64_t>());
  EXPECT_GT(s["generation_tok_s"].get<double>(), 0);
}

class BenchAgainstServe : public ::testing::TestWithParam<bool> {};

TEST_P(BenchAgainstServe, EveryWorkloadAddsUpAndCachedTokensFollowTheCacheSwitch) {
  const bool cache_on = GetParam();
  ServerProcess server({"-m", kStories, "-t", "1", "--parallel", "4", "--kv-cache-bytes", "16MiB", "--prompt-cache",
                        cache_on ? "on" : "off", "--no-log-requests"});
  const uint16_t port = server.start();
  ASSERT_NE(port, 0) << server.log();

  json random = run_bench(port, "--workload random --requests 8 --concurrency 4 --input-len 40 --output-len 6", "random");
  expect_consistent(random, 8);

  json shared = run_bench(port, "--workload shared-prefix --requests 6 --concurrency 2 --prefix-len 120 "
                                "--input-len 12 --output-len 4 --endpoint completions",
                          "shared");
  expect_consistent(shared, 6);
  if (cache_on) {
    EXPECT_GT(shared["summary"]["cached_tokens"].get<int64_t>(), 100) << "the shared prefix is reused";
  } else {
    EXPECT_EQ(shared["summary"]["cached_tokens"], 0);
  }

  json multi = run_bench(port, "--workload multi-turn --conversations 2 --turns 3 --input-len 30 --output-len 8",
                         "multi");
  expect_consistent(multi, 6);
  const json& turns = multi["summary"]["per_turn"];
  ASSERT_EQ(turns.size(), 3u);
  for (size_t t = 0; t < turns.size(); ++t) {
    EXPECT_EQ(turns[t]["requests_ok"], 2);
    EXPECT_EQ(turns[t]["requests_with_cached_tokens"], 2);
    const int64_t cached = turns[t]["cached_tokens"];
    if (!cache_on) {
      EXPECT_EQ(cached, 0) << "turn " << t;
    } else if (t >= 1) {
      // From turn 2 on the whole previous history (prompt + answer) is cached.
      EXPECT_GT(cached, turns[t - 1]["prompt_tokens"].get<int64_t>() / 2) << "turn " << t;
    }
  }
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 20), 0) << server.log();
}

INSTANTIATE_TEST_SUITE_P(CacheOnOff, BenchAgainstServe, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "CacheOn" : "CacheOff"; });

}  // namespace
