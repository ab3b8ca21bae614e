// The prefix cache with sliding-window layer groups: a sequence's local blocks that are
// still held when it is indexed become companions of its group-0 blocks; a later prompt
// borrows them exactly where its window reads (checked by the token and position each
// K row carries), falls back to a shorter prefix or none where the window was not kept,
// and eviction of a group-0 block takes its companions along. Invariants after each step.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cache/prefix_cache.h"
#include "kv/kv_layer_groups.h"
#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

constexpr int kBs = 8;
constexpr int64_t kW = 24;
constexpr int64_t kHd = 8;

struct Rig {
  KvLayerGroups groups = KvLayerGroups::for_windows(std::vector<int64_t>{0, kW, kW});  // 1 global, 2 local
  PagedKvPool pool;
  PagedKvStore store;
  PrefixCache cache;
  explicit Rig(int64_t n_blocks = 256)
      : pool(KvGeometry{1, 1, kHd, 3}, [n_blocks] {
          KvConfig c;
          c.block_size = kBs;
          c.budget_bytes = static_cast<uint64_t>(n_blocks) * 2 * kBs * kHd * 4;  // f32 K and V rows
          c.k_type = c.v_type = KvType::F32;
          return c;
        }()),
        store(pool, groups),
        cache(pool, "window-test", PrefixCacheConfig{}, {}, groups) {}

  // Admits tokens as sequence `seq` (borrowing what the cache has; with verify_borrowed,
  // checks the borrowed window's rows first), writes the rest with K rows [token,
  // position, layer], releases what left the window, as the engine does.
  int64_t run(SeqId seq, const std::vector<int32_t>& tokens, bool verify_borrowed = false) {
    CacheHit hit = cache.lookup(cache.key(), tokens);
    const int64_t from = hit.cached_tokens;
    store.adopt(seq, std::move(hit.table), std::move(hit.local));
    if (verify_borrowed && from > 0) expect_window_holds(seq, tokens, from);
    EXPECT_TRUE(store.reserve(seq, static_cast<int64_t>(tokens.size())).ok());
    for (int64_t p = from; p < static_cast<int64_t>(tokens.size()); ++p)
      for (int layer = 0; layer < 3; ++layer) {
        std::vector<float> k(kHd, 0.0f), v(kHd, 0.0f);
        k[0] = static_cast<float>(tokens[static_cast<size_t>(p)]);
        k[1] = static_cast<float>(p);
        k[2] = static_cast<float>(layer);
        store.store(layer, seq, p, k.data(), v.data());
      }
    store.release_out_of_window(seq, static_cast<int64_t>(tokens.size()));
    store.check_tables(seq);
    cache.check_invariants();
    return from;
  }
  void finish(SeqId seq, const std::vector<int32_t>& tokens) {
    SeqTables& t = store.mutable_tables(seq);
    cache.insert(cache.key(), tokens, t.main, /*finished=*/true, t.local);
    store.remove(seq);
    cache.check_invariants();
  }
  // Every row a query at `at` would read holds the right token: all of [0, at) in the
  // global layer, the window in each local layer.
  void expect_window_holds(SeqId seq, const std::vector<int32_t>& tokens, int64_t at) {
    const SeqTables& t = store.tables(seq);
    for (int64_t p = 0; p < at; ++p) {
      std::vector<float> k(kHd);
      pool.read_row(t.main, groups.slot[0], p, 0, false, k.data());
      ASSERT_EQ(k[0], static_cast<float>(tokens[static_cast<size_t>(p)])) << "global layer pos " << p;
      ASSERT_EQ(k[1], static_cast<float>(p));
    }
    for (int layer = 1; layer < 3; ++layer) {
      const BlockTable& lt = t.group(groups.group[static_cast<size_t>(layer)]);
      for (int64_t p = std::max<int64_t>(0, at - kW + 1); p < at; ++p) {
        std::vector<float> k(kHd);
        pool.read_row(lt, groups.slot[static_cast<size_t>(layer)], p, 0, false, k.data());
        ASSERT_EQ(k[0], static_cast<float>(tokens[static_cast<size_t>(p)])) << "layer " << layer << " pos " << p;
        ASSERT_EQ(k[1], static_cast<float>(p));
        ASSERT_EQ(k[2], static_cast<float>(layer));
      }
    }
  }
};

std::vector<int32_t> tokens(int64_t n, int32_t base) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(base + static_cast<int32_t>(i % 97));
  return t;
}

TEST(PrefixCacheWindow, ATurnKeepsItsWindowAndTheNextTurnResumesThere) {
  Rig r;
  const std::vector<int32_t> a = tokens(100, 1000);
  EXPECT_EQ(r.run(0, a), 0);
  r.finish(0, a);
  // Held at the end: blocks from (100 - 24 + 1 - 8) / 8 = 8 on, 5 per local group.
  CacheStats s = r.cache.stats();
  EXPECT_EQ(s.companion_blocks, 10);
  EXPECT_EQ(s.cached_blocks, 13 + 10);
  EXPECT_EQ(s.pool.blocks_cached_by_group, (std::vector<int64_t>{13, 5, 5}));
  EXPECT_EQ(s.pool.blocks_evictable_by_group, (std::vector<int64_t>{13, 5, 5}));

  std::vector<int32_t> next = a;
  for (int i = 0; i < 10; ++i) next.push_back(7);
  EXPECT_EQ(r.run(1, next), 100);
  EXPECT_EQ(r.store.tables(1).local[0].first_held_block(), (110 - kW + 1 - kBs) / kBs);  // its own window moved on
  r.expect_window_holds(1, next, 110);
  s = r.cache.stats();
  EXPECT_EQ(s.window_limited_hits, 0);
  r.finish(1, next);
}

TEST(PrefixCacheWindow, APrefixWhoseWindowWasNotKeptFallsBackToACoveredLengthOrNothing) {
  Rig r;
  const std::vector<int32_t> a = tokens(100, 1000);
  r.run(0, a);
  r.finish(0, a);
  // Shares 94 tokens: the window at 94 reads 71..93, blocks 8-11, all kept.
  std::vector<int32_t> b(a.begin(), a.begin() + 94);
  for (int i = 0; i < 20; ++i) b.push_back(5);
  CacheHit hit = r.cache.lookup(r.cache.key(), b);
  EXPECT_EQ(hit.cached_tokens, 94);
  ASSERT_EQ(hit.local.size(), 2u);
  EXPECT_EQ(hit.local[0].first_held_block(), (94 - kW + 1) / kBs);
  r.store.adopt(1, std::move(hit.table), std::move(hit.local));
  r.expect_window_holds(1, b, 94);
  r.store.remove(1);
  // Shares 60: every length up to 60 reads blocks before 8, which were never kept.
  std::vector<int32_t> c(a.begin(), a.begin() + 60);
  for (int i = 0; i < 20; ++i) c.push_back(5);
  hit = r.cache.lookup(r.cache.key(), c);
  EXPECT_EQ(hit.cached_tokens, 0);
  EXPECT_EQ(hit.matched_tokens, 60);
  EXPECT_TRUE(hit.local.empty());
  EXPECT_EQ(r.cache.stats().window_limited_hits, 1);
  // Short prompts need no window beyond what they cover: a prompt of 20 reads 0..19.
  Rig r2;
  const std::vector<int32_t> s = tokens(20, 50);
  r2.run(0, s);
  r2.finish(0, s);
  std::vector<int32_t> s2 = s;
  s2.push_back(3);
  EXPECT_EQ(r2.run(1, s2), 20);
  r2.expect_window_holds(1, s2, 20);
  r2.store.remove(1);
  r2.cache.check_invariants();
}

TEST(PrefixCacheWindow, PoolPressureOnAGroupZeroBlockTakesItsCompanionsAndShortensTheHit) {
  Rig r(39);  // exactly the 3 x 13 blocks the 100-token sequence reserves
  const std::vector<int32_t> a = tokens(100, 1000);
  r.run(0, a);
  r.finish(0, a);
  // 16 local blocks left the window (free), 23 are cached. Taking 17 blocks takes the free
  // ones, then the evictable list's head: the partial last block of group 0, released
  // first; its two companions go with it.
  std::vector<BlockId> taken;
  for (int i = 0; i < 17; ++i) taken.push_back(*r.pool.acquire());
  CacheStats s = r.cache.stats();
  EXPECT_EQ(s.cached_blocks, 12 + 8);
  EXPECT_EQ(s.companion_blocks, 8);
  EXPECT_EQ(s.evicted_blocks, 3);
  EXPECT_EQ(s.evictions_pool_pressure, 0);  // the entry is shorter, not gone
  r.cache.check_invariants();
  for (BlockId b : taken) r.pool.release(b);
  std::vector<int32_t> next = a;
  next.push_back(9);
  EXPECT_EQ(r.run(1, next), 96);  // 12 full blocks; the window at 96 (blocks 9-11) is kept
  r.expect_window_holds(1, next, 96);
  r.store.remove(1);
  // Capacity evicts in LRU order: the oldest evictable block is block 8's companion,
  // which the second run did not borrow (its window started at block 9): it goes alone.
  PrefixCacheConfig cfg = r.cache.config();
  cfg.capacity_bytes = r.cache.stats().evictable_bytes - 1;
  r.cache.set_config(cfg);
  r.cache.check_invariants();
  EXPECT_EQ(r.cache.stats().cached_blocks, 19);
  EXPECT_EQ(r.cache.stats().companion_blocks, 7);
  cfg.capacity_bytes = 0;  // then whole entries, companions included
  r.cache.set_config(cfg);
  r.cache.check_invariants();
  EXPECT_EQ(r.cache.stats().cached_blocks, 0);
  r.cache.reset();
  r.cache.check_invariants();
  EXPECT_EQ(r.pool.stats().blocks_cached, 0);
  EXPECT_EQ(r.pool.stats().blocks_live, 0);
}

// Random conversations on a small pool: prompts from a few families sharing prefixes,
// each continuing an earlier one or diverging from it, admitted as the engine admits them,
// finished (indexed) or dropped, while pool pressure and a byte cap evict blocks and
// companions. After every step the invariants hold, and every borrowed window holds exactly
// the tokens of its positions.
TEST(PrefixCacheWindow, RandomConversationsKeepTheInvariantsAndBorrowOnlyTrueWindows) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Rig r(120);  // 40 pages per group for sequences of up to ~150 tokens: evictions happen
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> history;  // finished prompts, to continue or diverge from
    int64_t hits = 0;
    for (int step = 0; step < 150; ++step) {
      std::vector<int32_t> p;
      if (!history.empty() && rng() % 4 != 0) {
        const std::vector<int32_t>& base = history[rng() % history.size()];
        const size_t keep = rng() % 2 ? base.size() : rng() % (base.size() + 1);
        p.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
      }
      const int64_t extra = 1 + static_cast<int64_t>(rng() % 40);
      for (int64_t i = 0; i < extra; ++i) p.push_back(static_cast<int32_t>(100 + rng() % 7));
      if (p.size() > 150) p.resize(150);
      const int64_t cached = r.run(0, p, /*verify_borrowed=*/true);
      if (cached > 0) ++hits;
      if (rng() % 3 != 0) {
        r.finish(0, p);
        history.push_back(p);
        if (history.size() > 12) history.erase(history.begin());
      } else {
        r.store.remove(0);
        r.cache.check_invariants();
      }
      if (step % 50 == 49) {  // tighten, then lift, the byte cap
        PrefixCacheConfig cfg = r.cache.config();
        cfg.capacity_bytes = cfg.capacity_bytes == PrefixCacheConfig::kUnlimitedBytes
                                 ? 20 * r.pool.bytes_per_block()
                                 : PrefixCacheConfig::kUnlimitedBytes;
        r.cache.set_config(cfg);
        r.cache.check_invariants();
      }
    }
    EXPECT_GT(hits, 20) << "seed " << seed;  // the test exercises reuse, not only misses
    EXPECT_GT(r.cache.stats().evicted_blocks, 0) << "seed " << seed;
    r.cache.reset();
    r.cache.check_invariants();
    EXPECT_EQ(r.pool.stats().blocks_live, 0);
  }
}

}  // namespace
}  // namespace pagoda
