// Model's private parts shared by its translation units: the per-layer weights
// (Model::Layer, filled by the loader in model.cpp) and the forward pass's scratch buffers
// (Model::Scratch, used by model_forward.cpp). Not part of the module's contract: include
// it only from src/model/model*.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace pagoda {

struct Model::Layer {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> attn_post_norm;  // [dim] (gemma2/3) or empty
  std::vector<float> ffn_post_norm;   // [dim] (gemma2/3) or empty
  std::vector<float> q_norm;     // [head_dim] (qwen3), [q_dim] (olmoe: qk_norm_full)
  std::vector<float> k_norm;     // [head_dim] (qwen3), [kv_dim] (olmoe)
  std::vector<float> bq, bk, bv; // [q_dim], [kv_dim], [kv_dim] (qwen2)
  std::vector<float> bo;         // [dim] attention output bias (gpt-oss) or empty
  std::vector<float> sinks;      // [n_heads] attention sink logits (gpt-oss) or empty
  WeightMatrix wq;      // [q_dim, dim]
  WeightMatrix wk;      // [kv_dim, dim]
  WeightMatrix wv;      // [kv_dim, dim]
  WeightMatrix wo;      // [dim, q_dim]
  WeightMatrix w_gate;  // [ffn, dim]
  WeightMatrix w_up;    // [ffn, dim]
  WeightMatrix w_down;  // [dim, ffn]
  // Mixture of experts (rows with has_experts(); the dense w_gate/w_up/w_down stay empty).
  WeightMatrix router;  // [n_expert, dim]
  // gpt-oss's biases: the router's [n_expert] and each expert's [n_expert, rows] (empty
  // for other rows).
  std::vector<float> router_bias, exp_gate_bias, exp_up_bias, exp_down_bias;
  // The 3-D GGUF tensors as [n_expert * rows, cols] matrices, repacked once as a
  // whole (empty when the expert's rows are not a multiple of kSliceRowAlign:
  // then each expert is prepared alone).
  WeightMatrix all_gate, all_up, all_down;
  // Per expert e: slice e of those (consecutive rows: a plain matrix).
  std::vector<WeightMatrix> exp_gate;  // n_expert x [ffn_exp, dim]
  std::vector<WeightMatrix> exp_up;    // n_expert x [ffn_exp, dim]
  std::vector<WeightMatrix> exp_down;  // n_expert x [dim, ffn_exp]
  // The shared expert (MoeSpec::shared_expert; empty otherwise).
  std::vector<float> shexp_gate_inp;  // [dim]: sigmoid(w · x) scales its output
  WeightMatrix shexp_gate;            // [ffn_shexp, dim]
  WeightMatrix shexp_up;              // [ffn_shexp, dim]
  WeightMatrix shexp_down;            // [dim, ffn_shexp]
  // Gated DeltaNet (a hybrid's recurrent layer; the attention matrices stay empty).
  bool recurrent = false;
  WeightMatrix w_ssm_qkv;    // [conv_dim, dim]: Q, K, V channels before the convolution
  WeightMatrix w_ssm_gate;   // [value_dim, dim]: z
  WeightMatrix w_ssm_beta;   // [n_v_heads, dim]
  WeightMatrix w_ssm_alpha;  // [n_v_heads, dim]
  WeightMatrix w_ssm_out;    // [dim, value_dim]
  std::vector<float> conv1d;   // [conv_dim, conv_kernel]
  std::vector<float> dt_bias;  // [n_v_heads]
  std::vector<float> ssm_a;    // [n_v_heads] (negative)
  std::vector<float> ssm_norm; // [ssm_head_dim]
  // Gemma 4 (the attention and dense FFN matrices above are per-layer sized: head_dim_of,
  // q_dim_of, kv_dim_of, ffn_of). wk / wv empty in shared-KV layers, wv in V-from-K ones.
  bool moe = false;                    // experts beside the dense FFN (ConfigModel::is_moe_layer)
  std::vector<float> router_scale;     // [dim] ffn_gate_inp.scale (or empty: qwen3moe's plain router)
  std::vector<float> ffn_pre_norm2;    // [dim] the experts' input norm
  std::vector<float> ffn_post_norm1;   // [dim] the dense FFN's output norm in a MoE layer
  std::vector<float> ffn_post_norm2;   // [dim] the experts' output norm
  std::vector<float> down_exps_scale;  // [n_expert] each expert's output scale, or empty
  WeightMatrix pl_gate;                // [per_layer_dim, dim] inp_gate
  WeightMatrix pl_proj;                // [dim, per_layer_dim] proj
  std::vector<float> pl_post_norm;     // [dim]
  float out_scale = 1.0f;              // layer_output_scale (1 when absent)
};

// Activations of one forward call, grown to the largest batch seen.
struct Model::Scratch {
  std::vector<float> x;     // [T, dim] residual stream
  std::vector<float> xn;    // [T, dim] normed
  std::vector<float> q;     // [T, q_dim]
  std::vector<float> k;     // [T, kv_dim]
  std::vector<float> v;     // [T, kv_dim]
  std::vector<float> attn;  // [T, q_dim]
  std::vector<float> gate;  // [T, ffn] (the shared expert's: [T, ffn_shexp])
  std::vector<float> up;    // [T, ffn]
  std::vector<float> tmp;   // [T, dim]
  std::vector<float> rope_cos;  // [T, n_rot/2] per-token RoPE table, shared by all layers
  std::vector<float> rope_sin;  // [T, n_rot/2]
  std::vector<float> mrope_cos, mrope_sin;  // [4, n_rot/2] one M-RoPE row at its four positions
  std::vector<float> rope_cos_local;  // [T, n_rot/2] local layers' own RoPE (gemma3)
  std::vector<float> rope_sin_local;
  std::vector<int64_t> out_rows;
  // Mixture of experts. A "slot" is one (token, chosen expert) pair; slots are
  // ordered by expert, so each expert's tokens are consecutive rows.
  std::vector<float> router_logits;   // [T, n_expert]
  std::vector<int32_t> chosen;        // [T, k] expert ids, by descending weight
  std::vector<float> chosen_w;        // [T, k] their routing weights
  std::vector<int64_t> slot_of;       // [T, k] slot of (token, rank)
  std::vector<int64_t> expert_first;  // [n_expert + 1] first slot of each expert
  std::vector<float> exp_in;          // [T * k (+ T), dim] the slots' normed inputs; with a
                                      // shared expert, then every token's again (its rows)
  std::vector<float> shexp_scale;     // [T] sigmoid of the shared expert's gate
  std::vector<float> exp_gate;        // [T * k, ffn_exp]
  std::vector<float> exp_up;          // [T * k, ffn_exp]
  std::vector<float> exp_out;         // [T * k, dim]
  std::vector<GroupedMatmul> jobs;
  // Gated DeltaNet: the projections, the convolved channels, per-token decay and beta,
  // the heads' outputs (then normed and gated in place).
  std::vector<float> ssm_qkv;    // [T, conv_dim]
  std::vector<float> ssm_conv;   // [T, conv_dim]
  std::vector<float> ssm_z;      // [T, value_dim]
  std::vector<float> ssm_beta;   // [T, n_v_heads]
  std::vector<float> ssm_alpha;  // [T, n_v_heads]
  std::vector<float> ssm_out;    // [T, value_dim]
  std::vector<float> q_gate;     // [T, 2 q_dim] gated attention's q projection
  // Gemma 4: each token's per-layer inputs (its per_layer_token_embd row mixed with the
  // projection of its embedding), the per-layer gate, a MoE layer's dense and expert outputs
  // and the router's input.
  std::vector<float> pl_inp;     // [T, n_layers, per_layer_dim]
  std::vector<float> pl_gate;    // [T, per_layer_dim]
  std::vector<float> pl_row;     // [n_layers * per_layer_dim] one token's per_layer_token_embd row
  std::vector<float> mlp;        // [T, dim]
  std::vector<float> router_in;  // [T, dim]
  // Per sequence of the batch: its tokens in batch order (consecutive positions).
  std::vector<SeqId> seqs;
  std::vector<std::vector<int64_t>> seq_tokens;

  void reserve(const ModelConfig& c, size_t T) {
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    grow(x, T * c.dim);
    grow(xn, T * c.dim);
    int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();  // the largest layer's (Gemma 4: global or local)
    for (int64_t l = 0; l < c.n_layers; ++l) {
      q_dim = std::max(q_dim, c.q_dim_of(l));
      kv_dim = std::max(kv_dim, c.kv_dim_of(l));
    }
    grow(q, T * q_dim);
    grow(k, T * kv_dim);
    grow(v, T * kv_dim);
    grow(attn, T * q_dim);
    grow(gate, T * std::max(c.ffn_dim, c.shared_expert_ffn_dim));
    grow(up, T * std::max(c.ffn_dim, c.shared_expert_ffn_dim));
    grow(tmp, T * c.dim);
    grow(rope_cos, T * (c.n_rot / 2));
    grow(rope_sin, T * (c.n_rot / 2));
    if (!c.rope_sections.empty()) {
      grow(mrope_cos, 4 * (c.n_rot / 2));
      grow(mrope_sin, 4 * (c.n_rot / 2));
    }
    if (c.rope_theta_local > 0.0f) {
      const int64_t half_local = (c.n_rot_local > 0 ? c.n_rot_local : c.n_rot) / 2;
      grow(rope_cos_local, T * half_local);
      grow(rope_sin_local, T * half_local);
    }
    if (c.per_layer_dim > 0) {
      grow(pl_inp, T * c.n_layers * c.per_layer_dim);
      grow(pl_gate, T * c.per_layer_dim);
      grow(pl_row, c.n_layers * c.per_layer_dim);
    }
    if (!c.moe_layers.empty()) {
      grow(mlp, T * c.dim);
      grow(router_in, T * c.dim);
    }
    if (c.hybrid()) {
      grow(ssm_qkv, T * c.ssm_conv_dim());
      grow(ssm_conv, T * c.ssm_conv_dim());
      grow(ssm_z, T * c.ssm_value_dim());
      grow(ssm_beta, T * c.ssm_v_heads);
      grow(ssm_alpha, T * c.ssm_v_heads);
      grow(ssm_out, T * c.ssm_value_dim());
    }
    if (c.info().gated_attention) grow(q_gate, T * 2 * c.q_dim());
    if (c.n_expert > 0) {
      const size_t slots = T * c.n_expert_used;
      grow(router_logits, T * c.n_expert);
      grow(chosen_w, slots);
      grow(exp_in, (slots + (c.shared_expert_ffn_dim > 0 ? T : 0)) * c.dim);
      grow(shexp_scale, T);
      grow(exp_gate, slots * c.expert_ffn_dim);
      grow(exp_up, slots * c.expert_ffn_dim);
      grow(exp_out, slots * c.dim);
      if (chosen.size() < slots) chosen.resize(slots);
      if (slot_of.size() < slots) slot_of.resize(slots);
      expert_first.resize(c.n_expert + 1);
      jobs.reserve(2 * c.n_expert);
    }
  }
};

}  // namespace pagoda
