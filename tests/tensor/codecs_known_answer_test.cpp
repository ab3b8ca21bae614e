// Block codecs, decoding: the plain types, known-answer decodes of hand-built blocks
// (written from the ggml layout, in ggml's loop order rather than the decoder's
// per-element order) and single-bit probes of every packed field of the K-quants.
// Encoding and round trips are in codecs_test.cpp.
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

// ---------------------------------------------------------------- plain types

TEST(PlainTypes, F32RowIsCopiedVerbatim) {
  const float x[3] = {1.5f, -0.0f, 3e38f};
  const auto y = decode(GgmlType::F32, x, 3);
  EXPECT_EQ(0, std::memcmp(x, y.data(), sizeof(x)));
  float back[3];
  quantize_row(GgmlType::F32, x, back, 3);
  EXPECT_EQ(0, std::memcmp(x, back, sizeof(x)));
}

TEST(PlainTypes, F16AndBf16RowsDecodeEachElement) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x3555, 0x7C00};  // 1, -2, 0.333251953125, inf
  const auto y = decode(GgmlType::F16, h, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.333251953125f);
  EXPECT_TRUE(std::isinf(y[3]));
  const uint16_t b[3] = {0x3F80, 0xC040, 0x3EAB};  // 1, -3, 0.333984375
  const auto z = decode(GgmlType::BF16, b, 3);
  EXPECT_EQ(z[0], 1.0f);
  EXPECT_EQ(z[1], -3.0f);
  EXPECT_EQ(z[2], 0.333984375f);
}

TEST(PlainTypes, F16AndBf16RowsEncodeWithRoundToNearestEven) {
  const std::vector<float> x = {1.0f, 1.0f / 3.0f, -65504.0f, 1e6f};
  const auto h = quantize(GgmlType::F16, x);
  const uint16_t want_h[4] = {0x3C00, 0x3555, 0xFBFF, 0x7C00};
  EXPECT_EQ(0, std::memcmp(h.data(), want_h, sizeof(want_h)));
  const auto b = quantize(GgmlType::BF16, x);
  const uint16_t want_b[4] = {0x3F80, 0x3EAB, 0xC780, 0x4974};
  EXPECT_EQ(0, std::memcmp(b.data(), want_b, sizeof(want_b)));
}

// ---------------------------------------------------------------- known answers, 32-wide

TEST(KnownAnswer, Q4_0LowNibblesAreFirstHalfHighNibblesSecondHalf) {
  BlockQ4_0 b;
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const auto y = decode_block(GgmlType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j)) << j;
  }
}

TEST(KnownAnswer, Q4_1AddsTheMinToEveryCode) {
  BlockQ4_1 b;
  b.d = 0x3400;  // 0.25
  b.m = 0xBC00;  // -1
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j * 5 % 16) | (j << 4));
  const auto y = decode_block(GgmlType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * (j * 5 % 16) - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * j - 1.0f) << j;
  }
}

TEST(KnownAnswer, Q5_0FifthBitOfElementJIsBitJOfLittleEndianQh) {
  BlockQ5_0 b;
  b.d = 0x4000;  // 2
  std::memset(b.qs, 0, sizeof(b.qs));
  b.qs[3] = 0xA5;  // element 3 low nibble 5, element 19 high nibble 10
  // qh = 0x80010009: bits 0, 3, 16, 31 -> elements 0, 3, 16, 31 get +16.
  const uint8_t qh[4] = {0x09, 0x00, 0x01, 0x80};
  std::memcpy(b.qh, qh, 4);
  const auto y = decode_block(GgmlType::Q5_0, b);
  for (int j = 0; j < 32; ++j) {
    int q = 0;
    if (j == 3) q = 5;
    if (j == 19) q = 10;
    if (j == 0 || j == 3 || j == 16 || j == 31) q += 16;
    EXPECT_EQ(y[j], 2.0f * (q - 16)) << j;
  }
}

TEST(KnownAnswer, Q5_1UsesFiveBitCodesPlusMin) {
  BlockQ5_1 b;
  b.d = 0x3800;  // 0.5
  b.m = 0x4200;  // 3
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const uint8_t qh[4] = {0xF0, 0x00, 0x00, 0xFF};  // elements 4..7 and 24..31
  std::memcpy(b.qh, qh, 4);
  const auto y = decode_block(GgmlType::Q5_1, b);
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? j : 31 - j;
    const int high = (j >= 4 && j < 8) || j >= 24 ? 16 : 0;
    EXPECT_EQ(y[j], 0.5f * (nibble + high) + 3.0f) << j;
  }
}

TEST(KnownAnswer, Q8_0AndQ8_1ScaleSignedBytes) {
  BlockQ8_0 a;
  BlockQ8_1 b;
  a.d = b.d = 0x3400;  // 0.25
  b.s = 0;              // not used by the decoder
  for (int j = 0; j < 32; ++j) a.qs[j] = b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto ya = decode_block(GgmlType::Q8_0, a);
  const auto yb = decode_block(GgmlType::Q8_1, b);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(ya[j], 0.25f * (j * 8 - 128)) << j;
    EXPECT_EQ(yb[j], ya[j]) << j;
  }
}

// ---------------------------------------------------------------- known answers, K-quants

TEST(KnownAnswer, KScalePackingTableMatchesTheBitwiseReading) {
  int sc[8], m[8];
  unpack_k_scales_bitwise(kKScales, sc, m);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(sc[j], kKSc[j]) << j;
    EXPECT_EQ(m[j], kKMin[j]) << j;
  }
}

TEST(KnownAnswer, Q4_KDecodesHandPackedScalesMinsAndNibbles) {
  BlockQ4_K b;
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  std::memcpy(b.scales, kKScales, 12);
  // Pair p of sub-blocks (2p, 2p+1) owns qs[32p..32p+32): low nibble -> sub-block 2p.
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * p + l] = static_cast<uint8_t>((l & 15) | ((3 * l + p) & 15) << 4);
  const auto y = decode_block(GgmlType::Q4_K, b);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int lo = l & 15, hi = (3 * l + p) & 15;
      const int j0 = 2 * p, j1 = 2 * p + 1;
      EXPECT_EQ(y[64 * p + l], 0.5f * kKSc[j0] * lo - 0.25f * kKMin[j0]) << p << "," << l;
      EXPECT_EQ(y[64 * p + 32 + l], 0.5f * kKSc[j1] * hi - 0.25f * kKMin[j1]) << p << "," << l;
    }
  }
}

TEST(KnownAnswer, Q5_KFifthBitOfSubBlockJIsBitJOfQh) {
  BlockQ5_K b;
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kKScales, 12);
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * p + l] = static_cast<uint8_t>(((l + p) & 15) | ((l * 7) & 15) << 4);
  for (int l = 0; l < 32; ++l) b.qh[l] = static_cast<uint8_t>(l * 37 + 11);
  const auto y = decode_block(GgmlType::Q5_K, b);
  // ggml's order: pairs of sub-blocks, bit masks 1,2 then 4,8 then 16,32 then 64,128.
  for (int p = 0; p < 4; ++p) {
    const int mask_lo = 1 << (2 * p), mask_hi = 2 << (2 * p);
    for (int l = 0; l < 32; ++l) {
      const int q0 = ((l + p) & 15) + (b.qh[l] & mask_lo ? 16 : 0);
      const int q1 = ((l * 7) & 15) + (b.qh[l] & mask_hi ? 16 : 0);
      EXPECT_EQ(y[64 * p + l], 1.0f * kKSc[2 * p] * q0 - 0.5f * kKMin[2 * p]) << p << "," << l;
      EXPECT_EQ(y[64 * p + 32 + l], 1.0f * kKSc[2 * p + 1] * q1 - 0.5f * kKMin[2 * p + 1])
          << p << "," << l;
    }
  }
}

TEST(KnownAnswer, Q6_KInterleavesLowNibblesAndHighPairsAcrossEachHalf) {
  BlockQ6_K b;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 7 + 3);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 13 + 5);
  const int8_t sc[16] = {-128, 127, -1, 1, 5, -7, 64, -64, 2, 3, -3, 100, -100, 0, 9, 33};
  std::memcpy(b.scales, sc, 16);
  b.d = 0x3400;  // 0.25
  const auto y = decode_block(GgmlType::Q6_K, b);
  // ggml's loop: per 128-value half h, lane l in 0..31 produces four values.
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* s = sc + 8 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      const float* yy = y.data() + 128 * h;
      EXPECT_EQ(yy[l], 0.25f * s[is + 0] * q1) << h << "," << l;
      EXPECT_EQ(yy[l + 32], 0.25f * s[is + 2] * q2) << h << "," << l;
      EXPECT_EQ(yy[l + 64], 0.25f * s[is + 4] * q3) << h << "," << l;
      EXPECT_EQ(yy[l + 96], 0.25f * s[is + 6] * q4) << h << "," << l;
    }
  }
}

TEST(KnownAnswer, Q8_KScalesCodesByFloatD) {
  BlockQ8_K b;
  b.d = -0.375f;
  for (int e = 0; e < 256; ++e) b.qs[e] = static_cast<int8_t>(e - 128);
  std::memset(b.bsums, 0x55, sizeof(b.bsums));  // not read by the decoder
  const auto y = decode_block(GgmlType::Q8_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], -0.375f * (e - 128)) << e;
}

// Q2_K, written the way ggml's loops walk it: two halves of 128 values (32 bytes of
// qs each), four 2-bit shifts, per shift two runs of 16 values with their own
// scale byte (low nibble scale, high nibble min).
TEST(KnownAnswer, Q2_KWalksHalvesShiftsAndRunsOfSixteen) {
  BlockQ2_K b;
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<uint8_t>((i + 1) % 16 | (15 - i) << 4);
  for (int k = 0; k < 64; ++k) b.qs[k] = static_cast<uint8_t>(k * 37 + 11);
  const auto y = decode_block(GgmlType::Q2_K, b);
  int e = 0, is = 0;
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 8; shift += 2)
      for (int run = 0; run < 2; ++run, ++is)
        for (int l = 16 * run; l < 16 * run + 16; ++l, ++e) {
          const int q = (b.qs[32 * half + l] >> shift) & 3;
          ASSERT_EQ(y[e], 1.0f * (b.scales[is] & 15) * q - 0.5f * (b.scales[is] >> 4)) << e;
        }
}

// Q3_K likewise, with the hmask bit m (1, 2, 4, ... over the 8 shifts of both
// halves) of hmask[l] meaning "no -4", and the 16 six-bit scales set by hand:
// scale i = 17 + 3i (biased by 32), low nibbles in bytes 0..7 (i < 8) / their high
// nibbles (i >= 8), top two bits in bytes 8..11.
TEST(KnownAnswer, Q3_KAppliesHmaskAndSixBitScales) {
  BlockQ3_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = 0x3400;  // 0.25
  int scale[16];
  for (int i = 0; i < 16; ++i) {
    scale[i] = 17 + 3 * i;  // 17 .. 62
    b.scales[i % 8] |= static_cast<uint8_t>((scale[i] & 15) << (4 * (i / 8)));
    b.scales[8 + i % 4] |= static_cast<uint8_t>((scale[i] >> 4) << (2 * (i / 4)));
  }
  for (int k = 0; k < 64; ++k) b.qs[k] = static_cast<uint8_t>(k * 53 + 5);
  for (int k = 0; k < 32; ++k) b.hmask[k] = static_cast<uint8_t>(k * 91 + 3);
  const auto y = decode_block(GgmlType::Q3_K, b);
  int e = 0, is = 0, m = 1;
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 8; shift += 2, m <<= 1)
      for (int run = 0; run < 2; ++run, ++is)
        for (int l = 16 * run; l < 16 * run + 16; ++l, ++e) {
          const int q = ((b.qs[32 * half + l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
          ASSERT_EQ(y[e], 0.25f * (scale[is] - 32) * q) << e;
        }
}

TEST(KnownAnswer, Iq4_NlLooksUpTheNonLinearTable) {
  const int8_t table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  BlockIQ4_NL b;
  b.d = 0xB800;  // -0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const auto y = decode_block(GgmlType::IQ4_NL, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.5f * table[j]) << j;
    EXPECT_EQ(y[j + 16], -0.5f * table[15 - j]) << j;
  }
}

// IQ4_XS sub-block ib: 6-bit scale from nibble ib % 2 of scales_l[ib / 2] and bits
// 2ib..2ib+1 of scales_h, biased by 32; set here to 0, 9, 18, ... 63.
TEST(KnownAnswer, Iq4_XsCombinesSplitSixBitScales) {
  const int8_t table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  BlockIQ4_XS b;
  std::memset(&b, 0, sizeof(b));
  b.d = 0x3C00;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = 9 * ib;
    b.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (ib % 2)));
    b.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
  }
  for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>(k * 29 + 7);
  const auto y = decode_block(GgmlType::IQ4_XS, b);
  for (int ib = 0; ib < 8; ++ib)
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[32 * ib + j], static_cast<float>(9 * ib - 32) * table[b.qs[16 * ib + j] & 15]);
      EXPECT_EQ(y[32 * ib + j + 16], static_cast<float>(9 * ib - 32) * table[b.qs[16 * ib + j] >> 4]);
    }
}

// MXFP4: e2m1 codes (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^(e - 127).
TEST(KnownAnswer, Mxfp4DecodesE2m1TimesPowerOfTwo) {
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int e : {0, 1, 2, 120, 127, 130, 254}) {
    BlockMXFP4 b;
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
    const auto y = decode_block(GgmlType::MXFP4, b);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], e2m1[j] * std::ldexp(1.0f, e - 127) + 0.0f) << e << " " << j;
      EXPECT_EQ(y[j + 16], e2m1[15 - j] * std::ldexp(1.0f, e - 127) + 0.0f) << e << " " << j;
    }
  }
}

// ---------------------------------------------------------------- single-bit probes

// Decodes the (scale, min) of each Q4_K sub-block through the public API: with d =
// dmin = 1, code 0 decodes to -m and code 1 to sc - m.
void probe_q4_k_scales(const uint8_t* scales, int sc[8], int m[8]) {
  BlockQ4_K b;
  b.d = b.dmin = 0x3C00;
  std::memcpy(b.scales, scales, 12);
  std::memset(b.qs, 0x10, sizeof(b.qs));  // even sub-blocks code 0, odd ones code 1
  const auto y = decode_block(GgmlType::Q4_K, b);
  std::memset(b.qs, 0x01, sizeof(b.qs));  // the other way round
  const auto z = decode_block(GgmlType::Q4_K, b);
  for (int j = 0; j < 8; ++j) {
    const float at0 = (j % 2 == 0 ? y : z)[32 * j], at1 = (j % 2 == 0 ? z : y)[32 * j];
    m[j] = static_cast<int>(-at0);
    sc[j] = static_cast<int>(at1 - at0);
  }
}

TEST(BitProbe, EveryQ4_KScaleBitReachesExactlyTheFieldTheLayoutNames) {
  for (int k = 0; k < 12; ++k) {
    for (int bit = 0; bit < 8; ++bit) {
      uint8_t scales[12] = {};
      scales[k] = static_cast<uint8_t>(1 << bit);
      int sc[8], m[8], want_sc[8], want_m[8];
      probe_q4_k_scales(scales, sc, m);
      unpack_k_scales_bitwise(scales, want_sc, want_m);
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(sc[j], want_sc[j]) << "byte " << k << " bit " << bit << " sub-block " << j;
        EXPECT_EQ(m[j], want_m[j]) << "byte " << k << " bit " << bit << " sub-block " << j;
      }
    }
  }
}

TEST(BitProbe, EachQ5_KQhBitRaisesExactlyOneValueBySixteenSteps) {
  BlockQ5_K b;
  b.d = 0x3C00;
  b.dmin = 0;
  std::memcpy(b.scales, kKScales, 12);
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.qh, 0, sizeof(b.qh));
  const auto base = decode_block(GgmlType::Q5_K, b);
  for (int l = 0; l < 32; ++l) {
    for (int bit = 0; bit < 8; ++bit) {
      BlockQ5_K p = b;
      p.qh[l] = static_cast<uint8_t>(1 << bit);
      const auto y = decode_block(GgmlType::Q5_K, p);
      const int target = 32 * bit + l;  // element l of sub-block `bit`
      for (int e = 0; e < 256; ++e) {
        const float want = base[e] + (e == target ? 16.0f * kKSc[bit] : 0.0f);
        ASSERT_EQ(y[e], want) << "qh[" << l << "] bit " << bit << " element " << e;
      }
    }
  }
}

TEST(BitProbe, EachQ6_KQhBitPairRaisesExactlyOneValue) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g + 1);
  b.d = 0x3C00;
  const auto base = decode_block(GgmlType::Q6_K, b);  // every code 0 -> -32 * scale
  for (int i = 0; i < 64; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      BlockQ6_K p = b;
      p.qh[i] = static_cast<uint8_t>(1 << bit);
      const auto y = decode_block(GgmlType::Q6_K, p);
      // qh[32h + l] bits 2k, 2k+1 are bits 4, 5 of element 128h + 32k + l.
      const int h = i / 32, l = i % 32, k = bit / 2;
      const int target = 128 * h + 32 * k + l;
      const float step = (bit % 2 == 0 ? 16.0f : 32.0f) * static_cast<float>(target / 16 + 1);
      for (int e = 0; e < 256; ++e) {
        ASSERT_EQ(y[e], base[e] + (e == target ? step : 0.0f))
            << "qh[" << i << "] bit " << bit << " element " << e;
      }
    }
  }
}

TEST(BitProbe, EachQ6_KQlNibbleRaisesExactlyOneValue) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(-(g + 1));
  b.d = 0x3C00;
  const auto base = decode_block(GgmlType::Q6_K, b);
  for (int i = 0; i < 128; ++i) {
    for (int nib = 0; nib < 2; ++nib) {
      BlockQ6_K p = b;
      p.ql[i] = static_cast<uint8_t>(1 << (4 * nib));
      const auto y = decode_block(GgmlType::Q6_K, p);
      // ql[64h + 32c + l]: low nibble -> quarter c, high nibble -> quarter c + 2.
      const int h = i / 64, c = (i % 64) / 32, l = i % 32;
      const int target = 128 * h + 32 * (c + 2 * nib) + l;
      const float step = -static_cast<float>(target / 16 + 1);
      for (int e = 0; e < 256; ++e) {
        ASSERT_EQ(y[e], base[e] + (e == target ? step : 0.0f))
            << "ql[" << i << "] nibble " << nib << " element " << e;
      }
    }
  }
}


}  // namespace
}  // namespace pagoda
