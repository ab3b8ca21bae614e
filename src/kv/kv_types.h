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
//         4-bit q in [0, 15] with x ≈ d·q + m; d and m are f16 in the sidecar (4 bytes
//         per group). Asymmetric (scale + min) because K rows are often not centred at 0
//         after RoPE/bias, and 16 levels leave no room to waste half the range. Nibble
//         order within a group: byte i holds value i (low nibble) and value i + G/2
//         (high nibble), so SIMD code splits one load into two runs of G/2 values.
//         Requires D % 8 == 0.
//         Quality: fine for V and for models with even K channels (synthetic models:
//         within 0.2% of f16); NOT for K of stories260K (+34.6% perplexity; q4 V alone
//         -0.01%, q8 K + q4 V +0.23%). Its K has outlier channels (layer 1 channel 7:
//         mean -18.9, std 3.8, next to channels of std ~1.5), and a per-token scale spends
//         the 16 levels on them: relative K error 5.3% vs 2.2% for a per-channel scale over
//         16 tokens (KIVI's layout; a Hadamard rotation of each group was tried and only
//         reached +33%). Per-channel K needs whole blocks at quantization time — future
//         work; until then use q8 K with q4 V.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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
