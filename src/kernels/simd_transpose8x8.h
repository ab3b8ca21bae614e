// The 8 x 8 float transpose both x86 SIMD traits (simd_avx2.h, simd_avx512.h) offer as
// Vec::transpose8x8, for the paged-attention prefill tile's Kᵀ. 256-bit ops: every x86
// level above Scalar has AVX2. Include only from those two headers (anonymous namespace:
// each ISA file gets its own copy built with its own flags).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace pagoda::simd_x86 {
namespace {

// dst[c][r] = rows[r][c] for an 8 x 8 block: rows[r] are 8 floats each, dst rows
// dst_stride floats apart. 256-bit ops (both ISA files have AVX2).
inline void transpose8x8_regs(const __m256 (&rows)[8], float* dst, int64_t dst_stride) {
  const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]), t1 = _mm256_unpackhi_ps(rows[0], rows[1]);
  const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]), t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
  const __m256 t4 = _mm256_unpacklo_ps(rows[4], rows[5]), t5 = _mm256_unpackhi_ps(rows[4], rows[5]);
  const __m256 t6 = _mm256_unpacklo_ps(rows[6], rows[7]), t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// dst[c][r] = element d0 + c of row r, for the 8 rows `row_bytes` apart from base, stored
// as f16 (f16 = true) or f32; dst rows dst_stride floats apart. Requires: d0 % 8 == 0.
inline void transpose8x8_rows(const uint8_t* base, size_t row_bytes, bool f16, int64_t d0, float* dst,
                              int64_t dst_stride) {
  __m256 rows[8];
  for (int r = 0; r < 8; ++r) {
    const uint8_t* row = base + r * row_bytes;
    rows[r] = f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + d0 / 8))
                  : _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d0);
  }
  transpose8x8_regs(rows, dst, dst_stride);
}

}  // namespace
}  // namespace pagoda::simd_x86
