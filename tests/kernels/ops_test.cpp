// Row kernels: every SIMD path the CPU supports against the scalar reference, swept over
// sizes that hit empty rows, single elements, odd lengths and every tail of the vector
// widths; and the references themselves against independent double-precision formulas
// and hand-computed values. Each comparison states its tolerance; the first failing
// index is printed with its inputs, and the largest error seen is printed as
// "[ measured ]" for the record.

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

namespace pagoda {
namespace {

using ops_internal::OpsKernels;

constexpr int64_t kSizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 255, 257, 2048, 5632};
constexpr double kEps = FLT_EPSILON;  // 2^-23 = 1.19e-7: one ulp relative, at worst
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_vec(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The largest error a test saw, printed when it goes out of scope.
struct MaxErr {
  std::string what;
  double rel = 0;       // max |got - want| / |want| over want != 0
  double of_tol = 0;    // max |got - want| / tol over tol > 0
  explicit MaxErr(std::string w) : what(std::move(w)) {}
  void add(double got, double want, double tol) {
    const double d = std::abs(got - want);
    if (want != 0 && std::isfinite(want)) rel = std::max(rel, d / std::abs(want));
    if (tol > 0) of_tol = std::max(of_tol, d / tol);
  }
  ~MaxErr() {
    std::printf("[ measured ] %s: max rel err %.3g, max err/tol %.3g\n", what.c_str(), rel, of_tol);
  }
};

// Compares got[i] with want(i) within tol(i) for i < n; on failure names the first bad
// index with describe(i) (the inputs). NaN never passes.
template <class Want, class Tol, class Describe>
::testing::AssertionResult all_close(const float* got, int64_t n, Want want, Tol tol,
                                     Describe describe, MaxErr* err) {
  for (int64_t i = 0; i < n; ++i) {
    const double w = want(i);
    const double t = tol(i);
    const double g = got[i];
    if (err) err->add(g, w, t);
    const bool same_inf = std::isinf(w) && g == w;
    if (!(std::abs(g - w) <= t) && !same_inf) {
      return ::testing::AssertionFailure()
             << "n=" << n << " i=" << i << " got=" << g << " want=" << w << " tol=" << t
             << " diff=" << std::abs(g - w) << " " << describe(i);
    }
  }
  return ::testing::AssertionSuccess();
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

// ---- every SIMD path against the scalar reference ----------------------------------------

// The levels with row ops of their own (AMX runs AVX-512's).
std::vector<Isa> ops_levels() {
  return test::levels_with_own([](const KernelTable& t) {
    const OpsKernels& k = t.ops;
    return std::tuple(k.rms_norm, k.softmax, k.swiglu, k.swiglu_oai, k.geglu_tanh, k.softcap, k.add_inplace, k.rope, k.rope_apply, k.dot_f32, k.axpy_f32,
                      k.scale_f32, k.exp_f32, k.gated_delta_step);
  });
}

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

// The index of the other element of the pair that element e of a head belongs to (e < n_rot).
int64_t rope_partner(int64_t e, int64_t n_rot, bool neox) {
  if (neox) return e < n_rot / 2 ? e + n_rot / 2 : e - n_rot / 2;
  return e ^ 1;
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

// ---- the references against independent computations -------------------------------------

TEST(OpsReferenceTest, RmsNormMatchesHandComputation) {
  // x = (1, 2, 3, 4): mean(x^2) = 30/4 = 7.5, so y = x / sqrt(7.5) * w.
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 1, 2, -1};
  float y[4];
  rms_norm_ref(x, w, y, 4, 0.0f);
  const double inv_rms = 0.36514837167011072;  // 1 / sqrt(7.5)
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv_rms * w[i], 2 * kEps * std::abs(x[i] * inv_rms * w[i])) << i;
}

TEST(OpsReferenceTest, RmsNormMatchesDoubleFormula) {
  MaxErr err("rms_norm_ref vs double");
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, -4.0f, 4.0f, 200 + n);
    const std::vector<float> w = random_vec(n, -2.0f, 2.0f, 210 + n);
    std::vector<float> y(n);
    const float eps = 1e-6f;
    rms_norm_ref(x.data(), w.data(), y.data(), n, eps);
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv_rms = 1.0 / std::sqrt(ss / std::max<int64_t>(n, 1) + eps);
    // Three float roundings (scale, x * scale, * w): 3 ulp.
    ASSERT_TRUE(all_close(
        y.data(), n, [&](int64_t i) { return x[i] * inv_rms * w[i]; },
        [&](int64_t i) { return 3 * kEps * std::abs(x[i] * inv_rms * w[i]); },
        [&](int64_t i) { return "x=" + std::to_string(x[i]) + " w=" + std::to_string(w[i]); }, &err));
  }
}

TEST(OpsReferenceTest, SoftmaxMatchesHandComputation) {
  // exp(0) : exp(ln 3) = 1 : 3, and a masked -inf gets exactly 0.
  float x[3] = {0.0f, static_cast<float>(std::log(3.0)), -kInf};
  softmax_ref(x, 3);
  EXPECT_NEAR(x[0], 0.25, 2 * kEps);
  EXPECT_NEAR(x[1], 0.75, 2 * kEps);
  EXPECT_EQ(x[2], 0.0f);
  float one = -123.0f;
  softmax_ref(&one, 1);
  EXPECT_EQ(one, 1.0f);
}

TEST(OpsReferenceTest, SoftmaxSumsToOneAndMatchesDouble) {
  MaxErr err("softmax_ref vs double");
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    const std::vector<float> x = random_vec(n, -10.0f, 10.0f, 300 + n);
    std::vector<float> y = x;
    softmax_ref(y.data(), n);
    double mx = x[0];
    for (float v : x) mx = std::max<double>(mx, v);
    double sum = 0;
    for (float v : x) sum += std::exp(v - mx);
    double total = 0;
    for (float v : y) total += v;
    // Each output is rounded once relative to itself, so the sum is 1 within ~1 ulp.
    EXPECT_NEAR(total, 1.0, 2 * kEps) << "n=" << n;
    // x - max rounds in float (error up to 0.5 ulp of |x - max|, which exp turns into a
    // relative error of that size), plus the exp, the sum and the scaling.
    ASSERT_TRUE(all_close(
        y.data(), n, [&](int64_t i) { return std::exp(x[i] - mx) / sum; },
        [&](int64_t i) { return (4 + std::abs(x[i] - mx)) * kEps * std::exp(x[i] - mx) / sum; },
        [&](int64_t i) { return "x=" + std::to_string(x[i]); }, &err));
  }
}

// A gated activation's reference act(g) * u against want(g, u) in double over every size, g in
// [-g_max, g_max] and u in [-u_max, u_max], within tol(g, want).
template <class Ref, class Want, class Tol>
void expect_gated_ref(const char* what, float g_max, float u_max, uint32_t seed, Ref ref, Want want_of, Tol tol_of) {
  MaxErr err(what);
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_vec(n, -g_max, g_max, seed + n);
    const std::vector<float> u = random_vec(n, -u_max, u_max, seed + 10 + n);
    std::vector<float> y(n);
    ref(g.data(), u.data(), y.data(), n);
    auto want = [&](int64_t i) { return want_of(static_cast<double>(g[i]), static_cast<double>(u[i])); };
    ASSERT_TRUE(all_close(
        y.data(), n, want, [&](int64_t i) { return tol_of(static_cast<double>(g[i]), want(i)); },
        [&](int64_t i) { return "gate=" + std::to_string(g[i]) + " up=" + std::to_string(u[i]); }, &err));
  }
}

TEST(OpsReferenceTest, SwigluOaiMatchesDoubleFormula) {
  expect_gated_ref(
      "swiglu_oai_ref vs double", 30.0f, 10.0f, 420,
      [](const float* g, const float* u, float* y, int64_t n) { swiglu_oai_ref(g, u, y, n, 1.702f, 7.0f); },
      [](double g, double u) {
        const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
        return gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
      },
      // exp(-alpha g) carries alpha |g| ulp from rounding its argument (g = -20: 34 ulp).
      [](double g, double want) { return (8 + 1.702 * std::abs(std::min(g, 7.0))) * kEps * std::abs(want); });
  // The clamps: a gate of 100 counts as 7, an up of -100 as -7 (so the factor is -6).
  const float g[2] = {100.0f, 1.0f}, u[2] = {0.0f, -100.0f};
  float y[2];
  swiglu_oai_ref(g, u, y, 2, 1.702f, 7.0f);
  EXPECT_NEAR(y[0], 7.0 / (1.0 + std::exp(-1.702 * 7.0)), 1e-5);
  EXPECT_NEAR(y[1], -6.0 / (1.0 + std::exp(-1.702)), 1e-5);
}

TEST(OpsReferenceTest, SwigluMatchesDoubleFormula) {
  expect_gated_ref(
      "swiglu_ref vs double", 30.0f, 3.0f, 400, swiglu_ref, [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; },
      [](double, double want) { return 4 * kEps * std::abs(want); });
  // silu(0) = 0, silu(g) -> g for large g, -> -0 for very negative g.
  const float g[3] = {0.0f, 100.0f, -200.0f};
  const float u[3] = {5.0f, 2.0f, 1.0f};
  float y[3];
  swiglu_ref(g, u, y, 3);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 200.0f);
  EXPECT_EQ(y[2], 0.0f);
}

// The reference against ggml_gelu's own form, x/2 (1 + tanh(s)), s = sqrt(2/pi) (x + 0.044715 x³),
// in double; where s < -1, 1 + tanh(s) cancels even in double (s = -17.7: ~2 bits left), so
// there the identity 1 + tanh(s) = 2 / (1 + e^-2s), in double. The float exp argument
// carries ~2 ulp, which e^-2s turns into |2s| x 2 ulp of the result where it is small (g << 0);
// plus the exp, division and product.
TEST(OpsReferenceTest, GegluTanhMatchesDoubleFormula) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  auto inner = [c](double x) { return c * (x + 0.044715 * x * x * x); };
  expect_gated_ref(
      "geglu_tanh_ref vs double", 12.0f, 3.0f, 440,
      [](const float* g, const float* u, float* y, int64_t n) { geglu_tanh_ref(g, u, y, n); },
      [&](double g, double u) {
        const double s = inner(g);
        return (s < -1.0 ? g / (1.0 + std::exp(-2.0 * s)) : 0.5 * g * (1.0 + std::tanh(s))) * u;
      },
      [&](double g, double want) { return (6 + 4 * std::abs(inner(g))) * kEps * std::abs(want) + 1e-37; });
  // gelu(0) = 0, gelu(x) -> x for large x, -> -0 for very negative x; gelu(1) = 0.841192.
  const float g[4] = {0.0f, 100.0f, -200.0f, 1.0f};
  float y[4];
  geglu_tanh_ref(g, nullptr, y, 4);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 100.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::signbit(y[2]));
  EXPECT_NEAR(y[3], 0.8411920, 1e-6);
}

TEST(OpsReferenceTest, DotMatchesExactSmallIntegers) {
  const float a[5] = {1, 2, 3, 4, 5};
  const float b[5] = {-1, 0.5f, 2, 0, 3};
  EXPECT_EQ(dot_f32_ref(a, b, 5), -1 + 1 + 6 + 0 + 15);
  EXPECT_EQ(dot_f32_ref(a, b, 0), 0.0f);
}

// rope_ref, checked against rotation of complex numbers in double: pair i is the complex
// number a + ib (a, b adjacent, or i and i + n_rot/2 for NeoX) and becomes
// (a + ib) * attn * exp(i * pos * inv_freq[i]).
TEST(OpsReferenceTest, RopeIsComplexRotationForBothOrderings) {
  MaxErr err("rope_ref vs complex double");
  const int64_t n_heads = 3;
  for (int64_t head_dim : {2, 8, 64, 80, 128, 258, 512}) {
    for (int64_t n_rot : {head_dim, (head_dim / 2) & ~int64_t{1}}) {
      std::vector<float> inv_freq(std::max<int64_t>(1, n_rot / 2));
      rope_inv_freq(inv_freq.data(), n_rot, 500000.0f, 1.0f, nullptr);
      const std::vector<float> x = random_vec(n_heads * head_dim, -2.0f, 2.0f, static_cast<uint32_t>(head_dim + n_rot));
      for (bool neox : {false, true}) {
        for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{131071}, int64_t{-9}}) {
          const float attn = 1.1386294f;
          std::vector<float> y = x;
          rope_ref(y.data(), n_heads, head_dim, n_rot, pos, inv_freq.data(), neox, attn);
          std::vector<double> want(x.begin(), x.end());
          for (int64_t h = 0; h < n_heads; ++h) {
            for (int64_t i = 0; i < n_rot / 2; ++i) {
              const int64_t ia = h * head_dim + (neox ? i : 2 * i);
              const int64_t ib = h * head_dim + (neox ? i + n_rot / 2 : 2 * i + 1);
              const std::complex<double> z(x[ia], x[ib]);
              const std::complex<double> r =
                  z * static_cast<double>(attn) *
                  std::polar(1.0, static_cast<double>(pos) * static_cast<double>(inv_freq[i]));
              want[ia] = r.real();
              want[ib] = r.imag();
            }
          }
          ASSERT_TRUE(all_close(
              y.data(), n_heads * head_dim, [&](int64_t i) { return want[i]; },
              [&](int64_t i) {
                const int64_t h = i / head_dim, e = i % head_dim;
                if (e >= n_rot) return 0.0;  // the unrotated tail is copied exactly
                const float partner = x[h * head_dim + rope_partner(e, n_rot, neox)];
                // cos/sin rounded once each, two products and a sum: 4 ulp of the pair.
                return 4 * kEps * attn * (std::abs(x[i]) + std::abs(partner));
              },
              [&](int64_t i) {
                std::ostringstream s;
                s << "x=" << x[i] << " head_dim=" << head_dim << " n_rot=" << n_rot << " neox=" << neox
                  << " pos=" << pos;
                return s.str();
              },
              &err));
        }
      }
    }
  }
}

// NeoX ordering is the adjacent-pair ordering applied to a permuted head: element i and
// i + n_rot/2 of a NeoX head are elements 2i and 2i+1 of the interleaved one.
TEST(OpsReferenceTest, RopeNeoxIsAdjacentPairsUnderPermutation) {
  const int64_t n_heads = 2, head_dim = 96, n_rot = 64, half = n_rot / 2;
  std::vector<float> inv_freq(half);
  rope_inv_freq(inv_freq.data(), n_rot, 10000.0f, 1.0f, nullptr);
  const std::vector<float> x = random_vec(n_heads * head_dim, -1.0f, 1.0f, 5);
  auto to_interleaved = [&](const std::vector<float>& v) {
    std::vector<float> out = v;
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        out[h * head_dim + 2 * i] = v[h * head_dim + i];
        out[h * head_dim + 2 * i + 1] = v[h * head_dim + half + i];
      }
    return out;
  };
  for (Isa isa : ops_levels()) {
    const OpsKernels& k = ops_internal::ops_kernels(isa);
    std::vector<float> neox = x;
    k.rope(neox.data(), n_heads, head_dim, n_rot, 321, inv_freq.data(), true, 1.0f);
    std::vector<float> adj = to_interleaved(x);
    k.rope(adj.data(), n_heads, head_dim, n_rot, 321, inv_freq.data(), false, 1.0f);
    const std::vector<float> neox_interleaved = to_interleaved(neox);
    // The reference computes both orderings with the same products: bit-identical. The
    // SIMD paths fuse different products: 2 ulp of the pair.
    const double tol = isa == Isa::Scalar ? 0.0 : 4 * kEps;
    for (int64_t i = 0; i < n_heads * head_dim; ++i)
      ASSERT_NEAR(neox_interleaved[i], adj[i], tol) << isa_name(isa) << " i=" << i;
    // And the two orderings really differ on the same input.
    std::vector<float> adj_same = x;
    k.rope(adj_same.data(), n_heads, head_dim, n_rot, 321, inv_freq.data(), false, 1.0f);
    EXPECT_NE(adj_same, neox) << isa_name(isa);
  }
}

TEST(OpsReferenceTest, RopeByPosThenMinusPosRestoresInput) {
  const int64_t n_heads = 4, head_dim = 128;
  std::vector<float> inv_freq(head_dim / 2);
  rope_inv_freq(inv_freq.data(), head_dim, 10000.0f, 1.0f, nullptr);
  const std::vector<float> x = random_vec(n_heads * head_dim, -1.0f, 1.0f, 6);
  for (bool neox : {false, true}) {
    for (int64_t pos : {int64_t{1}, int64_t{77}, int64_t{32767}}) {
      std::vector<float> y = x;
      rope(y.data(), n_heads, head_dim, head_dim, pos, inv_freq.data(), neox);
      EXPECT_NE(y, x);
      rope(y.data(), n_heads, head_dim, head_dim, -pos, inv_freq.data(), neox);
      for (int64_t i = 0; i < n_heads * head_dim; ++i)
        ASSERT_NEAR(y[i], x[i], 8 * kEps) << "neox=" << neox << " pos=" << pos << " i=" << i;
    }
  }
}

TEST(OpsReferenceTest, RopeRejectsOddOrOversizedNRot) {
  std::vector<float> x(16), inv_freq(8);
  EXPECT_DEATH(rope_ref(x.data(), 1, 16, 7, 0, inv_freq.data(), false), "n_rot");
  EXPECT_DEATH(rope(x.data(), 1, 8, 10, 0, inv_freq.data(), false), "n_rot");
}

}  // namespace
}  // namespace pagoda
