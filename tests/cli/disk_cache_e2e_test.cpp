// The prefix cache's disk tier through `pagoda serve` on stories260K: a server restarted
// on the same --prompt-cache-dir serves a prompt from disk with the same greedy text
// (stats, /metrics, reset by tier); servers killed with SIGKILL while writing
// (write-through) and a record corrupted by hand never give a corrupt block to attention
// (the text stays the cache-off text, the bad record is counted and deleted); a bad
// directory is a one-line error.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "server_process.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
using testing::http;
using testing::ServerProcess;

const std::string kModel = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = "/tmp/pagoda_disk_cache_e2e_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::vector<int> prompt_of(int n, uint32_t seed) {
  std::vector<int> p;
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) p.push_back(3 + static_cast<int>(rng() % 500));
  return p;
}

std::string completion_body(const std::vector<int>& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}.dump();
}

struct Completion {
  std::string text;
  int64_t cached_tokens = -1;
};

Completion complete(uint16_t port, const std::vector<int>& prompt, int max_tokens = 16) {
  const auto r = http(port, "POST", "/v1/completions", completion_body(prompt, max_tokens));
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  const json j = json::parse(r.body);
  return {j["choices"][0]["text"].get<std::string>(), j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>()};
}

json disk_stats(uint16_t port) {
  const auto r = http(port, "GET", "/v1/cache/stats");
  EXPECT_EQ(r.status, 200);
  return json::parse(r.body)["prefix_cache"]["disk"];
}

std::vector<std::string> serve_args(const std::string& dir, const std::string& policy = "evict") {
  return {"-m", kModel, "--kv-block-size", "16", "--threads", "1", "--prompt-cache-dir", dir,
          "--prompt-cache-disk-policy", policy, "--no-log-requests"};
}

int count_files(const std::string& dir, const std::string& suffix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(suffix)) ++n;
  return n;
}

TEST(DiskCacheE2E, RestartedServerServesThePromptFromDisk) {
  TempDir dir;
  const auto prompt = prompt_of(300, 1);
  Completion first;
  {
    ServerProcess s(serve_args(dir.path));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    first = complete(port, prompt);
    EXPECT_EQ(first.cached_tokens, 0);
    ASSERT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  }
  // A clean shutdown wrote the RAM tier's full blocks: (300 + 16 - 1) / 16 = 19, 0600 each.
  EXPECT_EQ(count_files(dir.path, ".kvb"), 19);
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    struct stat st {};
    ::stat(e.path().c_str(), &st);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
  }
  ServerProcess s(serve_args(dir.path));
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const json before = disk_stats(port);
  EXPECT_EQ(before["blocks"], 19);
  EXPECT_EQ(before["hits"], 0);
  const Completion again = complete(port, prompt);
  EXPECT_EQ(again.text, first.text);
  EXPECT_EQ(again.cached_tokens, 288);  // 18 full blocks of the prompt (the last prompt token is recomputed)
  const json d = disk_stats(port);
  EXPECT_EQ(d["hits"], 1);
  EXPECT_EQ(d["hit_tokens"], 288);
  EXPECT_EQ(d["reads"], 18);
  EXPECT_GT(d["read_bytes_per_s"].get<double>(), 0);
  EXPECT_GT(d["bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(d["capacity_bytes"], 4ull << 30);
  for (const char* k : {"writes", "evictions", "corrupt"}) EXPECT_TRUE(d.contains(k)) << k;
  const auto metrics = http(port, "GET", "/metrics");
  EXPECT_NE(metrics.body.find("pagoda_prefix_cache_disk_hits_total 1"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("pagoda_prefix_cache_disk_hit_tokens_total 288"), std::string::npos);
  EXPECT_NE(metrics.body.find("pagoda_prefix_cache_disk_blocks 19"), std::string::npos);

  // Reset by tier.
  auto r = http(port, "POST", "/v1/cache/reset", R"({"tier": "sideways"})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = http(port, "POST", "/v1/cache/reset", R"({"tier": "ram"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prefix_cache"]["disk"]["blocks"], 19);
  EXPECT_EQ(json::parse(r.body)["prefix_cache"]["cached_blocks"], 0);
  r = http(port, "POST", "/v1/cache/reset", R"({"tier": "disk"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prefix_cache"]["disk"]["blocks"], 0);
  EXPECT_EQ(json::parse(r.body)["freed_disk_blocks"], 19);
  EXPECT_EQ(count_files(dir.path, ".kvb"), 0);
}

TEST(DiskCacheE2E, KilledWritersAndAHandCorruptedRecordNeverFeedAttention) {
  TempDir dir;
  const int kPrompts = 4;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < kPrompts; ++i) prompts.push_back(prompt_of(250, 100 + static_cast<uint32_t>(i)));
  std::vector<std::string> cold;
  {
    ServerProcess s({"-m", kModel, "--threads", "1", "--prompt-cache", "off"});
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    for (const auto& p : prompts) cold.push_back(complete(port, p, 24).text);
  }
  // SIGKILL servers writing through (policy all) at varied moments of concurrent requests.
  std::mt19937 rng(5);
  for (int round = 0; round < 6; ++round) {
    ServerProcess s(serve_args(dir.path, "all"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    std::vector<std::thread> clients;
    for (int i = 0; i < kPrompts; ++i)
      clients.emplace_back([&, i] { http(port, "POST", "/v1/completions", completion_body(prompts[static_cast<size_t>(i)], 200), {}, 5); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 150));
    ::kill(s.pid(), SIGKILL);
    for (auto& c : clients) c.join();
    s.wait_exit(10);
  }
  // Restart: no leftovers, every surviving record intact (rename is atomic: a killed
  // write leaves a .tmp, never a torn record), the texts the cache-off ones.
  {
    ServerProcess s(serve_args(dir.path, "all"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    EXPECT_EQ(count_files(dir.path, ".tmp"), 0);
    int64_t reused = 0;
    for (int i = 0; i < kPrompts; ++i) {
      const Completion c = complete(port, prompts[static_cast<size_t>(i)], 24);
      EXPECT_EQ(c.text, cold[static_cast<size_t>(i)]) << "prompt " << i;
      reused += c.cached_tokens;
    }
    const json d = disk_stats(port);
    EXPECT_GT(reused, 0) << d.dump();
    EXPECT_EQ(d["corrupt"], 0) << d.dump();
    ASSERT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  }
  // Corrupt every record by hand (one byte of each payload): nothing may be reused.
  int n_records = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    if (!e.path().string().ends_with(".kvb")) continue;
    std::fstream io(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(1000);
    const char c = static_cast<char>(io.peek());
    io.seekp(1000);
    io.put(static_cast<char>(c ^ 0x40));
    ++n_records;
  }
  ASSERT_GT(n_records, 0);
  ServerProcess s(serve_args(dir.path, "all"));
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  for (int i = 0; i < kPrompts; ++i) {
    const Completion c = complete(port, prompts[static_cast<size_t>(i)], 24);
    EXPECT_EQ(c.text, cold[static_cast<size_t>(i)]) << "prompt " << i;
    EXPECT_EQ(c.cached_tokens, 0) << "prompt " << i << " reused a corrupt block";
  }
  const json d = disk_stats(port);
  EXPECT_EQ(d["corrupt"], kPrompts) << d.dump();  // each prompt's first block: a miss, deleted
  EXPECT_EQ(d["reads"], 0) << d.dump();
}

TEST(DiskCacheE2E, BadDirectoryIsAOneLineError) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  const std::string file = dir.path + "/file";
  std::ofstream(file) << "x";
  for (const auto& [path, expected] : std::vector<std::pair<std::string, std::string>>{
           {file, "--prompt-cache-dir " + file + ": exists and is not a directory"},
           {"/proc/self", "--prompt-cache-dir /proc/self: not writable"}}) {
    ServerProcess s({"-m", kModel, "--prompt-cache-dir", path});
    EXPECT_EQ(s.wait_exit(30), 1) << s.log();
    const std::string log = s.log();
    const size_t at = log.find("pagoda: error: ");
    ASSERT_NE(at, std::string::npos) << log;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    EXPECT_NE(line.find(expected), std::string::npos) << line;
    EXPECT_EQ(log.find("pagoda: error: ", at + 1), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace pagoda
