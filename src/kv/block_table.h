// BlockId and BlockTable — a sequence's view of the paged KV pool.
//
// Contract: a BlockTable lists, by position, the pool blocks that hold one sequence's
// K/V: token position p lives in blocks()[p / block_size] at slot p % block_size, in
// every layer (one table serves all layers). The table holds one reference on each of
// its blocks; only PagedKvPool changes a table (append_tokens, fork, truncate, free),
// so the references and the pool's refcounts cannot drift apart. Move-only: copying a
// table would duplicate references without counting them (PagedKvPool::fork is the
// named, counted copy). Owned by whoever owns the sequence (the engine thread); the
// attention kernels read it concurrently while nobody changes it.
//
// Invariants (checked by PagedKvPool::check_table):
//  1. num_blocks() == ceil(num_tokens() / block_size).
//  2. Every listed block is live in the pool (refcount >= 1).
//  3. Destroying a table that still lists blocks leaks them: debug builds assert.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// The index of a block in the pool: [0, blocks_budget). A distinct type so a block id
// cannot be passed where a sequence id, position or count is expected.
enum class BlockId : int32_t {};
inline constexpr int32_t idx(BlockId b) { return static_cast<int32_t>(b); }

class BlockTable {
 public:
  BlockTable() = default;
  ~BlockTable() { assert(blocks_.empty() && "BlockTable destroyed while holding blocks: release it with PagedKvPool::free"); }
  BlockTable(BlockTable&& o) noexcept : blocks_(std::move(o.blocks_)), num_tokens_(o.num_tokens_) {
    o.blocks_.clear();
    o.num_tokens_ = 0;
  }
  BlockTable& operator=(BlockTable&& o) noexcept {
    assert(blocks_.empty() && "BlockTable overwritten while holding blocks");
    blocks_ = std::move(o.blocks_);
    num_tokens_ = o.num_tokens_;
    o.blocks_.clear();
    o.num_tokens_ = 0;
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

 private:
  friend class PagedKvPool;
  std::vector<BlockId> blocks_;  // [num_blocks] block ids by position / block_size
  int64_t num_tokens_ = 0;
};

}  // namespace pagoda
