// AVX2 + FMA + F16C instance of the paged-attention kernel (paged_attention_simd.h):
// 8 floats per register, through the shared traits of kernels/simd_avx2.h.

#include "kernels/simd_avx2.h"

#include "kernels/paged_attention_simd.h"

namespace pagoda {
namespace {

void attend_avx2(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                 int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l) {
  paged_attend_simd<simd_avx2::Vec>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
}

void attend_tile_avx2(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                 const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                 int64_t window, float softcap, const float* sinks) {
  paged_attend_tile_simd<simd_avx2::Vec>(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out, out_stride,
                                       window, softcap, sinks);
}

void attend_softcap_avx2(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                 int64_t kv_head, const float* q, int n_q, float scale, float softcap, float* o, float* m,
                 float* l) {
  paged_attend_simd<simd_avx2::Vec>(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l, softcap);
}

void attend_heads_avx2(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int n_kv,
                  const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  attend_heads_tiled<simd_avx2::Vec>(view, blocks, p_begin, p_end, 0, n_kv, q, n_q, scale, softcap, o, m, l);
}

}  // namespace

void register_attention_kernels_avx2(KernelTable& t) {
  t.attention = {attend_avx2, attend_softcap_avx2, attend_tile_avx2, attend_heads_avx2};
}

}  // namespace pagoda
