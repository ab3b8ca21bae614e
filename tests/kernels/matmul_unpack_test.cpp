// WeightMatrix::read_row: a row read back from the repacked copy is bit-identical to
// dequantize_row() of the GGUF bytes it was packed from (the codec is the
// reference), for every weight type and every ISA this CPU runs (AVX2 packs 8 rows a
// group, AVX-512 16; scalar and float types read the GGUF bytes), on quantized rows
// and on random bytes (every bit of every field must survive packing and unpacking),
// and on an expert's row slice.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "matmul_fixtures.h"

namespace pagoda {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                               GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K,
                               GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
constexpr Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};

// Every row of `w` (GGUF bytes of n_rows x n_cols) read through a prepared matrix
// equals the codec's dequantization, bit for bit (NaN included: the same bytes take
// the same float operations).
void expect_rows_read_back(GgmlType type, Isa isa, int64_t n_rows, int64_t n_cols, const std::vector<uint8_t>& w) {
  const WeightMatrix m = WeightMatrix::prepare(type, n_rows, n_cols, w.data(), isa);
  const size_t rb = row_bytes(type, n_cols);
  std::vector<float> want(static_cast<size_t>(n_cols)), got(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(type, w.data() + r * rb, want.data(), n_cols);
    got.assign(got.size(), -1.0f);
    m.read_row(r, got.data());
    for (int64_t k = 0; k < n_cols; ++k)
      if (std::memcmp(&want[k], &got[k], sizeof(float)) != 0) {
        ADD_FAILURE() << type_name(type) << " " << isa_name(isa) << " " << n_rows << "x" << n_cols << " packed "
                      << (m.packed() != nullptr) << ": row " << r << " col " << k << " want " << want[k]
                      << " got " << got[k];
        return;
      }
  }
}

TEST(WeightMatrixReadRow, QuantizedRowsMatchTheCodecOnEveryIsa) {
  std::mt19937 rng(7);
  for (GgmlType type : kTypes) {
    const int64_t b = traits(type).block_size;
    for (Isa isa : kIsas) {
      if (!isa_supported(isa)) continue;
      // 1 row (a group mostly padding), 17 (a full AVX-512 group and one more), 40;
      // one block, three, and 2048 + one block of columns.
      for (int64_t n_rows : {1, 17, 40})
        for (int64_t n_cols : {b, 3 * b, 2048 + b}) {
          if (b == 1 && n_cols == 1) n_cols = 33;
          expect_rows_read_back(type, isa, n_rows, n_cols, make_weights(type, n_rows, n_cols, rng));
        }
    }
  }
}

TEST(WeightMatrixReadRow, RandomBytesSurvivePackingAndUnpacking) {
  // Random bytes use every bit of every field (6-bit scales, high-bit planes, the
  // f16 words), which quantize_row's outputs may not.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  for (GgmlType type : kTypes) {
    if (!traits(type).is_quantized) continue;
    const int64_t n_rows = 19, n_cols = 4 * traits(type).block_size;
    std::vector<uint8_t> w(row_bytes(type, n_cols) * n_rows);
    for (uint8_t& x : w) x = static_cast<uint8_t>(byte(rng));
    for (Isa isa : {Isa::Avx2, Isa::Avx512})
      if (isa_supported(isa)) expect_rows_read_back(type, isa, n_rows, n_cols, w);
  }
}

TEST(WeightMatrixReadRow, RowSliceReadsItsOwnRows) {
  // Experts: one prepared [n_expert * rows, cols] tensor, sliced per expert.
  std::mt19937 rng(3);
  const int64_t rows = 32, n_cols = 256;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K}) {
    const std::vector<uint8_t> w = make_weights(type, 3 * rows, n_cols, rng);
    const WeightMatrix all = WeightMatrix::prepare(type, 3 * rows, n_cols, w.data(), best_isa(), rows);
    const WeightMatrix second = all.row_slice(rows, rows);
    std::vector<float> want(n_cols), got(n_cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(type, w.data() + (rows + r) * row_bytes(type, n_cols), want.data(), n_cols);
      second.read_row(r, got.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n_cols)) << type_name(type) << " row " << r;
    }
  }
}

// The tiled layout's addresses, against the order a one-token pass reads them in: tile by
// tile, chunk by chunk, each group's part of the chunk in turn, one unit after another,
// with no gap or overlap (7 groups: a whole tile and a part one; 37 units in chunks of 16).
TEST(PackedAddr, ATileIsReadChunkByChunkInOneLine) {
  std::vector<uint8_t> bytes(7 * 37 * 3);
  matmul_detail::PackedAddr a;
  a.base = bytes.data();
  a.n_groups = 7;
  a.n_units = 37;
  a.chunk_units = 16;
  a.tile_groups = 4;
  a.unit_bytes = 3;
  size_t next = 0;
  for (int64_t t0 = 0; t0 < a.n_groups; t0 += a.tile_groups)
    for (int64_t c0 = 0; c0 < a.n_units; c0 = a.chunk_end(c0))
      for (int64_t g = t0; g < std::min<int64_t>(a.n_groups, t0 + a.tile_groups); ++g) {
        if (g + 1 < std::min<int64_t>(a.n_groups, t0 + a.tile_groups))
          EXPECT_EQ(a.unit(g + 1, c0) - a.unit(g, c0), static_cast<ptrdiff_t>(a.group_stride(c0)));
        for (int64_t u = c0; u < a.chunk_end(c0); ++u, next += a.unit_bytes)
          ASSERT_EQ(a.unit(g, u) - a.base, static_cast<ptrdiff_t>(next)) << "group " << g << " unit " << u;
      }
  EXPECT_EQ(next, bytes.size());
  a.tile_groups = 1;  // group-major
  a.chunk_units = a.n_units;
  for (int64_t g = 0; g < a.n_groups; ++g)
    for (int64_t u = 0; u < a.n_units; ++u) ASSERT_EQ(a.unit(g, u) - a.base, (g * a.n_units + u) * 3);
}

// Long rows of the 32-wide formats at the AVX-512 level lie in row tiles of 4 groups, column
// chunk by column chunk (PackedAddr): rows read back through that layout, slices of whole
// tiles read their own rows, and a slice height that is not whole tiles keeps groups whole.
TEST(WeightMatrixReadRow, TiledColumnChunksReadBackAndSliceOnTiles) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(17);
  const int64_t n_cols = 4800;  // 150 units: chunks and a short last one
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                        GgmlType::IQ4_NL, GgmlType::MXFP4}) {
    // 100 rows: a whole tile of 64, then a part tile of 3 groups, the last one of 4 rows.
    const std::vector<uint8_t> w = make_weights(type, 192, n_cols, rng);
    const WeightMatrix m = WeightMatrix::prepare(type, 100, n_cols, w.data(), Isa::Avx512);
    EXPECT_EQ(m.packed_tile_groups(), 4) << type_name(type);
    EXPECT_LT(m.packed_chunk_units(), n_cols / 32) << type_name(type);
    expect_rows_read_back(type, Isa::Avx512, 100, n_cols, w);
    const WeightMatrix all = WeightMatrix::prepare(type, 192, n_cols, w.data(), Isa::Avx512, 64);
    EXPECT_EQ(all.packed_tile_groups(), 4) << type_name(type);
    const WeightMatrix second = all.row_slice(64, 64);
    std::vector<float> want(n_cols), got(n_cols);
    for (int64_t r = 0; r < 64; ++r) {
      dequantize_row(type, w.data() + (64 + r) * row_bytes(type, n_cols), want.data(), n_cols);
      second.read_row(r, got.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n_cols)) << type_name(type) << " row " << r;
    }
    EXPECT_EQ(WeightMatrix::prepare(type, 192, n_cols, w.data(), Isa::Avx512, 48).packed_tile_groups(), 1);
  }
}

// F16 and BF16 in panels (AVX-512, BF16 there with AVX512_BF16; AVX2): rows read back
// bit for bit, a whole tile's rows, a part tile's, and row slices from tile starts (an
// expert's rows).
TEST(WeightMatrixReadRow, HalfFloatPanelsReadBackAndSliceOnTiles) {
  std::mt19937 rng(23);
  const int64_t n_cols = 4800;  // column chunks of 2048, 2048 and 704 (AVX2: 9 x 512 and 192)
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    if (!isa_supported(isa)) continue;
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
      const std::vector<uint8_t> w = make_weights(type, 100, n_cols, rng);
      const WeightMatrix m = WeightMatrix::prepare(type, 100, n_cols, w.data(), isa);
      if (m.packed() == nullptr) {
        EXPECT_TRUE(type == GgmlType::BF16 && isa == Isa::Avx512) << "F16 is in panels at both levels";
        continue;  // AVX-512 without AVX512_BF16: BF16 stays in rows
      }
      expect_rows_read_back(type, isa, 100, n_cols, w);
      expect_rows_read_back(type, isa, 7, 64, w);
      const size_t rb = row_bytes(type, n_cols);
      std::vector<float> want(n_cols), got(n_cols);
      for (const auto [row0, rows] : {std::array<int64_t, 2>{16, 48}, {96, 4}, {32, 68}}) {
        const WeightMatrix slice = m.row_slice(row0, rows);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, w.data() + (row0 + r) * rb, want.data(), n_cols);
          slice.read_row(r, got.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n_cols))
              << isa_name(isa) << " " << type_name(type) << " " << row0 << "+" << r;
        }
      }
    }
  }
}

TEST(WeightMatrixReadRowDeathTest, RowOutsideTheMatrixAborts) {
  std::mt19937 rng(5);
  const std::vector<uint8_t> w = make_weights(GgmlType::Q4_0, 4, 64, rng);
  const WeightMatrix m = WeightMatrix::prepare(GgmlType::Q4_0, 4, 64, w.data());
  std::vector<float> out(64);
  EXPECT_DEATH(m.read_row(4, out.data()), "outside");
  EXPECT_DEATH(m.read_row(-1, out.data()), "outside");
}

}  // namespace
}  // namespace pagoda
