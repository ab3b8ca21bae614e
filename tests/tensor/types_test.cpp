// Type traits, names, row sizes, and the scalar f16 / bf16 conversions, checked
// exhaustively against an independent ldexp-based reading of the IEEE formats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/types.h"

namespace pagoda {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool is_f16_nan(f16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }

// IEEE binary16 value straight from the definition.
double f16_value(f16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

// ---------------------------------------------------------------- f16

TEST(F16, EveryHalfDecodesToItsIeeeValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<f16_t>(h));
    const double want = f16_value(static_cast<f16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(F16, EveryHalfRoundTripsThroughF32AndNansStayNan) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const f16_t back = f32_to_f16(f16_to_f32(static_cast<f16_t>(h)));
    if (is_f16_nan(static_cast<f16_t>(h))) {
      ASSERT_TRUE(is_f16_nan(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

// Between every pair of adjacent finite halves (normal, subnormal, across the
// subnormal/normal boundary and from the largest finite to inf): the exact midpoint
// goes to the even one, anything a hair off goes to the nearer one.
TEST(F16, RoundsToNearestWithTiesToEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const f16_t lo = static_cast<f16_t>(h | sign), hi = static_cast<f16_t>((h + 1) | sign);
      const double a = f16_value(lo);
      // For h = 0x7bff the "next" value is 65536 (exponent 31): inf in f16.
      const double b = h == 0x7bff ? (sign ? -65536.0 : 65536.0) : f16_value(hi);
      const float mid = static_cast<float>((a + b) / 2);  // 12 significant bits: exact
      ASSERT_EQ(static_cast<double>(mid), (a + b) / 2);
      const f16_t even = (h & 1) == 0 ? lo : hi;
      ASSERT_EQ(f32_to_f16(mid), even) << std::hex << (h | sign);
      const float toward_lo = std::nextafter(mid, static_cast<float>(a));
      const float toward_hi = std::nextafter(mid, static_cast<float>(b));
      ASSERT_EQ(f32_to_f16(toward_lo), lo) << std::hex << (h | sign);
      ASSERT_EQ(f32_to_f16(toward_hi), hi) << std::hex << (h | sign);
    }
  }
}

TEST(F16, OverflowGoesToInfinityAndNanStaysNan) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie between 65504 (odd) and 65536: up
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-3e38f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(is_f16_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low 13 bits must not truncate to inf.
  EXPECT_TRUE(is_f16_nan(f32_to_f16(float_of(0x7f800001u))));
  EXPECT_TRUE(is_f16_nan(f32_to_f16(float_of(0xff800001u))));
}

TEST(F16, SubnormalsAndUnderflow) {
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);   // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);   // tie with 0: to even
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp -> 1
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);  // sign kept on underflow
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

// ---------------------------------------------------------------- bf16

TEST(Bf16, DecodeIsTheUpperHalfOfAnF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(bf16_to_f32(static_cast<bf16_t>(h))), h << 16) << std::hex << h;
  }
}

TEST(Bf16, RoundsToNearestWithTiesToEvenForEveryBf16Pair) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t exp = (h >> 7) & 0xff;
    if (exp == 0xff) continue;  // inf / nan
    // The f32s between h and h+1 (same sign): h<<16 + t for t in 1..0xffff.
    const uint32_t base = h << 16;
    const bf16_t lo = static_cast<bf16_t>(h), hi = static_cast<bf16_t>(h + 1);
    const bf16_t even = (h & 1) == 0 ? lo : hi;
    ASSERT_EQ(f32_to_bf16(float_of(base)), lo) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(base + 0x7fff)), lo) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(base + 0x8000)), even) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(base + 0x8001)), hi) << std::hex << h;
  }
}

TEST(Bf16, OverflowGoesToInfinityAndNanStaysNan) {
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // NaNs with payload only in the dropped bits must stay NaN, not become inf.
  for (uint32_t nan : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu}) {
    const bf16_t b = f32_to_bf16(float_of(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
}

// ---------------------------------------------------------------- traits

TEST(Traits, BlockSizesAndBytesMatchGgml) {
  struct Want {
    GgmlType type;
    int64_t block_size;
    size_t type_size;
    const char* name;
  };
  const Want wants[] = {
      {GgmlType::F32, 1, 4, "f32"},      {GgmlType::F16, 1, 2, "f16"},
      {GgmlType::BF16, 1, 2, "bf16"},    {GgmlType::Q4_0, 32, 18, "q4_0"},
      {GgmlType::Q4_1, 32, 20, "q4_1"},  {GgmlType::Q5_0, 32, 22, "q5_0"},
      {GgmlType::Q5_1, 32, 24, "q5_1"},  {GgmlType::Q8_0, 32, 34, "q8_0"},
      {GgmlType::Q8_1, 32, 36, "q8_1"},  {GgmlType::Q2_K, 256, 84, "q2_K"},
      {GgmlType::Q3_K, 256, 110, "q3_K"}, {GgmlType::Q4_K, 256, 144, "q4_K"},
      {GgmlType::Q5_K, 256, 176, "q5_K"}, {GgmlType::Q6_K, 256, 210, "q6_K"},
      {GgmlType::Q8_K, 256, 292, "q8_K"}, {GgmlType::IQ4_NL, 32, 18, "iq4_nl"},
      {GgmlType::IQ4_XS, 256, 136, "iq4_xs"}, {GgmlType::MXFP4, 32, 17, "mxfp4"},
      {GgmlType::I8, 1, 1, "i8"},
      {GgmlType::I32, 1, 4, "i32"},      {GgmlType::F64, 1, 8, "f64"},
  };
  for (const Want& w : wants) {
    const TypeTraits& t = traits(w.type);
    EXPECT_EQ(t.block_size, w.block_size) << w.name;
    EXPECT_EQ(t.type_size, w.type_size) << w.name;
    EXPECT_STREQ(t.name, w.name);
    EXPECT_STREQ(type_name(w.type), w.name);
    EXPECT_EQ(t.is_quantized, w.block_size > 1) << w.name;
  }
}

TEST(Traits, TypeIdsAreTheGgufNumbers) {
  EXPECT_EQ(type_traits(12)->type, GgmlType::Q4_K);
  EXPECT_EQ(type_traits(30)->type, GgmlType::BF16);
  EXPECT_EQ(type_traits(8)->type, GgmlType::Q8_0);
  EXPECT_EQ(type_traits(10)->type, GgmlType::Q2_K);
  EXPECT_EQ(type_traits(11)->type, GgmlType::Q3_K);
  EXPECT_EQ(type_traits(20)->type, GgmlType::IQ4_NL);
  EXPECT_EQ(type_traits(23)->type, GgmlType::IQ4_XS);
  EXPECT_EQ(type_traits(39)->type, GgmlType::MXFP4);
  EXPECT_FALSE(type_traits(21).has_value());  // IQ3_S: not supported
  EXPECT_FALSE(type_traits(4).has_value());  // the removed Q4_2
  EXPECT_FALSE(type_traits(31).has_value());
  EXPECT_FALSE(type_traits(0xffffffffu).has_value());
}

TEST(Traits, ParsesWeightTypeNamesCaseInsensitively) {
  EXPECT_EQ(parse_type_name("q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(parse_type_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(parse_type_name("q6_k"), GgmlType::Q6_K);
  EXPECT_EQ(parse_type_name("F16"), GgmlType::F16);
  EXPECT_EQ(parse_type_name("bf16"), GgmlType::BF16);
  EXPECT_EQ(parse_type_name("q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(parse_type_name("q5_1"), GgmlType::Q5_1);
  EXPECT_EQ(parse_type_name("q2_k"), GgmlType::Q2_K);
  EXPECT_EQ(parse_type_name("Q3_K"), GgmlType::Q3_K);
  EXPECT_EQ(parse_type_name("IQ4_NL"), GgmlType::IQ4_NL);
  EXPECT_EQ(parse_type_name("iq4_xs"), GgmlType::IQ4_XS);
  EXPECT_EQ(parse_type_name("mxfp4"), GgmlType::MXFP4);
}

TEST(Traits, RejectsNamesOfNonWeightTypesAndJunk) {
  EXPECT_FALSE(parse_type_name("q8_1").has_value());  // activations only
  EXPECT_FALSE(parse_type_name("q8_K").has_value());
  EXPECT_FALSE(parse_type_name("i32").has_value());
  EXPECT_FALSE(parse_type_name("").has_value());
  EXPECT_FALSE(parse_type_name("q4_K ").has_value());
  EXPECT_FALSE(parse_type_name("q4").has_value());
}

TEST(Traits, SupportedWeightTypesListsEveryWeightType) {
  EXPECT_EQ(supported_weight_types(),
            "f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, "
            "bf16, mxfp4");
}

TEST(Traits, RowBytesCountsWholeBlocks) {
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(GgmlType::Q6_K, 256), 210u);
  EXPECT_EQ(row_bytes(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(GgmlType::F32, 3), 12u);
  EXPECT_EQ(row_bytes(GgmlType::Q4_0, 0), 0u);
}

// 2^(e - 128) for every e: normal exponents from the bits, e = 0 and 1 the two
// subnormals (checked against ldexp, an independent computation).
TEST(Traits, E8m0HalfIsTwoToTheEMinus128ForEveryByte) {
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(e8m0_to_f32_half(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << e;
}

TEST(TraitsDeathTest, RowBytesRejectsPartialBlocks) {
  EXPECT_DEATH(row_bytes(GgmlType::Q8_0, 33), "not a whole number of q8_0 blocks");
}

TEST(TraitsDeathTest, UnknownTypeIdIsRejected) {
  EXPECT_DEATH(traits(static_cast<GgmlType>(4)), "unknown GgmlType 4");
}

}  // namespace
}  // namespace pagoda
