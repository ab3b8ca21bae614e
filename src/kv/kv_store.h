// KvStore — where a model's attention keys and values live, and attention over them.
//
// Contract: the forward pass calls store() for every token of a batch before it
// calls attend() for any token of that batch in the same layer, so a token sees
// its own K/V and those of earlier positions of its sequence (causal). attend()
// reads positions [0, pos] of `seq` for one query token. Implementations own
// their memory; they are used by one thread at a time (the engine thread) but
// attend() may be called concurrently from kernel workers for different
// (token, head group) pairs, so it must not mutate shared state.
// attend_batch() is the whole batch's attention of one layer, called by the owner
// thread, which fans out over `pool`; the default runs attend() once per (token, KV
// head), and the paged store (paged_kv_store.h) overrides it to split long contexts
// across threads. PagedKvStore (paged_kv_store.h) is the one the engine and every
// command run on; ContiguousKvCache below is the reference it is tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "kv/recurrent_states.h"

namespace pagoda {

// SeqId (recurrent_states.h) stays a plain integer alias (not a strong type like BlockId):
// Batch, the engine and tests use it as an index; the paged store keys a map by it.

// One layer's attention for a whole batch. q and out: [n_tokens, n_heads, head_dim] f32;
// token t attends to positions [0, positions[t]] of seq_ids[t] (with a window w > 0:
// [max(0, positions[t] - w + 1), positions[t]], a local layer of Gemma); query head h
// uses KV head h / (n_heads / n_kv_heads). Scores are q·k·scale, soft-capped to
// softcap · tanh(s / softcap) when softcap > 0 (Gemma 2), then softmaxed; with sinks
// (gpt-oss), head h's softmax has one more logit, sinks[h], that joins the denominator and
// weighs no value: out = Σ e^(s_i) v_i / (Σ e^(s_i) + e^(sinks[h])).
struct AttnBatch {
  int64_t n_tokens = 0;
  const SeqId* seq_ids = nullptr;    // [n_tokens]
  const int64_t* positions = nullptr;  // [n_tokens]
  const float* q = nullptr;          // [n_tokens, n_heads, head_dim] f32
  float* out = nullptr;              // [n_tokens, n_heads, head_dim] f32
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;    // 0: the whole causal prefix
  float softcap = 0.0f;  // 0: none
  const float* sinks = nullptr;  // [n_heads] sink logits, or null: none
  // [n_tokens] exclusive end of the positions each row sees (0: causal, position + 1), or
  // null: all causal. Rows past their own position (an image's bidirectional tokens) need
  // every K/V up to that end stored first; only PagedKvStore supports them.
  const int64_t* attend_end = nullptr;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  // k, v: [n_kv_heads, head_dim] f32 of one token at `pos` (pos < capacity(seq)).
  virtual void store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) = 0;
  // q: [n_heads_in_group, head_dim] f32 for the query heads that share KV head `kv_head`;
  // out: same shape, softmax(q·Kᵀ * scale) · V over positions 0..pos of `seq` (window,
  // softcap and sinks as in AttnBatch; sinks: the n_q_heads heads' own, or null).
  virtual void attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q,
                      int n_q_heads, float scale, float* out, int64_t window = 0,
                      float softcap = 0.0f, const float* sinks = nullptr) const = 0;
  // Positions a sequence may hold.
  virtual int64_t capacity(SeqId seq) const = 0;
  // Requires: every token's K/V of this layer stored. Owner thread only.
  virtual void attend_batch(int layer, const AttnBatch& batch, ThreadPool& pool);
  // Hybrid models' per-sequence recurrent state (recurrent_states.h), or null for a store
  // that keeps none.
  virtual RecurrentStates* recurrent() { return nullptr; }
};

// ContiguousKvCache — the simple store: for each sequence slot, each layer holds
// K and V as [ctx, n_kv_heads, head_dim] f32. Memory: 2 * n_layers * n_seqs * ctx
// * kv_dim * 4 bytes, allocated up front. No command uses it (generate, logits and
// serve all run on PagedKvStore); it stays as the simplest correct store, the
// reference the paged store and the model tests compare against (tests/kv,
// tests/model).
class ContiguousKvCache final : public KvStore {
 public:
  ContiguousKvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, int64_t ctx, int n_seqs);
  ContiguousKvCache(const ContiguousKvCache&) = delete;
  ContiguousKvCache& operator=(const ContiguousKvCache&) = delete;

  void store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) override;
  void attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q, int n_q_heads,
              float scale, float* out, int64_t window = 0, float softcap = 0.0f,
              const float* sinks = nullptr) const override;
  int64_t capacity(SeqId) const override { return ctx_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }
  RecurrentStates* recurrent() override { return &recurrent_; }

 private:
  size_t offset(int layer, SeqId seq, int64_t pos) const;
  int64_t n_layers_, n_kv_heads_, head_dim_, ctx_;
  int n_seqs_;
  std::vector<float> k_;  // [n_layers, n_seqs, ctx, n_kv_heads, head_dim]
  std::vector<float> v_;  // same
  RecurrentStates recurrent_;  // configured by the model's user (hybrid models)
};

}  // namespace pagoda
