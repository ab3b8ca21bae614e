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

#include "tensor/kv_types.h"

namespace pagoda {

// Default tokens per block: 32. Measured with bench/kv_bench.cpp BM_PagedAttentionBlockSize
// (one decode step's attention, f16 KV, 32 query / 8 KV heads of 64 = llama3.2-1b, 4096
// tokens of context, median of 3) on a 16-core Xeon with AVX-512:
//   block size        8      16     32     64     128    256
//   16 threads (us)   488    240    215    204    210    215
//   1 thread (us)     3048   1344   1322   1314   1380   1349
// 32 is within 5% of the best size at both thread counts, so paging costs nothing
// measurable against 256-token (nearly contiguous) blocks. Rejected 16: 12% slower at 16
// threads (every block restarts a memory stream; the kernel prefetches two blocks ahead,
// which recovers 1 thread but not 16). Rejected 64: 5% faster at 16 threads, but twice
// the tail waste per sequence (block_size / 2 tokens on average: 16 tokens = 512 KiB of
// f16 KV for llama3.2-1b at 32), twice the copy on a copy-on-write, and half the
// prefix-sharing granularity. 8 is 2.3x slower.
constexpr int kDefaultKvBlockSize = 32;

// The KV budget when --kv-cache-bytes is not given (choose_kv_budget): what this process
// may still take once the model is loaded — the smaller of MemAvailable and the cgroup's
// room (common/system_memory.h) — minus the weights' file pages MemAvailable still counts
// as free, minus a headroom of 10% of the memory limit (MemTotal or the cgroup limit),
// at least 512 MiB, for activations, scratch, the page cache of the rest and the system.
// The prefix cache keeps blocks until the pool is full, so a server grows to weights +
// budget: the budget must fit beside the weights, not in half of what was free before
// they loaded (the old default, which let a model over half the RAM get OOM-killed).
constexpr double kKvHeadroomFraction = 0.10;
constexpr uint64_t kKvMinHeadroomBytes = 512ull << 20;

struct KvConfig {
  int block_size = kDefaultKvBlockSize;  // tokens per block: power of two in [8, 256]
  uint64_t budget_bytes = 0;             // 0: resolve_kv_budget() picks the default
  KvType k_type = KvType::F16;
  KvType v_type = KvType::F16;
  // --kv-swa-full: sliding-window layers keep every block, like global ones (the window
  // is only a mask). Off: they are paged apart and give back what leaves the window
  // (kv_layer_groups.h).
  bool swa_full = false;
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

struct SystemMemory;

struct KvBudgetChoice {
  uint64_t bytes = 0;       // the budget to use
  uint64_t usable = 0;      // what memory allows (see kKvHeadroomFraction); 0: unknown
  bool capped = false;      // the request was larger than `usable` and was cut to it
  std::string warning;      // one line when capped, else empty
};
// requested: --kv-cache-bytes (0: the default). weights_unaccounted: bytes the loaded
// weights keep resident that MemAvailable still counts as free (file pages read in place).
// A request larger than what memory allows is capped to it, with a warning naming both;
// with nothing known about memory a request is used as given. Throws pagoda::Error when
// the default is asked for and no memory is left (or none is known), naming the numbers.
KvBudgetChoice choose_kv_budget(uint64_t requested, const SystemMemory& memory, uint64_t weights_unaccounted);
// config.budget_bytes if set, else the default from read_system_memory() (no weights
// counted): for callers that size a pool before any model is loaded (tests, benches).
uint64_t resolve_kv_budget(const KvConfig& config);

}  // namespace pagoda
