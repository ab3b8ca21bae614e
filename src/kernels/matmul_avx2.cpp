// AVX2 + FMA + F16C matmul kernels: the packed quantized micro-kernels of
// matmul_simd.h with pmaddubsw/pmaddwd (no VNNI), the activation quantizer,
// and the row-major float kernels.
#include "kernels/simd_avx2.h"  // first: it brings <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/matmul_simd.h"

namespace pagoda::matmul_detail {

namespace {

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i: hsum_ps(a[i]), the same additions in the same order ((h0 + h2) + (h1 + h3) of
// h = low half + high half), four rows at once.
inline __m128 hsum4_ps(const __m256 (&a)[4]) {
  __m128 h[4];
  for (int i = 0; i < 4; ++i) h[i] = _mm_add_ps(_mm256_castps256_ps128(a[i]), _mm256_extractf128_ps(a[i], 1));
  const __m128 u01 = _mm_add_ps(_mm_unpacklo_ps(h[0], h[1]), _mm_unpackhi_ps(h[0], h[1]));
  const __m128 u23 = _mm_add_ps(_mm_unpacklo_ps(h[2], h[3]), _mm_unpackhi_ps(h[2], h[3]));
  return _mm_add_ps(_mm_movelh_ps(u01, u23), _mm_movehl_ps(u23, u01));
}

using V256 = simd_avx2::Vec;  // kernels/simd_avx2.h: the one trait struct of this level

// ---- float weights, rows or panels: 4 rows x 3 tokens (12 accumulators) ----
// Three tokens a micro-tile rather than two: 12 FMAs per 4 weight loads (+ converts) and 3
// activation loads instead of 8 per 4 + 2; 16 ymm registers hold 12 accumulators, 3
// activations and the weight being used (4 tokens spilled: 20-40% slower). Zen 4 under
// PAGODA_ISA=avx2, matmul_bench Matmul512 (2 threads, 5632 x 2048 and 2048 x 5632),
// three rounds alternating with the 2-token build: F16 135-155 -> 151-163 Gop/s, BF16
// 113-135 -> 134-146; pp512 F16 72.8 / 74.8 -> 79.6 / 76.5 tok/s, BF16 62.9 / 65.2 ->
// 68.8 / 71.0. Each output's sum is the same FMAs in the same order: the same bits.
// A 4-row micro-tile's sums leave as one vector a token (hsum4_ps, the same additions as
// hsum_ps): against 12 horizontal sums and scalar stores, Matmul512 F16 162-170 -> 175-191
// Gop/s, BF16 144-150 -> 154-163 (three rounds alternating binaries).

template <GgmlType T>
inline __m256 load_w8(const uint8_t* p) {
  if constexpr (T == GgmlType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  else if constexpr (T == GgmlType::F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

template <GgmlType T>
inline float load_w1(const uint8_t* row, int64_t k) {
  uint16_t h;
  if constexpr (T == GgmlType::F32) {
    float f;
    __builtin_memcpy(&f, row + 4 * k, 4);
    return f;
  }
  __builtin_memcpy(&h, row + 2 * k, 2);
  if constexpr (T == GgmlType::F16) return f16_to_f32(h);
  else return bf16_to_f32(h);
}

// Columns [k0, k1) of RM rows x RN tokens, rows or panels (micro_rows); adds into y when
// k0 > 0 (see float_tile). k1 - k0 is a multiple of 8 except in the last chunk of rows,
// whose tail goes through scalar FMAs (panels hold whole 32-column steps).
template <GgmlType T, int RM, int RN>
void float_micro(const WeightMatrix& w, const float* x, int64_t r0, int64_t t0, int64_t k0, int64_t k1,
                 float* y) {
  constexpr int64_t elem = T == GgmlType::F32 ? 4 : 2;
  const int64_t n_cols = w.n_cols(), k_main = k0 + ((k1 - k0) & ~int64_t{7});
  const bool panels = w.packed() != nullptr;
  const uint8_t* rows[RM];
  const int64_t step = micro_rows<RM>(w, r0, k0, elem, rows);
  __m256 acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  auto step8 = [&](int64_t k, int64_t off) {
    __m256 xv[RN];
    for (int j = 0; j < RN; ++j) xv[j] = _mm256_loadu_ps(x + (t0 + j) * n_cols + k);
    for (int i = 0; i < RM; ++i) {
      const __m256 wv = load_w8<T>(rows[i] + off);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  };
  // Decode (RN = 1: one token, or the odd one of a pair) in rows: a line every 16 (F32) or
  // 32 columns, see prefetch_row_ahead. This level had none: Xeon held to AVX2, 2 threads,
  // tg32, 3 alternating rounds: F16 73-79% -> 83-94% of the probe, BF16 73-82% -> 84-96%.
  // Panels (F16 / BF16, see kPanelRows): no software prefetch. Zen 4 under PAGODA_ISA=avx2,
  // rows against panels in one process (cold matvecs, each pass beside its own probe pass,
  // alternating, two threads, 2048 x 5632 and 5632 x 2048, three rounds): rows 0.54-0.85 of
  // the probe, panels 0.79-1.00 (F16 2048 x 5632 at ~60 GB/s: 26 -> 39 GB/s, BF16 5632 x
  // 2048: 28 -> 41); panels prefetched 2 or 6 KiB ahead read the same as with none.
  // 512-token matmuls in the same process: within 1% (one pair +4%) of rows.
  auto prefetch = [&](int64_t k) {
    if constexpr (RN == 1) {
      if (!panels && (k & (64 / elem - 1)) == 0)
        for (int i = 0; i < RM; ++i) prefetch_row_ahead<RM>(rows[i] - k0 * elem, k * elem, w.row_bytes());
    }
  };
  int64_t k = k0, off = 0;
  for (; k + 32 <= k_main; k += 32, off += step)
    for (int64_t s = 0; s < 32; s += 8) {
      prefetch(k + s);
      step8(k + s, off + s * elem);
    }
  for (; k < k_main; k += 8, off += 8 * elem) {  // rows only
    prefetch(k);
    step8(k, off);
  }
  if constexpr (RM == 4) {
    if (k_main == k1) {  // no scalar tail: the 4 rows' sums of a token in one vector
      for (int j = 0; j < RN; ++j) {
        const __m256 a[4] = {acc[0][j], acc[1][j], acc[2][j], acc[3][j]};
        const __m128 s = hsum4_ps(a);
        float* out = y + (t0 + j) * w.n_rows() + r0;
        _mm_storeu_ps(out, k0 == 0 ? s : _mm_add_ps(_mm_loadu_ps(out), s));
      }
      return;
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) {
      float s = hsum_ps(acc[i][j]);
      for (int64_t kk = k_main; kk < k1; ++kk) s = std::fma(load_w1<T>(rows[i], kk - k0), x[(t0 + j) * n_cols + kk], s);
      float& out = y[(t0 + j) * w.n_rows() + r0 + i];
      out = k0 == 0 ? s : out + s;
    }
}

template <GgmlType T>
void float_tile(const WeightMatrix& w, const float* x, const Tile& tile, float* y) {
  // Columns [k0, k1) of rows [r0, r1) for all the tile's tokens.
  auto pass = [&](int64_t k0, int64_t k1, int64_t r0, int64_t r1) {
    auto rows = [&]<int RN>(int64_t t0) {
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4) float_micro<T, 4, RN>(w, x, r, t0, k0, k1, y);
      for (; r < r1; ++r) float_micro<T, 1, RN>(w, x, r, t0, k0, k1, y);
    };
    int64_t t = tile.tok_begin;
    for (; t + 3 <= tile.tok_end; t += 3) rows.template operator()<3>(t);
    for (; t + 2 <= tile.tok_end; t += 2) rows.template operator()<2>(t);
    for (; t < tile.tok_end; ++t) rows.template operator()<1>(t);
  };
  walk_chunks(w.n_cols(), kFloatKcAvx2, tile, 2, pass, w.packed() ? kPanelTileRows : 4);
}

// ---- activation quantizer (bit-identical to quantize_act_row_scalar) ----

// Quantizes 16 values with inverse scale id into q[16]; returns their sum.
inline int32_t quant16(const float* x, __m256 id, int8_t* q) {
  const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
  // packs works per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7] -> fix the order.
  __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
  __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), p8);
  return hsum_epi32(_mm256_add_epi32(a, b));
}

}  // namespace

void quantize_act_row_avx2(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out) {
  const int per = kind == ActKind::Block32 ? 32 : 256;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < n_cols / per; ++b) {
    const float* xb = x + b * per;
    __m256 mx = _mm256_setzero_ps();
    for (int i = 0; i < per; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    int8_t* q = out.q + b * per;
    out.d[b] = d;
    if (kind == ActKind::Block32) {
      const int32_t s = quant16(xb, idv, q) + quant16(xb + 16, idv, q + 16);
      out.sum32[b] = s;
      out.dsum32[b] = d * static_cast<float>(s);
      out.neg8_dsum32[b] = -8.0f * out.dsum32[b];
    } else {
      for (int i = 0; i < 16; ++i) out.sum16[b * 16 + i] = quant16(xb + 16 * i, idv, q + 16 * i);
      for (int j = 0; j < 8; ++j) out.sum32[b * 8 + j] = out.sum16[b * 16 + 2 * j] + out.sum16[b * 16 + 2 * j + 1];
    }
  }
}

void matmul_packed_avx2(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  packed_dispatch<V256>(w, a, tile, y);
}

void matmul_float_avx2(const WeightMatrix& w, const float* x, const Tile& tile, float* y) {
  switch (w.type()) {
    case GgmlType::F32: return float_tile<GgmlType::F32>(w, x, tile, y);
    case GgmlType::F16: return float_tile<GgmlType::F16>(w, x, tile, y);
    case GgmlType::BF16: return float_tile<GgmlType::BF16>(w, x, tile, y);
    default: return;
  }
}

}  // namespace pagoda::matmul_detail

namespace pagoda {

void register_matmul_kernels_avx2(KernelTable& t) {
  using namespace matmul_detail;
  register_packed_kernels<V256>(t);
  auto& m = t.matmul;
  m[static_cast<size_t>(GgmlType::F32)].flt = [](const WeightMatrix& w, const float* x, const uint16_t*,
                                                 const Tile& tile, float* y) { float_tile<GgmlType::F32>(w, x, tile, y); };
  m[static_cast<size_t>(GgmlType::F16)].flt = [](const WeightMatrix& w, const float* x, const uint16_t*,
                                                 const Tile& tile, float* y) { float_tile<GgmlType::F16>(w, x, tile, y); };
  m[static_cast<size_t>(GgmlType::BF16)].flt = [](const WeightMatrix& w, const float* x, const uint16_t*,
                                                  const Tile& tile, float* y) { float_tile<GgmlType::BF16>(w, x, tile, y); };
  t.quantize_act_row = quantize_act_row_avx2;
}

}  // namespace pagoda
