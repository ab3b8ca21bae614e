// PrefixCache behaviour on small pools (block size 8), with expected block ids worked
// out by hand: exact reuse length, sharing without consuming, multi-turn, the eviction
// order, every limit, reset, isolation, and the byte ledger.
#include <gtest/gtest.h>

#include "cache_harness.h"

namespace pagoda {
namespace {

using testing::concat;
using testing::Harness;
using testing::ids;
using testing::Request;
using testing::tokens;

constexpr int kBs = 8;

TEST(PrefixCache, ReportsTheExactCommonPrefixForEveryLength) {
  // A cached 40-token sequence (5 full blocks); prompts share its first L tokens, then
  // diverge. cached_tokens == L for every L: aligned, unaligned, shorter than a block.
  for (int64_t L = 1; L <= 40; ++L) {
    Harness h(kBs, 32);
    const auto base = tokens(40, 1000);
    Request a = h.admit(base);
    EXPECT_EQ(a.cached_tokens, 0);
    h.finish(a);
    auto prompt = concat(std::vector<int32_t>(base.begin(), base.begin() + L), tokens(5, 5000));
    Request b = h.admit(prompt);
    EXPECT_EQ(b.cached_tokens, L) << "L=" << L;
    EXPECT_TRUE(h.holds_its_tokens(b)) << "L=" << L;
    h.check();
    // The same L-token prefix as the whole prompt: the last token is recomputed (L - 1).
    Request c = h.admit(std::vector<int32_t>(base.begin(), base.begin() + L));
    EXPECT_EQ(c.cached_tokens, L - 1) << "L=" << L;
    EXPECT_TRUE(h.holds_its_tokens(c));
    h.check();
    h.drop(b);
    h.drop(c);
    h.check();
  }
}

TEST(PrefixCache, FinishedSequenceTailIsReusedTokenExact) {
  // A 13-token sequence caches one full block and a 5-token partial block.
  Harness h(kBs, 16);
  Request a = h.admit(tokens(13, 1));
  h.finish(a);
  EXPECT_EQ(h.cache.stats().cached_blocks, 2);
  for (int64_t L = 1; L <= 13; ++L) {
    Request b = h.admit(concat(tokens(L, 1), tokens(3, 900)));
    EXPECT_EQ(b.cached_tokens, L);
    EXPECT_TRUE(h.holds_its_tokens(b));
    h.drop(b);
    h.check();
  }
}

TEST(PrefixCache, BorrowingNeverConsumesAndManyBorrowersShareOneCopy) {
  Harness h(kBs, 64);
  const auto base = tokens(27, 1);  // 3 full blocks + 3
  Request a = h.admit(base);
  h.finish(a);
  const CacheStats before = h.cache.stats();
  std::vector<Request> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(h.admit(concat(tokens(20 + i, 1), tokens(4, 100 * (i + 1)))));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(rs[i].cached_tokens, 20 + i);
    EXPECT_TRUE(h.holds_its_tokens(rs[i]));
  }
  // The first two full blocks are shared by all eight (refcount 8); nothing was copied
  // into the cache, moved or trimmed.
  EXPECT_EQ(h.pool.refcount(rs[0].table.block(0)), 8);
  EXPECT_EQ(h.pool.refcount(rs[0].table.block(1)), 8);
  const CacheStats during = h.cache.stats();
  EXPECT_EQ(during.cached_blocks, before.cached_blocks);
  EXPECT_EQ(during.evicted_blocks, 0);
  h.check();
  for (auto& r : rs) h.drop(r);
  // Still all there: a full re-read hits every cached token.
  Request again = h.admit(concat(base, tokens(2, 77)));
  EXPECT_EQ(again.cached_tokens, 27);
  h.drop(again);
  h.check();
}

TEST(PrefixCache, MultiTurnConversationHitsItsWholeHistory) {
  Harness h(kBs, 64);
  std::vector<int32_t> history;
  int32_t next = 1;
  for (int turn = 0; turn < 6; ++turn) {
    const auto prompt = concat(history, tokens(5 + turn, next));
    next += 100;
    Request r = h.admit(prompt);
    EXPECT_EQ(r.cached_tokens, static_cast<int64_t>(history.size())) << "turn " << turn;
    EXPECT_TRUE(h.holds_its_tokens(r));
    h.append(r, tokens(3 + turn, next));  // "generated" tokens
    next += 100;
    history = r.tokens;
    h.finish(r);
    h.check();
  }
  // Every turn's partial tail was superseded by the next turn's fuller block: one chain.
  EXPECT_EQ(h.cache.stats().entries, 1);
  EXPECT_EQ(h.cache.stats().cached_blocks, h.pool.blocks_for_tokens(static_cast<int64_t>(history.size())));
}

TEST(PrefixCache, IdenticalBlocksComputedTwiceAreSharedOnInsert) {
  Harness h(kBs, 16);
  Request a = h.admit(tokens(17, 1));  // blocks 0 1 2, both cold
  Request b = h.admit(tokens(17, 1));  // blocks 3 4 5
  EXPECT_EQ(b.cached_tokens, 0);
  h.finish(a);  // caches 0 1 2 (2 partial)
  h.cache.insert(b.key, b.tokens, b.table, /*finished=*/true);
  EXPECT_EQ(b.table.block(0), BlockId{0});  // repointed at the cached copies
  EXPECT_EQ(b.table.block(1), BlockId{1});
  EXPECT_EQ(b.table.block(2), BlockId{5});  // the tail is covered by block 2: not indexed
  EXPECT_EQ(h.cache.stats().shared_on_insert, 2);
  EXPECT_EQ(h.cache.stats().cached_blocks, 3);
  EXPECT_TRUE(h.holds_its_tokens(b));
  h.check();
  h.drop(b);
  EXPECT_EQ(h.pool.free_list(), ids({3, 4, 5}));  // replaced first, then b's own tail
  h.check();
}

TEST(PrefixCache, EvictsChainTailBeforeHeadAndSharedHeadLast) {
  // 6 blocks. Conversation A = S A1 A2 (blocks 0 1 2), conversation B = S B1 (S
  // borrowed, B1 in block 3). Released: A → 2 1 0; B → 3 0 (0 moves to the tail).
  Harness h(kBs, 6);
  const auto S = tokens(8, 1), A1 = tokens(8, 100), A2 = tokens(8, 200), B1 = tokens(8, 300);
  Request a = h.admit(concat(concat(S, A1), A2));
  h.finish(a);
  Request b = h.admit(concat(S, B1));
  EXPECT_EQ(b.cached_tokens, 8);
  EXPECT_EQ(idx(b.table.block(1)), 3);
  h.finish(b);
  EXPECT_EQ(h.pool.evictable_list(), ids({2, 1, 3, 0}));
  h.check();
  // Pool pressure: the never-used blocks 4 5 first, then A2 A1 B1 and S last.
  std::vector<int32_t> taken;
  for (int i = 0; i < 6; ++i) {
    taken.push_back(idx(*h.pool.acquire()));
    h.cache.check_invariants();
  }
  EXPECT_EQ(taken, (std::vector<int32_t>{4, 5, 2, 1, 3, 0}));
  const CacheStats s = h.cache.stats();
  EXPECT_EQ(s.evicted_blocks, 4);
  EXPECT_EQ(s.evictions_pool_pressure, 2);  // both conversations left entirely
  EXPECT_EQ(s.entries, 0);
  for (int i = 0; i < 6; ++i) h.pool.release(BlockId{i});
  h.check();
}

TEST(PrefixCache, LruOrderFollowsLastUseNotInsertion) {
  PrefixCacheConfig cfg;
  Harness h(kBs, 16, cfg);
  Request a = h.admit(tokens(8, 100));  // block 0
  h.finish(a);
  Request b = h.admit(tokens(8, 200));  // block 1
  h.finish(b);
  Request c = h.admit(tokens(8, 300));  // block 2
  h.finish(c);
  EXPECT_EQ(h.pool.evictable_list(), ids({0, 1, 2}));
  Request a2 = h.admit(concat(tokens(8, 100), tokens(1, 7)));  // A used again
  EXPECT_EQ(a2.cached_tokens, 8);
  h.drop(a2);
  EXPECT_EQ(h.pool.evictable_list(), ids({1, 2, 0}));
  cfg.max_entries = 2;
  h.cache.set_config(cfg);  // B is the least recently used entry
  EXPECT_FALSE(h.cache.index().contains(BlockId{1}));
  EXPECT_EQ(h.cache.stats().evictions_max_entries, 1);
  EXPECT_EQ(h.cache.stats().evictions_lru, 1);
  h.check();
}

TEST(PrefixCache, CapacityEvictsTheOldestWholeEntryAndBytesTrackTheRealOnes) {
  // Cap = 10 blocks; each entry is 4 blocks (between a third and a half of the cap).
  Harness probe(kBs, 1);
  const uint64_t bpb = probe.pool.bytes_per_block();
  PrefixCacheConfig cfg;
  cfg.capacity_bytes = 10 * bpb;
  Harness h(kBs, 64, cfg);
  for (int i = 0; i < 3; ++i) {
    Request r = h.admit(tokens(30, 1000 * (i + 1)));
    h.append(r, tokens(2, 1000 * (i + 1) + 30));
    h.finish(r);
    h.check();
    const CacheStats s = h.cache.stats();
    const int64_t want_blocks = i < 2 ? 4 * (i + 1) : 8;
    EXPECT_EQ(s.cached_blocks, want_blocks);
    EXPECT_EQ(s.evictable_blocks, want_blocks);
    EXPECT_EQ(s.cached_bytes, static_cast<uint64_t>(want_blocks) * bpb);
    EXPECT_EQ(s.evictable_bytes, static_cast<uint64_t>(want_blocks) * bpb);
    EXPECT_EQ(s.pool.bytes_in_use, static_cast<uint64_t>(want_blocks) * bpb);
    EXPECT_EQ(s.evictions_capacity, i < 2 ? 0 : 1);
    EXPECT_EQ(s.evicted_blocks, i < 2 ? 0 : 4);
  }
  // The first entry is gone, the other two hit in full.
  Request r1 = h.admit(concat(tokens(32, 1000), tokens(1, 9)));
  EXPECT_EQ(r1.cached_tokens, 0);
  h.drop(r1);
  Request r2 = h.admit(concat(tokens(32, 2000), tokens(1, 9)));
  EXPECT_EQ(r2.cached_tokens, 32);
  h.drop(r2);
  h.check();
}

TEST(PrefixCache, TtlDropsBlocksUnusedForTtlCountingFromTheirLastUse) {
  PrefixCacheConfig cfg;
  cfg.ttl_ms = 1000;
  Harness h(kBs, 16, cfg);
  Request a = h.admit(tokens(8, 100));
  h.finish(a);  // released at t=0
  h.now_ms = 500;
  Request b = h.admit(tokens(8, 200));
  h.finish(b);  // released at t=500
  h.now_ms = 999;
  h.cache.enforce_limits();
  EXPECT_EQ(h.cache.stats().entries, 2);
  h.now_ms = 1000;
  h.cache.enforce_limits();
  EXPECT_EQ(h.cache.stats().entries, 1);
  EXPECT_EQ(h.cache.stats().evictions_ttl, 1);
  EXPECT_EQ(h.cache.stats().evictions_lru, 0);
  h.check();
  // A hit at t=1200 held until t=1300 restarts B's clock from 1300.
  h.now_ms = 1200;
  Request b2 = h.admit(concat(tokens(8, 200), tokens(1, 5)));
  EXPECT_EQ(b2.cached_tokens, 8);
  h.now_ms = 1300;
  h.drop(b2);
  h.now_ms = 2299;
  h.cache.enforce_limits();
  EXPECT_EQ(h.cache.stats().entries, 1);
  h.now_ms = 2300;
  Request miss = h.admit(concat(tokens(8, 200), tokens(1, 5)));  // lookup expires first
  EXPECT_EQ(miss.cached_tokens, 0);
  EXPECT_EQ(h.cache.stats().evictions_ttl, 2);
  h.drop(miss);
  h.check();
}

TEST(PrefixCache, MaxEntriesEvictsTheLeastRecentlyUsedSequenceWhole) {
  PrefixCacheConfig cfg;
  cfg.max_entries = 2;
  Harness h(kBs, 32, cfg);
  for (int i = 0; i < 3; ++i) {
    Request r = h.admit(tokens(20, 100 * (i + 1)));  // 3 blocks each
    h.finish(r);
    h.check();
  }
  const CacheStats s = h.cache.stats();
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.evictions_max_entries, 1);
  EXPECT_EQ(s.evicted_blocks, 3);  // the whole first sequence
  EXPECT_EQ(s.cached_blocks, 6);
}

TEST(PrefixCache, EvictionNeverTouchesBlocksInUse) {
  PrefixCacheConfig cfg;
  cfg.capacity_bytes = 0;  // nothing evictable may stay
  cfg.max_entries = 0;
  Harness h(kBs, 4, cfg);
  Request a = h.admit(tokens(24, 1));                     // blocks 0 1 2
  h.cache.insert(a.key, a.tokens, a.table, false);       // indexed while running
  h.check();
  EXPECT_EQ(h.cache.stats().cached_blocks, 3);           // in use: kept despite both caps
  Request b = h.admit(concat(tokens(16, 1), tokens(4, 50)));  // borrows 0 1 while a runs
  EXPECT_EQ(b.cached_tokens, 16);
  // Pool pressure cannot take in-use blocks: 4 blocks, 4 live.
  EXPECT_FALSE(h.pool.acquire().has_value());
  h.drop(a);  // block 2 becomes evictable and goes at once (cap 0); 0 1 still held by b
  EXPECT_EQ(h.cache.stats().cached_blocks, 2);
  EXPECT_TRUE(h.holds_its_tokens(b));
  h.check();
  h.drop(b);
  EXPECT_EQ(h.cache.stats().cached_blocks, 0);
  EXPECT_EQ(h.pool.stats().bytes_in_use, 0u);
  h.check();
}

TEST(PrefixCache, ResetFreesEveryCachedBlockNotInUse) {
  Harness h(kBs, 32);
  Request a = h.admit(tokens(40, 1));
  h.finish(a);
  Request b = h.admit(concat(tokens(16, 1), tokens(8, 500)));  // holds blocks 0 1
  const uint64_t bpb = h.pool.bytes_per_block();
  EXPECT_EQ(h.pool.stats().bytes_in_use, 6 * bpb);  // 5 cached + b's own block
  h.cache.reset();
  h.check();
  EXPECT_EQ(h.cache.stats().cached_blocks, 0);
  EXPECT_EQ(h.cache.stats().resets, 1);
  EXPECT_EQ(h.pool.stats().bytes_in_use, 3 * bpb);  // only b's blocks
  EXPECT_EQ(h.pool.stats().blocks_evictable, 0);
  EXPECT_TRUE(h.holds_its_tokens(b));
  h.drop(b);
  EXPECT_EQ(h.pool.stats().bytes_in_use, 0u);
  h.check();
}

TEST(PrefixCache, DifferentCacheKeysNeverShareAndOptOutNeitherReadsNorWrites) {
  Harness h(kBs, 32);
  const CacheKey alice = h.cache.key("alice"), bob = h.cache.key("bob");
  Request a = h.admit(tokens(20, 1), alice);
  h.finish(a);
  Request b = h.admit(tokens(20, 1), bob);
  EXPECT_EQ(b.cached_tokens, 0);
  h.finish(b);
  EXPECT_EQ(h.cache.stats().cached_blocks, 6);  // two copies, one per tenant
  Request off = h.admit(tokens(20, 1), h.cache.key("alice", /*use_cache=*/false));
  EXPECT_EQ(off.cached_tokens, 0);
  h.finish(off);
  EXPECT_EQ(h.cache.stats().cached_blocks, 6);
  Request a2 = h.admit(tokens(20, 1), alice);
  EXPECT_EQ(a2.cached_tokens, 19);
  h.drop(a2);
  h.check();
}

TEST(PrefixCache, MinPrefixSkipsShortHitsAndShortSequences) {
  PrefixCacheConfig cfg;
  cfg.min_prefix_tokens = 10;
  Harness h(kBs, 32, cfg);
  Request shorty = h.admit(tokens(9, 1));
  h.finish(shorty);
  EXPECT_EQ(h.cache.stats().cached_blocks, 0);
  Request a = h.admit(tokens(20, 1));
  h.finish(a);
  Request b = h.admit(concat(tokens(9, 1), tokens(3, 99)));
  EXPECT_EQ(b.cached_tokens, 0);
  CacheHit hit = h.cache.lookup(h.cache.key(), tokens(11, 1));
  EXPECT_EQ(hit.matched_tokens, 11);
  EXPECT_EQ(hit.cached_tokens, 10);
  h.pool.free(hit.table);
  Request c = h.admit(concat(tokens(10, 1), tokens(3, 99)));
  EXPECT_EQ(c.cached_tokens, 10);
  h.drop(b);
  h.drop(c);
  h.check();
}

TEST(PrefixCache, DisabledCacheDoesNothingAndTurningItOffResets) {
  PrefixCacheConfig cfg;
  Harness h(kBs, 32, cfg);
  Request a = h.admit(tokens(20, 1));
  h.finish(a);
  EXPECT_EQ(h.cache.stats().cached_blocks, 3);
  cfg.enabled = false;
  h.cache.set_config(cfg);
  EXPECT_EQ(h.cache.stats().cached_blocks, 0);
  EXPECT_FALSE(h.cache.stats().enabled);
  Request b = h.admit(tokens(20, 1));
  EXPECT_EQ(b.cached_tokens, 0);
  h.finish(b);
  EXPECT_EQ(h.pool.stats().bytes_in_use, 0u);
  EXPECT_EQ(h.cache.stats().lookups, 1);
  h.check();
}

TEST(PrefixCache, HitRateIsInTokens) {
  Harness h(kBs, 32);
  Request a = h.admit(tokens(20, 1));
  h.finish(a);
  Request b = h.admit(concat(tokens(15, 1), tokens(5, 50)));
  h.drop(b);
  const CacheStats s = h.cache.stats();
  EXPECT_EQ(s.lookups, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.queried_tokens, 40);
  EXPECT_EQ(s.hit_tokens, 15);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 15.0 / 40.0);
}

}  // namespace
}  // namespace pagoda
