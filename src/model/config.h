// ModelConfig — the hyper-parameters of a Llama-family model, read from GGUF
// metadata and checked for consistency before any weight is touched.
//
// Contract: from_gguf() either returns a config whose every field is valid
// (positive sizes, heads divisible by KV heads, n_rot even and <= head_dim) or
// throws pagoda::Error naming the file and the offending key. Plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kv/kv_layer_groups.h"
#include "model/arch_table.h"

namespace pagoda {

// How one vector is taken from an input's final hidden states (after the output norm),
// numbered as GGUF's {arch}.pooling_type (llama.cpp's LLAMA_POOLING_TYPE_*): None keeps one
// vector per token; Mean averages them; Cls takes the first token's, Last the last token's;
// Rank feeds the last token's state to the reranker head (cls.output.weight; model.h).
enum class Pooling { Unspecified = -1, None = 0, Mean = 1, Cls = 2, Last = 3, Rank = 4 };
const char* pooling_name(Pooling p);  // "none", "mean", ... ("unspecified")

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;   // general.architecture
  std::string name;        // general.name (may be empty)
  int64_t n_vocab = 0;
  int64_t dim = 0;         // embedding_length
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;    // attention.key_length, default dim / n_heads
  int64_t ffn_dim = 0;     // feed_forward_length (shared-expert rows without the key: the
                           // shared expert's width, which is what it sizes there)
  int64_t ctx_len = 0;     // context_length (trained context)
  int64_t n_rot = 0;       // rope.dimension_count, default head_dim
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScalingType rope_scaling = RopeScalingType::None;
  float rope_scaling_factor = 1.0f;
  int64_t rope_orig_ctx = 0;   // rope.scaling.original_context_length (YaRN)
  float rope_attn_factor = 1.0f;
  // The attention window in tokens of the row's local layers (0: none; see
  // layer_is_local). Rows with Pattern::Ignored keep the declared value unused.
  int64_t sliding_window = 0;
  // RoPE of the local layers (rows with SlidingWindowSpec::local_rope_theta: gemma3):
  // this base and no scaling. 0: local layers use the global RoPE.
  float rope_theta_local = 0.0f;
  // The local layers' base keeps the global scaling (gpt-oss's rope.freq_base_swa).
  bool rope_local_scaled = false;
  // EveryNthGlobal rows: the period read from {arch}.attention.sliding_window_pattern
  // (SlidingWindowSpec::period_key; 0: every layer local); -1: the row's period.
  int64_t swa_period = -1;
  // Attention score scale (q·k * attn_scale); 0: 1 / sqrt(head_dim).
  float attn_scale = 0.0f;
  // Soft-capping c * tanh(x / c) of attention scores and of the final logits; 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Mixture of experts (rows with has_experts(); 0 otherwise): experts per layer,
  // experts each token uses (1 <= n_expert_used <= n_expert), one expert's FFN width.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t expert_ffn_dim = 0;
  // The shared expert's FFN width (rows with MoeSpec::shared_expert: qwen35moe); 0: none.
  int64_t shared_expert_ffn_dim = 0;
  // {arch}.pooling_type: Unspecified when the file does not say (a plain causal LM).
  Pooling pooling = Pooling::Unspecified;
  // Hybrid linear attention (rows with linear_attention: qwen35, qwen35moe). Gated DeltaNet layers:
  // a fused Q, K, V projection through a depthwise causal convolution of ssm_conv_kernel
  // taps, ssm_k_heads query / key heads and ssm_v_heads value heads of ssm_head_dim, a
  // recurrent ssm_head_dim x ssm_head_dim matrix per value head. 0 / empty otherwise.
  int64_t ssm_conv_kernel = 0;     // ssm.conv_kernel
  int64_t ssm_head_dim = 0;        // ssm.state_size
  int64_t ssm_k_heads = 0;         // ssm.group_count
  int64_t ssm_v_heads = 0;         // ssm.time_step_rank
  std::vector<uint8_t> recurrent;  // [n_layers] 1: a linear-attention layer; empty: none
  // nextn_predict_layers: multi-token-prediction blocks stored after the trunk (for
  // speculative decoding); block_count counts them, n_layers does not, and they never run.
  int64_t n_nextn_layers = 0;
  // rope.dimension_sections (multi-section RoPE): with text positions every section
  // rotates by the same position, which is NeoX RoPE over n_rot; read and kept.
  std::vector<int64_t> rope_sections;
  // Gemma 4 (rows with SlidingWindowSpec::Pattern::PerLayerArray). Empty / 0 for others,
  // whose layers all have the scalars above. n_kv_heads, head_dim, ffn_dim are then the
  // largest over layers (scratch sizes); the *_of(layer) accessors give each layer's.
  std::vector<uint8_t> local_layers;        // [n_layers] attention.sliding_window_pattern: 1 local
  std::vector<int64_t> n_kv_heads_by_layer; // [n_layers] an attention.head_count_kv array
  std::vector<int64_t> ffn_by_layer;        // [n_layers] a feed_forward_length array (E2B: double
                                            // width in the shared-KV layers)
  int64_t head_dim_local = 0;  // attention.key_length_swa (the local layers' heads; 0: head_dim)
  int64_t n_rot_local = 0;     // rope.dimension_count_swa (0: n_rot)
  // attention.shared_kv_layers: the last n_kv_shared layers write no K/V; each reads the
  // K/V of the last earlier layer of its kind with its own (llama.cpp's reuse rule: layer
  // n_layers - n_kv_shared - 1 for global ones, - 2 for local ones; checked to be of the
  // same kind when read).
  int64_t n_kv_shared = 0;
  // embedding_length_per_layer_input: the width of each layer's per-layer token embedding
  // (per_layer_token_embd row slices); 0: none (26B, 31B).
  int64_t per_layer_dim = 0;
  std::vector<uint8_t> moe_layers;  // [n_layers] 1: the layer has a mixture of experts beside
                                    // its dense FFN (blk.N.ffn_gate_inp present); empty: none
  std::vector<uint8_t> v_from_k;    // [n_layers] 1: no attn_v, V is the K projection
                                    // (attention_k_eq_v global layers); empty: none
  // The expert FFN's gate and up projections are one tensor, ffn_gate_up_exps [n_expert,
  // 2 ffn_exp, dim] (gate rows then up rows), as llama.cpp's converter writes Gemma 4's.
  bool fused_gate_up_exps = false;

  // Per-layer shapes (equal to the scalars for every row but Gemma 4).
  int64_t head_dim_of(int64_t layer) const {
    return head_dim_local > 0 && layer_is_local(layer) ? head_dim_local : head_dim;
  }
  int64_t kv_heads_of(int64_t layer) const {
    return n_kv_heads_by_layer.empty() ? n_kv_heads : n_kv_heads_by_layer[static_cast<size_t>(layer)];
  }
  int64_t rot_of(int64_t layer) const { return n_rot_local > 0 && layer_is_local(layer) ? n_rot_local : n_rot; }
  int64_t ffn_of(int64_t layer) const {
    return ffn_by_layer.empty() ? ffn_dim : ffn_by_layer[static_cast<size_t>(layer)];
  }
  int64_t q_dim_of(int64_t layer) const { return n_heads * head_dim_of(layer); }
  int64_t kv_dim_of(int64_t layer) const { return kv_heads_of(layer) * head_dim_of(layer); }
  bool is_moe_layer(int64_t layer) const {
    return n_expert > 0 && (moe_layers.empty() || moe_layers[static_cast<size_t>(layer)] != 0);
  }
  bool layer_v_from_k(int64_t layer) const { return !v_from_k.empty() && v_from_k[static_cast<size_t>(layer)] != 0; }
  // Layers [0, n_kv_layers_from_start()) write K/V; the rest share (n_kv_shared).
  int64_t n_kv_layers_from_start() const { return n_layers - n_kv_shared; }
  bool has_own_kv(int64_t layer) const { return !is_recurrent(layer) && layer < n_kv_layers_from_start(); }
  // The layer whose K/V `layer` attends to: itself, or for a shared layer the last earlier
  // layer of its kind with its own K/V (requires: not recurrent).
  int64_t kv_source(int64_t layer) const {
    if (layer < n_kv_layers_from_start()) return layer;
    return n_kv_layers_from_start() - (layer_is_local(layer) ? 2 : 1);
  }
  // Every layer with its own K/V in order: its window and head shape (the KV cache's layers,
  // KvLayerGroups::for_layers).
  std::vector<KvLayerShape> kv_layer_shapes() const;

  // Hybrid models: whether `layer` is a linear-attention (recurrent) layer; the layers
  // that have a KV cache (the others), counted and numbered among themselves.
  bool is_recurrent(int64_t layer) const {
    return !recurrent.empty() && recurrent[static_cast<size_t>(layer)] != 0;
  }
  bool hybrid() const { return !recurrent.empty(); }
  int64_t n_attention_layers() const;
  // The KV cache layer `layer` writes and reads: the index of kv_source(layer) among the
  // layers with their own K/V; -1 for a recurrent layer.
  int64_t kv_layer(int64_t layer) const;
  // Layers with a KV cache of their own (attention layers not sharing another's K/V).
  int64_t n_kv_layers() const;
  int64_t n_recurrent_layers() const { return n_layers - n_attention_layers(); }
  // Index of recurrent `layer` among the recurrent layers (its state slot); -1 otherwise.
  int64_t recurrent_slot(int64_t layer) const;
  // Whether per-layer tensor `t` exists in `layer` (LayerKind).
  bool layer_has(const TensorSpec& t, int64_t layer) const;
  int64_t ssm_key_dim() const { return ssm_k_heads * ssm_head_dim; }
  int64_t ssm_value_dim() const { return ssm_v_heads * ssm_head_dim; }
  int64_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  // One recurrent layer's state, in floats: the convolution's last conv_kernel - 1 inputs
  // and the delta rule's matrix per value head.
  int64_t conv_state_floats() const { return (ssm_conv_kernel - 1) * ssm_conv_dim(); }
  int64_t delta_state_floats() const { return ssm_v_heads * ssm_head_dim * ssm_head_dim; }
  int64_t recurrent_state_floats() const { return conv_state_floats() + delta_state_floats(); }

  // The architecture's row: norms, activation, RoPE kind, biases, tensor names.
  const ArchInfo& info() const { return arch_info(arch); }
  bool rope_neox() const { return info().rope == RopeKind::Neox; }

  // Derived sizes, named once.
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t heads_per_kv() const { return n_heads / n_kv_heads; }
  float attention_scale() const;
  // True when `layer` attends only to the last sliding_window positions.
  bool layer_is_local(int64_t layer) const;
  // False for a NoPE layer (ArchInfo::nope_interval: SmolLM3's every fourth).
  bool layer_uses_rope(int64_t layer) const {
    const int64_t n = info().nope_interval;
    return n <= 0 || (layer + 1) % n != 0;
  }
  // The window `layer` attends over (0: the whole context).
  int64_t layer_window(int64_t layer) const { return layer_is_local(layer) ? sliding_window : 0; }
  // layer_window of every layer with a KV cache of its own (every layer, a hybrid's
  // attention layers, Gemma 4's unshared layers, in order).
  std::vector<int64_t> layer_windows() const;
  // The attention scale the GGUF reader derives for this row and shape (llama.cpp has
  // no GGUF key for Gemma's query_pre_attn_scalar); convert checks HF's value against it.
  float gguf_attention_scale() const;

  // Throws pagoda::Error on an architecture without a row in the table
  // (model/arch_table.h) or missing / inconsistent keys.
  // n_vocab comes from {arch}.vocab_size, else the token list, else token_embd.weight.
  static ModelConfig from_gguf(const gguf::GgufFile& file);

  // One line for logs: "llama dim 2048, 22 layers, 32 heads (4 kv, head_dim 64), ffn 5632, vocab 32000, ctx 2048".
  std::string summary() const;
};

const char* arch_name(Arch arch);

}  // namespace pagoda
