// The SIMD paged-attention kernel written once over a vector-traits class, so the AVX2
// and AVX-512 paths are the same code at two widths (as kernels/ops_simd.h does).
//
// Include only from an ISA translation unit (paged_attention_avx2.cpp / _avx512.cpp),
// which instantiates it with that ISA's traits (kernels/simd_avx2.h / simd_avx512.h).
// Everything here has internal linkage, so each ISA file gets its own copy compiled with
// its own flags (no ODR merging across differently-flagged files).
//
// A traits class V provides, for V::Reg of V::kWidth floats: load, store,
// load_partial(p, n) (lanes >= n read 0, never touched), store_partial(p, r, n), set1,
// zero, add, mul, fmadd(a, b, c) = a*b + c, reduce_add; and the row decoders, each
// reading kWidth elements: cvt_f16(const uint16_t*), cvt_bf16(const uint16_t*),
// cvt_i8(const int8_t*), lo_nibbles(const uint8_t*) / hi_nibbles(const uint8_t*)
// (float of p[i] & 15 / p[i] >> 4).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/exp_simd.h"
#include "kernels/ops.h"
#include "kernels/paged_attention.h"
#include "tensor/types.h"

namespace pagoda {
namespace {

// Positions per chunk: one max/rescale of the accumulators per chunk, and the K and V
// tiles ([chunk][head_dim] f32 each) stay in L1: 32 × 128 × 4 = 16 KiB per tile.
constexpr int64_t kAttnChunk = 32;
constexpr int64_t kAttnTileFloats = kAttnChunk * 128;
// Query heads per kernel call; larger groups are split by the caller of the kernel.
constexpr int kAttnMaxGroup = 16;

// Decodes `n_rows` consecutive rows of type t into tile [n_rows][hd] f32.
template <class V>
void dequant_rows(KvType t, const uint8_t* data, const uint8_t* side, int64_t n_rows, int64_t hd,
                  size_t row_bytes, size_t side_bytes, float* tile) {
  constexpr int64_t W = V::kWidth;
  const int64_t hd_vec = hd / W * W;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* d = data + r * row_bytes;
    const uint8_t* s = side + r * side_bytes;
    float* out = tile + r * hd;
    switch (t) {
      case KvType::F32:
        std::memcpy(out, d, static_cast<size_t>(hd) * 4);
        break;
      case KvType::F16: {
        const uint16_t* in = reinterpret_cast<const uint16_t*>(d);
        for (int64_t i = 0; i < hd_vec; i += W) V::store(out + i, V::cvt_f16(in + i));
        for (int64_t i = hd_vec; i < hd; ++i) out[i] = f16_to_f32(in[i]);
        break;
      }
      case KvType::BF16: {
        const uint16_t* in = reinterpret_cast<const uint16_t*>(d);
        for (int64_t i = 0; i < hd_vec; i += W) V::store(out + i, V::cvt_bf16(in + i));
        for (int64_t i = hd_vec; i < hd; ++i) out[i] = bf16_to_f32(in[i]);
        break;
      }
      case KvType::Q8: {
        float sc;
        std::memcpy(&sc, s, sizeof sc);
        const int8_t* in = reinterpret_cast<const int8_t*>(d);
        const typename V::Reg vs = V::set1(sc);
        for (int64_t i = 0; i < hd_vec; i += W) V::store(out + i, V::mul(V::cvt_i8(in + i), vs));
        for (int64_t i = hd_vec; i < hd; ++i) out[i] = static_cast<float>(in[i]) * sc;
        break;
      }
      case KvType::Q4: {
        const int64_t g = q4_group_size(hd), half = g / 2;
        for (int64_t g0 = 0; g0 < hd; g0 += g) {
          const Q4Group p = q4_group_params(s + (g0 / g) * kQ4SideBytesPerGroup);
          const float dd = p.d, mm = p.m;
          const uint8_t* in = d + g0 / 2;
          if (half % W == 0) {
            const typename V::Reg vd = V::set1(dd), vm = V::set1(mm);
            for (int64_t i = 0; i < half; i += W) {
              V::store(out + g0 + i, V::fmadd(vd, V::lo_nibbles(in + i), vm));
              V::store(out + g0 + half + i, V::fmadd(vd, V::hi_nibbles(in + i), vm));
            }
          } else {
            for (int64_t i = 0; i < half; ++i) {
              out[g0 + i] = std::fma(dd, static_cast<float>(in[i] & 0x0F), mm);
              out[g0 + half + i] = std::fma(dd, static_cast<float>(in[i] >> 4), mm);
            }
          }
          out[g0 + p.outlier_idx] = p.outlier;
        }
        break;
      }
    }
  }
}

template <class V>
inline float dot_vec(const float* a, const float* b, int64_t n) {
  constexpr int64_t W = V::kWidth;
  typename V::Reg a0 = V::zero(), a1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 = V::fmadd(V::load(a + i), V::load(b + i), a0);
    a1 = V::fmadd(V::load(a + i + W), V::load(b + i + W), a1);
  }
  for (; i + W <= n; i += W) a0 = V::fmadd(V::load(a + i), V::load(b + i), a0);
  if (i < n) a1 = V::fmadd(V::load_partial(a + i, n - i), V::load_partial(b + i, n - i), a1);
  return V::reduce_add(V::add(a0, a1));
}

// Rows [n][hd] f32 of one block's K or V, starting at `data` (its `side` sidecar): read
// in place when stored f32, otherwise decoded into tile [n][hd].
template <class V>
inline const float* rows_f32(KvType t, const uint8_t* data, const uint8_t* side, int64_t n, int64_t hd,
                             size_t row_bytes, size_t side_bytes, float* tile) {
  if (t == KvType::F32) return reinterpret_cast<const float*>(data);
  dequant_rows<V>(t, data, side, n, hd, row_bytes, side_bytes, tile);
  return tile;
}

// K rows [n][hd] f32 of block b, slots [slot, slot + n), for one KV head.
template <class V>
inline const float* k_rows_f32(const KvLayerView& view, BlockId b, int64_t kv_head, int64_t slot, int64_t n,
                               float* tile) {
  return rows_f32<V>(view.k_type, view.k_rows(b, kv_head) + slot * view.k_row_bytes,
                     view.k_side(b, kv_head) + slot * view.k_side_row_bytes, n, view.head_dim, view.k_row_bytes,
                     view.k_side_row_bytes, tile);
}

// V rows [n][hd] f32 of block b, slots [slot, slot + n), for one KV head.
template <class V>
inline const float* v_rows_f32(const KvLayerView& view, BlockId b, int64_t kv_head, int64_t slot, int64_t n,
                               float* tile) {
  return rows_f32<V>(view.v_type, view.v_rows(b, kv_head) + slot * view.v_row_bytes,
                     view.v_side(b, kv_head) + slot * view.v_side_row_bytes, n, view.head_dim, view.v_row_bytes,
                     view.v_side_row_bytes, tile);
}

// Entering position p of [p_begin, p_end) (blocks of bs positions): prefetch the next
// blocks' rows of this head. Blocks are scattered, so the hardware prefetcher would
// restart on every one (measured: 16-token f16 blocks ran 1.6x slower than 128-token ones
// at 4k context without this). Two blocks ahead once running (the next one was requested
// a block ago).
inline void prefetch_ahead(const KvLayerView& view, const BlockId* blocks, int64_t p, int64_t p_begin,
                           int64_t p_end, int64_t kv_head) {
  const int64_t bs = view.block_size;
  if (p == p_begin) {
    for (int64_t next = p / bs + 1; next <= p / bs + 2 && next * bs < p_end; ++next)
      kv_prefetch_block(view, blocks[next], kv_head);
  } else if (p % bs == 0 && (p / bs + 2) * bs < p_end) {
    kv_prefetch_block(view, blocks[p / bs + 2], kv_head);
  }
}

// o[0, hd) *= c.
template <class V>
inline void scale_row(float* o, int64_t hd, float c) {
  constexpr int64_t W = V::kWidth;
  const typename V::Reg vc = V::set1(c);
  int64_t i = 0;
  for (; i + W <= hd; i += W) V::store(o + i, V::mul(V::load(o + i), vc));
  if (i < hd) V::store_partial(o + i, V::mul(V::load_partial(o + i, hd - i), vc), hd - i);
}

// One online-softmax step of a row: folds scores s[0, n) (n >= 1) into its running max
// *m and sum *l, rescaling its accumulator o [hd] when the max grows (one rescale per
// chunk), and leaves s[j] = exp(s[j] - *m), the weights of this chunk's V rows.
// All in registers, with exp_vec inlined, instead of scalar max / subtract / sum loops
// around an exp_f32 call per row (with k_transposed below: kv_bench prefill attention,
// 512 tokens f16, 21.5 -> 15.6 ms).
template <class V>
inline void online_softmax_step(float* s, int64_t n, float* m, float* l, float* o, int64_t hd) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t n_full = n / W * W;
  Reg vmax = V::set1(kNegInf);
  for (int64_t j = 0; j < n_full; j += W) vmax = V::max(V::load(s + j), vmax);
  if (n_full < n) vmax = V::max(V::load_partial(s + n_full, n - n_full, kNegInf), vmax);
  const float mx = V::reduce_max(vmax);
  if (mx > *m) {
    if (*l > 0.0f) {
      const float corr = std::exp(*m - mx);
      *l *= corr;
      scale_row<V>(o, hd, corr);
    }
    *m = mx;
  }
  const Reg vm = V::set1(*m);
  Reg sum = V::zero();
  for (int64_t j = 0; j < n_full; j += W) {
    const Reg e = exp_vec<V>(V::sub(V::load(s + j), vm));
    V::store(s + j, e);
    sum = V::add(sum, e);
  }
  if (n_full < n) {  // the tail's missing lanes read -inf: exp gives 0, the sum is unchanged
    const Reg e = exp_vec<V>(V::sub(V::load_partial(s + n_full, n - n_full, kNegInf), vm));
    V::store_partial(s + n_full, e, n - n_full);
    sum = V::add(sum, e);
  }
  *l += V::reduce_add(sum);
}

// Partial attention of n_q <= kAttnMaxGroup heads over [p_begin, p_end), one dot product
// per (head, position): the path for head_dim > 256 (beyond the tiles' Kᵀ buffer).
template <class V>
void attend_group_dot(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                  int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l,
                  float softcap = 0.0f) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  const int64_t hd = view.head_dim, bs = view.block_size;
  const int64_t chunk = std::min<int64_t>(kAttnChunk, std::max<int64_t>(1, kAttnTileFloats / hd));
  alignas(64) float ktile[kAttnTileFloats];
  alignas(64) float vtile[kAttnTileFloats];
  alignas(64) float s[kAttnMaxGroup * kAttnChunk];
  for (int h = 0; h < n_q; ++h) {
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  std::fill(o, o + n_q * hd, 0.0f);

  for (int64_t p = p_begin; p < p_end;) {
    const BlockId b = blocks[p / bs];
    const int64_t slot = p % bs;
    const int64_t n = std::min({chunk, bs - slot, p_end - p});
    prefetch_ahead(view, blocks, p, p_begin, p_end, kv_head);
    const float* K = k_rows_f32<V>(view, b, kv_head, slot, n, ktile);  // [n][hd]
    for (int64_t j = 0; j < n; ++j)
      for (int h = 0; h < n_q; ++h) s[h * kAttnChunk + j] = dot_vec<V>(q + h * hd, K + j * hd, hd) * scale;
    if (softcap > 0.0f)  // Gemma 2: one tanh per score, small next to the head_dim-long dot
      for (int h = 0; h < n_q; ++h) softcap_simd<V>(s + h * kAttnChunk, n, softcap);
    for (int h = 0; h < n_q; ++h) online_softmax_step<V>(s + h * kAttnChunk, n, m + h, l + h, o + h * hd, hd);
    const float* Vr = v_rows_f32<V>(view, b, kv_head, slot, n, vtile);  // [n][hd]
    // o[h] += Σ_j w[h][j] · V[j]: the accumulator of one W-wide column strip stays in a
    // register across the chunk's rows.
    for (int h = 0; h < n_q; ++h) {
      const float* sh = s + h * kAttnChunk;
      float* oh = o + h * hd;
      int64_t i = 0;
      for (; i + W <= hd; i += W) {
        Reg acc = V::load(oh + i);
        for (int64_t j = 0; j < n; ++j) acc = V::fmadd(V::set1(sh[j]), V::load(Vr + j * hd + i), acc);
        V::store(oh + i, acc);
      }
      if (i < hd) {
        const int64_t r = hd - i;
        Reg acc = V::load_partial(oh + i, r);
        for (int64_t j = 0; j < n; ++j) acc = V::fmadd(V::set1(sh[j]), V::load_partial(Vr + j * hd + i, r), acc);
        V::store_partial(oh + i, acc, r);
      }
    }
    p += n;
  }
}

// ---- prefill tiles ----------------------------------------------------------------------
//
// One tile = up to kAttnTileRows rows (token-major: row r = token i · n_q + head h).
// Per chunk of positions: K rows are dequantized once and transposed to Kᵀ [hd][chunk],
// so the scores of RB rows × NR·W positions are an outer-product micro-kernel (RB·NR
// accumulators in registers, each Kᵀ load shared by RB rows); then P·V as a 4-row ×
// 2-strip micro-kernel (each V load shared by 4 rows). Rejected: the decode kernel's
// dot product per (row, position) — one horizontal reduction per score, and K/V
// re-read per token (what made pp2048 ~1.4 s of attention per layer set).

// Kᵀ [hd][ks] (columns [n, n_pad) zero) of K rows [slot, slot + n) of block b: 8 x 8
// register transposes, reading f16 and f32 rows in place. The scalar element-by-element
// transpose it replaces was ~17% of prefill attention.
template <class V>
void k_transposed(const KvLayerView& view, BlockId b, int64_t kv_head, int64_t slot, int64_t n, int64_t n_pad,
                  float* ktile, float* kt, int64_t ks) {
  const int64_t hd = view.head_dim;
  if (view.k_transposed) {  // Kᵀ as stored: convert columns [slot, slot + n) of each row d
    constexpr int64_t W = V::kWidth;
    const uint8_t* base = view.k_rows(b, kv_head);
    const int64_t bs = view.block_size;
    for (int64_t d = 0; d < hd; ++d) {
      float* out = kt + d * ks;
      int64_t j = 0;
      switch (view.k_type) {
        case KvType::F16: {
          const uint16_t* in = reinterpret_cast<const uint16_t*>(base) + d * bs + slot;
          for (; j + W <= n; j += W) V::store(out + j, V::cvt_f16(in + j));
          for (; j < n; ++j) out[j] = f16_to_f32(in[j]);
          break;
        }
        case KvType::BF16: {
          const uint16_t* in = reinterpret_cast<const uint16_t*>(base) + d * bs + slot;
          for (; j + W <= n; j += W) V::store(out + j, V::cvt_bf16(in + j));
          for (; j < n; ++j) out[j] = bf16_to_f32(in[j]);
          break;
        }
        default:  // F32
          std::memcpy(out, reinterpret_cast<const float*>(base) + d * bs + slot, static_cast<size_t>(n) * sizeof(float));
          break;
      }
      for (j = n; j < n_pad; ++j) out[j] = 0.0f;
    }
    return;
  }
  const bool in_place = view.k_type == KvType::F16 || view.k_type == KvType::F32;
  const int64_t n8 = hd % 8 == 0 ? n / 8 * 8 : 0;
  if (n8 > 0) {
    // F16 / F32 rows are transposed where they lie; BF16 / Q8 / Q4 rows are decoded into
    // ktile first and transposed from there (an element-by-element transpose of the
    // decoded rows cost more than the scores it feeds: 2,048 moves per 32 positions).
    const uint8_t* base = view.k_rows(b, kv_head) + slot * view.k_row_bytes;
    size_t row_bytes = view.k_row_bytes;
    if (!in_place) {
      base = reinterpret_cast<const uint8_t*>(k_rows_f32<V>(view, b, kv_head, slot, n8, ktile));
      row_bytes = static_cast<size_t>(hd) * sizeof(float);
    }
    const bool f16 = view.k_type == KvType::F16;
    for (int64_t j0 = 0; j0 < n8; j0 += 8)
      for (int64_t d0 = 0; d0 < hd; d0 += 8) V::transpose8x8(base + j0 * row_bytes, row_bytes, f16, d0, kt + d0 * ks + j0, ks);
  }
  if (n8 < n) {  // the rest element by element
    const float* K = k_rows_f32<V>(view, b, kv_head, slot + n8, n - n8, ktile);  // [n - n8][hd]
    for (int64_t d = 0; d < hd; ++d)
      for (int64_t j = n8; j < n; ++j) kt[d * ks + j] = K[(j - n8) * hd + d];
  }
  for (int64_t d = 0; d < hd; ++d)
    for (int64_t j = n; j < n_pad; ++j) kt[d * ks + j] = 0.0f;
}

// Scores s[r][0, NR·W) = scale · q_r · Kᵀ for rows [r, r + RB).
template <class V, int NR, int RB>
inline void tile_scores_block(const float* const* qrow, int r, const float* kt, int64_t ks, int64_t hd, float scale,
                              float* s, int64_t ss) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  Reg acc[RB][NR];
  for (int a = 0; a < RB; ++a)
    for (int k = 0; k < NR; ++k) acc[a][k] = V::zero();
  for (int64_t d = 0; d < hd; ++d) {
    Reg kv[NR];
    for (int k = 0; k < NR; ++k) kv[k] = V::load(kt + d * ks + k * W);
    for (int a = 0; a < RB; ++a) {
      const Reg qa = V::set1(qrow[r + a][d]);
      for (int k = 0; k < NR; ++k) acc[a][k] = V::fmadd(qa, kv[k], acc[a][k]);
    }
  }
  const Reg vs = V::set1(scale);
  for (int a = 0; a < RB; ++a)
    for (int k = 0; k < NR; ++k) V::store(s + (r + a) * ss + k * W, V::mul(acc[a][k], vs));
}

template <class V, int NR>
inline void tile_scores(const float* const* qrow, int r0, int r1, const float* kt, int64_t ks, int64_t hd,
                        float scale, float* s, int64_t ss) {
  // 2 rows × 4 registers (AVX2, 32 positions) = 8 accumulators + 4 Kᵀ loads: 13 of 16 ymm.
  constexpr int RB = NR >= 3 ? 2 : 4;
  int r = r0;
  for (; r + RB <= r1; r += RB) tile_scores_block<V, NR, RB>(qrow, r, kt, ks, hd, scale, s, ss);
  for (; r < r1; ++r) tile_scores_block<V, NR, 1>(qrow, r, kt, ks, hd, scale, s, ss);
}

// o_r[i, i + NS·W) += Σ_j s[r][j] · V[j][i, i + NS·W) for rows [r, r + RB); `cols` < W
// means one partial strip.
template <class V, int RB, int NS>
inline void tile_pv_block(float* const* orow, int r, const float* s, int64_t ss, const float* vr, int64_t n,
                          int64_t hd, int64_t i, int64_t cols) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  const bool partial = cols < W;
  Reg acc[RB][NS];
  for (int a = 0; a < RB; ++a)
    for (int k = 0; k < NS; ++k)
      acc[a][k] = partial ? V::load_partial(orow[r + a] + i, cols) : V::load(orow[r + a] + i + k * W);
  for (int64_t j = 0; j < n; ++j) {
    Reg v[NS];
    for (int k = 0; k < NS; ++k)
      v[k] = partial ? V::load_partial(vr + j * hd + i, cols) : V::load(vr + j * hd + i + k * W);
    for (int a = 0; a < RB; ++a) {
      const Reg w = V::set1(s[(r + a) * ss + j]);
      for (int k = 0; k < NS; ++k) acc[a][k] = V::fmadd(w, v[k], acc[a][k]);
    }
  }
  for (int a = 0; a < RB; ++a)
    for (int k = 0; k < NS; ++k) {
      if (partial) {
        V::store_partial(orow[r + a] + i, acc[a][k], cols);
      } else {
        V::store(orow[r + a] + i + k * W, acc[a][k]);
      }
    }
}

template <class V, int RB>
inline void tile_pv_rows(float* const* orow, int r, const float* s, int64_t ss, const float* vr, int64_t n,
                         int64_t hd) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + 2 * W <= hd; i += 2 * W) tile_pv_block<V, RB, 2>(orow, r, s, ss, vr, n, hd, i, W);
  for (; i + W <= hd; i += W) tile_pv_block<V, RB, 1>(orow, r, s, ss, vr, n, hd, i, W);
  if (i < hd) tile_pv_block<V, RB, 1>(orow, r, s, ss, vr, n, hd, i, hd - i);
}

// Scores s[r][0, n) (rows [r0, r1), row stride kAttnChunk) of the chunk of n <= chunk
// positions at block b, slot `slot`: Kᵀ once, then the outer-product micro-kernel sized to
// the chunk (1-4 vectors of positions).
template <class V>
inline void chunk_scores(const KvLayerView& view, BlockId b, int64_t kv_head, int64_t slot, int64_t n,
                         const float* const* qrow, int r0, int r1, float* ktile, float* kt, int64_t ks, float scale,
                         float* s) {
  constexpr int64_t W = V::kWidth;
  const int64_t hd = view.head_dim;
  const int nr = static_cast<int>((n + W - 1) / W);
  k_transposed<V>(view, b, kv_head, slot, n, nr * W, ktile, kt, ks);
  switch (nr) {
    case 1: tile_scores<V, 1>(qrow, r0, r1, kt, ks, hd, scale, s, kAttnChunk); break;
    case 2: tile_scores<V, 2>(qrow, r0, r1, kt, ks, hd, scale, s, kAttnChunk); break;
    case 3: tile_scores<V, 3>(qrow, r0, r1, kt, ks, hd, scale, s, kAttnChunk); break;
    default: tile_scores<V, 4>(qrow, r0, r1, kt, ks, hd, scale, s, kAttnChunk); break;
  }
}

// o_r += Σ_j s[r][j] · V[j] for rows [r0, r1), four rows per V load.
template <class V>
inline void chunk_pv(float* const* orow, int r0, int r1, const float* s, const float* vr, int64_t n, int64_t hd) {
  int r = r0;
  for (; r + 4 <= r1; r += 4) tile_pv_rows<V, 4>(orow, r, s, kAttnChunk, vr, n, hd);
  for (; r < r1; ++r) tile_pv_rows<V, 1>(orow, r, s, kAttnChunk, vr, n, hd);
}

template <class V>
void attend_heads_tiled(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int g0,
                        int n_kv, const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l);

// Partial attention (m, l, unnormalized o) of n_q <= kAttnMaxGroup heads of one token
// over [p_begin, p_end), head_dim <= 256: the prefill tile's micro-kernels with the
// token's query heads as the rows. Per chunk, Kᵀ once, then scores as an outer product
// (each Kᵀ load shared by 2-4 heads, no horizontal reduction per score), and P·V four
// heads per V load. It replaced a dot product per (head, position), which ran decode
// attention at ~26 GFLOP/s on one Xeon core (kv_bench BM_DecodeAttention/4096, f16:
// 1.31 ms a layer) and made TinyLlama-shape decode at a 4k context 3x slower than at 0.
template <class V>
void attend_group_tiled(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                        int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l,
                        float softcap) {
  attend_heads_tiled<V>(view, blocks, p_begin, p_end, static_cast<int>(kv_head), 1, q, n_q, scale, softcap, o, m, l);
}

// KV heads g0 .. g0 + n_kv - 1 of one token (paged_attend_heads; attend_group_tiled is one
// head): the positions walked once, each chunk's heads in turn, each head's rows through
// chunk_scores, the online softmax and chunk_pv.
template <class V>
void attend_heads_tiled(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int g0,
                        int n_kv, const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  const int64_t hd = view.head_dim, bs = view.block_size;
  const int64_t chunk = hd <= 128 ? kAttnChunk : kAttnChunk / 2;
  const int64_t ks = chunk;
  alignas(64) float kt[kAttnTileFloats];
  alignas(64) float ktile[kAttnTileFloats];
  alignas(64) float vtile[kAttnTileFloats];
  alignas(64) float s[kAttnMaxGroup * kAttnChunk];
  const float* qrow[kAttnTileRows];
  float* orow[kAttnTileRows];
  const int n_rows = n_kv * n_q;
  for (int r = 0; r < n_rows; ++r) {
    qrow[r] = q + r * hd;
    orow[r] = o + r * hd;
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
  }
  std::fill(o, o + n_rows * hd, 0.0f);
  for (int64_t p = p_begin; p < p_end;) {
    const BlockId b = blocks[p / bs];
    const int64_t slot = p % bs;
    const int64_t n = std::min({chunk, bs - slot, p_end - p});
    for (int g = 0; g < n_kv; ++g) {
      prefetch_ahead(view, blocks, p, p_begin, p_end, g0 + g);
      const float* const* qg = qrow + g * n_q;
      float* const* og = orow + g * n_q;
      chunk_scores<V>(view, b, g0 + g, slot, n, qg, 0, n_q, ktile, kt, ks, scale, s);
      if (softcap > 0.0f)
        for (int h = 0; h < n_q; ++h) softcap_simd<V>(s + h * kAttnChunk, n, softcap);
      for (int h = 0; h < n_q; ++h)
        online_softmax_step<V>(s + h * kAttnChunk, n, m + g * n_q + h, l + g * n_q + h, og[h], hd);
      const float* Vr = v_rows_f32<V>(view, b, g0 + g, slot, n, vtile);  // [n][hd]
      chunk_pv<V>(og, 0, n_q, s, Vr, n, hd);
    }
    p += n;
  }
}

template <class V>
void paged_attend_simd(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                       int64_t kv_head, const float* q, int n_q, float scale, float* o, float* m, float* l,
                       float softcap = 0.0f) {
  if (view.head_dim > kAttnTileFloats) {  // wider than a tile row: the reference handles it
    if (softcap > 0.0f)
      paged_attend_partial_softcap_ref(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, softcap, o, m, l);
    else
      paged_attend_partial_ref(view, blocks, p_begin, p_end, kv_head, q, n_q, scale, o, m, l);
    return;
  }
  const int64_t hd = view.head_dim;
  for (int h0 = 0; h0 < n_q; h0 += kAttnMaxGroup) {
    const int g = std::min(kAttnMaxGroup, n_q - h0);
    if (hd <= 256)
      attend_group_tiled<V>(view, blocks, p_begin, p_end, kv_head, q + h0 * hd, g, scale, o + h0 * hd, m + h0,
                            l + h0, softcap);
    else
      attend_group_dot<V>(view, blocks, p_begin, p_end, kv_head, q + h0 * hd, g, scale, o + h0 * hd, m + h0,
                          l + h0, softcap);
  }
}

// One tile: n_tok · n_q <= kAttnTileRows rows, head_dim <= 256.
template <class V>
void attend_tile_rows(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                      const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                      int64_t window, float softcap, const float* sinks) {
  const int64_t hd = view.head_dim, bs = view.block_size;
  // Kᵀ is [hd][chunk]: 32 positions for head_dim <= 128, 16 up to 256 (16 KiB either way).
  const int64_t chunk = hd <= 128 ? kAttnChunk : kAttnChunk / 2;
  const int64_t ks = chunk;  // a multiple of W for both widths
  alignas(64) float kt[kAttnTileFloats];
  alignas(64) float ktile[kAttnTileFloats];
  alignas(64) float vtile[kAttnTileFloats];
  alignas(64) float s[kAttnTileRows * kAttnChunk];
  float m[kAttnTileRows], l[kAttnTileRows];
  const float* qrow[kAttnTileRows];
  float* orow[kAttnTileRows];
  const int n_rows = n_tok * n_q;
  for (int i = 0; i < n_tok; ++i)
    for (int h = 0; h < n_q; ++h) {
      const int r = i * n_q + h;
      qrow[r] = q + i * q_stride + h * hd;
      orow[r] = out + i * out_stride + h * hd;
      std::fill(orow[r], orow[r] + hd, 0.0f);
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
    }

  const int64_t p_end = pos0 + n_tok;
  // A window starts the sweep at the first row's first visible position; later rows mask
  // the head of the chunks before their own window (Gemma's local layers).
  const int64_t p_begin = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
  for (int64_t p = p_begin; p < p_end;) {
    const BlockId b = blocks[p / bs];
    const int64_t slot = p % bs;
    const int64_t n = std::min({chunk, bs - slot, p_end - p});
    prefetch_ahead(view, blocks, p, p_begin, p_end, kv_head);
    // Rows of tokens before p see nothing of this chunk (token-major: a prefix of rows).
    const int r_begin = static_cast<int>(std::max<int64_t>(0, p - pos0)) * n_q;

    chunk_scores<V>(view, b, kv_head, slot, n, qrow, r_begin, n_rows, ktile, kt, ks, scale, s);
    if (softcap > 0.0f)
      for (int r = r_begin; r < n_rows; ++r) softcap_simd<V>(s + r * kAttnChunk, n, softcap);
    // Online softmax per row over its visible positions [max(p, pos - window + 1),
    // min(p + n, pos + 1)); the masked head (window) and tail (diagonal) get weight 0.
    for (int r = r_begin; r < n_rows; ++r) {
      const int64_t pos = pos0 + r / n_q;
      const int64_t n_vis = std::min<int64_t>(n, pos - p + 1);
      const int64_t j0 = window > 0 ? std::clamp<int64_t>(pos - window + 1 - p, 0, n_vis) : 0;
      float* sr = s + r * kAttnChunk;
      if (j0 < n_vis) online_softmax_step<V>(sr + j0, n_vis - j0, m + r, l + r, orow[r], hd);
      for (int64_t j = 0; j < j0; ++j) sr[j] = 0.0f;
      for (int64_t j = n_vis; j < n; ++j) sr[j] = 0.0f;
    }
    const float* Vr = v_rows_f32<V>(view, b, kv_head, slot, n, vtile);  // [n][hd]
    chunk_pv<V>(orow, r_begin, n_rows, s, Vr, n, hd);
    p += n;
  }
  for (int r = 0; r < n_rows; ++r)
    scale_row<V>(orow[r], hd, 1.0f / attention_denominator(l[r], m[r], sinks ? sinks + r % n_q : nullptr));
}

template <class V>
void paged_attend_tile_simd(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                            int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale, float* out,
                            int64_t out_stride, int64_t window, float softcap, const float* sinks) {
  const int64_t hd = view.head_dim;
  if (hd > 256) {  // beyond the tile's Kᵀ buffer: token by token on the decode kernel
    float m[kAttnMaxGroup], l[kAttnMaxGroup];
    for (int i = 0; i < n_tok; ++i)
      for (int h0 = 0; h0 < n_q; h0 += kAttnMaxGroup) {
        const int g = std::min(kAttnMaxGroup, n_q - h0);
        float* o = out + i * out_stride + h0 * hd;
        const int64_t pos = pos0 + i;
        paged_attend_simd<V>(view, blocks, window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, pos + 1, kv_head,
                             q + i * q_stride + h0 * hd, g, scale, o, m, l, softcap);
        for (int h = 0; h < g; ++h) {
          const float den = attention_denominator(l[h], m[h], sinks ? sinks + h0 + h : nullptr);
          for (int64_t d = 0; d < hd; ++d) o[h * hd + d] /= den;
        }
      }
    return;
  }
  const int hg = std::min(n_q, kAttnTileRows);
  for (int h0 = 0; h0 < n_q; h0 += hg) {
    const int nh = std::min(hg, n_q - h0);
    const int tt = std::max(1, kAttnTileRows / nh);
    for (int i0 = 0; i0 < n_tok; i0 += tt)
      attend_tile_rows<V>(view, blocks, pos0 + i0, std::min(tt, n_tok - i0), kv_head, q + i0 * q_stride + h0 * hd,
                          q_stride, nh, scale, out + i0 * out_stride + h0 * hd, out_stride, window, softcap,
                          sinks ? sinks + h0 : nullptr);
  }
}

}  // namespace
}  // namespace pagoda
