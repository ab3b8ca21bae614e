// Scalar activation quantizer (the reference the SIMD quantizers in
// matmul_avx2.cpp / matmul_avx512.cpp must match bit for bit).
//
// Rule, per block of 32 (Block32) or 256 (Super256) values:
//   amax = max |x|, d = amax / 127, id = d != 0 ? 1 / d : 0,
//   q = round-to-nearest-even(x * id)  (so |q| <= 127, and -128 never occurs,
//   which keeps the AVX2 sign trick and vpdpbusd free of overflow).
// Unlike ggml's Q8_K (d = -max/127 with a signed max, q may reach -128) this
// is symmetric; the error bound is the same, |x - d q| <= d / 2 = amax / 254.
#include <cmath>
#include <cstdlib>

#include "kernels/matmul_impl.h"

namespace pagoda::matmul_detail {

namespace {

// Quantizes n (32 or 256) values; returns the scale.
// A block holding NaN or inf (a corrupt model's activations) gets codes 0 and a NaN
// scale: the NaN reaches the logits, where the engine ends the request, and no NaN is
// cast to int8 (undefined behaviour).
float quantize_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int j = 0; j < n; ++j) {
    finite = finite && std::isfinite(x[j]);
    amax = std::fmax(amax, std::fabs(x[j]));
  }
  if (!finite) {
    for (int j = 0; j < n; ++j) q[j] = 0;
    return std::nanf("");
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; ++j) q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  return d;
}

int32_t sum_codes(const int8_t* q, int n) {
  int32_t s = 0;
  for (int j = 0; j < n; ++j) s += q[j];
  return s;
}

}  // namespace

void quantize_act_row_scalar(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out) {
  if (kind == ActKind::Block32) {
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      int8_t* q = out.q + b * 32;
      const float d = quantize_block(x + b * 32, 32, q);
      const int32_t s = sum_codes(q, 32);
      out.d[b] = d;
      out.sum32[b] = s;
      out.dsum32[b] = d * static_cast<float>(s);
      out.neg8_dsum32[b] = -8.0f * out.dsum32[b];
    }
    return;
  }
  for (int64_t sb = 0; sb < n_cols / 256; ++sb) {
    int8_t* q = out.q + sb * 256;
    out.d[sb] = quantize_block(x + sb * 256, 256, q);
    for (int i = 0; i < 16; ++i) out.sum16[sb * 16 + i] = sum_codes(q + 16 * i, 16);
    for (int j = 0; j < 8; ++j)
      out.sum32[sb * 8 + j] = out.sum16[sb * 16 + 2 * j] + out.sum16[sb * 16 + 2 * j + 1];
  }
}

}  // namespace pagoda::matmul_detail
