// Row kernels: every SIMD path the CPU supports against the scalar reference, swept over
// sizes that hit empty rows, single elements, odd lengths and every tail of the vector
// widths (the references themselves against independent computations:
// ops_reference_test.cpp). Each comparison states its tolerance; the first failing index
// is printed with its inputs, and the largest error seen is printed as "[ measured ]" for
// the record.

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/ops_internal.h"
#include "kernel_levels.h"
#include "ops_test_util.h"

namespace pagoda {
namespace {

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

// ---- every SIMD path against the scalar reference ----------------------------------------

class FastOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!matmul_detail::isa_runs(GetParam()))
      GTEST_SKIP() << isa_name(GetParam()) << " is not supported by this CPU ("
                   << cpu_features_string() << ")";
    const std::vector<Isa> own = ops_levels();
    if (std::find(own.begin(), own.end(), GetParam()) == own.end())
      GTEST_SKIP() << isa_name(GetParam()) << " runs a lower level's row ops";
  }
  const OpsKernels& k() const { return ops_internal::ops_kernels(GetParam()); }
  std::string tag(const char* op) const { return std::string(op) + " " + isa_name(GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(Isas, FastOpsTest, ::testing::Values(Isa::Avx2, Isa::Avx512, Isa::Amx),
                         isa_param_name);

TEST_P(FastOpsTest, ExpWithinOneUlpOfDoubleOverTheNormalRange) {
  // Dense sweep of [-87.33, 88.72] (results from FLT_MIN to just below FLT_MAX).
  constexpr int64_t kN = int64_t{1} << 21;
  const double lo = -87.33, hi = 88.72;
  std::vector<float> x(kN), y(kN);
  for (int64_t i = 0; i < kN; ++i) x[i] = static_cast<float>(lo + (hi - lo) * i / (kN - 1));
  k().exp_f32(x.data(), y.data(), kN);
  MaxErr err(tag("exp normal range"));
  // Tolerance 1.2e-7 relative (one ulp at the worst point of a binade).
  EXPECT_TRUE(all_close(
      y.data(), kN, [&](int64_t i) { return std::exp(static_cast<double>(x[i])); },
      [&](int64_t i) { return 1.2e-7 * std::exp(static_cast<double>(x[i])); },
      [&](int64_t i) { return "x=" + std::to_string(x[i]); }, &err));
}

TEST_P(FastOpsTest, ExpDenormalsOverflowAndSpecials) {
  // Denormal results: within one denormal step (2^-149) of the double value.
  constexpr int64_t kN = 100000;
  std::vector<float> x(kN), y(kN);
  for (int64_t i = 0; i < kN; ++i) x[i] = static_cast<float>(-103.9 + 16.56 * i / (kN - 1));
  k().exp_f32(x.data(), y.data(), kN);
  MaxErr err(tag("exp denormal range (rel to 2^-149)"));
  const double denorm_min = std::ldexp(1.0, -149);
  EXPECT_TRUE(all_close(
      y.data(), kN, [&](int64_t i) { return std::exp(static_cast<double>(x[i])); },
      [&](int64_t) { return denorm_min; }, [&](int64_t i) { return "x=" + std::to_string(x[i]); },
      &err));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {0.0f, -0.0f, -kInf, kInf, nan, -104.0f, -200.0f, -1e30f,
                                 88.72f, 88.73f, 89.0f, 100.0f, 1e30f, 1.0f, -1.0f};
  std::vector<float> out(in.size());
  k().exp_f32(in.data(), out.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], kInf);
  EXPECT_TRUE(std::isnan(out[4])) << out[4];
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 0.0f);
  EXPECT_EQ(out[7], 0.0f);
  EXPECT_TRUE(std::isfinite(out[8]) && out[8] > 3.3e38f) << out[8];  // exp(88.72) = 3.33e38
  EXPECT_EQ(out[9], kInf);                                           // exp(88.73) > FLT_MAX
  EXPECT_EQ(out[10], kInf);
  EXPECT_EQ(out[11], kInf);
  EXPECT_EQ(out[12], kInf);
  EXPECT_NEAR(out[13], std::numbers::e_v<float>, 1.2e-7 * std::numbers::e);
  EXPECT_NEAR(out[14], 1.0 / std::numbers::e, 1.2e-7 / std::numbers::e);
}

TEST_P(FastOpsTest, ExpMatchesReferenceAtEverySize) {
  MaxErr err(tag("exp vs ref"));
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, -20.0f, 20.0f, 1 + n);
    std::vector<float> got(n + 1, -7.0f), want(n);
    k().exp_f32(x.data(), got.data(), n);
    exp_f32_ref(x.data(), want.data(), n);
    // Tolerance 2 ulp: the reference is within 0.5 ulp, the polynomial within 1.
    ASSERT_TRUE(all_close(
        got.data(), n, [&](int64_t i) { return want[i]; },
        [&](int64_t i) { return 2 * kEps * std::abs(want[i]); },
        [&](int64_t i) { return "x=" + std::to_string(x[i]); }, &err));
    EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
    // In place.
    std::vector<float> inplace = x;
    k().exp_f32(inplace.data(), inplace.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(inplace[i], got[i]) << "n=" << n << " i=" << i;
  }
}

TEST_P(FastOpsTest, RmsNormMatchesReference) {
  MaxErr err(tag("rms_norm vs ref"));
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, -2.0f, 2.0f, 10 + n);
    const std::vector<float> w = random_vec(n, 0.5f, 1.5f, 20 + n);
    std::vector<float> got(n + 1, -7.0f), want(n);
    k().rms_norm(x.data(), w.data(), got.data(), n, 1e-5f);
    rms_norm_ref(x.data(), w.data(), want.data(), n, 1e-5f);
    // The sum of squares is accumulated in float lanes (n / (4 * width) terms each) vs
    // double in the reference; the scale's error is half the sum's. 16 ulp covers
    // n = 5632 with a wide margin (measured: see the [ measured ] line).
    ASSERT_TRUE(all_close(
        got.data(), n, [&](int64_t i) { return want[i]; },
        [&](int64_t i) { return 16 * kEps * std::abs(want[i]); },
        [&](int64_t i) { return "x=" + std::to_string(x[i]) + " w=" + std::to_string(w[i]); },
        &err));
    EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
    std::vector<float> inplace = x;  // y aliases x
    k().rms_norm(inplace.data(), w.data(), inplace.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(inplace[i], got[i]) << "n=" << n << " i=" << i;
  }
}

TEST_P(FastOpsTest, SoftmaxMatchesReference) {
  MaxErr err(tag("softmax vs ref"));
  for (int64_t n : kSizes) {
    for (bool masked : {false, true}) {
      std::vector<float> x = random_vec(n, -10.0f, 10.0f, 30 + n);
      if (masked)  // causal-mask style -inf entries, never all of them
        for (int64_t i = 1; i < n; i += 3) x[i] = -kInf;
      std::vector<float> got = x, want = x;
      got.push_back(-7.0f);
      k().softmax(got.data(), n);
      softmax_ref(want.data(), n);
      // Same x - max in both; exp within 1 ulp of std::exp, sum in float lanes vs double.
      ASSERT_TRUE(all_close(
          got.data(), n, [&](int64_t i) { return want[i]; },
          [&](int64_t i) { return 4 * kEps * std::abs(want[i]); },
          [&](int64_t i) { return "x=" + std::to_string(x[i]) + " masked=" + std::to_string(masked); },
          &err));
      EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
    }
  }
}

TEST_P(FastOpsTest, SwigluMatchesReference) {
  MaxErr err(tag("swiglu vs ref"));
  for (int64_t n : kSizes) {
    // gate spans the saturated ends of silu (exp(-g) overflowing for g < -88.7).
    std::vector<float> gate = random_vec(n, -20.0f, 20.0f, 40 + n);
    const std::vector<float> up = random_vec(n, -3.0f, 3.0f, 50 + n);
    if (n > 2) {
      gate[0] = -100.0f;
      gate[1] = 100.0f;
      gate[2] = 0.0f;
    }
    std::vector<float> got(n + 1, -7.0f), want(n);
    k().swiglu(gate.data(), up.data(), got.data(), n);
    swiglu_ref(gate.data(), up.data(), want.data(), n);
    // exp within 1 ulp enters silu damped by e / (1 + e) <= 1, plus the division and the
    // product: 4 ulp.
    ASSERT_TRUE(all_close(
        got.data(), n, [&](int64_t i) { return want[i]; },
        [&](int64_t i) { return 4 * kEps * std::abs(want[i]); },
        [&](int64_t i) { return "gate=" + std::to_string(gate[i]) + " up=" + std::to_string(up[i]); },
        &err));
    EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
    std::vector<float> alias_gate = gate, alias_up = up;
    k().swiglu(alias_gate.data(), up.data(), alias_gate.data(), n);
    k().swiglu(gate.data(), alias_up.data(), alias_up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(alias_gate[i], got[i]) << "out aliases gate, n=" << n << " i=" << i;
      ASSERT_EQ(alias_up[i], got[i]) << "out aliases up, n=" << n << " i=" << i;
    }
  }
}

// gpt-oss's clamped SwiGLU: gates and ups beyond the clamp (±7), both signs, the
// saturated sigmoid; the vector min / max clamps must give the scalar's values.
TEST_P(FastOpsTest, SwigluOaiMatchesReference) {
  MaxErr err(tag("swiglu_oai vs ref"));
  for (int64_t n : kSizes) {
    std::vector<float> gate = random_vec(n, -60.0f, 20.0f, 140 + n);
    const std::vector<float> up = random_vec(n, -12.0f, 12.0f, 150 + n);
    if (n > 2) gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 7.0f;
    std::vector<float> got(n + 1, -7.0f), want(n);
    k().swiglu_oai(gate.data(), up.data(), got.data(), n, 1.702f, 7.0f);
    swiglu_oai_ref(gate.data(), up.data(), want.data(), n, 1.702f, 7.0f);
    ASSERT_TRUE(all_close(
        got.data(), n, [&](int64_t i) { return want[i]; },
        [&](int64_t i) { return 4 * kEps * std::abs(want[i]); },
        [&](int64_t i) { return "gate=" + std::to_string(gate[i]) + " up=" + std::to_string(up[i]); },
        &err));
    EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
    std::vector<float> alias_gate = gate;
    k().swiglu_oai(alias_gate.data(), up.data(), alias_gate.data(), n, 1.702f, 7.0f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(alias_gate[i], got[i]) << "out aliases gate, n=" << n << " i=" << i;
  }
}

// Gemma's GELU (tanh form) gated and plain: gates across the saturated ends (exp
// overflowing below g ~ -10, g³ overflowing at |g| ~ 7e12), zero, and NaN.
TEST_P(FastOpsTest, GegluTanhMatchesReference) {
  MaxErr err(tag("geglu_tanh vs ref"));
  for (int64_t n : kSizes) {
    std::vector<float> gate = random_vec(n, -12.0f, 12.0f, 240 + n);
    const std::vector<float> up = random_vec(n, -3.0f, 3.0f, 250 + n);
    if (n > 4) gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = 1e13f, gate[4] = -1e13f;
    for (const bool gated : {true, false}) {
      std::vector<float> got(n + 1, -7.0f), want(n);
      const float* u = gated ? up.data() : nullptr;
      k().geglu_tanh(gate.data(), u, got.data(), n);
      geglu_tanh_ref(gate.data(), u, want.data(), n);
      // The same exp argument on every level (ops_internal.h); exp within 1 ulp, damped by
      // e / (1 + e) <= 1, then the division and the product: 4 ulp.
      ASSERT_TRUE(all_close(
          got.data(), n, [&](int64_t i) { return want[i]; },
          [&](int64_t i) { return 4 * kEps * std::abs(want[i]); },
          [&](int64_t i) { return "gate=" + std::to_string(gate[i]) + " gated=" + std::to_string(gated); }, &err));
      EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
      std::vector<float> alias = gate;
      k().geglu_tanh(alias.data(), u, alias.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(alias[i], got[i]) << "out aliases gate, n=" << n << " i=" << i;
    }
    std::vector<float> alias_up = up, got(n);
    k().geglu_tanh(gate.data(), up.data(), got.data(), n);
    k().geglu_tanh(gate.data(), alias_up.data(), alias_up.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(alias_up[i], got[i]) << "out aliases up, n=" << n << " i=" << i;
  }
  const float g[2] = {std::numeric_limits<float>::quiet_NaN(), -kInf};
  float y[2];
  k().geglu_tanh(g, nullptr, y, 2);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));  // -inf / (1 + inf): no limit is claimed, NaN is not hidden
}

// tanh_vec through softcap with cap 1 (x · 1 and 1 · tanh are exact) against double tanh:
// every float in [2^-30, 2^-2] at a stride (the series), and [0.24, 12] densely (the exp form,
// both sides of the switch at 0.25 and the saturation near 9), both signs; then
// cap 30 and 50 (Gemma's final and attention caps) against softcap_ref; zeros, infinities, NaN.
TEST_P(FastOpsTest, SoftcapMatchesTanh) {
  MaxErr err(tag("softcap (cap 1) vs double tanh"));
  std::vector<float> x;
  for (float v = std::ldexp(1.0f, -30); v < 0.25f; v = std::nextafter(v, 1.0f) + v * 1e-4f) x.push_back(v);
  for (float v = 0.24f; v < 12.0f; v += 1.3e-5f) x.push_back(v);
  const size_t half = x.size();
  for (size_t i = 0; i < half; ++i) x.push_back(-x[i]);
  std::vector<float> got = x;
  k().softcap(got.data(), static_cast<int64_t>(got.size()), 1.0f);
  ASSERT_TRUE(all_close(
      got.data(), static_cast<int64_t>(got.size()), [&](int64_t i) { return std::tanh(static_cast<double>(x[i])); },
      [&](int64_t i) { return 4 * kEps * std::abs(std::tanh(static_cast<double>(x[i]))); },
      [&](int64_t i) { return "x=" + std::to_string(x[i]); }, &err));
  MaxErr err_ref(tag("softcap vs ref"));
  for (int64_t n : kSizes)
    for (const float cap : {30.0f, 50.0f}) {
      const std::vector<float> in = random_vec(n, -300.0f, 300.0f, 260 + n);
      std::vector<float> a = in, b = in;
      a.push_back(-7.0f);
      k().softcap(a.data(), n, cap);
      softcap_ref(b.data(), n, cap);
      ASSERT_TRUE(all_close(
          a.data(), n, [&](int64_t i) { return b[i]; }, [&](int64_t i) { return 5 * kEps * std::abs(b[i]); },
          [&](int64_t i) { return "x=" + std::to_string(in[i]) + " cap=" + std::to_string(cap); }, &err_ref));
      EXPECT_EQ(a[n], -7.0f) << "wrote past the end, n=" << n;
    }
  float sp[5] = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
  k().softcap(sp, 5, 30.0f);
  EXPECT_EQ(sp[0], 0.0f);
  EXPECT_TRUE(std::signbit(sp[1]));
  EXPECT_EQ(sp[2], 30.0f);
  EXPECT_EQ(sp[3], -30.0f);
  EXPECT_TRUE(std::isnan(sp[4]));
}

TEST_P(FastOpsTest, AddInplaceAndScaleAreExact) {
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, -5.0f, 5.0f, 60 + n);
    std::vector<float> y = random_vec(n, -5.0f, 5.0f, 70 + n);
    std::vector<float> got = y, want = y;
    got.push_back(-7.0f);
    k().add_inplace(got.data(), x.data(), n);
    add_inplace_ref(want.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], want[i]) << "add n=" << n << " i=" << i << " x=" << x[i] << " y=" << y[i];
    EXPECT_EQ(got[n], -7.0f) << "add wrote past the end, n=" << n;

    got = y;
    got.push_back(-7.0f);
    want = y;
    k().scale_f32(got.data(), -0.37f, n);
    scale_f32_ref(want.data(), -0.37f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "scale n=" << n << " i=" << i << " y=" << y[i];
    EXPECT_EQ(got[n], -7.0f) << "scale wrote past the end, n=" << n;
  }
}

TEST_P(FastOpsTest, AxpyMatchesReference) {
  MaxErr err(tag("axpy vs ref"));
  const float a = 0.731f;
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, -5.0f, 5.0f, 80 + n);
    const std::vector<float> y = random_vec(n, -5.0f, 5.0f, 90 + n);
    std::vector<float> got = y, want = y;
    got.push_back(-7.0f);
    k().axpy_f32(a, x.data(), got.data(), n);
    axpy_f32_ref(a, x.data(), want.data(), n);
    // FMA skips the rounding of a*x: the two differ by at most 1 ulp of a*x plus 1 of the sum.
    ASSERT_TRUE(all_close(
        got.data(), n, [&](int64_t i) { return want[i]; },
        [&](int64_t i) { return kEps * (std::abs(y[i]) + 2 * std::abs(a * x[i])); },
        [&](int64_t i) { return "x=" + std::to_string(x[i]) + " y=" + std::to_string(y[i]); }, &err));
    EXPECT_EQ(got[n], -7.0f) << "wrote past the end, n=" << n;
  }
}

// The gated delta rule's token step (Gated DeltaNet): the SIMD path folds the decay into
// its passes, so it differs from the reference by rounding only, bounded relative to the
// terms' magnitudes; 24 steps of one head (the state carried between them), sizes with and
// without a vector tail, and the state rows written exactly within their bounds.
TEST_P(FastOpsTest, GatedDeltaStepMatchesReference) {
  MaxErr err(tag("gated_delta_step vs ref (err / scale)"));
  for (int64_t d : {int64_t{8}, int64_t{32}, int64_t{37}, int64_t{128}}) {
    std::vector<float> got(d * d + 1, 0.0f), want(d * d, 0.0f);
    got[d * d] = -7.0f;
    for (int step = 0; step < 24; ++step) {
      std::vector<float> q = random_vec(d, -1.0f, 1.0f, 200 + step), key = random_vec(d, -1.0f, 1.0f, 300 + step);
      const std::vector<float> v = random_vec(d, -2.0f, 2.0f, 400 + step);
      for (std::vector<float>* x : {&q, &key}) {  // unit q and k, as the model L2-normalises them
        double n = 0;
        for (float e : *x) n += static_cast<double>(e) * e;
        for (float& e : *x) e = static_cast<float>(e / std::sqrt(n));
      }
      const float decay = 0.5f + 0.02f * static_cast<float>(step), beta = 0.3f + 0.01f * static_cast<float>(step);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      std::vector<float> out_got(d), out_want(d);
      k().gated_delta_step(got.data(), d, d, q.data(), key.data(), v.data(), decay, beta, scale, out_got.data());
      gated_delta_step_ref(want.data(), d, d, q.data(), key.data(), v.data(), decay, beta, scale, out_want.data());
      // The state's entries are O(|v|) = O(2): errors of a few float ulps of that per step,
      // accumulated over 24 steps, stay far below 1e-4; a wrong index or a missing decay
      // is O(1).
      ASSERT_TRUE(all_close(
          got.data(), d * d, [&](int64_t i) { return want[i]; }, [&](int64_t) { return 1e-4; },
          [&](int64_t i) { return "state entry " + std::to_string(i) + " d=" + std::to_string(d); }, &err));
      ASSERT_TRUE(all_close(
          out_got.data(), d, [&](int64_t i) { return out_want[i]; }, [&](int64_t) { return 1e-4; },
          [&](int64_t i) { return "out " + std::to_string(i) + " d=" + std::to_string(d); }, &err));
    }
    EXPECT_EQ(got[d * d], -7.0f) << "wrote past the state, d=" << d;
  }
}

TEST_P(FastOpsTest, DotMatchesReference) {
  MaxErr err(tag("dot vs ref (err / sum|ab|)"));
  for (int64_t n : kSizes) {
    const std::vector<float> a = random_vec(n, -1.0f, 1.0f, 100 + n);
    const std::vector<float> b = random_vec(n, -1.0f, 1.0f, 110 + n);
    double abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) abs_sum += std::abs(static_cast<double>(a[i]) * b[i]);
    const float got = k().dot_f32(a.data(), b.data(), n);
    const float want = dot_f32_ref(a.data(), b.data(), n);
    // Relative to sum |a_i b_i| (the sum itself may cancel): float lanes of n / (4 * width)
    // terms each; 1e-6 is a few times the random-walk error at n = 5632 and far below
    // one dropped term (|a b| ~ 0.25).
    const double tol = 1e-6 * abs_sum;
    if (abs_sum > 0) err.rel = std::max(err.rel, std::abs(got - want) / abs_sum);
    if (tol > 0) err.of_tol = std::max(err.of_tol, std::abs(got - want) / tol);
    ASSERT_LE(std::abs(static_cast<double>(got) - want), tol) << "n=" << n << " got=" << got << " want=" << want;
  }
}

TEST_P(FastOpsTest, RopeMatchesReference) {
  MaxErr err(tag("rope vs ref"));
  for (int64_t head_dim : kSizes) {
    const int64_t full = head_dim & ~int64_t{1};
    const int64_t partial = (head_dim / 2) & ~int64_t{1};
    for (int64_t n_rot : {full, partial}) {
      std::vector<float> inv_freq(std::max<int64_t>(1, n_rot / 2));
      rope_inv_freq(inv_freq.data(), n_rot, 10000.0f, 1.0f, nullptr);
      for (int64_t n_heads : {1, 3}) {
        const int64_t len = n_heads * head_dim;
        const std::vector<float> x = random_vec(len, -1.0f, 1.0f, static_cast<uint32_t>(head_dim * 7 + n_rot));
        for (bool neox : {false, true}) {
          for (int64_t pos : {int64_t{0}, int64_t{7}, int64_t{100000}, int64_t{-3}}) {
            for (float attn : {1.0f, 1.25f}) {
              std::vector<float> got = x, want = x;
              got.push_back(-7.0f);
              k().rope(got.data(), n_heads, head_dim, n_rot, pos, inv_freq.data(), neox, attn);
              rope_ref(want.data(), n_heads, head_dim, n_rot, pos, inv_freq.data(), neox, attn);
              // Same cos/sin table; a fused multiply-add vs two rounded products: 2 ulp of
              // the pair's magnitude.
              ASSERT_TRUE(all_close(
                  got.data(), len, [&](int64_t i) { return want[i]; },
                  [&](int64_t i) {
                    const int64_t h = i / head_dim, e = i % head_dim;
                    if (e >= n_rot) return 0.0;  // untouched dims: exact
                    const float partner = x[h * head_dim + rope_partner(e, n_rot, neox)];
                    return 2 * kEps * attn * (std::abs(x[i]) + std::abs(partner));
                  },
                  [&](int64_t i) {
                    std::ostringstream s;
                    s << "x=" << x[i] << " head_dim=" << head_dim << " n_rot=" << n_rot
                      << " n_heads=" << n_heads << " neox=" << neox << " pos=" << pos << " attn=" << attn;
                    return s.str();
                  },
                  &err));
              EXPECT_EQ(got[len], -7.0f) << "wrote past the end";
            }
          }
        }
      }
    }
  }
}

// rope_apply with a rope_table is rope() split in two: bit-identical on every path,
// including n_rot > 2 * kRopeChunkPairs (several chunks) and partial rotation.
TEST(OpsRopeTableTest, ApplyWithTableIsBitIdenticalToRope) {
  for (Isa isa : ops_levels()) {
    const OpsKernels& k = ops_internal::ops_kernels(isa);
    for (int64_t head_dim : {2, 17, 64, 128, 300, 640}) {
      for (int64_t n_rot : {head_dim & ~int64_t{1}, (head_dim / 3) & ~int64_t{1}}) {
        std::vector<float> inv_freq(std::max<int64_t>(1, n_rot / 2));
        rope_inv_freq(inv_freq.data(), n_rot, 10000.0f, 1.0f, nullptr);
        std::vector<float> cos_t(inv_freq.size()), sin_t(inv_freq.size());
        const std::vector<float> x = random_vec(3 * head_dim, -1.0f, 1.0f, static_cast<uint32_t>(head_dim));
        for (bool neox : {false, true}) {
          rope_table(cos_t.data(), sin_t.data(), n_rot, 12345, inv_freq.data(), 1.1f);
          std::vector<float> a = x, b = x;
          k.rope(a.data(), 3, head_dim, n_rot, 12345, inv_freq.data(), neox, 1.1f);
          k.rope_apply(b.data(), 3, head_dim, n_rot, cos_t.data(), sin_t.data(), neox);
          for (size_t i = 0; i < a.size(); ++i)
            ASSERT_EQ(a[i], b[i]) << isa_name(isa) << " head_dim=" << head_dim << " n_rot=" << n_rot
                                  << " neox=" << neox << " i=" << i;
        }
      }
    }
  }
}

TEST(OpsDispatchTest, PublicFunctionsRunTheBestIsa) {
  std::printf("[ cpu ] %s\n", cpu_features_string().c_str());
  const OpsKernels& best = ops_internal::ops_kernels(best_isa());
  EXPECT_EQ(best.isa, best_isa());
  const int64_t n = 257;
  const std::vector<float> x = random_vec(n, -3.0f, 3.0f, 1);
  const std::vector<float> w = random_vec(n, -3.0f, 3.0f, 2);
  std::vector<float> a(n), b(n);
  rms_norm(x.data(), w.data(), a.data(), n, 1e-6f);
  best.rms_norm(x.data(), w.data(), b.data(), n, 1e-6f);
  EXPECT_EQ(a, b);
  swiglu(x.data(), w.data(), a.data(), n);
  best.swiglu(x.data(), w.data(), b.data(), n);
  EXPECT_EQ(a, b);
  EXPECT_EQ(dot_f32(x.data(), w.data(), n), best.dot_f32(x.data(), w.data(), n));
  a = x;
  b = x;
  softmax(a.data(), n);
  best.softmax(b.data(), n);
  EXPECT_EQ(a, b);
}

TEST(OpsDispatchTest, ScalarTableIsTheReference) {
  const OpsKernels& s = ops_internal::ops_kernels(Isa::Scalar);
  EXPECT_EQ(s.isa, Isa::Scalar);
  EXPECT_EQ(s.rms_norm, &rms_norm_ref);
  EXPECT_EQ(s.softmax, &softmax_ref);
  EXPECT_EQ(s.swiglu, &swiglu_ref);
  EXPECT_EQ(s.rope, &rope_ref);
  EXPECT_EQ(s.rope_apply, &rope_apply_ref);
  EXPECT_EQ(s.exp_f32, &exp_f32_ref);
}

}  // namespace
}  // namespace pagoda
