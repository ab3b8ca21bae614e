// Vec: the AVX-512 (F/BW/VL/DQ, VNNI) traits (16 floats per __m512, tails through mask
// registers; 16 int32 lanes per __m512i) that the width-generic kernels are written over:
// kernels/ops_simd.h (row ops), kernels/paged_attention_simd.h (paged attention) and
// kernels/matmul_simd.h (the packed quantized matmul, as V512): the one trait struct of
// this level. The AVX2 twin is kernels/simd_avx2.h; the float operations and their
// contracts are listed there, the matmul ones at the end of the struct.
//
// Include only from *_avx512.cpp files, and before anything else that includes
// <immintrin.h> (so the pragma below covers it): they are the ones built with the AVX-512
// flags (CMakeLists.txt). Everything here is in an anonymous namespace, so each including
// file gets its own copy compiled with its own flags and the linker can never merge these
// inline functions with a differently-flagged instance (the ODR trap).
#pragma once

// GCC 12 flags its own _mm512_undefined_*() (`__m512 __Y = __Y;`) as uninitialized once
// inlined into the reduce intrinsics (GCC bug 105593, fixed in 13); the suppression covers
// the header's lines only.
#ifdef PAGODA_AVX512_EMULATION
// The emulation build (CMakePresets.json `emu`): SIMDe's portable AVX-512.
#include "kernels/avx512_emulation.h"
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include <cstdint>

#include "kernels/simd_transpose8x8.h"

namespace pagoda::simd_avx512 {
namespace {

struct Vec {
  using Reg = __m512;
  static constexpr int64_t kWidth = 16;

  // Lanes [0, n) set, n in [0, 16).
  static __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  // Masked-off lanes are neither read nor able to fault.
  static Reg load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static Reg load_partial(const float* p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
  }
  static void store_partial(float* p, Reg v, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }

  static Reg set1(float a) { return _mm512_set1_ps(a); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg abs(Reg a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
  }
  // |r| with the sign of s.
  static Reg copysign(Reg r, Reg s) {
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(r), _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
  }
  // a < b ? x : y per lane (false for NaN).
  static Reg select_lt(Reg a, Reg b, Reg x, Reg y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
  }
  // p * 2^n in two exact steps, as in the AVX2 traits.
  static Reg ldexp(Reg p, Reg n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const Reg f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const Reg f2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, f1), f2);
  }
  static Reg swap_pairs(Reg v) { return _mm512_permute_ps(v, 0xB1); }
  static float reduce_add(Reg v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(Reg v) { return _mm512_reduce_max_ps(v); }

  // Row decoders (16 elements each).
  static Reg cvt_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg cvt_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static Reg cvt_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static __m512i u8x16(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg lo_nibbles(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(u8x16(p), _mm512_set1_epi32(0x0F)));
  }
  static Reg hi_nibbles(const uint8_t* p) { return _mm512_cvtepi32_ps(_mm512_srli_epi32(u8x16(p), 4)); }

  // The paged-attention tile's Kᵀ: see simd_transpose8x8.h.
  static void transpose8x8(const uint8_t* base, size_t row_bytes, bool f16, int64_t d0, float* dst,
                           int64_t dst_stride) {
    simd_x86::transpose8x8_rows(base, row_bytes, f16, d0, dst, dst_stride);
  }

  // ---- The packed matmul kernels' traits (kernels/matmul_simd.h): 32-bit integer lanes
  // I for the codes' dot products, F the same floats as Reg. Integer names where the
  // float ones above are taken: izero(), set1(int32_t), load(const void*), store_i.
  static constexpr int L = 16;
  // Tokens per micro-tile: 8 float + 8 int accumulators + ~6 temporaries of
  // the 32 zmm registers. 12 would also fit for the 32-wide formats but not
  // with the K-quants' extra per-sub-block accumulators.
  static constexpr int kMaxN = 8;
  // The 32-wide formats: 2 row groups x 4 tokens per micro-kernel (8 int + 8 float
  // accumulators), so each activation broadcast feeds two vpdpbusd and each weight
  // vector four. Measured on a Xeon (2 threads, alternating binaries) against 1 group x
  // 8 tokens, where every vpdpbusd took its broadcast as a memory operand: matmul
  // 512 x 2048 x 2048 Q4_0 424-468 -> 492-518 Gop/s, matvec 5632 x 2048 Q4_0 71-76 ->
  // 78-82, Q8_0 41-42 -> 44-54; pp512 Q4_0 146-184 -> 250-281 tok/s; decode within noise.
  static constexpr int kGroups = 2;
  static constexpr int kBlock32N = 4;
  // Q8_0 codes are q + 128 (u8 for vpdpbusd); subtract 128 x sum(x) per block.
  static constexpr int kQ8Offset = 128;
  using I = __m512i;
  using F = __m512;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static void store_i(void* p, I v) { _mm512_storeu_si512(p, v); }
  static I izero() { return _mm512_setzero_si512(); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_and(I a, I b, I c) { return _mm512_ternarylogic_epi32(a, b, c, 0xF8); }
  template <int n> static I srli16(I a) { return _mm512_srli_epi16(a, n); }
  template <int n> static I slli16(I a) {
    if constexpr (n == 0) return a;
    else return _mm512_slli_epi16(a, n);
  }
  static I bcast4(const int8_t* x4) {
    int32_t v;
    __builtin_memcpy(&v, x4, 4);
    return _mm512_set1_epi32(v);
  }
  static constexpr bool kPairSums = false;
  static I dot4(I acc, I w, I xb) { return _mm512_dpbusd_epi32(acc, w, xb); }
  // acc += dot4(w, bcast4(x4)), the broadcast being vpdpbusd's memory operand ({1to16}),
  // which GCC 12 does not fold by itself (block32_kernel's one-group steps use it).
#ifdef PAGODA_AVX512_EMULATION
  static I dot4_x4(I acc, I w, const int8_t* x4) { return dot4(acc, w, bcast4(x4)); }
#else
  static I dot4_x4(I acc, I w, const int8_t* x4) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int8_t(*)[4]>(x4)));
    return acc;
  }
#endif
  static I q8_prep(I codes) { return codes; }
  static I dot4_q8(I acc, I w, I xb) { return dot4(acc, w, xb); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I load_u8_i32(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I load_s8_i32(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F load_f16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static I pack16(I lo, I hi) { return _mm512_mask_blend_epi16(0xAAAAAAAA, lo, _mm512_slli_epi32(hi, 16)); }
  static I dot16(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static I bcast16(const uint8_t* p) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I lut16(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
  // 2^(e-128): f32 exponent field e - 1, or for e < 2 the subnormal 0x00200000 << e.
  static F load_e8m0_half(const uint8_t* p) {
    const I e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const I normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const I sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
  }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F set1f(float f) { return _mm512_set1_ps(f); }
  static F fzero() { return _mm512_setzero_ps(); }
  static void store(float* y, F v, int n_valid) {
    if (n_valid == L) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << n_valid) - 1), v);
  }
};

}  // namespace
}  // namespace pagoda::simd_avx512
