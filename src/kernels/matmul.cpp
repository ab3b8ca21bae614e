// The matmul dispatcher and work split, the scalar kernels, and matmul_reference.
// Repacking (WeightMatrix::prepare) is in matmul_pack.cpp. The SIMD kernels are in
// matmul_avx2.cpp / matmul_avx512.cpp / matmul_amx.cpp; the layout they read is
// described in matmul_impl.h. Every kernel is reached through the weight matrix's
// level's table (kernel_table.h): no ISA is named here.
//
// Work split: the output [n_tokens, n_rows] is cut into tiles of
// tile_rows() rows x kTileTokens tokens, claimed by the pool's threads through
// its task counter (with one token tile, each thread first takes a contiguous
// range of them: for_tasks). The tiling depends only on the shape and the ISA, never
// on the thread count, and every output element is computed by one tile with
// a fixed order of operations, so results are bit-identical for any number of
// threads (a test pins this).
#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"

namespace pagoda {

bool matmul_detail::decode_prefetch_l2() {
  if (const char* env = std::getenv("PAGODA_PREFETCH")) {
    if (std::strcmp(env, "l1") == 0) return false;
    if (std::strcmp(env, "l2") == 0) return true;
  }
  return cpu_features().amd;
}

using namespace matmul_detail;

namespace {

// ---- scalar kernels (GGUF layout, same integer algorithm as the SIMD ones) ----

// One row (GGUF bytes) · one quantized token row.
float dot_quant_scalar(GgmlType type, const uint8_t* row, int64_t n_cols, const QuantizedActs& a,
                       int64_t t) {
  const size_t block_bytes = traits(type).type_size;
  const int8_t* xq = a.q + t * a.n_cols;
  UnitCodes u;
  float acc = 0.0f;
  const int8_t* table = is_codebook(type) ? codebook(type) : nullptr;
  if (table && !is_super_block(type)) {  // IQ4_NL, MXFP4: sum table[c] x, times d dx
    const int64_t nb = n_cols / 32;
    const float* dx = a.d + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
      decode_unit(type, row + b * block_bytes, u);
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += table[u.c[j]] * xq[b * 32 + j];
      acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
    }
    return acc;
  }
  if (!is_super_block(type)) {
    const int64_t nb = n_cols / 32;
    const float* dx = a.d + t * nb;
    const int32_t* sx = a.sum32 + t * nb;
    const float* dsx = a.dsum32 + t * nb;
    const int32_t offset = type == GgmlType::Q8_0 ? 128 : type == GgmlType::Q4_0 ? 8 : 16;
    const bool has_min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
    for (int64_t b = 0; b < nb; ++b) {
      decode_unit(type, row + b * block_bytes, u);
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += u.c[j] * xq[b * 32 + j];
      if (has_min) {
        acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
        acc = std::fma(u.m, dsx[b], acc);
      } else {
        dot -= offset * sx[b];
        acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
      }
    }
    return acc;
  }
  const int64_t nsb = n_cols / 256;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    decode_unit(type, row + sb * block_bytes, u);
    const int8_t* x = xq + sb * 256;
    const float dx = a.d[t * nsb + sb];
    if (type == GgmlType::Q2_K) {  // like Q4_K on 16-column sub-blocks
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0, imin = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = 0;
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += u.sc[i] * dot;
        imin += u.mn[i] * s16[i];
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
      acc = std::fma(-static_cast<float>(imin), u.m * dx, acc);
    } else if (type == GgmlType::Q3_K) {  // like Q6_K with codes offset by 4
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = -4 * s16[i];
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += static_cast<int8_t>(u.sc[i]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else if (type == GgmlType::IQ4_XS) {
      int32_t isum = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += table[u.c[32 * j + l]] * x[32 * j + l];
        isum += static_cast<int8_t>(u.sc[j]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else if (type == GgmlType::Q6_K) {
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = -32 * s16[i];
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += static_cast<int8_t>(u.sc[i]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else {
      const int32_t* s32 = a.sum32 + t * (n_cols / 32) + sb * 8;
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += u.c[32 * j + l] * x[32 * j + l];
        isum += u.sc[j] * dot;
        imin += u.mn[j] * s32[j];
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
      acc = std::fma(-static_cast<float>(imin), u.m * dx, acc);
    }
  }
  return acc;
}

float load_float_weight(GgmlType type, const uint8_t* row, int64_t k) {
  switch (type) {
    case GgmlType::F32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case GgmlType::F16: {
      f16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return f16_to_f32(h);
    }
    default: {
      bf16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return bf16_to_f32(h);
    }
  }
}

void matmul_float_scalar(const WeightMatrix& w, const float* x, const uint16_t* /*xbf*/, const Tile& tile,
                         float* y) {
  const int64_t n_cols = w.n_cols(), n_rows = w.n_rows();
  for (int64_t r = tile.row_begin; r < tile.row_end; ++r) {
    const uint8_t* row = w.data() + r * w.row_bytes();
    for (int64_t t = tile.tok_begin; t < tile.tok_end; ++t) {
      const float* xt = x + t * n_cols;
      float acc = 0.0f;
      for (int64_t k = 0; k < n_cols; ++k) acc = std::fma(load_float_weight(w.type(), row, k), xt[k], acc);
      y[t * n_rows + r] = acc;
    }
  }
}

void matmul_quant_scalar(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  for (int64_t r = tile.row_begin; r < tile.row_end; ++r) {
    const uint8_t* row = w.data() + r * w.row_bytes();
    for (int64_t t = tile.tok_begin; t < tile.tok_end; ++t)
      y[t * w.n_rows() + r] = dot_quant_scalar(w.type(), row, w.n_cols(), a, t);
  }
}

// ---- activation scratch ----

// Grows to the largest call seen on this thread, then never allocates again.
struct ActScratch {
  std::vector<int8_t> q;
  std::vector<float> d, dsum32, neg8_dsum32;
  std::vector<int32_t> sum32, sum16, sum16_pairs, sum32_pairs;
  std::vector<uint16_t> bf16, bf16_vnni, bf16_lo;
  std::vector<int8_t> tile_q;
  std::vector<float> tile_scalars;
  std::vector<int32_t> tile_sum32_pairs;
};
ActScratch& act_scratch() {
  thread_local ActScratch s;
  return s;
}

template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// tiles: also lay out the whole 16-token groups as Block32Tiles or Super256Tiles, for a
// prefill kernel that reads them.
QuantizedActs quantize_acts(const KernelTable& kt, ActKind kind, const float* x, int64_t n_tokens, int64_t n_cols,
                            ThreadPool& pool, bool tiles = false) {
  ActScratch& s = act_scratch();
  QuantizedActs a;
  a.n_tokens = n_tokens;
  a.n_cols = n_cols;
  a.d_per = kind == ActKind::Block32 ? 32 : 256;
  const size_t nt = static_cast<size_t>(n_tokens), nc = static_cast<size_t>(n_cols);
  int8_t* q = grow(s.q, nt * nc);
  float* d = grow(s.d, nt * nc / a.d_per);
  int32_t* sum32 = grow(s.sum32, nt * nc / 32);
  float* dsum32 = kind == ActKind::Block32 ? grow(s.dsum32, nt * nc / 32) : nullptr;
  float* neg8_dsum32 = kind == ActKind::Block32 ? grow(s.neg8_dsum32, nt * nc / 32) : nullptr;
  int32_t* sum16 = kind == ActKind::Super256 ? grow(s.sum16, nt * nc / 16) : nullptr;
  int32_t* sum16_pairs = kind == ActKind::Super256 ? grow(s.sum16_pairs, nt * nc / 32) : nullptr;
  int32_t* sum32_pairs = kind == ActKind::Super256 ? grow(s.sum32_pairs, nt * nc / 64) : nullptr;
  a.q = q;
  a.d = d;
  a.sum32 = sum32;
  a.dsum32 = dsum32;
  a.neg8_dsum32 = neg8_dsum32;
  a.sum16 = sum16;
  a.sum16_pairs = sum16_pairs;
  a.sum32_pairs = sum32_pairs;
  const int64_t n_groups = tiles ? n_tokens / 16 : 0;
  if (n_groups > 0) {
    const size_t ng = static_cast<size_t>(n_groups);
    a.tile_q = grow(s.tile_q, ng * 16 * nc);
    if (kind == ActKind::Block32) {
      a.tile_scalars = grow(s.tile_scalars, ng * 48 * (nc / 32));
    } else {
      a.tile_scalars = grow(s.tile_scalars, ng * 16 * (nc / 256));
      a.tile_sum32_pairs = grow(s.tile_sum32_pairs, ng * 64 * (nc / 256));
    }
  }
  auto row = [&](int64_t t) {
    ActRowOut out{q + t * n_cols, d + t * (n_cols / a.d_per), sum32 + t * (n_cols / 32),
                  dsum32 ? dsum32 + t * (n_cols / 32) : nullptr,
                  sum16 ? sum16 + t * (n_cols / 16) : nullptr, neg8_dsum32 ? neg8_dsum32 + t * (n_cols / 32) : nullptr};
    kt.quantize_act_row(kind, x + t * n_cols, n_cols, out);
    if (sum16_pairs) {
      auto pair = [](int32_t lo, int32_t hi) {
        return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) | static_cast<uint32_t>(hi) << 16);
      };
      const int32_t* s16 = sum16 + t * (n_cols / 16);
      for (int64_t j = 0; j < n_cols / 32; ++j) sum16_pairs[t * (n_cols / 32) + j] = pair(s16[2 * j], s16[2 * j + 1]);
      const int32_t* s32 = sum32 + t * (n_cols / 32);
      for (int64_t j = 0; j < n_cols / 64; ++j) sum32_pairs[t * (n_cols / 64) + j] = pair(s32[2 * j], s32[2 * j + 1]);
    }
    if (t / 16 < n_groups) {
      if (kind == ActKind::Block32) Block32Tiles::group(a, t / 16).write_token(a, t);
      else Super256Tiles::group(a, t / 16).write_token(a, t);
    }
  };
  // Quantizing a 2048-wide row takes ~0.5 us with AVX-512 (5632-wide ~1.4 us). From 4 rows
  // the threads share it: eight decoding streams quantize 8 rows before every matmul, ~4%
  // of a step's samples on the owner thread while the others spun (Zen 4, perf); split,
  // bench-engine --streams 8 (Q4_0, three alternating rounds) 233.7-235.6 -> 237.0-238.4
  // tok/s. Below 4 rows a job costs more than it saves.
  if (n_tokens >= 4 && pool.num_threads() > 1) {
    const int64_t per_task = std::max<int64_t>(2, std::min<int64_t>(8, n_tokens / pool.num_threads()));
    pool.parallel_for((n_tokens + per_task - 1) / per_task, [&](int64_t task, int) {
      for (int64_t t = task * per_task; t < std::min(n_tokens, (task + 1) * per_task); ++t) row(t);
    });
  } else {
    for (int64_t t = 0; t < n_tokens; ++t) row(t);
  }
  return a;
}

// Tile shape. Rows: 4 packed groups (64 rows with AVX-512, 32 with AVX2): a
// tile's weights (64 x 2048 Q4_0 = 72 KiB) stay in L2 (512 KiB on Zen 3, 1 MiB
// on Zen 5) while its token micro-tiles stream past, and a 2048-row decode
// still yields 32-64 tasks for load balance. Tokens: 64, so a 512-token
// prefill has 8 token tiles per row tile and the 64 x 2048 int8 activation
// tile (128 KiB) fits L2 next to the weights.
// Both row counts are the table's (tile_rows_quant, tile_rows_float).
constexpr int64_t kTileTokens = 64;
int64_t tile_rows(const WeightMatrix& w) {
  const KernelTable& kt = kernel_table(w.isa());
  return is_float_type(w.type()) ? kt.tile_rows_float : kt.tile_rows_quant;
}

}  // namespace

size_t WeightMatrix::stream_bytes() const {
  return packed_ == nullptr ? static_cast<size_t>(n_rows_) * row_bytes_ : packed_bytes_;
}


namespace {

// Runs f(task, thread) over the tiles' tasks. With one token tile (decode, and batches of
// up to kTileTokens tokens) the tasks are row tiles in row order, and each thread takes a
// contiguous range of them (ThreadPool::run_ranges) instead of every other one: the two
// threads of a Zen 4 claiming neighbouring 64-row tiles in turn read 0.60-0.64 of the
// probe in its fast minutes (~60 GB/s) and 0.90-0.95 in its slow ones (~35 GB/s); one
// contiguous half each read 0.79-0.89 and 0.95-0.99 (MatvecPaired Q4_0 / Q4_K, two
// threads, alternating). Neighbouring tiles by turns let each core's stream prefetcher
// run on into tiles the other core reads. Prefill keeps the shared counter: its token
// tiles of one row tile are neighbours on purpose (they share the weights through L3).
template <class F>
void for_tasks(ThreadPool& pool, int64_t n_tasks, bool one_token_tile, F&& f) {
  if (one_token_tile) pool.parallel_for_ranges(n_tasks, f);
  else pool.parallel_for(n_tasks, f);
}

// The tiles of one matrix's output, in task order.
struct TileGrid {
  int64_t trows = 0, ttoks = kTileTokens, n_tok_tiles = 0, n_tasks = 0;
  TileGrid() = default;
  TileGrid(const WeightMatrix& w, int64_t n_tokens, int64_t tile_tokens = kTileTokens)
      : trows(tile_rows(w)), ttoks(tile_tokens), n_tok_tiles((n_tokens + tile_tokens - 1) / tile_tokens) {
    n_tasks = (w.n_rows() + trows - 1) / trows * n_tok_tiles;
  }
  Tile tile(const WeightMatrix& w, int64_t n_tokens, int64_t task) const {
    // Token tiles inner: the two threads start on neighbouring tiles of the
    // same weight rows, which then come from memory once into the shared L3.
    const int64_t rt = task / n_tok_tiles, tt = task % n_tok_tiles;
    return Tile{rt * trows, std::min(w.n_rows(), (rt + 1) * trows), tt * ttoks, std::min(n_tokens, (tt + 1) * ttoks)};
  }
};

// The quantized kernel of w's type and level, or its prefill kernel (AMX: a tile needs
// 16 tokens) for tiles of at least prefill_min_tokens tokens.
struct QuantKernel {
  const MatmulKernels* k = nullptr;
  int64_t prefill_min_tokens = 0;
  QuantKernel() = default;
  explicit QuantKernel(const WeightMatrix& w) {
    const KernelTable& kt = kernel_table(w.isa());
    k = &matmul_kernels(kt, w.type());
    PAGODA_CHECK(k->quant, std::string("matmul: no quantized ") + isa_name(w.isa()) + " kernel for " +
                               type_name(w.type()));
    prefill_min_tokens = kt.prefill_min_tokens;
  }
  // Whether its prefill kernel reads QuantizedActs' Block32 tile layout.
  bool wants_tiles() const { return k->prefill != nullptr && k->prefill_reads_tiles; }
  void run(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) const {
    if (k->prefill && tile.tok_end - tile.tok_begin >= prefill_min_tokens) k->prefill(w, a, tile, y);
    else k->quant(w, a, tile, y);
  }
};

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0 || w.n_rows() == 0) return;
  const TileGrid grid(w, n_tokens);

  const KernelTable& kt = kernel_table(w.isa());
  if (is_float_type(w.type())) {
    const MatmulKernels& k = matmul_kernels(kt, w.type());
    const FloatMatmulFn fn = k.flt;
    PAGODA_CHECK(fn, std::string("matmul: no float ") + isa_name(w.isa()) + " kernel for " + type_name(w.type()));
    const uint16_t* xbf = nullptr;
    const int64_t n_groups = n_tokens / 16;
    const bool on_tiles = k.flt_prefill && kt.bf16_acts && kt.bf16_acts_vnni && n_groups > 0 &&
                          n_tokens >= kt.prefill_min_tokens && w.n_cols() % 32 == 0;
    // bf16 activations: BF16 weights' AVX-512 kernel, and the AMX-BF16 tiles (F16 too).
    if ((w.type() == GgmlType::BF16 || on_tiles) && kt.bf16_acts) {
      uint16_t* buf = grow(act_scratch().bf16, static_cast<size_t>(n_tokens * w.n_cols()));
      kt.bf16_acts(x, buf, n_tokens * w.n_cols());
      xbf = buf;
    }
    // The float kernels read bf16 activations for BF16 weights only.
    const uint16_t* fn_xbf = w.type() == GgmlType::BF16 ? xbf : nullptr;
    // AMX-BF16: the activations' whole 16-token groups laid out as B tiles once here,
    // shared by every row tile; tiles of prefill_min_tokens or more take flt_prefill.
    // F16 weights: each group's tiles of the activations' high bf16 halves are followed by
    // those of their low halves, bf16(x - xh) (x to 16 significant bits: F16 weights keep
    // f16-or-better activations; bf16 alone moved the numpy reference's F16 logits by 1.3e-2).
    if (on_tiles) {
      const bool split = w.type() == GgmlType::F16;
      const int64_t n_cols = w.n_cols(), group_elems = n_cols * 16, group_stride = split ? 2 * group_elems : group_elems;
      uint16_t* vnni = grow(act_scratch().bf16_vnni, static_cast<size_t>(n_groups * group_stride));
      uint16_t* xlo = split ? grow(act_scratch().bf16_lo, static_cast<size_t>(n_groups * group_elems)) : nullptr;
      pool.parallel_for(n_groups, [&](int64_t g, int) {
        const int64_t base = g * group_elems;  // the group's first row-major value
        kt.bf16_acts_vnni(xbf + base, n_cols, vnni + g * group_stride);
        if (!split) return;
        thread_local std::vector<float> residual;
        if (residual.size() < static_cast<size_t>(group_elems)) residual.resize(static_cast<size_t>(group_elems));
        for (int64_t i = 0; i < group_elems; ++i) {
          const uint32_t bits = static_cast<uint32_t>(xbf[base + i]) << 16;
          float hi;
          std::memcpy(&hi, &bits, sizeof hi);
          residual[static_cast<size_t>(i)] = x[base + i] - hi;
        }
        kt.bf16_acts(residual.data(), xlo + base, group_elems);
        kt.bf16_acts_vnni(xlo + base, n_cols, vnni + g * group_stride + group_elems);
      });
      // F16: tiles of 256 tokens, since the kernel splits a tile's rows into bf16 halves
      // once for all its tokens (at 64 tokens the splitting was ~20% of the time); BF16
      // keeps 64 (256 measured 0.8x). Each output element is one sequence of tile
      // multiplies whatever the tiling.
      const TileGrid tiles(w, n_tokens, split ? 256 : kTileTokens);
      pool.parallel_for(tiles.n_tasks, [&](int64_t task, int) {
        const Tile tile = tiles.tile(w, n_tokens, task);
        if (tile.tok_end - tile.tok_begin >= kt.prefill_min_tokens) k.flt_prefill(w, x, xbf, vnni, tile, y);
        else fn(w, x, fn_xbf, tile, y);
      });
      return;
    }
    for_tasks(pool, grid.n_tasks, grid.n_tok_tiles == 1,
              [&](int64_t task, int) { fn(w, x, fn_xbf, grid.tile(w, n_tokens, task), y); });
    return;
  }

  const QuantKernel qk(w);
  const QuantizedActs a = quantize_acts(kt, act_kind(w.type()), x, n_tokens, w.n_cols(), pool, qk.wants_tiles());
  for_tasks(pool, grid.n_tasks, grid.n_tok_tiles == 1,
            [&](int64_t task, int) { qk.run(w, a, grid.tile(w, n_tokens, task), y); });
}

void matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool) {
  constexpr size_t kMaxTargets = 4;
  PAGODA_CHECK(targets.size() <= kMaxTargets, "matmul_multi: at most 4 targets");
  if (n_tokens <= 0 || targets.empty()) return;
  const WeightMatrix& w0 = *targets[0].w;
  bool shared = !is_float_type(w0.type());
  for (const MatmulTarget& t : targets) {
    PAGODA_CHECK(t.w->n_cols() == w0.n_cols(), "matmul_multi: targets differ in n_cols");
    shared = shared && !is_float_type(t.w->type()) && t.w->isa() == w0.isa() &&
             act_kind(t.w->type()) == act_kind(w0.type());
  }
  if (!shared) {  // float weights, or activations quantized differently: one call each
    for (const MatmulTarget& t : targets) matmul(*t.w, x, n_tokens, t.y, pool);
    return;
  }
  // One task list over all targets: target i owns tasks [first[i], first[i + 1]),
  // tiled exactly as matmul() tiles it alone, so results are bit-identical.
  TileGrid grids[kMaxTargets];
  QuantKernel kernels[kMaxTargets];
  int64_t first[kMaxTargets + 1] = {0};
  for (size_t i = 0; i < targets.size(); ++i) {
    grids[i] = TileGrid(*targets[i].w, n_tokens);
    kernels[i] = QuantKernel(*targets[i].w);
    first[i + 1] = first[i] + (targets[i].w->n_rows() > 0 ? grids[i].n_tasks : 0);
  }
  bool tiles = false;
  for (size_t i = 0; i < targets.size(); ++i) tiles = tiles || kernels[i].wants_tiles();
  const QuantizedActs a =
      quantize_acts(kernel_table(w0.isa()), act_kind(w0.type()), x, n_tokens, w0.n_cols(), pool, tiles);
  for_tasks(pool, first[targets.size()], n_tokens <= kTileTokens, [&](int64_t task, int) {
    size_t i = 0;
    while (task >= first[i + 1]) ++i;
    const WeightMatrix& w = *targets[i].w;
    kernels[i].run(w, a, grids[i].tile(w, n_tokens, task - first[i]), targets[i].y);
  });
}

void matmul_grouped(std::span<const GroupedMatmul> jobs, const float* x, int64_t n_x_rows, ThreadPool& pool) {
  if (jobs.empty() || n_x_rows <= 0) return;
  const WeightMatrix& w0 = *jobs[0].w;
  const int64_t n_cols = w0.n_cols();
  bool shared = !is_float_type(w0.type());
  for (const GroupedMatmul& j : jobs) {
    PAGODA_CHECK(j.w->n_cols() == n_cols, "matmul_grouped: jobs differ in n_cols");
    PAGODA_CHECK(j.row0 >= 0 && j.n_tokens >= 0 && j.row0 + j.n_tokens <= n_x_rows,
                 "matmul_grouped: job rows outside x");
    shared = shared && !is_float_type(j.w->type()) && j.w->isa() == w0.isa() &&
             act_kind(j.w->type()) == act_kind(w0.type());
  }
  if (!shared) {
    for (const GroupedMatmul& j : jobs) matmul(*j.w, x + j.row0 * n_cols, j.n_tokens, j.y, pool);
    return;
  }
  // Activations are quantized row by row, so quantizing all of x once gives
  // each job exactly the codes matmul() would compute for its rows alone.
  // Job i owns tasks [first[i], first[i + 1]); kept per thread, grown once.
  thread_local std::vector<int64_t> first;
  thread_local std::vector<TileGrid> grids;
  thread_local std::vector<QuantKernel> kernels;
  first.assign(jobs.size() + 1, 0);
  grids.resize(jobs.size());
  kernels.resize(jobs.size());
  bool one_token_tile = true;  // every job's: their row tiles in row order (for_tasks)
  for (size_t i = 0; i < jobs.size(); ++i) {
    grids[i] = TileGrid(*jobs[i].w, std::max<int64_t>(jobs[i].n_tokens, 1));
    one_token_tile = one_token_tile && grids[i].n_tok_tiles == 1;
    kernels[i] = QuantKernel(*jobs[i].w);
    const bool empty = jobs[i].n_tokens == 0 || jobs[i].w->n_rows() == 0;
    first[i + 1] = first[i] + (empty ? 0 : grids[i].n_tasks);
  }
  bool tiles = false;
  for (size_t i = 0; i < jobs.size(); ++i) tiles = tiles || kernels[i].wants_tiles();
  const QuantizedActs all =
      quantize_acts(kernel_table(w0.isa()), act_kind(w0.type()), x, n_x_rows, n_cols, pool, tiles);
  auto view = [&](const GroupedMatmul& j) {
    QuantizedActs a = all;
    const int64_t r = j.row0;
    a.n_tokens = j.n_tokens;
    a.q += r * n_cols;
    a.d += r * (n_cols / all.d_per);
    a.sum32 += r * (n_cols / 32);
    if (a.dsum32) a.dsum32 += r * (n_cols / 32);
    if (a.neg8_dsum32) a.neg8_dsum32 += r * (n_cols / 32);
    if (a.sum16) a.sum16 += r * (n_cols / 16);
    if (a.sum16_pairs) a.sum16_pairs += r * (n_cols / 32);  // one int16 pair per 32 columns
    if (a.sum32_pairs) a.sum32_pairs += r * (n_cols / 64);  // one per 64
    // The tile layout is per 16-token group of x: a job starting inside a group has none.
    if (a.tile_q != nullptr && r % 16 == 0 && a.tile_sum32_pairs == nullptr) {
      const Block32Tiles first = Block32Tiles::group(all, r / 16);
      a.tile_q = first.q;
      a.tile_scalars = first.d;
    } else if (a.tile_q != nullptr && r % 16 == 0) {
      const Super256Tiles first = Super256Tiles::group(all, r / 16);
      a.tile_q = first.q;
      a.tile_scalars = first.d;
      a.tile_sum32_pairs = first.sum32_pairs;
    } else {
      a.tile_q = nullptr;
      a.tile_scalars = nullptr;
      a.tile_sum32_pairs = nullptr;
    }
    return a;
  };
  const int64_t* fp = first.data();
  const TileGrid* gp = grids.data();
  const QuantKernel* kp = kernels.data();
  const size_t n_jobs = jobs.size();
  for_tasks(pool, fp[n_jobs], one_token_tile, [&](int64_t task, int) {
    const size_t i = static_cast<size_t>(std::upper_bound(fp, fp + n_jobs + 1, task) - fp) - 1;
    const GroupedMatmul& j = jobs[i];
    kp[i].run(*j.w, view(j), gp[i].tile(*j.w, j.n_tokens, task - fp[i]), j.y);
  });
}

// The Scalar level: every weight type prepare() accepts, in GGUF layout.
void register_matmul_kernels_scalar(KernelTable& t) {
  for (uint32_t id = 0; id < kMaxTypeIds; ++id) {
    const auto tt = type_traits(id);
    if (!tt || !tt->weight_supported) continue;
    const auto type = static_cast<GgmlType>(id);
    if (is_float_type(type)) t.matmul[id].flt = matmul_float_scalar;
    else if (pack_traits(type).packed) t.matmul[id].quant = matmul_quant_scalar;
  }
  t.quantize_act_row = quantize_act_row_scalar;
}

void matmul_reference(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                      const float* x, int64_t n_tokens, float* y) {
  const size_t rb = pagoda::row_bytes(type, n_cols);
  std::vector<float> wrow(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(type, data + r * rb, wrow.data(), n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double acc = 0.0;
      for (int64_t k = 0; k < n_cols; ++k) acc += static_cast<double>(wrow[k]) * x[t * n_cols + k];
      y[t * n_rows + r] = static_cast<float>(acc);
    }
  }
}

}  // namespace pagoda
