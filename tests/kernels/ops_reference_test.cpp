// The row ops' scalar references (ops.h's *_ref) against independent computations:
// double-precision formulas and hand-computed values, each with its stated tolerance. The
// SIMD levels are checked against these references in ops_test.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "ops_test_util.h"

namespace pagoda {
namespace {

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
