// exp_vec<V>: the vector exp every SIMD kernel shares (ops_simd.h's exp_f32 and
// softmax, kernels/paged_attention_simd.h's online softmax), so a kernel that inlines it
// computes exactly what exp_f32 computes.
//
// Same rules as ops_simd.h: include only from an ISA translation unit, after that ISA's
// traits (simd_avx2.h / simd_avx512.h); internal linkage.
#pragma once

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

}  // namespace
}  // namespace pagoda
