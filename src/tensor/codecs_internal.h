// Private to src/tensor: the helpers both scalar codec files (codecs.cpp for the 32-wide
// formats, codecs_k.cpp for the K-quants) use. Not a hot path; pure functions, callable
// from any thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pagoda::codecs_internal {

// Block block_idx of a packed row at src, copied out so src may sit at any byte offset.
template <typename Block>
inline Block load_block(const void* src, int64_t block_idx) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(src) + block_idx * sizeof(Block), sizeof(Block));
  return b;
}

// Writes b as block block_idx of the packed row at dst (any byte offset).
template <typename Block>
inline void store_block(void* dst, int64_t block_idx, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + block_idx * sizeof(Block), &b, sizeof(Block));
}

// Signed value of largest magnitude in x[0..n) (the first one on ties) and its magnitude;
// both 0 when n == 0. The symmetric formats divide by this signed value so that the
// extreme element lands on the one code with no mirror (-8 for Q4_0, -16 for Q5_0, -32
// for Q6_K's codes, -128 for its scales), gaining one level.
inline void signed_absmax(const float* x, int n, float* max, float* amax) {
  *max = 0.0f;
  *amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > *amax) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

}  // namespace pagoda::codecs_internal
