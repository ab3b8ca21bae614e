// AVX2 + FMA + F16C instance of the paged-attention kernel (paged_attention_simd.h):
// 8 floats per register.

#include <immintrin.h>

#include "kv/paged_attention_simd.h"

namespace pagoda {
namespace {

struct AttnVecAvx2 {
  using Reg = __m256;
  static constexpr int64_t kWidth = 8;

  static __m256i tail_mask(int64_t n) {
    static const int32_t kWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWindow + 8 - n));
  }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg load_partial(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store_partial(float* p, Reg v, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static Reg set1(float a) { return _mm256_set1_ps(a); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce_add(Reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static Reg cvt_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg cvt_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static Reg cvt_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static __m256i u8x8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg lo_nibbles(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(u8x8(p), _mm256_set1_epi32(0x0F)));
  }
  static Reg hi_nibbles(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_srli_epi32(u8x8(p), 4)); }
};

void attend_avx2(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                 int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l) {
  paged_attend_simd<AttnVecAvx2>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
}

void attend_tile_avx2(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                 const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride) {
  paged_attend_tile_simd<AttnVecAvx2>(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out, out_stride);
}

}  // namespace

namespace paged_attention_internal {
extern const PagedAttendFn kPagedAttendAvx2;
const PagedAttendFn kPagedAttendAvx2 = attend_avx2;
extern const PagedAttendTileFn kPagedAttendTileAvx2;
const PagedAttendTileFn kPagedAttendTileAvx2 = attend_tile_avx2;
}  // namespace paged_attention_internal

}  // namespace pagoda
