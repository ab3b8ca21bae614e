// Sliding-window layers paged apart (kv/kv_layer_groups.h) on a synthetic Gemma 3 (five
// local layers with a 40-token window, then a global one), through Model::forward and the
// engine: the windowed pool gives bit-identical tokens and log-probabilities to full-size
// windows (--kv-swa-full, the window only a mask), holds window-sized KV on the local
// layers however long the sequence grows, and the prefix cache reuses a conversation's
// turn exactly where the window it needs was kept, and nowhere it was not.
#include "engine_harness.h"

#include "kv/kv_layer_groups.h"

namespace pagoda {
namespace {

using namespace engine_test;

constexpr int64_t kWindow = 40;

Loaded load_gemma3() {
  SynthSpec s;
  s.arch = "gemma3";
  s.dim = 64;
  s.n_layers = 6;  // layers 0-4 local, layer 5 global
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_dim = 128;
  s.n_vocab = 256;
  s.ctx_len = 4096;
  s.sliding_window = kWindow;
  s.seed = 11;
  return load_synth_spec(s, "gemma3_swa");
}

TEST(SlidingWindowKv, TheModelPagesItsLocalLayersApart) {
  Loaded l = load_gemma3();
  const KvLayerGroups g = KvLayerGroups::for_windows(l.model->config().layer_windows());
  ASSERT_EQ(g.n_groups(), 6);  // one global layer: pages of one layer, five local groups
  EXPECT_EQ(g.page_layers, 1);
  EXPECT_EQ(g.group[5], 0);
  for (int l5 = 0; l5 < 5; ++l5) EXPECT_EQ(g.group[static_cast<size_t>(l5)], l5 + 1);
  EXPECT_EQ(KvLayerGroups::for_windows(l.model->config().layer_windows(), /*swa_full=*/true).n_groups(), 1);
}

// Forward a 600-token sequence in chunks of 1-37 tokens through both layouts: every
// step's logits are bit-identical, and the windowed pool's local groups never hold more
// than the window plus two blocks, while group 0 holds the whole sequence.
TEST(SlidingWindowKv, WindowedPoolMatchesFullSizeWindowsBitForBitAndStaysWindowSized) {
  Loaded l = load_gemma3();
  Model& m = *l.model;
  const ModelConfig& c = m.config();
  KvConfig kc;
  kc.block_size = kBlock;
  kc.budget_bytes = 64ull << 20;
  const KvLayerGroups full = KvLayerGroups::uniform(c.n_layers);
  const KvLayerGroups win = KvLayerGroups::for_windows(c.layer_windows());
  PagedKvPool pool_full(KvGeometry{full.page_layers, c.n_kv_heads, c.head_dim, 1}, kc);
  PagedKvPool pool_win(KvGeometry{win.page_layers, c.n_kv_heads, c.head_dim, win.n_groups()}, kc);
  PagedKvStore store_full(pool_full, full), store_win(pool_win, win);
  ThreadPool threads(2);
  const std::vector<int32_t> tokens = random_tokens(600, static_cast<int32_t>(c.n_vocab), 5);
  std::vector<float> lf, lw;
  int64_t pos = 0, chunk = 1;
  const int64_t max_local_blocks = (kWindow + kBlock - 1) / kBlock + 2;
  while (pos < static_cast<int64_t>(tokens.size())) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - pos);
    chunk = chunk % 37 + 7;
    Batch b;
    for (int64_t i = 0; i < n; ++i) b.add(tokens[static_cast<size_t>(pos + i)], pos + i, 0, i == n - 1);
    ASSERT_TRUE(store_full.reserve(0, pos + n).ok());
    ASSERT_TRUE(store_win.reserve(0, pos + n).ok());
    m.forward(b, store_full, threads, lf);
    m.forward(b, store_win, threads, lw);
    ASSERT_EQ(lf, lw) << "logits differ after position " << pos + n - 1;
    pos += n;
    store_win.release_out_of_window(0, pos);
    const PoolStats s = pool_win.stats();
    ASSERT_EQ(s.blocks_live_by_group[0], pool_win.blocks_for_tokens(pos));
    for (int32_t g = 1; g < win.n_groups(); ++g)
      ASSERT_LE(s.blocks_live_by_group[static_cast<size_t>(g)], max_local_blocks) << "group " << g << " at " << pos;
    store_win.check_tables(0);
    pool_win.check_invariants();
  }
  // 600 tokens: 38 blocks per layer with full-size windows, 38 + 5 × (at most 5) pages
  // of one layer windowed.
  EXPECT_EQ(pool_full.stats().bytes_in_use, 38 * pool_full.bytes_per_block());
  EXPECT_LE(pool_win.stats().bytes_in_use, (38 + 5 * max_local_blocks) * pool_win.bytes_per_block());
  // A window cannot be rewound into: truncating below what it released is refused.
  EXPECT_THROW(store_win.truncate(0, 100), Error);
  store_win.truncate(0, 590);  // inside the window: fine
  store_win.check_tables(0);
}

// gpt-oss: its even layers windowed (here 24 positions), every layer with attention
// sinks, through the same two layouts: bit-identical logits over 300 tokens in chunks of
// 1-37 (the sinks reach the windowed tiles, decode rows and the full layers alike), local
// groups bounded by the window.
TEST(SlidingWindowKv, GptOssWindowsAndSinksPageApartBitForBit) {
  SynthSpec spec;
  spec.arch = "gpt-oss";
  spec.dim = 64, spec.n_layers = 4, spec.n_heads = 4, spec.n_kv_heads = 2, spec.ffn_dim = 64;
  spec.n_expert = 4, spec.n_expert_used = 2, spec.expert_ffn_dim = 64;
  spec.n_vocab = 256, spec.ctx_len = 4096, spec.sliding_window = 24, spec.seed = 5;
  Loaded l = load_synth_spec(spec, "gptoss_swa");
  Model& m = *l.model;
  const ModelConfig& c = m.config();
  KvConfig kc;
  kc.block_size = kBlock;
  kc.budget_bytes = 64ull << 20;
  const KvLayerGroups full = KvLayerGroups::uniform(c.n_layers);
  const KvLayerGroups win = KvLayerGroups::for_windows(c.layer_windows());
  ASSERT_EQ(win.n_groups(), 2);  // layers 1, 3 global; 0, 2 one local group
  PagedKvPool pool_full(KvGeometry{full.page_layers, c.n_kv_heads, c.head_dim, 1}, kc);
  PagedKvPool pool_win(KvGeometry{win.page_layers, c.n_kv_heads, c.head_dim, win.n_groups()}, kc);
  PagedKvStore store_full(pool_full, full), store_win(pool_win, win);
  ThreadPool threads(2);
  const std::vector<int32_t> tokens = random_tokens(300, static_cast<int32_t>(c.n_vocab), 9);
  std::vector<float> lf, lw;
  int64_t pos = 0, chunk = 1;
  const int64_t max_local_blocks = (24 + kBlock - 1) / kBlock + 2;
  while (pos < static_cast<int64_t>(tokens.size())) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - pos);
    chunk = chunk % 37 + 7;
    Batch b;
    for (int64_t i = 0; i < n; ++i) b.add(tokens[static_cast<size_t>(pos + i)], pos + i, 0, i == n - 1);
    ASSERT_TRUE(store_full.reserve(0, pos + n).ok());
    ASSERT_TRUE(store_win.reserve(0, pos + n).ok());
    m.forward(b, store_full, threads, lf);
    m.forward(b, store_win, threads, lw);
    ASSERT_EQ(lf, lw) << "logits differ after position " << pos + n - 1;
    pos += n;
    store_win.release_out_of_window(0, pos);
    ASSERT_LE(pool_win.stats().blocks_live_by_group[1], max_local_blocks) << "at " << pos;
    pool_win.check_invariants();
  }
}

// Several prompts decoded together, then a three-turn conversation and a request
// sharing only an early part of it: with windows and the cache on, the tokens and
// log-probabilities equal those of full-size windows with the cache off.
TEST(SlidingWindowKv, EngineOutputIsIdenticalAndTurnsResumeAtTheirWindow) {
  Loaded l = load_gemma3();
  Model& m = *l.model;
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  std::vector<Request> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(greedy(random_tokens(90 + 41 * i, V, 70 + i), 50 + 10 * i));
  const RunResult ref = run_all(m, nullptr, windowed_config(m, true, false), batch);
  const RunResult win = run_all(m, nullptr, windowed_config(m, false, true), batch);
  EXPECT_EQ(win.tokens, ref.tokens);
  EXPECT_EQ(win.logprobs, ref.logprobs);

  // A conversation: each turn re-sends the history and adds a question.
  auto converse = [&](const EngineConfig& cfg, std::vector<int64_t>* cached, EngineStats* stats) {
    Engine e(m, nullptr, cfg);
    e.start();
    std::vector<std::vector<int32_t>> outs;
    std::vector<int32_t> history = random_tokens(130, V, 900);
    for (int turn = 0; turn < 3; ++turn) {
      auto sink = std::make_shared<RecordingSink>();
      EXPECT_TRUE(e.submit(greedy(history, 60), sink).ok());
      EXPECT_TRUE(sink->wait_done());
      outs.push_back(sink->tokens());
      if (cached) cached->push_back(sink->result().cached_tokens);
      history.insert(history.end(), outs.back().begin(), outs.back().end());
      const std::vector<int32_t> q = random_tokens(17 + turn, V, 950 + turn);
      history.insert(history.end(), q.begin(), q.end());
    }
    // Shares the first 100 tokens of turn 1 only: no window was kept there.
    auto sink = std::make_shared<RecordingSink>();
    std::vector<int32_t> early(history.begin(), history.begin() + 100);
    const std::vector<int32_t> tail = random_tokens(30, V, 990);
    early.insert(early.end(), tail.begin(), tail.end());
    EXPECT_TRUE(e.submit(greedy(early, 20), sink).ok());
    EXPECT_TRUE(sink->wait_done());
    outs.push_back(sink->tokens());
    if (cached) cached->push_back(sink->result().cached_tokens);
    e.stop();
    if (stats) *stats = e.stats();
    return outs;
  };
  std::vector<int64_t> cached;
  EngineStats st;
  const auto conv_ref = converse(windowed_config(m, true, false), nullptr, nullptr);
  const auto conv_win = converse(windowed_config(m, false, true), &cached, &st);
  EXPECT_EQ(conv_win, conv_ref);
  // Turn k + 1 resumes where turn k stopped computing (its prompt and 59 of its 60 tokens:
  // the last sampled token was never forwarded).
  ASSERT_EQ(cached.size(), 4u);
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 130 + 59);
  EXPECT_EQ(cached[2], 130 + 60 + 17 + 59);
  // The early-prefix request matched 100 tokens of group 0, but no window was kept
  // there: it computes its prompt (the hit falls back to 0, correctly).
  EXPECT_EQ(cached[3], 0);
  EXPECT_GE(st.cache.window_limited_hits, 1);
  EXPECT_GT(st.cache.companion_blocks, 0);
  // Per-group ledger: every evictable block is the cache's, in some group.
  int64_t evictable = 0, cached_blocks = 0;
  for (size_t g = 0; g < st.pool.blocks_evictable_by_group.size(); ++g) {
    evictable += st.pool.blocks_evictable_by_group[g];
    cached_blocks += st.pool.blocks_cached_by_group[g];
    EXPECT_EQ(st.pool.blocks_live_by_group[g], 0) << g;
  }
  EXPECT_EQ(evictable, st.pool.blocks_evictable);
  EXPECT_EQ(cached_blocks, st.cache.cached_blocks);
}

// A burst of four requests on one 200-token document, each with a 60-token question
// (longer than the 40-token window plus a block): the first one's prefill stops at the
// end of the document's last block and indexes it with the window it holds there, so the
// other three borrow the whole document and compute only their questions. (Waiting for
// the first prompt's end instead, the window at 200 was gone by then: 4 × 260 tokens were
// computed, as with the cache off.) Tokens and log-probabilities equal full-size windows
// with the cache off.
TEST(SlidingWindowKv, ABurstOnADocumentBorrowsItsWindowFromTheFirstPrefill) {
  Loaded l = load_gemma3();
  Model& m = *l.model;
  const int32_t V = static_cast<int32_t>(m.config().n_vocab);
  const std::vector<int32_t> doc = random_tokens(200, V, 7);
  std::vector<Request> rs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = doc;
    const std::vector<int32_t> q = random_tokens(60, V, 500 + static_cast<uint32_t>(i));
    p.insert(p.end(), q.begin(), q.end());
    rs.push_back(greedy(p, 8));
  }
  EngineConfig ref_cfg = windowed_config(m, true, false), win_cfg = windowed_config(m, false, true);
  ref_cfg.max_batch_tokens = win_cfg.max_batch_tokens = 64;
  const RunResult ref = run_all(m, nullptr, ref_cfg, rs);
  const RunResult win = run_all(m, nullptr, win_cfg, rs);
  EXPECT_EQ(win.tokens, ref.tokens);
  for (size_t i = 0; i < rs.size(); ++i) {
    ASSERT_EQ(win.logprobs[i].size(), ref.logprobs[i].size());
    for (size_t j = 0; j < win.logprobs[i].size(); ++j)
      EXPECT_NEAR(win.logprobs[i][j], ref.logprobs[i][j], 1e-5) << i << " " << j;
    EXPECT_EQ(win.results[i].cached_tokens, i == 0 ? 0 : 200) << i;
  }
  EXPECT_EQ(ref.stats.tokens_prefilled, 4 * 260);
  EXPECT_EQ(win.stats.tokens_prefilled, 200 + 4 * 60);
}

// A pool too small for the full-size layout of a long prompt still serves it windowed?
// No: admission reserves every group for the whole prompt (the saving comes as the
// prompt is computed), so the budget check counts every group; a prompt that cannot fit
// is refused with both numbers, the same as without windows.
TEST(SlidingWindowKv, APromptThatCannotFitIsRefusedWithTheGroupCount) {
  Loaded l = load_gemma3();
  Model& m = *l.model;
  EngineConfig cfg = windowed_config(m, false, true);
  const ModelConfig& c = m.config();
  KvConfig kc = cfg.kv;
  const KvLayerGroups win = KvLayerGroups::for_windows(c.layer_windows());
  PagedKvPool probe(KvGeometry{win.page_layers, c.n_kv_heads, c.head_dim, win.n_groups()}, kc);
  cfg.kv.budget_bytes = 60 * probe.bytes_per_block();  // 60 pages: 10 blocks per group
  Engine e(m, nullptr, cfg);
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  const SubmitResult r = e.submit(greedy(random_tokens(200, 256, 3), 4), sink);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("6 layer groups"), std::string::npos) << r.message;
  auto ok = std::make_shared<RecordingSink>();
  EXPECT_TRUE(e.submit(greedy(random_tokens(100, 256, 4), 30), ok).ok());
  EXPECT_TRUE(ok->wait_done());
  EXPECT_EQ(ok->error(), "");
  e.stop();
}

}  // namespace
}  // namespace pagoda
