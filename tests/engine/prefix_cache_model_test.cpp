// The prefix cache end to end through Model::forward, driven the way the engine will
// drive it (lookup → adopt → reserve → forward the uncached suffix → greedy decode →
// insert → release): greedy output is token-identical with the cache on and off for a
// full hit, a partial hit diverging mid-block, a hit shorter than one block, 2 and 8
// requests borrowing one cached prefix at once (decoded in one batch), a 6-turn
// conversation, and turns whose cached prefix was partly evicted in between — on
// stories260K and synthetic llama / qwen2 / qwen3 models, with f16 and q8 KV.
#include <gtest/gtest.h>

#include "model_fixtures.h"
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cache/prefix_cache.h"
#include "gguf/gguf.h"
#include "kv/paged_kv_store.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

using test::argmax;
using test::kStories;
using test::load;
using test::Loaded;
constexpr int kBlock = 16;


// One model, one pool, one cache: a minimal engine. Sequences in one call are admitted
// one by one (prefill of each uncached suffix), then decoded together, one batch per step.
class MiniEngine {
 public:
  MiniEngine(Model& m, KvType kv, bool cache_on, int64_t n_blocks = 4096)
      : m_(m), pool_(geometry(m.config()), kv_config(m.config(), kv, n_blocks)), store_(pool_),
        cache_(pool_, "synthetic-test-model", [&] {
          PrefixCacheConfig c;
          c.enabled = cache_on;
          return c;
        }()),
        threads_(2) {}

  // Greedy-generates n_gen tokens for each prompt at once; returns them and, per prompt,
  // the cached tokens reused. The sequences stay indexed (prompt + generated tokens).
  std::vector<std::vector<int32_t>> run(const std::vector<std::vector<int32_t>>& prompts, int n_gen,
                                        std::vector<int64_t>* cached = nullptr) {
    const CacheKey key = cache_.key();
    const int64_t V = m_.config().n_vocab;
    const size_t n = prompts.size();
    std::vector<std::vector<int32_t>> seq_tokens(prompts), out(n);
    std::vector<int32_t> next(n);
    if (cached) cached->assign(n, 0);
    for (size_t s = 0; s < n; ++s) {
      const SeqId id = static_cast<SeqId>(s);
      CacheHit hit = cache_.lookup(key, prompts[s]);
      const int64_t from = hit.cached_tokens;
      if (cached) (*cached)[s] = from;
      store_.adopt(id, std::move(hit.table));
      EXPECT_TRUE(store_.reserve(id, static_cast<int64_t>(prompts[s].size())).ok());
      batch_.clear();
      for (size_t i = static_cast<size_t>(from); i < prompts[s].size(); ++i)
        batch_.add(prompts[s][i], static_cast<int64_t>(i), id, i + 1 == prompts[s].size());
      m_.forward(batch_, store_, threads_, logits_);
      next[s] = argmax(logits_.data(), V);
      cache_.insert(key, prompts[s], store_.mutable_table(id), /*finished=*/false);  // full blocks as they fill
      cache_.check_invariants();
    }
    for (int g = 0; g < n_gen; ++g) {
      batch_.clear();
      for (size_t s = 0; s < n; ++s) {
        out[s].push_back(next[s]);
        if (g + 1 == n_gen) continue;  // the last token is returned, never fed
        const int64_t pos = static_cast<int64_t>(seq_tokens[s].size());
        EXPECT_TRUE(store_.reserve(static_cast<SeqId>(s), pos + 1).ok());
        batch_.add(next[s], pos, static_cast<SeqId>(s), true);
        seq_tokens[s].push_back(next[s]);
      }
      if (batch_.size() == 0) break;
      m_.forward(batch_, store_, threads_, logits_);
      for (size_t s = 0; s < n; ++s) next[s] = argmax(&logits_[s * V], V);
    }
    for (size_t s = 0; s < n; ++s) {
      cache_.insert(key, seq_tokens[s], store_.mutable_table(static_cast<SeqId>(s)), /*finished=*/true);
      store_.remove(static_cast<SeqId>(s));
      cache_.check_invariants();
    }
    return out;
  }

  // Pool pressure: takes `n` blocks and gives them back (the cache loses its oldest).
  void squeeze(int64_t n_blocks) {
    BlockTable t;
    EXPECT_TRUE(pool_.append_tokens(t, n_blocks * pool_.block_size()).ok());
    pool_.free(t);
    cache_.check_invariants();
  }

  PagedKvPool& pool() { return pool_; }
  PrefixCache& cache() { return cache_; }

 private:
  static KvGeometry geometry(const ModelConfig& c) { return KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}; }
  static KvConfig kv_config(const ModelConfig& c, KvType t, int64_t n_blocks) {
    KvConfig k;
    k.block_size = kBlock;
    k.k_type = k.v_type = t;
    KvConfig probe_cfg = k;
    probe_cfg.budget_bytes = 64ull << 20;
    PagedKvPool probe(geometry(c), probe_cfg);
    k.budget_bytes = static_cast<uint64_t>(n_blocks) * probe.bytes_per_block();
    return k;
  }

  Model& m_;
  PagedKvPool pool_;
  PagedKvStore store_;
  PrefixCache cache_;
  ThreadPool threads_;
  Batch batch_;
  std::vector<float> logits_;
};

std::vector<int32_t> random_tokens(int64_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> p;
  uint32_t x = seed;
  while (static_cast<int64_t>(p.size()) < n) {
    x = x * 1103515245u + 12345u;
    p.push_back(static_cast<int32_t>(2 + (x >> 16) % static_cast<uint32_t>(n_vocab - 2)));
  }
  return p;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> head(const std::vector<int32_t>& a, size_t n) { return {a.begin(), a.begin() + n}; }

// Output of `prompts` from a fresh engine with the cache off (the reference).
std::vector<std::vector<int32_t>> cold(Model& m, KvType kv, const std::vector<std::vector<int32_t>>& prompts, int n_gen) {
  MiniEngine e(m, kv, /*cache_on=*/false);
  return e.run(prompts, n_gen);
}

void check_model(Model& m, const std::string& name) {
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  const int n_gen = 12;
  int compared = 0;
  for (KvType kv : {KvType::F16, KvType::Q8}) {
    const std::string tag = name + " kv=" + kv_type_name(kv);
    const auto base = cat({1}, random_tokens(69, V, 7));  // 70 tokens: 4 blocks + 6
    MiniEngine e(m, kv, /*cache_on=*/true);
    std::vector<int64_t> cached;
    // Seed the cache with base (+ its 12 generated tokens, of which 11 are fed).
    EXPECT_EQ(e.run({base}, n_gen, &cached), cold(m, kv, {base}, n_gen)) << tag << " seeding run";
    EXPECT_EQ(cached[0], 0);
    struct Case {
      const char* what;
      std::vector<int32_t> prompt;
      int64_t want_cached;
    };
    const Case cases[] = {
        {"full hit", base, 69},
        {"partial hit diverging mid-block", cat(head(base, 45), random_tokens(20, V, 99)), 45},
        {"hit shorter than one block", cat(head(base, 10), random_tokens(15, V, 98)), 10},
        {"hit past the cached prompt into generated tokens", base, 69},
    };
    for (const Case& c : cases) {
      const auto got = e.run({c.prompt}, n_gen, &cached);
      EXPECT_EQ(cached[0], c.want_cached) << tag << " " << c.what;
      EXPECT_EQ(got, cold(m, kv, {c.prompt}, n_gen)) << tag << " " << c.what;
      ++compared;
    }
    // 2 and 8 requests borrowing the cached prefix at once, decoded in one batch; the
    // reference decodes the same batch with the cache off.
    for (int k : {2, 8}) {
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < k; ++i) prompts.push_back(cat(head(base, 33 + 3 * i), random_tokens(9, V, 100 * k + i)));
      const auto got = e.run(prompts, n_gen, &cached);
      for (int i = 0; i < k; ++i) EXPECT_EQ(cached[i], 33 + 3 * i) << tag << " borrower " << i << " of " << k;
      EXPECT_EQ(got, cold(m, kv, prompts, n_gen)) << tag << " " << k << " borrowers";
      ++compared;
    }
    e.pool().check_invariants();
  }
  std::printf("%s: %d cache-on runs token-identical to cache-off\n", name.c_str(), compared);
}

void check_conversation(Model& m, const std::string& name) {
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  const int n_gen = 10;
  for (KvType kv : {KvType::F16, KvType::Q8}) {
    for (bool evict_between : {false, true}) {
      const std::string tag = name + " kv=" + kv_type_name(kv) + (evict_between ? " with evictions" : "");
      // A pool of 64 blocks: squeezing 60 after a turn evicts the conversation's tail
      // (its oldest blocks) but leaves its head.
      MiniEngine e(m, kv, /*cache_on=*/true, 64);
      std::vector<int32_t> history = {1};
      for (int turn = 0; turn < 6; ++turn) {
        const auto prompt = cat(history, random_tokens(11 + turn, V, 300 + turn));
        std::vector<int64_t> cached;
        const auto got = e.run({prompt}, n_gen, &cached);
        EXPECT_EQ(got, cold(m, kv, {prompt}, n_gen)) << tag << " turn " << turn;
        const int64_t hist = static_cast<int64_t>(history.size());
        if (!evict_between || turn == 0) {
          EXPECT_EQ(cached[0], turn == 0 ? 0 : hist) << tag << " turn " << turn;
        } else {
          EXPECT_LT(cached[0], hist) << tag << " turn " << turn;
          EXPECT_GT(cached[0], 0) << tag << " turn " << turn;
        }
        history = cat(prompt, head(got[0], n_gen - 1));  // what the next turn re-sends
        if (evict_between) {
          const int64_t cached_blocks = e.cache().stats().cached_blocks;
          e.squeeze(e.pool().blocks_budget() - cached_blocks + std::max<int64_t>(1, cached_blocks / 2));
          EXPECT_GT(e.cache().stats().evictions_pool_pressure + e.cache().stats().evicted_blocks, 0);
        }
      }
    }
  }
}

SynthSpec synth_spec(const std::string& arch) {
  SynthSpec s;
  s.arch = arch;
  s.dim = 256;
  s.n_layers = 2;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.ffn_dim = 512;
  s.n_vocab = 512;
  s.ctx_len = 1024;
  s.seed = 42;
  if (arch == "qwen3") s.head_dim = 64;
  return s;
}

TEST(PrefixCacheModel, StoriesGreedyIsIdenticalWithTheCacheOnAndOff) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  Loaded l = load(kStories);
  check_model(*l.model, "stories260K");
  check_conversation(*l.model, "stories260K");
}

TEST(PrefixCacheModel, SyntheticModelsGreedyIsIdenticalWithTheCacheOnAndOff) {
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("pagoda_prefix_cache_" + std::to_string(::getpid()) + "_" + arch + ".gguf")).string();
    write_synthetic_model(synth_spec(arch), path);
    Loaded l = load(path);
    check_model(*l.model, "synthetic " + arch);
    check_conversation(*l.model, "synthetic " + arch);
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace pagoda
