// Gemma 4 through the engine, on synth's tiny gemma4 (every feature: local and global
// layers of different head shapes paged apart, three shared-KV layers, per-layer
// embeddings, experts in two layers) with a 40-token window: requests decoded together
// equal each alone, token for token and log-probability for log-probability; the prefix
// cache's reuse (a conversation's turns, a burst on one document) equals the cache off;
// paged windows equal --kv-swa-full; and the pool books the shared layers' K/V once.
#include "engine_harness.h"

#include "kv/kv_layer_groups.h"

namespace pagoda {
namespace {

using namespace engine_test;

constexpr int64_t kWindow = 40;

Loaded load_gemma4() {
  SynthSpec s = *synth_shape("tiny");
  s.arch = "gemma4";
  s = resolved_for_row(s, /*tiny_shape=*/true);
  s.sliding_window = kWindow;
  s.n_vocab = 256;
  s.ctx_len = 4096;
  s.seed = 13;
  return load_synth_spec(s, "gemma4_engine");
}

TEST(Gemma4Engine, ThePoolHoldsOnlyTheLayersWithTheirOwnKv) {
  Loaded l = load_gemma4();
  const ModelConfig& c = l.model->config();
  // Layers 0, 1 (local: 2 heads of 32) and 2 (global: 1 head of 64) write K/V; 3-5 reuse.
  const KvLayerGroups g = KvLayerGroups::for_layers(c.kv_layer_shapes());
  EXPECT_EQ(g.n_layers(), 3);
  EXPECT_EQ(g.n_groups(), 3);  // group 0: layer 2; the local page holds one 2 x 32 slot
  EngineConfig cfg = windowed_config(*l.model, false, true);
  Engine e(*l.model, nullptr, cfg);
  // f16 K and V, block 16: per token a page is 2 x 1 x 64 x 2 B (the global slot), and
  // every group's page is that size.
  EXPECT_EQ(e.stats().pool.bytes_per_block, 16u * 2 * 64 * 2);
  EngineConfig full = windowed_config(*l.model, true, true);
  Engine f(*l.model, nullptr, full);
  // One group of the three layers: (2 x 2 x 32 + 2 x 2 x 32 + 2 x 1 x 64) x 2 B a token.
  EXPECT_EQ(f.stats().pool.bytes_per_block, 16u * (128 + 128 + 128) * 2);
}

TEST(Gemma4Engine, RequestsTogetherEqualEachAloneAndPagedWindowsEqualFullOnes) {
  Loaded l = load_gemma4();
  Model& m = *l.model;
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  std::vector<Request> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(greedy(random_tokens(70 + 37 * i, V, 40 + i), 45 + 9 * i));
  const RunResult alone = run_one_by_one(m, nullptr, windowed_config(m, false, false), rs);
  const RunResult together = run_all(m, nullptr, windowed_config(m, false, false), rs);
  const RunResult full = run_all(m, nullptr, windowed_config(m, true, false), rs);
  EXPECT_EQ(together.tokens, alone.tokens);
  EXPECT_EQ(together.logprobs, alone.logprobs);
  EXPECT_EQ(full.tokens, alone.tokens);
  EXPECT_EQ(full.logprobs, alone.logprobs);
  for (const auto& t : alone.tokens) EXPECT_GE(t.size(), 45u);
}

// A three-turn conversation and a burst of requests on one document: with the cache on,
// each turn resumes where the last stopped and the burst borrows the document, and every
// token and log-probability equals the cache off.
TEST(Gemma4Engine, PrefixCacheReuseEqualsTheCacheOff) {
  Loaded l = load_gemma4();
  Model& m = *l.model;
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  auto converse = [&](const EngineConfig& cfg, std::vector<int64_t>* cached) {
    Engine e(m, nullptr, cfg);
    e.start();
    std::vector<std::vector<int32_t>> outs;
    std::vector<std::vector<float>> lps;
    std::vector<int32_t> history = random_tokens(110, V, 900);
    for (int turn = 0; turn < 3; ++turn) {
      auto sink = std::make_shared<RecordingSink>();
      EXPECT_TRUE(e.submit(greedy(history, 50), sink).ok());
      EXPECT_TRUE(sink->wait_done());
      outs.push_back(sink->tokens());
      lps.push_back(sink->logprobs());
      if (cached) cached->push_back(sink->result().cached_tokens);
      history.insert(history.end(), outs.back().begin(), outs.back().end());
      const std::vector<int32_t> q = random_tokens(19 + turn, V, 950 + turn);
      history.insert(history.end(), q.begin(), q.end());
    }
    e.stop();
    return std::make_pair(outs, lps);
  };
  std::vector<int64_t> cached;
  const auto off = converse(windowed_config(m, false, false), nullptr);
  const auto on = converse(windowed_config(m, false, true), &cached);
  EXPECT_EQ(on.first, off.first);
  EXPECT_EQ(on.second, off.second);
  ASSERT_EQ(cached.size(), 3u);
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 110 + 49);  // the last sampled token was never forwarded
  EXPECT_EQ(cached[2], 110 + 50 + 19 + 49);

  // The burst: four 60-token questions on one 200-token document.
  const std::vector<int32_t> doc = random_tokens(200, V, 7);
  std::vector<Request> rs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = doc;
    const std::vector<int32_t> q = random_tokens(60, V, 500 + static_cast<uint32_t>(i));
    p.insert(p.end(), q.begin(), q.end());
    rs.push_back(greedy(p, 8));
  }
  EngineConfig ref_cfg = windowed_config(m, false, false), cache_cfg = windowed_config(m, false, true);
  ref_cfg.max_batch_tokens = cache_cfg.max_batch_tokens = 64;
  const RunResult ref = run_all(m, nullptr, ref_cfg, rs);
  const RunResult hit = run_all(m, nullptr, cache_cfg, rs);
  EXPECT_EQ(hit.tokens, ref.tokens);
  for (size_t i = 0; i < rs.size(); ++i) {
    ASSERT_EQ(hit.logprobs[i].size(), ref.logprobs[i].size());
    for (size_t j = 0; j < hit.logprobs[i].size(); ++j)
      EXPECT_NEAR(hit.logprobs[i][j], ref.logprobs[i][j], 1e-5) << i << " " << j;
    EXPECT_EQ(hit.results[i].cached_tokens, i == 0 ? 0 : 200) << i;
  }
  EXPECT_EQ(hit.stats.tokens_prefilled, 200 + 4 * 60);
  // The cache's byte figures are pages of the layers with their own K/V, counted once.
  EXPECT_EQ(hit.stats.pool.bytes_per_block, 16u * 2 * 64 * 2);
  EXPECT_EQ(hit.stats.pool.bytes_in_use,
            static_cast<uint64_t>(hit.stats.pool.blocks_evictable) * hit.stats.pool.bytes_per_block);
}

}  // namespace
}  // namespace pagoda
