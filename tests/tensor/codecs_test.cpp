// Block codecs, encoding: known-answer encodes, quantize -> dequantize round trips with
// stated error bounds, and row shapes / preconditions. Decoding (known answers, bit
// probes) is in codecs_known_answer_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/codecs_fixtures.h"
#include "tensor/types.h"

namespace pagoda {
namespace {

using namespace codecs_test;

// ---------------------------------------------------------------- known-answer encodes

TEST(KnownEncode, Q4_0DividesBySignedExtremeSoItLandsOnCodeZero) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j % 16 - 8);  // extreme -4
  const auto b = block_at<BlockQ4_0>(quantize(GgmlType::Q4_0, x), 0);
  EXPECT_EQ(b.d, 0x3800);  // -4 / -8 = 0.5
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | j << 4) << j;
}

TEST(KnownEncode, Q4_0ClampsTheMirrorOfTheExtremeToCode15) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // d = 1
  x[1] = 8.0f;   // would be code 16
  const auto b = block_at<BlockQ4_0>(quantize(GgmlType::Q4_0, x), 0);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0] & 15, 0);
  EXPECT_EQ(b.qs[1] & 15, 15);
  EXPECT_EQ(b.qs[2] & 15, 8);
}

TEST(KnownEncode, Q5_0SetsQhBitsForCodesAbove15) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // extreme -16 -> d = 1
  const auto b = block_at<BlockQ5_0>(quantize(GgmlType::Q5_0, x), 0);
  EXPECT_EQ(b.d, 0x3C00);
  // code j = j: elements 16..31 have the fifth bit.
  const uint8_t want_qh[4] = {0x00, 0x00, 0xFF, 0xFF};
  EXPECT_EQ(0, std::memcmp(b.qh, want_qh, 4));
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | j << 4) << j;
}

TEST(KnownEncode, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  const auto b = block_at<BlockQ8_0>(quantize(GgmlType::Q8_0, x), 0);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
}

TEST(KnownEncode, Q8_1StoresScaledSumOfCodes) {
  std::vector<float> x(32, 1.0f);
  x[0] = -127.0f;  // d = 1; codes -127 and 31 ones
  const auto b = block_at<BlockQ8_1>(quantize(GgmlType::Q8_1, x), 0);
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(f16_to_f32(b.s), -96.0f);
}

TEST(KnownEncode, Q8_KUsesNegativeScaleWhenExtremeIsPositiveAndFillsBsums) {
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = static_cast<float>(e % 16) - 5.0f;
  x[7] = 12.7f;  // extreme; d = 12.7 / -127
  const auto b = block_at<BlockQ8_K>(quantize(GgmlType::Q8_K, x), 0);
  EXPECT_FLOAT_EQ(b.d, -0.1f);
  EXPECT_EQ(b.qs[7], -127);
  EXPECT_EQ(b.qs[0], 50);  // -5 / -0.1
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
    EXPECT_EQ(b.bsums[g], sum) << g;
  }
}

// ---------------------------------------------------------------- round trips

// Nearest-level bound per element: the decoded value is the level of its block's
// own grid nearest to the input, up to the slack that comes from ggml computing
// the 32-wide codes with the f32 scale and min but storing them as f16: each level
// a*q + b moves by at most 2^-11 * (|q| |a| + |b|), and the chosen and the nearest
// level can move in opposite directions (6% of a step for Q8_0, under 2% for 4/5 bits).
struct GridCase {
  GgmlType type;
  float max_rel_rms;  // bound on RMS(err)/RMS(x) over N(0,1) data (measured, with margin)
};

class RoundTrip : public ::testing::TestWithParam<GridCase> {};

// Grid (a*q + b for q in q_lo..q_hi) of element e of block i, read from the encoded bytes.
struct Grid {
  float a, b;
  int q_lo, q_hi;
  const int8_t* table = nullptr;  // codebook formats: levels a * table[k]
};

// Q3_K's 6-bit scale i read bit by bit: low 4 bits are nibble i / 8 of byte i % 8,
// bits 4..5 are bits 2 (i / 4) .. +1 of byte 8 + i % 4.
int q3_k_scale_bitwise(const uint8_t* scales, int i) {
  int s = 0;
  for (int b = 0; b < 4; ++b) s |= ((scales[i % 8] >> (4 * (i / 8) + b)) & 1) << b;
  for (int b = 0; b < 2; ++b) s |= ((scales[8 + i % 4] >> (2 * (i / 4) + b)) & 1) << (4 + b);
  return s;
}

Grid grid_of(GgmlType type, const std::vector<uint8_t>& bytes, int64_t e) {
  const int64_t bs = traits(type).block_size;
  const size_t i = static_cast<size_t>(e / bs);
  const int l = static_cast<int>(e % bs);
  switch (type) {
    case GgmlType::Q4_0: {
      const float d = f16_to_f32(block_at<BlockQ4_0>(bytes, i).d);
      return {d, -8 * d, 0, 15};
    }
    case GgmlType::Q4_1: {
      const auto b = block_at<BlockQ4_1>(bytes, i);
      return {f16_to_f32(b.d), f16_to_f32(b.m), 0, 15};
    }
    case GgmlType::Q5_0: {
      const float d = f16_to_f32(block_at<BlockQ5_0>(bytes, i).d);
      return {d, -16 * d, 0, 31};
    }
    case GgmlType::Q5_1: {
      const auto b = block_at<BlockQ5_1>(bytes, i);
      return {f16_to_f32(b.d), f16_to_f32(b.m), 0, 31};
    }
    case GgmlType::Q8_0: return {f16_to_f32(block_at<BlockQ8_0>(bytes, i).d), 0, -127, 127};
    case GgmlType::Q8_1: return {f16_to_f32(block_at<BlockQ8_1>(bytes, i).d), 0, -127, 127};
    case GgmlType::Q8_K: return {block_at<BlockQ8_K>(bytes, i).d, 0, -127, 127};
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      int sc[8], m[8];
      float d, dmin;
      if (type == GgmlType::Q4_K) {
        const auto b = block_at<BlockQ4_K>(bytes, i);
        unpack_k_scales_bitwise(b.scales, sc, m);
        d = f16_to_f32(b.d);
        dmin = f16_to_f32(b.dmin);
      } else {
        const auto b = block_at<BlockQ5_K>(bytes, i);
        unpack_k_scales_bitwise(b.scales, sc, m);
        d = f16_to_f32(b.d);
        dmin = f16_to_f32(b.dmin);
      }
      const int j = l / 32;
      return {d * sc[j], -dmin * m[j], 0, type == GgmlType::Q4_K ? 15 : 31};
    }
    case GgmlType::Q6_K: {
      const auto b = block_at<BlockQ6_K>(bytes, i);
      const float s = f16_to_f32(b.d) * b.scales[l / 16];
      return {s, -32 * s, 0, 63};
    }
    case GgmlType::Q2_K: {
      const auto b = block_at<BlockQ2_K>(bytes, i);
      const uint8_t sm = b.scales[l / 16];
      return {f16_to_f32(b.d) * (sm & 15), -f16_to_f32(b.dmin) * (sm >> 4), 0, 3};
    }
    case GgmlType::Q3_K: {
      const auto b = block_at<BlockQ3_K>(bytes, i);
      return {f16_to_f32(b.d) * static_cast<float>(q3_k_scale_bitwise(b.scales, l / 16) - 32), 0, -4, 3};
    }
    case GgmlType::IQ4_NL: return {f16_to_f32(block_at<BlockIQ4_NL>(bytes, i).d), 0, -127, 127, kIq4nlValues};
    case GgmlType::IQ4_XS: {
      const auto b = block_at<BlockIQ4_XS>(bytes, i);
      const int j = l / 32;
      const int ls = ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b.scales_h >> (2 * j)) & 3) << 4;
      return {f16_to_f32(b.d) * static_cast<float>(ls - 32), 0, -127, 127, kIq4nlValues};
    }
    case GgmlType::MXFP4:
      return {std::ldexp(1.0f, block_at<BlockMXFP4>(bytes, i).e - 128), 0, -12, 12, kMxfp4Values};
    default: ADD_FAILURE() << "no grid for " << type_name(type); return {0, 0, 0, 0};
  }
}

TEST_P(RoundTrip, EveryValueDecodesToItsNearestGridLevel) {
  const GgmlType type = GetParam().type;
  const int64_t n = 16 * kQK_K;
  // Blocks of very different magnitude in one row, so that block scales differ.
  auto x = normal_data(n, 1234);
  for (int64_t e = 0; e < n; ++e) x[e] *= std::pow(10.0f, static_cast<float>(e / kQK_K % 5) - 2);
  const auto bytes = quantize(type, x);
  const auto y = decode(type, bytes.data(), n);
  for (int64_t e = 0; e < n; ++e) {
    const Grid g = grid_of(type, bytes, e);
    const float nearest = dist_to_grid(x[e], g.a, g.b, g.q_lo, g.q_hi, g.table);
    const float q_abs_max = static_cast<float>(std::max(std::abs(g.q_lo), std::abs(g.q_hi)));
    const float slack = std::ldexp(q_abs_max * std::fabs(g.a) + std::fabs(g.b), -10) +
                        1e-6f * std::fabs(x[e]);
    ASSERT_LE(std::fabs(x[e] - y[e]), nearest + slack)
        << type_name(type) << " element " << e << " x=" << x[e] << " y=" << y[e];
  }
}

TEST_P(RoundTrip, RelativeRmsErrorOnGaussianDataIsWithinBound) {
  const GgmlType type = GetParam().type;
  const auto x = normal_data(64 * kQK_K, 99);
  const auto y = decode(type, quantize(type, x).data(), static_cast<int64_t>(x.size()));
  const float rel = rel_rms_error(x, y);
  EXPECT_LE(rel, GetParam().max_rel_rms) << type_name(type);
  RecordProperty("rel_rms", std::to_string(rel));
  std::printf("  %s relative RMS error %.5f (bound %.4f)\n", type_name(type), rel,
              GetParam().max_rel_rms);
}

TEST_P(RoundTrip, AllZeroRowDecodesToExactZeros) {
  const GgmlType type = GetParam().type;
  const std::vector<float> x(2 * kQK_K, 0.0f);
  const auto y = decode(type, quantize(type, x).data(), static_cast<int64_t>(x.size()));
  for (size_t e = 0; e < y.size(); ++e) ASSERT_EQ(y[e], 0.0f) << type_name(type) << " " << e;
}

// Magnitudes of order 1 and up: below ~0.05 the K-quants' f16 super-block scale
// (about amax/1000 for Q4_K, amax/4000 for Q6_K) is an f16 subnormal and a constant
// 0.001 comes back 1-3% off, as in ggml.
// Not MXFP4: its levels are 1, 1.5, 2, 3, 4, 6 times a power of two, so -3.5 and 100
// have no close level at any scale.
TEST_P(RoundTrip, ConstantBlocksRoundTripClosely) {
  const GgmlType type = GetParam().type;
  if (type == GgmlType::MXFP4) GTEST_SKIP() << "no level near 3.5 x 2^k";
  for (float c : {1.0f, -3.5f, 100.0f}) {
    const std::vector<float> x(kQK_K, c);
    const auto y = decode(type, quantize(type, x).data(), kQK_K);
    for (size_t e = 0; e < y.size(); ++e)
      ASSERT_NEAR(y[e], c, 2e-3f * std::fabs(c)) << type_name(type) << " c=" << c << " " << e;
  }
}

TEST_P(RoundTrip, RowEncodingEqualsBlockByBlockEncodingAtAnyAlignment) {
  const GgmlType type = GetParam().type;
  const int64_t bs = traits(type).block_size;
  const int64_t n = 3 * kQK_K;
  const auto x = normal_data(n, 7);
  const auto whole = quantize(type, x);
  const size_t block_bytes = traits(type).type_size;
  // Destination and source one byte off any natural alignment.
  std::vector<uint8_t> buf(whole.size() + 1);
  for (int64_t i = 0; i < n / bs; ++i) {
    quantize_row(type, x.data() + i * bs, buf.data() + 1 + i * block_bytes, bs);
  }
  ASSERT_EQ(0, std::memcmp(whole.data(), buf.data() + 1, whole.size())) << type_name(type);
  const auto y_aligned = decode(type, whole.data(), n);
  const auto y_odd = decode(type, buf.data() + 1, n);
  ASSERT_EQ(0, std::memcmp(y_aligned.data(), y_odd.data(), n * sizeof(float)));
}

// Bounds: relative RMS measured on this N(0,1) row (q4_0 .085, q4_1 .077, q5_0 .043,
// q5_1 .038, q8_0 .0053, q4_K .071, q5_K .036, q6_K .0177, q8_K .0069, q2_K .269,
// q3_K .152, iq4_nl .0758, iq4_xs .0764, mxfp4 .111) plus ~15%.
INSTANTIATE_TEST_SUITE_P(
    AllQuantTypes, RoundTrip,
    ::testing::Values(GridCase{GgmlType::Q4_0, 0.098f}, GridCase{GgmlType::Q4_1, 0.089f},
                      GridCase{GgmlType::Q5_0, 0.049f}, GridCase{GgmlType::Q5_1, 0.044f},
                      GridCase{GgmlType::Q8_0, 0.0061f}, GridCase{GgmlType::Q8_1, 0.0061f},
                      GridCase{GgmlType::Q4_K, 0.081f}, GridCase{GgmlType::Q5_K, 0.042f},
                      GridCase{GgmlType::Q6_K, 0.0205f}, GridCase{GgmlType::Q8_K, 0.0079f},
                      GridCase{GgmlType::Q2_K, 0.31f}, GridCase{GgmlType::Q3_K, 0.175f},
                      GridCase{GgmlType::IQ4_NL, 0.087f}, GridCase{GgmlType::IQ4_XS, 0.088f},
                      GridCase{GgmlType::MXFP4, 0.128f}),
    [](const auto& info) { return std::string(type_name(info.param.type)); });

TEST(RoundTripBound, Q8_0ErrorIsAtMostHalfAStepPlusScaleRounding) {
  // |x - y| <= d/2 (rounding) + 127 * |d - f16(d)| (codes chosen with the f32 d)
  //          <= d * (0.5 + 127 * 2^-11) = 0.562 d.
  const auto x = normal_data(32 * 64, 5, 3.0f);
  const auto bytes = quantize(GgmlType::Q8_0, x);
  const auto y = decode(GgmlType::Q8_0, bytes.data(), static_cast<int64_t>(x.size()));
  for (size_t e = 0; e < x.size(); ++e) {
    const float d = f16_to_f32(block_at<BlockQ8_0>(bytes, e / 32).d);
    ASSERT_LE(std::fabs(x[e] - y[e]), 0.563f * d) << e;
  }
}

TEST(RoundTripBound, Q8_KErrorIsAtMostHalfAStep) {
  const auto x = normal_data(256 * 8, 6, 3.0f);
  const auto bytes = quantize(GgmlType::Q8_K, x);
  const auto y = decode(GgmlType::Q8_K, bytes.data(), static_cast<int64_t>(x.size()));
  for (size_t e = 0; e < x.size(); ++e) {
    const float d = std::fabs(block_at<BlockQ8_K>(bytes, e / 256).d);
    ASSERT_LE(std::fabs(x[e] - y[e]), 0.5f * d * (1 + 1e-5f)) << e;
  }
}

TEST(RoundTripBound, Q8_1SumMatchesDecodedCodes) {
  const auto x = normal_data(32 * 16, 8);
  const auto bytes = quantize(GgmlType::Q8_1, x);
  for (size_t i = 0; i < 16; ++i) {
    const auto b = block_at<BlockQ8_1>(bytes, i);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += b.qs[j];
    const float want = f16_to_f32(b.d) * static_cast<float>(sum);
    // s was computed from the f32 d, then rounded to f16: two 2^-11 relative roundings.
    EXPECT_NEAR(f16_to_f32(b.s), want, 2e-3f * std::fabs(want) + 1e-6f) << i;
  }
}

TEST(RoundTripBound, Q8_KOfAllZeroBlockHasZeroScaleCodesAndSums) {
  const std::vector<float> x(256, 0.0f);
  const auto b = block_at<BlockQ8_K>(quantize(GgmlType::Q8_K, x), 0);
  EXPECT_EQ(b.d, 0.0f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(b.qs[e], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

TEST(RoundTripBound, QuantizingDecodedKBlockIsNearlyLossless) {
  // A row decoded from a hand-built Q4_K block lies on a 4-bit grid per sub-block;
  // the re-encode must find a grid close to it (error well below one step).
  BlockQ4_K b;
  b.d = 0x3800;
  b.dmin = 0x3400;
  std::memcpy(b.scales, kKScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 29 + 7);
  const auto x = decode_block(GgmlType::Q4_K, b);
  const auto y = decode(GgmlType::Q4_K, quantize(GgmlType::Q4_K, x).data(), 256);
  for (int e = 0; e < 256; ++e) {
    const float step = 0.5f * kKSc[e / 32];
    EXPECT_LE(std::fabs(x[e] - y[e]), 0.5f * step) << e;
  }
}

// ---------------------------------------------------------------- sizes and preconditions

TEST(RowShape, ZeroLengthRowTouchesNothing) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K,
                        GgmlType::Q6_K, GgmlType::Q8_K}) {
    float out = 42.0f;
    uint8_t raw = 0xAB;
    dequantize_row(type, &raw, &out, 0);
    quantize_row(type, &out, &raw, 0);
    EXPECT_EQ(out, 42.0f) << type_name(type);
    EXPECT_EQ(raw, 0xAB) << type_name(type);
  }
}

TEST(RowShape, WritesExactlyRowBytesAndNValues) {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q8_1, GgmlType::Q5_K,
                        GgmlType::Q6_K, GgmlType::BF16}) {
    const int64_t n = 2 * kQK_K;
    const auto x = normal_data(n, 3);
    const size_t bytes = row_bytes(type, n);
    std::vector<uint8_t> q(bytes + 8, 0xCD);
    quantize_row(type, x.data(), q.data(), n);
    for (size_t k = bytes; k < q.size(); ++k) ASSERT_EQ(q[k], 0xCD) << type_name(type);
    std::vector<float> y(n + 4, 7.0f);
    dequantize_row(type, q.data(), y.data(), n);
    for (int64_t k = n; k < n + 4; ++k) ASSERT_EQ(y[k], 7.0f) << type_name(type);
  }
}

using CodecsDeathTest = ::testing::Test;

TEST_F(CodecsDeathTest, PartialBlockIsRejected) {
  std::vector<float> y(64);
  std::vector<uint8_t> q(1024);
  EXPECT_DEATH(dequantize_row(GgmlType::Q4_0, q.data(), y.data(), 33), "not a whole number");
  EXPECT_DEATH(quantize_row(GgmlType::Q4_K, y.data(), q.data(), 64), "not a whole number");
}

TEST_F(CodecsDeathTest, UnsupportedTypeIsRejectedByName) {
  std::vector<float> y(256);
  std::vector<uint8_t> q(1024);
  EXPECT_DEATH(dequantize_row(GgmlType::I8, q.data(), y.data(), 256), "unsupported type i8");
  EXPECT_DEATH(quantize_row(GgmlType::I32, y.data(), q.data(), 4), "unsupported type i32");
}

}  // namespace
}  // namespace pagoda
