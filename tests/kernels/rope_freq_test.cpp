// RoPE frequencies (kernels/ops.h rope_inv_freq, RopeScaling): inverse frequencies, YaRN's
// correction dimensions and ramp, linear and llama3 scaling, each against hand-computed
// values or the closed-form formula in double. (Split from ops_test.cpp, which tests the
// row kernels.)

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace pagoda {
namespace {

constexpr double kEps = FLT_EPSILON;  // 2^-23 = 1.19e-7: one ulp relative, at worst

TEST(RopeFreqTest, InvFreqIsThetaPowerOverFactors) {
  const int64_t n_rot = 128;
  std::vector<float> factors(n_rot / 2), inv(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) factors[i] = 1.0f + 0.125f * static_cast<float>(i % 9);
  rope_inv_freq(inv.data(), n_rot, 500000.0f, 1.0f, factors.data());
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double want = std::pow(500000.0, -2.0 * i / n_rot) / factors[i];
    ASSERT_NEAR(inv[i], want, 0.5 * kEps * want) << "i=" << i << " factor=" << factors[i];
  }
  // Linear scaling multiplies by freq_scale; no factors is factors of 1.
  rope_inv_freq(inv.data(), n_rot, 10000.0f, 0.25f, nullptr);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double want = 0.25 * std::pow(10000.0, -2.0 * i / n_rot);
    ASSERT_NEAR(inv[i], want, 0.5 * kEps * want) << "i=" << i;
  }
  EXPECT_EQ(inv[0], 0.25f);
}

// Worked by hand for n_rot = 128, theta = 10000, orig_ctx = 4096, beta 32 / 1:
//   corr(32) = 128 ln(4096 / (64 pi)) / (2 ln 10000) = 20.944 -> floor 20
//   corr(1)  = 128 ln(4096 / (2 pi))  / (2 ln 10000) = 45.027 -> ceil 46
TEST(RopeFreqTest, YarnCorrDimsMatchHandComputation) {
  const YarnCorrDims d = rope_yarn_corr_dims(128, 4096, 10000.0f, 32.0f, 1.0f);
  EXPECT_EQ(d.low, 20.0f);
  EXPECT_EQ(d.high, 46.0f);
  // Clamped to [0, n_rot - 1]: a tiny context puts corr(32) below 0, a huge one corr(1) high.
  const YarnCorrDims c = rope_yarn_corr_dims(16, 64, 10000.0f, 32.0f, 1.0f);
  EXPECT_EQ(c.low, 0.0f);
  const YarnCorrDims e = rope_yarn_corr_dims(16, int64_t{1} << 40, 10.0f, 32.0f, 1.0f);
  EXPECT_EQ(e.high, 15.0f);
}

// With low = 20, high = 46 (above) and factor 4 (s = 1/4), pair i's frequency is
// base_i * (s (1 - ramp) + ramp), ramp = 1 - clamp((i - 20) / 26, 0, 1):
//   i <= 20: ratio 1;  i = 27: ramp 19/26, ratio 0.25 * 7/26 + 19/26 = 20.75/26;
//   i = 33: ramp 1/2, ratio 0.625;  i >= 46: ratio 0.25.
// attn = 1 + 0.1 ln 4 = 1.1386294.
TEST(RopeFreqTest, YarnFrequenciesMatchHandComputedRamp) {
  const int64_t n_rot = 128;
  RopeScaling s;
  s.type = RopeScaling::Type::Yarn;
  s.factor = 4.0f;
  s.orig_ctx = 4096;
  std::vector<float> inv(n_rot / 2);
  const float attn = rope_scaled_inv_freq(inv.data(), n_rot, 10000.0f, s, nullptr);
  EXPECT_NEAR(attn, 1.1386294361119890, 2 * kEps);
  const std::pair<int, double> ratios[] = {{0, 1.0},    {10, 1.0},      {20, 1.0}, {27, 20.75 / 26},
                                           {33, 0.625}, {46, 0.25},     {63, 0.25}};
  for (auto [i, ratio] : ratios) {
    const double want = std::pow(10000.0, -2.0 * i / n_rot) * ratio;
    EXPECT_NEAR(inv[i], want, kEps * want) << "i=" << i;
  }
  // attn_factor multiplies the YaRN magnitude scaling.
  s.attn_factor = 0.5f;
  EXPECT_NEAR(rope_scaled_inv_freq(inv.data(), n_rot, 10000.0f, s, nullptr), 0.5 * 1.1386294361119890, 2 * kEps);
  // ext_factor 0 is linear interpolation with no magnitude scaling.
  s.attn_factor = 1.0f;
  s.ext_factor = 0.0f;
  EXPECT_EQ(rope_scaled_inv_freq(inv.data(), n_rot, 10000.0f, s, nullptr), 1.0f);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double want = 0.25 * std::pow(10000.0, -2.0 * i / n_rot);
    ASSERT_NEAR(inv[i], want, kEps * want) << "i=" << i;
  }
}

TEST(RopeFreqTest, NoneLinearAndLlama3Scaling) {
  const int64_t n_rot = 64;
  std::vector<float> inv(n_rot / 2), want(n_rot / 2), factors(n_rot / 2);
  RopeScaling s;  // None
  EXPECT_EQ(rope_scaled_inv_freq(inv.data(), n_rot, 10000.0f, s, nullptr), 1.0f);
  rope_inv_freq(want.data(), n_rot, 10000.0f, 1.0f, nullptr);
  EXPECT_EQ(inv, want);

  s.type = RopeScaling::Type::Linear;
  s.factor = 8.0f;
  EXPECT_EQ(rope_scaled_inv_freq(inv.data(), n_rot, 10000.0f, s, nullptr), 1.0f);
  rope_inv_freq(want.data(), n_rot, 10000.0f, 0.125f, nullptr);
  EXPECT_EQ(inv, want);

  // Llama3: the factors carry the scaling; `factor` is not applied again.
  s.type = RopeScaling::Type::Llama3;
  llama3_freq_factors(factors.data(), n_rot, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  EXPECT_EQ(rope_scaled_inv_freq(inv.data(), n_rot, 500000.0f, s, factors.data()), 1.0f);
  rope_inv_freq(want.data(), n_rot, 500000.0f, 1.0f, factors.data());
  EXPECT_EQ(inv, want);
  EXPECT_DEATH(rope_scaled_inv_freq(inv.data(), n_rot, 500000.0f, s, nullptr), "rope_freqs");
}

// Llama 3.1 8B (theta 500000, n_rot 128, factor 8, low/high 1/4, orig 8192): wavelength
// 2 pi * 500000^(2i/128) is below 8192/4 = 2048 up to i = 28 (1956.5) and above 8192 from
// i = 35 (8218.7). In between, smooth = (8192 / wavelen - 1) / 3:
//   i = 29: wavelen 2401.74, smooth 0.80363, factor 1 / (0.19637/8 + 0.80363) = 1.2074839
//   i = 30: wavelen 2948.30, smooth 0.59284, factor 1.5534146
TEST(RopeFreqTest, Llama3FreqFactorsMatchHandComputation) {
  std::vector<float> f(64);
  llama3_freq_factors(f.data(), 128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[28], 1.0f);
  EXPECT_NEAR(f[29], 1.2074839, 1e-6);
  EXPECT_NEAR(f[30], 1.5534146, 1e-6);
  EXPECT_EQ(f[35], 8.0f);
  EXPECT_EQ(f[63], 8.0f);
  for (int i = 1; i < 64; ++i) EXPECT_GE(f[i], f[i - 1]) << "factors must not decrease, i=" << i;
}

}  // namespace
}  // namespace pagoda
