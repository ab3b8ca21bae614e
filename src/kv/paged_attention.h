// Paged attention — softmax(q·Kᵀ·scale)·V for one GQA group of query heads, reading K/V
// in place through a block table (no gather into a contiguous copy), for every KV type.
//
// Contract: pure functions over a KvLayerView (pool memory, read-only) and caller-owned
// buffers; callable from any thread concurrently; no allocation in the SIMD paths (the
// scalar reference allocates). Dispatch on best_isa(): AVX-512 / AVX2 / scalar, all with
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

#include <cstdint>

#include "kernels/cpu_features.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {

// q: [n_q, head_dim] f32 (the query heads sharing KV head kv_head);
// blocks: the sequence's block ids by position / block_size (covering p_end - 1);
// o: [n_q, head_dim] f32, m, l: [n_q] f32 — outputs (overwritten).
// Requires: 0 <= p_begin <= p_end, n_q >= 1, head_dim <= kMaxAttnHeadDim.
using PagedAttendFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                               int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                               float* o, float* m, float* l);

constexpr int64_t kMaxAttnHeadDim = 4096;

// Scalar reference: dequantizes each row with kv_dequantize_row_ref, accumulates in double.
void paged_attend_partial_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                              int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                              float* o, float* m, float* l);
// The kernel of one ISA level (Scalar: the reference). Requires: isa_supported(isa).
PagedAttendFn paged_attend_kernel(Isa isa);
// Dispatches on best_isa().
void paged_attend_partial(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                          int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                          float* o, float* m, float* l);

// Soft-capped scores (Gemma 2): s = softcap · tanh(q·k·scale / softcap) before the softmax;
// otherwise as PagedAttendFn (partial results over [p_begin, p_end), mergeable). A sliding
// window is the caller's p_begin (= query position + 1 - window). Requires: softcap > 0.
using PagedAttendSoftcapFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                      int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                      float softcap, float* o, float* m, float* l);
void paged_attend_partial_softcap_ref(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                      int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                      float softcap, float* o, float* m, float* l);
PagedAttendSoftcapFn paged_attend_softcap_kernel(Isa isa);
void paged_attend_partial_softcap(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                  int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                  float softcap, float* o, float* m, float* l);

// Full attention over [0, n_ctx): out [n_q, head_dim] = normalized result.
// Requires: n_ctx >= 1.
void paged_attend(const KvLayerView& view, const BlockId* blocks, int64_t n_ctx, int64_t kv_head,
                  const float* q, int n_q, float scale, float* out);

// Rows per prefill tile (tokens × query heads of a group): 64 rows × head_dim 128 f32 =
// 32 KiB of accumulators, which stay in L1/L2 next to the 16 KiB K and V chunk tiles.
// Callers pick tile tokens = max(1, kAttnTileRows / n_q); the kernel splits larger tiles.
constexpr int kAttnTileRows = 64;

// Causal attention of n_tok consecutive query tokens of one sequence, at positions
// pos0 .. pos0 + n_tok - 1: row (token i, head h) attends [0, pos0 + i], or with a window
// w > 0 [max(0, pos0 + i - w + 1), pos0 + i]; scores soft-capped when softcap > 0.
// q: token i head h at q[i * q_stride + h * head_dim ..][head_dim] f32 (query heads of
// KV head kv_head); out: the normalized result at out[i * out_stride + h * head_dim ..].
// blocks covers position pos0 + n_tok - 1.
// Requires: pos0 >= 0, n_tok >= 1, n_q >= 1, head_dim <= kMaxAttnHeadDim; q and out
// rows do not overlap.
using PagedAttendTileFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                                   int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale,
                                   float* out, int64_t out_stride, int64_t window, float softcap);
// Scalar reference: paged_attend_partial_ref (or its soft-capped form) per token, then normalized.
void paged_attend_tile_ref(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                           int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale, float* out,
                           int64_t out_stride, int64_t window = 0, float softcap = 0.0f);
// The tile kernel of one ISA level (Scalar: the reference). Requires: isa_supported(isa).
PagedAttendTileFn paged_attend_tile_kernel(Isa isa);
// Dispatches on best_isa().
void paged_attend_tile(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok, int64_t kv_head,
                       const float* q, int64_t q_stride, int n_q, float scale, float* out, int64_t out_stride,
                       int64_t window = 0, float softcap = 0.0f);

// out [n_q, head_dim] from n_parts partials laid out as m, l: [n_parts][n_q],
// o: [n_parts][n_q][head_dim]. Requires: some part covers at least one position.
void merge_attention_partials(int n_parts, const float* m, const float* l, const float* o, int n_q,
                              int64_t head_dim, float* out);

}  // namespace pagoda
