#include "kv/kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/ops.h"

namespace pagoda {

void KvStore::attend_batch(int layer, const AttnBatch& b, ThreadPool& pool) {
  // One task per (token, KV head): the query heads of a group read that group's K/V once.
  if (b.attend_end)
    for (int64_t t = 0; t < b.n_tokens; ++t)
      PAGODA_CHECK(b.attend_end[t] <= b.positions[t] + 1, "attend_batch: bidirectional rows need a paged store");
  const int64_t hpk = b.n_heads / b.n_kv_heads;
  const int64_t q_dim = b.n_heads * b.head_dim;
  pool.parallel_for(b.n_tokens * b.n_kv_heads, [&](int64_t task, int) {
    const int64_t t = task / b.n_kv_heads;
    const int g = static_cast<int>(task % b.n_kv_heads);
    attend(layer, b.seq_ids[t], b.positions[t], g, b.q + t * q_dim + g * hpk * b.head_dim,
           static_cast<int>(hpk), b.scale, b.out + t * q_dim + g * hpk * b.head_dim, b.window, b.softcap,
           b.sinks ? b.sinks + g * hpk : nullptr);
  });
}

ContiguousKvCache::ContiguousKvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim,
                                     int64_t ctx, int n_seqs)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), ctx_(ctx), n_seqs_(n_seqs) {
  size_t n = static_cast<size_t>(n_layers * n_seqs * ctx * n_kv_heads * head_dim);
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

size_t ContiguousKvCache::offset(int layer, SeqId seq, int64_t pos) const {
  return ((static_cast<size_t>(layer) * n_seqs_ + seq) * ctx_ + pos) * n_kv_heads_ * head_dim_;
}

void ContiguousKvCache::store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) {
  PAGODA_CHECK(layer >= 0 && layer < n_layers_ && seq >= 0 && seq < n_seqs_ && pos >= 0 && pos < ctx_,
               "KV store out of range");
  size_t off = offset(layer, seq, pos);
  std::memcpy(&k_[off], k, n_kv_heads_ * head_dim_ * sizeof(float));
  std::memcpy(&v_[off], v, n_kv_heads_ * head_dim_ * sizeof(float));
}

void ContiguousKvCache::attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q,
                               int n_q_heads, float scale, float* out, int64_t window, float softcap,
                               const float* sinks) const {
  PAGODA_CHECK(pos >= 0 && pos < ctx_, "attention position out of range");
  const int64_t hd = head_dim_;
  const size_t stride = static_cast<size_t>(n_kv_heads_ * hd);
  const float* kbase = &k_[offset(layer, seq, 0)] + kv_head * hd;
  const float* vbase = &v_[offset(layer, seq, 0)] + kv_head * hd;
  // Online softmax per query head: one pass over positions, no score matrix.
  for (int h = 0; h < n_q_heads; ++h) {
    const float* qh = q + h * hd;
    float* oh = out + h * hd;
    std::fill(oh, oh + hd, 0.0f);
    // A sink is a logit with a zero value row: the softmax starts from it.
    float m = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
    float l = sinks ? 1.0f : 0.0f;
    for (int64_t p = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; p <= pos; ++p) {
      float s = dot_f32(qh, kbase + p * stride, hd) * scale;
      if (softcap > 0.0f) s = softcap * std::tanh(s / softcap);
      if (s > m) {
        float corr = std::exp(m - s);
        scale_f32(oh, corr, hd);
        l *= corr;
        m = s;
      }
      float w = std::exp(s - m);
      l += w;
      axpy_f32(w, vbase + p * stride, oh, hd);
    }
    scale_f32(oh, 1.0f / l, hd);
  }
}

}  // namespace pagoda
