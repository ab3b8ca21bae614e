// BlockHash — the content address of a cached KV block: a chained SHA-256.
//
// Contract:
// - namespace_hash() digests what makes two requests' K/V incompatible even for equal
//   tokens: the model identity, the KV element types, the block size, and the request's
//   cache key (salt). Requests whose namespaces differ never share a block.
// - block_hash(parent, tokens) = SHA-256(parent ‖ n_tokens ‖ tokens) where parent is the
//   previous block's hash, or the namespace hash for the first block of a sequence. So a
//   block's hash names the whole prefix up to and including it, and equal hashes mean
//   equal token prefixes in the same namespace (SHA-256 collisions are not planned for).
// - Byte encoding: lengths as little-endian u32/u64, tokens as little-endian i32, strings
//   length-prefixed (so "ab"+"c" and "a"+"bc" differ). Pure functions, any thread.
// Why SHA-256 and not a 64-bit hash: the index trusts a hash match across tenants, and a
// 64-bit hash collides (a birthday collision at ~4e9 blocks is reachable by an attacker
// choosing prompts). Cost (bench/prefix_cache_bench.cpp, OpenSSL 3.0 with SHA-NI, shared
// 2-core machine under load): ~0.9 us of CPU per 32-token block, ~110 us for 4,000 tokens.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "tensor/kv_types.h"

namespace pagoda {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const BlockHash&) const = default;
  std::string hex() const;  // 64 lowercase hex digits (tests, logs)
};

// For unordered containers: the digest is uniformly distributed, so its first 8 bytes
// are already a good hash.
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    uint64_t x;
    std::memcpy(&x, h.bytes.data(), sizeof x);
    return static_cast<size_t>(x);
  }
};

// The namespace of a request's first block. model_id: whatever identifies the weights
// (the engine passes name, architecture and a digest of the file's tensor directory).
BlockHash namespace_hash(std::string_view model_id, KvType k_type, KvType v_type, int64_t block_size,
                         std::string_view cache_key);

// The hash of one block (full, or the partial tail of a sequence) chained on `parent`.
// Requires: tokens.size() <= 256 (the largest block size).
BlockHash block_hash(const BlockHash& parent, std::span<const int32_t> tokens);

}  // namespace pagoda
