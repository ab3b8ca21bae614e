// AVX-512F instances of the row kernels (ops_simd.h): 16 floats per register, tails
// through mask registers.

// GCC 12 flags its own _mm512_undefined_*() (`__m512 __Y = __Y;`) as uninitialized once
// inlined (GCC bug 105593, fixed in 13); the suppression covers the header's lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "kernels/ops_internal.h"
#include "kernels/ops_simd.h"

namespace pagoda {
namespace {

struct VecAvx512 {
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
};

}  // namespace

namespace ops_internal {
constinit const OpsKernels kOpsAvx512 = make_ops_kernels<VecAvx512>(Isa::Avx512);
}  // namespace ops_internal

}  // namespace pagoda
