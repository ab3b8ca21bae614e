// PagedKvPool — the KV cache memory of one model: fixed-size blocks of token slots,
// refcounted, with exact byte accounting.
//
// Contract:
// - What: for every layer a K array and a V array indexed by BlockId; block b holds
//   block_size consecutive token positions for all KV heads of its layer. Sequences hold
//   blocks through BlockTables (block_table.h) that only this class changes.
// - Memory: one address-space reservation of blocks_budget × bytes_per_block (mmap,
//   PROT_NONE, MAP_NORESERVE: no RSS, no commit charge) made at construction. Block ids
//   are handed out from the free list first and otherwise from the never-used range, in
//   increasing id order, so the used ids form a prefix [0, blocks_committed); that prefix
//   is made accessible (mprotect) and touched once, page by page, when it grows. So
//   bytes_reserved = round_up(blocks_committed × bytes_per_block, page) is exactly the
//   memory the kernel has committed for the pool (transparent huge pages are disabled on
//   the mapping: a 2 MiB fault would make RSS lumpy). trim() gives memory back. Reading
//   an uncommitted block faults instead of silently committing memory.
// - Layout: block b is one slab at base + b × bytes_per_block; inside it, per layer:
//   K data [n_kv_heads][block_size][kv_row_bytes(k_type)], V data likewise, K sidecar
//   [n_kv_heads][block_size][kv_row_sidecar_bytes(k_type)], V sidecar likewise (with
//   per-slot shapes, KvGeometry::slot_shapes, each slot its own; a block of a group whose
//   slots take fewer bytes than bytes_per_block leaves the rest unused). Head-major
//   inside a block, so attention for one KV head streams block_size rows contiguously.
//   A slab holding all layers makes one commit, one COW memcpy and one page-exact byte
//   count per block; the per-layer "K array" is the stride-bytes_per_block view
//   layer_view(layer) gives the kernels. No padding: the byte formula is the real cost.
// - Threads: one owner thread (the engine thread) calls every non-const method. While
//   it is not changing the pool, kernel workers may read block data (layer_view) and
//   const methods concurrently. Not internally locked.
// - Failures: running out of blocks is a return value (AllocResult / nullopt) for the
//   scheduler to act on; a request larger than the whole budget is NeverFits with both
//   numbers in the message. Misuse (double release, release of a free block, unknown id,
//   writing a shared block) is an always-on PAGODA_CHECK that aborts with file:line.
//
// - Prefix cache (src/cache/): a block can be marked *cached* (mark_cached): its
//   contents are indexed by a prefix cache and must never change again. A cached block
//   whose refcount drops to 0 is not freed: it becomes *evictable* and joins the tail of
//   the evictable list (an LRU list: the head was released longest ago), still holding
//   its tokens, until share() revives it (a cache hit), uncache() frees it (a cache
//   limit), or acquire() takes it because nothing else is free (pool pressure). The
//   pool tells one BlockCacheListener about the last two transitions it makes on its own
//   (on_evictable, on_evicted); the cache decides everything else.
//
// Invariants (check_invariants(), called by tests after every operation):
//  1. For b < blocks_committed with refcount(b) == 0: b is on exactly one list — the
//     evictable list if cached(b), else the free list. Live blocks are on no list.
//  2. b >= blocks_committed  =>  refcount(b) == 0, num_tokens(b) == 0, not cached, not
//     listed.
//  3. blocks_live == #{b : refcount(b) > 0}; blocks_evictable == evictable-list length;
//     free-list length == committed - live - evictable; blocks_cached == #{b : cached(b)}.
//  4. tokens_in_use == sum of num_tokens(b) over live and evictable blocks (blocks that
//     hold data); num_tokens in [0, block_size]; a free block has num_tokens 0.
//  5. A block with refcount > 1 or cached is never written: append_tokens copies it
//     first (COW), write_token checks it.
//  6. bytes_reserved covers [0, blocks_committed × bytes_per_block) rounded to pages.
// Both lists are index-linked doubly linked lists through the block metadata vector,
// each with a sentinel node: O(1) push/pop/unlink, no allocation after construction.
// Order (pinned by tests): acquire takes the free list's head (least recently freed),
// then a never-used block, and only then the evictable list's head (least recently
// released); release appends at the tail of its list, and a table is freed tail block
// first, so within one chain the end of a cached sequence is evicted before its head.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <limits>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "kv/block_table.h"
#include "kernels/paged_attention.h"
#include "kv/kv_config.h"
#include "kv/kv_layer_groups.h"
#include "tensor/kv_types.h"

namespace pagoda {

struct KvGeometry {
  int64_t n_layers = 0;  // layer slots per block (a page: KvLayerGroups::page_layers)
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int32_t n_groups = 1;  // layer groups the blocks are booked to (kv_layer_groups.h)
  // [n_groups][slots] each slot's head shape when layers differ in it (Gemma 4;
  // KvLayerGroups::slot_shapes); then n_kv_heads / head_dim are unused. Empty: every slot
  // of every group is n_kv_heads x head_dim, n_layers of them.
  std::vector<std::vector<KvSlotShape>> slot_shapes{};
};

// Every figure exact; read in O(1).
struct PoolStats {
  int64_t block_size = 0;        // tokens per block
  int64_t blocks_budget = 0;     // blocks the budget pays for
  int64_t blocks_committed = 0;  // blocks ever used (memory committed behind them)
  int64_t blocks_live = 0;       // refcount > 0 (held by tables)
  int64_t blocks_cached = 0;     // marked cached, live or evictable
  int64_t blocks_evictable = 0;  // cached with refcount 0 (kept for the prefix cache)
  int64_t blocks_free = 0;       // budget - live - evictable (free list + never used)
  int64_t blocks_available = 0;  // budget - live: what append_tokens may take (evicting)
  uint64_t bytes_per_block = 0;  // sum over a page's slots of real_block_bytes (the largest group's)
  uint64_t bytes_budget = 0;     // blocks_budget × bytes_per_block (address space only)
  uint64_t bytes_reserved = 0;   // committed memory: round_up(committed × per block, page)
  uint64_t bytes_in_use = 0;     // (blocks_live + blocks_evictable) × bytes_per_block:
                                 // every block that holds data, each counted once
  int64_t tokens_capacity = 0;   // blocks_budget × block_size
  int64_t tokens_in_use = 0;     // filled slots of live and evictable blocks
  // [n_groups] the same counts per layer group (kv_layer_groups.h); the totals above are
  // their sums. One entry for a model without sliding windows.
  std::vector<int64_t> blocks_live_by_group, blocks_cached_by_group, blocks_evictable_by_group;
};

// What a prefix cache hears from the pool about cached blocks. Called on the owner
// thread from inside the pool method that made the transition, with the pool's state
// consistent; the listener may call uncache() and const methods from the callback,
// nothing else (in particular not acquire, share or release).
class BlockCacheListener {
 public:
  virtual ~BlockCacheListener() = default;
  // A cached block's refcount reached 0 (release, and everything that releases:
  // truncate, free, append_tokens' copy-on-write, replace_block): b is now the tail of
  // the evictable list.
  virtual void on_evictable(BlockId b) = 0;
  // acquire() found no free and no never-used block and took b, the head of the
  // evictable list: b is no longer cached, its tokens are gone, and it is about to be
  // handed out. The listener drops it from its index.
  virtual void on_evicted(BlockId b) = 0;
};

struct AllocResult {
  enum class Status { Ok, OutOfBlocks, NeverFits };
  Status status = Status::Ok;
  int64_t blocks_needed = 0;     // new blocks the request needed (incl. a COW copy)
  int64_t blocks_available = 0;  // free blocks at the time (NeverFits: the whole budget)
  std::string message;           // empty when Ok; one line with both numbers otherwise
  bool ok() const { return status == Status::Ok; }
};

// KvLayerView (what the attention kernels read of one layer's blocks) is in
// kernels/paged_attention.h.

class PagedKvPool {
 public:
  // blocks_budget = floor(config.budget_bytes / bytes_per_block); config.budget_bytes must
  // be resolved (non-zero, see resolve_kv_budget). Throws pagoda::Error for a bad block
  // size, a type that cannot store head_dim, a budget below one block (message gives both
  // numbers), or a failed reservation.
  PagedKvPool(const KvGeometry& geometry, const KvConfig& config);
  ~PagedKvPool();
  PagedKvPool(const PagedKvPool&) = delete;
  PagedKvPool& operator=(const PagedKvPool&) = delete;

  // ---- geometry --------------------------------------------------------------------
  const KvGeometry& geometry() const { return geo_; }
  int64_t block_size() const { return block_size_; }
  KvType k_type() const { return k_type_; }
  KvType v_type() const { return v_type_; }
  // block_size × n_kv_heads × (kv_row_bytes + kv_row_sidecar_bytes) for K, plus V, of
  // slot `layer` of a page of group `group`.
  size_t real_block_bytes(int layer, int32_t group = 0) const;
  size_t bytes_per_block() const { return bytes_per_block_; }
  // KV bytes one token costs in a full block, all layers (bytes_per_block / block_size).
  double bytes_per_token() const { return static_cast<double>(bytes_per_block_) / block_size_; }
  int64_t blocks_budget() const { return blocks_budget_; }
  // What append_tokens may take now, evicting cached blocks: budget - live (O(1), no copy).
  int64_t blocks_available() const { return blocks_budget_ - blocks_live_; }
  int64_t blocks_evictable() const { return blocks_evictable_; }
  int64_t blocks_for_tokens(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }

  // ---- single blocks -----------------------------------------------------------------
  // A fresh block of layer group `group` with refcount 1 and num_tokens 0: the free
  // list's head, else a never-used block, else the evictable list's head (the listener
  // hears on_evicted); nullopt when all blocks are live.
  std::optional<BlockId> acquire(int32_t group = 0);
  // Requires: b live, or evictable (then it leaves the evictable list: a cache hit).
  // refcount + 1.
  void share(BlockId b);
  // Requires: b live. refcount - 1; at 0 the block goes to the tail of the free list,
  // or, when cached, to the tail of the evictable list (the listener hears on_evictable).
  void release(BlockId b);
  // Requires: b < blocks_budget.
  int refcount(BlockId b) const;
  int num_tokens(BlockId b) const;
  // The layer group b was last acquired for.
  int32_t group_of(BlockId b) const;

  // ---- prefix-cache support ---------------------------------------------------------------
  // At most one listener; nullptr detaches. The listener must outlive its attachment.
  void set_cache_listener(BlockCacheListener* listener);
  // Marks b cached: its contents never change again. Requires: b live, not cached.
  void mark_cached(BlockId b);
  // Clears the mark. Requires: b cached. An evictable b goes to the free list's tail
  // (no callback); a live b stays with its holders as an ordinary block.
  void uncache(BlockId b);
  bool is_cached(BlockId b) const;
  // The evictable list's head (released longest ago), or nullopt when it is empty.
  std::optional<BlockId> oldest_evictable() const;
  // A table of layer group `group` over existing blocks: shares each of `blocks`
  // (reviving evictable ones) and holds n_tokens positions. Requires: blocks.size() ==
  // blocks_for_tokens(n_tokens); a leading run of kNoBlock entries (released: a sliding
  // window's table), then blocks of `group`, live or evictable, the last one held. A
  // partly used last block is copied before the table writes to it (shared or cached).
  BlockTable borrow_table(std::span<const BlockId> blocks, int64_t n_tokens, int32_t group = 0);
  // Repoints `table`'s block block_idx at `with` (shared; reviving it if evictable) and
  // releases the block it replaces. Used by the prefix cache to share one copy of
  // identical blocks. Requires: block_idx is a full block of the table
  // ((block_idx + 1) × block_size <= table.num_tokens()), `with` live or evictable and
  // holding the same tokens (the caller's promise).
  void replace_block(BlockTable& table, int64_t block_idx, BlockId with);

  // ---- tables --------------------------------------------------------------------------
  // Gives `table` slots for n_new more tokens: appends blocks and, when the partly filled
  // tail block is shared, first replaces it by a private copy (copy-on-write: the whole
  // block, all layers, is copied; only this table is repointed). All or nothing: on
  // failure nothing changed. NeverFits when the table would need more blocks than the
  // whole budget.
  AllocResult append_tokens(BlockTable& table, int64_t n_new);
  // New blocks append_tokens(table, n_new) would take from the free pool right now.
  int64_t blocks_needed(const BlockTable& table, int64_t n_new) const;
  // A table sharing every block of `table` (refcount + 1 each), same num_tokens.
  BlockTable fork(const BlockTable& table);
  // Drops positions >= n_tokens (releasing whole blocks past the end, tail first).
  // Requires: n_tokens <= table.num_tokens(), and n_tokens == 0 or its last block held
  // (a table cannot be rewound into entries a window released).
  void truncate(BlockTable& table, int64_t n_tokens);
  // Releases the table's held blocks that lie wholly before position `pos` (a sliding
  // window no query reads again), oldest first, leaving kNoBlock entries; never the last
  // block. Returns how many were released.
  int64_t release_before(BlockTable& table, int64_t pos);
  // Releases every block (tail first) and empties the table.
  void free(BlockTable& table);
  // nullopt if a sequence of n_tokens fits in an empty pool, else the rejection message:
  // "needs N blocks (T tokens at B per block) but the whole KV budget is M blocks (...)".
  std::optional<std::string> never_fits(int64_t n_tokens) const;

  // ---- data ------------------------------------------------------------------------------
  // Stores one token's k, v ([n_kv_heads, head_dim] f32 each, the slot's shape) at `pos` of
  // `table` in slot `layer` of the table's group, converting to the pool's types.
  // Requires: pos < table.num_tokens(), the block holding pos has refcount 1 (always checked).
  void write_token(const BlockTable& table, int layer, int64_t pos, const float* k, const float* v);
  // Decodes one stored row to f32 [head_dim] (tests, debugging; scalar).
  void read_row(const BlockTable& table, int layer, int64_t pos, int64_t kv_head, bool value,
                float* out) const;
  // Slot `layer` of a page of group `group`.
  KvLayerView layer_view(int layer, int32_t group = 0) const;
  // Raw slab of block b (bytes_per_block bytes). Requires: b < blocks_committed.
  const uint8_t* block_bytes(BlockId b) const;
  // The writable slab of a freshly acquired block, for filling it with bytes saved from
  // block_bytes() (the prefix cache's disk tier); b then holds n_tokens positions.
  // Requires (checked): b live with refcount 1, not cached, n_tokens in [0, block_size].
  uint8_t* fill_block(BlockId b, int n_tokens);

  // ---- accounting ------------------------------------------------------------------------
  PoolStats stats() const;
  // Decommits never-again-needed memory: the free blocks at the top of the committed
  // range leave the free list and their whole pages go back to the kernel. Returns the
  // number of bytes released.
  uint64_t trim();
  // Aborts with a message on any broken invariant (see above). O(blocks_budget).
  void check_invariants() const;
  // Aborts unless `table` satisfies the BlockTable invariants against this pool.
  void check_table(const BlockTable& table) const;
  // Free-list order, head first (tests).
  std::vector<BlockId> free_list() const;
  // Evictable-list order, head (next to evict) first (tests).
  std::vector<BlockId> evictable_list() const;

 private:
  struct BlockMeta {
    int32_t refcount = 0;
    int32_t num_tokens = 0;
    int32_t prev = -1;  // list links (index into meta_): free list or evictable list
    int32_t next = -1;
    int32_t group = 0;  // the layer group it was acquired for
    bool cached = false;
  };

  void check_id(BlockId b, const char* what) const;
  // The two lists' sentinel nodes live apart from the blocks' metadata (which grows with
  // the committed prefix), under ids no block can have.
  static constexpr int32_t kFreeSentinel = std::numeric_limits<int32_t>::max();
  static constexpr int32_t kEvictableSentinel = kFreeSentinel - 1;
  int32_t free_sentinel() const { return kFreeSentinel; }
  int32_t evictable_sentinel() const { return kEvictableSentinel; }
  // Block i's metadata, or a sentinel's. Writes need a committed block or a sentinel;
  // reads of a never-committed block see an unused block (refcount 0, no tokens).
  BlockMeta& meta(int32_t i) {
    if (i >= kEvictableSentinel) return sentinels_[static_cast<size_t>(i - kEvictableSentinel)];
    PAGODA_CHECK(i >= 0 && static_cast<size_t>(i) < meta_.size(),
                 "KV pool: block " + std::to_string(i) + " was never used (" + std::to_string(meta_.size()) +
                     " committed)");
    return meta_[static_cast<size_t>(i)];
  }
  const BlockMeta& meta(int32_t i) const {
    if (i >= kEvictableSentinel) return sentinels_[static_cast<size_t>(i - kEvictableSentinel)];
    static const BlockMeta kUnused{};
    return static_cast<size_t>(i) < meta_.size() ? meta_[static_cast<size_t>(i)] : kUnused;
  }
  void list_push_back(int32_t sentinel, int32_t i);
  void list_unlink(int32_t i);
  std::vector<BlockId> list_of(int32_t sentinel) const;
  void to_free_list(int32_t i);  // a block that just reached refcount 0 and holds nothing
  void commit_blocks(int64_t n_blocks);  // grows the committed prefix to n_blocks
  uint64_t committed_bytes_for(int64_t n_blocks) const;
  void set_num_tokens(int32_t i, int32_t n);
  uint8_t* slab(BlockId b) const { return base_ + static_cast<size_t>(idx(b)) * bytes_per_block_; }

  // One slot of a page: where it starts in the block and its rows' shape and bytes.
  struct SlotLayout {
    size_t offset = 0;
    int64_t n_kv_heads = 0, head_dim = 0;
    size_t k_row = 0, v_row = 0, k_side = 0, v_side = 0;  // bytes of one row
    size_t bytes = 0;                                     // real_block_bytes
  };
  const SlotLayout& slot_layout(int layer, int32_t group) const;

  KvGeometry geo_;
  int64_t block_size_;
  KvType k_type_, v_type_;
  std::vector<std::vector<SlotLayout>> layout_;  // [n_groups][slots of the group's page]
  size_t bytes_per_block_;  // the largest group's page
  int64_t blocks_budget_;
  size_t page_bytes_;

  uint8_t* base_ = nullptr;  // the reservation
  size_t map_bytes_ = 0;
  int64_t blocks_committed_ = 0;
  uint64_t bytes_reserved_ = 0;
  int64_t blocks_live_ = 0;
  int64_t blocks_cached_ = 0;
  int64_t blocks_evictable_ = 0;
  int64_t tokens_in_use_ = 0;
  std::vector<int64_t> live_by_group_, cached_by_group_, evictable_by_group_;  // [n_groups]
  BlockCacheListener* listener_ = nullptr;
  // [blocks_committed]: grown as blocks are first used, so an idle or lightly used pool
  // holds metadata for what it used, not for its whole budget.
  std::vector<BlockMeta> meta_;
  std::array<BlockMeta, 2> sentinels_;  // [0] evictable list, [1] free list
};

}  // namespace pagoda
