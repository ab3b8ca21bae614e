// PrefixCacheConfig and CacheStats — the prefix (prompt) cache's limits, the parsers
// for their flags, and the numbers it reports.
//
// Flags (the CLI adds them; parsers here so their messages name the flag):
//   --prompt-cache on|off               the switch (default on)
//   --prompt-cache-bytes SIZE|unlimited cap on the real bytes of cached blocks that no
//                                       running sequence uses (evictable bytes);
//                                       default unlimited: only pool pressure evicts
//   --prompt-cache-max-entries N|unlimited  cap on distinct cached sequences (leaves of
//                                       the prefix tree); default unlimited
//   --prompt-cache-ttl DURATION|none    a block unused for this long is dropped: "300",
//                                       "300s", "250ms", "5m", "1.5h"; "0"/"none"/"off"
//                                       disable it (default none)
//   --prompt-cache-min-prefix N         a hit shorter than N tokens is not reused, and a
//                                       sequence shorter than N tokens is not indexed
//                                       (default 1: reuse any hit)
// Literal meaning for the caps: "--prompt-cache-bytes 0" keeps no evictable block (the
// cache then only shares blocks among sequences running at the same time).
// Contract: plain values; the parsers throw pagoda::Error with a one-line message naming
// the flag and the text. Any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "cache/disk_tier.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {

struct PrefixCacheConfig {
  static constexpr uint64_t kUnlimitedBytes = std::numeric_limits<uint64_t>::max();
  static constexpr int64_t kUnlimitedEntries = std::numeric_limits<int64_t>::max();
  static constexpr int64_t kNoTtl = 0;

  bool enabled = true;
  uint64_t capacity_bytes = kUnlimitedBytes;  // evictable bytes kept at most
  int64_t max_entries = kUnlimitedEntries;    // cached sequences (tree leaves) at most
  int64_t ttl_ms = kNoTtl;                    // > 0: drop blocks unused for this long
  int64_t min_prefix_tokens = 1;              // shortest hit reused / sequence indexed
};

bool parse_prompt_cache_switch(std::string_view text, std::string_view flag = "--prompt-cache");
uint64_t parse_prompt_cache_bytes(std::string_view text, std::string_view flag = "--prompt-cache-bytes");
int64_t parse_prompt_cache_max_entries(std::string_view text,
                                       std::string_view flag = "--prompt-cache-max-entries");
// Milliseconds; 0 (kNoTtl) for "0", "none", "off".
int64_t parse_prompt_cache_ttl(std::string_view text, std::string_view flag = "--prompt-cache-ttl");
int64_t parse_prompt_cache_min_prefix(std::string_view text,
                                      std::string_view flag = "--prompt-cache-min-prefix");

// Hybrid models' recurrent-state snapshots (state_snapshots.h); all 0 for other models.
struct SnapshotStats {
  int64_t snapshots = 0;
  uint64_t bytes = 0;           // snapshots x state_bytes
  uint64_t capacity_bytes = 0;
  uint64_t state_bytes = 0;     // one snapshot (all recurrent layers of one sequence)
  int64_t saves = 0;            // snapshots written (refreshes included)
  int64_t restores = 0;         // snapshots copied out for a request
  int64_t restored_tokens = 0;  // prefix tokens those restores covered
  int64_t evictions = 0;        // snapshots dropped to stay under the cap
  int64_t disk_writes = 0;      // block-aligned snapshots handed to the disk tier
  int64_t disk_restores = 0;    // restores read back from it (after a restart, or evicted from RAM)
};

// Every byte figure is a block count × the pool's real bytes_per_block; the cache holds
// references to pool blocks, never copies, so pool.bytes_in_use counts each block once
// whether a running sequence, the cache, or both hold it.
// Eviction counters count *entries* (cached sequences, i.e. leaves of the prefix tree)
// that disappeared, by reason; a block-by-block eviction that only shortens an entry
// adds to evicted_blocks but to no entry counter until the entry's last block goes.
struct CacheStats {
  bool enabled = false;
  int64_t entries = 0;             // distinct cached sequences (tree leaves)
  int64_t cached_blocks = 0;       // indexed blocks and their window companions, in use or not
  int64_t companion_blocks = 0;    // of which local-group companions (sliding windows)
  int64_t window_limited_hits = 0; // hits shortened because a local window was not cached
  uint64_t cached_bytes = 0;       // cached_blocks × bytes_per_block
  int64_t evictable_blocks = 0;    // cached blocks no running sequence holds
  uint64_t evictable_bytes = 0;    // evictable_blocks × bytes_per_block
  uint64_t capacity_bytes = 0;     // the --prompt-cache-bytes cap (kUnlimitedBytes: none)
  int64_t max_entries = 0;         // (kUnlimitedEntries: none)
  int64_t ttl_ms = 0;              // (0: none)
  int64_t min_prefix_tokens = 0;
  int64_t lookups = 0;             // lookup() calls with the cache on for the request
  int64_t hits = 0;                // lookups that reused at least one token
  int64_t queried_tokens = 0;      // prompt tokens looked up
  int64_t hit_tokens = 0;          // prompt tokens reused (sum of cached_tokens)
  int64_t inserts = 0;             // insert() calls that indexed at least one block
  int64_t inserted_blocks = 0;
  int64_t shared_on_insert = 0;    // blocks found already cached at insert (deduplicated)
  int64_t superseded_blocks = 0;   // partial blocks dropped because a longer one covers them
  int64_t evictions_lru = 0;       // entries evicted in LRU order: capacity + max_entries + pool pressure
  int64_t evictions_capacity = 0;
  int64_t evictions_ttl = 0;
  int64_t evictions_max_entries = 0;
  int64_t evictions_pool_pressure = 0;
  int64_t evicted_blocks = 0;      // blocks evicted for any reason (not superseded, not reset)
  int64_t resets = 0;
  PoolStats pool;
  DiskTierStats disk;              // the second tier (enabled false without one)
  SnapshotStats state_snapshots;   // hybrid models: the recurrent-state half of the cache
  // Hit rate in tokens, not blocks: hit_tokens / queried_tokens (0 before any lookup).
  double hit_rate() const { return queried_tokens ? static_cast<double>(hit_tokens) / queried_tokens : 0.0; }
};

}  // namespace pagoda
