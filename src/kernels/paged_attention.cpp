#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

namespace pagoda {

namespace {

void partial_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int64_t kv_head,
                 const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  const int64_t hd = view.head_dim, bs = view.block_size;
  const int64_t n = p_end - p_begin;
  std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));
  std::vector<double> s(static_cast<size_t>(n_q * std::max<int64_t>(n, 1)));
  for (int64_t p = p_begin; p < p_end; ++p) {
    const BlockId b = blocks[p / bs];
    const int64_t slot = p % bs;
    kv_read_k_row(view, b, kv_head, slot, k.data());
    for (int h = 0; h < n_q; ++h) {
      double acc = 0;
      for (int64_t i = 0; i < hd; ++i) acc += static_cast<double>(q[h * hd + i]) * k[i];
      s[h * n + (p - p_begin)] = softcap > 0 ? softcap * std::tanh(acc * scale / softcap) : acc * scale;
    }
  }
  for (int h = 0; h < n_q; ++h) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[h * n + j]);
    m[h] = static_cast<float>(mx);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[h * n + j] = std::exp(s[h * n + j] - mx);
      sum += s[h * n + j];
    }
    l[h] = static_cast<float>(sum);
  }
  std::vector<double> acc(static_cast<size_t>(n_q * hd), 0.0);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const BlockId b = blocks[p / bs];
    const int64_t slot = p % bs;
    kv_dequantize_row_ref(view.v_type, view.v_rows(b, kv_head) + slot * view.v_row_bytes,
                          view.v_side(b, kv_head) + slot * view.v_side_row_bytes, hd, v.data());
    for (int h = 0; h < n_q; ++h) {
      const double w = s[h * n + (p - p_begin)];
      for (int64_t i = 0; i < hd; ++i) acc[h * hd + i] += w * v[i];
    }
  }
  for (int64_t i = 0; i < n_q * hd; ++i) o[i] = static_cast<float>(acc[i]);
}

}  // namespace

void kv_read_k_row(const KvLayerView& view, BlockId b, int64_t h, int64_t slot, float* out) {
  const int64_t hd = view.head_dim;
  if (!view.k_transposed) {
    kv_dequantize_row_ref(view.k_type, view.k_rows(b, h) + slot * view.k_row_bytes,
                          view.k_side(b, h) + slot * view.k_side_row_bytes, hd, out);
    return;
  }
  const uint8_t* kt = view.k_rows(b, h);
  const size_t es = view.k_row_bytes / static_cast<size_t>(hd);
  for (int64_t d = 0; d < hd; ++d)
    kv_dequantize_row_ref(view.k_type, kt + static_cast<size_t>(d * view.block_size + slot) * es, nullptr, 1, out + d);
}

void paged_attend_prefetch(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                           int64_t kv_head) {
  const int64_t bs = view.block_size;
  if (p_begin >= p_end) return;
  for (int64_t b = p_begin / bs; b < p_begin / bs + kAttnPrefetchBlocks && b * bs < p_end; ++b)
    kv_prefetch_block(view, blocks[b], kv_head);
}

void paged_attend_partial_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                              int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                              float* o, float* m, float* l) {
  partial_ref(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, 0.0f, o, m, l);
}

void paged_attend_partial_softcap_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                      int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                      float softcap, float* o, float* m, float* l) {
  PAGODA_CHECK(softcap > 0, "paged_attend_partial_softcap: softcap must be > 0");
  partial_ref(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, softcap, o, m, l);
}

void paged_attend_tile_ref(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                           int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale, float* out,
                           int64_t out_stride, int64_t window, float softcap, const float* sinks) {
  const int64_t hd = view.head_dim;
  std::vector<float> m(static_cast<size_t>(n_q)), l(static_cast<size_t>(n_q));
  for (int i = 0; i < n_tok; ++i) {
    float* o = out + i * out_stride;
    const int64_t pos = pos0 + i;
    partial_ref(view, blocks, window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, pos + 1, kv_head,
                q + i * q_stride, n_q, scale, softcap, o, m.data(), l.data());
    for (int h = 0; h < n_q; ++h) {
      const float den = attention_denominator(l[h], m[h], sinks ? sinks + h : nullptr);
      for (int64_t d = 0; d < hd; ++d) o[h * hd + d] /= den;
    }
  }
}

void paged_attend_heads_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int n_kv,
                            const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  const int64_t hd = view.head_dim;
  for (int g = 0; g < n_kv; ++g) {
    const int64_t r = static_cast<int64_t>(g) * n_q;
    partial_ref(view, blocks, p_begin, p_end, g, q + r * hd, n_q, scale, softcap, o + r * hd, m + r, l + r);
  }
}

void register_attention_kernels_scalar(KernelTable& t) {
  t.attention = {paged_attend_partial_ref, paged_attend_partial_softcap_ref,
                 [](const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                    const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                    int64_t window, float softcap, const float* sinks) {
                   paged_attend_tile_ref(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out,
                                         out_stride, window, softcap, sinks);
                 },
                 paged_attend_heads_ref};
}

namespace {
const AttentionKernels& active() {
  static const AttentionKernels& k = active_kernels().attention;
  return k;
}
}  // namespace

void paged_attend_partial_softcap(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                  int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                  float softcap, float* o, float* m, float* l) {
  active().attend_softcap(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, softcap, o, m, l);
}

void paged_attend_partial(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                          int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                          float* o, float* m, float* l) {
  active().attend(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
}

void paged_attend_heads(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int n_kv,
                        const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  active().attend_heads(view, blocks, p_begin, p_end, n_kv, q, n_q, scale, softcap, o, m, l);
}

void paged_attend_tile(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                       const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                       int64_t window, float softcap, const float* sinks) {
  active().attend_tile(view, blocks, pos0, n_tok, kv_head, q, q_stride, n_q, scale, out, out_stride, window, softcap,
                       sinks);
}

void paged_attend(const KvLayerView& view, const BlockId* blocks, int64_t n_ctx, int64_t kv_head,
                  const float* q, int n_q, float scale, float* out) {
  PAGODA_CHECK(n_ctx >= 1, "paged_attend: empty context");
  constexpr int kGroup = 64;
  float m[kGroup], l[kGroup];
  const int64_t hd = view.head_dim;
  for (int h0 = 0; h0 < n_q; h0 += kGroup) {
    const int g = std::min(kGroup, n_q - h0);
    paged_attend_partial(view, blocks, 0, n_ctx, kv_head, q + h0 * hd, g, scale, out + h0 * hd, m, l);
    for (int h = 0; h < g; ++h) {
      const float inv = 1.0f / l[h];
      float* oh = out + (h0 + h) * hd;
      for (int64_t i = 0; i < hd; ++i) oh[i] *= inv;
    }
  }
}

void merge_attention_partials(int n_parts, const float* m, const float* l, const float* o, int n_q,
                              int64_t hd, float* out, const float* sinks) {
  for (int h = 0; h < n_q; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_parts; ++p) mx = std::max(mx, m[p * n_q + h]);
    float* oh = out + h * hd;
    std::fill(oh, oh + hd, 0.0f);
    float sum = 0.0f;
    for (int p = 0; p < n_parts; ++p) {
      if (l[p * n_q + h] == 0.0f) continue;  // empty part
      const float c = std::exp(m[p * n_q + h] - mx);
      sum += l[p * n_q + h] * c;
      const float* op = o + (static_cast<int64_t>(p) * n_q + h) * hd;
      for (int64_t i = 0; i < hd; ++i) oh[i] += c * op[i];
    }
    const float inv = 1.0f / attention_denominator(sum, mx, sinks ? sinks + h : nullptr);
    for (int64_t i = 0; i < hd; ++i) oh[i] *= inv;
  }
}

}  // namespace pagoda
