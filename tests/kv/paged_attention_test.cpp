// Paged attention: every SIMD path against the scalar reference for every KV type,
// head_dim, GQA ratio and context length; partial results merge to the whole; the
// reference itself against plain softmax attention over dequantized rows; prefill tiles
// (paged_attend_tile) against the reference for every type, head_dim, GQA ratio and
// (start position, token count), and through PagedKvStore::attend_batch against the
// per-token path for prompts, continued prompts and mixed prefill + decode batches.
#include <gtest/gtest.h>

#include "sanitizer_sampling.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernel_levels.h"
#include "kernels/paged_attention.h"
#include "kv/paged_kv_pool.h"
#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

constexpr int64_t kNumKvHeads = 2;

struct Filled {
  std::unique_ptr<PagedKvPool> pool;
  BlockTable table;
  ~Filled() {
    if (pool) pool->free(table);
  }
};

// A pool of one layer holding n_ctx random tokens (K ~ N(0, 1) + a per-dim offset, so
// q4's min matters; V ~ N(0, 1)), block ids shuffled so the table is not contiguous.
void fill(Filled& f, KvType kt, KvType vt, int64_t hd, int64_t n_ctx, int block_size, uint32_t seed) {
  KvConfig c;
  c.block_size = block_size;
  c.k_type = kt;
  c.v_type = vt;
  const int64_t blocks = (n_ctx + block_size - 1) / block_size;
  const uint64_t per_block = static_cast<uint64_t>(block_size) * kNumKvHeads *
                             (kv_row_bytes(kt, hd) + kv_row_sidecar_bytes(kt, hd) + kv_row_bytes(vt, hd) +
                              kv_row_sidecar_bytes(vt, hd));
  c.budget_bytes = per_block * static_cast<uint64_t>(2 * blocks + 3);
  f.pool = std::make_unique<PagedKvPool>(KvGeometry{1, kNumKvHeads, hd}, c);
  // Scatter: take every block, give back every other one, so the table's ids jump.
  std::vector<BlockId> all;
  while (auto b = f.pool->acquire()) all.push_back(*b);
  for (size_t i = 0; i < all.size(); i += 2) f.pool->release(all[i]);
  ASSERT_TRUE(f.pool->append_tokens(f.table, n_ctx).ok());
  for (size_t i = 1; i < all.size(); i += 2) f.pool->release(all[i]);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(kNumKvHeads * hd)), v(k.size());
  for (int64_t p = 0; p < n_ctx; ++p) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = nd(rng) + 0.5f * static_cast<float>(i % 7);
      v[i] = nd(rng);
    }
    f.pool->write_token(f.table, 0, p, k.data(), v.data());
  }
}

// f16 K and V (the defaults), 16-token blocks, `budget` bytes.
KvConfig config_bs16(uint64_t budget) {
  KvConfig c;
  c.block_size = 16;
  c.budget_bytes = budget;
  return c;
}

std::vector<float> random_q(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n));
  for (float& x : q) x = nd(rng);
  return q;
}

std::vector<float> normalized(const std::vector<float>& o, const std::vector<float>& l, int64_t hd) {
  std::vector<float> out(o.size());
  for (size_t i = 0; i < o.size(); ++i) out[i] = o[i] / l[i / hd];
  return out;
}

// paged_attend_prefetch reads the block ids of the range's first blocks only: each table
// here is a heap copy exactly as long as the range needs (ASan flags a read past it), and
// attention over the same ranges is unchanged by prefetching before it.
TEST(PagedAttention, PrefetchReadsOnlyTheRangesFirstBlocks) {
  Filled f;
  fill(f, KvType::F16, KvType::F16, 64, 50, 16, 5);
  const KvLayerView view = f.pool->layer_view(0);
  const auto q = random_q(4 * 64, 3);
  for (auto [p_begin, p_end] : {std::pair<int64_t, int64_t>{0, 0}, {0, 1}, {0, 16}, {0, 17}, {15, 16}, {16, 50},
                                {49, 50}, {0, 50}}) {
    const size_t n_blocks = static_cast<size_t>((p_end + 15) / 16);
    std::vector<BlockId> blocks(f.table.blocks().begin(), f.table.blocks().begin() + static_cast<long>(n_blocks));
    paged_attend_prefetch(view, blocks.data(), p_begin, p_end, 1);
    if (p_begin == p_end) continue;
    std::vector<float> o0(4 * 64), m0(4), l0(4), o1(4 * 64), m1(4), l1(4);
    paged_attend_partial(view, blocks.data(), p_begin, p_end, 1, q.data(), 4, 0.125f, o0.data(), m0.data(), l0.data());
    paged_attend_prefetch(view, blocks.data(), p_begin, p_end, 1);
    paged_attend_partial(view, blocks.data(), p_begin, p_end, 1, q.data(), 4, 0.125f, o1.data(), m1.data(), l1.data());
    EXPECT_EQ(o0, o1) << "[" << p_begin << ", " << p_end << ")";
  }
}

TEST(PagedAttention, ReferenceEqualsPlainSoftmaxOverDequantizedRows) {
  Filled f;
  fill(f, KvType::Q4, KvType::Q8, 64, 50, 16, 3);
  const KvLayerView view = f.pool->layer_view(0);
  const int n_q = 4;
  auto q = random_q(n_q * 64, 9);
  std::vector<float> o(n_q * 64), m(n_q), l(n_q);
  paged_attend_partial_ref(view, f.table.blocks().data(), 0, 50, 1, q.data(), n_q, 0.125f, o.data(), m.data(), l.data());
  const auto out = normalized(o, l, 64);
  std::vector<float> k(64), v(64);
  for (int h = 0; h < n_q; ++h) {
    std::vector<double> s(50);
    for (int64_t p = 0; p < 50; ++p) {
      f.pool->read_row(f.table, 0, p, 1, false, k.data());
      double acc = 0;
      for (int i = 0; i < 64; ++i) acc += static_cast<double>(q[h * 64 + i]) * k[i];
      s[p] = acc * 0.125;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int i = 0; i < 64; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < 50; ++p) {
        f.pool->read_row(f.table, 0, p, 1, true, v.data());
        acc += s[p] * v[i];
      }
      EXPECT_NEAR(out[h * 64 + i], acc / sum, 1e-5) << "head " << h << " dim " << i;
    }
  }
}

struct SweepCase {
  KvType k, v;
};

TEST(PagedAttention, SimdPathsMatchTheReferenceForEveryTypeShapeAndLength) {
  const SweepCase types[] = {{KvType::F32, KvType::F32}, {KvType::F16, KvType::F16}, {KvType::BF16, KvType::BF16},
                             {KvType::Q8, KvType::Q8},   {KvType::Q4, KvType::Q4},   {KvType::Q8, KvType::F16},
                             {KvType::Q4, KvType::Q8}};
  const int64_t head_dims[] = {8, 64, 80, 128, 24};
  const int gqa[] = {1, 4, 8};
  const int64_t lengths[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 511, 513, 1000, 4096};
  int64_t checked = 0;
  test::CaseSample sample(5);  // all cases in release; every 5th under a sanitizer
  for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.attention.attend; })) {
    if (isa == Isa::Scalar) continue;  // the reference itself
    const PagedAttendFn fn = kernel_table(isa).attention.attend;
    for (const SweepCase& tc : types)
      for (int64_t hd : head_dims) {
        Filled f;
        fill(f, tc.k, tc.v, hd, 4096, 16, static_cast<uint32_t>(hd));
        const KvLayerView view = f.pool->layer_view(0);
        for (int n_q : gqa)
          for (int64_t n_ctx : lengths) {
            if (!sample.take()) continue;
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            auto q = random_q(n_q * hd, static_cast<uint32_t>(n_ctx * 31 + n_q));
            std::vector<float> o_ref(n_q * hd), m_ref(n_q), l_ref(n_q), o(n_q * hd), m(n_q), l(n_q);
            const int64_t head = n_ctx % 2;
            paged_attend_partial_ref(view, f.table.blocks().data(), 0, n_ctx, head, q.data(), n_q, scale,
                                     o_ref.data(), m_ref.data(), l_ref.data());
            fn(view, f.table.blocks().data(), 0, n_ctx, head, q.data(), n_q, scale, o.data(), m.data(), l.data());
            const auto want = normalized(o_ref, l_ref, hd), got = normalized(o, l, hd);
            for (int h = 0; h < n_q; ++h) ASSERT_NEAR(m[h], m_ref[h], 1e-5f * (1 + std::fabs(m_ref[h])));
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
                  << isa_name(isa) << " k=" << kv_type_name(tc.k) << " v=" << kv_type_name(tc.v) << " hd=" << hd
                  << " n_q=" << n_q << " ctx=" << n_ctx << " index " << i;
            ++checked;
          }
      }
  }
  std::printf("checked %lld cases\n", static_cast<long long>(checked));
}

// The all-heads decode kernel (paged_attend_heads): at every level, the same bits as that
// level's per-KV-head kernel (plain and soft-capped) for each head, and close to the
// reference: a token attended by one task or by a task per head gives the same output.
TEST(PagedAttention, AllHeadsKernelEqualsThePerHeadKernelBitForBit) {
  int64_t checked = 0;
  for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.attention.attend_heads; })) {
    const AttentionKernels& k = kernel_table(isa).attention;
    for (KvType t : {KvType::F16, KvType::BF16, KvType::F32, KvType::Q8, KvType::Q4})
      for (int64_t hd : {64, 80, 128, 256}) {
        Filled f;
        fill(f, t, t, hd, 300, 16, static_cast<uint32_t>(hd + 3));
        const KvLayerView view = f.pool->layer_view(0);
        for (int n_q : {1, 4, 8})
          for (float softcap : {0.0f, 1.5f})
            for (auto [p_begin, p_end] : {std::pair<int64_t, int64_t>{0, 1}, {0, 33}, {7, 120}, {0, 300}}) {
              const int rows = static_cast<int>(kNumKvHeads) * n_q;
              const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
              const auto q = random_q(rows * hd, static_cast<uint32_t>(p_end * 7 + n_q));
              std::vector<float> o(rows * hd), m(rows), l(rows), o1(rows * hd), m1(rows), l1(rows);
              std::vector<float> o_ref(rows * hd), m_ref(rows), l_ref(rows);
              k.attend_heads(view, f.table.blocks().data(), p_begin, p_end, static_cast<int>(kNumKvHeads), q.data(),
                             n_q, scale, softcap, o.data(), m.data(), l.data());
              paged_attend_heads_ref(view, f.table.blocks().data(), p_begin, p_end, static_cast<int>(kNumKvHeads),
                                     q.data(), n_q, scale, softcap, o_ref.data(), m_ref.data(), l_ref.data());
              for (int64_t g = 0; g < kNumKvHeads; ++g) {
                const int64_t r = g * n_q;
                if (softcap > 0.0f)
                  k.attend_softcap(view, f.table.blocks().data(), p_begin, p_end, g, q.data() + r * hd, n_q, scale,
                                   softcap, o1.data() + r * hd, m1.data() + r, l1.data() + r);
                else
                  k.attend(view, f.table.blocks().data(), p_begin, p_end, g, q.data() + r * hd, n_q, scale,
                           o1.data() + r * hd, m1.data() + r, l1.data() + r);
              }
              const std::string where = std::string(isa_name(isa)) + " " + kv_type_name(t) + " hd=" +
                                        std::to_string(hd) + " n_q=" + std::to_string(n_q) + " softcap=" +
                                        std::to_string(softcap) + " [" + std::to_string(p_begin) + ", " +
                                        std::to_string(p_end) + ")";
              ASSERT_EQ(o, o1) << where;
              ASSERT_EQ(m, m1) << where;
              ASSERT_EQ(l, l1) << where;
              const auto want = normalized(o_ref, l_ref, hd), got = normalized(o, l, hd);
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i]))) << where << " index " << i;
              ++checked;
            }
      }
  }
  EXPECT_GT(checked, 0);
}

// The soft-capped partial kernel (Gemma 2's decode), every level against its reference:
// caps that change every softmax (1.5) and barely any (50), windows as the caller's p_begin.
TEST(PagedAttention, SoftcapPartialsMatchTheReference) {
  int64_t checked = 0;
  for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.attention.attend_softcap; })) {
    if (isa == Isa::Scalar) continue;  // the reference itself
    const PagedAttendSoftcapFn fn = kernel_table(isa).attention.attend_softcap;
    for (KvType t : {KvType::F32, KvType::F16, KvType::Q8, KvType::Q4})
      for (int64_t hd : {64, 80, 256}) {
        Filled f;
        fill(f, t, t, hd, 600, 16, static_cast<uint32_t>(hd + 11));
        const KvLayerView view = f.pool->layer_view(0);
        for (float softcap : {1.5f, 50.0f})
          for (int n_q : {1, 4})
            for (auto [p_begin, p_end] : {std::pair<int64_t, int64_t>{0, 1}, {0, 17}, {5, 40}, {0, 600}, {300, 333}}) {
              const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
              auto q = random_q(n_q * hd, static_cast<uint32_t>(p_end * 13 + n_q));
              std::vector<float> o_ref(n_q * hd), m_ref(n_q), l_ref(n_q), o(n_q * hd), m(n_q), l(n_q);
              paged_attend_partial_softcap_ref(view, f.table.blocks().data(), p_begin, p_end, 1, q.data(), n_q, scale,
                                               softcap, o_ref.data(), m_ref.data(), l_ref.data());
              fn(view, f.table.blocks().data(), p_begin, p_end, 1, q.data(), n_q, scale, softcap, o.data(), m.data(),
                 l.data());
              const auto want = normalized(o_ref, l_ref, hd), got = normalized(o, l, hd);
              for (int h = 0; h < n_q; ++h) ASSERT_NEAR(m[h], m_ref[h], 1e-5f * (1 + std::fabs(m_ref[h])));
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
                    << isa_name(isa) << " " << kv_type_name(t) << " hd=" << hd << " softcap=" << softcap
                    << " n_q=" << n_q << " [" << p_begin << ", " << p_end << ") index " << i;
              ++checked;
            }
      }
  }
  std::printf("checked %lld cases\n", static_cast<long long>(checked));
}

TEST(PagedAttention, PartialsOverSplitRangesMergeToTheWhole) {
  for (KvType t : {KvType::F32, KvType::Q4}) {
    Filled f;
    fill(f, t, t, 64, 1000, 32, 5);
    const KvLayerView view = f.pool->layer_view(0);
    const int n_q = 4;
    auto q = random_q(n_q * 64, 11);
    std::vector<float> whole(n_q * 64);
    paged_attend(view, f.table.blocks().data(), 1000, 0, q.data(), n_q, 0.125f, whole.data());
    // Uneven parts, one empty, one not block-aligned.
    const int64_t cuts[] = {0, 100, 100, 333, 640, 1000};
    const int n_parts = 5;
    std::vector<float> m(n_parts * n_q), l(n_parts * n_q), o(n_parts * n_q * 64), merged(n_q * 64);
    for (int p = 0; p < n_parts; ++p)
      paged_attend_partial(view, f.table.blocks().data(), cuts[p], cuts[p + 1], 0, q.data(), n_q, 0.125f,
                           &o[p * n_q * 64], &m[p * n_q], &l[p * n_q]);
    merge_attention_partials(n_parts, m.data(), l.data(), o.data(), n_q, 64, merged.data());
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(merged[i], whole[i], 1e-5f) << kv_type_name(t) << " " << i;
  }
}

TEST(PagedAttention, PrefillTilesMatchTheReferenceForEveryTypeShapeAndStart) {
  const SweepCase types[] = {{KvType::F32, KvType::F32}, {KvType::F16, KvType::F16}, {KvType::BF16, KvType::BF16},
                             {KvType::Q8, KvType::Q8},   {KvType::Q4, KvType::Q4},   {KvType::Q8, KvType::F16},
                             {KvType::Q4, KvType::Q8}};
  // {pos0, n_tok}: prompts from 0 and continuations, tiles shorter / longer than a chunk
  // (32) and a block (16), diagonals at every offset inside a chunk, more rows than
  // kAttnTileRows (the kernel splits them).
  const std::pair<int64_t, int> spans[] = {{0, 1},   {0, 2},    {0, 7},    {0, 16},   {0, 17},   {0, 33},
                                           {3, 64},  {30, 5},   {100, 70}, {511, 20}, {1000, 9}, {2040, 8}};
  const int gqa[] = {1, 4, 8};
  int64_t checked = 0;
  test::CaseSample sample(5);  // all cases in release; every 5th under a sanitizer
  for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.attention.attend_tile; })) {
    const PagedAttendTileFn fn = kernel_table(isa).attention.attend_tile;
    for (const SweepCase& tc : types)
      for (int64_t hd : {8, 64, 80, 128, 24, 256, 320}) {
        // 256 (the 16-position chunk) and 320 (the token-by-token fallback): two types.
        if (hd >= 256 && tc.k != KvType::F16 && tc.k != KvType::Q4) continue;
        if (isa == Isa::Scalar && (hd != 64 || tc.k != KvType::Q4)) continue;  // the reference vs itself
        Filled f;
        fill(f, tc.k, tc.v, hd, 2048, 16, static_cast<uint32_t>(hd + 1));
        const KvLayerView view = f.pool->layer_view(0);
        for (int n_q : gqa)
          for (auto [pos0, n_tok] : spans) {
            if (!sample.take()) continue;
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            // Rows strided as in a batch: token stride > the group's n_q · hd.
            const int64_t stride = (n_q + 1) * hd;
            auto q = random_q(n_tok * stride, static_cast<uint32_t>(pos0 * 7 + n_tok + n_q));
            std::vector<float> want(q.size(), -1.0f), got(q.size(), -1.0f);
            const int64_t head = (pos0 + n_tok) % 2;
            paged_attend_tile_ref(view, f.table.blocks().data(), pos0, n_tok, head, q.data(), stride, n_q, scale,
                                  want.data(), stride);
            fn(view, f.table.blocks().data(), pos0, n_tok, head, q.data(), stride, n_q, scale, got.data(), stride, 0,
               0.0f, nullptr);
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
                  << isa_name(isa) << " k=" << kv_type_name(tc.k) << " v=" << kv_type_name(tc.v) << " hd=" << hd
                  << " n_q=" << n_q << " pos0=" << pos0 << " n_tok=" << n_tok << " token " << i / stride
                  << " index " << i % stride << (static_cast<int64_t>(i % stride) >= n_q * hd ? " (padding)" : "");
            ++checked;
          }
      }
  }
  std::printf("checked %lld tiles\n", static_cast<long long>(checked));
}

// Gemma's local layers and soft-capping in the tiles: a window shorter than, equal to and
// longer than a chunk / block, starting inside a chunk, with and without a cap (1.5, small
// enough to change every softmax); the reference applies both per token.
TEST(PagedAttention, PrefillTilesWithWindowsAndSoftcapMatchTheReference) {
  const std::pair<int64_t, int> spans[] = {{0, 7}, {0, 33}, {30, 5}, {100, 70}, {511, 20}, {1000, 9}};
  int64_t checked = 0;
  for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.attention.attend_tile; })) {
    if (isa == Isa::Scalar) continue;  // the reference itself
    const PagedAttendTileFn fn = kernel_table(isa).attention.attend_tile;
    for (KvType t : {KvType::F32, KvType::Q8})
      for (int64_t hd : {64, 256, 320}) {
        Filled f;
        fill(f, t, t, hd, 2048, 16, static_cast<uint32_t>(hd + 3));
        const KvLayerView view = f.pool->layer_view(0);
        // gpt-oss's sinks (one logit per query head in the denominator) ride along.
        const float sink_values[] = {2.0f, -1.0f, 0.5f, 4.0f};
        for (int64_t window : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{40}, int64_t{4096}})
          for (float softcap : {0.0f, 1.5f})
            for (int n_q : {1, 4})
              for (const float* sinks : {static_cast<const float*>(nullptr), sink_values})
              for (auto [pos0, n_tok] : spans) {
                const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                const int64_t stride = (n_q + 1) * hd;
                auto q = random_q(n_tok * stride, static_cast<uint32_t>(pos0 * 5 + n_tok + n_q + window));
                std::vector<float> want(q.size(), -1.0f), got(q.size(), -1.0f);
                paged_attend_tile_ref(view, f.table.blocks().data(), pos0, n_tok, 1, q.data(), stride, n_q, scale,
                                      want.data(), stride, window, softcap, sinks);
                fn(view, f.table.blocks().data(), pos0, n_tok, 1, q.data(), stride, n_q, scale, got.data(), stride,
                   window, softcap, sinks);
                for (size_t i = 0; i < want.size(); ++i)
                  ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
                      << isa_name(isa) << " " << kv_type_name(t) << " hd=" << hd << " window=" << window
                      << " softcap=" << softcap << " sinks=" << (sinks != nullptr) << " n_q=" << n_q << " pos0=" << pos0
                      << " n_tok=" << n_tok
                      << " token " << i / stride << " index " << i % stride;
                ++checked;
              }
      }
  }
  std::printf("checked %lld tiles\n", static_cast<long long>(checked));
}

// A batch of one row per (seqs[i], pos[i]) over q / out ([rows, heads, head_dim]).
AttnBatch attn_batch(const std::vector<SeqId>& seqs, const std::vector<int64_t>& pos, const std::vector<float>& q,
                     std::vector<float>& out, int64_t heads, int64_t kv_heads, int64_t head_dim, float scale) {
  AttnBatch ab;
  ab.n_tokens = static_cast<int64_t>(seqs.size());
  ab.seq_ids = seqs.data();
  ab.positions = pos.data();
  ab.q = q.data();
  ab.out = out.data();
  ab.n_heads = heads;
  ab.n_kv_heads = kv_heads;
  ab.head_dim = head_dim;
  ab.scale = scale;
  return ab;
}

// attend_batch tiles runs of consecutive positions; the per-token attend() (decode
// kernel, no tiles) is the yardstick.
TEST(PagedAttention, StorePrefillTilesMatchPerTokenAttentionForPromptsAndContinuations) {
  constexpr int64_t kHeads = 8, kHd = 64;
  ThreadPool threads(2);
  for (KvType t : {KvType::F16, KvType::Q4}) {
    for (int bs : {16, 32}) {
      KvConfig c;
      c.block_size = bs;
      c.budget_bytes = 64ull << 20;
      c.k_type = c.v_type = t;
      PagedKvPool pool(KvGeometry{1, kNumKvHeads, kHd}, c);
      PagedKvStore store(pool);
      std::mt19937 rng(static_cast<uint32_t>(bs));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      // Batches: {seq, first pos, count}; several sequences in one batch, a prompt
      // continuing after an existing prefix, a decode token next to a prefill run.
      struct Span {
        SeqId seq;
        int64_t pos0, n;
      };
      const std::vector<std::vector<Span>> steps = {
          {{0, 0, 1}, {1, 0, 2}, {2, 0, 15}, {3, 0, 33}},
          {{0, 1, 1}, {1, 2, 77}, {2, 15, 1}, {3, 33, 2}},
          {{4, 0, 2048}},
          {{4, 2048, 19}, {2, 16, 1}},
      };
      for (const auto& step : steps) {
        std::vector<SeqId> seqs;
        std::vector<int64_t> pos;
        for (const Span& sp : step) {
          ASSERT_TRUE(store.reserve(sp.seq, sp.pos0 + sp.n).ok());
          for (int64_t i = 0; i < sp.n; ++i) seqs.push_back(sp.seq), pos.push_back(sp.pos0 + i);
        }
        const int64_t T = static_cast<int64_t>(seqs.size());
        std::vector<float> k(kNumKvHeads * kHd), v(k.size());
        for (int64_t i = 0; i < T; ++i) {
          for (size_t j = 0; j < k.size(); ++j) k[j] = nd(rng) + 0.3f * static_cast<float>(j % 5), v[j] = nd(rng);
          store.store(0, seqs[i], pos[i], k.data(), v.data());
        }
        std::vector<float> q(static_cast<size_t>(T * kHeads * kHd)), out(q.size()), want(q.size());
        for (float& x : q) x = nd(rng);
        const AttnBatch ab = attn_batch(seqs, pos, q, out, kHeads, kNumKvHeads, kHd, 0.125f);
        store.attend_batch(0, ab, threads);
        const int n_q = static_cast<int>(kHeads / kNumKvHeads);
        for (int64_t i = 0; i < T; ++i)
          for (int g = 0; g < kNumKvHeads; ++g) {
            const int64_t off = (i * kHeads + g * n_q) * kHd;
            store.attend(0, seqs[i], pos[i], g, &q[off], n_q, 0.125f, &want[off]);
          }
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(out[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
              << kv_type_name(t) << " bs=" << bs << " token " << i / (kHeads * kHd) << " (seq "
              << seqs[i / (kHeads * kHd)] << " pos " << pos[i / (kHeads * kHd)] << ") index " << i % (kHeads * kHd);
      }
      pool.check_invariants();
    }
  }
}

// Many decoding sequences in one batch take one task per token over all KV heads
// (paged_attend_heads); one token alone takes a task per KV head. Both give the same bits,
// plain, soft-capped, windowed and with sinks.
TEST(PagedAttention, DecodeBatchOfManySequencesEqualsOneTokenAtATimeBitForBit) {
  constexpr int64_t kHeads = 8, kHd = 64;
  ThreadPool threads(2);
  PagedKvPool pool(KvGeometry{1, kNumKvHeads, kHd}, config_bs16(64ull << 20));
  PagedKvStore store(pool);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<int64_t> lengths = {1, 5, 16, 17, 40, 100, 333};
  std::vector<SeqId> seqs;
  std::vector<int64_t> pos;
  std::vector<float> k(kNumKvHeads * kHd), v(k.size());
  for (size_t s_i = 0; s_i < lengths.size(); ++s_i) {
    const SeqId sq = static_cast<SeqId>(s_i);
    ASSERT_TRUE(store.reserve(sq, lengths[s_i]).ok());
    for (int64_t p = 0; p < lengths[s_i]; ++p) {
      for (size_t j = 0; j < k.size(); ++j) k[j] = nd(rng), v[j] = nd(rng);
      store.store(0, sq, p, k.data(), v.data());
    }
    seqs.push_back(sq);
    pos.push_back(lengths[s_i] - 1);
  }
  const int64_t T = static_cast<int64_t>(seqs.size()), row = kHeads * kHd;
  std::vector<float> q(static_cast<size_t>(T * row)), sinks(kHeads);
  for (float& x : q) x = nd(rng);
  for (float& x : sinks) x = nd(rng);
  for (int variant = 0; variant < 4; ++variant) {
    std::vector<float> out(q.size()), one(q.size());
    AttnBatch ab = attn_batch(seqs, pos, q, out, kHeads, kNumKvHeads, kHd, 0.125f);
    if (variant == 1) ab.softcap = 2.0f;
    if (variant == 2) ab.window = 8;
    if (variant == 3) ab.sinks = sinks.data();
    store.attend_batch(0, ab, threads);
    for (int64_t i = 0; i < T; ++i) {
      AttnBatch a1 = ab;
      a1.n_tokens = 1;
      a1.seq_ids = &seqs[static_cast<size_t>(i)];
      a1.positions = &pos[static_cast<size_t>(i)];
      a1.q = &q[static_cast<size_t>(i * row)];
      a1.out = &one[static_cast<size_t>(i * row)];
      store.attend_batch(0, a1, threads);
    }
    EXPECT_EQ(out, one) << "variant " << variant;
  }
}

// Rows with attend_end (an image's tokens, which see the whole image) are taken out of the
// causal tiles and attend [window begin, end); the scalar reference over that range is the
// yardstick, and the causal rows around them are unchanged.
TEST(PagedAttention, BidirectionalRowsSeeUpToTheirEndAndCausalRowsAroundThemDoNot) {
  constexpr int64_t kHeads = 4, kHd = 32, kKv = 2;
  ThreadPool threads(2);
  for (int64_t window : {int64_t{0}, int64_t{8}}) {
    PagedKvPool pool(KvGeometry{1, kKv, kHd}, config_bs16(16ull << 20));
    PagedKvStore store(pool);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t T = 40, img0 = 10, img1 = 30;
    ASSERT_TRUE(store.reserve(0, T).ok());
    std::vector<SeqId> seqs(T, 0);
    std::vector<int64_t> pos(T), end(T, 0);
    std::vector<float> k(kKv * kHd), v(k.size());
    for (int64_t i = 0; i < T; ++i) {
      pos[i] = i;
      if (i >= img0 && i < img1) end[i] = img1;
      for (size_t j = 0; j < k.size(); ++j) k[j] = nd(rng), v[j] = nd(rng);
      store.store(0, 0, i, k.data(), v.data());
    }
    std::vector<float> q(static_cast<size_t>(T * kHeads * kHd)), out(q.size());
    for (float& x : q) x = nd(rng);
    AttnBatch ab = attn_batch(seqs, pos, q, out, kHeads, kKv, kHd, 0.2f);
    ab.window = window;
    ab.attend_end = end.data();
    store.attend_batch(0, ab, threads);
    const int n_q = static_cast<int>(kHeads / kKv);
    const KvLayerView view = pool.layer_view(0);
    const BlockTable& table = store.table(0);
    for (int64_t i = 0; i < T; ++i)
      for (int g = 0; g < kKv; ++g) {
        const int64_t off = (i * kHeads + g * n_q) * kHd;
        const int64_t p_end = end[i] ? end[i] : i + 1;
        const int64_t p_begin = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        std::vector<float> o(n_q * kHd), m(n_q), l(n_q);
        paged_attend_partial_ref(view, table.blocks().data(), p_begin, p_end, g, &q[off], n_q, 0.2f, o.data(), m.data(),
                                 l.data());
        for (int h = 0; h < n_q; ++h)
          for (int64_t d = 0; d < kHd; ++d)
            ASSERT_NEAR(out[off + h * kHd + d], o[h * kHd + d] / l[h], 2e-5f)
                << "window " << window << " row " << i << " head " << g * n_q + h;
      }
  }
}

TEST(PagedAttention, EmptyRangeGivesANeutralPartial) {
  Filled f;
  fill(f, KvType::F16, KvType::F16, 64, 20, 16, 1);
  auto q = random_q(64, 1);
  std::vector<float> o(64, 7.0f), m(1), l(1, 7.0f);
  paged_attend_partial(f.pool->layer_view(0), f.table.blocks().data(), 5, 5, 0, q.data(), 1, 1.0f, o.data(), m.data(),
                       l.data());
  EXPECT_EQ(l[0], 0.0f);
  EXPECT_TRUE(std::isinf(m[0]) && m[0] < 0);
  for (float x : o) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace pagoda
