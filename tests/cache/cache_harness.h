// Test harness for the prefix cache: a small f32 pool whose K rows carry each token's
// identity (k[0] = token id, k[1] = position), so a test can check that borrowed blocks
// hold exactly the tokens of the prompt, and requests driven the way the engine will
// drive them: lookup → adopt → reserve → write the uncached suffix → insert → release.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "kv/paged_kv_pool.h"

namespace pagoda::testing {

inline const KvGeometry kTinyGeo{1, 1, 8};  // 1 layer, 1 KV head, head_dim 8

inline KvConfig tiny_config(int block_size, int64_t n_blocks) {
  KvConfig c;
  c.block_size = block_size;
  c.k_type = c.v_type = KvType::F32;
  PagedKvPool probe(kTinyGeo, [&] {
    KvConfig p = c;
    p.budget_bytes = 1 << 20;
    return p;
  }());
  c.budget_bytes = static_cast<uint64_t>(n_blocks) * probe.bytes_per_block();
  return c;
}

struct Request {
  CacheKey key;
  std::vector<int32_t> tokens;  // tokens whose K/V are written, in order
  BlockTable table;
  int64_t cached_tokens = 0;
};

class Harness {
 public:
  Harness(int block_size, int64_t n_blocks, PrefixCacheConfig cfg = {})
      : pool(kTinyGeo, tiny_config(block_size, n_blocks)),
        cache(pool, "test-model", cfg, [this] { return now_ms; }) {}

  // Admits `prompt`: borrows the cached prefix, allocates and writes the rest.
  Request admit(const std::vector<int32_t>& prompt, const CacheKey& key) {
    Request r;
    r.key = key;
    CacheHit hit = cache.lookup(key, prompt);
    r.cached_tokens = hit.cached_tokens;
    r.table = std::move(hit.table);
    EXPECT_EQ(r.table.num_tokens(), r.cached_tokens);
    r.tokens.assign(prompt.begin(), prompt.begin() + r.cached_tokens);
    append(r, std::vector<int32_t>(prompt.begin() + r.cached_tokens, prompt.end()));
    return r;
  }
  Request admit(const std::vector<int32_t>& prompt) { return admit(prompt, cache.key()); }

  // Appends tokens (a prefill chunk or decoded tokens) and writes their K/V.
  void append(Request& r, const std::vector<int32_t>& more) {
    const int64_t start = static_cast<int64_t>(r.tokens.size());
    const AllocResult a = pool.append_tokens(r.table, static_cast<int64_t>(more.size()));
    ASSERT_TRUE(a.ok()) << a.message;
    for (size_t i = 0; i < more.size(); ++i) {
      const int64_t pos = start + static_cast<int64_t>(i);
      float k[8] = {static_cast<float>(more[i]), static_cast<float>(pos)}, v[8] = {-k[0], -k[1]};
      pool.write_token(r.table, 0, pos, k, v);
      r.tokens.push_back(more[i]);
    }
  }

  // Indexes the finished sequence and releases it.
  void finish(Request& r) {
    cache.insert(r.key, r.tokens, r.table, /*finished=*/true);
    pool.free(r.table);
  }
  void drop(Request& r) { pool.free(r.table); }

  // True when the table's K rows hold r.tokens at their positions.
  bool holds_its_tokens(const Request& r) const {
    float row[8];
    for (size_t p = 0; p < r.tokens.size(); ++p) {
      pool.read_row(r.table, 0, static_cast<int64_t>(p), 0, false, row);
      if (row[0] != static_cast<float>(r.tokens[p]) || row[1] != static_cast<float>(p)) return false;
    }
    return true;
  }

  void check() const { cache.check_invariants(); }

  int64_t now_ms = 0;
  PagedKvPool pool;
  PrefixCache cache;
};

// Distinct token runs: tokens(n, base) = base, base + 1, ...
inline std::vector<int32_t> tokens(int64_t n, int32_t base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + static_cast<int32_t>(i);
  return t;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::vector<BlockId> ids(std::initializer_list<int32_t> v) {
  std::vector<BlockId> out;
  for (int32_t i : v) out.push_back(BlockId{i});
  return out;
}

}  // namespace pagoda::testing
