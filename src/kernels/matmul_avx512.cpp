// AVX-512 (F/BW/VL/DQ + VNNI, BF16 where present) matmul kernels: the packed
// quantized micro-kernels of matmul_simd.h with vpdpbusd, the activation
// quantizer, and the row-major float kernels (F32, F16 via vcvtph2ps + FMA,
// BF16 via vdpbf16ps).

// Before anything else that includes <immintrin.h>: simd_avx512.h brings it (or SIMDe's
// emulation in the emu build) with the pragma it needs.
#include "kernels/simd_avx512.h"

#include <algorithm>

#include "kernels/matmul_simd.h"

namespace pagoda::matmul_detail {

namespace {

using V512 = simd_avx512::Vec;  // kernels/simd_avx512.h: the one trait struct of this level

// ---- float weights, row-major: RM rows x RN tokens per micro-tile ----

// A 4-row x 4-token micro-tile's 16 sums (acc[i][j]: row i, token j) in one vector, lane
// 4j + i, each vector's lanes added in _mm512_reduce_add_ps's order (lane l + (l + 8), then
// + 4, + 2, + 1; GCC's avx512fintrin.h and avx512_emulation.h add in this tree), so a sum is
// bit-identical to the single-vector reduction the 1- and 2-token tiles use: a token's
// result does not depend on the batch around it. 30 shuffles and 15 adds where 16
// separate reductions took ~110 instructions, which at 512-column chunks stood beside
// only 256 vdpbf16ps. One Zen 4 core, 512 tokens x 5632 x 2048, chunks of 512, alternating
// binaries: BF16 157 -> 174 Gop/s, F16 93 -> 100 (outputs unchanged).
inline __m512 reduce_4x4(const __m512 (&acc)[4][4]) {
  // Compile-time indices throughout (static_for): a run-time index puts acc on the stack.
  __m512 s[8];
  static_for<0, 8>([&](auto m) {  // lanes 0-7: acc n = 2m (l + (l + 8)), 8-15: n = 2m + 1; n = 4i + j
    const __m512 a = acc[(2 * m) / 4][(2 * m) % 4], b = acc[(2 * m + 1) / 4][(2 * m + 1) % 4];
    s[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  });
  __m512 v[4];  // quarter q of v[p]: acc 4p + q, its four (l + (l + 4)) partials
  static_for<0, 4>([&](auto p) {
    v[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0xDD));
  });
  // (l + (l + 2)) within each quarter: w0 quarter q holds acc q and 4 + q, w1 8 + q and 12 + q.
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x44), _mm512_shuffle_ps(v[0], v[1], 0xEE));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_ps(v[2], v[3], 0x44), _mm512_shuffle_ps(v[2], v[3], 0xEE));
  // The last pair: quarter q = (acc q, 4 + q, 8 + q, 12 + q), i.e. lane 4j + i = acc[i][j].
  return _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x88), _mm512_shuffle_ps(w0, w1, 0xDD));
}

// Writes (k0 == 0) or adds a micro-tile's sums into y[t0 + j][r0 + i].
template <int RM, int RN>
inline void store_micro_sums(const __m512 (&acc)[RM][RN], float* y, int64_t n_rows, int64_t r0, int64_t t0, int64_t k0) {
  if constexpr (RM == 4 && RN == 4) {
    const __m512 z = reduce_4x4(acc);
    static_for<0, 4>([&](auto j) {
      float* out = y + (t0 + j) * n_rows + r0;
      const __m128 s = _mm512_extractf32x4_ps(z, j);
      _mm_storeu_ps(out, k0 == 0 ? s : _mm_add_ps(_mm_loadu_ps(out), s));
    });
  } else {
    static_for<0, RM>([&](auto i) {
      static_for<0, RN>([&](auto j) {
        float& out = y[(t0 + j) * n_rows + r0 + i];
        const float s = _mm512_reduce_add_ps(acc[i][j]);
        out = k0 == 0 ? s : out + s;
      });
    });
  }
}

// Loads the 16 weights at p as f32: all 16 (Full; the load folds into the convert) or
// those under mask m.
template <GgmlType T, bool Full>
inline __m512 load_w16(const uint8_t* p, __mmask16 m) {
  if constexpr (T == GgmlType::F32) {
    const float* f = reinterpret_cast<const float*>(p);
    return Full ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps(m, f);
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    const __m256i v = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)) : _mm256_maskz_loadu_epi16(m, h);
    if constexpr (T == GgmlType::F16) return _mm512_cvtph_ps(v);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));  // BF16 without avx512bf16
  }
}

// Columns [k0, k1) of RM rows x RN tokens (4 x 4 = 16 accumulators; per 16
// columns 4 weight loads (+4 conversions), 4 activation loads, 16 FMAs); adds
// into y when k0 > 0 (see float_tile).
// The loops over rows and tokens are static_for (compile-time indices) rather than plain
// loops: with run-time indices GCC 12 kept a stack copy of the accumulator array and
// stored all of it every step (16 stores per 16 FMAs), which held F16 / F32 prefill to
// ~29% of the FMA peak (matmul 2048 x 2048 x 512 tokens, one thread: 50 GFLOP/s of 174).
// Whole 32-column steps run without masks, the tail (under 32 columns) through masks: a
// mask per 16 columns cost ~10 scalar instructions a step and kept the F16 loads out of
// the converts. Measured (Xeon, one core, 512 x 2048 x 2048, alternating binaries, 3
// rounds): F16 45-52 -> 53-77 Gop/s, F32 66-67 -> 70-93, BF16 (bf16_micro) 44-58 -> 58-60;
// decode unchanged (memory-bound). Outputs are unchanged: the same FMAs in the same order.
template <GgmlType T, int RM, int RN>
void float_micro(const WeightMatrix& w, const float* x, int64_t r0, int64_t t0, int64_t k0, int64_t k1,
                 float* y) {
  constexpr int64_t elem = T == GgmlType::F32 ? 4 : 2;
  const int64_t n_cols = w.n_cols();
  const bool panels = w.packed() != nullptr;  // F16 panels; F32 keeps rows
  const uint8_t* rows[RM];
  const int64_t step = micro_rows<RM>(w, r0, k0, elem, rows);
  __m512 acc[RM][RN];
  static_for<0, RM>([&](auto i) { static_for<0, RN>([&](auto j) { acc[i][j] = _mm512_setzero_ps(); }); });
  auto step16 = [&]<bool Full>(int64_t k, int64_t off, __mmask16 m) {
    __m512 xv[RN];
    static_for<0, RN>([&](auto j) {
      const float* xp = x + (t0 + j) * n_cols + k;
      xv[j] = Full ? _mm512_loadu_ps(xp) : _mm512_maskz_loadu_ps(m, xp);
    });
    static_for<0, RM>([&](auto i) {
      const __m512 wv = load_w16<T, Full>(rows[i] + off, m);
      static_for<0, RN>([&](auto j) { acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]); });
    });
  };
  int64_t k = k0, off = 0;
  for (; k + 32 <= k1; k += 32, off += step) {
    // Decode: one line a step per row (F32: two).
    if constexpr (RN <= 2) {
      // Panels: no software prefetch. In one process against panels prefetched as
      // bf16_micro's are (Zen 4, fraction of the probe), one thread 2048 x 5632 0.60 ->
      // 0.82 and 5632 x 2048 0.93 -> 0.99, two threads 0.90 -> 0.93, others within 2%.
      for (int i = 0; i < RM && !panels; ++i) {
        prefetch_row_ahead<RM>(rows[i] - k0 * elem, k * elem, w.row_bytes());
        if constexpr (elem == 4) prefetch_row_ahead<RM>(rows[i] - k0 * elem, k * elem + 64, w.row_bytes());
      }
    }
    step16.template operator()<true>(k, off, 0xFFFF);
    step16.template operator()<true>(k + 16, off + 16 * elem, 0xFFFF);
  }
  for (; k < k1; k += 16, off += 16 * elem)  // rows only: panels hold whole 32-column steps
    step16.template operator()<false>(k, off, k1 - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (k1 - k)) - 1));
  store_micro_sums<RM, RN>(acc, y, w.n_rows(), r0, t0, k0);
}

// BF16 weights x bf16-rounded activations with vdpbf16ps (32 products per
// instruction, twice the FMA rate; the activation rounding, <= 2^-8 relative, is
// what ggml also does for bf16 weights). Loops as float_micro's, rows or panels.
template <int RM, int RN>
void bf16_micro(const WeightMatrix& w, const uint16_t* xbf, int64_t r0, int64_t t0, int64_t k0, int64_t k1,
                float* y) {
  const int64_t n_cols = w.n_cols();
  const bool panels = w.packed() != nullptr;
  const uint8_t* rows[RM];
  const int64_t step = micro_rows<RM>(w, r0, k0, 2, rows);
  __m512 acc[RM][RN];
  static_for<0, RM>([&](auto i) { static_for<0, RN>([&](auto j) { acc[i][j] = _mm512_setzero_ps(); }); });
  auto step32 = [&]<bool Full>(int64_t k, int64_t off, __mmask32 m) {
    __m512bh xv[RN];
    static_for<0, RN>([&](auto j) {
      const uint16_t* xp = xbf + (t0 + j) * n_cols + k;
      xv[j] = __builtin_bit_cast(__m512bh, Full ? _mm512_loadu_si512(xp) : _mm512_maskz_loadu_epi16(m, xp));
    });
    static_for<0, RM>([&](auto i) {
      const uint8_t* wp = rows[i] + off;
      const __m512bh wv = __builtin_bit_cast(__m512bh, Full ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi16(m, wp));
      static_for<0, RN>([&](auto j) { acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]); });
    });
  };
  int64_t k = k0, off = 0;
  for (; k + 32 <= k1; k += 32, off += step) {
    if constexpr (RN <= 2) {  // decode
      for (int i = 0; i < RM; ++i) {
        if (panels)  // one stream: each row's line of this step, kDecodePrefetchAhead on
          prefetch_weights(rows[i] + off + kDecodePrefetchAhead);
        else  // see prefetch_row_ahead
          prefetch_row_ahead<RM>(rows[i] - 2 * k0, 2 * k, w.row_bytes());
      }
    }
    step32.template operator()<true>(k, off, 0xFFFFFFFFu);
  }
  if (k < k1) step32.template operator()<false>(k, off, __mmask32((1u << (k1 - k)) - 1));  // rows only
  store_micro_sums<RM, RN>(acc, y, w.n_rows(), r0, t0, k0);
}

template <GgmlType T>
void float_tile(const WeightMatrix& w, const float* x, const uint16_t* xbf, const Tile& tile, float* y) {
  // Columns [k0, k1) of rows [r0, r1) for all the tile's tokens.
  auto pass = [&](int64_t k0, int64_t k1, int64_t r0, int64_t r1) {
    auto rows = [&]<int RN>(int64_t t0) {
      int64_t r = r0;
      if (xbf) {
        for (; r + 4 <= r1; r += 4) bf16_micro<4, RN>(w, xbf, r, t0, k0, k1, y);
        for (; r < r1; ++r) bf16_micro<1, RN>(w, xbf, r, t0, k0, k1, y);
      } else {
        for (; r + 4 <= r1; r += 4) float_micro<T, 4, RN>(w, x, r, t0, k0, k1, y);
        for (; r < r1; ++r) float_micro<T, 1, RN>(w, x, r, t0, k0, k1, y);
      }
    };
    int64_t t = tile.tok_begin;
    for (; t + 4 <= tile.tok_end; t += 4) rows.template operator()<4>(t);
    for (; t + 2 <= tile.tok_end; t += 2) rows.template operator()<2>(t);
    for (; t < tile.tok_end; ++t) rows.template operator()<1>(t);
  };
  walk_chunks(w.n_cols(), kFloatKcAvx512, tile, 4, pass, w.packed() ? kPanelTileRows : 4);
}

// ---- activation quantizer (bit-identical to quantize_act_row_scalar) ----

inline __m512 abs_ps(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF))); }

// Quantizes 16 values with inverse scale id into q[16]; returns their sum.
inline int32_t quant16(const float* x, __m512 id, int8_t* q) {
  const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qi));
  return _mm512_reduce_add_epi32(qi);
}

}  // namespace

void quantize_act_row_avx512(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out) {
  const int per = kind == ActKind::Block32 ? 32 : 256;
  for (int64_t b = 0; b < n_cols / per; ++b) {
    const float* xb = x + b * per;
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < per; i += 16) mx = _mm512_max_ps(mx, abs_ps(_mm512_loadu_ps(xb + i)));
    const float amax = _mm512_reduce_max_ps(mx);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 idv = _mm512_set1_ps(id);
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

void convert_to_bf16_avx512(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), __builtin_bit_cast(__m256i, _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i))));
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void matmul_packed_avx512(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  packed_dispatch<V512>(w, a, tile, y);
}

void matmul_float_avx512(const WeightMatrix& w, const float* x, const uint16_t* xbf, const Tile& tile,
                         float* y) {
  switch (w.type()) {
    case GgmlType::F32: return float_tile<GgmlType::F32>(w, x, nullptr, tile, y);
    case GgmlType::F16: return float_tile<GgmlType::F16>(w, x, nullptr, tile, y);
    case GgmlType::BF16: return float_tile<GgmlType::BF16>(w, x, xbf, tile, y);
    default: return;
  }
}

}  // namespace pagoda::matmul_detail

namespace pagoda {

void register_matmul_kernels_avx512(KernelTable& t) {
  using namespace matmul_detail;
  register_packed_kernels<V512>(t);
  t.matmul[static_cast<size_t>(GgmlType::F32)].flt = float_tile<GgmlType::F32>;
  t.matmul[static_cast<size_t>(GgmlType::F16)].flt = float_tile<GgmlType::F16>;
  t.matmul[static_cast<size_t>(GgmlType::BF16)].flt = float_tile<GgmlType::BF16>;
  t.quantize_act_row = quantize_act_row_avx512;
  // vdpbf16ps on bf16-rounded activations (BF16 weights), where the CPU has AVX512_BF16.
  if (kEmulatedAvx512 || cpu_features().avx512bf16) t.bf16_acts = convert_to_bf16_avx512;
}

}  // namespace pagoda
