// Shared by the matmul tests: normal random values and quantized weight rows whose
// scales differ from row to row (one row all zeros).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/types.h"

namespace pagoda {

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// Weights: quantize_row of normal values, rows with scales spread over 1e-3..1
// (so per-row scales differ), and one row of zeros (all scales 0).
inline std::vector<uint8_t> make_weights(GgmlType type, int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  const size_t rb = row_bytes(type, n_cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float sigma = r == 1 ? 0.0f : std::pow(10.0f, -3.0f * static_cast<float>(r % 7) / 6.0f);
    std::vector<float> row = random_floats(n_cols, rng, sigma);
    quantize_row(type, row.data(), w.data() + r * rb, n_cols);
  }
  return w;
}

}  // namespace pagoda
