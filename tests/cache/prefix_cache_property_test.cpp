// Randomized property test: thousands of random operations (admit a prompt, decode,
// index a running sequence, finish, cancel, pool pressure, reset, TTL tick, new limits)
// on a small pool, checked after every step against a simple reference:
// - lookup reuses exactly the longest common prefix with any cached path of the
//   request's namespace (brute force over the index's paths), capped at len - 1 and
//   min_prefix; and never less than the common prefix with any sequence inserted
//   since the last eviction or reset (borrowing never consumes);
// - every borrowed block holds the prompt's tokens at their positions;
// - refcounts equal the number of tables holding each block (recounted), a block is
//   never both free and referenced, and the ledger (cached / evictable / in-use bytes)
//   equals a recount × the real block bytes;
// - no leaks: after everything is released and the cache reset, the pool is empty.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cache_harness.h"

namespace pagoda {
namespace {

using testing::Harness;
using testing::Request;

struct Inserted {
  int ns;
  std::vector<int32_t> tokens;
  int64_t epoch;  // evictions + resets when it was inserted
};

std::string dump(const std::vector<int32_t>& t) {
  std::string s;
  for (int32_t x : t) s += std::to_string(x);
  return s;
}

int64_t lcp(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return static_cast<int64_t>(n);
}

class Property {
 public:
  Property(uint32_t seed, PrefixCacheConfig cfg) : rng_(seed), cfg_(cfg), h_(8, 48, cfg) {
    for (int i = 0; i < 3; ++i) keys_.push_back(h_.cache.key("tenant" + std::to_string(i)));
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      const int kind = pick(100);
      if (kind < 30) admit();
      else if (kind < 45) decode();
      else if (kind < 52) index_running();
      else if (kind < 72) finish(true);
      else if (kind < 77) finish(false);
      else if (kind < 85) pressure();
      else if (kind < 87) reset();
      else if (kind < 97) tick();
      else new_limits();
      check(op);
    }
    while (!live_.empty()) finish(pick(2) == 0);
    h_.cache.reset();
    check(n_ops);
    const PoolStats s = h_.pool.stats();
    EXPECT_EQ(s.blocks_live, 0);
    EXPECT_EQ(s.blocks_evictable, 0);
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.tokens_in_use, 0);
  }

  int64_t admits = 0, hits = 0;

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t epoch() const {
    const CacheStats s = h_.cache.stats();
    return s.evicted_blocks + s.resets;
  }

  std::vector<int32_t> random_prompt() {
    std::vector<int32_t> p;
    if (!history_.empty() && pick(4) != 0) {  // continue or vary an earlier sequence
      const Inserted& src = history_[static_cast<size_t>(pick(static_cast<int>(history_.size())))];
      p.assign(src.tokens.begin(), src.tokens.begin() + pick(static_cast<int>(src.tokens.size()) + 1));
    }
    const int extra = 1 + pick(20);
    for (int i = 0; i < extra; ++i) p.push_back(1 + pick(3));  // tiny alphabet: many shared prefixes
    if (p.size() > 60) p.resize(60);
    return p;
  }

  void admit() {
    const int ns = pick(3);
    const auto prompt = random_prompt();
    h_.cache.enforce_limits();  // so the reference sees what lookup will see
    // Reference: the longest common prefix with any cached path of this namespace.
    int64_t want = 0;
    const int32_t root = h_.cache.index().find_root(keys_[ns].ns);
    for (const auto& path : h_.cache.index().leaf_paths())
      if (path.root == root) want = std::max(want, lcp(path.tokens, prompt));
    int64_t floor = 0;
    const Inserted* best = nullptr;
    for (const Inserted& ins : history_)
      if (ins.ns == ns && ins.epoch == epoch() && lcp(ins.tokens, prompt) > floor) {
        floor = lcp(ins.tokens, prompt);
        best = &ins;
      }
    EXPECT_GE(want, floor) << "a cached sequence lost tokens without an eviction or reset: " << dump(best->tokens)
                           << " prompt " << dump(prompt) << " ns " << ns << " root " << root;
    if (want < floor) {
      for (const auto& path : h_.cache.index().leaf_paths()) std::printf("path root %d: %s\n", path.root, dump(path.tokens).c_str());
      std::abort();
    }
    want = std::min<int64_t>(want, static_cast<int64_t>(prompt.size()) - 1);
    if (want < cfg_.min_prefix_tokens) want = 0;

    CacheHit hit = h_.cache.lookup(keys_[ns], prompt);
    ++admits;
    EXPECT_EQ(hit.cached_tokens, want);
    if (hit.cached_tokens > 0) ++hits;
    Request r;
    r.key = keys_[ns];
    r.table = std::move(hit.table);
    r.cached_tokens = hit.cached_tokens;
    r.tokens.assign(prompt.begin(), prompt.begin() + r.cached_tokens);
    EXPECT_TRUE(h_.holds_its_tokens(r));
    const std::vector<int32_t> rest(prompt.begin() + r.cached_tokens, prompt.end());
    if (h_.pool.blocks_needed(r.table, static_cast<int64_t>(rest.size())) > h_.pool.stats().blocks_available) {
      h_.pool.free(r.table);  // would not fit: the engine would queue it
      return;
    }
    h_.append(r, rest);
    live_.push_back({ns, std::move(r)});
  }

  void decode() {
    if (live_.empty()) return;
    auto& [ns, r] = live_[static_cast<size_t>(pick(static_cast<int>(live_.size())))];
    const int n = 1 + pick(6);
    if (r.tokens.size() + n > 60 || h_.pool.blocks_needed(r.table, n) > h_.pool.stats().blocks_available) return;
    std::vector<int32_t> more;
    for (int i = 0; i < n; ++i) more.push_back(1 + pick(3));
    h_.append(r, more);
  }

  void index_running() {
    if (live_.empty()) return;
    auto& [ns, r] = live_[static_cast<size_t>(pick(static_cast<int>(live_.size())))];
    h_.cache.insert(r.key, r.tokens, r.table, /*finished=*/false);
    EXPECT_TRUE(h_.holds_its_tokens(r));
  }

  void finish(bool insert) {
    if (live_.empty()) return;
    const size_t i = static_cast<size_t>(pick(static_cast<int>(live_.size())));
    auto& [ns, r] = live_[i];
    EXPECT_TRUE(h_.holds_its_tokens(r)) << "a shared or cached block was overwritten";
    // An eviction during the insert or the release (capacity, max entries) may take this
    // very sequence: it then counts as inserted before that eviction.
    const int64_t before = epoch();
    if (insert) h_.cache.insert(r.key, r.tokens, r.table, /*finished=*/true);
    h_.pool.free(r.table);
    if (insert && cfg_.enabled && static_cast<int64_t>(r.tokens.size()) >= cfg_.min_prefix_tokens)
      history_.push_back({ns, r.tokens, before});
    if (history_.size() > 200) history_.erase(history_.begin(), history_.begin() + 100);
    live_.erase(live_.begin() + static_cast<ptrdiff_t>(i));
  }

  void pressure() {
    BlockTable t;
    const int64_t want = 1 + pick(static_cast<int>(h_.pool.blocks_budget()));
    const int64_t n = std::min<int64_t>(want, h_.pool.stats().blocks_available) * h_.pool.block_size();
    ASSERT_TRUE(h_.pool.append_tokens(t, n).ok());
    h_.cache.check_invariants();
    h_.pool.free(t);
  }

  void reset() { h_.cache.reset(); }

  void tick() {
    h_.now_ms += pick(400);
    h_.cache.enforce_limits();
  }

  void new_limits() {
    const uint64_t bpb = h_.pool.bytes_per_block();
    cfg_.capacity_bytes = pick(2) == 0 ? PrefixCacheConfig::kUnlimitedBytes : static_cast<uint64_t>(pick(40)) * bpb;
    cfg_.max_entries = pick(2) == 0 ? PrefixCacheConfig::kUnlimitedEntries : pick(8);
    cfg_.ttl_ms = pick(2) == 0 ? 0 : 100 + pick(2000);
    cfg_.min_prefix_tokens = pick(3) == 0 ? 1 + pick(12) : 1;
    h_.cache.set_config(cfg_);
  }

  void check(int op) {
    h_.cache.check_invariants();
    // Reference ledger, recounted from the tables and the index.
    const int64_t n = h_.pool.blocks_budget();
    std::vector<int> refs(static_cast<size_t>(n), 0);
    for (auto& [ns, r] : live_) {
      h_.pool.check_table(r.table);
      for (BlockId b : r.table.blocks()) ++refs[static_cast<size_t>(idx(b))];
    }
    int64_t used = 0, cached = 0, evictable = 0;
    for (int32_t i = 0; i < n; ++i) {
      const BlockId b{i};
      ASSERT_EQ(h_.pool.refcount(b), refs[static_cast<size_t>(i)]) << "op " << op << " block " << i;
      const bool c = h_.cache.index().contains(b);
      cached += c;
      evictable += c && refs[static_cast<size_t>(i)] == 0;
      used += c || refs[static_cast<size_t>(i)] > 0;
    }
    const uint64_t bpb = h_.pool.bytes_per_block();
    const CacheStats s = h_.cache.stats();
    ASSERT_EQ(s.cached_bytes, static_cast<uint64_t>(cached) * bpb) << "op " << op;
    ASSERT_EQ(s.evictable_bytes, static_cast<uint64_t>(evictable) * bpb) << "op " << op;
    ASSERT_EQ(s.pool.bytes_in_use, static_cast<uint64_t>(used) * bpb) << "op " << op;
    ASSERT_EQ(s.pool.blocks_free + s.pool.blocks_live + s.pool.blocks_evictable, n);
  }

  std::mt19937 rng_;
  PrefixCacheConfig cfg_;
  Harness h_;
  std::vector<CacheKey> keys_;
  std::vector<std::pair<int, Request>> live_;
  std::vector<Inserted> history_;
};

TEST(PrefixCacheProperty, RandomOperationsKeepEveryInvariantAndTheReference) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    PrefixCacheConfig cfg;
    if (seed % 2 == 0) cfg.capacity_bytes = 0;  // replaced by new_limits() later anyway
    Property p(seed, cfg);
    p.run(3000);
    std::printf("seed %u: %lld admits, %lld hits\n", seed, static_cast<long long>(p.admits),
                static_cast<long long>(p.hits));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace pagoda
