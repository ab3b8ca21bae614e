// Paged attention — softmax(q·Kᵀ·scale)·V for one GQA group of query heads, reading K/V
// in place through a block table (no gather into a contiguous copy), for every KV type.
//
// Contract: pure functions over a KvLayerView (pool memory, read-only) and caller-owned
// buffers; callable from any thread concurrently; no allocation in the SIMD paths (the
// scalar reference allocates). The kernels of each level are the attention entries of its
// kernel table (kernel_table.h); the functions below run the active level's. All have
// the same math: per chunk of positions, dequantize K and V rows into an L1 tile (f32
// rows are read directly), scores for all heads of the group, an online-softmax update
// (one max and rescale per chunk, not per position), then o += w·V with the group's
// accumulators kept in registers. Quantized types are dequantized exactly as
// kv_dequantize_row_ref does, so paths differ only in summation order.
//
// Partial results (for splitting a long context across threads): over positions
// [p_begin, p_end), per query head h: m[h] = max score, l[h] = Σ exp(s - m[h]),
// o[h] = Σ exp(s - m[h]) · v (unnormalized). merge_attention_partials combines parts:
// M = max m_i, L = Σ l_i e^(m_i - M), out = Σ o_i e^(m_i - M) / L.
// Causal masking is the caller's p_end (= query position + 1). An empty range gives
// m = -inf, l = 0, o = 0, which merging ignores.
//
// Prefill tiles (paged_attend_tile): n_tok consecutive query tokens of one sequence ×
// the n_q query heads of one KV head form up to kAttnTileRows rows; every K/V chunk of
// the causal prefix is read (and dequantized) once for all rows, scores are a small
// matrix product Q [rows, head_dim] · K_chunkᵀ, softmax stays online per row, and the
// causal mask only cuts the chunks on the diagonal. The per-(token, head) path read the
// whole prefix once per token: O(T²) bytes; tiles divide that by the tile's token count.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "tensor/block_id.h"
#include "tensor/kv_types.h"

namespace pagoda {

// Whether KV head h's K in a block is stored transposed, [head_dim][block_size] elements
// (column-major: position `slot`'s element d at (d * block_size + slot) * element bytes from
// k_rows(b, h)) instead of [block_size][k_row_bytes] rows: the 16- and 32-bit float types
// up to head_dim 256 (the tiles' limit; wider heads use the dot-product path, which reads
// rows). Why: scores are q · Kᵀ, so the kernels want Kᵀ; with rows each chunk was
// transposed 8 x 8 in registers per tile, which for a decode row of 8 query heads cost as
// much as its scores (kv_bench BM_DecodeStreams: the transposes 18% of L2-hot decode
// attention). Quantized K (Q8 / Q4, with per-row scales) keeps rows. Same bytes per block.
inline bool kv_k_transposed(KvType t, int64_t head_dim) {
  return (t == KvType::F16 || t == KvType::BF16 || t == KvType::F32) && head_dim <= 256;
}

// What the attention kernels need to read one layer's blocks (PagedKvPool::layer_view).
// Valid while the pool lives.
struct KvLayerView {
  const uint8_t* base = nullptr;  // slab of block 0 + this layer's offset
  size_t block_stride = 0;        // bytes_per_block
  KvType k_type = KvType::F32, v_type = KvType::F32;
  int64_t block_size = 0, n_kv_heads = 0, head_dim = 0;
  size_t k_row_bytes = 0, v_row_bytes = 0;            // data bytes of one row
  size_t k_side_row_bytes = 0, v_side_row_bytes = 0;  // sidecar bytes of one row
  size_t v_offset = 0, k_side_offset = 0, v_side_offset = 0;  // from the layer's start
  bool k_transposed = false;  // = kv_k_transposed(k_type, head_dim): K as [head_dim][block_size]

  const uint8_t* layer(BlockId b) const { return base + static_cast<size_t>(static_cast<int32_t>(b)) * block_stride; }
  // [block_size][k_row_bytes] of KV head h, and its sidecar [block_size][k_side_row_bytes].
  const uint8_t* k_rows(BlockId b, int64_t h) const { return layer(b) + h * block_size * k_row_bytes; }
  const uint8_t* v_rows(BlockId b, int64_t h) const { return layer(b) + v_offset + h * block_size * v_row_bytes; }
  const uint8_t* k_side(BlockId b, int64_t h) const { return layer(b) + k_side_offset + h * block_size * k_side_row_bytes; }
  const uint8_t* v_side(BlockId b, int64_t h) const { return layer(b) + v_side_offset + h * block_size * v_side_row_bytes; }
};

// Position `slot` of block b's K for KV head h as head_dim f32 (kv_dequantize_row_ref's
// values), in either layout.
void kv_read_k_row(const KvLayerView& view, BlockId b, int64_t h, int64_t slot, float* out);

// Requests KV head h's K and V rows (and sidecars) of block b into L2, line by line.
inline void kv_prefetch_block(const KvLayerView& view, BlockId b, int64_t h) {
  const size_t k_bytes = static_cast<size_t>(view.block_size) * view.k_row_bytes;
  const size_t v_bytes = static_cast<size_t>(view.block_size) * view.v_row_bytes;
  const uint8_t* k = view.k_rows(b, h);
  const uint8_t* v = view.v_rows(b, h);
  for (size_t off = 0; off < k_bytes; off += 64) __builtin_prefetch(k + off, 0, 2);
  for (size_t off = 0; off < v_bytes; off += 64) __builtin_prefetch(v + off, 0, 2);
  if (view.k_side_row_bytes) __builtin_prefetch(view.k_side(b, h), 0, 2);
  if (view.v_side_row_bytes) __builtin_prefetch(view.v_side(b, h), 0, 2);
}

// The arguments of PagedAttendFn (kernel_table.h: the `attend` entry of each level) and of
// the functions below: q: [n_q, head_dim] f32 (the query heads sharing KV head kv_head);
// blocks: the sequence's block ids by position / block_size (covering p_end - 1);
// o: [n_q, head_dim] f32, m, l: [n_q] f32 — outputs (overwritten).
// Requires: 0 <= p_begin <= p_end, n_q >= 1, head_dim <= kMaxAttnHeadDim.

constexpr int64_t kMaxAttnHeadDim = 4096;

// Scalar reference: dequantizes each row with kv_dequantize_row_ref, accumulates in double.
void paged_attend_partial_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                              int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                              float* o, float* m, float* l);
// Runs the active level's kernel (active_kernels().attention.attend; kernel_table(isa) for one level).
void paged_attend_partial(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                          int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                          float* o, float* m, float* l);

// Soft-capped scores (Gemma 2): s = softcap · tanh(q·k·scale / softcap) before the softmax;
// otherwise as PagedAttendFn (partial results over [p_begin, p_end), mergeable). A sliding
// window is the caller's p_begin (= query position + 1 - window). Requires: softcap > 0.
// (PagedAttendSoftcapFn in kernel_table.h: the `attend_softcap` entry of each level.)
void paged_attend_partial_softcap_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                      int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                      float softcap, float* o, float* m, float* l);
void paged_attend_partial_softcap(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                  int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                  float softcap, float* o, float* m, float* l);

// Requests into L2 the K and V rows (and sidecars) of KV head kv_head in the first
// kAttnPrefetchBlocks blocks of [p_begin, p_end) (nothing when the range is empty). A
// caller that knows the range it attends next issues this before attending the current
// one: a decode row's first blocks were otherwise waited for from memory, since the
// kernels' own prefetch (two blocks ahead) starts with the row. Requires: blocks covers
// the blocks prefetched.
constexpr int64_t kAttnPrefetchBlocks = 2;
void paged_attend_prefetch(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end,
                           int64_t kv_head);

// Full attention over [0, n_ctx): out [n_q, head_dim] = normalized result.
// Requires: n_ctx >= 1.
void paged_attend(const KvLayerView& view, const BlockId* blocks, int64_t n_ctx, int64_t kv_head,
                  const float* q, int n_q, float scale, float* out);

// Rows per prefill tile (tokens × query heads of a group): 64 rows × head_dim 128 f32 =
// 32 KiB of accumulators, which stay in L1/L2 next to the 16 KiB K and V chunk tiles.
// Callers pick tile tokens = max(1, kAttnTileRows / n_q); the kernel splits larger tiles.
constexpr int kAttnTileRows = 64;

// Partial attention of one token's query heads over every KV head 0..n_kv-1 at once:
// q, o: [n_kv * n_q][head_dim] (KV head g's query heads at rows g * n_q ..), m, l:
// [n_kv * n_q]; softcap 0 = none; otherwise as paged_attend_partial(_softcap) per KV head,
// with the same results bit for bit. The positions are walked once, block by block, with
// every KV head of a block in turn: a block's K and V of all heads are one contiguous
// region of its layer, where one head at a time walked the context n_kv times in 4 KiB
// pieces (f16, 32-token blocks, head_dim 64) 700 KiB apart. Requires: n_kv * n_q <=
// kAttnTileRows, n_q <= 16, head_dim <= 256 (the decode path's callers check
// paged_attend_heads_fits).
// (PagedAttendHeadsFn in kernel_table.h: the `attend_heads` entry of each level.)
inline bool paged_attend_heads_fits(int64_t n_kv, int64_t n_q, int64_t head_dim) {
  return n_kv * n_q <= kAttnTileRows && n_q <= 16 && head_dim <= 256;  // 16: a kernel's group
}
void paged_attend_heads_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int n_kv,
                            const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l);
void paged_attend_heads(const KvLayerView& view, const BlockId* blocks, int64_t p_begin, int64_t p_end, int n_kv,
                        const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l);

// Causal attention of n_tok consecutive query tokens of one sequence, at positions
// pos0 .. pos0 + n_tok - 1: row (token i, head h) attends [0, pos0 + i], or with a window
// w > 0 [max(0, pos0 + i - w + 1), pos0 + i]; scores soft-capped when softcap > 0.
// q: token i head h at q[i * q_stride + h * head_dim ..][head_dim] f32 (query heads of
// KV head kv_head); out: the normalized result at out[i * out_stride + h * head_dim ..].
// blocks covers position pos0 + n_tok - 1.
// Requires: pos0 >= 0, n_tok >= 1, n_q >= 1, head_dim <= kMaxAttnHeadDim; q and out
// rows do not overlap.
// (PagedAttendTileFn in kernel_table.h: the `attend_tile` entry of each level.)
// Scalar reference: paged_attend_partial_ref (or its soft-capped form) per token, then normalized.
// sinks: null, or the n_q heads' sink logits (gpt-oss): each head's softmax denominator
// gains e^(sinks[h]) (see attention_denominator).
void paged_attend_tile_ref(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                           int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale, float* out,
                           int64_t out_stride, int64_t window = 0, float softcap = 0.0f,
                           const float* sinks = nullptr);
// Runs the active level's tile kernel (active_kernels().attention.attend_tile).
void paged_attend_tile(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                       const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                       int64_t window = 0, float softcap = 0.0f, const float* sinks = nullptr);

// out [n_q, head_dim] from n_parts partials laid out as m, l: [n_parts][n_q],
// o: [n_parts][n_q][head_dim]; sinks (null or [n_q]) join each head's denominator.
// Requires: some part covers at least one position.
void merge_attention_partials(int n_parts, const float* m, const float* l, const float* o, int n_q,
                              int64_t head_dim, float* out, const float* sinks = nullptr);

// The softmax denominator of a row whose partial result over its positions is (m, l), with
// an attention sink (a logit s whose value row is zero) when `sink` is not null:
// l + e^(s - m). The sink changes no score and no accumulator, only this sum, so every
// kernel stays as it is and the callers that normalise add it (rejected: a sink parameter
// in the decode and partial kernels, which would duplicate what the merge does anyway).
// e^(s - m) overflowing to inf gives out = 0, the limit of a sink that dominates.
inline float attention_denominator(float l, float m, const float* sink) {
  return sink ? l + std::exp(*sink - m) : l;
}

}  // namespace pagoda
