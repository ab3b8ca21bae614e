// matmul: every weight type x every ISA this CPU runs, against matmul_reference
// (dequantize_row + double dot), over odd shapes, token counts and pool sizes;
// bit-identical results for 1 and 2 threads and for a token alone vs in a
// batch; SIMD activation quantizers bit-identical to the scalar one.
//
// Tolerances (per output y[t][r], with S = sum_k |w_k| |x_k|):
// - quantized weights: activations become d * q with |x - d q| <= d / 2 =
//   amax_block / 254 (amax over the 32 or 256 values sharing the scale), so
//   |error| <= sum_k |w_k| amax_block(k) / 254, times 1.01 for the rounding of
//   1/d, plus 1e-5 S for the float accumulation of the block products.
// - F32/F16 (and BF16 without avx512bf16): float accumulation only, 1e-5 S
//   (4097 terms summed in 16 or 8 lanes: worst case ~260 eps = 1.6e-5 S,
//   typical sqrt(260) eps ~ 1e-6 S).
// - BF16 with vdpbf16ps: activations rounded to bf16 (8 significant bits,
//   relative error <= 2^-8), so 2^-8 S + 1e-5 S.
#include <gtest/gtest.h>

#include "sanitizer_sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"
#include "kernel_levels.h"
#include "matmul_fixtures.h"

namespace pagoda {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                               GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K,
                               GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
constexpr Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx};
constexpr int64_t kRowCounts[] = {1, 3, 17, 64, 67};
constexpr int64_t kTokenCounts[] = {1, 2, 3, 5, 8, 17};
constexpr int64_t kMaxTokens = 17;

std::vector<int64_t> col_counts(GgmlType type) {
  const int64_t b = traits(type).block_size;
  // Float types: odd widths (rows), and whole 32-column steps (F16 / BF16 panels), 4128 in
  // three AVX-512 column chunks (nine at AVX2), the last one step wide.
  if (b == 1) return {1, 2, 3, 17, 33, 64, 4096 + 1, 4096 + 32};
  // one block, two, odd multiples, and 4096 + one block.
  return {b, 2 * b, 3 * b, 7 * b, 4096 + b};
}

// Built with -DPAGODA_AVX512_EMULATION (preset `emu`, src/kernels/avx512_emulation.h)
// the AVX-512 kernels run through SIMDe on CPUs without AVX-512 (matmul_detail::isa_runs).
bool isa_runs(Isa isa) { return matmul_detail::isa_runs(isa); }
bool has_avx512bf16() { return matmul_detail::kEmulatedAvx512 || cpu_features().avx512bf16; }

// The levels with a kernel of their own for `type`: every level this CPU runs except AMX
// for the types it has no prefill kernel for (its entries are AVX-512's).
std::vector<Isa> levels(GgmlType type) {
  const size_t id = static_cast<size_t>(type);
  return test::levels_with_own(
      [id](const KernelTable& t) {
        return std::tuple(t.matmul[id].quant, t.matmul[id].flt, t.matmul[id].prefill, t.matmul[id].flt_prefill);
      },
      [](Isa isa) { return isa_runs(isa); });
}

ThreadPool& pool(int n) {
  static ThreadPool one(1), two(2);
  return n == 1 ? one : two;
}

// Activations: normal values with a few outliers (as after RMSNorm), and a
// block of exact zeros (scale 0).
std::vector<float> make_acts(int64_t n_tokens, int64_t n_cols, std::mt19937& rng) {
  std::vector<float> x = random_floats(n_tokens * n_cols, rng, 1.0f);
  std::uniform_int_distribution<int64_t> pick(0, n_tokens * n_cols - 1);
  for (int i = 0; i < 3; ++i) x[pick(rng)] *= 20.0f;
  for (int64_t k = 0; k < std::min<int64_t>(n_cols, 32); ++k) x[k] = 0.0f;
  return x;
}

// Error bound per output, see the file comment.
std::vector<double> error_bounds(GgmlType type, Isa isa, int64_t n_rows, int64_t n_cols,
                                 const std::vector<uint8_t>& w, const std::vector<float>& x,
                                 int64_t n_tokens) {
  const size_t rb = row_bytes(type, n_cols);
  const bool quant = traits(type).is_quantized;
  const int64_t per = traits(type).block_size == 256 ? 256 : 32;  // the activation blocks
  // F16 on AMX: tiles of 16 tokens or more take bf16-rounded activations (AMX-BF16).
  const bool bf16_acts = (type == GgmlType::BF16 && isa >= Isa::Avx512 && has_avx512bf16()) ||
                         (type == GgmlType::F16 && isa == Isa::Amx);
  std::vector<double> bound(static_cast<size_t>(n_tokens * n_rows));
  std::vector<float> wrow(static_cast<size_t>(n_cols)), xerr(static_cast<size_t>(n_cols));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * n_cols;
    for (int64_t k = 0; k < n_cols; ++k) xerr[k] = 0.0f;
    if (quant) {
      for (int64_t b = 0; b < n_cols / per; ++b) {
        float amax = 0.0f;
        for (int64_t k = b * per; k < (b + 1) * per; ++k) amax = std::max(amax, std::fabs(xt[k]));
        for (int64_t k = b * per; k < (b + 1) * per; ++k) xerr[k] = amax / 254.0f * 1.01f;
      }
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(type, w.data() + r * rb, wrow.data(), n_cols);
      double s = 0.0, qerr = 0.0;
      for (int64_t k = 0; k < n_cols; ++k) {
        s += std::fabs(static_cast<double>(wrow[k]) * xt[k]);
        qerr += std::fabs(static_cast<double>(wrow[k])) * xerr[k];
      }
      bound[t * n_rows + r] = qerr + 1e-5 * s + (bf16_acts ? s / 256.0 : 0.0) + 1e-30;
    }
  }
  return bound;
}

std::string describe(GgmlType type, Isa isa, int64_t n_rows, int64_t n_cols, int64_t n_tokens,
                     int threads) {
  return std::string(type_name(type)) + " isa=" + isa_name(isa) + " rows=" + std::to_string(n_rows) +
         " cols=" + std::to_string(n_cols) + " tokens=" + std::to_string(n_tokens) +
         " threads=" + std::to_string(threads);
}

class MatmulTypeTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTypeTest, MatchesReferenceOnOddShapesEveryIsaAndPool) {
  const GgmlType type = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(type));
  test::CaseSample sample(5);  // all cases in release; every 5th under a sanitizer
  for (int64_t n_cols : col_counts(type)) {
    for (int64_t n_rows : kRowCounts) {
      const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
      const std::vector<float> x = make_acts(kMaxTokens, n_cols, rng);
      std::vector<float> ref(static_cast<size_t>(kMaxTokens * n_rows));
      matmul_reference(type, n_rows, n_cols, w.data(), x.data(), kMaxTokens, ref.data());
      for (Isa isa : levels(type)) {
        const std::vector<double> bound = error_bounds(type, isa, n_rows, n_cols, w, x, kMaxTokens);
        const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
        for (int64_t n_tokens : kTokenCounts) {
          for (int threads : {1, 2}) {
            if (!sample.take()) continue;
            // Poisoned output: every element must be written.
            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), std::nanf(""));
            matmul(m, x.data(), n_tokens, y.data(), pool(threads));
            int failures = 0;
            for (int64_t i = 0; i < n_tokens * n_rows && failures < 3; ++i) {
              const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
              if (!(err <= bound[i])) {
                ++failures;
                ADD_FAILURE() << describe(type, isa, n_rows, n_cols, n_tokens, threads)
                              << " at token " << i / n_rows << " row " << i % n_rows << ": got " << y[i]
                              << " want " << ref[i] << " |err| " << err << " > bound " << bound[i];
              }
            }
            if (failures) return;
          }
        }
      }
    }
  }
}

// Packing keeps the GGUF size (plus zero rows to a whole group) for all but
// Q4_K/Q5_K, whose unpacked scales cost 4 bytes per row per 256 columns, Q3_K (4:
// its 6-bit scales as bytes) and IQ4_XS (2: likewise).
TEST_P(MatmulTypeTest, ReportsOwnedAndStreamedBytes) {
  const GgmlType type = GetParam();
  const int64_t n_rows = 67, n_cols = 512;
  std::mt19937 rng(7);
  const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
  for (Isa isa : levels(type)) {
    const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
    const size_t gguf_bytes = row_bytes(type, n_cols) * n_rows;
    if (isa == Isa::Scalar) {
      EXPECT_EQ(m.owned_bytes(), 0u) << type_name(type) << " " << isa_name(isa);
      EXPECT_EQ(m.stream_bytes(), gguf_bytes);
      EXPECT_FALSE(m.reads_own_copy());
      continue;
    }
    EXPECT_TRUE(m.reads_own_copy()) << type_name(type) << " " << isa_name(isa);
    if (!traits(type).is_quantized) {
      if (m.packed() != nullptr) {
        // F16 / BF16 panels: rows in tiles of 16, the last padded with zero rows.
        EXPECT_TRUE(type == GgmlType::F16 || type == GgmlType::BF16) << type_name(type);
        EXPECT_TRUE(isa == Isa::Avx512 || isa == Isa::Avx2) << isa_name(isa);
        const size_t tiled_bytes = row_bytes(type, n_cols) * static_cast<size_t>((n_rows + 15) / 16 * 16);
        EXPECT_EQ(m.owned_bytes(), tiled_bytes);
        EXPECT_EQ(m.stream_bytes(), tiled_bytes);
      } else {
        // Float weights: a byte-for-byte copy (in huge pages), and read from it only.
        EXPECT_EQ(m.owned_bytes(), gguf_bytes) << type_name(type) << " " << isa_name(isa);
        EXPECT_EQ(m.stream_bytes(), gguf_bytes);
        ASSERT_NE(m.data(), w.data());
        EXPECT_EQ(std::memcmp(m.data(), w.data(), gguf_bytes), 0);
      }
      std::vector<uint8_t> src = w;
      const WeightMatrix own = WeightMatrix::prepare(type, n_rows, n_cols, src.data(), isa);
      const std::vector<float> x = random_floats(3 * n_cols, rng, 1.0f);
      std::vector<float> before(static_cast<size_t>(3 * n_rows)), after(before.size());
      matmul(own, x.data(), 3, before.data(), pool(1));
      std::fill(src.begin(), src.end(), uint8_t{0x7F});  // the caller may free or reuse its bytes
      matmul(own, x.data(), 3, after.data(), pool(1));
      EXPECT_EQ(after, before) << type_name(type) << " " << isa_name(isa);
      continue;
    }
    const int64_t lanes = isa >= Isa::Avx512 ? 16 : 8;
    const int64_t padded_rows = (n_rows + lanes - 1) / lanes * lanes;
    size_t want = row_bytes(type, n_cols) * padded_rows;
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q3_K)
      want += 4 * (n_cols / 256) * padded_rows;
    if (type == GgmlType::IQ4_XS) want += 2 * (n_cols / 256) * padded_rows;
    EXPECT_EQ(m.owned_bytes(), want) << type_name(type) << " " << isa_name(isa);
    EXPECT_EQ(m.stream_bytes(), want);
  }
}

// The tiling does not depend on the thread count and each output has one
// fixed order of operations, so results are identical bit for bit.
TEST_P(MatmulTypeTest, OneAndTwoThreadsGiveIdenticalResults) {
  const GgmlType type = GetParam();
  const int64_t n_rows = 301, n_cols = 1024, n_tokens = 75;
  std::mt19937 rng(99);
  const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
  const std::vector<float> x = make_acts(n_tokens, n_cols, rng);
  for (Isa isa : levels(type)) {
    const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
    std::vector<float> y1(n_tokens * n_rows), y2(n_tokens * n_rows);
    matmul(m, x.data(), n_tokens, y1.data(), pool(1));
    matmul(m, x.data(), n_tokens, y2.data(), pool(2));
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)))
        << type_name(type) << " " << isa_name(isa);
  }
}

// Decoding a token alone (matvec) gives the same bits as that token inside a
// prefill batch, so batched and single decode agree exactly. 13 tokens: 4-token
// micro-tiles and a tail; 8: the one-pass 8-token micro-tile of eight decoding streams.
// 100 x 4800: 150 units of 32 columns, in column chunks of the packed layout with a short
// last one (PackedAddr), a part row tile and a part row group.
TEST_P(MatmulTypeTest, TokenAloneMatchesTokenInBatch) {
  const GgmlType type = GetParam();
  for (const auto [n_tokens, n_rows, n_cols] :
       {std::array<int64_t, 3>{13, 40, 512}, {8, 40, 512}, {13, 100, 4800}, {8, 100, 4800}}) {
    if (n_cols % traits(type).block_size != 0) continue;
    std::mt19937 rng(5);
    const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
    const std::vector<float> x = make_acts(n_tokens, n_cols, rng);
    for (Isa isa : levels(type)) {
      const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
      std::vector<float> batch(n_tokens * n_rows), one(n_rows);
      matmul(m, x.data(), n_tokens, batch.data(), pool(2));
      for (int64_t t = 0; t < n_tokens; ++t) {
        matmul(m, x.data() + t * n_cols, 1, one.data(), pool(2));
        EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + t * n_rows, n_rows * sizeof(float)))
            << type_name(type) << " " << isa_name(isa) << " token " << t << " of " << n_tokens;
      }
    }
  }
}

// matmul_multi (wq/wk/wv, gate/up sharing one activation quantization and one
// pool job) gives the bits matmul() gives each matrix alone, for row counts
// that leave partial tiles and partial row groups, and when a second target
// has another type (same activation format or not: Q8_0 and Q4_K, F16).
TEST_P(MatmulTypeTest, MultiMatchesSeparateCallsBitForBit) {
  const GgmlType type = GetParam();
  const int64_t n_cols = 512;
  const int64_t rows[] = {67, 8, 17};
  std::mt19937 rng(11);
  test::CaseSample sample(4);
  for (GgmlType other : {type, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16}) {
    const GgmlType types[] = {type, other, type};
    std::vector<std::vector<uint8_t>> w;
    for (int i = 0; i < 3; ++i) w.push_back(make_weights(types[i], rows[i], n_cols, rng));
    for (Isa isa : kIsas) {
      if (!isa_runs(isa)) continue;
      std::vector<WeightMatrix> m;
      for (int i = 0; i < 3; ++i) m.push_back(WeightMatrix::prepare(types[i], rows[i], n_cols, w[i].data(), isa));
      for (int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{70}}) {
        const std::vector<float> x = make_acts(n_tokens, n_cols, rng);
        if (!sample.take()) continue;
        std::vector<std::vector<float>> want(3), got(3);
        std::vector<MatmulTarget> targets;
        for (int i = 0; i < 3; ++i) {
          want[i].resize(n_tokens * rows[i]);
          got[i].assign(n_tokens * rows[i], std::nanf(""));
          matmul(m[i], x.data(), n_tokens, want[i].data(), pool(2));
          targets.push_back({&m[i], got[i].data()});
        }
        matmul_multi(targets, x.data(), n_tokens, pool(2));
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
              << type_name(types[i]) << " target " << i << " isa=" << isa_name(isa) << " tokens=" << n_tokens;
      }
    }
  }
}

// matmul_grouped (the experts of an MoE layer, each on its own rows of one
// activation array) gives the bits matmul() gives each job alone: jobs of 0, 1
// and many rows, rows shared by two jobs (gate and up), slices of one stacked
// 3-D tensor, an expert used by no token, and a float type (per-job fallback).
// The jobs' matrices are row_slice()s of the stacked tensor prepared as one
// matrix; the expected values come from each expert prepared alone.
TEST_P(MatmulTypeTest, GroupedMatchesSeparateCallsBitForBit) {
  const GgmlType type = GetParam();
  const int64_t n_cols = 512, rows = 48, n_expert = 4;
  std::mt19937 rng(13);
  // One stacked tensor: expert e is rows [e * rows, (e + 1) * rows).
  const std::vector<uint8_t> w = make_weights(type, rows * n_expert, n_cols, rng);
  const size_t slice = row_bytes(type, n_cols) * rows;
  for (Isa isa : kIsas) {
    if (!isa_runs(isa)) continue;
    std::vector<WeightMatrix> m;
    for (int64_t e = 0; e < n_expert; ++e) m.push_back(WeightMatrix::prepare(type, rows, n_cols, w.data() + e * slice, isa));
    const WeightMatrix all = WeightMatrix::prepare(type, rows * n_expert, n_cols, w.data(), isa, rows);
    std::vector<WeightMatrix> sliced;
    for (int64_t e = 0; e < n_expert; ++e) {
      sliced.push_back(all.row_slice(e * rows, rows));
      EXPECT_EQ(sliced.back().stream_bytes(), m[e].stream_bytes());
    }
    const int64_t n_x = 73;
    const std::vector<float> x = make_acts(n_x, n_cols, rng);
    // (expert, row0, n_tokens): expert 2 unused; expert 0 twice over the same rows.
    const int64_t spec[][3] = {{0, 0, 5}, {0, 0, 5}, {1, 5, 1}, {3, 6, 67}, {1, 73, 0}};
    std::vector<std::vector<float>> want, got;
    std::vector<GroupedMatmul> jobs;
    for (const auto& j : spec) {
      want.emplace_back(std::max<int64_t>(j[2], 1) * rows, 0.0f);
      got.emplace_back(std::max<int64_t>(j[2], 1) * rows, std::nanf(""));
      if (j[2] > 0) matmul(m[j[0]], x.data() + j[1] * n_cols, j[2], want.back().data(), pool(2));
    }
    for (size_t i = 0; i < std::size(spec); ++i) {
      if (spec[i][2] == 0) got[i].assign(got[i].size(), 0.0f);  // untouched
      jobs.push_back({&sliced[spec[i][0]], spec[i][1], spec[i][2], got[i].data()});
    }
    matmul_grouped(jobs, x.data(), n_x, pool(2));
    for (size_t i = 0; i < std::size(spec); ++i)
      EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
          << type_name(type) << " job " << i << " isa=" << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTypeTest, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// The AMX-BF16 prefill (BF16 weights; F16 weights and their activations split into two bf16
// halves each; whole 16-token
// groups on the tiles, two row groups x two token groups per pass) against the reference,
// on shapes that take every pass shape (1 or 2 row groups x 1 or 2 token groups), a partial
// last row group and tokens outside whole groups (both through the AVX-512 kernel), with
// the bf16-activation bound.
TEST(Matmul, FloatAmxPrefillMatchesReference) {
  if (!isa_runs(Isa::Amx) || !kernel_table(Isa::Amx).matmul[static_cast<size_t>(GgmlType::BF16)].flt_prefill)
    GTEST_SKIP() << "no AMX-BF16 on this CPU";
  std::mt19937 rng(77);
  for (GgmlType type : {GgmlType::BF16, GgmlType::F16})
    for (int64_t n_cols : {int64_t{32}, int64_t{96}, int64_t{2048 + 32}})
      for (int64_t n_rows : {int64_t{16}, int64_t{17}, int64_t{48}, int64_t{67}}) {
        const std::vector<uint8_t> w = make_weights(type, n_rows, n_cols, rng);
        const int64_t max_tokens = 100;
        // The scalar level's bound (f32 sums only): BF16 weights get activations that bf16
        // holds exactly; F16 weights any activations, since both operands are split to 16
        // significant bits (a dropped low half of either, 2^-9 relative, exceeds it).
        std::vector<float> x = make_acts(max_tokens, n_cols, rng);
        if (type == GgmlType::BF16)
          for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
        std::vector<float> ref(static_cast<size_t>(max_tokens * n_rows));
        matmul_reference(type, n_rows, n_cols, w.data(), x.data(), max_tokens, ref.data());
        const std::vector<double> bound = error_bounds(type, Isa::Scalar, n_rows, n_cols, w, x, max_tokens);
        const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), Isa::Amx);
        for (int64_t n_tokens : {int64_t{16}, int64_t{33}, int64_t{64}, int64_t{100}}) {
          std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), std::nanf(""));
          matmul(m, x.data(), n_tokens, y.data(), pool(2));
          for (int64_t i = 0; i < n_tokens * n_rows; ++i)
            ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), bound[i])
                << describe(type, Isa::Amx, n_rows, n_cols, n_tokens, 2) << " at token " << i / n_rows << " row "
                << i % n_rows << ": got " << y[i] << " want " << ref[i];
        }
      }
}

// Every code and scale bit of the packed layouts matters: weights of random
// bytes (only the f16 scales forced finite) reach codes quantize_row never
// makes (Q8_0 -128, Q6_K negative scales, all 6-bit K scales and mins).
TEST(Matmul, RandomBitWeightsMatchReference) {
  std::mt19937 rng(42);
  const int64_t n_rows = 35, n_tokens = 6;
  for (GgmlType type : kTypes) {
    if (!traits(type).is_quantized) continue;
    const int64_t n_cols = 3 * traits(type).block_size * (traits(type).block_size == 32 ? 8 : 1);
    const size_t rb = row_bytes(type, n_cols), bb = traits(type).type_size;
    std::vector<uint8_t> w(rb * n_rows);
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    // f16 fields: d (and m / dmin) at the block start; Q6_K's d at byte 208, Q2_K's d
    // and dmin at 80, Q3_K's d at 108; IQ4_XS's scales_h at 2 stays random; MXFP4's
    // exponent byte kept to 2^-10..2^5 (random bytes reach 2^127: inf products).
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (size_t off = 0; off < w.size(); off += bb) {
      const f16_t a = f32_to_f16(scale(rng)), b = f32_to_f16(scale(rng));
      if (type == GgmlType::Q6_K) {
        std::memcpy(&w[off + 208], &a, 2);
      } else if (type == GgmlType::Q2_K) {
        std::memcpy(&w[off + 80], &a, 2);
        std::memcpy(&w[off + 82], &b, 2);
      } else if (type == GgmlType::Q3_K) {
        std::memcpy(&w[off + 108], &a, 2);
      } else if (type == GgmlType::MXFP4) {
        w[off] = static_cast<uint8_t>(118 + w[off] % 16);
      } else if (type == GgmlType::IQ4_NL || type == GgmlType::IQ4_XS) {
        std::memcpy(&w[off], &a, 2);
      } else {
        std::memcpy(&w[off], &a, 2);
        if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && type != GgmlType::Q5_0) std::memcpy(&w[off + 2], &b, 2);
      }
    }
    const std::vector<float> x = make_acts(n_tokens, n_cols, rng);
    std::vector<float> ref(n_tokens * n_rows);
    matmul_reference(type, n_rows, n_cols, w.data(), x.data(), n_tokens, ref.data());
    for (Isa isa : levels(type)) {
      const std::vector<double> bound = error_bounds(type, isa, n_rows, n_cols, w, x, n_tokens);
      const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
      std::vector<float> y(n_tokens * n_rows);
      matmul(m, x.data(), n_tokens, y.data(), pool(2));
      for (int64_t i = 0; i < n_tokens * n_rows; ++i) {
        const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
        ASSERT_LE(err, bound[i]) << describe(type, isa, n_rows, n_cols, n_tokens, 2) << " at token "
                                 << i / n_rows << " row " << i % n_rows << ": got " << y[i] << " want "
                                 << ref[i];
      }
    }
  }
}

// MXFP4's scale 2^(e-128) at the ends of the E8M0 range: the subnormal scales of
// e = 0, 1 (one blend in the SIMD decoders) and the largest whose levels stay finite
// (12 x 2^(252-128) = 2.6e38), made
// visible by activations of 1e30 (small e) and 1e-30 (large e).
TEST(Matmul, Mxfp4ExtremeExponentsMatchReference) {
  std::mt19937 rng(77);
  const int64_t n_cols = 64, n_tokens = 3;
  for (const auto& [exponents, act_scale] : {std::pair{std::vector<int>{0, 1, 2, 3, 4}, 1e30f},
                                            std::pair{std::vector<int>{248, 249, 250, 251, 252}, 1e-30f}}) {
    const int64_t n_rows = static_cast<int64_t>(exponents.size());
    const size_t rb = row_bytes(GgmlType::MXFP4, n_cols);
    std::vector<uint8_t> w(rb * n_rows);
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t b = 0; b < n_cols / 32; ++b) w[r * rb + b * sizeof(BlockMXFP4)] = static_cast<uint8_t>(exponents[r]);
    std::vector<float> x = make_acts(n_tokens, n_cols, rng);
    for (float& v : x) v *= act_scale;
    std::vector<float> ref(n_tokens * n_rows);
    matmul_reference(GgmlType::MXFP4, n_rows, n_cols, w.data(), x.data(), n_tokens, ref.data());
    for (Isa isa : levels(GgmlType::MXFP4)) {
      const std::vector<double> bound = error_bounds(GgmlType::MXFP4, isa, n_rows, n_cols, w, x, n_tokens);
      const WeightMatrix m = WeightMatrix::prepare(GgmlType::MXFP4, n_rows, n_cols, w.data(), isa);
      std::vector<float> y(n_tokens * n_rows);
      matmul(m, x.data(), n_tokens, y.data(), pool(1));
      for (int64_t i = 0; i < n_tokens * n_rows; ++i) {
        ASSERT_GT(std::fabs(ref[i]), 1e-20f) << "the check needs visible outputs";
        ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), bound[i])
            << "isa=" << isa_name(isa) << " e=" << exponents[i % n_rows] << " token " << i / n_rows << ": got "
            << y[i] << " want " << ref[i];
      }
    }
  }
}

// A block with NaN or inf (a corrupt model's activations): the scalar quantizer
// writes codes 0 and a NaN scale, so the NaN reaches the output instead of a NaN being
// cast to int8 (undefined behaviour); the other blocks are untouched.
TEST(Matmul, ScalarActivationQuantizerPassesNonFiniteBlocksOnAsNan) {
  using namespace matmul_detail;
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> x(64, 0.5f);
    x[40] = bad;
    std::vector<int8_t> q(64, 7);
    std::vector<float> d(2), dsum32(2), neg8(2);
    std::vector<int32_t> sum32(2), sum16(2);
    quantize_act_row_scalar(ActKind::Block32, x.data(), 64, {q.data(), d.data(), sum32.data(), dsum32.data(), sum16.data(), neg8.data()});
    EXPECT_EQ(q[0], 127);
    EXPECT_FLOAT_EQ(d[0], 0.5f / 127.0f);
    EXPECT_TRUE(std::isnan(d[1])) << bad;
    for (int j = 32; j < 64; ++j) EXPECT_EQ(q[j], 0) << bad;
  }
}

// The SIMD activation quantizers must produce exactly the scalar codes,
// scales and sums (the kernels' cross-ISA agreement rests on it).
TEST(Matmul, SimdActivationQuantizersMatchScalarBitForBit) {
  using namespace matmul_detail;
  std::mt19937 rng(3);
  const int64_t n_cols = 1024;
  std::vector<float> x = random_floats(n_cols, rng, 2.0f);
  for (int64_t k = 256; k < 512; ++k) x[k] = 0.0f;  // all-zero blocks: d = 0
  x[700] = 1e4f;                                     // an outlier
  for (ActKind kind : {ActKind::Block32, ActKind::Super256}) {
    const int64_t per = kind == ActKind::Block32 ? 32 : 256;
    struct Buf {
      std::vector<int8_t> q = std::vector<int8_t>(1024);
      std::vector<float> d = std::vector<float>(32), dsum32 = std::vector<float>(32), neg8 = std::vector<float>(32);
      std::vector<int32_t> sum32 = std::vector<int32_t>(32), sum16 = std::vector<int32_t>(64);
      ActRowOut out() { return {q.data(), d.data(), sum32.data(), dsum32.data(), sum16.data(), neg8.data()}; }
    } ref, got;
    quantize_act_row_scalar(kind, x.data(), n_cols, ref.out());
    for (Isa isa : test::levels_with_own([](const KernelTable& t) { return t.quantize_act_row; },
                                         [](Isa i) { return isa_runs(i); })) {
      if (isa == Isa::Scalar) continue;  // the reference itself
      got = Buf{};
      kernel_table(isa).quantize_act_row(kind, x.data(), n_cols, got.out());
      EXPECT_EQ(ref.q, got.q) << isa_name(isa) << " per " << per;
      for (int64_t b = 0; b < n_cols / per; ++b) EXPECT_EQ(ref.d[b], got.d[b]) << isa_name(isa) << " block " << b;
      EXPECT_EQ(ref.sum32, got.sum32) << isa_name(isa);
      if (kind == ActKind::Block32) {
        EXPECT_EQ(ref.dsum32, got.dsum32) << isa_name(isa);
        EXPECT_EQ(ref.neg8, got.neg8) << isa_name(isa);
        for (int64_t b = 0; b < n_cols / 32; ++b) EXPECT_EQ(ref.neg8[b], -8.0f * ref.dsum32[b]) << "block " << b;
      } else {
        EXPECT_EQ(ref.sum16, got.sum16) << isa_name(isa);
      }
    }
  }
}

TEST(Matmul, ZeroTokensWritesNothing) {
  std::vector<uint8_t> w(row_bytes(GgmlType::Q4_0, 64) * 4, 0);
  const WeightMatrix m = WeightMatrix::prepare(GgmlType::Q4_0, 4, 64, w.data());
  float y = 123.0f;
  matmul(m, nullptr, 0, &y, pool(2));
  EXPECT_EQ(y, 123.0f);
}

}  // namespace
}  // namespace pagoda
