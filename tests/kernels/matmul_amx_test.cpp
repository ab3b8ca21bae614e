// The AMX-INT8 prefill kernels (matmul_amx.cpp) against the AVX-512 kernels they stand
// in for: bit-identical outputs for Q8_0, Q4_0, Q4_K and Q6_K over token counts that fill tiles
// exactly, leave a remainder for the AVX-512 kernel, or are below one tile (decode);
// row counts that end in a partly filled group; rows with zero scales; one and two
// threads; and through matmul_multi / matmul_grouped. Also against the independent
// double-precision reference (matmul_reference) within the quantization error. The AMX
// run is a matrix prepared for Isa::Amx (the Amx kernel table), the AVX-512 one the same
// bytes prepared for Isa::Avx512. Skipped where the CPU has no AMX-INT8 or Linux refuses
// the tile state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// got against the double-precision reference: activations quantized to 8 bits per
// act_block values move each input by at most half its block's step, amax / 254, so each
// output is within that times sum |w| over the block (plus 1e-5, plus rel x |exact|).
void expect_near_reference(GgmlType type, const std::vector<uint8_t>& w, const std::vector<float>& x,
                           const std::vector<float>& got, int64_t n_rows, int64_t n_cols, int64_t n_tokens,
                           int64_t act_block, double rel) {
  std::vector<float> exact(static_cast<size_t>(n_tokens * n_rows));
  matmul_reference(type, n_rows, n_cols, w.data(), x.data(), n_tokens, exact.data());
  std::vector<float> wrow(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(type, w.data() + r * row_bytes(type, n_cols), wrow.data(), n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const size_t i = static_cast<size_t>(t * n_rows + r);
      double bound = 1e-5 + rel * std::fabs(exact[i]);
      for (int64_t b0 = 0; b0 < n_cols; b0 += act_block) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t k = b0; k < b0 + act_block; ++k) {
          amax = std::max(amax, static_cast<double>(std::fabs(x[static_cast<size_t>(t * n_cols + k)])));
          wsum += std::fabs(wrow[static_cast<size_t>(k)]);
        }
        bound += 1.01 * amax / 254.0 * wsum;
      }
      ASSERT_NEAR(got[i], exact[i], bound) << type_name(type) << " row " << r << " token " << t;
    }
  }
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
        // And close to the double-precision reference (activation blocks of 32).
        ASSERT_NO_FATAL_FAILURE(expect_near_reference(type, w, x, got, n_rows, n_cols, n_tokens, 32, 0.0));
      }
}

// Q4_K: random rows, rows of zeros, and super-blocks built at the top of the range (every
// scale 63, codes 12..15, activations 0.8..1: per-row sums past 2^24, where a float sum
// of all eight sub-blocks' products would round where the integer sum does not).
std::vector<uint8_t> q4k_weights(int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  std::vector<uint8_t> w = make_weights(GgmlType::Q4_K, n_rows, n_cols, rng);
  const size_t rb = row_bytes(GgmlType::Q4_K, n_cols), bb = sizeof(BlockQ4_K);
  std::uniform_int_distribution<int> nib(12, 15), byte(0, 255);
  for (int64_t r = 0; r < n_rows; r += 3)
    for (size_t b = 0; b < rb / bb; ++b) {
      uint8_t* blk = w.data() + static_cast<size_t>(r) * rb + b * bb;
      const f16_t d = f32_to_f16(0.01f), dmin = f32_to_f16(0.002f);
      std::memcpy(blk + offsetof(BlockQ4_K, d), &d, 2);
      std::memcpy(blk + offsetof(BlockQ4_K, dmin), &dmin, 2);
      // Scales: 0xFF in bytes 0-3 and low nibbles 0xF in 8-11 make every 6-bit scale
      // 63; the mins (bytes 4-7, high nibbles of 8-11) random.
      uint8_t* sc = blk + offsetof(BlockQ4_K, scales);
      for (int j = 0; j < 4; ++j) {
        sc[j] = 0xFF;
        sc[j + 4] = static_cast<uint8_t>(byte(rng));
        sc[j + 8] = static_cast<uint8_t>(0x0F | (byte(rng) & 0xF0));
      }
      uint8_t* qs = blk + offsetof(BlockQ4_K, qs);
      for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>(nib(rng) | nib(rng) << 4);
    }
  return w;
}

// Q6_K: random rows, and every third row's super-blocks at the ends of the range: scales
// of magnitude 100..128 with random signs, codes all 0 or all 63 per 16 columns.
std::vector<uint8_t> q6k_weights(int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  std::vector<uint8_t> w = make_weights(GgmlType::Q6_K, n_rows, n_cols, rng);
  const size_t rb = row_bytes(GgmlType::Q6_K, n_cols), bb = sizeof(BlockQ6_K);
  std::uniform_int_distribution<int> mag(100, 128), coin(0, 1);
  for (int64_t r = 0; r < n_rows; r += 3)
    for (size_t b = 0; b < rb / bb; ++b) {
      BlockQ6_K blk;
      std::memcpy(&blk, w.data() + static_cast<size_t>(r) * rb + b * bb, bb);
      blk.d = f32_to_f16(0.001f);
      for (int i = 0; i < 16; ++i) blk.scales[i] = static_cast<int8_t>(coin(rng) ? -mag(rng) : std::min(127, mag(rng)));
      const uint8_t fill = coin(rng) ? 0xFF : 0x00;  // one super-block's codes: all 63 or all 0
      std::memset(blk.ql, fill, sizeof blk.ql);
      std::memset(blk.qh, fill, sizeof blk.qh);
      std::memcpy(w.data() + static_cast<size_t>(r) * rb + b * bb, &blk, bb);
    }
  return w;
}

TEST_F(MatmulAmx, BitIdenticalToAvx512ForQ4_KAndQ6_K) {
  std::mt19937 rng(11);
  ThreadPool one(1), two(2);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K})
    for (auto [n_rows, n_cols] : {std::pair<int64_t, int64_t>{16, 256}, {48, 512}, {100, 768}, {64, 2048}})
      for (int64_t n_tokens : {1, 15, 16, 17, 33, 64, 100, 130}) {
        const std::vector<uint8_t> w =
            type == GgmlType::Q4_K ? q4k_weights(n_rows, n_cols, rng) : q6k_weights(n_rows, n_cols, rng);
        const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), Isa::Avx512);
        const WeightMatrix m_amx = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), Isa::Amx);
        std::vector<float> x = random_floats(n_tokens * n_cols, rng, 1.0f);
        std::uniform_real_distribution<float> high(0.8f, 1.0f);
        for (int64_t t = 0; t < n_tokens; t += 2)  // every other token at the top of the range
          for (int64_t k = 0; k < n_cols; ++k) x[static_cast<size_t>(t * n_cols + k)] = high(rng);
        for (int64_t k = 0; k < 256; ++k) x[static_cast<size_t>(n_cols * (n_tokens - 1) + k)] = 0.0f;  // scale 0
        ThreadPool& pool = n_tokens % 2 ? one : two;
        const std::vector<float> ref = run(m, x, n_tokens, pool);
        const std::vector<float> got = run(m_amx, x, n_tokens, pool);
        ASSERT_EQ(got, ref) << type_name(type) << " " << n_rows << "x" << n_cols << ", " << n_tokens << " tokens";
        // And close to the double-precision reference (activation blocks of 256; sums past
        // 2^24 also get f32's relative rounding).
        ASSERT_NO_FATAL_FAILURE(expect_near_reference(type, w, x, got, n_rows, n_cols, n_tokens, 256, 1e-6));
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

// Q4_K and Q6_K through matmul_grouped: jobs on a 16-token group (the Super256 tile layout
// quantize_acts laid out, offset) and inside one (the kernel's own), and matmul_multi.
TEST_F(MatmulAmx, KQuantMultiAndGroupedMatchTheirAvx512Results) {
  std::mt19937 rng(9);
  ThreadPool two(2);
  const int64_t n_cols = 512, n_tokens = 80;
  const std::vector<uint8_t> wa = q4k_weights(64, n_cols, rng), wb = q4k_weights(32, n_cols, rng),
                             wc = q6k_weights(48, n_cols, rng);
  const std::vector<float> x = random_floats(n_tokens * n_cols, rng, 1.0f);
  auto multi = [&](Isa isa) {
    const WeightMatrix a = WeightMatrix::prepare(GgmlType::Q4_K, 64, n_cols, wa.data(), isa);
    const WeightMatrix b = WeightMatrix::prepare(GgmlType::Q4_K, 32, n_cols, wb.data(), isa);
    std::vector<float> ya(static_cast<size_t>(n_tokens * 64)), yb(static_cast<size_t>(n_tokens * 32));
    const MatmulTarget t[] = {{&a, ya.data()}, {&b, yb.data()}};
    matmul_multi(t, x.data(), n_tokens, two);
    const WeightMatrix c = WeightMatrix::prepare(GgmlType::Q6_K, 48, n_cols, wc.data(), isa);
    std::vector<float> ga(static_cast<size_t>(40 * 64)), gb(static_cast<size_t>(40 * 32)), gc(static_cast<size_t>(48 * 64)),
        gd(static_cast<size_t>(40 * 48)), ge(static_cast<size_t>(48 * 48));
    const GroupedMatmul gj[] = {{&a, 0, 40, ga.data()}, {&b, 40, 40, gb.data()}, {&a, 16, 48, gc.data()},
                                {&c, 40, 40, gd.data()}, {&c, 0, 48, ge.data()}};
    matmul_grouped(gj, x.data(), n_tokens, two);
    for (const auto* v : {&yb, &ga, &gb, &gc, &gd, &ge}) ya.insert(ya.end(), v->begin(), v->end());
    return ya;
  };
  EXPECT_EQ(multi(Isa::Amx), multi(Isa::Avx512));
}

}  // namespace
}  // namespace pagoda
