// A hybrid model (qwen35: Gated DeltaNet layers beside full attention; qwen35moe: the
// same trunk with routed experts and a gated shared expert, whose tokens are grouped by
// expert across the batch's sequences) through the Engine, every test on qwen35, qwen35moe
// and qwen35moe with Q8_0 weights: each
// sequence's recurrent state is its own, so requests run together, in chunked
// prefills interleaved with decodes, give token for token and logprob for logprob what
// each gives alone; a preempted sequence (its state dropped with its KV) is recomputed to
// the same output; the prefix cache works for them through recurrent-state snapshots (a
// cached K/V prefix alone would skip tokens the recurrent layers never saw), every reuse
// giving exactly what a cache-off engine gives; the budget books the states; and the
// forward pass refuses a batch that does not continue a sequence's state.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine_harness.h"
#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

using namespace engine_test;

// synth's tiny shape of `arch` (qwen35moe: 8 experts of width 64, 3 used, a shared expert
// of width 96); "qwen35moe_q8_0": with Q8_0 weights, so the routed and shared experts run
// the quantized grouped kernels on batches of every size the scheduler makes.
Loaded load_tiny(const std::string& name) {
  SynthSpec s;
  const bool q8 = name.ends_with("_q8_0");
  s.arch = q8 ? name.substr(0, name.size() - 5) : name;
  s = resolved_for_row(s, /*tiny_shape=*/true);
  if (q8) s.type = GgmlType::Q8_0;
  s.n_vocab = 256;
  s.ctx_len = 1024;
  s.seed = 11;
  return load_synth_spec(s, name + "_tiny");
}

class HybridEngine : public ::testing::TestWithParam<std::string> {
 protected:
  Loaded load_hybrid() const { return load_tiny(GetParam()); }
};

// KV budget in blocks of this model (only its full-attention layers have K/V).
uint64_t hybrid_bytes_for_blocks(const Model& m, int64_t n_blocks) {
  const ModelConfig& c = m.config();
  KvConfig k;
  k.block_size = kBlock;
  k.budget_bytes = 64ull << 20;
  PagedKvPool probe(KvGeometry{c.n_attention_layers(), c.n_kv_heads, c.head_dim}, k);
  return static_cast<uint64_t>(n_blocks) * probe.bytes_per_block();
}

uint64_t state_bytes(const Model& m) { return recurrent_state_bytes(m.config()); }

// n_blocks of K/V for the pool, plus the running states and n_snapshots snapshots (0: the
// prefix cache off) booked beside them in the budget.
EngineConfig hybrid_config(const Model& m, int parallel, int64_t n_blocks, int64_t max_batch_tokens,
                           int64_t n_snapshots = 0, int64_t snapshot_interval = 0) {
  EngineConfig c = engine_config(m, parallel, n_blocks, /*cache_on=*/n_snapshots > 0, max_batch_tokens);
  c.state_snapshot_bytes = static_cast<uint64_t>(n_snapshots) * state_bytes(m);
  c.state_snapshot_interval = snapshot_interval;
  c.kv.budget_bytes = hybrid_bytes_for_blocks(m, n_blocks) + static_cast<uint64_t>(parallel) * state_bytes(m) +
                      c.state_snapshot_bytes;
  return c;
}

TEST_P(HybridEngine, ConcurrentRequestsMatchEachAloneTokenForToken) {
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

TEST_P(HybridEngine, APreemptedSequenceIsRecomputedToTheSameOutput) {
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

// One request on a running engine, waited for.
RequestResult serve(Engine& e, const Request& r, std::vector<int32_t>* tokens = nullptr,
                    std::vector<float>* logprobs = nullptr) {
  auto sink = std::make_shared<RecordingSink>();
  const SubmitResult s = e.submit(r, sink);
  EXPECT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(sink->wait_done());
  EXPECT_EQ(sink->error(), "");
  if (tokens) *tokens = sink->tokens();
  if (logprobs) *logprobs = sink->logprobs();
  return sink->result();
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A conversation of three turns, each resending the whole history: from the second turn
// on, the history is served from the cache (its K/V and the state snapshot taken where
// the previous turn ended), and every turn gives token for token and logprob for logprob
// what a cache-off engine gives.
TEST_P(HybridEngine, EachTurnOfAConversationReusesTheHistoryAndMatchesCacheOff) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  Engine cached(*l.model, nullptr, hybrid_config(*l.model, 2, 256, 64, /*n_snapshots=*/8));
  Engine plain(*l.model, nullptr, hybrid_config(*l.model, 2, 256, 64));
  cached.start();
  plain.start();
  std::vector<int32_t> history;
  for (uint32_t turn = 0; turn < 3; ++turn) {
    history = concat(history, random_tokens(turn == 0 ? 200 : 12, V, 500 + turn));  // the user's message
    const int64_t n_prompt = static_cast<int64_t>(history.size());
    std::vector<int32_t> got, want;
    std::vector<float> got_lp, want_lp;
    const RequestResult r = serve(cached, greedy(history, 16), &got, &got_lp);
    serve(plain, greedy(history, 16), &want, &want_lp);
    EXPECT_EQ(got, want) << "turn " << turn;
    EXPECT_EQ(got_lp, want_lp) << "turn " << turn;
    if (turn == 0) {
      EXPECT_EQ(r.cached_tokens, 0);
    } else {
      // The history up to the previous answer's last computed token (the answer's final
      // token was sampled, never fed back).
      EXPECT_EQ(r.cached_tokens, n_prompt - 13) << "turn " << turn;
      EXPECT_GE(r.cached_tokens * 10, n_prompt * 9) << "turn " << turn << ": under 90% of the prompt reused";
    }
    history = concat(history, got);
  }
  const EngineStats st = cached.stats();
  EXPECT_TRUE(st.cache.enabled);
  EXPECT_EQ(st.cache.state_snapshots.restores, 2);
  EXPECT_GT(st.cache.state_snapshots.snapshots, 0);
  EXPECT_EQ(st.cache.state_snapshots.bytes,
            static_cast<uint64_t>(st.cache.state_snapshots.snapshots) * state_bytes(*l.model));
  EXPECT_LE(st.cache.state_snapshots.bytes, st.cache.state_snapshots.capacity_bytes);
  EXPECT_EQ(st.recurrent_state_bytes, 0u) << "a finished sequence's state outlived it";
  cached.stop();
  plain.stop();
}

// A restart on the same --prompt-cache-dir: the disk tier keeps full K/V blocks only, so
// the next turn resumes at the last block boundary the previous turn reached (its decode
// snapshot there went to disk at the clean stop), not from zero.
TEST_P(HybridEngine, AConversationResumesFromTheDiskTierAfterARestart) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const std::string dir = (std::filesystem::temp_directory_path() / ("pagoda_hybrid_disk_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  for (const DiskTierConfig::Policy policy : {DiskTierConfig::Policy::Evict, DiskTierConfig::Policy::All}) {
    std::filesystem::remove_all(dir);
    EngineConfig c = hybrid_config(*l.model, 1, 256, 64, /*n_snapshots=*/8);
    c.disk.dir = dir;
    c.disk.policy = policy;
    std::vector<int32_t> history = random_tokens(200, V, 900);
    std::vector<int32_t> answer;
    {
      Engine e(*l.model, nullptr, c);
      e.start();
      serve(e, greedy(history, 16), &answer);
      e.stop();
    }
    history = concat(concat(history, answer), random_tokens(12, V, 901));  // 228 tokens
    std::vector<int32_t> got, want;
    std::vector<float> got_lp, want_lp;
    Engine plain(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 64));
    plain.start();
    serve(plain, greedy(history, 16), &want, &want_lp);
    plain.stop();
    Engine e(*l.model, nullptr, c);
    e.start();
    const RequestResult r = serve(e, greedy(history, 16), &got, &got_lp);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got_lp, want_lp);
    // 215 tokens computed in turn 1 (200 + 16 - 1): K/V blocks and the decode snapshot at 208.
    EXPECT_EQ(r.cached_tokens, 208) << "policy " << static_cast<int>(policy);
    const EngineStats st = e.stats();
    EXPECT_EQ(st.cache.state_snapshots.disk_restores, 1);
    e.stop();
  }
  std::filesystem::remove_all(dir);
}

// The same prompt again (a retry, a regenerate): everything but its last token comes back.
TEST_P(HybridEngine, AResentPromptReusesAllButItsLastToken) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  Engine e(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 32, /*n_snapshots=*/4));
  e.start();
  const Request r = greedy(random_tokens(77, V, 41), 10);
  std::vector<int32_t> first, second;
  std::vector<float> first_lp, second_lp;
  EXPECT_EQ(serve(e, r, &first, &first_lp).cached_tokens, 0);
  EXPECT_EQ(serve(e, r, &second, &second_lp).cached_tokens, 76);
  EXPECT_EQ(second, first);
  EXPECT_EQ(second_lp, first_lp);
  // A reset empties both halves of the cache.
  const Engine::PrefixCacheReset reset = e.reset_prefix_cache();
  EXPECT_GT(reset.before.cache.state_snapshots.snapshots, 0);
  EXPECT_EQ(reset.after.cache.state_snapshots.snapshots, 0);
  EXPECT_EQ(reset.after.cache.state_snapshots.bytes, 0u);
  EXPECT_EQ(serve(e, r, &second).cached_tokens, 0);
  EXPECT_EQ(second, first);
  e.stop();
}

// A long shared document with different questions after it: the second request goes back
// to the last periodic snapshot inside the document (every 64 tokens here) and recomputes
// from there; the answers are the cache-off ones.
TEST_P(HybridEngine, ADocumentSharedByDifferentQuestionsRestoresTheLastPeriodicSnapshot) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const std::vector<int32_t> doc = random_tokens(300, V, 61);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 3; ++i) rs.push_back(greedy(concat(doc, random_tokens(9, V, 70 + i)), 12));
  const RunResult want = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 32), rs);
  const RunResult got = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 32, 8, 64), rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(got.tokens[i], want.tokens[i]) << "request " << i;
    EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << "request " << i;
  }
  EXPECT_EQ(got.results[0].cached_tokens, 0);
  EXPECT_EQ(got.results[1].cached_tokens, 256) << "the last multiple of 64 inside the 300-token document";
  EXPECT_EQ(got.results[2].cached_tokens, 256);
  EXPECT_EQ(got.stats.cache.state_snapshots.restores, 2);
}

// Requests arriving together with one document: the followers wait for the first one's
// prefill to reach the fork (a checkpoint at the last block boundary before it indexes
// the K/V and snapshots the state: a running sequence's partly written block is not
// shared) and take both, instead of all computing the document at once.
TEST_P(HybridEngine, FollowersOfASharedPrefillStartWhereTheLeaderForked) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const std::vector<int32_t> doc = random_tokens(150, V, 81);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 4; ++i) rs.push_back(greedy(concat(doc, random_tokens(5 + i, V, 90 + i)), 10));
  const RunResult want = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 512), rs);
  const RunResult got = run_all(*l.model, nullptr, hybrid_config(*l.model, 4, 256, 32, 8), rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(got.tokens[i], want.tokens[i]) << "request " << i;
    EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << "request " << i;
  }
  EXPECT_EQ(got.results[0].cached_tokens, 0);
  for (size_t i = 1; i < rs.size(); ++i) EXPECT_EQ(got.results[i].cached_tokens, 144) << "request " << i;
}

// Snapshots are capped in bytes (here two; each request leaves one short of its prompt's
// end and one at its sequence's end): many conversations evict the oldest, the bytes
// never pass the cap, and an evicted history is recomputed to the same answer.
TEST_P(HybridEngine, SnapshotsStayUnderTheirCapAndAnEvictedHistoryIsRecomputed) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 4; ++i) rs.push_back(greedy(random_tokens(40, V, 200 + i), 6));
  rs.push_back(rs[0]);  // its snapshots are gone by now (each request leaves two)
  rs.push_back(rs[0]);  // and back again
  const RunResult want = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 512), rs);
  const RunResult got = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 256, 512, 2), rs);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(got.tokens[i], want.tokens[i]) << "request " << i;
  EXPECT_EQ(got.results[4].cached_tokens, 0);
  EXPECT_EQ(got.results[5].cached_tokens, 39);
  const SnapshotStats& st = got.stats.cache.state_snapshots;
  EXPECT_EQ(st.capacity_bytes, 2 * state_bytes(*l.model));
  EXPECT_LE(st.bytes, st.capacity_bytes);
  EXPECT_GT(st.evictions, 0);
}

TEST_P(HybridEngine, APreemptedSequenceComesBackFromItsSnapshotToTheSameOutput) {
  const Loaded l = load_hybrid();
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 3; ++i) rs.push_back(greedy(random_tokens(40, V, 300 + i), 40));
  const RunResult ref = run_one_by_one(*l.model, nullptr, hybrid_config(*l.model, 1, 64, 512), rs);
  const RunResult tight = run_all(*l.model, nullptr, hybrid_config(*l.model, 3, 10, 16, 4), rs);
  EXPECT_GT(tight.stats.preemptions, 0);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(tight.tokens[i], ref.tokens[i]) << "request " << i;
    EXPECT_EQ(tight.logprobs[i], ref.logprobs[i]) << "request " << i;
  }
}

TEST_P(HybridEngine, TheBudgetBooksTheStatesAndRefusesOneTooSmallForThem) {
  const Loaded l = load_hybrid();
  EngineConfig c = hybrid_config(*l.model, 4, 64, 32, 6);
  {
    Engine e(*l.model, nullptr, c);
    const EngineStats st = e.stats();
    EXPECT_EQ(st.pool.bytes_budget, hybrid_bytes_for_blocks(*l.model, 64)) << "the pool got more than its share";
    EXPECT_EQ(st.cache.state_snapshots.capacity_bytes, 6 * state_bytes(*l.model));
  }
  {
    // The automatic interval: the tokens whose K/V is one snapshot's bytes, in blocks.
    EngineConfig a = c;
    a.state_snapshot_interval = -1;
    Engine e(*l.model, nullptr, a);
    const double per_token = static_cast<double>(hybrid_bytes_for_blocks(*l.model, 1)) / kBlock;
    const int64_t want = std::max<int64_t>(
        kBlock, std::llround(static_cast<double>(state_bytes(*l.model)) / per_token / kBlock) * kBlock);
    EXPECT_EQ(e.config().state_snapshot_interval, want);
    EXPECT_GT(want, kBlock);
  }
  c.kv.budget_bytes = 4 * state_bytes(*l.model) + c.state_snapshot_bytes;  // nothing left for K/V
  try {
    Engine e(*l.model, nullptr, c);
    ADD_FAILURE() << "a budget without room for K/V was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("running recurrent states take"), std::string::npos) << err.what();
  }
  // The default share: a quarter of the budget.
  c.state_snapshot_bytes = 0;
  c.kv.budget_bytes = 64ull << 20;
  Engine e(*l.model, nullptr, c);
  EXPECT_EQ(e.stats().cache.state_snapshots.capacity_bytes, (64ull << 20) / 4);
}

TEST_P(HybridEngine, AForwardThatDoesNotContinueTheRecurrentStateIsRefused) {
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

INSTANTIATE_TEST_SUITE_P(Archs, HybridEngine, ::testing::Values("qwen35", "qwen35moe", "qwen35moe_q8_0"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace pagoda
