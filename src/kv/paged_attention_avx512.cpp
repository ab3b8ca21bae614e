// AVX-512 (F/BW/VL/DQ) instance of the paged-attention kernel (paged_attention_simd.h):
// 16 floats per register, tails through mask registers, through the shared traits of
// kernels/simd_avx512.h.

// First: its pragma must cover the first inclusion of <immintrin.h>.
#include "kernels/simd_avx512.h"

#include "kv/paged_attention_simd.h"

namespace pagoda {
namespace {

void attend_avx512(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                   int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l) {
  paged_attend_simd<simd_avx512::Vec>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
}

void attend_tile_avx512(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                 const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                 int64_t window, float softcap) {
  paged_attend_tile_simd<simd_avx512::Vec>(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out, out_stride,
                                       window, softcap);
}

void attend_softcap_avx512(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                 int64_t kv_head, const float* q, int n_q, float scale, float softcap, float* o, float* m,
                 float* l) {
  paged_attend_simd<simd_avx512::Vec>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l, softcap);
}

}  // namespace

namespace paged_attention_internal {
extern const PagedAttendSoftcapFn kPagedAttendSoftcapAvx512;
const PagedAttendSoftcapFn kPagedAttendSoftcapAvx512 = attend_softcap_avx512;
extern const PagedAttendFn kPagedAttendAvx512;
const PagedAttendFn kPagedAttendAvx512 = attend_avx512;
extern const PagedAttendTileFn kPagedAttendTileAvx512;
const PagedAttendTileFn kPagedAttendTileAvx512 = attend_tile_avx512;
}  // namespace paged_attention_internal

}  // namespace pagoda
