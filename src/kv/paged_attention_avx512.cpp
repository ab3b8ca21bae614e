// AVX-512 (F/BW/VL/DQ) instance of the paged-attention kernel (paged_attention_simd.h):
// 16 floats per register, tails through mask registers.

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on _mm512_undefined_*() inside
// the reduce intrinsics (a known false positive); silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "kv/paged_attention_simd.h"

namespace pagoda {
namespace {

struct AttnVecAvx512 {
  using Reg = __m512;
  static constexpr int64_t kWidth = 16;

  static __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store_partial(float* p, Reg v, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static Reg set1(float a) { return _mm512_set1_ps(a); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce_add(Reg v) { return _mm512_reduce_add_ps(v); }
  static Reg cvt_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg cvt_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static Reg cvt_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static __m512i u8x16(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg lo_nibbles(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(u8x16(p), _mm512_set1_epi32(0x0F)));
  }
  static Reg hi_nibbles(const uint8_t* p) { return _mm512_cvtepi32_ps(_mm512_srli_epi32(u8x16(p), 4)); }
};

void attend_avx512(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                   int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l) {
  paged_attend_simd<AttnVecAvx512>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
}

void attend_tile_avx512(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                 const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride) {
  paged_attend_tile_simd<AttnVecAvx512>(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out, out_stride);
}

}  // namespace

namespace paged_attention_internal {
extern const PagedAttendFn kPagedAttendAvx512;
const PagedAttendFn kPagedAttendAvx512 = attend_avx512;
extern const PagedAttendTileFn kPagedAttendTileAvx512;
const PagedAttendTileFn kPagedAttendTileAvx512 = attend_tile_avx512;
}  // namespace paged_attention_internal

}  // namespace pagoda
