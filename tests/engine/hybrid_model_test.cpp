// A hybrid model (qwen35: Gated DeltaNet layers beside full attention) through the Engine:
// each sequence's recurrent state is its own, so requests run together, in chunked
// prefills interleaved with decodes, give token for token and logprob for logprob what
// each gives alone; a preempted sequence (its state dropped with its KV) is recomputed to
// the same output; the prefix cache is off for these models (a cached K/V prefix without
// the recurrent state at that position would skip tokens the recurrent layers never saw);
// and the forward pass refuses a batch that does not continue a sequence's state.
#include <gtest/gtest.h>

#include "engine_harness.h"
#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

using namespace engine_test;

Loaded load_hybrid() {
  SynthSpec s;
  s.arch = "qwen35";
  s = resolved_for_row(s, /*tiny_shape=*/true);
  s.n_vocab = 256;
  s.ctx_len = 1024;
  s.seed = 11;
  return load_synth_spec(s, "qwen35_tiny");
}

// KV budget in blocks of this model (only its full-attention layers have K/V).
uint64_t hybrid_bytes_for_blocks(const Model& m, int64_t n_blocks) {
  const ModelConfig& c = m.config();
  KvConfig k;
  k.block_size = kBlock;
  k.budget_bytes = 64ull << 20;
  PagedKvPool probe(KvGeometry{c.n_attention_layers(), c.n_kv_heads, c.head_dim}, k);
  return static_cast<uint64_t>(n_blocks) * probe.bytes_per_block();
}

EngineConfig hybrid_config(const Model& m, int parallel, int64_t n_blocks, int64_t max_batch_tokens) {
  EngineConfig c = engine_config(m, parallel, n_blocks, /*cache_on=*/true, max_batch_tokens);
  c.kv.budget_bytes = hybrid_bytes_for_blocks(m, n_blocks);
  return c;
}

Request greedy(std::vector<int32_t> prompt, int64_t n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.logprobs = true;
  return r;
}

TEST(HybridEngine, ConcurrentRequestsMatchEachAloneTokenForToken) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 5; ++i) rs.push_back(greedy(random_tokens(20 + 13 * i, V, 100 + i), 24));
  rs.push_back(rs[0]);  // the same prompt twice: no state may leak between them
  // Alone: one request per engine step sequence.
  const RunResult alone = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 512), rs);
  // Together: 4 at once, prefill in chunks of 8 tokens mixed with the others' decodes.
  const RunResult together = run_all(*l.model, nullptr, hybrid_config(*l.model, 4, 256, 8), rs);
  ASSERT_EQ(alone.tokens.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(together.tokens[i], alone.tokens[i]) << "request " << i;
    EXPECT_EQ(together.logprobs[i], alone.logprobs[i]) << "request " << i;
    EXPECT_EQ(alone.results[i].cached_tokens, 0) << "a hybrid model served a prefix from the cache";
  }
  EXPECT_EQ(together.tokens[5], together.tokens[0]);
  EXPECT_FALSE(together.stats.cache.enabled);
  EXPECT_EQ(together.stats.cache.cached_blocks, 0);
}

TEST(HybridEngine, APreemptedSequenceIsRecomputedToTheSameOutput) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 3; ++i) rs.push_back(greedy(random_tokens(40, V, 300 + i), 40));
  const RunResult ref = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 64, 512), rs);
  // 3 sequences of up to 80 tokens need 15 blocks of 16: 10 forces preemptions.
  const RunResult tight = run_all(*l.model, nullptr, hybrid_config(*l.model, 3, 10, 16), rs);
  EXPECT_GT(tight.stats.preemptions, 0);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(tight.tokens[i], ref.tokens[i]) << "request " << i;
}

TEST(HybridEngine, AForwardThatDoesNotContinueTheRecurrentStateIsRefused) {
  const Loaded l = load_hybrid();
  Model& m = *l.model;
  const ModelConfig& c = m.config();
  KvConfig k;
  k.block_size = kBlock;
  k.budget_bytes = hybrid_bytes_for_blocks(m, 32);
  PagedKvPool pool(KvGeometry{c.n_attention_layers(), c.n_kv_heads, c.head_dim}, k);
  PagedKvStore store(pool);
  ThreadPool threads(1);
  std::vector<float> logits;
  Batch b;
  b.add(5, 0, 0, true);
  // Without the recurrent state configured: a clear check, not garbage.
  ASSERT_TRUE(store.reserve(0, 8).ok());
  EXPECT_DEATH(m.forward(b, store, threads, logits), "recurrent state configured");
  configure_recurrent_states(c, store.recurrent_states());
  m.forward(b, store, threads, logits);
  EXPECT_EQ(store.recurrent_states().pos(0), 1);
  b.clear();
  b.add(6, 2, 0, true);  // skips position 1
  EXPECT_THROW(m.forward(b, store, threads, logits), Error);
  b.clear();
  b.add(6, 1, 0, true);
  b.add(7, 3, 0, true);  // not consecutive
  EXPECT_THROW(m.forward(b, store, threads, logits), Error);
  EXPECT_EQ(store.recurrent_states().pos(0), 1) << "a refused batch changed the state";
  // The state's memory is exact and goes with the sequence.
  EXPECT_EQ(store.recurrent_states().bytes(),
            static_cast<uint64_t>(c.n_recurrent_layers() * c.recurrent_state_floats()) * sizeof(float));
  EXPECT_THROW(store.truncate(0, 0), Error) << "a recurrent state was rewound";
  store.remove(0);
  EXPECT_EQ(store.recurrent_states().bytes(), 0u);
}

}  // namespace
}  // namespace pagoda
