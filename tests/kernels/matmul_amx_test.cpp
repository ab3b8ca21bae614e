// The AMX-INT8 prefill kernels (matmul_amx.cpp) against the AVX-512 kernels they stand
// in for: bit-identical outputs for Q8_0 and Q4_0 over token counts that fill tiles
// exactly, leave a remainder for the AVX-512 kernel, or are below one tile (decode);
// row counts that end in a partly filled group; rows with zero scales; one and two
// threads; and through matmul_multi / matmul_grouped. Also against the independent
// double-precision reference (matmul_reference) within the quantization error. The AMX
// run is a matrix prepared for Isa::Amx (the Amx kernel table), the AVX-512 one the same
// bytes prepared for Isa::Avx512. Skipped where the CPU has no AMX-INT8 or Linux refuses
// the tile state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "matmul_fixtures.h"
#include "tensor/types.h"

namespace pagoda {
namespace {

std::vector<float> run(const WeightMatrix& m, const std::vector<float>& x, int64_t n_tokens, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(n_tokens * m.n_rows()), -1.0f);
  matmul(m, x.data(), n_tokens, y.data(), pool);
  return y;
}

class MatmulAmx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::Amx)) GTEST_SKIP() << "no AMX-INT8 here (" << cpu_features_string() << ")";
  }
};

TEST_F(MatmulAmx, BitIdenticalToAvx512ForQ8_0AndQ4_0) {
  std::mt19937 rng(42);
  ThreadPool one(1), two(2);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0})
    for (auto [n_rows, n_cols] : {std::pair<int64_t, int64_t>{16, 32}, {48, 64}, {100, 256}, {64, 2048}})
      for (int64_t n_tokens : {1, 15, 16, 17, 33, 64, 100, 130}) {
        const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
        const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), Isa::Avx512);
        const WeightMatrix m_amx = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), Isa::Amx);
        std::vector<float> x = random_floats(n_tokens * n_cols, rng, 1.0f);
        for (int64_t k = 0; k < 32; ++k) x[static_cast<size_t>(k)] = 0.0f;  // a zero block (scale 0)
        x[static_cast<size_t>(n_tokens * n_cols / 2)] = 40.0f;               // an outlier
        ThreadPool& pool = n_tokens % 2 ? one : two;
        const std::vector<float> ref = run(m, x, n_tokens, pool);
        const std::vector<float> got = run(m_amx, x, n_tokens, pool);
        ASSERT_EQ(got, ref) << type_name(type) << " " << n_rows << "x" << n_cols << ", " << n_tokens << " tokens";
        // And close to the double-precision reference: the activations are quantized to
        // 8 bits per 32 values, so each output is within ~1/127 of sum |w| |x|.
        std::vector<float> exact(static_cast<size_t>(n_tokens * n_rows));
        matmul_reference(type, n_rows, n_cols, w.data(), x.data(), n_tokens, exact.data());
        std::vector<float> wrow(static_cast<size_t>(n_cols));
        for (int64_t r = 0; r < n_rows; ++r) {
          dequantize_row(type, w.data() + r * row_bytes(type, n_cols), wrow.data(), n_cols);
          for (int64_t t = 0; t < n_tokens; ++t) {
            // Rounding an activation moves it by at most half its block's step amax / 127.
            double bound = 1e-5;
            for (int64_t b0 = 0; b0 < n_cols; b0 += 32) {
              double amax = 0.0, wsum = 0.0;
              for (int64_t k = b0; k < b0 + 32; ++k) {
                amax = std::max(amax, static_cast<double>(std::fabs(x[static_cast<size_t>(t * n_cols + k)])));
                wsum += std::fabs(wrow[static_cast<size_t>(k)]);
              }
              bound += 1.01 * amax / 254.0 * wsum;
            }
            const size_t i = static_cast<size_t>(t * n_rows + r);
            ASSERT_NEAR(got[i], exact[i], bound) << type_name(type) << " row " << r << " token " << t;
          }
        }
      }
}

TEST_F(MatmulAmx, MultiAndGroupedMatchTheirAvx512Results) {
  std::mt19937 rng(7);
  ThreadPool two(2);
  const int64_t n_cols = 512, n_tokens = 80;
  const std::vector<uint8_t> wa = make_weights(GgmlType::Q4_0, 64, n_cols, rng), wb = make_weights(GgmlType::Q4_0, 32, n_cols, rng),
                             wc = make_weights(GgmlType::Q8_0, 48, n_cols, rng);
  const std::vector<float> x = random_floats(n_tokens * n_cols, rng, 1.0f);
  auto multi = [&](Isa isa) {
    const WeightMatrix a = WeightMatrix::prepare(GgmlType::Q4_0, 64, n_cols, wa.data(), isa);
    const WeightMatrix b = WeightMatrix::prepare(GgmlType::Q4_0, 32, n_cols, wb.data(), isa);
    std::vector<float> ya(static_cast<size_t>(n_tokens * 64)), yb(static_cast<size_t>(n_tokens * 32));
    const MatmulTarget t[] = {{&a, ya.data()}, {&b, yb.data()}};
    matmul_multi(t, x.data(), n_tokens, two);
    const WeightMatrix c = WeightMatrix::prepare(GgmlType::Q8_0, 48, n_cols, wc.data(), isa);
    // Jobs starting on a 16-token group (0, 16: the tile layout quantize_acts laid out
    // for all of x, offset) and inside one (40: the kernel lays out its own groups).
    std::vector<float> ga(static_cast<size_t>(40 * 64)), gb(static_cast<size_t>(40 * 32)), gc(static_cast<size_t>(48 * 48));
    const GroupedMatmul gj[] = {{&a, 0, 40, ga.data()}, {&b, 40, 40, gb.data()}, {&c, 16, 48, gc.data()}};
    matmul_grouped(gj, x.data(), n_tokens, two);
    ya.insert(ya.end(), yb.begin(), yb.end());
    ya.insert(ya.end(), ga.begin(), ga.end());
    ya.insert(ya.end(), gb.begin(), gb.end());
    ya.insert(ya.end(), gc.begin(), gc.end());
    return ya;
  };
  EXPECT_EQ(multi(Isa::Amx), multi(Isa::Avx512));
}

}  // namespace
}  // namespace pagoda
