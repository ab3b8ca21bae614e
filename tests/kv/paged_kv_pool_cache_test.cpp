// PagedKvPool's prefix-cache mechanism: cached blocks that reach refcount 0 stay as
// evictable (counted in bytes_in_use, tokens kept), are revived by share(), freed by
// uncache(), and taken by acquire() only after free and never-used blocks, oldest
// first, with the listener told; cached blocks are never written (copy-on-write).
#include <gtest/gtest.h>

#include <vector>

#include "kv/paged_kv_pool.h"

namespace pagoda {
namespace {

const KvGeometry kGeo{2, 2, 64};

KvConfig config(int block_size, uint64_t budget) {
  KvConfig c;
  c.block_size = block_size;
  c.budget_bytes = budget;
  c.k_type = c.v_type = KvType::F32;
  return c;
}

uint64_t bytes_per_block(int block_size) {
  PagedKvPool probe(kGeo, config(block_size, 1 << 20));
  return probe.bytes_per_block();
}

// Records what the pool reports, in order.
struct Recorder : BlockCacheListener {
  std::vector<BlockId> evictable, evicted;
  void on_evictable(BlockId b) override { evictable.push_back(b); }
  void on_evicted(BlockId b) override { evicted.push_back(b); }
};

std::vector<BlockId> ids(std::initializer_list<int32_t> v) {
  std::vector<BlockId> out;
  for (int32_t i : v) out.push_back(BlockId{i});
  return out;
}

TEST(PagedKvPoolCache, CachedBlockAtRefcountZeroStaysEvictableAndCounted) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  Recorder rec;
  pool.set_cache_listener(&rec);
  BlockTable t;
  ASSERT_TRUE(pool.append_tokens(t, 20).ok());  // blocks 0 1 2 (8 + 8 + 4 tokens)
  pool.mark_cached(t.block(0));
  pool.mark_cached(t.block(1));
  pool.check_invariants();
  pool.free(t);  // tail first: 2 (free), 1, 0 (evictable)
  pool.check_invariants();
  EXPECT_EQ(rec.evictable, ids({1, 0}));
  EXPECT_EQ(pool.evictable_list(), ids({1, 0}));
  EXPECT_EQ(pool.free_list(), ids({2}));
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.blocks_live, 0);
  EXPECT_EQ(s.blocks_cached, 2);
  EXPECT_EQ(s.blocks_evictable, 2);
  EXPECT_EQ(s.blocks_free, 6);
  EXPECT_EQ(s.blocks_available, 8);
  EXPECT_EQ(s.bytes_in_use, 2 * pool.bytes_per_block());
  EXPECT_EQ(s.tokens_in_use, 16);
  pool.set_cache_listener(nullptr);
}

TEST(PagedKvPoolCache, AcquireTakesFreeThenNeverUsedThenOldestEvictable) {
  PagedKvPool pool(kGeo, config(8, 4 * bytes_per_block(8)));
  Recorder rec;
  pool.set_cache_listener(&rec);
  BlockTable a, b;
  ASSERT_TRUE(pool.append_tokens(a, 16).ok());  // 0 1
  ASSERT_TRUE(pool.append_tokens(b, 8).ok());   // 2
  for (BlockId x : a.blocks()) pool.mark_cached(x);
  pool.free(a);  // evictable: 1, 0
  pool.free(b);  // free: 2
  // free list (2), then the never-used block 3, then evictable head 1, then 0.
  EXPECT_EQ(idx(*pool.acquire()), 2);
  EXPECT_EQ(idx(*pool.acquire()), 3);
  EXPECT_TRUE(rec.evicted.empty());
  EXPECT_EQ(idx(*pool.acquire()), 1);
  EXPECT_EQ(rec.evicted, ids({1}));
  EXPECT_FALSE(pool.is_cached(BlockId{1}));
  EXPECT_EQ(pool.num_tokens(BlockId{1}), 0);
  EXPECT_EQ(idx(*pool.acquire()), 0);
  EXPECT_EQ(rec.evicted, ids({1, 0}));
  EXPECT_FALSE(pool.acquire().has_value());
  pool.check_invariants();
  for (int i = 0; i < 4; ++i) pool.release(BlockId{i});
  pool.check_invariants();
  pool.set_cache_listener(nullptr);
}

TEST(PagedKvPoolCache, ShareRevivesAnEvictableBlockAndReleaseAppendsItAgain) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 24).ok());  // 0 1 2
  for (BlockId x : a.blocks()) pool.mark_cached(x);
  pool.free(a);  // 2 1 0
  pool.share(BlockId{1});
  EXPECT_EQ(pool.evictable_list(), ids({2, 0}));
  EXPECT_EQ(pool.refcount(BlockId{1}), 1);
  EXPECT_EQ(pool.stats().blocks_live, 1);
  EXPECT_EQ(pool.stats().blocks_evictable, 2);
  EXPECT_EQ(pool.stats().bytes_in_use, 3 * pool.bytes_per_block());
  pool.check_invariants();
  pool.release(BlockId{1});
  EXPECT_EQ(pool.evictable_list(), ids({2, 0, 1}));
  pool.check_invariants();
}

TEST(PagedKvPoolCache, UncacheFreesAnEvictableBlockAndLeavesALiveOneWithItsHolder) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 16).ok());  // 0 1
  pool.mark_cached(a.block(0));
  pool.mark_cached(a.block(1));
  pool.uncache(a.block(1));  // live: stays in a
  EXPECT_EQ(pool.refcount(a.block(1)), 1);
  pool.free(a);
  EXPECT_EQ(pool.evictable_list(), ids({0}));
  EXPECT_EQ(pool.free_list(), ids({1}));
  pool.uncache(BlockId{0});
  EXPECT_EQ(pool.free_list(), ids({1, 0}));
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
  EXPECT_EQ(pool.stats().tokens_in_use, 0);
  pool.check_invariants();
}

TEST(PagedKvPoolCache, AppendCopiesACachedPartlyUsedTailEvenWithOneHolder) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 8).ok());  // block 0 full
  std::vector<float> k(2 * 64), v(2 * 64);
  for (int64_t p = 0; p < 8; ++p)
    for (int layer = 0; layer < 2; ++layer) {
      for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(p * 1000 + i), v[i] = -k[i];
      pool.write_token(a, layer, p, k.data(), v.data());
    }
  pool.mark_cached(a.block(0));
  pool.free(a);
  // Borrow 5 of its 8 tokens and append: the cached block must not be written.
  const BlockId cached{0};
  BlockTable b = pool.borrow_table(std::span<const BlockId>(&cached, 1), 5);
  EXPECT_EQ(pool.refcount(cached), 1);
  EXPECT_EQ(pool.blocks_needed(b, 1), 1);
  ASSERT_TRUE(pool.append_tokens(b, 1).ok());
  EXPECT_NE(b.block(0), cached);
  EXPECT_EQ(pool.refcount(cached), 0);
  EXPECT_EQ(pool.evictable_list(), ids({0}));
  std::vector<float> row(64);
  pool.read_row(b, 1, 4, 1, false, row.data());
  EXPECT_EQ(row[3], static_cast<float>(4 * 1000 + 64 + 3));  // the copy holds the borrowed tokens
  pool.check_invariants();
  pool.free(b);
  pool.check_invariants();
}

TEST(PagedKvPoolCache, ReplaceBlockSharesTheReplacementAndReleasesTheOld) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a, b;
  ASSERT_TRUE(pool.append_tokens(a, 8).ok());   // 0
  ASSERT_TRUE(pool.append_tokens(b, 12).ok());  // 1 2
  pool.mark_cached(a.block(0));
  pool.free(a);  // 0 evictable
  pool.replace_block(b, 0, BlockId{0});
  EXPECT_EQ(b.block(0), BlockId{0});
  EXPECT_EQ(pool.refcount(BlockId{0}), 1);
  EXPECT_EQ(pool.free_list(), ids({1}));
  EXPECT_TRUE(pool.evictable_list().empty());
  pool.check_invariants();
  pool.check_table(b);
  pool.free(b);
  pool.check_invariants();
}

TEST(PagedKvPoolCache, TrimKeepsEvictableBlocks) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 24).ok());  // 0 1 2
  pool.mark_cached(a.block(2));
  pool.free(a);
  pool.trim();
  EXPECT_EQ(pool.stats().blocks_committed, 3);  // block 2 is cached at the top
  pool.uncache(BlockId{2});
  pool.trim();
  EXPECT_EQ(pool.stats().blocks_committed, 0);
  pool.check_invariants();
}

TEST(PagedKvPoolCacheDeathTest, WritingACachedBlockAborts) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 4).ok());
  pool.mark_cached(a.block(0));
  std::vector<float> k(2 * 64), v(2 * 64);
  EXPECT_DEATH(pool.write_token(a, 0, 0, k.data(), v.data()), "cached");
  pool.uncache(a.block(0));
  pool.free(a);
}

TEST(PagedKvPoolCacheDeathTest, SharingAFreeUncachedBlockAborts) {
  PagedKvPool pool(kGeo, config(8, 8 * bytes_per_block(8)));
  BlockTable a;
  ASSERT_TRUE(pool.append_tokens(a, 4).ok());
  pool.free(a);
  EXPECT_DEATH(pool.share(BlockId{0}), "share of free block");
}

}  // namespace
}  // namespace pagoda
