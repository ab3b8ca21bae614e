// Element-wise and row kernels of the transformer forward pass.
//
// Contract: pure functions on caller-owned buffers, no allocation, callable
// from any thread. Each dispatches on best_isa() to an AVX-512 / AVX2 / scalar
// path; the *_ref variants are the plain scalar references tests compare with.
#pragma once

#include <cstdint>

namespace pagoda {

// y[i] = x[i] / sqrt(mean(x²) + eps) * w[i], i < n. y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps);

// In-place softmax over n values (max-subtracted; n == 0 is a no-op). Requires: at least
// one value is finite and none is +inf or NaN (masked scores may be -inf).
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU (ggml_swiglu_oai): g = min(gate[i], limit), u = clamp(up[i],
// -limit, limit), out[i] = g · sigmoid(alpha · g) · (u + 1); out may alias gate or up.
// llama.cpp's openai-moe graph uses alpha 1.702, limit 7.
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);

// out[i] = gelu_tanh(gate[i]) * up[i], or gelu_tanh(gate[i]) when up is null; out may alias
// gate or up. gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))) (Gemma's
// gelu_pytorch_tanh, ggml_gelu), computed as x · sigmoid(2 sqrt(2/pi) (x + 0.044715 x³)):
// the same function, one exp, and no 1 + tanh cancellation for negative x. Vectorized: the
// scalar tanhf took 14% of Gemma 4 E4B's prefill samples (Zen 4, perf).
void geglu_tanh(const float* gate, const float* up, float* out, int64_t n);
void geglu_tanh_ref(const float* gate, const float* up, float* out, int64_t n);

// x[i] = cap * tanh(x[i] / cap) (Gemma's logit soft-capping). Requires cap > 0. Vectorized
// (kernels/exp_simd.h's tanh_vec, within ~4 ulp): Gemma 2's attention caps every score, and
// the scalar tanhf took 9% of its pp512 samples at a 2k depth (Zen 4, perf).
void softcap_inplace(float* x, int64_t n, float cap);
void softcap_ref(float* x, int64_t n, float cap);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// Rotary embedding of n_heads heads of head_dim values ([n_heads, head_dim] f32, in place)
// at position `pos`. Only the first n_rot dims of each head rotate (n_rot even, <= head_dim).
// inv_freq: [n_rot/2] — the angle of pair i is pos * inv_freq[i] (scaling and llama3
// frequency factors already folded in). neox=false rotates adjacent pairs (2i, 2i+1)
// (llama GGUF order); neox=true rotates (i, i + n_rot/2) (qwen2/qwen3). attn_factor
// multiplies cos and sin (YaRN magnitude scaling; 1 otherwise). Dims [n_rot, head_dim)
// are left untouched. pos may be negative (pos then -pos restores x). The angles
// pos * inv_freq[i] and their cos/sin are evaluated in double, once per call for all
// heads, so a long context loses no precision beyond inv_freq's own float rounding.
// Requires: n_rot even, 0 <= n_rot <= head_dim, n_heads >= 0.
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
          const float* inv_freq, bool neox, float attn_factor = 1.0f);
void rope_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
              const float* inv_freq, bool neox, float attn_factor = 1.0f);

// RoPE in two steps, for callers that rotate many rows at one position (q and k of every
// layer): rope_table fills cos[i] = attn_factor * cos(pos * inv_freq[i]) and sin[i]
// likewise ([n_rot/2] f32 each, computed in double as in rope()); rope_apply rotates with
// them. rope_apply(x, ..., table at pos) gives bit-for-bit what rope(x, ..., pos) gives,
// without recomputing n_rot/2 sin/cos per call (~2 us for n_rot = 128).
// Requires: n_rot even and >= 0; rope_apply as rope().
void rope_table(float* cos, float* sin, int64_t n_rot, int64_t pos, const float* inv_freq,
                float attn_factor = 1.0f);
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
                const float* sin, bool neox);
void rope_apply_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
                    const float* sin, bool neox);

// dot product of two f32 vectors and y += a * x (attention inner loops).
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
// y = a * y
void scale_f32(float* y, float a, int64_t n);

// One token of the gated delta rule (Gated DeltaNet, qwen35) for one value head. The state
// `m` is [d_v rows, d_k]: row j holds the key-space column S[:, j] of the head's d_k x d_v
// matrix S (llama.cpp's layout). Decays it by `decay`, then for each row j retrieves
// r = m_j · k, writes m_j += beta (v_j - r) k, and reads out_j = scale (m_j · q) from the
// updated row. q and k: [d_k]; v and out: [d_v]. The SIMD paths fold the decay into the
// same pass (decay (m · k) and decay m + delta k), so they differ from the reference only
// by rounding.
void gated_delta_step(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                      float decay, float beta, float scale, float* out);
void gated_delta_step_ref(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                          float decay, float beta, float scale, float* out);

// Scalar references of the four above (dot_f32_ref accumulates in double).
void add_inplace_ref(float* y, const float* x, int64_t n);
float dot_f32_ref(const float* a, const float* b, int64_t n);
void axpy_f32_ref(float a, const float* x, float* y, int64_t n);
void scale_f32_ref(float* y, float a, int64_t n);

// y[i] = exp(x[i]), i < n; y may alias x. The SIMD paths use range reduction and a
// polynomial (kernels/ops_simd.h): max relative error 7.9e-8 (0.94 ulp) over every float
// whose exp is a normal float (checked exhaustively, 2.2e9 inputs, AVX2); smaller results
// are within one denormal step or 0, larger ones inf; NaN stays NaN. The reference calls
// std::exp. The SIMD softmax and swiglu use the same exp.
void exp_f32(const float* x, float* y, int64_t n);
void exp_f32_ref(const float* x, float* y, int64_t n);

// ---- RoPE frequencies -------------------------------------------------------------------
//
// inv_freq[i] = freq_scale * theta_base^(-2i / n_rot) / freq_factors[i], i < n_rot/2,
// computed in double. freq_scale is linear scaling (1 / factor; 1 for none).
// freq_factors (nullable, [n_rot/2] f32) is GGUF `rope_freqs.weight` (llama3 scaling) and
// divides the frequency, as in llama.cpp.
// Requires: n_rot even and >= 0, theta_base > 0, freq_scale > 0.
void rope_inv_freq(float* inv_freq, int64_t n_rot, float theta_base, float freq_scale,
                   const float* freq_factors);

// Context-extension scaling of RoPE (GGUF `rope.scaling.*`).
struct RopeScaling {
  enum class Type {
    None,    // plain RoPE
    Linear,  // position interpolation: every frequency divided by `factor`
    Yarn,    // YaRN: interpolate low frequencies, keep high ones, ramp in between
    Llama3,  // carried entirely by the freq_factors tensor (`rope_freqs.weight`);
             // `factor` is ignored here
  };
  Type type = Type::None;
  float factor = 1.0f;     // context extension factor (rope.scaling.factor); > 0
  int64_t orig_ctx = 0;    // training context of the unscaled model (YaRN; > 0 there)
  float beta_fast = 32.0f; // YaRN: rotations per orig_ctx above which a pair extrapolates
  float beta_slow = 1.0f;  // YaRN: rotations per orig_ctx below which a pair interpolates
  // YaRN mix of extrapolation (llama.cpp yarn_ext_factor): < 0 means the default, which
  // is 1 for Yarn and 0 otherwise. 0 turns YaRN into linear scaling without mscale.
  float ext_factor = -1.0f;
  float attn_factor = 1.0f;  // extra magnitude factor (rope.scaling.attn_factor)
};

// YaRN correction range in pair indices, as llama.cpp's ggml_rope_yarn_corr_dims:
// corr(beta) = n_rot * ln(orig_ctx / (2*pi*beta)) / (2 * ln(theta_base)),
// low = max(0, floor(corr(beta_fast))), high = min(n_rot - 1, ceil(corr(beta_slow))).
struct YarnCorrDims {
  float low;
  float high;
};
YarnCorrDims rope_yarn_corr_dims(int64_t n_rot, int64_t orig_ctx, float theta_base,
                                 float beta_fast, float beta_slow);

// Fills inv_freq [n_rot/2] for `scaling` (freq_factors as in rope_inv_freq, applied for
// every type) and returns the attn_factor to pass to rope(). For YaRN (as llama.cpp's
// rope_yarn), with s = 1/factor, ramp(i) = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
// and mix = ramp(i) * ext_factor:
//   inv_freq[i] = base_freq[i] * (s * (1 - mix) + mix)
//   attn_factor = scaling.attn_factor * (1 + 0.1 * ln(factor))   (when ext_factor != 0)
// so pairs below `low` keep their frequency and pairs above `high` are interpolated.
// Requires: n_rot even and >= 0; factor > 0; Yarn: orig_ctx > 0; Llama3: freq_factors.
float rope_scaled_inv_freq(float* inv_freq, int64_t n_rot, float theta_base,
                           const RopeScaling& scaling, const float* freq_factors);

// The llama3 frequency factors [n_rot/2] (what converters store as rope_freqs.weight), for
// a GGUF that lacks the tensor. With wavelen = 2*pi / theta_base^(-2i/n_rot):
// wavelen < orig_ctx / high_freq_factor -> 1; wavelen > orig_ctx / low_freq_factor -> factor;
// otherwise 1 / ((1 - smooth) / factor + smooth), smooth = (orig_ctx / wavelen -
// low_freq_factor) / (high_freq_factor - low_freq_factor).
// Requires: n_rot even and >= 0, high_freq_factor > low_freq_factor > 0, factor > 0.
void llama3_freq_factors(float* freq_factors, int64_t n_rot, float theta_base, float factor,
                         float low_freq_factor, float high_freq_factor, int64_t orig_ctx);

}  // namespace pagoda
