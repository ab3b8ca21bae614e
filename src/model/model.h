// Model — the weights of a Llama-family model and its batched forward pass.
//
// Contract:
// - load() validates the architecture and every tensor (present, shape, type)
//   and throws pagoda::Error naming the file and tensor on any problem. Weights
//   stay in their GGUF (possibly quantized) form, viewed through the
//   WeightSource (a GGUF mapping, or a Hugging Face directory's safetensors
//   mappings and owned copies: model/hf_model.h), which the Model keeps alive
//   (shared_ptr). Non-copyable.
// - forward() runs one batch: any number of tokens, each with its sequence id
//   and position (positions of one sequence strictly increasing and contiguous
//   with what the KvStore already holds). It writes K/V of every token into the
//   KvStore and returns logits for the tokens whose `want_logits` is set, in
//   batch order: logits is resized to [n_out, n_vocab] f32. Given `hidden`, it also
//   returns the final hidden states (after the output norm, before the vocabulary
//   projection: what embeddings pool) of the tokens whose `want_hidden` is set, in
//   batch order: hidden is resized to [n_hidden, dim] f32. A row may want both.
// - A reranker's classification head (cls.output.weight [n_cls_out, dim], optional
//   cls.output.bias, as llama.cpp's converter writes Qwen3-Reranker: the lm_head rows
//   of "yes" and "no") is loaded when the file has one; classify() applies it.
// - Called from one thread (the engine thread); kernels fan out over `pool`.
//   forward() reuses scratch buffers owned by the Model, so a warmed-up decode
//   step allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/weights.h"
#include "kv/kv_store.h"

namespace pagoda {

struct Batch {
  std::vector<int32_t> tokens;      // [n_tokens]
  std::vector<int64_t> positions;   // [n_tokens]
  std::vector<SeqId> seq_ids;       // [n_tokens]
  std::vector<uint8_t> want_logits; // [n_tokens] 0/1
  std::vector<uint8_t> want_hidden; // [n_tokens] 0/1 (embeddings: the pooled rows)
  // Image tokens (add_embedded): rows whose input is an embedding row of the model's width
  // (a vision projector's output, used as is: Gemma's sqrt(dim) scale applies to token
  // embeddings only, as llama.cpp does; Gemma 4's per-layer embedding of such a row is the
  // padding token's, id 0) instead of a token's. embd[t] null for token rows;
  // the token id of an embedded row is not read. Empty when no row of the batch has one.
  std::vector<const float*> embd;
  // Rows that attend past their own position: an image's tokens see the whole image
  // (Gemma 3's bidirectional image attention) — the exclusive end of what row t sees;
  // 0 = causal (position + 1). Every row up to that end must be in the same batch or
  // already stored. Empty when no row has one.
  std::vector<int64_t> attend_end;
  // M-RoPE positions (Qwen 3.5 with images: ModelConfig::rope_sections): row t rotates by
  // (temporal, height, width) = mrope[t] instead of positions[t] in every section, the
  // fourth section by 0 (llama.cpp's layout for text and image rows alike). positions[t]
  // stays the KV slot (contiguous), which also decides what row t sees. Empty: each row's
  // three are its position. Set for every row or none (set_mrope after the rows are added).
  std::vector<std::array<int64_t, 3>> mrope;

  void clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
    want_hidden.clear();
    embd.clear();
    attend_end.clear();
    mrope.clear();
  }
  void add(int32_t token, int64_t pos, SeqId seq, bool logits, bool hidden = false) {
    tokens.push_back(token);
    positions.push_back(pos);
    seq_ids.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
    want_hidden.push_back(hidden ? 1 : 0);
    if (!embd.empty()) {
      embd.push_back(nullptr);
      attend_end.push_back(0);
    }
  }
  // A row fed from `row` ([dim] f32, valid until forward() returns) at `pos`, seeing
  // positions [.., end) (0: causal). `token` is kept for bookkeeping only.
  void add_embedded(int32_t token, const float* row, int64_t pos, SeqId seq, int64_t end, bool logits) {
    if (embd.empty()) {
      embd.assign(tokens.size(), nullptr);
      attend_end.assign(tokens.size(), 0);
    }
    tokens.push_back(token);
    positions.push_back(pos);
    seq_ids.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
    want_hidden.push_back(0);
    embd.push_back(row);
    attend_end.push_back(end);
  }
  bool embedded(size_t t) const { return !embd.empty() && embd[t] != nullptr; }
  size_t size() const { return tokens.size(); }
};

// Sizes `states` for a hybrid model's recurrent layers (slots, floats per slot); a no-op
// for a model without any. Call on a store before its first forward().
void configure_recurrent_states(const ModelConfig& c, RecurrentStates& states);
// One sequence's recurrent state in bytes (every recurrent layer); 0 for other models.
uint64_t recurrent_state_bytes(const ModelConfig& c);

struct LoadProgress {
  // Called after each tensor is prepared: (done, total). May be empty.
  std::function<void(size_t, size_t)> on_tensor;
};

class Model {
 public:
  // Throws pagoda::Error (see contract).
  static std::unique_ptr<Model> load(std::shared_ptr<const gguf::GgufFile> file,
                                     const LoadProgress& progress = {});
  // From a config and tensors in GGUF naming (e.g. a Hugging Face directory).
  // Requires: config valid (as from_gguf / from_hf_json return it).
  static std::unique_ptr<Model> load(const ModelConfig& config, std::shared_ptr<const WeightSource> weights,
                                     const LoadProgress& progress = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  // Requires: loaded from a GGUF file (has_file()).
  const gguf::GgufFile& file() const {
    PAGODA_CHECK(file_ != nullptr, "model was not loaded from a GGUF file");
    return *file_;
  }
  bool has_file() const { return file_ != nullptr; }
  const WeightSource& weights() const { return *weights_; }

  // Requires: every token id in [0, n_vocab), positions < kv.capacity(seq).
  // Throws pagoda::Error for out-of-range tokens or positions (bad input).
  // `hidden` may be null when no token wants its hidden state.
  void forward(const Batch& batch, KvStore& kv, ThreadPool& pool, std::vector<float>& logits,
               std::vector<float>* hidden = nullptr);

  // Rows of the reranker head (cls.output.weight); 0 when the model has none.
  int64_t n_cls_out() const { return cls_out_.n_rows(); }
  // out[n, n_cls_out] = hidden[n, dim] · cls_outᵀ (+ cls.output.bias): the head's raw
  // outputs (logits) for n final hidden states. Requires: n_cls_out() > 0; the
  // forward's thread (it shares the kernels' scratch).
  void classify(const float* hidden, int64_t n, float* out, ThreadPool& pool) const;

  // The context length per sequence the model will run with (the engine's
  // ctx_size). It matters only for LongRoPE (Phi-3): the long factors apply
  // when n_ctx > rope.scaling.original_context_length, the short ones
  // otherwise, fixed for the model's life as llama.cpp fixes them per context
  // (HF transformers instead switches per forward call on the current length,
  // which re-rotates nothing already cached). load() assumes the model's
  // ctx_len. Requires: n_ctx > 0; no forward() running.
  void set_context_size(int64_t n_ctx);
  // True when LongRoPE's long factors are in use (false without LongRoPE).
  bool uses_long_rope_factors() const { return rope_long_in_use_; }

  // Bytes of all weight matrices as the kernels stream them (every expert counted).
  size_t weight_bytes() const;
  // Bytes one decode step reads: every dense matrix, the router, k of the
  // n_expert experts of each layer, and one embedding row. Equals
  // weight_bytes() plus a row for dense models. The decode roofline's denominator.
  size_t decode_step_bytes() const;
  // Bytes of the model file's tensor data.
  size_t file_tensor_bytes() const;
  // Bytes the weights keep resident once every one has been read: repacked
  // copies, the file bytes still read in place (an untied embedding, unrepacked
  // matrices), f32 copies of norms and biases. Repacked matrices' file pages are
  // dropped at load (WeightSource::drop_resident), so they are not counted; a tied
  // embedding is read from the repacked output copy and counted once. An
  // accounting figure, not a measurement: process RSS also holds the KV cache,
  // scratch and code (common/process_memory.h measures it).
  size_t resident_weight_bytes() const;

 private:
  struct Layer;
  struct Scratch;
  Model() = default;
  // Mixture-of-experts FFN of layer L over the batch's T rows `in` ([T, dim], normed),
  // routed by the router's logits of `router_in` ([T, dim]), added into `out` ([T, dim]):
  // the routed experts, and the gated shared expert where the row has one.
  void moe_ffn(const Layer& L, int64_t T, const float* router_in, const float* in, float* out, ThreadPool& pool);
  // Bytes of layer L's matrices that every token streams (all but the routed experts).
  static size_t dense_stream_bytes(const Layer& L);
  // Gemma 4's per-layer embedding term of layer `layer` and its output scale, on scratch x.
  void per_layer_output(const Layer& L, int64_t layer, int64_t T, ThreadPool& pool);
  // Gemma 4's per-layer inputs of the batch (scratch pl_inp [T, n_layers, per_layer_dim])
  // from its tokens and their scaled embeddings (scratch x).
  void per_layer_inputs(const Batch& batch, ThreadPool& pool);
  // The mixer's output (scratch tmp) added into the residual, then layer L's FFN block.
  void ffn_block(const Layer& L, int64_t T, ThreadPool& pool);
  // A Gated DeltaNet layer over the batch's normed rows (scratch xn) into scratch tmp,
  // each sequence continuing its recurrent state (slot `slot` of `states`).
  void linear_attention(const Layer& L, int64_t slot, const Batch& batch, RecurrentStates& states,
                        ThreadPool& pool);
  // The forward pass's steps (model_forward.cpp), in order. check_batch: the arrays agree,
  // tokens and positions are in range (pagoda::Error otherwise); returns whether any row
  // wants its hidden state.
  bool check_batch(const Batch& batch, const KvStore& kv, const std::vector<float>* hidden) const;
  void embed(const Batch& batch, ThreadPool& pool);  // scratch x (and Gemma 4's pl_inp)
  void rope_tables(const Batch& batch);              // scratch rope_cos/sin (and local)
  void mrope_tables(const Batch& batch);             // rope_cos/sin of rows with M-RoPE positions
  // Hybrid models: the batch's sequences and their states (null for other models).
  RecurrentStates* claim_recurrent_states(const Batch& batch, KvStore& kv);
  void advance_recurrent_states(const Batch& batch, RecurrentStates& states);
  void input_norm(const Layer& L, int64_t T, ThreadPool& pool);  // scratch x -> xn
  // An attention layer over scratch xn into scratch tmp (its K/V into the store).
  void attention(const Layer& L, int layer, const Batch& batch, KvStore& kv, ThreadPool& pool);
  void hidden_states(const Batch& batch, std::vector<float>& hidden);
  void output_logits(const Batch& batch, ThreadPool& pool, std::vector<float>& logits);

  std::shared_ptr<const gguf::GgufFile> file_;  // null unless loaded from GGUF
  std::shared_ptr<const WeightSource> weights_;
  ModelConfig config_;
  const gguf::TensorInfo* token_embd_ = nullptr;
  // Tied embeddings with output_ repacked: rows are read from output_ (read_row), and
  // token_embd_'s bytes were dropped (or freed: then token_embd_->data is null).
  bool embd_from_output_ = false;
  std::vector<float> output_norm_;  // [dim]
  WeightMatrix output_;              // [n_vocab, dim]
  WeightMatrix cls_out_;             // [n_cls_out, dim] reranker head, or empty
  std::vector<float> cls_out_bias_;  // [n_cls_out] or empty
  std::vector<float> rope_inv_freq_;  // [n_rot/2]
  float rope_attn_factor_ = 1.0f;
  // M-RoPE: [n_rot/2] the position each pair turns by (0 t, 1 h, 2 w, 3 the fourth, 0),
  // and whether any pair takes the fourth (then no row's plain table is right).
  std::vector<uint8_t> mrope_component_;
  bool mrope_reaches_fourth_ = false;
  // Local (sliding-window) layers with their own RoPE (gemma3: base 10000, unscaled);
  // empty when local layers use the global one.
  std::vector<float> rope_inv_freq_local_;  // [n_rot/2] or empty
  float rope_attn_factor_local_ = 1.0f;     // YaRN's magnitude on scaled local layers (gpt-oss)
  std::vector<float> rope_freq_factors_;   // [n_rot/2] rope_freqs.weight (llama3), or empty
  std::vector<float> rope_factors_long_;   // [n_rot/2] LongRoPE, or empty
  std::vector<float> rope_factors_short_;  // [n_rot/2] LongRoPE, or empty
  bool rope_long_in_use_ = false;
  // Gemma 4's per-layer token embeddings: rows of [n_layers * per_layer_dim] read from the
  // file mapping per token (never repacked or copied: 2.8 G values for E4B, of which a
  // prompt touches its tokens' rows); the projection of the embedding and its norm.
  const gguf::TensorInfo* per_layer_embd_ = nullptr;  // [n_vocab, n_layers * per_layer_dim]
  WeightMatrix per_layer_proj_;                       // [n_layers * per_layer_dim, dim]
  std::vector<float> per_layer_proj_norm_;            // [per_layer_dim]
  std::vector<float> ones_;  // [max(dim, head_dim, per_layer_dim)] 1s: norms without a weight
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace pagoda
