// AVX2 + FMA instances of the row kernels (ops_simd.h): 8 floats per register.

#include <immintrin.h>

#include "kernels/ops_internal.h"
#include "kernels/ops_simd.h"

namespace pagoda {
namespace {

struct VecAvx2 {
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
};

}  // namespace

namespace ops_internal {
constinit const OpsKernels kOpsAvx2 = make_ops_kernels<VecAvx2>(Isa::Avx2);
}  // namespace ops_internal

}  // namespace pagoda
