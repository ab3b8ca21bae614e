// A hybrid model (qwen35, Gated DeltaNet) served with the prefix cache's disk tier: its
// recurrent-state snapshots go to disk with the K/V blocks, so a server restarted on the
// same --prompt-cache-dir, after a clean stop or a SIGKILL of a write-through server,
// resumes a prompt from disk with the cache-off text; a snapshot record corrupted by hand
// or written for another model is a miss, never a state fed to the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "server_process.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::http;
using testing::ServerProcess;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

class HybridCacheE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = fs::temp_directory_path() / ("pagoda_hybrid_cache_e2e_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = synth(11, "q35.gguf");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string synth(int seed, const std::string& name) {
    const std::string path = (dir_ / name).string();
    const std::string cmd = std::string(PAGODA_BINARY) + " synth --arch qwen35 --shape tiny --seed " +
                            std::to_string(seed) + " --vocab-from " + kStories + " -o " + path + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return path;
  }

  std::vector<std::string> args(const std::string& policy, const std::string& model = {}) const {
    return {"-m", model.empty() ? model_ : model, "--kv-block-size", "16", "--threads", "1", "--kv-cache-bytes", "64MiB",
            "--prompt-cache-dir", (dir_ / "cache").string(), "--prompt-cache-disk-policy", policy,
            "--no-log-requests"};
  }

  fs::path dir_;
  std::string model_;
};

std::vector<int> prompt_of(int n, uint32_t seed) {
  std::vector<int> p;
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) p.push_back(3 + static_cast<int>(rng() % 500));
  return p;
}

struct Completion {
  std::string text;
  int64_t cached_tokens = -1;
};

Completion complete(uint16_t port, const std::vector<int>& prompt) {
  const auto r = http(port, "POST", "/v1/completions",
                      json{{"prompt", prompt}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  const json j = json::parse(r.body);
  return {j["choices"][0]["text"].get<std::string>(), j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>()};
}

json snapshot_stats(uint16_t port) {
  const auto r = http(port, "GET", "/v1/cache/stats");
  EXPECT_EQ(r.status, 200);
  return json::parse(r.body)["prefix_cache"]["state_snapshots"];
}

std::string cold_text(const std::string& model, const std::vector<int>& prompt) {
  ServerProcess s({"-m", model, "--threads", "1", "--prompt-cache", "off", "--no-log-requests"});
  const uint16_t port = s.start();
  EXPECT_NE(port, 0) << s.log();
  return complete(port, prompt).text;
}

// 200 prompt tokens in blocks of 16: the last boundary short of the last token is 192.
constexpr int kPrompt = 200;
constexpr int64_t kBoundary = 192;

TEST_F(HybridCacheE2E, ARestartAfterACleanStopResumesFromTheDisk) {
  const auto prompt = prompt_of(kPrompt, 1);
  const std::string cold = cold_text(model_, prompt);
  {
    ServerProcess s(args("evict"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    const Completion first = complete(port, prompt);
    EXPECT_EQ(first.text, cold);
    EXPECT_EQ(first.cached_tokens, 0);
    ASSERT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  }
  ServerProcess s(args("evict"));
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const Completion again = complete(port, prompt);
  EXPECT_EQ(again.text, cold);
  EXPECT_EQ(again.cached_tokens, kBoundary);
  const json st = snapshot_stats(port);
  EXPECT_EQ(st["disk_restores"], 1) << st.dump();
  EXPECT_EQ(st["restored_tokens"], kBoundary) << st.dump();
}

TEST_F(HybridCacheE2E, AKilledWriteThroughServerKeepsWhatItFinished) {
  const auto prompt = prompt_of(kPrompt, 2);
  const std::string cold = cold_text(model_, prompt);
  {
    ServerProcess s(args("all"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    EXPECT_EQ(complete(port, prompt).text, cold);
    // The write queue drains in the background: wait until the snapshots are written.
    for (int i = 0; i < 100 && snapshot_stats(port)["disk_writes"].get<int64_t>() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int i = 0; i < 100 && json::parse(http(port, "GET", "/v1/cache/stats").body)["prefix_cache"]["disk"]["queued_writes"] != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(s.pid(), SIGKILL);
    s.wait_exit(10);
  }
  ServerProcess s(args("all"));
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const Completion again = complete(port, prompt);
  EXPECT_EQ(again.text, cold);
  EXPECT_EQ(again.cached_tokens, kBoundary);
}

TEST_F(HybridCacheE2E, ACorruptOrForeignSnapshotIsAMissNeverAState) {
  const auto prompt = prompt_of(kPrompt, 3);
  const std::string cold = cold_text(model_, prompt);
  {
    ServerProcess s(args("evict"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    complete(port, prompt);
    ASSERT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  }
  // Another model (other weights, same shape) on the same directory: its namespace
  // differs, so nothing of the first one's is found.
  {
    const std::string other = synth(12, "other.gguf");
    ServerProcess s(args("evict", other));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    const Completion c = complete(port, prompt);
    EXPECT_EQ(c.cached_tokens, 0);
    EXPECT_EQ(c.text, cold_text(other, prompt));
    ASSERT_EQ(s.signal_and_wait(SIGTERM, 20), 0) << s.log();
  }
  // Flip a byte inside every record larger than a K/V block (the state snapshots: 57 KiB
  // against 2 KiB blocks here): each is a miss, counted corrupt, and the text is cold.
  int n_states = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache")) {
    if (!e.path().string().ends_with(".kvb") || fs::file_size(e.path()) < 32768) continue;
    std::fstream io(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(20000);
    const char c = static_cast<char>(io.peek());
    io.seekp(20000);
    io.put(static_cast<char>(c ^ 0x40));
    ++n_states;
  }
  ASSERT_GT(n_states, 0);
  ServerProcess s(args("evict"));
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const Completion c = complete(port, prompt);
  EXPECT_EQ(c.text, cold);
  EXPECT_EQ(c.cached_tokens, 0) << "a corrupt snapshot was restored";
  const auto r = http(port, "GET", "/v1/cache/stats");
  EXPECT_GT(json::parse(r.body)["prefix_cache"]["disk"]["corrupt"].get<int64_t>(), 0) << r.body;
}

// A chat conversation with a real vocabulary (Qwen3's, chatml): the answer comes back as
// text, which a random-weight model's sampled ids almost never tokenize back to, yet the
// next turn reuses the whole first turn (prompt and answer, all but the last sampled id,
// never fed back) because the server feeds the answer back as the ids it produced; with
// that memory off, the hit ends at the first turn's prompt.
TEST_F(HybridCacheE2E, TheNextChatTurnReusesTheAnswerAsItsOwnIds) {
  const std::string model = (dir_ / "q35_qwen3vocab.gguf").string();
  const std::string cmd = std::string(PAGODA_BINARY) + " synth --arch qwen35 --shape tiny --type q8_0 --vocab-from " +
                          std::string(PAGODA_SHARED_DIR) + "/models/qwen3-tokenizer -o " + model + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto chat = [](uint16_t port, const json& messages) {
    const auto r = http(port, "POST", "/v1/chat/completions",
                        json{{"messages", messages}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  };
  json messages = json::array({{{"role", "user"}, {"content", "Tell me a story about a lighthouse keeper and a storm."}}});
  for (const char* memory : {"32MiB", "0"}) {
    ServerProcess s({"-m", model, "--threads", "1", "--chat-template", "chatml", "--answer-tokens-bytes", memory,
                     "--no-log-requests"});
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    const json first = chat(port, messages);
    const int64_t prompt1 = first["usage"]["prompt_tokens"];
    json turn2 = messages;
    turn2.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
    turn2.push_back({{"role", "user"}, {"content", "And then?"}});
    const json second = chat(port, turn2);
    const int64_t cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (std::string(memory) != "0") {
      EXPECT_EQ(cached, prompt1 + 47) << second.dump();
      const auto st = json::parse(http(port, "GET", "/v1/cache/stats").body)["answer_tokens"];
      EXPECT_EQ(st["spliced"], 1) << st.dump();
    } else {
      EXPECT_LT(cached, prompt1 + 47) << "the answer round-tripped: pick another prompt for this check";
      EXPECT_GE(cached, prompt1 - 1) << "the previous prompt's snapshot was not used";
    }
  }
}

}  // namespace
}  // namespace pagoda
