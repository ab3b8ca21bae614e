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

// In-place softmax over n values (max-subtracted; n >= 1).
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// Rotary embedding of n_heads heads of head_dim values ([n_heads, head_dim] f32, in place)
// at position `pos`. Only the first n_rot dims of each head rotate (n_rot even, <= head_dim).
// inv_freq: [n_rot/2] — the angle of pair i is pos * inv_freq[i] (scaling and llama3
// frequency factors already folded in). neox=false rotates adjacent pairs (2i, 2i+1)
// (llama GGUF order); neox=true rotates (i, i + n_rot/2) (qwen2/qwen3). attn_factor
// multiplies cos and sin (YaRN magnitude scaling; 1 otherwise).
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
          const float* inv_freq, bool neox, float attn_factor = 1.0f);
void rope_ref(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
              const float* inv_freq, bool neox, float attn_factor = 1.0f);

// dot product of two f32 vectors and y += a * x (attention inner loops).
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
// y = a * y
void scale_f32(float* y, float a, int64_t n);

}  // namespace pagoda
