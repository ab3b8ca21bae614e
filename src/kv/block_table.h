// BlockId and BlockTable — a sequence's view of the paged KV pool.
//
// Contract: a BlockTable lists, by position, the pool blocks that hold one sequence's
// K/V for one layer group (kv_layer_groups.h; a model without sliding windows has one
// group, all layers): token position p lives in blocks()[p / block_size] at slot
// p % block_size, in every layer of the group. A table of a sliding-window group may
// have *released* its leading entries (PagedKvPool::release_before): entries before
// first_held_block() are kNoBlock and hold nothing, because no later query reads
// positions that far back. The table holds one reference on each held block; only PagedKvPool changes a table (append_tokens, fork, truncate, free),
// so the references and the pool's refcounts cannot drift apart. Move-only: copying a
// table would duplicate references without counting them (PagedKvPool::fork is the
// named, counted copy). Owned by whoever owns the sequence (the engine thread); the
// attention kernels read it concurrently while nobody changes it.
//
// Invariants (checked by PagedKvPool::check_table):
//  1. num_blocks() == ceil(num_tokens() / block_size) (released entries included).
//  2. Entries [0, first_held_block()) are kNoBlock; every later entry is a block live in
//     the pool (refcount >= 1) of the table's group; the last entry is always held.
//  3. Destroying a table that still lists blocks leaks them: debug builds assert.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <vector>

#include "tensor/block_id.h"

namespace pagoda {


class BlockTable {
 public:
  BlockTable() = default;
  // An empty table of layer group `group` (the blocks it acquires are booked to it).
  explicit BlockTable(int32_t group) : group_(group) {}
  ~BlockTable() { assert(blocks_.empty() && "BlockTable destroyed while holding blocks: release it with PagedKvPool::free"); }
  BlockTable(BlockTable&& o) noexcept
      : blocks_(std::move(o.blocks_)), num_tokens_(o.num_tokens_), first_held_(o.first_held_), group_(o.group_) {
    o.blocks_.clear();
    o.num_tokens_ = 0;
    o.first_held_ = 0;
  }
  BlockTable& operator=(BlockTable&& o) noexcept {
    assert(blocks_.empty() && "BlockTable overwritten while holding blocks");
    blocks_ = std::move(o.blocks_);
    num_tokens_ = o.num_tokens_;
    first_held_ = o.first_held_;
    group_ = o.group_;
    o.blocks_.clear();
    o.num_tokens_ = 0;
    o.first_held_ = 0;
    return *this;
  }
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  // Token positions [0, num_tokens()) have slots (their K/V written or about to be).
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  std::span<const BlockId> blocks() const { return blocks_; }
  // Requires: block_idx < num_blocks().
  BlockId block(int64_t block_idx) const {
    assert(block_idx >= 0 && block_idx < num_blocks());
    return blocks_[static_cast<size_t>(block_idx)];
  }
  bool empty() const { return blocks_.empty(); }
  // Entries before this one were released (kNoBlock); 0 unless a window dropped them.
  int64_t first_held_block() const { return first_held_; }
  // Blocks this table holds a reference on.
  int64_t num_held_blocks() const { return num_blocks() - first_held_; }
  bool holds(int64_t block_idx) const { return block_idx >= first_held_ && block_idx < num_blocks(); }
  int32_t group() const { return group_; }

 private:
  friend class PagedKvPool;
  std::vector<BlockId> blocks_;  // [num_blocks] block ids by position / block_size
  int64_t num_tokens_ = 0;
  int64_t first_held_ = 0;  // entries [0, first_held_) are kNoBlock
  int32_t group_ = 0;       // layer group (PagedKvPool books blocks per group)
};

}  // namespace pagoda
