// AMX-INT8 prefill for Q8_0 and Q4_0 weights (built with -mamx-tile -mamx-int8; runs
// only where amx_int8_enabled()).
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
#include <vector>

#include "kernels/matmul_impl.h"

namespace pagoda::matmul_detail {

namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0: A, 16 tokens x 32 activation bytes; tmm1: B, 8 x 64 code bytes (K = 32, N = 16);
// tmm2: C, 16 x 16 int32.
void load_tile_config() {
  TileConfig c;
  c.rows[0] = 16;
  c.colsb[0] = 32;
  c.rows[1] = 8;
  c.colsb[1] = 64;
  c.rows[2] = 16;
  c.colsb[2] = 64;
  _tile_loadconfig(&c);
}

// 64-byte aligned per-thread scratch of at least n bytes.
uint8_t* aligned_scratch(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

template <GgmlType T>
void amx_group(const uint8_t* gp, const QuantizedActs& a, int64_t t0, int64_t n_tok16, float* y, int64_t n_rows,
               int64_t row0, int n_valid) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  constexpr size_t scale_off = (T == GgmlType::Q8_0 ? 8 : 4) * VB;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t n_cols = a.n_cols, nb = n_cols / 32;
  thread_local std::vector<uint8_t> unpack_v, cbuf_v;
  int32_t* cbuf = reinterpret_cast<int32_t*>(aligned_scratch(cbuf_v, 16 * 64));
  // B tiles: Q8_0's codes in place (stride 64 within a unit); Q4_0's nibbles as bytes.
  const uint8_t* b_base = gp;
  size_t b_stride = unit_bytes;
  if constexpr (T == GgmlType::Q4_0) {
    uint8_t* up = aligned_scratch(unpack_v, static_cast<size_t>(nb) * 8 * VB);
    const __m512i m0f = _mm512_set1_epi8(0x0F);
    for (int64_t u = 0; u < nb; ++u) {
      const uint8_t* p = gp + u * unit_bytes;
      uint8_t* o = up + u * 8 * VB;
      for (int s = 0; s < 4; ++s) {
        const __m512i v = _mm512_loadu_si512(p + s * VB);
        _mm512_store_si512(o + s * VB, _mm512_and_si512(v, m0f));
        _mm512_store_si512(o + (s + 4) * VB, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f));
      }
    }
    b_base = up;
    b_stride = 8 * VB;
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << n_valid) - 1);
  for (int64_t m = 0; m < n_tok16; m += 16) {
    const int64_t tm = t0 + m;
    __m512 acc[16];
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t u = 0; u < nb; ++u) {
      _tile_loadd(0, a.q + tm * n_cols + u * 32, n_cols);
      _tile_loadd(1, b_base + u * b_stride, VB);
      _tile_zero(2);
      _tile_dpbsud(2, 0, 1);
      _tile_stored(2, cbuf, 64);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gp + u * unit_bytes + scale_off)));
      for (int t = 0; t < 16; ++t) {
        const int64_t i = (tm + t) * nb + u;
        const __m512 dxt = _mm512_set1_ps(a.d[i]);
        float off;
        if constexpr (T == GgmlType::Q4_0) off = a.neg8_dsum32[i];
        else off = -128.0f * a.dsum32[i];
        const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + 16 * t));
        acc[t] = _mm512_fmadd_ps(_mm512_fmadd_ps(c, dxt, _mm512_set1_ps(off)), dw, acc[t]);
      }
    }
    for (int t = 0; t < 16; ++t) _mm512_mask_storeu_ps(y + (tm + t) * n_rows + row0, mask, acc[t]);
  }
}

}  // namespace

void matmul_packed_amx(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  const int64_t n_tok = tile.tok_end - tile.tok_begin;
  const int64_t n16 = n_tok / 16 * 16;
  if (n16 > 0) {
    load_tile_config();
    constexpr int L = 16;
    const size_t group_bytes = static_cast<size_t>(w.n_cols() / 32) * packed_unit_bytes(w.type(), L);
    for (int64_t r = tile.row_begin; r < tile.row_end; r += L) {
      const uint8_t* gp = w.packed() + static_cast<size_t>(r / L) * group_bytes;
      const int n_valid = static_cast<int>(std::min<int64_t>(L, tile.row_end - r));
      if (w.type() == GgmlType::Q8_0)
        amx_group<GgmlType::Q8_0>(gp, a, tile.tok_begin, n16, y, w.n_rows(), r, n_valid);
      else
        amx_group<GgmlType::Q4_0>(gp, a, tile.tok_begin, n16, y, w.n_rows(), r, n_valid);
    }
  }
  if (n16 < n_tok) matmul_packed_avx512(w, a, Tile{tile.row_begin, tile.row_end, tile.tok_begin + n16, tile.tok_end}, y);
}

}  // namespace pagoda::matmul_detail
