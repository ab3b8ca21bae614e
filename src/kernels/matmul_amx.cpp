// AMX-INT8 prefill for Q8_0 and Q4_0 weights (built with -mamx-tile -mamx-int8): the
// prefill entries of the Amx level's kernel table (register_matmul_kernels_amx, below).
//
// The AVX-512 packing already is the tile layout: a 32-column unit of 16 rows holds 8
// vectors of 64 bytes, vector s carrying for each row r the codes of columns 4s..4s+3
// (matmul_impl.h), which is exactly the "VNNI" layout of an AMX B tile of K = 32, N = 16
// (8 rows of 64 bytes). So per 32-column block one TDPBSUD multiplies 16 tokens' signed
// activation bytes (an A tile of 16 rows x 32 bytes, read in place from the quantized
// activations) by 16 rows' unsigned codes (Q8_0: q + 128, read in place; Q4_0: the
// nibbles, unpacked once per row group into a scratch of 512 bytes a block) into a
// 16 x 16 int32 tile: the same integer sums vpdpbusd forms. The block scales cannot be
// applied inside the tile (one per block, row and token), so each block's tile is
// stored and scaled in AVX-512 with the AVX-512 kernel's float operations in its order:
// acc = ((float)dot * dx + off) * dw + acc. The results are bit-identical to
// matmul_packed_avx512, which the tests require.
//
// Cost per 16 x 16 x 32 block: one tile multiply and the 16-row scaling (a load, a
// convert and two FMAs per row) instead of 128 vpdpbusd and the same scaling: the
// scaling, not the multiply, is what remains. Alternative rejected: K = 64 per tile
// multiply (two blocks) would halve the multiplies but the two blocks' sums need their
// own scales, so they cannot share a tile.
// GCC 12's own AVX-512 conversion intrinsics trip -Wmaybe-uninitialized (the
// undefined pass-through operand of the masked builtins), as in matmul_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/amx_tile_config.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"

namespace pagoda::matmul_detail {

namespace {

// Two sets, so block u's multiply runs while block u - 1 is stored and block u - 2 is
// scaled (see amx_group): tmm0 / tmm3 A (16 tokens x 32 activation bytes), tmm1 / tmm4
// B (8 x 64 code bytes: K = 32, N = 16), tmm2 / tmm5 C (16 x 16 int32).
void load_tile_config() {
  AmxTileConfig c;
  for (int set : {0, 3}) {
    c.rows[set] = 16;
    c.colsb[set] = 32;
    c.rows[set + 1] = 8;
    c.colsb[set + 1] = 64;
    c.rows[set + 2] = 16;
    c.colsb[set + 2] = 64;
  }
  _tile_loadconfig(&c);
}

// tilestored of tile `src` (a literal) to the 1 KiB at base, row stride 64. GCC's own
// _tile_stored clobbers all memory, which forces the 16 accumulators of amx_group out of
// registers around every store (measured: ~400 stack accesses in the loop); this one
// names the bytes it writes instead.
#define PAGODA_TILE_STORE_1K(src, base)                                                        \
  __asm__ volatile("tilestored %%tmm" #src ", (%1,%2,1)"                                      \
                   : "=m"(*reinterpret_cast<int32_t(*)[256]>(base))                           \
                   : "r"(static_cast<void*>(base)), "r"(64L))

// 64-byte aligned per-thread scratch of at least n bytes.
uint8_t* aligned_scratch(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

// One 16-token x 16-row output tile over all blocks. ablk: the 16 tokens' activation
// bytes repacked block-major ([nb][16 tokens][32]); b_base / b_stride: the group's B
// tiles; gp: its packed unit (for the scales).
template <GgmlType T>
void amx_subtile(const uint8_t* gp, const uint8_t* b_base, size_t b_stride, const int8_t* ablk,
                 const QuantizedActs& a, int64_t tm, int32_t* cbuf, float* y, int64_t n_rows, int64_t row0,
                 int n_valid) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  constexpr size_t scale_off = (T == GgmlType::Q8_0 ? 8 : 4) * VB;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t nb = a.n_cols / 32;
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  // A block's tile result is stored one block after its multiply and scaled one block
  // after that: a tile multiply takes tens of cycles to finish and a vector load of a
  // tile store's bytes waits for the store, so doing the three back to back ran at
  // ~0.85x the AVX-512 kernel; pipelined, the multiply and the store hide behind the
  // scaling. No lambdas: accumulators a lambda captures live in memory. The tile numbers
  // must be literals (the intrinsics paste them into the instruction), hence the macros.
#define PAGODA_AMX_MULTIPLY(TA, TB, TC, u)                  \
  do {                                                     \
    _tile_loadd(TA, ablk + (u) * 512, 32);                 \
    _tile_loadd(TB, b_base + (u) * b_stride, VB);          \
    _tile_zero(TC);                                        \
    _tile_dpbsud(TC, TA, TB);                              \
  } while (0)
#define PAGODA_AMX_SCALE(u)                                                                              \
  do {                                                                                                   \
    const int32_t* cb = cbuf + ((u) & 1) * 256;                                                          \
    const __m512 dw =                                                                                    \
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gp + (u) * unit_bytes + scale_off))); \
    for (int t = 0; t < 16; ++t) {                                                                       \
      const int64_t i = (tm + t) * nb + (u);                                                             \
      const float off = T == GgmlType::Q4_0 ? a.neg8_dsum32[i] : -128.0f * a.dsum32[i];                  \
      const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * t));                               \
      acc[t] = _mm512_fmadd_ps(_mm512_fmadd_ps(c, _mm512_set1_ps(a.d[i]), _mm512_set1_ps(off)), dw, acc[t]); \
    }                                                                                                    \
  } while (0)
  for (int64_t u = 0; u < nb + 2; u += 2) {
    // Even u: multiply u into set 0, store u - 1 from set 1, scale u - 2.
    if (u < nb) PAGODA_AMX_MULTIPLY(0, 1, 2, u);
    if (u >= 1 && u - 1 < nb) PAGODA_TILE_STORE_1K(5, cbuf + ((u - 1) & 1) * 256);
    if (u >= 2) PAGODA_AMX_SCALE(u - 2);
    // Odd u + 1: multiply u + 1 into set 1, store u from set 0, scale u - 1.
    if (u + 1 < nb) PAGODA_AMX_MULTIPLY(3, 4, 5, u + 1);
    if (u < nb) PAGODA_TILE_STORE_1K(2, cbuf + (u & 1) * 256);
    if (u >= 1 && u - 1 < nb) PAGODA_AMX_SCALE(u - 1);
  }
#undef PAGODA_AMX_MULTIPLY
#undef PAGODA_AMX_SCALE
  const __mmask16 mask = static_cast<__mmask16>((1u << n_valid) - 1);
  for (int t = 0; t < 16; ++t) _mm512_mask_storeu_ps(y + (tm + t) * n_rows + row0, mask, acc[t]);
}

template <GgmlType T>
void amx_tile(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, int64_t n16, float* y) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t n_cols = a.n_cols, nb = n_cols / 32;
  const size_t group_bytes = static_cast<size_t>(nb) * unit_bytes;
  const int64_t n_groups = (tile.row_end - tile.row_begin + L - 1) / L;
  thread_local std::vector<uint8_t> unpack_v, act_v, cbuf_v;
  int32_t* cbuf = reinterpret_cast<int32_t*>(aligned_scratch(cbuf_v, 2 * 16 * 64));  // two blocks' C tiles
  // The 16 tokens' activations block-major, so a block's A tile is 512 contiguous bytes:
  // read in place they sit n_cols apart, and at n_cols = 2048 the 16 rows fall into two
  // L1 sets (a 4 KiB alias), which held the kernel near the AVX-512 one's speed.
  int8_t* ablk = reinterpret_cast<int8_t*>(aligned_scratch(act_v, static_cast<size_t>(nb) * 512));
  // B tiles: Q8_0's codes in place (stride 64 within a unit); Q4_0's nibbles unpacked to
  // bytes once per tile for all its token sub-tiles.
  const uint8_t* gp[4];
  const uint8_t* b_base[4];
  size_t b_stride = unit_bytes;
  uint8_t* up = nullptr;
  if constexpr (T == GgmlType::Q4_0) {
    up = aligned_scratch(unpack_v, static_cast<size_t>(n_groups * nb) * 8 * VB);
    b_stride = 8 * VB;
  }
  for (int64_t g = 0; g < n_groups; ++g) {
    gp[g] = w.packed() + static_cast<size_t>(tile.row_begin / L + g) * group_bytes;
    b_base[g] = gp[g];
    if constexpr (T == GgmlType::Q4_0) {
      const __m512i m0f = _mm512_set1_epi8(0x0F);
      uint8_t* o0 = up + static_cast<size_t>(g * nb) * 8 * VB;
      for (int64_t u = 0; u < nb; ++u) {
        const uint8_t* p = gp[g] + u * unit_bytes;
        uint8_t* o = o0 + u * 8 * VB;
        for (int s = 0; s < 4; ++s) {
          const __m512i v = _mm512_loadu_si512(p + s * VB);
          _mm512_store_si512(o + s * VB, _mm512_and_si512(v, m0f));
          _mm512_store_si512(o + (s + 4) * VB, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f));
        }
      }
      b_base[g] = o0;
    }
  }
  for (int64_t m = 0; m < n16; m += 16) {
    const int64_t tm = tile.tok_begin + m;
    for (int64_t u = 0; u < nb; ++u)
      for (int r = 0; r < 16; ++r)
        _mm256_store_si256(reinterpret_cast<__m256i*>(ablk + u * 512 + r * 32),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + (tm + r) * n_cols + u * 32)));
    // tileloadd is an asm statement that does not say what it reads: make the unpacked
    // codes and the repacked activations reach memory before any tile load.
    __asm__ volatile("" ::: "memory");
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t row0 = tile.row_begin + g * L;
      const int n_valid = static_cast<int>(std::min<int64_t>(L, tile.row_end - row0));
      amx_subtile<T>(gp[g], b_base[g], b_stride, ablk, a, tm, cbuf, y, w.n_rows(), row0, n_valid);
    }
  }
}

}  // namespace

void matmul_packed_amx(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  const int64_t n_tok = tile.tok_end - tile.tok_begin;
  const int64_t n16 = n_tok / 16 * 16;
  PAGODA_CHECK(tile.row_end - tile.row_begin <= 64, "matmul_packed_amx: a tile of more than 4 row groups");
  if (n16 > 0) {
    load_tile_config();
    if (w.type() == GgmlType::Q8_0)
      amx_tile<GgmlType::Q8_0>(w, a, tile, n16, y);
    else
      amx_tile<GgmlType::Q4_0>(w, a, tile, n16, y);
    // Leave the tile state unused between calls: while it is in use every context switch
    // saves and restores its 8 KiB, and the thread pool's workers also run everything else.
    _tile_release();
  }
  if (n16 < n_tok) matmul_packed_avx512(w, a, Tile{tile.row_begin, tile.row_end, tile.tok_begin + n16, tile.tok_end}, y);
}

}  // namespace pagoda::matmul_detail

namespace pagoda {

// On top of the AVX-512 table (the same packing): tiles of 16 tokens or more of Q8_0 and
// Q4_0 run on the AMX tiles; decode and the other types stay on AVX-512.
void register_matmul_kernels_amx(KernelTable& t) {
  using namespace matmul_detail;
  t.prefill_min_tokens = 16;
  t.matmul[static_cast<size_t>(GgmlType::Q8_0)].prefill = matmul_packed_amx;
  t.matmul[static_cast<size_t>(GgmlType::Q4_0)].prefill = matmul_packed_amx;
}

}  // namespace pagoda
