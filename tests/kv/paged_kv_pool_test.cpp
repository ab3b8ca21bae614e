// PagedKvPool: accounting against the formula and the process's RSS, free-list order,
// refcounts, copy-on-write, running out, and misuse caught.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/paged_attention.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {
namespace {

KvConfig config(int block_size, uint64_t budget, KvType k = KvType::F16, KvType v = KvType::F16) {
  KvConfig c;
  c.block_size = block_size;
  c.budget_bytes = budget;
  c.k_type = k;
  c.v_type = v;
  return c;
}

const KvGeometry kGeo{3, 2, 64};  // 3 layers, 2 KV heads, head_dim 64

uint64_t page_round(uint64_t x) {
  const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (x + p - 1) / p * p;
}

std::vector<float> row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(PagedKvPool, RealBlockBytesFollowsGeometryAndTypes) {
  struct Case {
    KvType k, v;
    size_t per_row_k, per_row_v;  // data + sidecar bytes of one 64-value row
  };
  const Case cases[] = {
      {KvType::F32, KvType::F32, 256, 256}, {KvType::F16, KvType::F16, 128, 128},
      {KvType::BF16, KvType::F16, 128, 128}, {KvType::Q8, KvType::Q8, 64 + 4, 64 + 4},
      {KvType::Q4, KvType::Q4, 32 + 2 * 7, 32 + 2 * 7}, {KvType::Q8, KvType::Q4, 68, 46},
  };
  for (const Case& c : cases) {
    PagedKvPool pool(kGeo, config(16, 1 << 20, c.k, c.v));
    const size_t expect_layer = 16 * 2 * (c.per_row_k + c.per_row_v);
    EXPECT_EQ(pool.real_block_bytes(0), expect_layer) << kv_type_name(c.k) << "/" << kv_type_name(c.v);
    EXPECT_EQ(pool.bytes_per_block(), 3 * expect_layer);
    EXPECT_EQ(pool.blocks_budget(), static_cast<int64_t>((1 << 20) / (3 * expect_layer)));
  }
}

TEST(PagedKvPool, StatsMatchTheFormulaExactlyForKnownSequences) {
  PagedKvPool pool(kGeo, config(16, 64ull << 20));
  const uint64_t bpb = pool.bytes_per_block();
  const int64_t lens[] = {1, 15, 16, 17, 100, 0, 257, 33};
  std::vector<BlockTable> tables;
  int64_t blocks = 0, tokens = 0;
  for (int64_t n : lens) {
    tables.emplace_back();
    ASSERT_TRUE(pool.append_tokens(tables.back(), n).ok());
    blocks += (n + 15) / 16;
    tokens += n;
    pool.check_invariants();
    const PoolStats s = pool.stats();
    EXPECT_EQ(s.block_size, 16);
    EXPECT_EQ(s.blocks_budget, static_cast<int64_t>((64ull << 20) / bpb));
    EXPECT_EQ(s.blocks_committed, blocks);
    EXPECT_EQ(s.blocks_live, blocks);
    EXPECT_EQ(s.blocks_free, s.blocks_budget - blocks);
    EXPECT_EQ(s.bytes_per_block, bpb);
    EXPECT_EQ(s.bytes_budget, static_cast<uint64_t>(s.blocks_budget) * bpb);
    EXPECT_EQ(s.bytes_reserved, page_round(static_cast<uint64_t>(blocks) * bpb));
    EXPECT_EQ(s.bytes_in_use, static_cast<uint64_t>(blocks) * bpb);
    EXPECT_EQ(s.tokens_capacity, s.blocks_budget * 16);
    EXPECT_EQ(s.tokens_in_use, tokens);
  }
  // Releasing keeps memory committed (blocks go to the free list) and lowers use.
  pool.free(tables[4]);  // 100 tokens, 7 blocks
  pool.check_invariants();
  EXPECT_EQ(pool.stats().blocks_live, blocks - 7);
  EXPECT_EQ(pool.stats().blocks_committed, blocks);
  EXPECT_EQ(pool.stats().tokens_in_use, tokens - 100);
  EXPECT_EQ(pool.stats().bytes_in_use, static_cast<uint64_t>(blocks - 7) * bpb);
  for (auto& t : tables) pool.free(t);
  pool.check_invariants();
  EXPECT_EQ(pool.stats().blocks_live, 0);
  EXPECT_EQ(pool.stats().tokens_in_use, 0);
  EXPECT_EQ(pool.stats().blocks_free, pool.stats().blocks_budget);
}

TEST(PagedKvPool, HalfFilledTailCountsItsTokensOnly) {
  PagedKvPool pool(kGeo, config(32, 8ull << 20));
  BlockTable t;
  ASSERT_TRUE(pool.append_tokens(t, 40).ok());
  EXPECT_EQ(pool.stats().blocks_live, 2);
  EXPECT_EQ(pool.stats().tokens_in_use, 40);
  EXPECT_EQ(pool.num_tokens(t.block(1)), 8);
  ASSERT_TRUE(pool.append_tokens(t, 1).ok());
  EXPECT_EQ(pool.stats().tokens_in_use, 41);
  pool.truncate(t, 20);
  EXPECT_EQ(pool.stats().blocks_live, 1);
  EXPECT_EQ(pool.stats().tokens_in_use, 20);
  pool.check_invariants();
  pool.free(t);
}

TEST(PagedKvPool, AcquireTakesLeastRecentlyFreedAndTablesFreeTailFirst) {
  PagedKvPool pool(kGeo, config(8, 1 << 20));
  BlockTable a, b;
  ASSERT_TRUE(pool.append_tokens(a, 24).ok());  // blocks 0 1 2
  ASSERT_TRUE(pool.append_tokens(b, 16).ok());  // blocks 3 4
  EXPECT_EQ(idx(a.block(0)), 0);
  EXPECT_EQ(idx(b.block(1)), 4);
  pool.free(a);  // tail first: 2, 1, 0
  pool.free(b);  // 4, 3
  const std::vector<BlockId> expect = {BlockId{2}, BlockId{1}, BlockId{0}, BlockId{4}, BlockId{3}};
  EXPECT_EQ(pool.free_list(), expect);
  // Free blocks are reused before new ones are committed, head of the list first.
  EXPECT_EQ(idx(*pool.acquire()), 2);
  EXPECT_EQ(idx(*pool.acquire()), 1);
  pool.release(BlockId{2});
  const std::vector<BlockId> expect2 = {BlockId{0}, BlockId{4}, BlockId{3}, BlockId{2}};
  EXPECT_EQ(pool.free_list(), expect2);
  EXPECT_EQ(pool.stats().blocks_committed, 5);
  pool.release(BlockId{1});
  pool.check_invariants();
}

TEST(PagedKvPool, CopyOnWriteLeavesTheOtherSequenceBitForBitUnchanged) {
  for (KvType t : {KvType::F32, KvType::F16, KvType::Q8, KvType::Q4}) {
    PagedKvPool pool(kGeo, config(16, 4ull << 20, t, t));
    const int64_t kv = kGeo.n_kv_heads * kGeo.head_dim;
    BlockTable a;
    ASSERT_TRUE(pool.append_tokens(a, 20).ok());  // block 0 full, block 1 holds 4
    for (int layer = 0; layer < 3; ++layer)
      for (int64_t p = 0; p < 20; ++p) {
        auto k = row(kv, 1000 * layer + p), v = row(kv, 7777 + 1000 * layer + p);
        pool.write_token(a, layer, p, k.data(), v.data());
      }
    BlockTable b = pool.fork(a);
    EXPECT_EQ(pool.refcount(a.block(0)), 2);
    EXPECT_EQ(pool.refcount(a.block(1)), 2);
    std::vector<uint8_t> before(pool.block_bytes(a.block(1)), pool.block_bytes(a.block(1)) + pool.bytes_per_block());
    std::vector<uint8_t> before0(pool.block_bytes(a.block(0)), pool.block_bytes(a.block(0)) + pool.bytes_per_block());
    const PoolStats s0 = pool.stats();

    // b writes position 20 (into the shared tail): b gets a private copy of block 1.
    ASSERT_EQ(pool.blocks_needed(b, 1), 1);
    ASSERT_TRUE(pool.append_tokens(b, 1).ok());
    EXPECT_EQ(b.block(0), a.block(0));
    EXPECT_NE(b.block(1), a.block(1));
    EXPECT_EQ(pool.refcount(a.block(0)), 2);
    EXPECT_EQ(pool.refcount(a.block(1)), 1);
    EXPECT_EQ(pool.refcount(b.block(1)), 1);
    EXPECT_EQ(pool.stats().blocks_live, s0.blocks_live + 1);
    EXPECT_EQ(pool.stats().tokens_in_use, s0.tokens_in_use + 5);  // the copy holds 4 + 1
    for (int layer = 0; layer < 3; ++layer) {
      auto k = row(kv, 5), v = row(kv, 6);
      pool.write_token(b, layer, 20, k.data(), v.data());
      pool.write_token(b, layer, 19, v.data(), k.data());  // b may rewrite its own copy
    }
    // a's blocks: every byte as before.
    EXPECT_EQ(0, std::memcmp(before.data(), pool.block_bytes(a.block(1)), before.size())) << kv_type_name(t);
    EXPECT_EQ(0, std::memcmp(before0.data(), pool.block_bytes(a.block(0)), before0.size())) << kv_type_name(t);
    // b's copy carried a's first 3 rows of block 1 over.
    std::vector<float> ra(static_cast<size_t>(kGeo.head_dim)), rb(ra.size());
    for (int64_t p = 16; p < 19; ++p) {
      pool.read_row(a, 2, p, 1, true, ra.data());
      pool.read_row(b, 2, p, 1, true, rb.data());
      EXPECT_EQ(ra, rb) << "pos " << p;
    }
    pool.check_invariants();
    pool.check_table(a);
    pool.check_table(b);
    pool.free(a);
    pool.free(b);
    pool.check_invariants();
    EXPECT_EQ(pool.stats().blocks_live, 0);
    EXPECT_EQ(static_cast<int64_t>(pool.free_list().size()), pool.stats().blocks_committed);
  }
}

// The K layout the kernels read (kv_k_transposed): the float types up to head_dim 256
// keep each head's K as [head_dim][block_size], so element d of position `slot` lies at
// (d * block_size + slot) elements from k_rows(b, h); V and quantized K keep rows. Checked
// on the raw bytes against an independent encoding, and read_row returns the row either way.
TEST(PagedKvPool, FloatKIsStoredTransposedPerHeadAndReadBackAsRows) {
  EXPECT_TRUE(kv_k_transposed(KvType::F16, 256));
  EXPECT_TRUE(kv_k_transposed(KvType::BF16, 64));
  EXPECT_TRUE(kv_k_transposed(KvType::F32, 80));
  EXPECT_FALSE(kv_k_transposed(KvType::F16, 512));
  EXPECT_FALSE(kv_k_transposed(KvType::Q8, 64));
  EXPECT_FALSE(kv_k_transposed(KvType::Q4, 64));
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8}) {
    PagedKvPool pool(kGeo, config(16, 4ull << 20, t, t));
    const int64_t hd = kGeo.head_dim, kv = kGeo.n_kv_heads * hd;
    BlockTable a;
    ASSERT_TRUE(pool.append_tokens(a, 20).ok());
    for (int64_t p = 0; p < 20; ++p) {
      auto k = row(kv, 300 + static_cast<uint32_t>(p)), v = row(kv, 900 + static_cast<uint32_t>(p));
      pool.write_token(a, 1, p, k.data(), v.data());
    }
    const KvLayerView view = pool.layer_view(1);
    EXPECT_EQ(view.k_transposed, t != KvType::Q8) << kv_type_name(t);
    std::vector<float> got(static_cast<size_t>(hd)), want(got.size());
    std::vector<uint8_t> enc(kv_row_bytes(t, hd)), side(kv_row_sidecar_bytes(t, hd) + 1);
    for (int64_t p : {0, 7, 15, 16, 19})
      for (int64_t h = 0; h < kGeo.n_kv_heads; ++h) {
        const auto k = row(kv, 300 + static_cast<uint32_t>(p));
        kv_quantize_row(t, k.data() + h * hd, hd, enc.data(), side.data());
        kv_dequantize_row_ref(t, enc.data(), side.data(), hd, want.data());
        pool.read_row(a, 1, p, h, false, got.data());
        EXPECT_EQ(got, want) << kv_type_name(t) << " pos " << p << " head " << h;
        if (!view.k_transposed) continue;
        const size_t es = kv_row_bytes(t, hd) / static_cast<size_t>(hd);
        const uint8_t* kt = view.k_rows(a.block(p / 16), h);
        for (int64_t d = 0; d < hd; ++d)
          ASSERT_EQ(0, std::memcmp(kt + static_cast<size_t>(d * 16 + p % 16) * es, enc.data() + d * es, es))
              << kv_type_name(t) << " pos " << p << " head " << h << " dim " << d;
      }
    pool.free(a);
  }
}

TEST(PagedKvPool, AppendingPastAFullSharedBlockNeedsNoCopy) {
  PagedKvPool pool(kGeo, config(16, 4ull << 20));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 32).ok());
  BlockTable b = pool.fork(a);
  EXPECT_EQ(pool.blocks_needed(b, 1), 1);
  ASSERT_TRUE(pool.append_tokens(b, 1).ok());
  EXPECT_EQ(b.block(1), a.block(1));
  EXPECT_EQ(pool.refcount(a.block(1)), 2);
  EXPECT_EQ(pool.stats().blocks_live, 3);
  EXPECT_EQ(pool.stats().tokens_in_use, 33);
  pool.free(a);
  pool.free(b);
  pool.check_invariants();
}

TEST(PagedKvPool, OutOfBlocksAndNeverFitsReportBothNumbers) {
  const KvConfig c0 = config(16, 1 << 20);
  PagedKvPool probe(kGeo, c0);
  const uint64_t bpb = probe.bytes_per_block();
  PagedKvPool pool(kGeo, config(16, 10 * bpb + 7));
  ASSERT_EQ(pool.blocks_budget(), 10);
  BlockTable a, b;
  ASSERT_TRUE(pool.append_tokens(a, 150).ok());  // 10 blocks
  const PoolStats before = pool.stats();
  AllocResult r = pool.append_tokens(b, 1);
  EXPECT_EQ(r.status, AllocResult::Status::OutOfBlocks);
  EXPECT_EQ(r.blocks_needed, 1);
  EXPECT_EQ(r.blocks_available, 0);
  EXPECT_TRUE(b.empty());
  // a's partly filled tail has room: 10 more tokens need no block.
  EXPECT_TRUE(pool.append_tokens(a, 10).ok());
  r = pool.append_tokens(a, 1);
  EXPECT_EQ(r.status, AllocResult::Status::NeverFits);
  EXPECT_EQ(r.blocks_needed, 11);
  EXPECT_EQ(r.blocks_available, 10);
  EXPECT_NE(r.message.find("161 tokens needs 11 KV blocks"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("whole KV budget is 10 blocks (160 tokens"), std::string::npos) << r.message;
  EXPECT_EQ(a.num_tokens(), 160);
  EXPECT_EQ(pool.stats().blocks_live, before.blocks_live);
  EXPECT_FALSE(pool.never_fits(160).has_value());
  EXPECT_TRUE(pool.never_fits(161).has_value());
  // A COW that cannot get its copy fails as a whole.
  pool.truncate(a, 150);
  BlockTable c = pool.fork(a);
  r = pool.append_tokens(c, 1);
  EXPECT_EQ(r.status, AllocResult::Status::OutOfBlocks);
  EXPECT_EQ(r.blocks_needed, 1);
  EXPECT_EQ(c.block(9), a.block(9));
  EXPECT_EQ(c.num_tokens(), 150);
  pool.check_invariants();
  pool.free(a);
  pool.free(c);
}

TEST(PagedKvPool, ConstructionRejectsBadConfigurations) {
  EXPECT_THROW(PagedKvPool(kGeo, config(12, 1 << 20)), Error);
  EXPECT_THROW(PagedKvPool(kGeo, config(512, 1 << 20)), Error);
  EXPECT_THROW(PagedKvPool(kGeo, config(16, 100)), Error);  // less than one block
  EXPECT_THROW(PagedKvPool(KvGeometry{1, 1, 12}, config(16, 1 << 20, KvType::Q4, KvType::F16)), Error);
  try {
    PagedKvPool(kGeo, config(16, 100));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("less than one KV block"), std::string::npos) << e.what();
  }
}

using PagedKvPoolDeathTest = ::testing::Test;

TEST(PagedKvPoolDeathTest, DoubleReleaseAborts) {
  PagedKvPool pool(kGeo, config(16, 1 << 20));
  BlockId b = *pool.acquire();
  pool.release(b);
  EXPECT_DEATH(pool.release(b), "release of free block 0");
}

TEST(PagedKvPoolDeathTest, UnknownIdAborts) {
  PagedKvPool pool(kGeo, config(16, 1 << 20));
  EXPECT_DEATH(pool.share(BlockId{1 << 30}), "unknown block id");
  EXPECT_DEATH(pool.release(BlockId{-1}), "unknown block id");
}

TEST(PagedKvPoolDeathTest, ShareOfFreeBlockAborts) {
  PagedKvPool pool(kGeo, config(16, 1 << 20));
  EXPECT_DEATH(pool.share(BlockId{0}), "share of free block");
}

TEST(PagedKvPoolDeathTest, WritingASharedBlockAborts) {
  PagedKvPool pool(kGeo, config(16, 1 << 20));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 4).ok());
  BlockTable b = pool.fork(a);
  std::vector<float> k(128), v(128);
  EXPECT_DEATH(pool.write_token(b, 0, 3, k.data(), v.data()), "is shared");
  pool.free(a);
  pool.free(b);
}

// ---- resident memory -------------------------------------------------------------------

uint64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

TEST(PagedKvPool, ResidentMemoryGrowsByBytesReserved) {
  // 4 GiB budget: an idle pool holds none of it.
  const KvGeometry geo{16, 8, 64};  // llama3.2-1b: 512 KiB per 16-token f16 block
  const uint64_t rss0 = rss_bytes();
  PagedKvPool pool(geo, config(16, 4ull << 30));
  const uint64_t rss1 = rss_bytes();
  EXPECT_EQ(pool.stats().bytes_reserved, 0u);
  // The metadata vector (16 bytes per block) is the only up-front cost.
  EXPECT_LT(rss1 - std::min(rss1, rss0), 1ull << 20);

  std::vector<BlockTable> tables(64);
  for (auto& t : tables) ASSERT_TRUE(pool.append_tokens(t, 16 * 5 + 3).ok());  // 6 blocks each
  const uint64_t rss2 = rss_bytes();
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.blocks_committed, 64 * 6);
  EXPECT_EQ(s.bytes_reserved, page_round(64ull * 6 * pool.bytes_per_block()));
  const double growth = static_cast<double>(rss2 - rss1);
  std::printf("RSS growth %.0f bytes for bytes_reserved %llu (%+.3f%%)\n", growth,
              static_cast<unsigned long long>(s.bytes_reserved), 100.0 * (growth / s.bytes_reserved - 1.0));
  EXPECT_NEAR(growth, static_cast<double>(s.bytes_reserved), 0.02 * s.bytes_reserved)
      << "RSS grew " << growth << " bytes, bytes_reserved " << s.bytes_reserved;

  // Writing into committed blocks costs nothing more.
  std::vector<float> k(8 * 64, 0.5f), v(8 * 64, -0.5f);
  for (auto& t : tables)
    for (int layer = 0; layer < 16; ++layer) pool.write_token(t, layer, 82, k.data(), v.data());
  EXPECT_NEAR(static_cast<double>(rss_bytes() - rss1), static_cast<double>(s.bytes_reserved), 0.02 * s.bytes_reserved);

  // trim() gives the memory of freed blocks at the top back.
  for (size_t i = 32; i < tables.size(); ++i) pool.free(tables[i]);
  const uint64_t released = pool.trim();
  pool.check_invariants();
  EXPECT_EQ(pool.stats().blocks_committed, 32 * 6);
  EXPECT_EQ(pool.stats().bytes_reserved, page_round(32ull * 6 * pool.bytes_per_block()));
  EXPECT_EQ(released, s.bytes_reserved - pool.stats().bytes_reserved);
  const double growth3 = static_cast<double>(rss_bytes() - rss1);
  EXPECT_NEAR(growth3, static_cast<double>(pool.stats().bytes_reserved), 0.02 * pool.stats().bytes_reserved);
  // Reacquiring after a trim commits again.
  ASSERT_TRUE(pool.append_tokens(tables[40], 16).ok());
  EXPECT_EQ(pool.stats().blocks_committed, 32 * 6 + 1);
  pool.check_invariants();
  for (auto& t : tables) pool.free(t);
}

}  // namespace
}  // namespace pagoda
