// Tensor element types and GGUF quantization block layouts.
//
// Contract: the numeric values of GgmlType are the GGUF/ggml type ids written
// in files; the block structs below match the GGUF byte layout exactly
// (little-endian, no padding — static_asserts pin every size). Values in a
// block are stored as in ggml: see each struct's comment for the decode rule.
// Everything here is plain data and free functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

// IEEE half and bfloat16 storage (raw bits).
using f16_t = uint16_t;
using bf16_t = uint16_t;

constexpr int kQK = 32;    // values per block of the 32-wide formats
constexpr int kQK_K = 256; // values per super-block of the K-quants
constexpr int kKScaleBytes = 12;

// Q4_0: x = d * (q - 8), q in 0..15. qs[j] low nibble = element j, high nibble = element j+16.
struct BlockQ4_0 {
  f16_t d;
  uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  f16_t d;
  f16_t m;
  uint8_t qs[kQK / 2];
};
// Q5_0: x = d * (q - 16), q = nibble | (bit j of qh) << 4 (qh little-endian uint32, bit j for element j).
struct BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q5_1: x = d * q + m, q as in Q5_0.
struct BlockQ5_1 {
  f16_t d;
  f16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q.
struct BlockQ8_0 {
  f16_t d;
  int8_t qs[kQK];
};
// Q8_1 (activations): x = d * q; s = d * sum(q).
struct BlockQ8_1 {
  f16_t d;
  f16_t s;
  int8_t qs[kQK];
};
// Q4_K: 8 sub-blocks of 32; 6-bit scale and min per sub-block packed in scales[12];
// x = d * sc * q - dmin * m.
struct BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
// Q5_K: as Q4_K plus a fifth bit per value in qh.
struct BlockQ5_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// Q6_K: 16 sub-blocks of 16; x = d * scales[i] * (q - 32), q 6-bit from ql (low 4) and qh (high 2).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  f16_t d;
};
// Q8_K (activations for the K-quants): x = d * q; bsums[i] = sum of q over values 16i..16i+15.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// Q2_K: 16 sub-blocks of 16; scales[i] = 4-bit scale (low nibble) | 4-bit min (high
// nibble) of sub-block i; x = d * sc * q - dmin * m, q 2-bit. Value e: half h = e / 128,
// j = (e % 128) / 32, l = e % 32: q = (qs[32h + l] >> 2j) & 3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  f16_t d;
  f16_t dmin;
};
// Q3_K: 16 sub-blocks of 16 with 6-bit scales s (stored biased by 32 in scales[12]);
// x = d * (s - 32) * q, q = low2 - (high bit set ? 0 : 4) in -4..3. Value e (h, j, l
// as Q2_K): low2 = (qs[32h + l] >> 2j) & 3, high bit = bit 4h + j of hmask[l].
// Scale i: low 4 bits = i < 8 ? scales[i] & 15 : scales[i - 8] >> 4,
// high 2 bits = (scales[8 + i % 4] >> 2 (i / 4)) & 3.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  f16_t d;
};
// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// IQ4_NL: x = d * kIq4nlValues[q]; qs[j] low nibble = element j, high = element j+16.
struct BlockIQ4_NL {
  f16_t d;
  uint8_t qs[kQK / 2];
};
// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales ls (low 4 bits: nibble j % 2 of
// scales_l[j / 2]; high 2 bits: bits 2j..2j+1 of scales_h); x = d * (ls - 32) *
// kIq4nlValues[q], sub-block j's codes in qs[16j..16j+16) as in IQ4_NL.
struct BlockIQ4_XS {
  f16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
// MXFP4 (OCP microscaling FP4, gpt-oss): e2m1 codes times a power-of-two scale.
// ggml stores the e2m1 values doubled as integers (0, ±0.5 ... ±6 -> 0, ±1 ... ±12) and
// halves the scale: x = kMxfp4Values[q] * 2^(e - 128) (see e8m0_to_f32_half); nibble
// order as IQ4_NL.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

struct TypeTraits {
  GgmlType type;
  const char* name;     // ggml's name, e.g. "q4_K", "f16"
  int64_t block_size;   // values per block (1 for plain types)
  size_t type_size;     // bytes per block
  bool is_quantized;
  bool weight_supported;  // may appear as a model weight in pagoda
};

// Traits of a known type id, or nullopt for ids pagoda does not know at all.
std::optional<TypeTraits> type_traits(uint32_t type_id);
// Requires: a known type.
const TypeTraits& traits(GgmlType type);
const char* type_name(GgmlType type);
// Parses the name of a weight type ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0",
// "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4"),
// case-insensitive. nullopt for anything else.
std::optional<GgmlType> parse_type_name(std::string_view name);
// Comma-separated list of weight types pagoda supports, for error messages.
std::string supported_weight_types();

// Bytes of a row of n values. Requires: n % block_size == 0.
size_t row_bytes(GgmlType type, int64_t n);

// ---- scalar conversions (reference; exact round-to-nearest-even) ----
float f16_to_f32(f16_t h);
f16_t f32_to_f16(float f);
float bf16_to_f32(bf16_t h);
bf16_t f32_to_bf16(float f);
// MXFP4's E8M0 block exponent as ggml decodes it: 2^(e - 128) (half of 2^(e - 127), to
// match the doubled e2m1 table), exact for every e (e = 0, 1 are f32 subnormals).
float e8m0_to_f32_half(uint8_t e);

// ---- scalar reference codecs: one row of n values ----
// Requires: n % block_size(type) == 0, a weight type (or Q8_K/Q8_1 for activations).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// Reference quantizer: ggml's reference scheme (round-to-nearest, ggml's scale
// choice) for Q4_0 .. Q6_K; pagoda's own simpler search for Q2_K, Q3_K, IQ4_NL,
// IQ4_XS and MXFP4 (valid blocks, each value on the nearest level of its final
// grid, not llama.cpp's bytes; see codecs_k.cpp / codecs_iq.cpp). Used by the GGUF
// writer, `pagoda synth` and tests; not a hot path.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace pagoda
