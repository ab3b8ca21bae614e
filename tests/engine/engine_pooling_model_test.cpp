// Embedding / reranking requests in the engine (Request::pooling): submit_group counts as
// one request towards the queue limit, validation (pooling none, rank without a head, an
// input of exactly the context), chunked prefill against one chunk, pooling requests mixed
// with generation under a KV budget tight enough to preempt (generation keeps its exact
// tokens, embeddings their values), and Mean / Cls / Last against the forward's own hidden
// states (the numpy comparison is tests/server/embeddings_reference_test.py).
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/engine_harness.h"

namespace pagoda::engine_test {
namespace {

// Records every request of a group: results by id, errors, and waits for n of them.
class GroupSink final : public RequestSink {
 public:
  void on_token(const TokenEvent&) override { ADD_FAILURE() << "a pooling request streamed a token"; }
  void on_finish(const RequestResult& r) override {
    std::lock_guard<std::mutex> lk(mu_);
    results_[r.request_id] = r;
    cv_.notify_all();
  }
  void on_error(uint64_t id, const std::string& message) override {
    std::lock_guard<std::mutex> lk(mu_);
    errors_[id] = message;
    cv_.notify_all();
  }
  bool wait(size_t n) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, 120s, [&] { return results_.size() + errors_.size() >= n; });
  }
  std::map<uint64_t, RequestResult> results() const {
    std::lock_guard<std::mutex> lk(mu_);
    return results_;
  }
  size_t errors() const {
    std::lock_guard<std::mutex> lk(mu_);
    return errors_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, RequestResult> results_;
  std::map<uint64_t, std::string> errors_;
};

Request pooled(std::vector<int32_t> prompt, Pooling p) {
  Request r;
  r.prompt = std::move(prompt);
  r.pooling = p;
  return r;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 1 + static_cast<int32_t>((seed * 31 + i * 17) % 250);
  return t;
}

// The engine's embedding of each prompt, submitted as one group.
std::vector<std::vector<float>> embed_all(Engine& e, const std::vector<std::vector<int32_t>>& prompts, Pooling p) {
  std::vector<Request> rs;
  for (const auto& t : prompts) rs.push_back(pooled(t, p));
  auto sink = std::make_shared<GroupSink>();
  const SubmitResult sr = e.submit_group(std::move(rs), sink);
  EXPECT_TRUE(sr.ok()) << sr.message;
  EXPECT_TRUE(sink->wait(prompts.size()));
  EXPECT_EQ(sink->errors(), 0u);
  std::vector<std::vector<float>> out;
  for (auto& [id, r] : sink->results()) {
    EXPECT_EQ(r.finish, FinishReason::Stop);
    EXPECT_EQ(r.generated_tokens, 0);
    EXPECT_TRUE(r.tokens.empty());
    out.push_back(r.embedding);
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(EnginePooling, GroupCountsAsOneRequestTowardsTheQueueLimit) {
  Loaded l = load_synth();
  EngineConfig c = engine_config(*l.model, /*parallel=*/1, 64, true);
  c.max_queue = 0;  // room for exactly one request
  Engine e(*l.model, nullptr, c);
  auto sink = std::make_shared<GroupSink>();
  std::vector<Request> five;
  for (int i = 0; i < 5; ++i) five.push_back(pooled(prompt_of(10 + i, i), Pooling::Last));
  const SubmitResult group = e.submit_group(std::move(five), sink);  // before start(): all wait
  ASSERT_TRUE(group.ok()) << group.message;
  auto other = std::make_shared<RecordingSink>();
  EXPECT_EQ(e.submit(pooled(prompt_of(4, 9), Pooling::Last), other).status, SubmitResult::Status::Busy);
  e.start();
  ASSERT_TRUE(sink->wait(5));
  const auto results = sink->results();
  ASSERT_EQ(results.size(), 5u);
  uint64_t id = group.request_id;
  for (const auto& [rid, r] : results) {
    EXPECT_EQ(rid, id++);  // consecutive ids in submission order
    EXPECT_EQ(r.prompt_tokens, 10 + static_cast<int64_t>(rid - group.request_id));
    EXPECT_EQ(r.embedding.size(), static_cast<size_t>(l.model->config().dim));
  }
  // The group has finished: the one slot is free again.
  for (int i = 0; i < 200 && e.stats().in_flight > 0; ++i) std::this_thread::sleep_for(5ms);
  const SubmitResult again = e.submit(pooled(prompt_of(4, 9), Pooling::Last), other);
  EXPECT_TRUE(again.ok()) << again.message;
  EXPECT_TRUE(other->wait_done());
}

TEST(EnginePooling, ValidatesPoolingAndLength) {
  Loaded l = load_synth();
  EngineConfig c = engine_config(*l.model, 2, 64, true);
  c.ctx_size = 40;
  Engine e(*l.model, nullptr, c);
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  SubmitResult none = e.submit(pooled(prompt_of(4, 1), Pooling::None), sink);
  EXPECT_EQ(none.status, SubmitResult::Status::Invalid);
  EXPECT_NE(none.message.find("none"), std::string::npos) << none.message;
  SubmitResult rank = e.submit(pooled(prompt_of(4, 1), Pooling::Rank), sink);
  EXPECT_EQ(rank.status, SubmitResult::Status::Invalid);
  EXPECT_NE(rank.message.find("cls.output.weight"), std::string::npos) << rank.message;
  SubmitResult too_long = e.submit(pooled(prompt_of(41, 1), Pooling::Mean), sink);
  EXPECT_EQ(too_long.status, SubmitResult::Status::Invalid);
  EXPECT_EQ(too_long.field, "prompt");
  std::vector<Request> group;
  group.push_back(pooled(prompt_of(3, 1), Pooling::Mean));
  group.push_back(pooled({1, 300}, Pooling::Mean));  // 300 is outside the 256-token vocabulary
  SubmitResult bad = e.submit_group(std::move(group), sink);
  EXPECT_EQ(bad.status, SubmitResult::Status::Invalid);
  EXPECT_EQ(bad.message.rfind("input 1: ", 0), 0u) << bad.message;
  // Nothing is generated, so an input may fill the whole context (a generation prompt
  // must leave one position).
  const auto full = embed_all(e, {prompt_of(40, 2)}, Pooling::Mean);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(full[0].size(), static_cast<size_t>(l.model->config().dim));
}

// The engine's pooled vectors against the model's own hidden states of one forward over
// the whole prompt (a fresh KV store): which rows each pooling reads.
TEST(EnginePooling, PoolsTheRowsEachModeNames) {
  Loaded l = load_synth();
  Engine e(*l.model, nullptr, engine_config(*l.model, 4, 64, true, /*max_batch_tokens=*/16));
  e.start();
  const std::vector<int32_t> prompt = prompt_of(37, 5);  // 3 chunks of 16
  std::vector<float> hidden;
  {
    KvConfig k;
    k.block_size = kBlock;
    k.budget_bytes = 8ull << 20;
    const ModelConfig& mc = l.model->config();
    PagedKvPool pool(KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim}, k);
    PagedKvStore store(pool);
    ASSERT_TRUE(store.reserve(0, static_cast<int64_t>(prompt.size())).ok());
    Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int64_t>(i), 0, false, true);
    ThreadPool tp(2);
    std::vector<float> logits;
    l.model->forward(b, store, tp, logits, &hidden);
    EXPECT_TRUE(logits.empty());
  }
  const int64_t dim = l.model->config().dim;
  const int64_t n = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(hidden.size(), static_cast<size_t>(n * dim));
  std::vector<float> mean(static_cast<size_t>(dim)), first(hidden.begin(), hidden.begin() + dim),
      last(hidden.end() - dim, hidden.end());
  for (int64_t d = 0; d < dim; ++d) {
    double s = 0;
    for (int64_t t = 0; t < n; ++t) s += hidden[static_cast<size_t>(t * dim + d)];
    mean[static_cast<size_t>(d)] = static_cast<float>(s / static_cast<double>(n));
  }
  // 1e-5: the engine computed the prompt in three chunks (another attention path, other
  // summation order); a wrong row is off by O(1).
  EXPECT_LT(max_abs_diff(embed_all(e, {prompt}, Pooling::Mean)[0], mean), 1e-5f);
  EXPECT_LT(max_abs_diff(embed_all(e, {prompt}, Pooling::Cls)[0], first), 1e-5f);
  EXPECT_LT(max_abs_diff(embed_all(e, {prompt}, Pooling::Last)[0], last), 1e-5f);
}

// Pooling requests mixed with generation in one engine whose KV budget forces preemptions:
// the generated tokens are those of the generation running alone, and every embedding is
// the one computed alone (a preempted mean restarts its sum).
TEST(EnginePooling, MixedWithGenerationUnderPreemption) {
  Loaded l = load_synth();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(20 + 9 * i, 10 + i));
  std::vector<std::vector<float>> alone_mean, alone_last;
  std::vector<int32_t> alone_tokens;
  {
    Engine e(*l.model, nullptr, engine_config(*l.model, 4, 256, false));
    e.start();
    alone_mean = embed_all(e, prompts, Pooling::Mean);
    alone_last = embed_all(e, prompts, Pooling::Last);
    auto gen = std::make_shared<RecordingSink>();
    Request r;
    r.prompt = prompt_of(30, 99);
    r.sampling.temperature = 0;
    r.max_tokens = 120;
    r.ignore_eos = true;
    ASSERT_TRUE(e.submit(r, gen).ok());
    ASSERT_TRUE(gen->wait_done());
    alone_tokens = gen->tokens();
  }
  // 14 blocks of 16 = 224 positions for 3 generations of 150 and the embeddings: preemptions.
  Engine e(*l.model, nullptr, engine_config(*l.model, 4, 14, false));
  e.start();
  std::vector<std::shared_ptr<RecordingSink>> gens;
  for (int g = 0; g < 3; ++g) {
    gens.push_back(std::make_shared<RecordingSink>());
    Request r;
    r.prompt = prompt_of(30, 99);
    r.sampling.temperature = 0;
    r.max_tokens = 120;
    r.ignore_eos = true;
    ASSERT_TRUE(e.submit(r, gens.back()).ok());
  }
  const auto mixed_mean = embed_all(e, prompts, Pooling::Mean);
  const auto mixed_last = embed_all(e, prompts, Pooling::Last);
  for (auto& g : gens) {
    ASSERT_TRUE(g->wait_done());
    EXPECT_EQ(g->tokens(), alone_tokens);
  }
  ASSERT_EQ(mixed_mean.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    // See BATCH_TOL in tests/server/embeddings_reference_test.py: other batches, other sums.
    EXPECT_LT(max_abs_diff(mixed_mean[i], alone_mean[i]), 1e-5f) << "input " << i;
    EXPECT_LT(max_abs_diff(mixed_last[i], alone_last[i]), 1e-5f) << "input " << i;
  }
  std::printf("preemptions: %lld\n", static_cast<long long>(e.stats().preemptions));
}

// Last-token pooling over prompts that share a long prefix, submitted together with the
// prefix cache on: the first is the leader the others wait for, its prefill stops at a
// checkpoint (scheduler.h) whose row only vouches for the K/V, and the others borrow the
// prefix. Every vector equals the one computed alone with the cache off, so no request
// ended at the checkpoint with a partial prompt.
TEST(EnginePooling, SharedPrefixCheckpointsDoNotEndAPooledPrompt) {
  Loaded l = load_synth();
  const std::vector<int32_t> prefix = prompt_of(70, 3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prefix;
    for (int j = 0; j < 24 + i; ++j) p.push_back(static_cast<int32_t>(10 + 7 * i + j));  // past the fork's block
    prompts.push_back(p);
  }
  std::vector<std::vector<float>> alone;
  {
    Engine e(*l.model, nullptr, engine_config(*l.model, 4, 64, /*cache_on=*/false));
    e.start();
    for (const auto& p : prompts) alone.push_back(embed_all(e, {p}, Pooling::Last)[0]);
  }
  Engine e(*l.model, nullptr, engine_config(*l.model, 4, 64, /*cache_on=*/true));
  e.start();
  const auto shared = embed_all(e, prompts, Pooling::Last);
  ASSERT_EQ(shared.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_LT(max_abs_diff(shared[i], alone[i]), 1e-5f) << "input " << i;
  EXPECT_GT(e.stats().cache.hit_tokens, 0);
}

}  // namespace
}  // namespace pagoda::engine_test
