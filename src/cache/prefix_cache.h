// PrefixCache — reuse of computed KV blocks across requests (the prompt cache):
// token-exact, never consuming, with a byte ledger taken from the pool and LRU / TTL /
// capacity / entry limits. Follows vLLM's block_pool + kv_cache_manager split: the pool
// (kv/paged_kv_pool.h) owns blocks, refcounts and the evictable LRU list; this class
// owns the index (prefix_index.h) and every policy decision.
//
// Contract:
// - What is cached: full blocks of any sequence, content-addressed by a chained SHA-256
//   of (parent hash, tokens) whose first link is the request's namespace (model, KV
//   types, block size, cache key; block_hash.h), and the partial last block of a
//   finished sequence. The cache holds no copies: a cached block is a pool block marked
//   cached, shared by every sequence that uses it.
// - lookup() walks the prompt's chain from the start, then the children of the last
//   matching block for the longest token-exact continuation, and *borrows* what matches
//   (refcount + 1 on each block; evictable blocks come back into use). It never
//   consumes, trims or moves cached blocks: any number of requests can borrow one prefix
//   at once. cached_tokens is the exact common prefix, capped at prompt.size() - 1 so
//   the last prompt token is always recomputed (its logits start generation). A last
//   borrowed block used only in part is copied before the sequence writes into it
//   (PagedKvPool::append_tokens' copy-on-write).
// - insert() indexes a sequence's blocks: as its full blocks fill (finished = false)
//   and when it ends (finished = true, which also indexes the partial last block), so
//   the next turn of a conversation, which re-sends the history, hits it token for
//   token. A block whose content is already cached is not duplicated: the sequence's
//   table is repointed at the cached block and its own copy freed.
// - Retention: when the last sequence holding a cached block releases it, the block stays
//   cached (evictable) at the tail of the pool's evictable list. Eviction order, stated
//   once: least recently used first, where "used" is the moment the last holder released
//   the block (a block in use cannot be evicted, so the clock starts when it could be);
//   a table releases its blocks tail first, so within one chain the tail goes before the
//   head, and a shared head (a system prompt) outlives the conversations extending it.
//   Blocks held by a running sequence are never evicted.
// - Limits (PrefixCacheConfig), enforced whenever they could be exceeded (a block
//   becoming evictable, insert, lookup, set_config, enforce_limits):
//   capacity_bytes and max_entries evict whole LRU entries (the leaf that is the LRU
//   block and its ancestors up to the first one that is shared, in use, or a root);
//   ttl drops single blocks unused for ttl_ms, oldest first; pool pressure (the pool out
//   of free blocks) takes single blocks, oldest first. Entries held by running sequences
//   may keep entries above max_entries until they are released.
// - Sliding windows (kv/kv_layer_groups.h): a model with local (windowed) layer groups
//   has, per group-0 block, up to one *companion* block per local group: the local
//   layers' K/V of the same positions, marked cached in the pool (evictable, LRU, booked
//   like any block) but not in the index. What is kept for reuse: companions are attached
//   only at insert() -- the end of a prompt and the end of a sequence (a conversation
//   turn: the next turn re-sends the history and resumes there) -- and only for the local
//   blocks the sequence still holds then (its window plus one block); local blocks that
//   leave the window in between are freed, not cached, or the window would save nothing.
//   lookup() reuses a prefix of length c only when every local group has the companions
//   of the blocks c's window reads ([c - W + 1, c)): it tries the matched length, then
//   block boundaries below it, and takes the longest covered one (matched_tokens still
//   says how much group 0 matched). Dropping a group-0 block drops its companions; a
//   companion evicted alone (LRU, TTL, pool pressure) only shortens later hits.
// - Disk tier (disk_tier.h, optional, set_disk_tier): full blocks are written to it when
//   evicted (policy Evict: capacity, TTL, max_entries and pool pressure alike; a reset
//   writes nothing) or when indexed (policy All), and at flush_to_disk(). lookup()
//   continues a chain that ends in RAM on disk: the matched RAM blocks are pinned (a
//   borrow) while fresh pool blocks are acquired, filled from the records and indexed
//   and marked cached as if computed here; the first missing or failing record ends the
//   chain. Partial tails never go to disk (they have no hash of their own). Refused with
//   local layer groups (their companions are not written).
// - Disk I/O off the engine thread (set_disk_io, disk_io.h): spills are copied into the
//   I/O thread's bounded queue instead of written in place, and lookup() never reads the
//   disk. Restores are asynchronous, in three calls: begin_restore() walks the prompt's
//   chain past RAM onto disk (records, or spills still queued), pins the RAM part,
//   acquires fresh pool blocks for the disk part and hands their reads to the I/O thread
//   (each read into its own buffer, then copied into the block's slab: disk_io.h);
//   poll_restores() (each engine step) publishes the finished ones: the leading blocks
//   read intact are indexed and cached exactly as the synchronous path does (a block
//   someone computed meanwhile is used instead of the copy), pinned until end_restore();
//   the rest go back to the pool. The caller then
//   lookup()s (which borrows them) and end_restore()s (unpins; counts the disk hit).
//   end_restore() of a restore still in flight cancels it: DiskIo::cancel() fences the
//   thread (it never writes those blocks afterwards), what it read intact is published,
//   unpinned, and the other blocks go back to the pool at once. A stalled tier (one
//   read or write past DiskTierConfig::io_deadline_ms) is a miss: poll_restores() cuts
//   the restores in flight short the same way (their requests compute the rest; counted
//   in restore_timeouts) and begin_restore() starts none while it lasts.
//   A begin_restore() whose first disk block another restore in flight is reading joins
//   that restore (the same ticket, one more holder) instead of reading the blocks again:
//   a burst on one document restores it once. It gets what that restore covers (a longer
//   prompt computes the rest). A restore is unpinned and forgotten when its last holder
//   ends it (a cancel needs every holder gone).
// - Threads: the engine thread only (the pool's owner). No locks: stats() is a value
//   snapshot the engine publishes to other threads.
// - Lifetime: the pool must outlive the cache; the cache attaches itself as the pool's
//   BlockCacheListener and, when destroyed, uncaches every block (like reset()).
//
// Invariants (check_invariants(), called by tests after every operation):
//  1. A block is in the index  <=>  the pool marks it cached.
//  2. Holding is prefix-closed: a cached block in use has a parent that is a root or in
//     use; so every cached descendant of an evictable block is evictable, and an
//     evictable block comes before its evictable parent in the evictable list (the list
//     head is always a leaf).
//  3. Evictable-list stamps (last_used) do not decrease from head to tail.
//  4. No partial block's tokens are a prefix of a sibling's tokens (nothing redundant).
//  5. After enforcement: evictable_bytes <= capacity_bytes; entries > max_entries only
//     when nothing is evictable; no evictable block older than ttl at the last check.
//  6. The ledger: cached_blocks, evictable_blocks and their bytes equal recounts × the
//     pool's bytes_per_block (and the pool's own invariants hold).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_hash.h"
#include "common/growing_array.h"
#include "cache/disk_tier.h"
#include "cache/prefix_cache_config.h"
#include "cache/prefix_index.h"
#include "kv/kv_layer_groups.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {

class DiskIo;

// A request's cache identity: its namespace and whether it uses the cache at all
// (per-request opt-out: no lookup, no insert).
struct CacheKey {
  BlockHash ns;
  bool use_cache = true;
};

// Which tier a reset drops.
enum class CacheTier { Ram, Disk, All };

struct CacheHit {
  // Borrowed blocks holding positions [0, cached_tokens): adopt it as the sequence's
  // table (PagedKvStore::adopt), or give it back with PagedKvPool::free. Empty on a miss.
  BlockTable table;
  // The local groups' borrowed tables (kv_layer_groups.h), same length, released
  // entries before the window; adopt them with `table`. Empty without windows or on a miss.
  std::vector<BlockTable> local;
  int64_t cached_tokens = 0;   // exact reuse: forward the prompt from this position
  int64_t matched_tokens = 0;  // longest cached common prefix before the -1 cap and min_prefix
};

// Monotonic milliseconds (injectable for tests); default: std::chrono::steady_clock.
using CacheClock = std::function<int64_t()>;

class PrefixCache final : private BlockCacheListener {
 public:
  // model_id: what identifies the weights (see namespace_hash). groups: the store's layer
  // groups (none or one: no windows). Requires: the pool has no other cache listener and
  // no cached blocks.
  PrefixCache(PagedKvPool& pool, std::string model_id, const PrefixCacheConfig& config = {},
              CacheClock clock = {}, const KvLayerGroups& groups = {});
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The key of a request with this cache key / salt ("" for the shared namespace).
  CacheKey key(std::string_view cache_key = {}, bool use_cache = true) const;

  // Borrows the longest cached prefix of `prompt` (see the contract). A miss, the cache
  // off, or key.use_cache false give an empty table and cached_tokens 0.
  CacheHit lookup(const CacheKey& key, std::span<const int32_t> prompt);
  // Cuts a hit back to its first `n_tokens` positions (hybrid models: to the longest
  // recurrent-state snapshot it covers), giving back the blocks past them and the hit
  // counters' excess. A no-op when n_tokens >= hit.cached_tokens. With local (windowed)
  // tables, which cannot be rewound, any cut gives back the whole hit.
  void shorten(CacheHit& hit, int64_t n_tokens);

  // Indexes `table`'s blocks holding tokens[0, n): the floor(n / block_size) full blocks
  // and, when `finished`, the partial last block. May repoint table blocks at identical
  // cached ones. Call again as the sequence grows (already indexed blocks cost a hash
  // each); after finished = true the caller releases the table (the blocks stay cached).
  // Requires: tokens.size() <= table.num_tokens(), the K/V of positions [0, n) written,
  // and tokens are the sequence's tokens (a cached block of the table must hold them).
  // `local`: the sequence's local-group tables (windows: their held blocks become
  // companions, see the contract); empty without windows.
  void insert(const CacheKey& key, std::span<const int32_t> tokens, BlockTable& table, bool finished,
              std::span<BlockTable> local = {});

  // Applies TTL, capacity and max-entries now (the engine calls it on a timer so idle
  // blocks expire without traffic).
  void enforce_limits();
  // New limits, enforced at once; turning the cache off resets it.
  void set_config(const PrefixCacheConfig& config);
  const PrefixCacheConfig& config() const { return config_; }

  // Ram (or All): drops every cached block: evictable ones return to the pool's free
  // list (its bytes_in_use drops by their bytes); blocks running sequences hold stay with
  // them as ordinary blocks. Disk (or All): deletes every disk-tier record.
  void reset(CacheTier tier = CacheTier::All);

  // The second tier (disk_tier.h), or nullptr (detached). The cache writes blocks to it
  // (policy Evict: every full block it evicts; All: every full block when indexed) and
  // continues lookups on it. Requires: no local layer groups (see the contract), `disk`
  // outlives its attachment.
  void set_disk_tier(DiskTier* disk);
  // The disk tier's I/O thread (see the contract), or nullptr: synchronous disk I/O.
  // Requires: a disk tier attached, no restore outstanding when detaching.
  void set_disk_io(DiskIo* io);

  // Asynchronous restore (set_disk_io; see the contract). Starts reading the disk part of
  // `prompt`'s cached prefix; returns its ticket, or 0 when there is nothing to restore
  // (no disk block continues the RAM chain, no free pool block, no I/O thread, cache off).
  uint64_t begin_restore(const CacheKey& key, std::span<const int32_t> prompt);
  // True while its reads are in flight (poll_restores() has not published it yet).
  bool restore_pending(uint64_t ticket) const;
  // Publishes the restores the I/O thread finished (see the contract).
  void poll_restores();
  // The caller is done with the restore: cached_tokens is what its lookup() borrowed
  // (the disk hit is counted from it; 0 when the request went away). Unpins, or cancels
  // one in flight. Unknown tickets are ignored.
  void end_restore(uint64_t ticket, int64_t cached_tokens);
  // Pool blocks restores hold (in flight, or published and pinned).
  int64_t restore_blocks() const;
  // Restores whose reads are in flight.
  int64_t restores_in_flight() const;
  // Unpins every published restore (its blocks stay cached, evictable): the pool
  // needs them for a request that cannot be admitted otherwise. True when any was pinned.
  bool unpin_restores();
  // Blocks until the restores in flight are read, then publishes them (poll_restores).
  void wait_restores();
  // Writes every cached full block the disk tier lacks (a clean shutdown: with policy
  // Evict the RAM tier's blocks would be lost otherwise), least recently used first.
  void flush_to_disk();

  CacheStats stats() const;
  const PrefixIndex& index() const { return index_; }
  // The last time block b was used (released by its last holder, or indexed), in clock ms.
  int64_t last_used_ms(BlockId b) const { return last_used_[static_cast<size_t>(idx(b))]; }
  void check_invariants() const;

 private:
  enum class Reason { Capacity, Ttl, MaxEntries, PoolPressure };

  // BlockCacheListener
  void on_evictable(BlockId b) override;
  void on_evicted(BlockId b) override;

  int64_t now() const { return clock_(); }
  uint64_t evictable_bytes() const;
  // Removes block node b (an index block with its companions, or a companion) from the
  // index and the pool's cache (evictable: freed). Returns the blocks dropped.
  int64_t drop(BlockId b);
  // Writes full index node `node` to the disk tier (no-op without one, or for a partial).
  // Hands a full block to the disk tier; wait_for_room: a full write queue is waited for
  // (flush_to_disk) instead of dropping the block.
  void spill(int32_t node, bool wait_for_room = false);
  bool is_companion(BlockId b) const { return companion_of_[static_cast<size_t>(idx(b))] >= 0; }
  int32_t& companion(int32_t owner, int32_t group) {
    return companions_.at(static_cast<size_t>(owner) * static_cast<size_t>(n_local_) + static_cast<size_t>(group - 1));
  }
  int32_t companion(int32_t owner, int32_t group) const {
    return companions_[static_cast<size_t>(owner) * static_cast<size_t>(n_local_) + static_cast<size_t>(group - 1)];
  }
  // Uncaches owner's companions (evictable ones are freed); returns how many.
  int64_t drop_companions(int32_t owner);
  // Unlinks companion b from its owner (the pool's mark is the caller's business).
  void unlink_companion(BlockId b);
  // The longest length <= cached whose window the matched blocks' companions cover.
  int64_t window_covered(int64_t cached);
  // Drops every cached descendant of `node` (bottom-up); returns how many.
  int64_t drop_descendants(int32_t node);
  // Evicts the entry whose leaf is b: b, then ancestors while childless, evictable and
  // not a root. Credits `reason` with the entries that disappeared.
  void evict_entry(BlockId b, Reason reason);
  void expire_ttl();
  void credit(Reason reason, int64_t entries_removed, int64_t blocks);
  void drop_all();
  // Drops the partial children of `parent` whose tokens `full` covers (invariant 4).
  void drop_covered_partials(int32_t parent, std::span<const int32_t> full);

  // An asynchronous restore (see begin_restore).
  struct Restore {
    BlockHash ns;
    std::vector<BlockId> ram;        // the RAM chain before it, pinned
    std::vector<BlockHash> hashes;   // the disk blocks' chained hashes
    std::vector<int32_t> tokens;     // their tokens, block_size each
    std::vector<BlockId> fresh;      // held while the reads are in flight
    std::vector<BlockId> published;  // indexed and pinned once done
    int64_t from_tokens = 0;         // position of the first disk block
    bool done = false;               // published (fresh is empty)
    bool pinned = true;              // ram and published still pinned
    int32_t holders = 1;             // requests waiting for it (begin_restore calls that joined)
  };
  void publish(uint64_t ticket, Restore& r, int64_t n_ok);
  void unpin(Restore& r);

  PagedKvPool& pool_;
  DiskTier* disk_ = nullptr;  // the second tier, not owned
  DiskIo* io_ = nullptr;      // its I/O thread, not owned (null: synchronous)
  std::unordered_map<uint64_t, Restore> restores_;
  std::unordered_map<BlockHash, uint64_t, BlockHashHasher> reading_;  // disk blocks in flight -> restore
  std::vector<std::pair<uint64_t, int64_t>> done_scratch_;
  int64_t restore_timeouts_ = 0;  // restores cut short because the tier stalled
  PrefixIndex index_;
  std::string model_id_;
  PrefixCacheConfig config_;
  CacheClock clock_;
  // Per-block tables indexed by block id, grown with the ids used (growing_array.h).
  GrowingArray<int64_t> last_used_;  // ms, meaningful for cached blocks
  std::vector<BlockId> scratch_;    // lookup's matched blocks (grown as needed)
  CacheStats counters_;             // the counter fields; the rest is filled by stats()
  int32_t n_local_ = 0;             // local layer groups (0: no windows)
  int64_t window_ = 0;              // their window in tokens
  GrowingArray<int32_t> companions_;   // [owner × n_local + group - 1] companion of (owner, group), -1: none
  GrowingArray<int32_t> companion_of_; // owner of a companion block, -1: not one
  int64_t n_companions_ = 0;
  std::vector<int32_t> covered_prefix_;  // lookup scratch: prefix counts of fully covered blocks
  int64_t last_ttl_check_ms_ = 0;
  bool enforcing_ = false;
};

}  // namespace pagoda
