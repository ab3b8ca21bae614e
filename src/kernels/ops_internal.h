// Internal to kernels/: the per-ISA tables behind the dispatching functions of ops.h,
// so tests and benchmarks can run every path the CPU supports side by side (best_isa()
// is fixed once per process).
//
// Contract: ops_kernels(isa) returns the row ops of one instruction-set level, the ops
// part of kernel_table(isa) (kernel_table.h; it aborts for a level the CPU lacks). The
// Scalar ops are the *_ref functions. The per-level constants below are
// constant-initialized; the kernel table copies them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace pagoda::ops_internal {

struct OpsKernels {
  Isa isa;
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t n, float eps);
  void (*softmax)(float* x, int64_t n);
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  void (*swiglu_oai)(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
  void (*geglu_tanh)(const float* gate, const float* up, float* out, int64_t n);
  void (*softcap)(float* x, int64_t n, float cap);
  void (*add_inplace)(float* y, const float* x, int64_t n);
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
               const float* inv_freq, bool neox, float attn_factor);
  void (*rope_apply)(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                     const float* cos, const float* sin, bool neox);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  void (*scale_f32)(float* y, float a, int64_t n);
  void (*exp_f32)(const float* x, float* y, int64_t n);
  void (*gated_delta_step)(float* m, int64_t d_v, int64_t d_k, const float* q, const float* k, const float* v,
                           float decay, float beta, float scale, float* out);
};

extern const OpsKernels kOpsScalar;  // ops.cpp
extern const OpsKernels kOpsAvx2;    // ops_avx2.cpp
extern const OpsKernels kOpsAvx512;  // ops_avx512.cpp

const OpsKernels& ops_kernels(Isa isa);

// gelu_tanh(x) = x · sigmoid(2c (x + a x³)), c = sqrt(2/pi), a = 0.044715: the exp's
// argument -2c (x + a x³) as every level computes it (fused multiply-add, then one multiply),
// so the levels differ only in their exp and division (ops.h: geglu_tanh).
constexpr float kGeluTanhMinus2C = -1.5957691216057308f;
constexpr float kGeluTanhCubic = 0.044715f;

// RoPE works on chunks of at most this many pairs, so the cos/sin table lives on the
// stack (3 KiB) and covers head_dim 256 in one chunk.
constexpr int64_t kRopeChunkPairs = 128;

// cos_out[j] = attn_factor * cos(pos * inv_freq[pair_begin + j]), sin_out likewise, for
// j < pair_end - pair_begin, evaluated in double and rounded once. Shared by every ISA so
// their rope() results differ only in the final multiply-adds.
void rope_cos_sin(float* cos_out, float* sin_out, int64_t pair_begin, int64_t pair_end,
                  int64_t pos, const float* inv_freq, float attn_factor);

// Argument checks shared by every rope() path (aborts on misuse).
void rope_check_args(int64_t n_heads, int64_t head_dim, int64_t n_rot);

// The rope() driver of every ISA: checks the arguments, then for each chunk of pairs
// [p0, p1) (at most kRopeChunkPairs) computes the cos/sin once and calls
// rotate(p0, p1, cos, sin) to apply them to every head. Each caller passes a lambda of its
// own file (a type with internal linkage), so no instance is shared across ISA files.
template <class Rotate>
inline void rope_in_chunks(int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
                           const float* inv_freq, float attn_factor, Rotate rotate) {
  rope_check_args(n_heads, head_dim, n_rot);
  float cos_t[kRopeChunkPairs];
  float sin_t[kRopeChunkPairs];
  for (int64_t p0 = 0; p0 < n_rot / 2; p0 += kRopeChunkPairs) {
    const int64_t p1 = std::min(n_rot / 2, p0 + kRopeChunkPairs);
    rope_cos_sin(cos_t, sin_t, p0, p1, pos, inv_freq, attn_factor);
    rotate(p0, p1, cos_t, sin_t);
  }
}

}  // namespace pagoda::ops_internal
