// KV bytes per token of Gemma 3 shapes at 8k context: every layer holding every block
// (what the pool does today: one block slab covers all layers, and local layers only mask
// positions outside their window), against local layers holding only their window's
// blocks (the layer-group design of docs/sliding-window-kv.md, not implemented yet). The
// per-block bytes come from the pool itself (PagedKvPool::real_block_bytes for the
// default f16 K/V and block size); the block counts are arithmetic. The figures in
// docs/models.md (Gemma 2 and Gemma 3) are these numbers.
#include <gtest/gtest.h>

#include <cstdio>

#include "kv/paged_kv_pool.h"

namespace pagoda {
namespace {

struct Shape {
  const char* name;
  int64_t n_layers, n_kv_heads, head_dim, window, period;  // layer i global when (i + 1) % period == 0
};

// Blocks a local layer needs when the sequence holds n tokens and the next query is at
// position n: those covering [n - window + 1, n - 1] (the query's own slot comes with it).
int64_t window_blocks(int64_t n, int64_t window, int64_t bs) {
  const int64_t first = std::max<int64_t>(0, n - window + 1);
  return (n - 1) / bs - first / bs + 1;
}

TEST(KvWindowFootprint, Gemma3At8kHoldsAboutAQuarterWithLocalLayersWindowed) {
  const int64_t n = 8192;
  for (const Shape s : {Shape{"gemma3-1b", 26, 1, 256, 512, 6}, Shape{"gemma3-4b", 34, 4, 256, 1024, 6},
                        Shape{"gemma2-2b", 26, 4, 256, 4096, 2}}) {
    KvConfig kc;  // defaults: f16 K and V, block size 32
    kc.budget_bytes = 64ull << 20;
    PagedKvPool pool(KvGeometry{s.n_layers, s.n_kv_heads, s.head_dim}, kc);
    const int64_t bs = pool.block_size();
    const uint64_t layer_block = pool.real_block_bytes(0);  // every layer has the same shape
    ASSERT_EQ(pool.bytes_per_block(), layer_block * s.n_layers);
    int64_t n_global = 0;
    for (int64_t i = 0; i < s.n_layers; ++i) n_global += (i + 1) % s.period == 0;
    const int64_t n_local = s.n_layers - n_global;
    const int64_t full_blocks = (n + bs - 1) / bs;
    const uint64_t today = static_cast<uint64_t>(full_blocks) * pool.bytes_per_block();
    const uint64_t windowed = static_cast<uint64_t>(full_blocks) * n_global * layer_block +
                              static_cast<uint64_t>(window_blocks(n, s.window, bs)) * n_local * layer_block;
    // vLLM-style uniform pages of n_global layers (one free list, one byte ledger): the
    // local layers round up to whole pages.
    const int64_t local_pages = (n_local + n_global - 1) / n_global;
    const uint64_t paged = static_cast<uint64_t>(full_blocks) * n_global * layer_block +
                           static_cast<uint64_t>(window_blocks(n, s.window, bs)) * local_pages * n_global * layer_block;
    std::printf("%-10s %2lld layers (%lld global), window %lld: all layers %.0f B/token (%.1f MiB at 8k), "
                "local layers windowed %.0f B/token (%.1f MiB), in %lld-layer pages %.0f B/token (%.1f MiB)\n",
                s.name, static_cast<long long>(s.n_layers), static_cast<long long>(n_global),
                static_cast<long long>(s.window), double(today) / n, today / 1048576.0, double(windowed) / n,
                windowed / 1048576.0, static_cast<long long>(n_global), double(paged) / n, paged / 1048576.0);
    EXPECT_EQ(today, static_cast<uint64_t>(n) * s.n_layers * 2 * s.n_kv_heads * s.head_dim * 2);  // f16 K + V
    EXPECT_LT(windowed, today);
    EXPECT_LE(windowed, paged);
    if (s.period == 6) EXPECT_LT(windowed * 100, today * 26) << s.name;  // 1b 20.7%, 4b 25.4%
  }
}

}  // namespace
}  // namespace pagoda
