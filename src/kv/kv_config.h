// KvConfig — the user-facing settings of the paged KV cache, and the parsers the CLI uses
// to fill it from flags (--kv-block-size, --kv-cache-bytes, --kv-type-k, --kv-type-v).
//
// Contract: plain value type. The parsers throw pagoda::Error with a one-line message
// naming the flag and the offending text; resolve_kv_budget() reads /proc/meminfo. Any
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kv/kv_types.h"

namespace pagoda {

// Default tokens per block: 16. Measured on this project's CPU (AMD EPYC Zen 3, AVX2, 2
// threads; bench/kv_bench.cpp BM_PagedAttentionBlockSize, f16 KV, 8 KV heads x 128,
// GQA 4, decode): at 4096 tokens 8 / 16 / 32 / 64 / 128 tokens per block ran within
// a few percent of each other once a block held >= 16 positions (8 is slower: more
// block-boundary overhead per position). Smaller blocks waste less in each sequence's
// half-filled tail (on average block_size / 2 tokens per sequence: 8 tokens = 0.2% of a
// 4k context at 16, 64 tokens at 128) and let the prefix cache share at a finer grain.
// Rejected 32 (vLLM's CPU default): no measurable gain here, twice the tail waste.
// The exact numbers are in the #3 report and the comment in kv_bench.cpp.
constexpr int kDefaultKvBlockSize = 16;

// Default budget when --kv-cache-bytes is not given: this fraction of MemAvailable at
// start-up (after the model is mapped). Half leaves room for the page cache that holds
// mmap'd weights, activations and the rest of the system; memory is committed only as
// blocks are used, so an idle server does not hold it.
constexpr double kDefaultKvMemoryFraction = 0.5;

struct KvConfig {
  int block_size = kDefaultKvBlockSize;  // tokens per block: power of two in [8, 256]
  uint64_t budget_bytes = 0;             // 0: resolve_kv_budget() picks the default
  KvType k_type = KvType::F16;
  KvType v_type = KvType::F16;
};

// "4096", "512MiB", "4GiB", "1.5G", "300MB": a non-negative number with an optional
// suffix. Binary: K/KiB, M/MiB, G/GiB, T/TiB (k, m, g, t alone are binary, as in
// docker/ulimit); decimal: KB, MB, GB, TB; B or nothing: bytes. Case-insensitive, no
// spaces inside. Fractions are rounded down to a whole byte. Throws pagoda::Error naming
// `flag` for anything else or for values >= 2^63.
uint64_t parse_byte_size(std::string_view text, std::string_view flag = "--kv-cache-bytes");
// "1.50 GiB" style, for messages.
std::string format_bytes(uint64_t bytes);

// Throws pagoda::Error naming `flag` unless text is one of kv_type_names().
KvType parse_kv_type_flag(std::string_view text, std::string_view flag);

// Throws pagoda::Error unless block_size is a power of two in [8, 256].
void validate_kv_block_size(int64_t block_size, std::string_view flag = "--kv-block-size");

// MemAvailable from /proc/meminfo (bytes), or 0 if it cannot be read.
uint64_t mem_available_bytes();
// config.budget_bytes if set, else kDefaultKvMemoryFraction × mem_available_bytes().
// Throws pagoda::Error if neither is known.
uint64_t resolve_kv_budget(const KvConfig& config);

}  // namespace pagoda
