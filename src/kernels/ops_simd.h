// The SIMD row kernels of ops.h written once over a vector-traits class, so the AVX2
// and AVX-512 paths are the same code at two widths (and the AVX-512 one, which fewer
// test machines can run, differs from the tested AVX2 one only in its traits).
//
// Include only from an ISA translation unit (ops_avx2.cpp, ops_avx512.cpp), which
// instantiates it with that ISA's traits (simd_avx2.h / simd_avx512.h). Everything here
// has internal linkage: each ISA file gets its own copy compiled with its own flags, so
// the linker can never merge an AVX-512 instance into AVX2 code (the ODR trap of inline
// functions shared across differently-flagged files).
//
// A traits class V provides, for its register type V::Reg of V::kWidth floats:
//   load, store, load_partial(p, n) (lanes >= n read 0), load_partial(p, n, fill),
//   store_partial(p, r, n) (n < kWidth; lanes >= n are neither read nor written),
//   set1, zero, add, sub, mul, div, fmadd(a, b, c) = a*b + c, fnmadd(a, b, c) = c - a*b,
//   max, min (x86 semantics: the second operand is returned when either is NaN),
//   round (to nearest even), ldexp(p, n) = p * 2^n for integral n in [-150, 128],
//   swap_pairs (lanes 2i <-> 2i+1), reduce_add, reduce_max.
// Tails are handled with masked loads/stores, so every element goes through the same
// vector arithmetic (no scalar tail with different rounding).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/exp_simd.h"
#include "kernels/ops_internal.h"

namespace pagoda {
namespace {

template <class V>
void exp_f32_simd(const float* x, float* y, int64_t n) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, exp_vec<V>(V::load(x + i)));
  if (i < n) V::store_partial(y + i, exp_vec<V>(V::load_partial(x + i, n - i)), n - i);
}

// sum of x[i]^2 with four accumulators (FMA latency 4 cycles, 2 ports).
template <class V>
float sum_squares(const float* x, int64_t n) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  Reg a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    const Reg v0 = V::load(x + i), v1 = V::load(x + i + W);
    const Reg v2 = V::load(x + i + 2 * W), v3 = V::load(x + i + 3 * W);
    a0 = V::fmadd(v0, v0, a0);
    a1 = V::fmadd(v1, v1, a1);
    a2 = V::fmadd(v2, v2, a2);
    a3 = V::fmadd(v3, v3, a3);
  }
  for (; i + W <= n; i += W) {
    const Reg v = V::load(x + i);
    a0 = V::fmadd(v, v, a0);
  }
  if (i < n) {
    const Reg v = V::load_partial(x + i, n - i);
    a1 = V::fmadd(v, v, a1);
  }
  return V::reduce_add(V::add(V::add(a0, a1), V::add(a2, a3)));
}

template <class V>
void rms_norm_simd(const float* x, const float* w, float* y, int64_t n, float eps) {
  constexpr int64_t W = V::kWidth;
  if (n <= 0) return;
  const float mean_sq = sum_squares<V>(x, n) / static_cast<float>(n);
  const auto scale = V::set1(1.0f / std::sqrt(mean_sq + eps));
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::mul(V::mul(V::load(x + i), scale), V::load(w + i)));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(y + i, V::mul(V::mul(V::load_partial(x + i, m), scale), V::load_partial(w + i, m)),
                     m);
  }
}

template <class V>
void softmax_simd(float* x, int64_t n) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (n <= 0) return;
  // Pass 1: max. Two accumulators cover the 4-cycle max latency well enough for a
  // row that is in L1 anyway.
  Reg m0 = V::set1(kNegInf), m1 = V::set1(kNegInf);
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    m0 = V::max(m0, V::load(x + i));
    m1 = V::max(m1, V::load(x + i + W));
  }
  for (; i + W <= n; i += W) m0 = V::max(m0, V::load(x + i));
  if (i < n) m1 = V::max(m1, V::load_partial(x + i, n - i, kNegInf));
  const Reg max_v = V::set1(V::reduce_max(V::max(m0, m1)));
  // Pass 2: x = exp(x - max), summed. Masked-off lanes read -inf, so they add exp(-inf) = 0.
  Reg s0 = V::zero(), s1 = V::zero();
  i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const Reg e0 = exp_vec<V>(V::sub(V::load(x + i), max_v));
    const Reg e1 = exp_vec<V>(V::sub(V::load(x + i + W), max_v));
    V::store(x + i, e0);
    V::store(x + i + W, e1);
    s0 = V::add(s0, e0);
    s1 = V::add(s1, e1);
  }
  for (; i + W <= n; i += W) {
    const Reg e = exp_vec<V>(V::sub(V::load(x + i), max_v));
    V::store(x + i, e);
    s0 = V::add(s0, e);
  }
  if (i < n) {
    const Reg e = exp_vec<V>(V::sub(V::load_partial(x + i, n - i, kNegInf), max_v));
    V::store_partial(x + i, e, n - i);
    s1 = V::add(s1, e);
  }
  // Pass 3: normalize by one reciprocal (<= 1 ulp from dividing each value).
  const Reg inv = V::set1(1.0f / V::reduce_add(V::add(s0, s1)));
  i = 0;
  for (; i + W <= n; i += W) V::store(x + i, V::mul(V::load(x + i), inv));
  if (i < n) V::store_partial(x + i, V::mul(V::load_partial(x + i, n - i), inv), n - i);
}

// silu(g) * u = g / (1 + exp(-g)) * u. exp(-g) = inf for g < -89 gives -0 * u, the limit.
template <class V>
inline typename V::Reg swiglu_vec(typename V::Reg g, typename V::Reg u) {
  const auto e = exp_vec<V>(V::sub(V::zero(), g));
  return V::mul(V::div(g, V::add(V::set1(1.0f), e)), u);
}

template <class V>
void swiglu_simd(const float* gate, const float* up, float* out, int64_t n) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, swiglu_vec<V>(V::load(gate + i), V::load(up + i)));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(out + i, swiglu_vec<V>(V::load_partial(gate + i, m), V::load_partial(up + i, m)),
                     m);
  }
}

// min(g, limit) · sigmoid(alpha · min(g, limit)) · (clamp(u, ±limit) + 1), as ggml's swiglu_oai.
template <class V>
inline typename V::Reg swiglu_oai_vec(typename V::Reg g, typename V::Reg u, typename V::Reg alpha,
                                      typename V::Reg limit) {
  g = V::min(g, limit);
  u = V::max(V::min(u, limit), V::sub(V::zero(), limit));
  const auto e = exp_vec<V>(V::mul(V::sub(V::zero(), alpha), g));
  return V::mul(V::div(g, V::add(V::set1(1.0f), e)), V::add(u, V::set1(1.0f)));
}

template <class V>
void swiglu_oai_simd(const float* gate, const float* up, float* out, int64_t n, float alpha_f, float limit_f) {
  constexpr int64_t W = V::kWidth;
  const typename V::Reg alpha = V::set1(alpha_f), limit = V::set1(limit_f);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    V::store(out + i, swiglu_oai_vec<V>(V::load(gate + i), V::load(up + i), alpha, limit));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(out + i,
                     swiglu_oai_vec<V>(V::load_partial(gate + i, m), V::load_partial(up + i, m), alpha, limit), m);
  }
}

// gelu_tanh(g) = g / (1 + exp(-2c (g + a g³))) (ops_internal.h's constants). exp = inf for
// g < ~-10 gives -0, the limit; g³ overflowing to ±inf gives exp 0 or inf, the same limits.
template <class V>
inline typename V::Reg gelu_tanh_vec(typename V::Reg g) {
  const auto z = V::mul(V::set1(ops_internal::kGeluTanhMinus2C),
                        V::fmadd(V::set1(ops_internal::kGeluTanhCubic), V::mul(V::mul(g, g), g), g));
  return V::div(g, V::add(V::set1(1.0f), exp_vec<V>(z)));
}

template <class V>
void geglu_tanh_simd(const float* gate, const float* up, float* out, int64_t n) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  if (up == nullptr) {
    for (; i + W <= n; i += W) V::store(out + i, gelu_tanh_vec<V>(V::load(gate + i)));
    if (i < n) V::store_partial(out + i, gelu_tanh_vec<V>(V::load_partial(gate + i, n - i)), n - i);
    return;
  }
  for (; i + W <= n; i += W) V::store(out + i, V::mul(gelu_tanh_vec<V>(V::load(gate + i)), V::load(up + i)));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(out + i, V::mul(gelu_tanh_vec<V>(V::load_partial(gate + i, m)), V::load_partial(up + i, m)), m);
  }
}

template <class V>
void add_inplace_simd(float* y, const float* x, int64_t n) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::add(V::load(y + i), V::load(x + i)));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(y + i, V::add(V::load_partial(y + i, m), V::load_partial(x + i, m)), m);
  }
}

template <class V>
float dot_f32_simd(const float* a, const float* b, int64_t n) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  Reg s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
    s1 = V::fmadd(V::load(a + i + W), V::load(b + i + W), s1);
    s2 = V::fmadd(V::load(a + i + 2 * W), V::load(b + i + 2 * W), s2);
    s3 = V::fmadd(V::load(a + i + 3 * W), V::load(b + i + 3 * W), s3);
  }
  for (; i + W <= n; i += W) s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
  if (i < n) s1 = V::fmadd(V::load_partial(a + i, n - i), V::load_partial(b + i, n - i), s1);
  return V::reduce_add(V::add(V::add(s0, s1), V::add(s2, s3)));
}

template <class V>
void axpy_f32_simd(float a, const float* x, float* y, int64_t n) {
  constexpr int64_t W = V::kWidth;
  const auto av = V::set1(a);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::fmadd(av, V::load(x + i), V::load(y + i)));
  if (i < n) {
    const int64_t m = n - i;
    V::store_partial(y + i, V::fmadd(av, V::load_partial(x + i, m), V::load_partial(y + i, m)), m);
  }
}

template <class V>
void scale_f32_simd(float* y, float a, int64_t n) {
  constexpr int64_t W = V::kWidth;
  const auto av = V::set1(a);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::mul(V::load(y + i), av));
  if (i < n) V::store_partial(y + i, V::mul(V::load_partial(y + i, n - i), av), n - i);
}

// RoPE on pairs [p0, p1) of every head (p1 - p0 <= kRopeChunkPairs), given their
// attn-scaled cos/sin (cos_t, sin_t: [p1 - p0]).
//   Adjacent pairs (llama): with c2 = (c0, c0, c1, c1, ...) and s2 = (-s0, s0, -s1, s1, ...),
//   out = x * c2 + swap_pairs(x) * s2 gives (a c - b s, b c + a s) per pair.
//   NeoX pairs (i, i + n_rot/2): the two halves are two plain vectors a and b:
//   out_a = a c - b s, out_b = a s + b c.
template <class V>
void rope_pairs(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t p0, int64_t p1,
                const float* cos_t, const float* sin_t, bool neox) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  const int64_t n_pairs = n_rot / 2;
  const int64_t m = p1 - p0;
  if (!neox) {
    float cos2[2 * ops_internal::kRopeChunkPairs];
    float sin2[2 * ops_internal::kRopeChunkPairs];
    for (int64_t j = 0; j < m; ++j) {
      cos2[2 * j] = cos2[2 * j + 1] = cos_t[j];
      sin2[2 * j] = -sin_t[j];
      sin2[2 * j + 1] = sin_t[j];
    }
    const int64_t len = 2 * m;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + h * head_dim + 2 * p0;
      int64_t e = 0;
      for (; e + W <= len; e += W) {
        const Reg v = V::load(xh + e);
        V::store(xh + e, V::fmadd(v, V::load(cos2 + e), V::mul(V::swap_pairs(v), V::load(sin2 + e))));
      }
      if (e < len) {  // len and e are even, so pairs are never split by the mask
        const int64_t r = len - e;
        const Reg v = V::load_partial(xh + e, r);
        const Reg c = V::load_partial(cos2 + e, r);
        const Reg s = V::load_partial(sin2 + e, r);
        V::store_partial(xh + e, V::fmadd(v, c, V::mul(V::swap_pairs(v), s)), r);
      }
    }
  } else {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xa = x + h * head_dim + p0;
      float* xb = xa + n_pairs;
      int64_t j = 0;
      for (; j + W <= m; j += W) {
        const Reg a = V::load(xa + j), b = V::load(xb + j);
        const Reg c = V::load(cos_t + j), s = V::load(sin_t + j);
        V::store(xa + j, V::fnmadd(b, s, V::mul(a, c)));
        V::store(xb + j, V::fmadd(b, c, V::mul(a, s)));
      }
      if (j < m) {
        const int64_t r = m - j;
        const Reg a = V::load_partial(xa + j, r), b = V::load_partial(xb + j, r);
        const Reg c = V::load_partial(cos_t + j, r), s = V::load_partial(sin_t + j, r);
        V::store_partial(xa + j, V::fnmadd(b, s, V::mul(a, c)), r);
        V::store_partial(xb + j, V::fmadd(b, c, V::mul(a, s)), r);
      }
    }
  }
}

// The cos/sin of a chunk of pairs are computed once (ops_internal::rope_cos_sin) and
// applied to every head.
template <class V>
void rope_simd(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
               const float* inv_freq, bool neox, float attn_factor) {
  ops_internal::rope_in_chunks(n_heads, head_dim, n_rot, pos, inv_freq, attn_factor,
                               [&](int64_t p0, int64_t p1, const float* cos_t, const float* sin_t) {
                                 rope_pairs<V>(x, n_heads, head_dim, n_rot, p0, p1, cos_t, sin_t, neox);
                               });
}

template <class V>
void rope_apply_simd(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_t,
                     const float* sin_t, bool neox) {
  using ops_internal::kRopeChunkPairs;
  ops_internal::rope_check_args(n_heads, head_dim, n_rot);
  for (int64_t p0 = 0; p0 < n_rot / 2; p0 += kRopeChunkPairs) {
    const int64_t p1 = std::min(n_rot / 2, p0 + kRopeChunkPairs);
    rope_pairs<V>(x, n_heads, head_dim, n_rot, p0, p1, cos_t + p0, sin_t + p0, neox);
  }
}

// The gated delta rule's token step (ops.h), two passes over each state row while it sits
// in L1: r = decay (m_j · k), then m_j = decay m_j + delta k with out_j = scale (m_j · q)
// accumulated on the way. Rejected: the reference's order (decay the whole state, then
// per row), a third pass over the 64 KiB state of a 128 x 128 head.
template <class V>
void gated_delta_step_simd(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                           float decay, float beta, float scale, float* out) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  const Reg dec = V::set1(decay);
  for (int64_t j = 0; j < d_v; ++j) {
    float* row = m + j * d_k;
    const float r = decay * dot_f32_simd<V>(row, k, d_k);
    const Reg delta = V::set1(beta * (v[j] - r));
    Reg acc = V::zero();
    int64_t i = 0;
    for (; i + W <= d_k; i += W) {
      const Reg updated = V::fmadd(delta, V::load(k + i), V::mul(dec, V::load(row + i)));
      V::store(row + i, updated);
      acc = V::fmadd(updated, V::load(q + i), acc);
    }
    if (i < d_k) {
      const int64_t n = d_k - i;
      const Reg updated = V::fmadd(delta, V::load_partial(k + i, n), V::mul(dec, V::load_partial(row + i, n)));
      V::store_partial(row + i, updated, n);
      acc = V::fmadd(updated, V::load_partial(q + i, n), acc);
    }
    out[j] = scale * V::reduce_add(acc);
  }
}

template <class V>
constexpr ops_internal::OpsKernels make_ops_kernels(Isa isa) {
  return {isa,
          rms_norm_simd<V>,
          softmax_simd<V>,
          swiglu_simd<V>,
          swiglu_oai_simd<V>,
          geglu_tanh_simd<V>,
          softcap_simd<V>,
          add_inplace_simd<V>,
          rope_simd<V>,
          rope_apply_simd<V>,
          dot_f32_simd<V>,
          axpy_f32_simd<V>,
          scale_f32_simd<V>,
          exp_f32_simd<V>,
          gated_delta_step_simd<V>};
}

}  // namespace
}  // namespace pagoda
