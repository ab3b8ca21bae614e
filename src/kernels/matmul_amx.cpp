// AMX-INT8 prefill for Q8_0, Q4_0, Q4_K and Q6_K weights (built with -mamx-tile -mamx-int8): the
// prefill entries of the Amx level's kernel table (register_matmul_kernels_amx, below).
//
// The AVX-512 packing already is the tile layout: a 32-column unit of 16 rows holds 8
// vectors of 64 bytes, vector s carrying for each row r the codes of columns 4s..4s+3
// (matmul_impl.h), which is exactly the "VNNI" layout of an AMX B tile of K = 32, N = 16
// (8 rows of 64 bytes). So per 32-column block one TDPBSUD multiplies 16 tokens' signed
// activation bytes (an A tile of 16 rows x 32 bytes, laid out contiguously once per matmul
// by the quantizer: Block32Tiles) by 16 rows' unsigned codes (Q8_0: q + 128, read in place; Q4_0: the
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
#include "kernels/static_for.h"

namespace pagoda::matmul_detail {

namespace {

// Two sets, so block u's multiply runs while block u - 1 is stored and block u - 2 is
// scaled (see amx_group): tmm0 / tmm3 A (16 tokens x 32 activation bytes), tmm1 / tmm4
// B (8 x 64 code bytes: K = 32, N = 16), tmm2 / tmm5 C (16 x 16 int32). k: the columns
// per multiply, 32, or 16 for Q6_K's 16-column sub-blocks (A 16 bytes a row, B 4 rows).
void load_tile_config(int k) {
  AmxTileConfig c;
  for (int set : {0, 3}) {
    c.rows[set] = 16;
    c.colsb[set] = static_cast<uint16_t>(k);
    c.rows[set + 1] = static_cast<uint8_t>(k / 4);
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

// Tiles TA x TB -> TC (literals), A rows a_stride bytes apart, B rows 64 bytes apart.
#define PAGODA_AMX_TILE_MULTIPLY(TA, TB, TC, a, a_stride, b) \
  do {                                                     \
    _tile_loadd(TA, a, a_stride);                          \
    _tile_loadd(TB, b, 64);                                \
    _tile_zero(TC);                                        \
    _tile_dpbsud(TC, TA, TB);                              \
  } while (0)

// The two-set pipeline over nk blocks: block k's multiply (the caller's
// PAGODA_AMX_MULTIPLY(TA, TB, TC, k)) runs while block k - 1's C tile is stored to cbuf
// and block k - 2's is scaled (the caller's PAGODA_AMX_SCALE(k), reading cbuf + (k & 1) *
// 256). A vector load of a tile store's bytes waits for the store: done back to back the
// three steps ran at ~0.85x the AVX-512 kernel. Each half step scales first, before the
// next tile store is issued, so its loads queue behind no store but the one they read.
#define PAGODA_AMX_PIPELINE(nk, cbuf)                                                      \
  for (int64_t k_ = 0; k_ < (nk) + 2; k_ += 2) {                                          \
    if (k_ >= 2 && k_ - 2 < (nk)) PAGODA_AMX_SCALE(k_ - 2);                               \
    if (k_ < (nk)) PAGODA_AMX_MULTIPLY(0, 1, 2, k_);                                      \
    if (k_ >= 1 && k_ - 1 < (nk)) PAGODA_TILE_STORE_1K(5, (cbuf) + ((k_ - 1) & 1) * 256); \
    if (k_ >= 1 && k_ - 1 < (nk)) PAGODA_AMX_SCALE(k_ - 1);                               \
    if (k_ + 1 < (nk)) PAGODA_AMX_MULTIPLY(3, 4, 5, k_ + 1);                              \
    if (k_ < (nk)) PAGODA_TILE_STORE_1K(2, (cbuf) + (k_ & 1) * 256);                      \
  }

// 16 bytes as 16 int32 lanes (unsigned / signed), 16 f16 as floats, and int16 pairs
// (lo's low half, hi's in the high half of each lane), for the K-quants' scale bytes.
inline __m512i u8x16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512i s8x16(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512 f16x16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512i pack16(__m512i lo, __m512i hi) { return _mm512_mask_blend_epi16(0xAAAAAAAA, lo, _mm512_slli_epi32(hi, 16)); }

// Rows [row0, row0 + n_valid) of tokens tm .. tm + 15 of y from a 16 x 16 float tile.
inline void store_tile_rows(const float* acc, float* y, int64_t tm, int64_t n_rows, int64_t row0, int n_valid) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n_valid) - 1);
  static_for<0, 16>([&](auto t) { _mm512_mask_storeu_ps(y + (tm + t) * n_rows + row0, mask, _mm512_load_ps(acc + 16 * t)); });
}

// 64-byte aligned per-thread scratch of at least n bytes.
uint8_t* aligned_scratch(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n + 64) v.resize(n + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

// One 16-token x 16-row output tile over all blocks. ablk: the 16 tokens' activation
// bytes repacked block-major ([nb][16 tokens][32]); tscale / toff: their per-block scale
// and offset term, also block-major ([nb][16]), so each is a broadcast straight from
// memory inside the FMA; b_base / b_stride: the group's B tiles; gp: its packed unit (for
// the scales).
template <GgmlType T>
void amx_subtile(const uint8_t* gp, const uint8_t* b_base, size_t b_stride, const int8_t* ablk,
                 const float* tscale, const float* toff, int64_t nb, int64_t tm, int32_t* cbuf, float* y,
                 int64_t n_rows, int64_t row0, int n_valid) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  constexpr size_t scale_off = unit_layout(T).chunk_vectors * VB;  // d (matmul_impl.h's UnitLayout)
  const size_t unit_bytes = packed_unit_bytes(T, L);
  __m512 acc[16];
  static_for<0, 16>([&](auto t) { acc[t] = _mm512_setzero_ps(); });
  // Two tile sets (PAGODA_AMX_PIPELINE). Measured on a Xeon with AMX: the scaling (per
  // block 16 loads, 16 converts, 32 FMAs) and the tile work still hardly overlap, whatever the order (a scale reading a buffer
  // no store writes ran no faster), so a block costs about their sum. The token loop is
  // a static_for: as a plain loop GCC kept acc[] on the stack and stored an accumulator
  // per token (with the per-block scalars contiguous: 265 -> 300-360 Gop/s, one core).
  // The tile numbers must be literals (the intrinsics paste them into the instruction),
  // hence the macros.
#define PAGODA_AMX_MULTIPLY(TA, TB, TC, u) PAGODA_AMX_TILE_MULTIPLY(TA, TB, TC, ablk + (u) * 512, 32, b_base + (u) * b_stride)
#define PAGODA_AMX_SCALE(u)                                                                              \
  do {                                                                                                   \
    const int32_t* cb = cbuf + ((u) & 1) * 256;                                                          \
    const float* ts = tscale + (u) * 16;                                                                 \
    const float* to = toff + (u) * 16;                                                                   \
    const __m512 dw =                                                                                    \
        f16x16(gp + (u) * unit_bytes + scale_off);                                                      \
    static_for<0, 16>([&](auto t) {                                                                      \
      const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * t));                               \
      acc[t] = _mm512_fmadd_ps(_mm512_fmadd_ps(c, _mm512_set1_ps(ts[t]), _mm512_set1_ps(to[t])), dw, acc[t]); \
    });                                                                                                  \
  } while (0)
  PAGODA_AMX_PIPELINE(nb, cbuf)
#undef PAGODA_AMX_MULTIPLY
#undef PAGODA_AMX_SCALE
  const __mmask16 mask = static_cast<__mmask16>((1u << n_valid) - 1);
  static_for<0, 16>([&](auto t) { _mm512_mask_storeu_ps(y + (tm + t) * n_rows + row0, mask, acc[t]); });
}

// Q4_K: one 16-token x 16-row output tile over all super-blocks. Per 32-column sub-block
// k one tile multiply as Q4_0's (the nibble codes unpacked, at b_base + k * 512), then
// the AVX-512 kernel's integer sum_j dot_j x sc_j, formed in float: each product is
// exact (|dot| <= 32 x 15 x 127, sc <= 63: 22 bits) and so is a sum of four (< 2^24), so
// sub-blocks 0-3 and 4-7 are summed into two floats and their one rounding add gives
// exactly the convert of the integer sum. A convert and an FMA per token and sub-block
// where a 32-bit multiply (two uops on one port) and an add took three. The min term,
// sum_j m_j x sum32_j, is the same integer from 4 vpdpwssd (mins and the tokens' 32-sums
// as int16 pairs, Super256Tiles), and the super-block's float operations are the AVX-512
// kernel's in its order: bit-identical to matmul_packed_avx512.
void amx_subtile_q4k(const uint8_t* gp, const uint8_t* b_base, const Super256Tiles& acts, int64_t nsb,
                     int64_t tm, int32_t* cbuf, float* y, int64_t n_rows, int64_t row0, int n_valid) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  constexpr size_t b_stride = 8 * VB;
  // [d][dmin][sc: 8 x L][m: 8 x L] after the codes (matmul_impl.h's UnitLayout)
  constexpr UnitLayout lay = unit_layout(GgmlType::Q4_K);
  constexpr size_t scales_off = lay.chunks * lay.chunk_vectors * VB;
  const size_t unit_bytes = packed_unit_bytes(GgmlType::Q4_K, L);
  const int8_t* ablk = acts.q;
  // The float accumulators and the first half's sums live in memory: the 16 running
  // sums take 16 of the 32 registers and the super-block step needs 6 more.
  alignas(64) float acc[256], half[256];
  __m512 fs[16];
  static_for<0, 16>([&](auto t) {
    fs[t] = _mm512_setzero_ps();
    _mm512_store_ps(acc + 16 * t, fs[t]);
  });
#define PAGODA_AMX_MULTIPLY(TA, TB, TC, k) PAGODA_AMX_TILE_MULTIPLY(TA, TB, TC, ablk + (k) * 512, 32, b_base + (k) * b_stride)
#define PAGODA_AMX_FINISH(u)                                                                                    \
  do {                                                                                                          \
    const uint8_t* sp = gp + (u) * unit_bytes + scales_off;                                                     \
    const __m512 dd = f16x16(sp), dm = f16x16(sp + lay.m * L);                                                      \
    __m512i mn[4];                                                                                              \
    for (int i = 0; i < 4; ++i) mn[i] = pack16(u8x16(sp + (12 + 2 * i) * L), u8x16(sp + (13 + 2 * i) * L));    \
    const float* td = acts.d + (u) * 16;                                                                        \
    const int32_t* tp = acts.sum32_pairs + (u) * 64;                                                            \
    static_for<0, 16>([&](auto t) {                                                                             \
      __m512i imin = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn[0], _mm512_set1_epi32(tp[t]));              \
      imin = _mm512_dpwssd_epi32(imin, mn[1], _mm512_set1_epi32(tp[16 + t]));                                   \
      imin = _mm512_dpwssd_epi32(imin, mn[2], _mm512_set1_epi32(tp[32 + t]));                                   \
      imin = _mm512_dpwssd_epi32(imin, mn[3], _mm512_set1_epi32(tp[48 + t]));                                   \
      const __m512 dxt = _mm512_set1_ps(td[t]);                                                                 \
      const __m512 isum = _mm512_add_ps(_mm512_load_ps(half + 16 * t), fs[t]);                                  \
      __m512 a = _mm512_fmadd_ps(isum, _mm512_mul_ps(dd, dxt), _mm512_load_ps(acc + 16 * t));                   \
      a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dm, dxt), a);                                \
      _mm512_store_ps(acc + 16 * t, a);                                                                         \
      fs[t] = _mm512_setzero_ps();                                                                              \
    });                                                                                                         \
  } while (0)
#define PAGODA_AMX_SCALE(k)                                                                                     \
  do {                                                                                                          \
    const int32_t* cb = cbuf + ((k) & 1) * 256;                                                                 \
    const uint8_t* sp = gp + ((k) >> 3) * unit_bytes + scales_off + lay.sc * L + ((k) & 7) * L;                      \
    const __m512 sc = _mm512_cvtepi32_ps(u8x16(sp));                                                            \
    static_for<0, 16>([&](auto t) {                                                                             \
      fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * t)), sc, fs[t]);                   \
    });                                                                                                         \
    if (((k) & 7) == 3) {                                                                                       \
      static_for<0, 16>([&](auto t) {                                                                           \
        _mm512_store_ps(half + 16 * t, fs[t]);                                                                  \
        fs[t] = _mm512_setzero_ps();                                                                            \
      });                                                                                                       \
    } else if (((k) & 7) == 7) {                                                                                \
      PAGODA_AMX_FINISH((k) >> 3);                                                                              \
    }                                                                                                           \
  } while (0)
  PAGODA_AMX_PIPELINE(nsb * 8, cbuf)  // over 32-column sub-blocks
#undef PAGODA_AMX_MULTIPLY
#undef PAGODA_AMX_FINISH
#undef PAGODA_AMX_SCALE
  store_tile_rows(acc, y, tm, n_rows, row0, n_valid);
}

// Q6_K: one 16-token x 16-row output tile over all super-blocks. Its scales are per
// 16 columns, so each 16-column sub-block k is a multiply of its own (K = 16: the A tile
// the 16 tokens' bytes 16 (k % 2) .. +15 of their 32-byte rows, the B tile 4 rows of the
// unpacked 6-bit codes at b_base + k * 256). The AVX-512 kernel's integer sum
// sum_k sc_k x (dot_k - 32 x sum16_k) is formed as sum_k sc_k x dot_k (a 32-bit multiply
// per token and sub-block: |dot| x |sc| <= 16 x 63 x 127 x 128 < 2^24, so no float form
// of the sum of two is exact) minus 32 x sum_k sc_k x sum16_k (8 vpdpwssd per token and
// super-block, scales and the tokens' 16-sums as int16 pairs, QuantizedActs::sum16_pairs),
// the same integer; its one float FMA per super-block is the AVX-512 kernel's.
void amx_subtile_q6k(const uint8_t* gp, const uint8_t* b_base, const Super256Tiles& acts, const int32_t* s16_pairs,
                     int64_t pairs_per_token, int64_t nsb, int64_t tm, int32_t* cbuf, float* y, int64_t n_rows,
                     int64_t row0, int n_valid) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  // [d: L f16][sc: 16 x L s8] after the codes (matmul_impl.h's UnitLayout)
  constexpr UnitLayout lay = unit_layout(GgmlType::Q6_K);
  constexpr size_t scales_off = lay.chunks * lay.chunk_vectors * VB;
  const size_t unit_bytes = packed_unit_bytes(GgmlType::Q6_K, L);
  const int8_t* ablk = acts.q;
  alignas(64) float acc[256];
  __m512i isum[16];
  static_for<0, 16>([&](auto t) {
    isum[t] = _mm512_setzero_si512();
    _mm512_store_ps(acc + 16 * t, _mm512_setzero_ps());
  });
#define PAGODA_AMX_MULTIPLY(TA, TB, TC, k) \
  PAGODA_AMX_TILE_MULTIPLY(TA, TB, TC, ablk + ((k) >> 1) * 512 + ((k) & 1) * 16, 32, b_base + (k) * 256)
#define PAGODA_AMX_FINISH(u)                                                                                    \
  do {                                                                                                          \
    const uint8_t* sp = gp + (u) * unit_bytes + scales_off;                                                     \
    const __m512 dd = f16x16(sp);                                                                               \
    __m512i scp[8];                                                                                             \
    for (int j = 0; j < 8; ++j) scp[j] = pack16(s8x16(sp + (2 + 2 * j) * L), s8x16(sp + (3 + 2 * j) * L));      \
    const float* td = acts.d + (u) * 16;                                                                        \
    static_for<0, 16>([&](auto t) {                                                                             \
      const int32_t* sx = s16_pairs + (tm + t) * pairs_per_token + (u) * 8;                                     \
      __m512i off = _mm512_dpwssd_epi32(_mm512_setzero_si512(), scp[0], _mm512_set1_epi32(sx[0]));              \
      for (int j = 1; j < 8; ++j) off = _mm512_dpwssd_epi32(off, scp[j], _mm512_set1_epi32(sx[j]));            \
      const __m512i total = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 5));                               \
      const __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(dd, _mm512_set1_ps(td[t])),     \
                                       _mm512_load_ps(acc + 16 * t));                                           \
      _mm512_store_ps(acc + 16 * t, a);                                                                         \
      isum[t] = _mm512_setzero_si512();                                                                         \
    });                                                                                                         \
  } while (0)
#define PAGODA_AMX_SCALE(k)                                                                                     \
  do {                                                                                                          \
    const int32_t* cb = cbuf + ((k) & 1) * 256;                                                                 \
    const uint8_t* sp = gp + ((k) >> 4) * unit_bytes + scales_off + lay.sc * L + ((k) & 15) * L;                     \
    const __m512i sc = s8x16(sp);                                                                               \
    static_for<0, 16>([&](auto t) {                                                                             \
      isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_load_si512(cb + 16 * t), sc));              \
    });                                                                                                         \
    if (((k) & 15) == 15) PAGODA_AMX_FINISH((k) >> 4);                                                          \
  } while (0)
  PAGODA_AMX_PIPELINE(nsb * 16, cbuf)  // over 16-column sub-blocks
#undef PAGODA_AMX_MULTIPLY
#undef PAGODA_AMX_FINISH
#undef PAGODA_AMX_SCALE
  store_tile_rows(acc, y, tm, n_rows, row0, n_valid);
}

// Q6_K's chunk (32 columns of 16 rows: 4 nibble vectors, then 2 vectors of the top two
// bits) -> the 8 vectors of its codes, step s at out + s * 64, as chunk_steps forms them.
static_assert(unit_layout(GgmlType::Q4_K).chunk_vectors == 4 && unit_layout(GgmlType::Q4_K).m == 2 &&
                  unit_layout(GgmlType::Q4_K).sc == 4 && unit_layout(GgmlType::Q6_K).chunk_vectors == 6 &&
                  unit_layout(GgmlType::Q6_K).sc == 2 && unit_layout(GgmlType::Q6_K).high == 4,
              "the AMX kernels were written and timed against these offsets");
inline void unpack_q6k_chunk(const uint8_t* cp, uint8_t* out) {
  constexpr size_t VB = 64;
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  constexpr int hi_vec = unit_layout(GgmlType::Q6_K).high;
  const __m512i h0 = _mm512_loadu_si512(cp + hi_vec * VB), h1 = _mm512_loadu_si512(cp + (hi_vec + 1) * VB);
  // Bits 2p..2p+1 of each byte of h -> bits 4..5.
  auto high = [](__m512i h, int p) {
    switch (p) {
      case 0: return _mm512_slli_epi16(h, 4);
      case 1: return _mm512_slli_epi16(h, 2);
      case 2: return h;
      default: return _mm512_srli_epi16(h, 2);
    }
  };
  for (int s = 0; s < 4; ++s) {
    const __m512i v = _mm512_loadu_si512(cp + s * VB);
    // a | (b & c)
    _mm512_store_si512(out + s * VB, _mm512_ternarylogic_epi32(_mm512_and_si512(v, m0f), high(h0, s), m30, 0xF8));
    _mm512_store_si512(out + (s + 4) * VB,
                       _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m0f), high(h1, s), m30, 0xF8));
  }
}

template <GgmlType T>
void amx_tile(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, int64_t n16, float* y) {
  constexpr int L = 16;
  constexpr size_t VB = 4 * L;
  constexpr bool kSuper = T == GgmlType::Q4_K || T == GgmlType::Q6_K;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t n_cols = a.n_cols, nb = n_cols / 32, nsb = n_cols / 256;
  const size_t group_bytes = static_cast<size_t>(n_cols / unit_cols(T)) * unit_bytes;
  const int64_t n_groups = (tile.row_end - tile.row_begin + L - 1) / L;
  thread_local std::vector<uint8_t> unpack_v, act_v, cbuf_v;
  int32_t* cbuf = reinterpret_cast<int32_t*>(aligned_scratch(cbuf_v, 2 * 16 * 64));  // two blocks' C tiles
  // The activations' A tile layout (Block32Tiles): QuantizedActs' own, laid out once per
  // matmul, or else (a grouped job starting inside a 16-token group) one group at a time
  // here. Laid out per tile, it was ~30% of the kernel's time (a 64-row tile reuses a
  // group's layout for 4 row groups only).
  int8_t* ablk_own = nullptr;
  float* scalars_own = nullptr;
  int32_t* pairs_own = nullptr;
  if (a.tile_q == nullptr) {
    // Block32: 3 floats per token and block; Super256: 1 float and 4 pairs per super-block.
    const size_t scalar_bytes = kSuper ? static_cast<size_t>(nsb) * 16 * 5 * 4 : static_cast<size_t>(nb) * 3 * 64;
    ablk_own = reinterpret_cast<int8_t*>(aligned_scratch(act_v, static_cast<size_t>(nb) * 512 + scalar_bytes));
    scalars_own = reinterpret_cast<float*>(ablk_own + nb * 512);
    pairs_own = reinterpret_cast<int32_t*>(scalars_own + nsb * 16);
  }
  // B tiles: Q8_0's codes in place (stride 64 within a unit); Q4_0's nibbles unpacked to
  // bytes once per tile for all its token sub-tiles.
  const uint8_t* gp[4];
  const uint8_t* b_base[4];
  size_t b_stride = unit_bytes;
  uint8_t* up = nullptr;
  if constexpr (T != GgmlType::Q8_0) {
    up = aligned_scratch(unpack_v, static_cast<size_t>(n_groups * nb) * 8 * VB);
    b_stride = 8 * VB;
  }
  for (int64_t g = 0; g < n_groups; ++g) {
    gp[g] = w.packed() + static_cast<size_t>(tile.row_begin / L + g) * group_bytes;
    b_base[g] = gp[g];
    if constexpr (T != GgmlType::Q8_0) {
      const __m512i m0f = _mm512_set1_epi8(0x0F);
      uint8_t* o0 = up + static_cast<size_t>(g * nb) * 8 * VB;
      for (int64_t u = 0; u < nb; ++u) {
        uint8_t* o = o0 + u * 8 * VB;
        if constexpr (T == GgmlType::Q6_K) {
          unpack_q6k_chunk(gp[g] + (u / 8) * unit_bytes + (u % 8) * 6 * VB, o);
          continue;
        }
        // Sub-block u's 4 nibble vectors: Q4_0's unit, or the (u % 8)-th chunk of a Q4_K one.
        const uint8_t* p = kSuper ? gp[g] + (u / 8) * unit_bytes + (u % 8) * 4 * VB : gp[g] + u * unit_bytes;
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
    // tileloadd is an asm statement that does not say what it reads: make the unpacked
    // codes and the repacked activations reach memory before any tile load.
    if constexpr (kSuper) {
      const Super256Tiles acts = ablk_own != nullptr ? Super256Tiles::group(ablk_own, scalars_own, pairs_own, n_cols, 0)
                                                      : Super256Tiles::group(a, tm / 16);
      if (ablk_own != nullptr)
        for (int r = 0; r < 16; ++r) acts.write_token(a, tm + r);
      __asm__ volatile("" ::: "memory");
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t row0 = tile.row_begin + g * L;
        const int n_valid = static_cast<int>(std::min<int64_t>(L, tile.row_end - row0));
        if constexpr (T == GgmlType::Q6_K)
          amx_subtile_q6k(gp[g], b_base[g], acts, a.sum16_pairs, n_cols / 32, nsb, tm, cbuf, y, w.n_rows(), row0, n_valid);
        else
          amx_subtile_q4k(gp[g], b_base[g], acts, nsb, tm, cbuf, y, w.n_rows(), row0, n_valid);
      }
    } else {
      const Block32Tiles acts = ablk_own != nullptr ? Block32Tiles::group(ablk_own, scalars_own, n_cols, 0)
                                                     : Block32Tiles::group(a, tm / 16);
      if (ablk_own != nullptr)
        for (int r = 0; r < 16; ++r) acts.write_token(a, tm + r);
      const float* toff = T == GgmlType::Q4_0 ? acts.off_q4 : acts.off_q8;
      __asm__ volatile("" ::: "memory");
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t row0 = tile.row_begin + g * L;
        const int n_valid = static_cast<int>(std::min<int64_t>(L, tile.row_end - row0));
        amx_subtile<T>(gp[g], b_base[g], b_stride, acts.q, acts.d, toff, nb, tm, cbuf, y, w.n_rows(), row0, n_valid);
      }
    }
  }
}

}  // namespace

void matmul_packed_amx(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  const int64_t n_tok = tile.tok_end - tile.tok_begin;
  const int64_t n16 = n_tok / 16 * 16;
  PAGODA_CHECK(tile.row_end - tile.row_begin <= 64, "matmul_packed_amx: a tile of more than 4 row groups");
  if (n16 > 0) {
    load_tile_config(w.type() == GgmlType::Q6_K ? 16 : 32);
    switch (w.type()) {
      case GgmlType::Q8_0: amx_tile<GgmlType::Q8_0>(w, a, tile, n16, y); break;
      case GgmlType::Q4_K: amx_tile<GgmlType::Q4_K>(w, a, tile, n16, y); break;
      case GgmlType::Q6_K: amx_tile<GgmlType::Q6_K>(w, a, tile, n16, y); break;
      default: amx_tile<GgmlType::Q4_0>(w, a, tile, n16, y); break;
    }
    // Leave the tile state unused between calls: while it is in use every context switch
    // saves and restores its 8 KiB, and the thread pool's workers also run everything else.
    _tile_release();
  }
  if (n16 < n_tok) matmul_packed_avx512(w, a, Tile{tile.row_begin, tile.row_end, tile.tok_begin + n16, tile.tok_end}, y);
}

}  // namespace pagoda::matmul_detail

namespace pagoda {

// On top of the AVX-512 table (the same packing): tiles of 16 tokens or more of Q8_0,
// Q4_0, Q4_K and Q6_K run on the AMX tiles; decode and the other types stay on AVX-512.
void register_matmul_kernels_amx(KernelTable& t) {
  using namespace matmul_detail;
  t.prefill_min_tokens = 16;
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    t.matmul[static_cast<size_t>(type)].prefill = matmul_packed_amx;
    t.matmul[static_cast<size_t>(type)].prefill_reads_tiles = true;
  }
}

}  // namespace pagoda
