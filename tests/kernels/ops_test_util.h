// Shared by the row-op tests (ops_test.cpp: every SIMD level against the scalar reference;
// ops_reference_test.cpp: the references against independent computations): the sizes
// swept, the levels with row ops of their own, random inputs, and the tolerance check that names the first failing index and
// prints the largest error seen as "[ measured ]".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

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

// The index of the other element of the pair that element e of a head belongs to (e < n_rot).
int64_t rope_partner(int64_t e, int64_t n_rot, bool neox) {
  if (neox) return e < n_rot / 2 ? e + n_rot / 2 : e - n_rot / 2;
  return e ^ 1;
}

// The levels with row ops of their own (AMX runs AVX-512's).
std::vector<Isa> ops_levels() {
  return test::levels_with_own([](const KernelTable& t) {
    const OpsKernels& k = t.ops;
    return std::tuple(k.rms_norm, k.softmax, k.swiglu, k.swiglu_oai, k.geglu_tanh, k.softcap, k.add_inplace, k.rope,
                      k.rope_apply, k.dot_f32, k.axpy_f32, k.scale_f32, k.exp_f32, k.gated_delta_step);
  });
}

}  // namespace
}  // namespace pagoda
