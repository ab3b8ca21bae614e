// BlockId — the index of a block of the paged KV pool: [0, blocks_budget). A distinct type
// so a block id cannot be passed where a sequence id, position or count is expected. Below
// kernels/ (whose attention reads blocks by id) and kv/ (which hands them out), so neither
// refers up to the other for it.
#pragma once

#include <cstdint>

namespace pagoda {

enum class BlockId : int32_t {};
inline constexpr int32_t idx(BlockId b) { return static_cast<int32_t>(b); }
// A released entry of a sliding-window table (no block, no reference).
inline constexpr BlockId kNoBlock{-1};

}  // namespace pagoda
