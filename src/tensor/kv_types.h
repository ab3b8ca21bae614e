// KV element types — how one row of K or V (one token, one KV head: [head_dim] f32 as the
// model computes it) is stored in a pool block, and what it really costs in bytes.
//
// Contract: pure functions on caller-owned buffers, callable from any thread. A row is
// stored as `kv_row_bytes` bytes of data plus `kv_row_sidecar_bytes` bytes of scales in a
// sidecar array (zero for the float types); both are part of a block's real cost
// (PagedKvPool::real_block_bytes). The *_ref codecs here are the scalar reference; the
// attention kernels (paged_attention_*.cpp) dequantize on the fly with SIMD code that
// must agree with kv_dequantize_row_ref to the last bit except where noted (q4: fma).
//
// Formats (head_dim = D):
//   f32   D × 4 bytes.
//   f16   D × 2 bytes, IEEE half, round to nearest even; |x| > 65504 saturates to ±65504
//         (not inf, so one outlier cannot turn a whole softmax into NaN).
//   bf16  D × 2 bytes, bfloat16, round to nearest even.
//   q8    D int8 values q = round(x / s) in [-127, 127] plus one f32 scale s = max|x| / 127
//         per row (token × KV head). Chosen over ggml's q8_0 (an f16 scale per 32 values)
//         because: (1) head_dim is not always a multiple of 32 (stories260K: 8; phi-2:
//         80); (2) one scale per row is one broadcast per row when the kernel dequantizes
//         (and could later fold into the score and the softmax weight instead);
//         (3) measured: perplexity of a 351-token text with q8 KV vs f16 KV is +0.25%
//         (stories260K, head_dim 8), +0.009% (synthetic llama), +0.018% (synthetic qwen3)
//         — well inside the 1% target (tests/model/paged_kv_model_test.cpp). The cost:
//         4 sidecar bytes per row (3.1% at D = 128, vs 6.25% for q8_0's 2 bytes per 32). Rejected: an f16 row scale (2 bytes less) — f16 goes
//         subnormal for rows with max|x| < 8e-3 and loses scale precision there.
//   q4    groups of G = 32 (or 16, or 8: the largest that divides D) values, each as
//         4-bit q in [0, 15] with x ≈ d·q + m, except one outlier per group kept as f16.
//         Sidecar per group (kQ4SideBytesPerGroup = 7 bytes, unaligned): d, m, outlier
//         (f16) and the outlier's index (u8); the outlier is the group's min or max,
//         whichever leaves the smaller range to the other G - 1 values, and its nibble is
//         0 (overwritten when decoding). Asymmetric (scale + min) because K rows are often
//         not centred at 0 after RoPE/bias. Nibble order within a group: byte i holds
//         value i (low nibble) and value i + G/2 (high nibble), so SIMD code splits one
//         load into two runs of G/2 values. Requires D % 8 == 0.
//         Why the outlier: K has outlier channels (stories260K layer 1 channel 7: mean
//         -18.9, std 3.8, next to channels of std ~1.5), and a plain per-token range spends
//         the 16 levels on them: q4 K cost +34.7% perplexity vs f16 (351 tokens); keeping
//         it in f16: +3.24% (q4 K + q4 V +2.91%, q4 V alone +0.01%; synthetic llama /
//         qwen3 within 0.2%; tests/model/paged_kv_model_test.cpp checks 5% everywhere).
//         Cost: 3 sidecar bytes per group — 92 bytes per D = 128 row (36% of f16) instead
//         of 80 (31%); 11 instead of 8 at D = 8. Rejected: per-channel scales over a
//         block's tokens (KIVI; relative K error 2.2% vs 5.3% per-token) — K is written
//         token by token, so it needs either the block's original values at quantization
//         time (an f16 staging copy of every open block, outside the exact per-block byte
//         count, copied on fork) or re-quantizing already-rounded values each time a
//         channel's range grows (errors compound); a Hadamard rotation of each group only
//         reached +33%; per-16-value groups cannot help at D = 8 (stories260K's whole row
//         is one group already).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "tensor/types.h"

namespace pagoda {

enum class KvType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3, Q4 = 4 };

constexpr int kNumKvTypes = 5;

// "f32", "f16", "bf16", "q8", "q4".
const char* kv_type_name(KvType t);
// Case-insensitive; nullopt for anything else.
std::optional<KvType> parse_kv_type(std::string_view name);
// "f32, f16, bf16, q8, q4" for error messages.
std::string kv_type_names();

// q4 group size for head_dim D: 32, 16 or 8 (the largest dividing D); 0 if D % 8 != 0.
int64_t q4_group_size(int64_t head_dim);
// Whether rows of head_dim values can be stored as t (q4 needs head_dim % 8 == 0;
// every type needs head_dim >= 1).
bool kv_type_supports(KvType t, int64_t head_dim);

// q4 sidecar of one group: d, m, outlier (f16 each, unaligned) and the outlier's index
// in the group (u8).
constexpr size_t kQ4SideBytesPerGroup = 7;
struct Q4Group {
  float d, m, outlier;
  int outlier_idx;
};
// Decodes one group's sidecar (kQ4SideBytesPerGroup bytes, any alignment). Inline: the
// attention kernels call it once per group per row.
inline Q4Group q4_group_params(const uint8_t* side) {
  f16_t d16, m16, o16;
  std::memcpy(&d16, side, 2);
  std::memcpy(&m16, side + 2, 2);
  std::memcpy(&o16, side + 4, 2);
  return Q4Group{f16_to_f32(d16), f16_to_f32(m16), f16_to_f32(o16), side[6]};
}

// Bytes of one stored row of head_dim values (data only) and of its sidecar.
// Requires: kv_type_supports(t, head_dim).
size_t kv_row_bytes(KvType t, int64_t head_dim);
size_t kv_row_sidecar_bytes(KvType t, int64_t head_dim);

// Encodes x [head_dim] f32 into data [kv_row_bytes] and side [kv_row_sidecar_bytes]
// (side may be null for float types). Non-finite inputs are a caller bug (checked in
// debug builds); values beyond the f16 range saturate for f16 / q4 scales.
void kv_quantize_row(KvType t, const float* x, int64_t head_dim, void* data, void* side);
// Decodes one row back to f32 [head_dim]. Scalar reference.
void kv_dequantize_row_ref(KvType t, const void* data, const void* side, int64_t head_dim,
                           float* out);

}  // namespace pagoda
