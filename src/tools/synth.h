// Synthetic random-weight models of real shapes, written as GGUF.
//
// Speed runs and tests need realistic model sizes without downloads; weight
// values do not change speed. Weights are drawn from a seeded generator and
// scaled by 1/sqrt(fan_in) so activations stay finite through any depth; norms
// are 1 (with a small seeded jitter so a swapped norm tensor shows in tests).
// Contract: write_synthetic_model() throws pagoda::Error for an invalid spec
// (unknown shape, sizes not divisible by the type's block) or an unwritable path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/types.h"

namespace pagoda {

struct SynthSpec {
  std::string arch = "llama";  // a row's name() in model/arch_table.h (mixtral: GGUF llama with experts)
  int64_t dim = 256;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 0;  // 0: dim / n_heads (key_length written only when it differs)
  int64_t ffn_dim = 512;
  // Mixture-of-experts rows (qwen3moe, mixtral, qwen35moe): experts per layer, used per
  // token, one expert's FFN width (0: ffn_dim; qwen35moe: dim / 4, Qwen3.6-35B-A3B's
  // 512 / 2048). Ignored by dense rows.
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t expert_ffn_dim = 0;
  // Rows with a shared expert (qwen35moe): its FFN width (0: expert_ffn_dim, as in the
  // released models). Such files get no feed_forward_length: Qwen 3.5's MoE config has no
  // dense width, and llama.cpp reads the key as optional.
  int64_t shared_expert_ffn_dim = 0;
  int64_t n_vocab = 320;
  int64_t ctx_len = 2048;
  GgmlType type = GgmlType::F32;  // the 2-D projection matrices, embeddings and output
  // With type Q4_K: llama.cpp's Q4_K_M mix instead of all-Q4_K (the file type most GGUFs
  // ship in): Q6_K for output.weight (token_embd when tied), and for attn_v / ffn_down
  // (ffn_down_exps) in the first and last eighth of the layers and every third between
  // (layer i with i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2); the rest Q4_K. File type 15.
  bool q4_k_m = false;
  bool tied_embeddings = false;
  std::string rope_scaling = "none";  // none | linear | llama3 | yarn | longrope (phi3)
  // Rows with sliding windows (gemma2, gemma3): the local layers' window; -1: the real
  // models' (gemma2 4096, gemma3 1024); 0: none (no key written).
  int64_t sliding_window = -1;
  // Soft-caps written as {arch}.attn_logit_softcapping / final_logit_softcapping;
  // -1: the row's default (gemma2 50 / 30, gemma3 none). Rows without them ignore these.
  float attn_softcap = -1.0f;
  float final_softcap = -1.0f;
  uint64_t seed = 1;
  // GGUF whose tokenizer.* metadata is copied, or a BPE tokenizer.json (a path ending in
  // .json) converted as `convert` does (tools/hf_convert.h write_hf_tokenizer; for gemma4 a
  // SentencePiece-style one becomes a "gemma4" vocabulary with merges); sets n_vocab.
  std::string vocab_from;
  std::string name = "synthetic";
  // Embedding / reranker models: "" writes no {arch}.pooling_type; none|mean|cls|last|rank
  // write it. rank also writes a reranker head cls.output.weight [2, dim] (type f32,
  // std 1/sqrt(dim), drawn after every other tensor so the rest keep their weights),
  // {arch}.classifier.output_labels ["yes", "no"] and tokenizer.chat_template.rerank
  // "query: {query}\ndocument: {document}\nrelevant:", as llama.cpp's converter marks
  // Qwen3-Reranker.
  std::string pooling;
  // Hybrid linear attention (rows with linear_attention: qwen35, qwen35moe). 0 / -1: derived from dim
  // with the real models' ratios (Qwen3.5-4B: dim 2560, 32 value heads and 16 key heads of
  // 128, convolution 4): head dim 128 (64 below dim 1024), value heads dim / 80 rounded to
  // an even count >= 2, key heads half of them.
  int64_t ssm_head_dim = 0;
  int64_t ssm_k_heads = 0;
  int64_t ssm_v_heads = 0;
  int64_t ssm_conv_kernel = 0;
  int64_t full_attention_interval = 0;  // 0: the row's (4)
  int64_t n_rot = 0;                    // rope.dimension_count; 0: head_dim (linear-attention rows: head_dim / 4)
  int64_t n_nextn = 0;                  // multi-token-prediction blocks written after the trunk
  // Gemma 4 (gemma4): head_dim is the global layers' (key_length); the local layers have
  // head_dim_local (key_length_swa, rope.dimension_count_swa); layer i is global when
  // (i + 1) % global_period == 0 (written as the sliding_window_pattern array); the global
  // layers' KV heads n_kv_heads_global (0: n_kv_heads; a head_count_kv array otherwise) and
  // rotary fraction global_rotary (rope_freqs.weight: 1 for the rotated pairs, 1e30 for the
  // rest); the last kv_shared layers reuse earlier K/V; double_wide_ffn doubles their FFN
  // (E2B); per_layer_dim > 0 writes per-layer token embeddings; k_eq_v drops the global
  // layers' attn_v; moe_period > 0 gives layer i experts (fused ffn_gate_up_exps) when
  // i % moe_period == 1 % moe_period (1: every layer; 3: layers 1, 4, 7, ...).
  int64_t head_dim_local = 0;
  int64_t global_period = 6;
  int64_t n_kv_heads_global = 0;
  float global_rotary = 0.25f;
  int64_t kv_shared = 0;
  bool double_wide_ffn = false;
  int64_t per_layer_dim = 0;
  bool k_eq_v = false;
  int64_t moe_period = 0;
};

// A spec adapted to a row: for linear-attention rows the derived sizes above filled in,
// and a `tiny` shape made hybrid (4 layers: 3 linear + 1 full, one MTP block, every head
// count distinct; qwen35moe: 8 experts of width 64, 3 used, a shared expert of width 96);
// for gemma4 a `tiny` shape with every Gemma 4 feature (6 layers, two global, three
// sharing K/V, per-layer embeddings, experts in two layers, V from K in a global layer,
// local and global heads of different sizes and counts, window 8).
// Called by write_synthetic_model; exposed for tests.
SynthSpec resolved_for_row(const SynthSpec& spec, bool tiny_shape = false);

// Named real shapes: tinyllama-1.1b, llama3.2-1b, qwen2.5-0.5b, qwen3-0.6b, phi3.5-mini, gemma2-2b,
// gemma3-1b, gemma3-4b, qwen3-30b-a3b, mixtral-8x7b, qwen3.5-0.8b, qwen3.5-4b, qwen3.5-27b,
// qwen3.6-35b-a3b, gemma4-e2b, gemma4-e4b, gemma4-26b-a4b, gemma4-31b, stories260k, tiny.
// Returns nullopt for an unknown name. Sets arch-independent sizes only.
std::optional<SynthSpec> synth_shape(const std::string& name);
std::vector<std::string> synth_shape_names();
// "llama, qwen2, ...": the architectures synth writes (every table row's name()).
std::string synth_arch_names();

void write_synthetic_model(const SynthSpec& spec, const std::string& path);

}  // namespace pagoda
