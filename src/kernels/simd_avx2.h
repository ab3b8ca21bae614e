// Vec: the AVX2 + FMA + F16C traits (8 floats per __m256; 8 int32 lanes per __m256i) that
// the width-generic kernels are written over: kernels/ops_simd.h (row ops),
// kernels/paged_attention_simd.h (paged attention) and kernels/matmul_simd.h (the packed
// quantized matmul, as V256; its integer operations at the end of the struct). One copy,
// so the kernel families cannot drift apart in how they load tails or reduce.
//
// Include only from *_avx2.cpp files: they are the ones built with -mavx2 -mfma -mf16c
// -mbmi2 (CMakeLists.txt). Everything here is in an anonymous namespace, so each
// including file gets its own copy compiled with its own flags and the linker can never
// merge these inline functions with a differently-flagged instance (the ODR trap).
//
// Provides, for Reg = __m256 of kWidth = 8 floats:
//   load, store, load_partial(p, n) (lanes >= n read 0), load_partial(p, n, fill),
//   store_partial(p, r, n) (n < kWidth; lanes >= n are neither read nor written),
//   set1, zero, add, sub, mul, div, fmadd(a, b, c) = a*b + c, fnmadd(a, b, c) = c - a*b,
//   max, min (x86 semantics: the second operand is returned when either is NaN),
//   round (to nearest even), ldexp(p, n) = p * 2^n for integral n in [-150, 128],
//   swap_pairs (lanes 2i <-> 2i+1), reduce_add, reduce_max, transpose8x8 (8 f16 / f32 rows
//   into 8 columns, simd_transpose8x8.h);
// and the row decoders, each reading kWidth elements: cvt_f16, cvt_bf16 (const uint16_t*),
// cvt_i8 (const int8_t*), lo_nibbles / hi_nibbles (const uint8_t*: float of p[i] & 15 /
// p[i] >> 4).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/simd_transpose8x8.h"

namespace pagoda::simd_avx2 {
namespace {

struct Vec {
  using Reg = __m256;
  static constexpr int64_t kWidth = 8;

  // Lanes [0, n) set, for n in [0, 8): a sliding window over 8 ones then 8 zeros.
  static __m256i tail_mask(int64_t n) {
    static const int32_t kWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWindow + 8 - n));
  }

  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  // vmaskmovps neither reads nor faults on masked-off lanes.
  static Reg load_partial(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static Reg load_partial(const float* p, int64_t n, float fill) {
    const __m256i m = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_partial(float* p, Reg v, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), v); }

  static Reg set1(float a) { return _mm256_set1_ps(a); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg abs(Reg a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // |r| with the sign of s.
  static Reg copysign(Reg r, Reg s) {
    const Reg sign = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign, r), _mm256_and_ps(sign, s));
  }
  // a < b ? x : y per lane (false for NaN).
  static Reg select_lt(Reg a, Reg b, Reg x, Reg y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  // p * 2^n as p * 2^(n>>1) * 2^(n - (n>>1)): each factor is a normal float for
  // n in [-150, 128], and the second multiply rounds once into the denormal range.
  static Reg ldexp(Reg p, Reg n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const Reg f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const Reg f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  }
  static Reg swap_pairs(Reg v) { return _mm256_permute_ps(v, 0xB1); }
  static float reduce_add(Reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(Reg v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Row decoders (8 elements each).
  static Reg cvt_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg cvt_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static Reg cvt_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static __m256i u8x8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg lo_nibbles(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(u8x8(p), _mm256_set1_epi32(0x0F)));
  }
  static Reg hi_nibbles(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_srli_epi32(u8x8(p), 4)); }

  // The paged-attention tile's Kᵀ: see simd_transpose8x8.h.
  static void transpose8x8(const uint8_t* base, size_t row_bytes, bool f16, int64_t d0, float* dst,
                           int64_t dst_stride) {
    simd_x86::transpose8x8_rows(base, row_bytes, f16, d0, dst, dst_stride);
  }

  // ---- The packed matmul kernels' traits (kernels/matmul_simd.h): 32-bit integer lanes
  // I for the codes' dot products, F the same floats as Reg. Integer names where the
  // float ones above are taken: izero(), set1(int32_t), load(const void*), store_i.
  static constexpr int L = 8;
  // 16 ymm registers: 4 float + 4 int accumulators + weights and temporaries.
  static constexpr int kMaxN = 4;
  // Row groups per micro-kernel of the 32-wide formats (block32_kernel): 2
  // groups x 4 tokens = 8 int16 pair-sum registers; the 8 float accumulators
  // spill to L1 and are touched once per 32 columns.
  static constexpr int kGroups = 2;
  static constexpr int kBlock32N = 4;
  // pmaddubsw saturates at 32767, so Q8_0 codes (q + 128 up to 255) cannot
  // go in as unsigned; the kernel uses |q| x sign(x, q) (max 2 x 128 x 127 =
  // 32512) and needs no offset correction.
  static constexpr int kQ8Offset = 0;
  using I = __m256i;
  using F = __m256;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store_i(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static I izero() { return _mm256_setzero_si256(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_and(I a, I b, I c) { return _mm256_or_si256(a, _mm256_and_si256(b, c)); }
  template <int n> static I srli16(I a) { return _mm256_srli_epi16(a, n); }
  template <int n> static I slli16(I a) {
    if constexpr (n == 0) return a;
    else return _mm256_slli_epi16(a, n);
  }
  static I bcast4(const int8_t* x4) {
    int32_t v;
    __builtin_memcpy(&v, x4, 4);
    return _mm256_set1_epi32(v);
  }
  // No VNNI: pmaddubsw gives int16 sums of 2 products, summed over several
  // steps (pair_steps in matmul_simd.h) before pmaddwd widens them.
  static constexpr bool kPairSums = true;
  static I mul16(I w, I xb) { return _mm256_maddubs_epi16(w, xb); }
  static I q8_prep(I codes) { return codes; }  // packed as q already (q8_codes_signed)
  static I mul16_q8(I w, I xb) {
    return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xb, w));
  }
  // The empty asm pins each partial sum in a register: without it GCC
  // reassociates the 8-step add chains of all N tokens into trees, computes
  // all 32 products first and spills half of them (2.3x slower on Zen 3).
  static I add16(I a, I b) {
    I r = _mm256_add_epi16(a, b);
    __asm__("" : "+x"(r));
    return r;
  }
  static I widen(I p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I add(I a, I b) {  // pinned like add16
    I r = _mm256_add_epi32(a, b);
    __asm__("" : "+x"(r));
    return r;
  }
  static I load_u8_i32(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static I load_s8_i32(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static F load_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I pack16(I lo, I hi) { return _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA); }
  static I dot16(I acc, I a, I b) { return add(acc, _mm256_madd_epi16(a, b)); }
  static I bcast16(const uint8_t* p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I lut16(I table, I idx) { return _mm256_shuffle_epi8(table, idx); }
  // 2^(e-128): f32 exponent field e - 1, or for e < 2 the subnormal 0x00200000 << e.
  static F load_e8m0_half(const uint8_t* p) {
    const I e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const I normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const I sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const I small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
  }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F set1f(float f) { return _mm256_set1_ps(f); }
  static F fzero() { return _mm256_setzero_ps(); }
  static void store(float* y, F v, int n_valid) {
    if (n_valid == L) {
      _mm256_storeu_ps(y, v);
      return;
    }
    alignas(32) float tmp[L];
    _mm256_store_ps(tmp, v);
    for (int i = 0; i < n_valid; ++i) y[i] = tmp[i];
  }
};

}  // namespace
}  // namespace pagoda::simd_avx2
