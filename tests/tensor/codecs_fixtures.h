// Helpers shared by the block-codec tests (codecs_test.cpp, codecs_known_answer_test.cpp):
// decoding into NaN-poisoned rows, Gaussian data, quantizing, error and grid distance, and an
// independent bit-by-bit reading of the K-quant scale packing with its hand-packed vector.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tensor/types.h"

namespace pagoda::codecs_test {

inline std::vector<float> decode(GgmlType type, const void* src, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  dequantize_row(type, src, y.data(), n);
  return y;
}

template <typename Block>
inline std::vector<float> decode_block(GgmlType type, const Block& b) {
  return decode(type, &b, traits(type).block_size);
}

inline std::vector<float> normal_data(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

inline std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

template <typename Block>
inline Block block_at(const std::vector<uint8_t>& bytes, size_t block_idx) {
  Block b;
  std::memcpy(&b, bytes.data() + block_idx * sizeof(Block), sizeof(Block));
  return b;
}

inline float rel_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ref += double(x[i]) * x[i];
  }
  return static_cast<float>(std::sqrt(err / ref));
}

// Distance from v to the nearest of the levels a*q + b, q in q_lo..q_hi, or, for the
// codebook formats, a*table[k] for the 16 entries.
inline float dist_to_grid(float v, float a, float b, int q_lo, int q_hi, const int8_t* table = nullptr) {
  float best = std::numeric_limits<float>::infinity();
  if (table) {
    for (int k = 0; k < 16; ++k) best = std::min(best, std::fabs(v - a * static_cast<float>(table[k])));
    return best;
  }
  for (int q = q_lo; q <= q_hi; ++q) best = std::min(best, std::fabs(v - (a * q + b)));
  return best;
}

// Independent reading of the K-quant 6-bit scale/min packing, one bit at a time:
// bit b of byte k holds
//   k 0..3:  b<6: bit b of sc[k];          b>=6: bit b-2 of sc[k+4]
//   k 4..7:  b<6: bit b of m[k-4];         b>=6: bit b-2 of m[k]
//   k 8..11: b<4: bit b of sc[k-4];        b>=4: bit b-4 of m[k-4]
inline void unpack_k_scales_bitwise(const uint8_t* scales, int sc[8], int m[8]) {
  std::fill(sc, sc + 8, 0);
  std::fill(m, m + 8, 0);
  for (int k = 0; k < 12; ++k) {
    for (int b = 0; b < 8; ++b) {
      const int bit = (scales[k] >> b) & 1;
      if (k < 4) {
        if (b < 6) sc[k] |= bit << b; else sc[k + 4] |= bit << (b - 2);
      } else if (k < 8) {
        if (b < 6) m[k - 4] |= bit << b; else m[k] |= bit << (b - 2);
      } else {
        if (b < 4) sc[k - 4] |= bit << b; else m[k - 4] |= bit << (b - 4);
      }
    }
  }
}

// Sub-block scales 1, 2, 3, 63, 17, 33, 48, 62 and mins 0, 5, 63, 1, 16, 32, 47, 15,
// packed by hand:
//   bytes 0..3  = sc[0..3] | (sc[4..7] >> 4) << 6 = 1|1<<6, 2|2<<6, 3|3<<6, 63|3<<6
//   bytes 4..7  = m[0..3]  | (m[4..7] >> 4) << 6  = 0|1<<6, 5|2<<6, 63|2<<6, 1|0<<6
//   bytes 8..11 = (sc[4..7] & 15) | (m[4..7] & 15) << 4 = 1|0, 1|0, 0|15<<4, 14|15<<4
constexpr uint8_t kKScales[12] = {0x41, 0x82, 0xC3, 0xFF, 0x40, 0x85,
                                  0xBF, 0x01, 0x01, 0x01, 0xF0, 0xFE};
constexpr int kKSc[8] = {1, 2, 3, 63, 17, 33, 48, 62};
constexpr int kKMin[8] = {0, 5, 63, 1, 16, 32, 47, 15};

}  // namespace pagoda::codecs_test
