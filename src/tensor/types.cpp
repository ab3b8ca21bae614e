// Type traits, names and scalar f16/bf16 conversions. The block codecs
// (dequantize_row / quantize_row) live in codecs.cpp.
#include "tensor/types.h"

#include <cstring>
#include <string>

#include "common/ascii.h"
#include "common/error.h"

namespace pagoda {

namespace {

constexpr TypeTraits kTraits[] = {
    {GgmlType::F32, "f32", 1, 4, false, true},
    {GgmlType::F16, "f16", 1, 2, false, true},
    {GgmlType::Q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true, true},
    {GgmlType::Q4_1, "q4_1", kQK, sizeof(BlockQ4_1), true, true},
    {GgmlType::Q5_0, "q5_0", kQK, sizeof(BlockQ5_0), true, true},
    {GgmlType::Q5_1, "q5_1", kQK, sizeof(BlockQ5_1), true, true},
    {GgmlType::Q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true, true},
    {GgmlType::Q8_1, "q8_1", kQK, sizeof(BlockQ8_1), true, false},
    {GgmlType::Q2_K, "q2_K", kQK_K, sizeof(BlockQ2_K), true, true},
    {GgmlType::Q3_K, "q3_K", kQK_K, sizeof(BlockQ3_K), true, true},
    {GgmlType::Q4_K, "q4_K", kQK_K, sizeof(BlockQ4_K), true, true},
    {GgmlType::Q5_K, "q5_K", kQK_K, sizeof(BlockQ5_K), true, true},
    {GgmlType::Q6_K, "q6_K", kQK_K, sizeof(BlockQ6_K), true, true},
    {GgmlType::Q8_K, "q8_K", kQK_K, sizeof(BlockQ8_K), true, false},
    {GgmlType::IQ4_NL, "iq4_nl", kQK, sizeof(BlockIQ4_NL), true, true},
    {GgmlType::IQ4_XS, "iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true, true},
    {GgmlType::I8, "i8", 1, 1, false, false},
    {GgmlType::I16, "i16", 1, 2, false, false},
    {GgmlType::I32, "i32", 1, 4, false, false},
    {GgmlType::I64, "i64", 1, 8, false, false},
    {GgmlType::F64, "f64", 1, 8, false, false},
    {GgmlType::BF16, "bf16", 1, 2, false, true},
    {GgmlType::MXFP4, "mxfp4", kQK, sizeof(BlockMXFP4), true, true},
};

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type_id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  return std::nullopt;
}

const TypeTraits& traits(GgmlType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return t;
  PAGODA_CHECK(false, "unknown GgmlType " + std::to_string(static_cast<uint32_t>(type)));
  return kTraits[0];
}

const char* type_name(GgmlType type) { return traits(type).name; }

std::optional<GgmlType> parse_type_name(std::string_view name) {
  const std::string lower = ascii_lower(name);
  for (const auto& t : kTraits) {
    if (!t.weight_supported) continue;
    if (ascii_lower(t.name) == lower) return t.type;
  }
  return std::nullopt;
}

std::string supported_weight_types() {
  std::string s;
  for (const auto& t : kTraits) {
    if (!t.weight_supported) continue;
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

size_t row_bytes(GgmlType type, int64_t n) {
  const TypeTraits& t = traits(type);
  PAGODA_CHECK(n % t.block_size == 0, std::string("row of ") + std::to_string(n) +
                                          " values is not a whole number of " + t.name + " blocks");
  return static_cast<size_t>(n / t.block_size) * t.type_size;
}

float f16_to_f32(f16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

f16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<f16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal or zero in f16
    if (abs < 0x33000000u) return static_cast<f16_t>(sign);  // below half the smallest subnormal
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    int shift = 113 - static_cast<int>(abs >> 23) + 13;  // 126 - exp + 13 - 14
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<f16_t>(sign | q);
  }
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t mant = abs & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into exponent: correct
  return static_cast<f16_t>(sign | h);
}

float bf16_to_f32(bf16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bf16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<bf16_t>((x + rounding) >> 16);
}

float e8m0_to_f32_half(uint8_t e) {
  // 2^(e - 128) has the f32 exponent field e - 1 for e >= 2; e = 1 and 0 give the
  // subnormals 2^-127 and 2^-128 (mantissa bit 22 and 21).
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace pagoda
