// Shared by the engine model tests: loading stories260K or a small synthetic llama, KV
// budgets in blocks, an EngineConfig with invariants checked, a sink that records
// everything a request hears, and deterministic random prompts.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tools/synth.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::engine_test {

using namespace std::chrono_literals;

inline const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
constexpr int kBlock = 16;

struct Loaded {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

inline Loaded load(const std::string& path, bool with_tokenizer) {
  Loaded l;
  l.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  l.model = Model::load(l.file);
  if (with_tokenizer) l.tokenizer = Tokenizer::from_gguf(*l.file);
  return l;
}

// A synthetic model written once per process (per tag) to the temp dir, removed at exit.
inline Loaded load_synth_spec(const SynthSpec& spec, const std::string& tag) {
  static std::map<std::string, std::string> paths;
  static const struct Remover {
    ~Remover() {
      for (auto& [t, p] : paths) std::filesystem::remove(p);
    }
  } remover;
  auto it = paths.find(tag);
  if (it == paths.end()) {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("pagoda_engine_" + tag + "_" + std::to_string(getpid()) + ".gguf"))
                              .string();
    write_synthetic_model(spec, p);
    it = paths.emplace(tag, p).first;
  }
  return load(it->second, false);
}

// A small llama with a long context (the chunked-prefill test needs 3,000+ positions).
inline Loaded load_synth() {
  SynthSpec s;
  s.arch = "llama";
  s.dim = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_dim = 128;
  s.n_vocab = 256;
  s.ctx_len = 4096;
  s.seed = 7;
  return load_synth_spec(s, "synth");
}

inline uint64_t bytes_for_blocks(const Model& m, int64_t n_blocks) {
  const ModelConfig& c = m.config();
  KvConfig k;
  k.block_size = kBlock;
  k.budget_bytes = 64ull << 20;
  PagedKvPool probe(KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}, k);
  return static_cast<uint64_t>(n_blocks) * probe.bytes_per_block();
}

inline EngineConfig engine_config(const Model& m, int parallel, int64_t n_blocks, bool cache_on,
                           int64_t max_batch_tokens = 32) {
  EngineConfig c;
  c.parallel = parallel;
  c.max_queue = 64;
  c.max_batch_tokens = max_batch_tokens;
  c.threads = 2;
  c.kv.block_size = kBlock;
  c.kv.budget_bytes = bytes_for_blocks(m, n_blocks);
  c.cache.enabled = cache_on;
  c.check_invariants = true;
  return c;
}

// Sliding-window models' tests: a 64 MiB budget, windows paged apart unless swa_full.
inline EngineConfig windowed_config(const Model& m, bool swa_full, bool cache_on, int parallel = 4) {
  EngineConfig c = engine_config(m, parallel, 0, cache_on, 48);
  c.kv.budget_bytes = 64ull << 20;
  c.kv.swa_full = swa_full;
  return c;
}

// Greedy, ignoring EOS, with log-probabilities.
inline Request greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.logprobs = true;
  return r;
}

// Records everything a request's sink hears; tests wait on it.
class RecordingSink final : public RequestSink {
 public:
  void on_token(const TokenEvent& ev) override {
    std::lock_guard<std::mutex> lk(mu_);
    tokens_.push_back(ev.token_id);
    eogs_.push_back(ev.eog);
    logprobs_.push_back(ev.logprob);
    top_.push_back(ev.top_logprobs);
    steps_.push_back(ev.step);
    times_.push_back(std::chrono::steady_clock::now());
    text_ += ev.text;
    cv_.notify_all();
  }
  void on_finish(const RequestResult& r) override {
    std::lock_guard<std::mutex> lk(mu_);
    result_ = r;
    done_ = true;
    cv_.notify_all();
  }
  void on_error(uint64_t, const std::string& message) override {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = message;
    done_ = true;
    cv_.notify_all();
  }
  bool wait_done(std::chrono::seconds timeout = 120s) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return done_; });
  }
  bool wait_tokens(size_t n, std::chrono::seconds timeout = 120s) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return tokens_.size() >= n || done_; });
  }
  std::vector<int32_t> tokens() const { std::lock_guard<std::mutex> lk(mu_); return tokens_; }
  std::vector<bool> eogs() const { std::lock_guard<std::mutex> lk(mu_); return eogs_; }
  std::vector<float> logprobs() const { std::lock_guard<std::mutex> lk(mu_); return logprobs_; }
  std::vector<std::vector<TokenLogprob>> top() const { std::lock_guard<std::mutex> lk(mu_); return top_; }
  std::vector<int64_t> steps() const { std::lock_guard<std::mutex> lk(mu_); return steps_; }
  std::vector<std::chrono::steady_clock::time_point> times() const { std::lock_guard<std::mutex> lk(mu_); return times_; }
  std::string text() const { std::lock_guard<std::mutex> lk(mu_); return text_; }
  RequestResult result() const { std::lock_guard<std::mutex> lk(mu_); return result_; }
  std::string error() const { std::lock_guard<std::mutex> lk(mu_); return error_; }
  bool done() const { std::lock_guard<std::mutex> lk(mu_); return done_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  std::vector<bool> eogs_;
  std::vector<float> logprobs_;
  std::vector<std::vector<TokenLogprob>> top_;
  std::vector<int64_t> steps_;
  std::vector<std::chrono::steady_clock::time_point> times_;
  std::string text_;
  RequestResult result_;
  std::string error_;
  bool done_ = false;
};

inline std::vector<int32_t> random_tokens(int64_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> p;
  uint32_t x = seed;
  while (static_cast<int64_t>(p.size()) < n) {
    x = x * 1103515245u + 12345u;
    p.push_back(static_cast<int32_t>(3 + (x >> 16) % static_cast<uint32_t>(n_vocab - 3)));
  }
  return p;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;  // each token's, as streamed
  std::vector<RequestResult> results;
  EngineStats stats;
};

// Submits all requests before start() (they meet in the same steps), waits for all.
inline RunResult run_all(Model& m, const Tokenizer* tok, const EngineConfig& cfg, const std::vector<Request>& rs) {
  Engine e(m, tok, cfg);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const Request& r : rs) {
    sinks.push_back(std::make_shared<RecordingSink>());
    const SubmitResult s = e.submit(r, sinks.back());
    EXPECT_TRUE(s.ok()) << s.message;
  }
  e.start();
  RunResult out;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->wait_done());
    EXPECT_EQ(s->error(), "");
    out.tokens.push_back(s->tokens());
    out.logprobs.push_back(s->logprobs());
    out.results.push_back(s->result());
    EXPECT_EQ(s->result().tokens, s->tokens());  // streamed == final: nothing repeated
  }
  e.stop();
  out.stats = e.stats();
  // No leaks: everything left is the prefix cache's, and evictable.
  EXPECT_EQ(out.stats.pool.blocks_live, 0);
  EXPECT_EQ(out.stats.pool.blocks_evictable, out.stats.cache.cached_blocks);
  return out;
}

// The same requests one at a time through one engine (each waits for the one before):
// the sequential reference a concurrent run must match token for token, and with the
// cache on, cached token for cached token.
inline RunResult run_one_by_one(Model& m, const Tokenizer* tok, const EngineConfig& cfg,
                                const std::vector<Request>& rs) {
  Engine e(m, tok, cfg);
  e.start();
  RunResult out;
  for (const Request& r : rs) {
    auto sink = std::make_shared<RecordingSink>();
    const SubmitResult s = e.submit(r, sink);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_TRUE(sink->wait_done());
    EXPECT_EQ(sink->error(), "");
    out.tokens.push_back(sink->tokens());
    out.logprobs.push_back(sink->logprobs());
    out.results.push_back(sink->result());
  }
  e.stop();
  out.stats = e.stats();
  return out;
}

}  // namespace pagoda::engine_test
