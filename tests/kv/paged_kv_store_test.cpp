// PagedKvStore: the KvStore the model uses, against the contiguous f32 cache of #2 —
// same attention outputs for batches of several sequences, with and without the
// long-context split, and after a fork (a prefix that came from elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

constexpr int64_t kLayers = 2, kKvHeads = 2, kHeads = 8, kHd = 64;

struct Batch {
  std::vector<SeqId> seqs;
  std::vector<int64_t> pos;
  std::vector<float> q, k, v;
};

Batch random_batch(const std::vector<std::pair<SeqId, std::pair<int64_t, int64_t>>>& spans, uint32_t seed) {
  Batch b;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& [seq, range] : spans)
    for (int64_t p = range.first; p < range.second; ++p) {
      b.seqs.push_back(seq);
      b.pos.push_back(p);
    }
  const size_t T = b.seqs.size();
  b.q.resize(T * kHeads * kHd);
  b.k.resize(T * kLayers * kKvHeads * kHd);
  b.v.resize(b.k.size());
  for (float& x : b.q) x = nd(rng);
  for (float& x : b.k) x = nd(rng);
  for (float& x : b.v) x = nd(rng);
  return b;
}

// Stores the batch in every layer, then returns layer 1's attention output.
std::vector<float> run(KvStore& kv, const Batch& b, ThreadPool& pool, int64_t window = 0, float softcap = 0.0f,
                       const float* sinks = nullptr) {
  const int64_t T = static_cast<int64_t>(b.seqs.size());
  for (int layer = 0; layer < kLayers; ++layer)
    for (int64_t t = 0; t < T; ++t) {
      const size_t off = (static_cast<size_t>(t) * kLayers + layer) * kKvHeads * kHd;
      kv.store(layer, b.seqs[t], b.pos[t], &b.k[off], &b.v[off]);
    }
  std::vector<float> out(static_cast<size_t>(T * kHeads * kHd));
  AttnBatch ab;
  ab.n_tokens = T;
  ab.seq_ids = b.seqs.data();
  ab.positions = b.pos.data();
  ab.q = b.q.data();
  ab.out = out.data();
  ab.n_heads = kHeads;
  ab.n_kv_heads = kKvHeads;
  ab.head_dim = kHd;
  ab.scale = 0.125f;
  ab.window = window;
  ab.softcap = softcap;
  ab.sinks = sinks;
  kv.attend_batch(1, ab, pool);
  return out;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << " index " << i;
}

PagedKvPool make_pool(int block_size, KvType t) {
  KvConfig c;
  c.block_size = block_size;
  c.budget_bytes = 64ull << 20;
  c.k_type = c.v_type = t;
  return PagedKvPool(KvGeometry{kLayers, kKvHeads, kHd}, c);
}

TEST(PagedKvStore, F32MatchesTheContiguousCacheForSeveralSequencesPrefillAndDecode) {
  ThreadPool threads(2);
  for (int bs : {8, 16, 32, 128}) {
    KvConfig c;
    c.block_size = bs;
    c.budget_bytes = 64ull << 20;
    c.k_type = c.v_type = KvType::F32;
    PagedKvPool pool(KvGeometry{kLayers, kKvHeads, kHd}, c);
    PagedKvStore paged(pool);
    ContiguousKvCache flat(kLayers, kKvHeads, kHd, 2048, 3);
    // Prefill: three sequences ending before, on and after a block boundary.
    const int64_t n0 = bs - 1, n1 = 2 * bs, n2 = 3 * bs + 1;
    ASSERT_TRUE(paged.reserve(0, n0).ok());
    ASSERT_TRUE(paged.reserve(1, n1).ok());
    ASSERT_TRUE(paged.reserve(2, n2).ok());
    Batch b = random_batch({{0, {0, n0}}, {1, {0, n1}}, {2, {0, n2}}}, bs);
    expect_close(run(paged, b, threads), run(flat, b, threads), 2e-5f, "prefill");
    pool.check_invariants();
    // Decode steps: one token per sequence.
    for (int step = 0; step < 5; ++step) {
      const int64_t p0 = n0 + step, p1 = n1 + step, p2 = n2 + step;
      ASSERT_TRUE(paged.reserve(0, p0 + 1).ok());
      ASSERT_TRUE(paged.reserve(1, p1 + 1).ok());
      ASSERT_TRUE(paged.reserve(2, p2 + 1).ok());
      Batch d = random_batch({{0, {p0, p0 + 1}}, {1, {p1, p1 + 1}}, {2, {p2, p2 + 1}}}, 100 + step);
      expect_close(run(paged, d, threads), run(flat, d, threads), 2e-5f, "decode");
    }
    EXPECT_EQ(pool.stats().tokens_in_use, n0 + n1 + n2 + 15);
    EXPECT_EQ(paged.capacity(0), n0 + 5);
    EXPECT_EQ(paged.capacity(7), 0);
  }
}

TEST(PagedKvStore, LongContextSplitAcrossThreadsGivesTheSameResult) {
  ThreadPool threads(4);
  PagedKvPool pool = make_pool(16, KvType::F16);
  PagedKvStore split(pool), whole(pool);
  whole.set_split_min_tokens(1 << 30);
  split.set_split_min_tokens(64);
  const int64_t n = 1200;
  ASSERT_TRUE(split.reserve(0, n).ok());
  ASSERT_TRUE(whole.reserve(0, n).ok());
  Batch b = random_batch({{0, {0, n}}}, 1);
  run(split, b, threads);
  run(whole, b, threads);
  // Decode at the end: 2 rows (KV heads) for 16 wanted tasks, so the split kicks in.
  ASSERT_TRUE(split.reserve(0, n + 1).ok());
  ASSERT_TRUE(whole.reserve(0, n + 1).ok());
  Batch d = random_batch({{0, {n, n + 1}}}, 2);
  expect_close(run(split, d, threads), run(whole, d, threads), 1e-5f, "split decode");
}

// Gemma's local layers and soft-capping: a window w shows positions (pos - w, pos], and
// scores are capped to c·tanh(s / c) — the paged kernels (per-token path, SIMD soft-cap,
// the long-context split starting at the window's first position) against the contiguous
// cache's scalar loop. Windows cut inside a block, on a block boundary and cover more
// than the sequence; the soft-cap (1.5) is small enough to change every softmax.
TEST(PagedKvStore, SlidingWindowAndSoftcapMatchTheContiguousCache) {
  ThreadPool threads(4);
  for (int64_t window : {int64_t{5}, int64_t{16}, int64_t{37}, int64_t{4096}}) {
    for (float softcap : {0.0f, 1.5f}) {
      PagedKvPool pool = make_pool(16, KvType::F32);
      PagedKvStore paged(pool);
      paged.set_split_min_tokens(32);
      ContiguousKvCache flat(kLayers, kKvHeads, kHd, 2048, 2);
      const int64_t n0 = 100, n1 = 300;
      ASSERT_TRUE(paged.reserve(0, n0).ok());
      ASSERT_TRUE(paged.reserve(1, n1).ok());
      Batch b = random_batch({{0, {0, n0}}, {1, {0, n1}}}, 7);
      const auto a = run(paged, b, threads, window, softcap);
      expect_close(a, run(flat, b, threads, window, softcap), 2e-5f, "prefill");
      ASSERT_TRUE(paged.reserve(1, n1 + 1).ok());
      Batch d = random_batch({{1, {n1, n1 + 1}}}, 8);  // one row per KV head: the split runs
      expect_close(run(paged, d, threads, window, softcap), run(flat, d, threads, window, softcap), 2e-5f,
                   "decode");
      // The mask matters: without it the outputs differ (windows shorter than the context).
      if (window < n0) {
        PagedKvStore full(pool);
        ASSERT_TRUE(full.reserve(0, n0).ok());
        ASSERT_TRUE(full.reserve(1, n1).ok());
        const auto c = run(full, b, threads, 0, softcap);
        double max_diff = 0;
        for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(a[i]) - c[i]));
        EXPECT_GT(max_diff, 0.1) << "window " << window;
      }
    }
  }
}

// gpt-oss's attention sinks: one more logit per query head in the softmax, with no value.
// The paged paths add e^(sink - m) to the denominator when they normalise (prefill tiles,
// a decode row, the long-context split's merge); the contiguous cache's scalar loop starts
// its online softmax from the sink instead (m = sink, l = 1): two formulations, one result.
// Sinks from -3 (nearly no effect) to 6 (above most scores: most of the weight), with and
// without a window.
TEST(PagedKvStore, AttentionSinksMatchTheContiguousCacheOnEveryPath) {
  ThreadPool threads(4);
  const std::vector<float> sinks = {-3.0f, 0.0f, 1.5f, 6.0f, 0.5f, -1.0f, 2.0f, 3.5f};  // [kHeads]
  for (int64_t window : {int64_t{0}, int64_t{16}}) {
    PagedKvPool pool = make_pool(16, KvType::F32);
    PagedKvStore paged(pool);
    paged.set_split_min_tokens(32);
    ContiguousKvCache flat(kLayers, kKvHeads, kHd, 2048, 2);
    const int64_t n0 = 40, n1 = 300;
    ASSERT_TRUE(paged.reserve(0, n0).ok());
    ASSERT_TRUE(paged.reserve(1, n1).ok());
    Batch b = random_batch({{0, {0, n0}}, {1, {0, n1}}}, 17);
    const auto with = run(paged, b, threads, window, 0.0f, sinks.data());
    expect_close(with, run(flat, b, threads, window, 0.0f, sinks.data()), 2e-5f, "prefill");
    ASSERT_TRUE(paged.reserve(1, n1 + 1).ok());
    Batch d = random_batch({{1, {n1, n1 + 1}}}, 18);  // one row per KV head: the split runs
    expect_close(run(paged, d, threads, window, 0.0f, sinks.data()),
                 run(flat, d, threads, window, 0.0f, sinks.data()), 2e-5f, "decode");
    ASSERT_TRUE(paged.reserve(0, n0 + 1).ok());
    Batch d0 = random_batch({{0, {n0, n0 + 1}}}, 19);  // a short row: no split
    expect_close(run(paged, d0, threads, window, 0.0f, sinks.data()),
                 run(flat, d0, threads, window, 0.0f, sinks.data()), 2e-5f, "short decode");
    // The sinks matter: a large sink takes weight from every position.
    PagedKvStore none(pool);
    ASSERT_TRUE(none.reserve(0, n0).ok());
    ASSERT_TRUE(none.reserve(1, n1).ok());
    const auto without = run(none, b, threads, window);
    double max_diff = 0;
    for (size_t i = 0; i < with.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(with[i]) - without[i]));
    EXPECT_GT(max_diff, 0.1) << "window " << window;
  }
}

TEST(PagedKvStore, ForkedSequenceContinuesAfterASharedPrefix) {
  ThreadPool threads(2);
  PagedKvPool pool = make_pool(16, KvType::F32);
  PagedKvStore paged(pool);
  ContiguousKvCache flat(kLayers, kKvHeads, kHd, 256, 2);
  // Prefix of 21 tokens computed once as seq 0; seq 1 borrows it (fork) and continues.
  ASSERT_TRUE(paged.reserve(0, 21).ok());
  Batch prefix = random_batch({{0, {0, 21}}}, 5);
  run(paged, prefix, threads);
  Batch prefix1 = prefix;
  for (auto& s : prefix1.seqs) s = 1;
  run(flat, prefix, threads);
  run(flat, prefix1, threads);
  paged.fork(0, 1);
  EXPECT_EQ(pool.refcount(paged.table(1).block(1)), 2);
  ASSERT_TRUE(paged.reserve(1, 30).ok());  // COW of the shared tail block
  ASSERT_TRUE(paged.reserve(0, 25).ok());  // seq 0 now owns the original alone
  EXPECT_EQ(pool.refcount(paged.table(0).block(0)), 2);
  EXPECT_EQ(pool.refcount(paged.table(0).block(1)), 1);
  Batch cont = random_batch({{1, {21, 30}}, {0, {21, 25}}}, 6);
  expect_close(run(paged, cont, threads), run(flat, cont, threads), 2e-5f, "after fork");
  paged.remove(0);
  paged.remove(1);
  pool.check_invariants();
  EXPECT_EQ(pool.stats().blocks_live, 0);
}

TEST(PagedKvStore, ReserveFailureLeavesNoTrace) {
  KvConfig c;
  c.block_size = 16;
  c.k_type = c.v_type = KvType::F16;
  PagedKvPool probe(KvGeometry{kLayers, kKvHeads, kHd}, [] {
    KvConfig p;
    p.block_size = 16;
    p.budget_bytes = 1 << 20;
    return p;
  }());
  c.budget_bytes = 4 * probe.bytes_per_block();
  PagedKvPool pool(KvGeometry{kLayers, kKvHeads, kHd}, c);
  PagedKvStore store(pool);
  ASSERT_TRUE(store.reserve(0, 60).ok());
  AllocResult r = store.reserve(1, 10);
  EXPECT_EQ(r.status, AllocResult::Status::OutOfBlocks);
  EXPECT_FALSE(store.contains(1));
  r = store.reserve(2, 65);
  EXPECT_EQ(r.status, AllocResult::Status::NeverFits);
  EXPECT_FALSE(store.contains(2));
  store.remove(0);
  EXPECT_TRUE(store.reserve(1, 64).ok());
  pool.check_invariants();
}

}  // namespace
}  // namespace pagoda
