// AMX-BF16 prefill for BF16 weights (built with the AMX flags): the flt_prefill entry of
// the Amx level's kernel table (register_matmul_kernels_amx_bf16, below).
//
// TDPBF16PS multiplies an A tile of 16 rows x 32 bf16 by a B tile of 16 rows of 32 bf16
// pairs into 16 x 16 f32 sums, accumulating in the C tile across the whole row: unlike
// the int8 path (matmul_amx.cpp) there is no per-block scale to apply between tile
// multiplies, so the vector units only convert and lay out the inputs.
// - A = 16 weight rows, read in place from the matrix's row-major BF16 (its huge-page copy
//   of the GGUF bytes; stride: the row's bytes). No repacking.
// - B = 16 tokens' activations, rounded to bf16 (the AVX-512 BF16 path rounds them the
//   same way) and laid out as tiles once per matmul call (bf16_acts_vnni, shared by every
//   row tile): for 32 columns, row kk holds each token's columns 2 kk and 2 kk + 1.
// - C[m][n] = row m x token n, so a finished tile is stored and transposed into y.
// Two row groups x two token groups per pass (4 C tiles, 2 A and 2 B tiles): each tile
// load feeds two multiplies. The products are the AVX-512 BF16 kernel's (bf16 x bf16,
// exact in f32); only the order of the f32 sums differs, so results match it to rounding.
// F16 weights take the same path: each row is split once per tile into two bf16 halves
// (hi + lo = w; f16 has 11 significant bits, bf16 8, and the rest fits the second) and the
// activations into two as well (x = xh + xl to 16 significant bits), and the tiles sum
// hi·xh + lo·xh + hi·xl (three multiplies; lo·xl, below 2^-16 relative, is left out).
// Tiles of fewer than 16 tokens, the last partial row group and widths not a multiple
// of 32 run on the AVX-512 kernel.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/amx_tile_config.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"

namespace pagoda::matmul_detail {

namespace {

// tmm0, tmm1: A (row groups 0, 1); tmm2, tmm3: B (token groups 0, 1); tmm4..7: C
// (row group i, token group j at 4 + 2 i + j). Every tile is 16 rows of 64 bytes.
void load_bf16_tile_config() {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// C tiles of RG row groups x TG token groups over all n_chunks 32-column chunks, stored
// to cbuf[(2 i + j) * 256 ..] as [16 rows][16 tokens] f32.
// b_group_elems: from one token group's B tiles to the next's. Split (F16 weights): a0 is
// the rows' high bf16 halves and a0_lo their low halves (w = hi + lo exactly), and each
// token group's tiles are followed, b_lo_elems on, by those of its activations' low halves
// (x = xh + xl to 16 significant bits): hi·xh + lo·xh + hi·xl, three multiplies per pair.
// The RG x TG multiplies of one pass step: C[i][j] += A[i] x B[j] (tile numbers as above).
template <int RG, int TG>
inline __attribute__((always_inline)) void multiply_pass_tiles() {
  _tile_dpbf16ps(4, 0, 2);
  if constexpr (TG > 1) _tile_dpbf16ps(5, 0, 3);
  if constexpr (RG > 1) _tile_dpbf16ps(6, 1, 2);
  if constexpr (RG > 1 && TG > 1) _tile_dpbf16ps(7, 1, 3);
}

// The A tiles (row groups at a0 and a0 + 16 rows) and the B tiles (token groups at b0, b1).
template <int RG>
inline __attribute__((always_inline)) void load_a_tiles(const uint8_t* a0, size_t a_stride) {
  _tile_loadd(0, a0, a_stride);
  if constexpr (RG > 1) _tile_loadd(1, a0 + 16 * a_stride, a_stride);
}
template <int TG>
inline __attribute__((always_inline)) void load_b_tiles(const uint16_t* b0, const uint16_t* b1) {
  _tile_loadd(2, b0, 64);
  if constexpr (TG > 1) _tile_loadd(3, b1, 64);
}

template <int RG, int TG, bool Split = false>
void bf16_pass(const uint8_t* a0, const uint8_t* a0_lo, size_t a_stride, const uint16_t* b0, size_t b_group_elems,
               size_t b_lo_elems, int64_t n_chunks, float* cbuf) {
  _tile_zero(4);
  if constexpr (TG > 1) _tile_zero(5);
  if constexpr (RG > 1) _tile_zero(6);
  if constexpr (RG > 1 && TG > 1) _tile_zero(7);
  const uint16_t* b1 = b0 + b_group_elems;
  for (int64_t c = 0; c < n_chunks; ++c) {
    load_a_tiles<RG>(a0 + c * 64, a_stride);
    load_b_tiles<TG>(b0 + c * 512, b1 + c * 512);
    multiply_pass_tiles<RG, TG>();
    if constexpr (Split) {
      // hi·xl with the hi tiles still loaded, then lo·xh: 8 tile loads per chunk, where
      // reloading hi for a last hi·xl took 10.
      load_b_tiles<TG>(b0 + b_lo_elems + c * 512, b1 + b_lo_elems + c * 512);
      multiply_pass_tiles<RG, TG>();
      load_a_tiles<RG>(a0_lo + c * 64, a_stride);
      load_b_tiles<TG>(b0 + c * 512, b1 + c * 512);
      multiply_pass_tiles<RG, TG>();
    }
  }
  _tile_stored(4, cbuf, 64);
  if constexpr (TG > 1) _tile_stored(5, cbuf + 256, 64);
  if constexpr (RG > 1) _tile_stored(6, cbuf + 512, 64);
  if constexpr (RG > 1 && TG > 1) _tile_stored(7, cbuf + 768, 64);
}

// 16 x lane: the element offsets of one column of a 16 x 16 tile of 32-bit values.
inline __m512i column_offsets() {
  return _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
}

// y[t0 + n][r0 + m] = c[m][n] for a 16 x 16 tile.
void store_transposed(const float* c, float* y, int64_t n_rows, int64_t t0, int64_t r0) {
  const __m512i col = column_offsets();
  for (int n = 0; n < 16; ++n)
    _mm512_storeu_ps(y + (t0 + n) * n_rows + r0, _mm512_i32gather_ps(_mm512_add_epi32(col, _mm512_set1_epi32(n)), c, 4));
}

}  // namespace

void bf16_acts_vnni_amx(const uint16_t* rows, int64_t n_cols, uint16_t* out) {
  // Per 32-column chunk: the 16 tokens' 16 column pairs (32-bit each) transposed, so
  // out row kk = pair kk of tokens 0..15. A 16 x 16 transpose of 32-bit elements.
  const __m512i col = column_offsets();
  for (int64_t c = 0; c < n_cols / 32; ++c) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + c * 512);
    for (int n = 0; n < 16; ++n)
      _mm512_i32scatter_epi32(dst + n, col, _mm512_loadu_si512(rows + n * n_cols + c * 32), 4);
  }
}

namespace {

// F16 rows [r0, r1) -> hi, lo bf16 rows (n_cols each) with hi + lo = w exactly: hi is w
// rounded to bf16 (8 significant bits), and w - hi, exact in f32, has at most the 3 low
// bits of the f16 significand left, which bf16 holds exactly (f16's range lies inside
// bf16's, so neither part underflows).
void split_f16_rows(const WeightMatrix& w, int64_t r0, int64_t r1, uint16_t* hi, uint16_t* lo) {
  const int64_t n_cols = w.n_cols();
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data() + r * w.row_bytes());
    uint16_t* h = hi + (r - r0) * n_cols;
    uint16_t* l = lo + (r - r0) * n_cols;
    for (int64_t k = 0; k < n_cols; k += 16) {
      const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k)));
      const __m256bh hv = _mm512_cvtneps_pbh(v);
      const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(__builtin_bit_cast(__m256i, hv)), 16));
      const __m256bh lv = _mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + k), __builtin_bit_cast(__m256i, hv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + k), __builtin_bit_cast(__m256i, lv));
    }
  }
}

}  // namespace

void matmul_bf16_amx(const WeightMatrix& w, const float* x, const uint16_t* xbf, const uint16_t* xvnni,
                     const Tile& tile, float* y) {
  const int64_t n_cols = w.n_cols(), n_rows = w.n_rows();
  const int64_t g_begin = (tile.tok_begin + 15) / 16, g_end = tile.tok_end / 16;
  // Whole row groups only: a tile load of a partial group would read past the matrix.
  const int64_t r_end = tile.row_begin + (tile.row_end - tile.row_begin) / 16 * 16;
  if (xvnni == nullptr || n_cols % 32 != 0 || tile.tok_begin % 16 != 0 || g_end <= g_begin || r_end == tile.row_begin) {
    matmul_float_avx512(w, x, xbf, tile, y);
    return;
  }
  const bool split = w.type() == GgmlType::F16;
  // F16: the tile's rows split into bf16 halves once, for all its token groups (per-thread
  // scratch: 64 rows x 5632 columns x 2 halves = 1.4 MiB for TinyLlama's widest).
  thread_local std::vector<uint16_t> halves;
  const uint8_t* a_base = w.data() + tile.row_begin * w.row_bytes();
  const uint8_t* a_lo_base = nullptr;
  size_t a_stride = w.row_bytes();
  if (split) {
    const size_t n = static_cast<size_t>(r_end - tile.row_begin) * n_cols;
    if (halves.size() < 2 * n) halves.resize(2 * n);
    split_f16_rows(w, tile.row_begin, r_end, halves.data(), halves.data() + n);
    a_base = reinterpret_cast<const uint8_t*>(halves.data());
    a_lo_base = reinterpret_cast<const uint8_t*>(halves.data() + n);
    a_stride = static_cast<size_t>(n_cols) * 2;
  }
  const int64_t n_chunks = n_cols / 32;
  // F16: each token group's high-half tiles, then its low-half tiles (the layout matmul()
  // gives F16 weights' activations).
  const size_t b_lo_elems = static_cast<size_t>(n_chunks) * 512;
  const size_t b_group_elems = split ? 2 * b_lo_elems : b_lo_elems;
  alignas(64) float cbuf[4 * 256];
  load_bf16_tile_config();
  // Token groups outer: the tile's rows (A, in L2) are read again for each pair of token
  // groups, the activations' tiles (B) once.
  for (int64_t g = g_begin; g < g_end; g += 2) {
    const int tg = g_end - g >= 2 ? 2 : 1;
    const uint16_t* b0 = xvnni + g * b_group_elems;
    for (int64_t r0 = tile.row_begin; r0 < r_end; r0 += 32) {
      const int rg = r_end - r0 >= 32 ? 2 : 1;
      const size_t a_off = static_cast<size_t>(r0 - tile.row_begin) * a_stride;
      const uint8_t* a0 = a_base + a_off;
      const uint8_t* a0_lo = split ? a_lo_base + a_off : nullptr;
      auto pass = [&]<bool Split>() {
        if (rg == 2 && tg == 2) bf16_pass<2, 2, Split>(a0, a0_lo, a_stride, b0, b_group_elems, b_lo_elems, n_chunks, cbuf);
        else if (rg == 2) bf16_pass<2, 1, Split>(a0, a0_lo, a_stride, b0, b_group_elems, b_lo_elems, n_chunks, cbuf);
        else if (tg == 2) bf16_pass<1, 2, Split>(a0, a0_lo, a_stride, b0, b_group_elems, b_lo_elems, n_chunks, cbuf);
        else bf16_pass<1, 1, Split>(a0, a0_lo, a_stride, b0, b_group_elems, b_lo_elems, n_chunks, cbuf);
      };
      if (split) pass.template operator()<true>();
      else pass.template operator()<false>();
      for (int i = 0; i < rg; ++i)
        for (int j = 0; j < tg; ++j) store_transposed(cbuf + (2 * i + j) * 256, y, n_rows, (g + j) * 16, r0 + 16 * i);
    }
  }
  // Leave the tile state unused between calls (see matmul_amx.cpp).
  _tile_release();
  // The rest: the last partial row group for the AMX tokens, and the tokens outside
  // whole groups for every row.
  if (r_end < tile.row_end) matmul_float_avx512(w, x, xbf, Tile{r_end, tile.row_end, g_begin * 16, g_end * 16}, y);
  if (tile.tok_begin < g_begin * 16)
    matmul_float_avx512(w, x, xbf, Tile{tile.row_begin, tile.row_end, tile.tok_begin, g_begin * 16}, y);
  if (g_end * 16 < tile.tok_end)
    matmul_float_avx512(w, x, xbf, Tile{tile.row_begin, tile.row_end, g_end * 16, tile.tok_end}, y);
}

}  // namespace pagoda::matmul_detail

namespace pagoda {

// BF16 weights' prefill on AMX where the CPU has AMX-BF16 (the activations are then
// rounded to bf16, as the AVX-512 BF16 path does; bf16_acts is set on every AMX CPU,
// since AMX-BF16 CPUs have AVX512_BF16).
void register_matmul_kernels_amx_bf16(KernelTable& t) {
  using namespace matmul_detail;
  if (!cpu_features().amx_bf16 || !t.bf16_acts) return;
  t.matmul[static_cast<size_t>(GgmlType::BF16)].flt_prefill = matmul_bf16_amx;
  t.matmul[static_cast<size_t>(GgmlType::F16)].flt_prefill = matmul_bf16_amx;
  t.bf16_acts_vnni = bf16_acts_vnni_amx;
}

}  // namespace pagoda
