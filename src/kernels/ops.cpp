// Scalar references of the row kernels, the run-time dispatch, and the RoPE frequency
// tables. Built for baseline x86-64 (no FMA), so the references round every product.

#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "kernels/kernel_table.h"
#include "kernels/ops_internal.h"

namespace pagoda {

namespace ops_internal {

void rope_cos_sin(float* cos_out, float* sin_out, int64_t pair_begin, int64_t pair_end,
                  int64_t pos, const float* inv_freq, float attn_factor) {
  const double p = static_cast<double>(pos);
  for (int64_t i = pair_begin; i < pair_end; ++i) {
    const double angle = p * static_cast<double>(inv_freq[i]);
    cos_out[i - pair_begin] = static_cast<float>(std::cos(angle) * attn_factor);
    sin_out[i - pair_begin] = static_cast<float>(std::sin(angle) * attn_factor);
  }
}

void rope_check_args(int64_t n_heads, int64_t head_dim, int64_t n_rot) {
  PAGODA_CHECK(n_heads >= 0 && n_rot >= 0 && n_rot % 2 == 0 && n_rot <= head_dim,
               "rope: need n_rot even and 0 <= n_rot <= head_dim, got n_rot=" +
                   std::to_string(n_rot) + " head_dim=" + std::to_string(head_dim));
}

}  // namespace ops_internal

// ---- scalar references ------------------------------------------------------------------

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  // As ggml: y = (x * scale) * w, with scale rounded to float once.
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void softmax_ref(float* x, int64_t n) {
  if (n <= 0) return;
  float max_val = x[0];
  for (int64_t i = 1; i < n; ++i) max_val = std::max(max_val, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

void geglu_tanh_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float z = ops_internal::kGeluTanhMinus2C * std::fma(ops_internal::kGeluTanhCubic, g * g * g, g);
    const float y = g / (1.0f + std::exp(z));
    out[i] = up ? y * up[i] : y;
  }
}

void softcap_ref(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void add_inplace_ref(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

namespace {

// rope_ref on pairs [p0, p1) of every head, given their cos/sin ([p1 - p0]).
void rope_pairs_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t p0,
                    int64_t p1, const float* cos_t, const float* sin_t, bool neox) {
  const int64_t n_pairs = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = p0; i < p1; ++i) {
      // (a, b) is pair i: adjacent values, or i and i + n_rot/2 for NeoX.
      float* a = neox ? xh + i : xh + 2 * i;
      float* b = neox ? xh + i + n_pairs : xh + 2 * i + 1;
      const float c = cos_t[i - p0];
      const float s = sin_t[i - p0];
      const float va = *a;
      const float vb = *b;
      *a = va * c - vb * s;
      *b = va * s + vb * c;
    }
  }
}

}  // namespace

void rope_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
              const float* inv_freq, bool neox, float attn_factor) {
  ops_internal::rope_in_chunks(n_heads, head_dim, n_rot, pos, inv_freq, attn_factor,
                               [&](int64_t p0, int64_t p1, const float* cos_t, const float* sin_t) {
                                 rope_pairs_ref(x, n_heads, head_dim, n_rot, p0, p1, cos_t, sin_t, neox);
                               });
}

void rope_apply_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
                    const float* sin, bool neox) {
  ops_internal::rope_check_args(n_heads, head_dim, n_rot);
  rope_pairs_ref(x, n_heads, head_dim, n_rot, 0, n_rot / 2, cos, sin, neox);
}

void rope_table(float* cos, float* sin, int64_t n_rot, int64_t pos, const float* inv_freq,
                float attn_factor) {
  PAGODA_CHECK(n_rot >= 0 && n_rot % 2 == 0,
               "rope_table: n_rot must be even and >= 0, got " + std::to_string(n_rot));
  ops_internal::rope_cos_sin(cos, sin, 0, n_rot / 2, pos, inv_freq, attn_factor);
}

float dot_f32_ref(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

void axpy_f32_ref(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale_f32_ref(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void exp_f32_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void gated_delta_step_ref(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                          float decay, float beta, float scale, float* out) {
  for (int64_t i = 0; i < d_v * d_k; ++i) m[i] *= decay;
  for (int64_t j = 0; j < d_v; ++j) {
    float* row = m + j * d_k;
    double r = 0.0;
    for (int64_t i = 0; i < d_k; ++i) r += static_cast<double>(row[i]) * k[i];
    const float delta = beta * (v[j] - static_cast<float>(r));
    double o = 0.0;
    for (int64_t i = 0; i < d_k; ++i) {
      row[i] += delta * k[i];
      o += static_cast<double>(row[i]) * q[i];
    }
    out[j] = scale * static_cast<float>(o);
  }
}

// ---- dispatch ---------------------------------------------------------------------------

namespace ops_internal {

constinit const OpsKernels kOpsScalar = {
    Isa::Scalar,  rms_norm_ref,   softmax_ref, swiglu_ref,   swiglu_oai_ref, geglu_tanh_ref,
    softcap_ref,  add_inplace_ref, rope_ref,   rope_apply_ref, dot_f32_ref,  axpy_f32_ref,
    scale_f32_ref, exp_f32_ref,   gated_delta_step_ref,
};

const OpsKernels& ops_kernels(Isa isa) { return kernel_table(isa).ops; }

}  // namespace ops_internal

namespace {
const ops_internal::OpsKernels& active() {
  static const ops_internal::OpsKernels& k = active_kernels().ops;
  return k;
}
}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  active().rms_norm(x, w, y, n, eps);
}
void softmax(float* x, int64_t n) { active().softmax(x, n); }
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  active().swiglu(gate, up, out, n);
}
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  active().swiglu_oai(gate, up, out, n, alpha, limit);
}
void geglu_tanh(const float* gate, const float* up, float* out, int64_t n) {
  active().geglu_tanh(gate, up, out, n);
}
void softcap_inplace(float* x, int64_t n, float cap) { active().softcap(x, n, cap); }
void add_inplace(float* y, const float* x, int64_t n) { active().add_inplace(y, x, n); }
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
          const float* inv_freq, bool neox, float attn_factor) {
  active().rope(x, n_heads, head_dim, n_rot, pos, inv_freq, neox, attn_factor);
}
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
                const float* sin, bool neox) {
  active().rope_apply(x, n_heads, head_dim, n_rot, cos, sin, neox);
}
float dot_f32(const float* a, const float* b, int64_t n) { return active().dot_f32(a, b, n); }
void axpy_f32(float a, const float* x, float* y, int64_t n) { active().axpy_f32(a, x, y, n); }
void scale_f32(float* y, float a, int64_t n) { active().scale_f32(y, a, n); }
void exp_f32(const float* x, float* y, int64_t n) { active().exp_f32(x, y, n); }
void gated_delta_step(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                      float decay, float beta, float scale, float* out) {
  active().gated_delta_step(m, d_v, d_k, q, k, v, decay, beta, scale, out);
}

// ---- RoPE frequencies -------------------------------------------------------------------

namespace {

// theta_base^(-2i / n_rot) in double.
double base_freq(int64_t i, int64_t n_rot, float theta_base) {
  return std::pow(static_cast<double>(theta_base),
                  -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
}

void check_n_rot(int64_t n_rot) {
  PAGODA_CHECK(n_rot >= 0 && n_rot % 2 == 0,
               "rope: n_rot must be even and >= 0, got " + std::to_string(n_rot));
}

}  // namespace

void rope_inv_freq(float* inv_freq, int64_t n_rot, float theta_base, float freq_scale,
                   const float* freq_factors) {
  check_n_rot(n_rot);
  PAGODA_CHECK(theta_base > 0.0f && freq_scale > 0.0f,
               "rope_inv_freq: theta_base and freq_scale must be > 0");
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    double f = freq_scale * base_freq(i, n_rot, theta_base);
    if (freq_factors) f /= static_cast<double>(freq_factors[i]);
    inv_freq[i] = static_cast<float>(f);
  }
}

YarnCorrDims rope_yarn_corr_dims(int64_t n_rot, int64_t orig_ctx, float theta_base,
                                 float beta_fast, float beta_slow) {
  // The pair whose wavelength fits `beta` times into orig_ctx: solve
  // orig_ctx = beta * 2*pi * theta_base^(2 i / n_rot) for i.
  auto corr = [&](double beta) {
    return static_cast<double>(n_rot) *
           std::log(static_cast<double>(orig_ctx) / (beta * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(static_cast<double>(theta_base)));
  };
  const double low = std::max(0.0, std::floor(corr(beta_fast)));
  const double high = std::min(static_cast<double>(n_rot - 1), std::ceil(corr(beta_slow)));
  return {static_cast<float>(low), static_cast<float>(high)};
}

float rope_scaled_inv_freq(float* inv_freq, int64_t n_rot, float theta_base,
                           const RopeScaling& scaling, const float* freq_factors) {
  check_n_rot(n_rot);
  PAGODA_CHECK(theta_base > 0.0f, "rope: theta_base must be > 0");
  using Type = RopeScaling::Type;
  switch (scaling.type) {
    case Type::None:
      rope_inv_freq(inv_freq, n_rot, theta_base, 1.0f, freq_factors);
      return scaling.attn_factor;
    case Type::Llama3:
      PAGODA_CHECK(freq_factors != nullptr,
                   "rope: llama3 scaling needs the rope_freqs factors (see llama3_freq_factors)");
      rope_inv_freq(inv_freq, n_rot, theta_base, 1.0f, freq_factors);
      return scaling.attn_factor;
    case Type::Linear:
      PAGODA_CHECK(scaling.factor > 0.0f, "rope: linear scaling factor must be > 0");
      rope_inv_freq(inv_freq, n_rot, theta_base, 1.0f / scaling.factor, freq_factors);
      return scaling.attn_factor;
    case Type::Yarn: break;
  }
  PAGODA_CHECK(scaling.factor > 0.0f, "rope: YaRN factor must be > 0");
  PAGODA_CHECK(scaling.orig_ctx > 0, "rope: YaRN needs the original context length");
  const double freq_scale = 1.0 / static_cast<double>(scaling.factor);
  const double ext_factor = scaling.ext_factor < 0.0f ? 1.0 : scaling.ext_factor;
  const YarnCorrDims dims = rope_yarn_corr_dims(n_rot, scaling.orig_ctx, theta_base,
                                                scaling.beta_fast, scaling.beta_slow);
  const double span = std::max(0.001, static_cast<double>(dims.high) - dims.low);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    double extrap = base_freq(i, n_rot, theta_base);
    if (freq_factors) extrap /= static_cast<double>(freq_factors[i]);
    const double y = (static_cast<double>(i) - dims.low) / span;
    const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * ext_factor;
    inv_freq[i] = static_cast<float>(extrap * (freq_scale * (1.0 - mix) + mix));
  }
  double attn = scaling.attn_factor;
  if (ext_factor != 0.0) attn *= 1.0 + 0.1 * std::log(static_cast<double>(scaling.factor));
  return static_cast<float>(attn);
}

void llama3_freq_factors(float* freq_factors, int64_t n_rot, float theta_base, float factor,
                         float low_freq_factor, float high_freq_factor, int64_t orig_ctx) {
  check_n_rot(n_rot);
  PAGODA_CHECK(factor > 0.0f && low_freq_factor > 0.0f && high_freq_factor > low_freq_factor,
               "llama3_freq_factors: need factor > 0 and high_freq_factor > low_freq_factor > 0");
  const double ctx = static_cast<double>(orig_ctx);
  const double low_freq_wavelen = ctx / low_freq_factor;
  const double high_freq_wavelen = ctx / high_freq_factor;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double wavelen = 2.0 * std::numbers::pi / base_freq(i, n_rot, theta_base);
    double f;
    if (wavelen < high_freq_wavelen) {
      f = 1.0;
    } else if (wavelen > low_freq_wavelen) {
      f = factor;
    } else {
      const double smooth =
          (ctx / wavelen - low_freq_factor) / (static_cast<double>(high_freq_factor) - low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    freq_factors[i] = static_cast<float>(f);
  }
}

}  // namespace pagoda
