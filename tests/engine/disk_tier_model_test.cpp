// The prefix cache's disk tier through Model::forward on stories260K: a prefix computed,
// evicted to disk and read back gives logits bit-identical to recomputing it (every
// position of the suffix, f16 / q8 / q4 KV with their sidecars), in the same process and
// after a "restart" (a new pool, cache and DiskTier on the same directory); and through
// the Engine: a request after a RAM reset is served from disk with the cache-off text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "cache/disk_tier.h"
#include "cache/prefix_cache.h"
#include "engine_harness.h"
#include "kv/paged_kv_store.h"
#include "common/error.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

constexpr int kBlock = 16;

struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = "/tmp/pagoda_disk_tier_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

KvConfig kv_config(const ModelConfig& c, KvType t) {
  KvConfig k;
  k.block_size = kBlock;
  k.k_type = k.v_type = t;
  k.budget_bytes = 0;
  KvConfig probe_cfg = k;
  probe_cfg.budget_bytes = 64ull << 20;
  PagedKvPool probe(KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}, probe_cfg);
  k.budget_bytes = 64 * probe.bytes_per_block();
  return k;
}

// One pool, store and cache (spilling to `dir` when given, RAM capacity 0: every
// released block is evicted at once).
struct Mini {
  Mini(Model& m, KvType t, const std::string& dir)
      : model(m),
        pool(KvGeometry{m.config().n_layers, m.config().n_kv_heads, m.config().head_dim}, kv_config(m.config(), t)),
        store(pool),
        cache(pool, "stories260K", [] {
          PrefixCacheConfig c;
          c.capacity_bytes = 0;
          return c;
        }()),
        threads(2) {
    if (!dir.empty()) {
      DiskTierConfig dc;
      dc.dir = dir;
      disk = std::make_unique<DiskTier>(dc);
      cache.set_disk_tier(disk.get());
    }
  }
  ~Mini() { cache.set_disk_tier(nullptr); }

  // Forwards tokens[from, to) of seq 0 as one batch; logits of every position when `all_logits`.
  void forward(const std::vector<int32_t>& tokens, int64_t from, int64_t to, bool all_logits) {
    EXPECT_TRUE(store.reserve(0, to).ok());
    batch.clear();
    for (int64_t i = from; i < to; ++i) batch.add(tokens[static_cast<size_t>(i)], i, 0, all_logits || i + 1 == to);
    model.forward(batch, store, threads, logits);
  }

  Model& model;
  PagedKvPool pool;
  PagedKvStore store;
  PrefixCache cache;
  std::unique_ptr<DiskTier> disk;
  ThreadPool threads;
  Batch batch;
  std::vector<float> logits;
};

std::vector<int32_t> prompt_of(int64_t n, int32_t vocab) {
  std::vector<int32_t> p;
  uint32_t x = 12345;
  while (static_cast<int64_t>(p.size()) < n) {
    x = x * 1103515245u + 12345u;
    p.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab - 3)) + 3);
  }
  return p;
}

class DiskTierModel : public ::testing::TestWithParam<KvType> {};

TEST_P(DiskTierModel, RestoredPrefixGivesLogitsBitIdenticalToRecompute) {
  const engine_test::Loaded l = engine_test::load(engine_test::kStories, false);
  Model& m = *l.model;
  const KvType type = GetParam();
  const int64_t prefix = 64, n = 101;  // 4 blocks restored, 37 tokens computed after them
  const auto prompt = prompt_of(n, static_cast<int32_t>(m.config().n_vocab));
  const size_t V = static_cast<size_t>(m.config().n_vocab);

  // Recompute: the prefix in one batch, then the suffix with every position's logits.
  std::vector<float> reference;
  {
    Mini r(m, type, "");
    r.forward(prompt, 0, prefix, false);
    r.forward(prompt, prefix, n, true);
    reference = r.logits;
    r.store.remove(0);
  }
  ASSERT_EQ(reference.size(), static_cast<size_t>(n - prefix) * V);

  TempDir dir;
  auto restore_and_compare = [&](Mini& e, const char* what) {
    CacheHit hit = e.cache.lookup(e.cache.key(), prompt);
    ASSERT_EQ(hit.cached_tokens, prefix) << what;
    e.store.adopt(0, std::move(hit.table));
    e.forward(prompt, prefix, n, true);
    ASSERT_EQ(e.logits.size(), reference.size());
    EXPECT_EQ(std::memcmp(e.logits.data(), reference.data(), reference.size() * sizeof(float)), 0)
        << what << ": logits differ from recomputing the prefix";
    e.store.remove(0);
    e.cache.check_invariants();
    e.disk->check_invariants();
  };
  {
    Mini e(m, type, dir.path);
    e.forward(prompt, 0, prefix, false);
    e.cache.insert(e.cache.key(), std::span<const int32_t>(prompt.data(), prefix), e.store.mutable_table(0), false);
    e.store.remove(0);  // RAM capacity 0: the 4 blocks are evicted, to disk
    ASSERT_EQ(e.cache.stats().cached_blocks, 0);
    ASSERT_EQ(e.disk->stats().blocks, 4);
    restore_and_compare(e, "same process");
    EXPECT_EQ(e.disk->stats().hit_tokens, prefix);
  }
  {
    Mini e(m, type, dir.path);  // a restart: nothing in RAM, the directory as it was left
    restore_and_compare(e, "after a restart");
    EXPECT_EQ(e.disk->stats().reads, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, DiskTierModel, ::testing::Values(KvType::F16, KvType::Q8, KvType::Q4),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

TEST(DiskTierEngine, ARestartedEngineServesTheRequestFromDiskWithTheSameText) {
  const engine_test::Loaded l = engine_test::load(engine_test::kStories, true);
  TempDir dir;
  const auto prompt = prompt_of(150, static_cast<int32_t>(l.model->config().n_vocab));
  Request r;
  r.prompt = prompt;
  r.max_tokens = 12;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  EngineConfig off = engine_test::engine_config(*l.model, 1, 64, false);
  const engine_test::RunResult cold = engine_test::run_all(*l.model, l.tokenizer.get(), off, {r});
  EngineConfig on = engine_test::engine_config(*l.model, 1, 64, true);
  on.disk.dir = dir.path;
  {
    Engine e(*l.model, l.tokenizer.get(), on);
    e.start();
    auto sink = std::make_shared<engine_test::RecordingSink>();
    ASSERT_TRUE(e.submit(r, sink).ok());
    ASSERT_TRUE(sink->wait_done());
    EXPECT_EQ(e.stats().cache.disk.blocks, 0);  // policy evict: nothing evicted yet
    e.stop();                                   // a clean stop writes the RAM tier
    EXPECT_EQ(e.stats().cache.disk.blocks, (150 + 12 - 1) / engine_test::kBlock);
  }
  Engine e(*l.model, l.tokenizer.get(), on);
  e.start();
  auto sink = std::make_shared<engine_test::RecordingSink>();
  ASSERT_TRUE(e.submit(r, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  const RequestResult res = sink->result();
  EXPECT_EQ(res.tokens, cold.results[0].tokens);
  EXPECT_EQ(res.cached_tokens, 144);  // 9 full blocks of the 150-token prompt
  EXPECT_EQ(e.stats().cache.disk.hit_tokens, 144);
  // Reset by tier: disk only leaves RAM as it was, then RAM.
  const Engine::PrefixCacheReset disk_reset = e.reset_prefix_cache(CacheTier::Disk);
  EXPECT_EQ(disk_reset.after.cache.disk.blocks, 0);
  EXPECT_EQ(disk_reset.after.cache.cached_blocks, disk_reset.before.cache.cached_blocks);
  EXPECT_GT(disk_reset.after.cache.cached_blocks, 0);
  EXPECT_EQ(e.reset_prefix_cache(CacheTier::Ram).after.cache.cached_blocks, 0);
  e.stop();
}

TEST(DiskTierEngine, SlidingWindowModelsAreRefusedWithOneLine) {
  SynthSpec s;
  s.arch = "gemma2";
  s.dim = 64;
  s.n_layers = 2;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.ffn_dim = 128;
  s.n_vocab = 256;
  s.ctx_len = 512;
  s.sliding_window = 32;
  const engine_test::Loaded l = engine_test::load_synth_spec(s, "gemma2_disk");
  TempDir dir;
  EngineConfig c = engine_test::engine_config(*l.model, 1, 64, true);
  c.disk.dir = dir.path;
  try {
    Engine e(*l.model, nullptr, c);
    FAIL() << "a windowed model was given a disk tier";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("--prompt-cache-dir: not supported for models whose sliding-window layers"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  c.kv.swa_full = true;  // one layer group: allowed
  Engine e(*l.model, nullptr, c);
}

}  // namespace
}  // namespace pagoda
