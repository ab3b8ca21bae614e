// exp_vec<V>: the vector exp every SIMD kernel shares (ops_simd.h's exp_f32 and
// softmax, kernels/paged_attention_simd.h's online softmax), so a kernel that inlines it
// computes exactly what exp_f32 computes.
//
// Same rules as ops_simd.h: include only from an ISA translation unit, after that ISA's
// traits (simd_avx2.h / simd_avx512.h); internal linkage.
#pragma once

#include <cstdint>

namespace pagoda {
namespace {

// exp(x) by range reduction and a polynomial.
//   x = n*ln2 + r, n = round(x / ln2), |r| <= ln2/2 (Cody-Waite: ln2 split in a short
//   high part, so n*ln2_hi is exact for |n| < 2^15, and a low correction);
//   exp(r) by its degree-7 Taylor polynomial in Horner form: the truncation error
//   |r|^8/8! <= 5.2e-9 is well under float rounding (a degree-6 polynomial would leave
//   1.2e-7, i.e. 1 ulp, on the table);
//   2^n applied as two exact power-of-two multiplies, so n = 128 (x up to ln(FLT_MAX))
//   and denormal results (n down to -150) come out right.
// Max relative error vs double exp: 7.9e-8 (0.94 ulp), measured over every float input
// with a normal result (2.2e9 of them); ops_test sweeps 2M of them. x is clamped to
// [-104, 89] first: exp(-104) rounds to 0 and exp(89) overflows to inf. The clamp keeps
// NaN (operand order).
template <class V>
inline typename V::Reg exp_vec(typename V::Reg x) {
  using Reg = typename V::Reg;
  const Reg lo = V::set1(-104.0f);
  const Reg hi = V::set1(89.0f);
  x = V::min(hi, V::max(lo, x));  // NaN in x: max returns x, min returns x
  const Reg n = V::round(V::mul(x, V::set1(1.44269504088896341f)));  // x / ln2
  Reg r = V::fnmadd(n, V::set1(0.693359375f), x);                     // ln2_hi (9 bits)
  r = V::fnmadd(n, V::set1(-2.12194440054690583e-4f), r);             // ln2 - ln2_hi
  Reg p = V::set1(1.0f / 5040.0f);
  p = V::fmadd(p, r, V::set1(1.0f / 720.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 120.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 24.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 6.0f));
  p = V::fmadd(p, r, V::set1(0.5f));
  p = V::fmadd(p, r, V::set1(1.0f));
  p = V::fmadd(p, r, V::set1(1.0f));
  return V::ldexp(p, n);
}

// tanh(y): for |y| < 0.25 its odd Taylor series to y^11 (the next term, 21844/6081075 y^13,
// is 2e-10 of y there); above, (1 - t) / (1 + t) with t = exp(-2|y|) and y's sign, where 1 - t
// >= 0.39 loses at most ~1.3 bits to cancellation (the same form down to 0 would lose all of
// them near 0: y = 1e-3 came out 3e-5 off). Within ~4 ulp of double tanh (ops_test sweeps
// it); |y| >= ~9 gives ±1, NaN stays NaN. V needs abs, copysign and select_lt beside exp_vec's.
template <class V>
inline typename V::Reg tanh_vec(typename V::Reg y) {
  using Reg = typename V::Reg;
  const Reg a = V::abs(y);
  const Reg y2 = V::mul(y, y);
  Reg p = V::set1(-1382.0f / 155925.0f);
  p = V::fmadd(p, y2, V::set1(62.0f / 2835.0f));
  p = V::fmadd(p, y2, V::set1(-17.0f / 315.0f));
  p = V::fmadd(p, y2, V::set1(2.0f / 15.0f));
  p = V::fmadd(p, y2, V::set1(-1.0f / 3.0f));
  const Reg series = V::fmadd(V::mul(p, y2), a, a);
  const Reg t = exp_vec<V>(V::mul(V::set1(-2.0f), a));
  const Reg one = V::set1(1.0f);
  const Reg big = V::div(V::sub(one, t), V::add(one, t));
  return V::copysign(V::select_lt(a, V::set1(0.25f), series, big), y);  // tanh(-0) = -0
}

// x[i] = cap tanh(x[i] / cap) (Gemma's logit soft-capping; ops.h), as softcap_ref computes
// the argument (x · (1 / cap)). Shared by the row ops and the attention kernels' scores.
template <class V>
void softcap_simd(float* x, int64_t n, float cap) {
  constexpr int64_t W = V::kWidth;
  const typename V::Reg inv = V::set1(1.0f / cap), c = V::set1(cap);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, V::mul(c, tanh_vec<V>(V::mul(V::load(x + i), inv))));
  if (i < n) V::store_partial(x + i, V::mul(c, tanh_vec<V>(V::mul(V::load_partial(x + i, n - i), inv))), n - i);
}

}  // namespace
}  // namespace pagoda
