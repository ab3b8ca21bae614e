// The architecture rows (see arch_table.h). Names follow llama.cpp's gguf-py
// constants (MODEL_TENSOR names) and convert_hf_to_gguf.py's HF -> GGUF map.
#include "model/arch_table.h"

#include <algorithm>

#include "common/error.h"
#include "model/config.h"

namespace pagoda {

namespace {

using E = Extent;
using K = TensorKind;

// Tensors every row here shares: embeddings, final norm, untied output, and a
// llama-style block's norms and FFN. The attention projections differ per row.
std::vector<TensorSpec> global_tensors() {
  return {
      {Role::TokenEmbd, "token_embd.weight", "model.embed_tokens.weight", false, {E::Vocab, E::Dim}, K::Matrix},
      {Role::OutputNorm, "output_norm.weight", "model.norm.weight", false, {E::Dim}, K::Norm},
      {Role::Output, "output.weight", "lm_head.weight", false, {E::Vocab, E::Dim}, K::Matrix, Presence::Untied},
      // Llama 3 frequency factors: in GGUF files; computed from rope_scaling for HF directories.
      {Role::RopeFreqs, "rope_freqs.weight", "", false, {E::RotHalf}, K::RopeFactors, Presence::Optional},
  };
}

struct LayerOptions {
  bool qkv_bias = false;
  bool qk_norm = false;
  bool permute_qk = false;
};

std::vector<TensorSpec> llama_block(const LayerOptions& o) {
  const Permute pq = o.permute_qk ? Permute::ByHeads : Permute::None;
  const Permute pk = o.permute_qk ? Permute::ByKvHeads : Permute::None;
  std::vector<TensorSpec> t = {
      {Role::AttnNorm, "attn_norm.weight", "input_layernorm.weight", true, {E::Dim}, K::Norm},
      {Role::AttnQ, "attn_q.weight", "self_attn.q_proj.weight", true, {E::QDim, E::Dim}, K::Matrix,
       Presence::Required, pq},
      {Role::AttnK, "attn_k.weight", "self_attn.k_proj.weight", true, {E::KvDim, E::Dim}, K::Matrix,
       Presence::Required, pk},
      {Role::AttnV, "attn_v.weight", "self_attn.v_proj.weight", true, {E::KvDim, E::Dim}, K::Matrix},
  };
  if (o.qkv_bias) {
    t.push_back({Role::AttnQBias, "attn_q.bias", "self_attn.q_proj.bias", true, {E::QDim}, K::Bias});
    t.push_back({Role::AttnKBias, "attn_k.bias", "self_attn.k_proj.bias", true, {E::KvDim}, K::Bias});
    t.push_back({Role::AttnVBias, "attn_v.bias", "self_attn.v_proj.bias", true, {E::KvDim}, K::Bias});
  }
  if (o.qk_norm) {
    t.push_back({Role::AttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", true, {E::HeadDim}, K::Norm});
    t.push_back({Role::AttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", true, {E::HeadDim}, K::Norm});
  }
  t.push_back({Role::AttnOut, "attn_output.weight", "self_attn.o_proj.weight", true, {E::Dim, E::QDim}, K::Matrix});
  t.push_back({Role::FfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", true, {E::Dim}, K::Norm});
  t.push_back({Role::FfnGate, "ffn_gate.weight", "mlp.gate_proj.weight", true, {E::Ffn, E::Dim}, K::Matrix});
  t.push_back({Role::FfnUp, "ffn_up.weight", "mlp.up_proj.weight", true, {E::Ffn, E::Dim}, K::Matrix});
  t.push_back({Role::FfnDown, "ffn_down.weight", "mlp.down_proj.weight", true, {E::Dim, E::Ffn}, K::Matrix});
  return t;
}

// A llama block's FFN replaced by a mixture of experts: the router and the three
// stacked expert tensors, with the row's HF names ('*' = expert index).
std::vector<TensorSpec> with_experts(std::vector<TensorSpec> block, std::string_view hf_router,
                                     std::string_view hf_gate, std::string_view hf_up, std::string_view hf_down) {
  std::erase_if(block, [](const TensorSpec& t) {
    return t.role == Role::FfnGate || t.role == Role::FfnUp || t.role == Role::FfnDown;
  });
  block.push_back({Role::FfnRouter, "ffn_gate_inp.weight", hf_router, true, {E::NExpert, E::Dim}, K::Router});
  block.push_back({Role::FfnGateExps, "ffn_gate_exps.weight", hf_gate, true, {E::NExpert, E::FfnExp, E::Dim},
                   K::Experts});
  block.push_back({Role::FfnUpExps, "ffn_up_exps.weight", hf_up, true, {E::NExpert, E::FfnExp, E::Dim}, K::Experts});
  block.push_back({Role::FfnDownExps, "ffn_down_exps.weight", hf_down, true, {E::NExpert, E::Dim, E::FfnExp},
                   K::Experts});
  return block;
}

std::vector<TensorSpec> concat(std::vector<TensorSpec> a, const std::vector<TensorSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<RopeScalingType> kAllScalings = {RopeScalingType::None, RopeScalingType::Linear,
                                                   RopeScalingType::Yarn};

// qwen35 / qwen35moe: everything but the FFN's kind. Sets the row's flags and its global
// tensors (no rope_freqs).
void set_qwen35_trunk(ArchInfo& r) {
  r.rope = RopeKind::Neox;
  r.rope_scalings = kAllScalings;
  r.qk_norm = true;
  r.gated_attention = true;
  r.linear_attention = true;
  r.default_full_attention_interval = 4;
  r.tensors = global_tensors();
  r.tensors.pop_back();  // no rope_freqs
}

// One qwen35 layer with a dense FFN: the full-attention tensors (attention layers only),
// the Gated DeltaNet ones (recurrent layers only), then the FFN every layer has.
std::vector<TensorSpec> qwen35_block() {
  using L = LayerKind;
  return {
      {Role::AttnNorm, "attn_norm.weight", "", true, {E::Dim}, K::Norm},
      {Role::AttnQ, "attn_q.weight", "", true, {E::QGateDim, E::Dim}, K::Matrix, Presence::Required, Permute::None,
       L::Attention},
      {Role::AttnK, "attn_k.weight", "", true, {E::KvDim, E::Dim}, K::Matrix, Presence::Required, Permute::None,
       L::Attention},
      {Role::AttnV, "attn_v.weight", "", true, {E::KvDim, E::Dim}, K::Matrix, Presence::Required, Permute::None,
       L::Attention},
      {Role::AttnQNorm, "attn_q_norm.weight", "", true, {E::HeadDim}, K::Norm, Presence::Required, Permute::None,
       L::Attention},
      {Role::AttnKNorm, "attn_k_norm.weight", "", true, {E::HeadDim}, K::Norm, Presence::Required, Permute::None,
       L::Attention},
      {Role::AttnOut, "attn_output.weight", "", true, {E::Dim, E::QDim}, K::Matrix, Presence::Required,
       Permute::None, L::Attention},
      {Role::AttnQkv, "attn_qkv.weight", "", true, {E::SsmConvDim, E::Dim}, K::Matrix, Presence::Required,
       Permute::None, L::Recurrent},
      {Role::SsmGate, "attn_gate.weight", "", true, {E::SsmValueDim, E::Dim}, K::Matrix, Presence::Required,
       Permute::None, L::Recurrent},
      {Role::SsmConv1d, "ssm_conv1d.weight", "", true, {E::SsmConvDim, E::SsmConvKernel}, K::Router,
       Presence::Required, Permute::None, L::Recurrent},
      {Role::SsmDtBias, "ssm_dt.bias", "", true, {E::SsmVHeads}, K::Bias, Presence::Required, Permute::None,
       L::Recurrent},
      {Role::SsmA, "ssm_a", "", true, {E::SsmVHeads}, K::Decay, Presence::Required, Permute::None, L::Recurrent},
      {Role::SsmBeta, "ssm_beta.weight", "", true, {E::SsmVHeads, E::Dim}, K::Router, Presence::Required,
       Permute::None, L::Recurrent},
      {Role::SsmAlpha, "ssm_alpha.weight", "", true, {E::SsmVHeads, E::Dim}, K::Router, Presence::Required,
       Permute::None, L::Recurrent},
      {Role::SsmNorm, "ssm_norm.weight", "", true, {E::SsmHeadDim}, K::Norm, Presence::Required, Permute::None,
       L::Recurrent},
      {Role::SsmOut, "ssm_out.weight", "", true, {E::Dim, E::SsmValueDim}, K::Matrix, Presence::Required,
       Permute::None, L::Recurrent},
      {Role::FfnNorm, "post_attention_norm.weight", "", true, {E::Dim}, K::Norm},
      {Role::FfnGate, "ffn_gate.weight", "", true, {E::Ffn, E::Dim}, K::Matrix},
      {Role::FfnUp, "ffn_up.weight", "", true, {E::Ffn, E::Dim}, K::Matrix},
      {Role::FfnDown, "ffn_down.weight", "", true, {E::Dim, E::Ffn}, K::Matrix},
  };
}

std::vector<ArchInfo> build_table() {
  std::vector<ArchInfo> rows;
  {
    ArchInfo r{.arch = Arch::Llama, .gguf_name = "llama"};
    // llama.cpp converts Mistral checkpoints to general.architecture = llama.
    r.gguf_aliases = {"mistral"};
    r.hf_model_types = {"llama", "mistral"};
    r.hf_architectures = {"LlamaForCausalLM", "MistralForCausalLM"};
    r.rope = RopeKind::Normal;
    r.rope_scalings = kAllScalings;
    r.permute_qk = true;
    r.tensors = concat(global_tensors(), llama_block({.permute_qk = true}));
    rows.push_back(std::move(r));
  }
  {
    ArchInfo r{.arch = Arch::Qwen2, .gguf_name = "qwen2"};
    r.hf_model_types = {"qwen2"};
    r.hf_architectures = {"Qwen2ForCausalLM"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = kAllScalings;
    r.qkv_bias = true;
    r.tensors = concat(global_tensors(), llama_block({.qkv_bias = true}));
    rows.push_back(std::move(r));
  }
  {
    ArchInfo r{.arch = Arch::Qwen3, .gguf_name = "qwen3"};
    r.hf_model_types = {"qwen3"};
    r.hf_architectures = {"Qwen3ForCausalLM"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = kAllScalings;
    r.qk_norm = true;
    r.tensors = concat(global_tensors(), llama_block({.qk_norm = true}));
    rows.push_back(std::move(r));
  }
  {
    // Phi-3 / 3.5 / 4-mini: a llama block with fused projections (llama.cpp's
    // phi3 GGUFs: attn_qkv holds Q, K, V rows; ffn_up holds gate then up rows,
    // HF qkv_proj / gate_up_proj as stored), NeoX RoPE, LongRoPE factors.
    ArchInfo r{.arch = Arch::Phi3, .gguf_name = "phi3"};
    r.hf_model_types = {"phi3"};
    r.hf_architectures = {"Phi3ForCausalLM"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = {RopeScalingType::LongRope};
    // Phi-3-mini-4k declares sliding_window 2047; llama.cpp's loader turns phi3
    // SWA off, and pagoda follows it so a GGUF gives llama.cpp's results.
    r.sliding_window.pattern = SlidingWindowSpec::Pattern::Ignored;
    r.tensors = global_tensors();
    r.tensors.pop_back();  // no rope_freqs: LongRoPE factors instead
    // Written from config.json's rope_scaling by the converter; absent without LongRoPE.
    r.tensors.push_back({Role::RopeFactorsLong, "rope_factors_long.weight", "", false, {E::RotHalf},
                         K::RopeFactors, Presence::Optional});
    r.tensors.push_back({Role::RopeFactorsShort, "rope_factors_short.weight", "", false, {E::RotHalf},
                         K::RopeFactors, Presence::Optional});
    const std::vector<TensorSpec> block = {
        {Role::AttnNorm, "attn_norm.weight", "input_layernorm.weight", true, {E::Dim}, K::Norm},
        {Role::AttnQkv, "attn_qkv.weight", "self_attn.qkv_proj.weight", true, {E::QkvDim, E::Dim}, K::Matrix},
        {Role::AttnOut, "attn_output.weight", "self_attn.o_proj.weight", true, {E::Dim, E::QDim}, K::Matrix},
        {Role::FfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", true, {E::Dim}, K::Norm},
        {Role::FfnGateUp, "ffn_up.weight", "mlp.gate_up_proj.weight", true, {E::GateUpDim, E::Dim}, K::Matrix},
        {Role::FfnDown, "ffn_down.weight", "mlp.down_proj.weight", true, {E::Dim, E::Ffn}, K::Matrix},
    };
    r.tensors.insert(r.tensors.end(), block.begin(), block.end());
    rows.push_back(std::move(r));
  }
  for (const bool gemma3 : {false, true}) {
    // Gemma 2 / Gemma 3 (text): a llama block with GELU-tanh gating, norms after the
    // attention and the FFN as well as before, embeddings scaled by sqrt(dim), tied
    // output, NeoX RoPE on unpermuted Q/K; names from llama.cpp's gguf-py constants
    // (post_attention_norm, post_ffw_norm; HF pre_feedforward_layernorm is ffn_norm).
    ArchInfo r{.arch = gemma3 ? Arch::Gemma3 : Arch::Gemma2, .gguf_name = gemma3 ? "gemma3" : "gemma2"};
    r.hf_model_types = {gemma3 ? "gemma3_text" : "gemma2"};
    r.hf_architectures = {gemma3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM"};
    r.activation = Activation::GeluTanh;
    r.rope = RopeKind::Neox;
    r.rope_scalings = {RopeScalingType::Linear};  // Gemma 3 4B+: linear 8 on the global layers
    r.qk_norm = gemma3;
    r.hf_norm_shift = 1.0f;
    r.embed_scale = true;
    r.attn_softcap = !gemma3;
    r.attn_softcap_default = gemma3 ? 0.0f : 50.0f;
    r.final_softcap = true;
    r.final_softcap_default = gemma3 ? 0.0f : 30.0f;
    r.attn_scale_dim_over_heads_layers = gemma3 ? 62 : 46;  // the 27B models (llama.cpp's LLM_TYPE_27B)
    // llama.cpp: gemma2 set_swa_pattern(2) (even layers local), gemma3 set_swa_pattern(6)
    // (layer i global when i % 6 == 5): both "(i + 1) % period == 0 is global".
    r.sliding_window.pattern = SlidingWindowSpec::Pattern::EveryNthGlobal;
    r.sliding_window.period = gemma3 ? 6 : 2;
    r.sliding_window.default_window = gemma3 ? 0 : 4096;
    r.sliding_window.local_rope_theta = gemma3 ? 10000.0f : 0.0f;
    r.tensors = {
        {Role::TokenEmbd, "token_embd.weight", "model.embed_tokens.weight", false, {E::Vocab, E::Dim}, K::Matrix},
        {Role::OutputNorm, "output_norm.weight", "model.norm.weight", false, {E::Dim}, K::Norm},
        {Role::AttnNorm, "attn_norm.weight", "input_layernorm.weight", true, {E::Dim}, K::Norm},
        {Role::AttnQ, "attn_q.weight", "self_attn.q_proj.weight", true, {E::QDim, E::Dim}, K::Matrix},
        {Role::AttnK, "attn_k.weight", "self_attn.k_proj.weight", true, {E::KvDim, E::Dim}, K::Matrix},
        {Role::AttnV, "attn_v.weight", "self_attn.v_proj.weight", true, {E::KvDim, E::Dim}, K::Matrix},
    };
    if (gemma3) {
      r.tensors.push_back({Role::AttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", true, {E::HeadDim}, K::Norm});
      r.tensors.push_back({Role::AttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", true, {E::HeadDim}, K::Norm});
    }
    const std::vector<TensorSpec> rest = {
        {Role::AttnOut, "attn_output.weight", "self_attn.o_proj.weight", true, {E::Dim, E::QDim}, K::Matrix},
        {Role::AttnPostNorm, "post_attention_norm.weight", "post_attention_layernorm.weight", true, {E::Dim}, K::Norm},
        {Role::FfnNorm, "ffn_norm.weight", "pre_feedforward_layernorm.weight", true, {E::Dim}, K::Norm},
        {Role::FfnGate, "ffn_gate.weight", "mlp.gate_proj.weight", true, {E::Ffn, E::Dim}, K::Matrix},
        {Role::FfnUp, "ffn_up.weight", "mlp.up_proj.weight", true, {E::Ffn, E::Dim}, K::Matrix},
        {Role::FfnDown, "ffn_down.weight", "mlp.down_proj.weight", true, {E::Dim, E::Ffn}, K::Matrix},
        {Role::FfnPostNorm, "post_ffw_norm.weight", "post_feedforward_layernorm.weight", true, {E::Dim}, K::Norm},
    };
    r.tensors.insert(r.tensors.end(), rest.begin(), rest.end());
    rows.push_back(std::move(r));
  }
  {
    // Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): qwen3's attention, every layer's FFN a
    // mixture of experts (HF decoder_sparse_step 1, no mlp_only_layers), top-k
    // weights renormalised (norm_topk_prob, as llama.cpp's qwen3moe graph fixes it).
    ArchInfo r{.arch = Arch::Qwen3Moe, .gguf_name = "qwen3moe"};
    r.hf_model_types = {"qwen3_moe"};
    r.hf_architectures = {"Qwen3MoeForCausalLM"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = kAllScalings;
    r.qk_norm = true;
    r.moe = {.router = RouterKind::SoftmaxTopKRenormalized,
             .expert_ffn_key = true,
             .hf_expert_count_key = "num_experts",
             .hf_expert_ffn_key = "moe_intermediate_size"};
    r.tensors = concat(global_tensors(),
                       with_experts(llama_block({.qk_norm = true}), "mlp.gate.weight", "mlp.experts.*.gate_proj.weight",
                                    "mlp.experts.*.up_proj.weight", "mlp.experts.*.down_proj.weight"));
    rows.push_back(std::move(r));
  }
  {
    // Mixtral: a llama with experts. llama.cpp writes general.architecture =
    // llama with llama.expert_count / expert_used_count and feed_forward_length
    // = the expert width; HF block_sparse_moe.experts.E.w1 (gate) / w3 (up) /
    // w2 (down). Its router softmaxes the top-k logits, which equals softmax
    // then top-k renormalised.
    ArchInfo r{.arch = Arch::Mixtral, .gguf_name = "llama", .id = "mixtral"};
    r.hf_model_types = {"mixtral"};
    r.hf_architectures = {"MixtralForCausalLM"};
    r.rope = RopeKind::Normal;
    r.rope_scalings = kAllScalings;
    r.permute_qk = true;
    r.moe = {.router = RouterKind::SoftmaxTopKRenormalized,
             .expert_ffn_key = false,
             .hf_expert_count_key = "num_local_experts",
             .hf_expert_ffn_key = ""};
    r.tensors = concat(global_tensors(), with_experts(llama_block({.permute_qk = true}), "block_sparse_moe.gate.weight",
                                                      "block_sparse_moe.experts.*.w1.weight",
                                                      "block_sparse_moe.experts.*.w3.weight",
                                                      "block_sparse_moe.experts.*.w2.weight"));
    rows.push_back(std::move(r));
  }
  {
    // OLMoE (OLMoE-1B-7B): a llama block with RMSNorm over the whole q and k
    // projections (HF q_norm [hidden], k_norm [kv dim]; llama.cpp's olmoe graph
    // norms Qcur/Kcur before the head reshape), NeoX RoPE, 64 experts of which 8
    // are used, top-k weights NOT renormalised (norm_topk_prob false, as
    // llama.cpp's olmoe graph fixes it).
    ArchInfo r{.arch = Arch::Olmoe, .gguf_name = "olmoe"};
    r.hf_model_types = {"olmoe"};
    r.hf_architectures = {"OlmoeForCausalLM"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = kAllScalings;
    r.qk_norm_full = true;
    r.moe = {.router = RouterKind::SoftmaxTopK,
             .expert_ffn_key = false,
             .hf_expert_count_key = "num_experts",
             .hf_expert_ffn_key = ""};
    std::vector<TensorSpec> block = llama_block({});
    auto out = std::find_if(block.begin(), block.end(), [](const TensorSpec& t) { return t.role == Role::AttnOut; });
    block.insert(out, {{Role::AttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", true, {E::QDim}, K::Norm},
                       {Role::AttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", true, {E::KvDim}, K::Norm}});
    r.tensors = concat(global_tensors(),
                       with_experts(std::move(block), "mlp.gate.weight", "mlp.experts.*.gate_proj.weight",
                                    "mlp.experts.*.up_proj.weight", "mlp.experts.*.down_proj.weight"));
    rows.push_back(std::move(r));
  }
  {
    // Qwen 3.5 / 3.6 (dense): a hybrid. Three layers in four are Gated DeltaNet (linear
    // attention: a fused Q/K/V projection through a causal convolution, a per-head
    // recurrent matrix updated by the gated delta rule, a gated RMSNorm, attn_gate the
    // gate's projection), every fourth is full attention whose attn_q rows hold each
    // head's query and an output gate (sigmoid), with per-head Q/K RMSNorm and partial
    // NeoX RoPE (multi-section, text positions). post_attention_norm is the FFN's input
    // norm. Names and shapes as llama.cpp b10587 reads them (src/models/qwen35.cpp); the
    // multi-token-prediction blocks after the trunk (nextn) are not read.
    ArchInfo r{.arch = Arch::Qwen35, .gguf_name = "qwen35"};
    set_qwen35_trunk(r);
    r.tensors = concat(r.tensors, qwen35_block());
    rows.push_back(std::move(r));
  }
  {
    // Qwen 3.5 / 3.6 MoE (Qwen3.6-35B-A3B): qwen35's trunk with every layer's FFN a
    // mixture of experts (src/models/qwen35moe.cpp): softmax over the experts, the top
    // k renormalised (build_moe_ffn's norm_w, as qwen3moe), plus a shared expert gated
    // by sigmoid(ffn_gate_inp_shexp · x) (MoeSpec::shared_expert). No HF names: like
    // qwen35, only GGUF files are read.
    ArchInfo r{.arch = Arch::Qwen35Moe, .gguf_name = "qwen35moe"};
    set_qwen35_trunk(r);
    r.moe = {.router = RouterKind::SoftmaxTopKRenormalized, .expert_ffn_key = true, .shared_expert = true};
    std::vector<TensorSpec> block = with_experts(qwen35_block(), "", "", "", "");
    block.push_back({Role::FfnGateInpShexp, "ffn_gate_inp_shexp.weight", "", true, {E::Dim}, K::Router});
    block.push_back({Role::FfnGateShexp, "ffn_gate_shexp.weight", "", true, {E::FfnShexp, E::Dim}, K::Matrix});
    block.push_back({Role::FfnUpShexp, "ffn_up_shexp.weight", "", true, {E::FfnShexp, E::Dim}, K::Matrix});
    block.push_back({Role::FfnDownShexp, "ffn_down_shexp.weight", "", true, {E::Dim, E::FfnShexp}, K::Matrix});
    r.tensors = concat(r.tensors, block);
    rows.push_back(std::move(r));
  }
  {
    // SmolLM3 (SmolLM3-3B): a llama block on GGML's interleaved RoPE pairs (llama.cpp's
    // converter permutes its Q/K rows as for llama: its rope type is NORM), every fourth
    // layer attending without RoPE (NoPE), as llama.cpp b10587's smollm3 graph fixes it
    // (n_no_rope_layer_step 4; no GGUF key). Tied embeddings in the released model.
    ArchInfo r{.arch = Arch::Smollm3, .gguf_name = "smollm3"};
    r.hf_model_types = {"smollm3"};
    r.hf_architectures = {"SmolLM3ForCausalLM"};
    r.rope = RopeKind::Normal;
    r.rope_scalings = kAllScalings;
    r.permute_qk = true;
    r.nope_interval = 4;
    r.tensors = concat(global_tensors(), llama_block({.permute_qk = true}));
    rows.push_back(std::move(r));
  }
  {
    // gpt-oss (gpt-oss-20b / 120b), as llama.cpp b10587 reads it (src/models/openai-moe.cpp):
    // q/k/v/o projections with biases, a learned sink logit per query head in every softmax,
    // every other layer (even ones) a 128-token sliding window, NeoX RoPE with YaRN, and a
    // mixture of experts on every layer: the router with its bias, the top-k logits
    // softmaxed (equal to softmax then top-k renormalised), experts with biases and the
    // clamped SwiGLU (swiglu_oai). post_attention_norm is the FFN's input norm.
    ArchInfo r{.arch = Arch::GptOss, .gguf_name = "gpt-oss"};
    r.rope = RopeKind::Neox;
    r.rope_scalings = kAllScalings;
    r.activation = Activation::SwigluOai;
    r.qkv_bias = true;
    r.tied_allowed = false;  // llama.cpp requires output.weight
    r.sliding_window.pattern = SlidingWindowSpec::Pattern::EveryNthGlobal;
    r.sliding_window.period = 2;  // set_swa_pattern(2): layer i local when i % 2 == 0
    r.sliding_window.window_required = true;
    r.sliding_window.period_key = true;
    r.sliding_window.local_rope_base_key = true;
    r.moe = {.router = RouterKind::SoftmaxTopKRenormalized, .expert_ffn_key = true};
    r.tensors = global_tensors();
    r.tensors.pop_back();  // no rope_freqs
    const std::vector<TensorSpec> block = {
        {Role::AttnNorm, "attn_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::AttnQ, "attn_q.weight", "", true, {E::QDim, E::Dim}, K::Matrix},
        {Role::AttnK, "attn_k.weight", "", true, {E::KvDim, E::Dim}, K::Matrix},
        {Role::AttnV, "attn_v.weight", "", true, {E::KvDim, E::Dim}, K::Matrix},
        {Role::AttnQBias, "attn_q.bias", "", true, {E::QDim}, K::Bias},
        {Role::AttnKBias, "attn_k.bias", "", true, {E::KvDim}, K::Bias},
        {Role::AttnVBias, "attn_v.bias", "", true, {E::KvDim}, K::Bias},
        {Role::AttnOut, "attn_output.weight", "", true, {E::Dim, E::QDim}, K::Matrix},
        {Role::AttnOutBias, "attn_output.bias", "", true, {E::Dim}, K::Bias},
        {Role::AttnSinks, "attn_sinks.weight", "", true, {E::Heads}, K::Sinks},
        {Role::FfnNorm, "post_attention_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::FfnRouter, "ffn_gate_inp.weight", "", true, {E::NExpert, E::Dim}, K::Router},
        {Role::FfnRouterBias, "ffn_gate_inp.bias", "", true, {E::NExpert}, K::Bias},
        {Role::FfnGateExps, "ffn_gate_exps.weight", "", true, {E::NExpert, E::FfnExp, E::Dim}, K::Experts},
        {Role::FfnGateExpsBias, "ffn_gate_exps.bias", "", true, {E::NExpert, E::FfnExp}, K::ExpertBias},
        {Role::FfnUpExps, "ffn_up_exps.weight", "", true, {E::NExpert, E::FfnExp, E::Dim}, K::Experts},
        {Role::FfnUpExpsBias, "ffn_up_exps.bias", "", true, {E::NExpert, E::FfnExp}, K::ExpertBias},
        {Role::FfnDownExps, "ffn_down_exps.weight", "", true, {E::NExpert, E::Dim, E::FfnExp}, K::Experts},
        {Role::FfnDownExpsBias, "ffn_down_exps.bias", "", true, {E::NExpert, E::Dim}, K::ExpertBias},
    };
    r.tensors.insert(r.tensors.end(), block.begin(), block.end());
    rows.push_back(std::move(r));
  }
  {
    // Gemma 4 (E2B, E4B, 26B-A4B, 31B), as llama.cpp b10587 reads it (src/models/gemma4.cpp,
    // llama-model.cpp's gemma4 hparams). Per layer: sliding or global by the
    // sliding_window_pattern array; local layers have their own head size
    // (key_length_swa), RoPE base (freq_base_swa) and rotary dims (dimension_count_swa);
    // global layers rotate all of key_length with rope_freqs.weight's factors (1 for the
    // rotated quarter, 1e30 for the rest: HF's "proportional" RoPE). Q and K RMS-normed per
    // head with weights, V without, score scale 1. The last shared_kv_layers layers reuse
    // earlier layers' K/V (no attn_k / attn_v). Per-layer token embeddings (E2B / E4B): a
    // row of per_layer_token_embd per token plus a projection of its embedding, gated into
    // each layer's output. A layer with ffn_gate_inp (26B-A4B) adds a mixture of experts
    // beside its dense FFN, each with its own norms. Norms are stored as applied (the
    // converter's norm_shift is 0), tied output, final soft-cap when the file has one.
    ArchInfo r{.arch = Arch::Gemma4, .gguf_name = "gemma4"};
    r.activation = Activation::GeluTanh;
    r.rope = RopeKind::Neox;
    r.qk_norm = true;
    r.v_norm = true;
    r.embed_scale = true;
    r.final_softcap = true;
    r.fixed_attn_scale = 1.0f;
    r.sliding_window.pattern = SlidingWindowSpec::Pattern::PerLayerArray;
    r.sliding_window.local_rope_theta = 10000.0f;  // llama.cpp's rope_freq_base_train_swa default
    r.moe = {.router = RouterKind::SoftmaxTopKRenormalized, .expert_ffn_key = true};
    using L = LayerKind;
    const auto P = Presence::Required;
    const auto N = Permute::None;
    r.tensors = {
        {Role::TokenEmbd, "token_embd.weight", "", false, {E::Vocab, E::Dim}, K::Matrix},
        {Role::PerLayerTokenEmbd, "per_layer_token_embd.weight", "", false, {E::Vocab, E::PerLayerAll}, K::Matrix, P,
         N, L::PerLayerInput},
        {Role::PerLayerModelProj, "per_layer_model_proj.weight", "", false, {E::PerLayerAll, E::Dim}, K::Matrix, P,
         N, L::PerLayerInput},
        {Role::PerLayerProjNorm, "per_layer_proj_norm.weight", "", false, {E::PerLayerDim}, K::Norm, P, N,
         L::PerLayerInput},
        {Role::OutputNorm, "output_norm.weight", "", false, {E::Dim}, K::Norm},
        {Role::Output, "output.weight", "", false, {E::Vocab, E::Dim}, K::Matrix, Presence::Untied},
        {Role::RopeFreqs, "rope_freqs.weight", "", false, {E::RotHalf}, K::RopeFactors},
        {Role::AttnNorm, "attn_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::AttnQ, "attn_q.weight", "", true, {E::QDim, E::Dim}, K::Matrix},
        {Role::AttnK, "attn_k.weight", "", true, {E::KvDim, E::Dim}, K::Matrix, P, N, L::OwnKv},
        {Role::AttnV, "attn_v.weight", "", true, {E::KvDim, E::Dim}, K::Matrix, P, N, L::OwnV},
        {Role::AttnQNorm, "attn_q_norm.weight", "", true, {E::HeadDim}, K::Norm},
        {Role::AttnKNorm, "attn_k_norm.weight", "", true, {E::HeadDim}, K::Norm, P, N, L::OwnKv},
        {Role::AttnOut, "attn_output.weight", "", true, {E::Dim, E::QDim}, K::Matrix},
        {Role::AttnPostNorm, "post_attention_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::FfnNorm, "ffn_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::FfnGate, "ffn_gate.weight", "", true, {E::Ffn, E::Dim}, K::Matrix},
        {Role::FfnUp, "ffn_up.weight", "", true, {E::Ffn, E::Dim}, K::Matrix},
        {Role::FfnDown, "ffn_down.weight", "", true, {E::Dim, E::Ffn}, K::Matrix},
        {Role::FfnPostNorm, "post_ffw_norm.weight", "", true, {E::Dim}, K::Norm},
        {Role::FfnRouter, "ffn_gate_inp.weight", "", true, {E::NExpert, E::Dim}, K::Router, P, N, L::Moe},
        {Role::FfnRouterScale, "ffn_gate_inp.scale", "", true, {E::Dim}, K::Norm, P, N, L::Moe},
        {Role::FfnPreNorm2, "pre_ffw_norm_2.weight", "", true, {E::Dim}, K::Norm, P, N, L::Moe},
        {Role::FfnPostNorm1, "post_ffw_norm_1.weight", "", true, {E::Dim}, K::Norm, P, N, L::Moe},
        {Role::FfnPostNorm2, "post_ffw_norm_2.weight", "", true, {E::Dim}, K::Norm, P, N, L::Moe},
        // The converter writes HF's fused experts.gate_up_proj; split gate / up tensors
        // (ffn_gate_exps, ffn_up_exps) are read too (Model::load), as llama.cpp does.
        {Role::FfnGateUpExps, "ffn_gate_up_exps.weight", "", true, {E::NExpert, E::GateUpExp, E::Dim}, K::Experts,
         P, N, L::Moe},
        {Role::FfnGateExps, "ffn_gate_exps.weight", "", true, {E::NExpert, E::FfnExp, E::Dim}, K::Experts,
         Presence::Optional, N, L::Moe},
        {Role::FfnUpExps, "ffn_up_exps.weight", "", true, {E::NExpert, E::FfnExp, E::Dim}, K::Experts,
         Presence::Optional, N, L::Moe},
        {Role::FfnDownExps, "ffn_down_exps.weight", "", true, {E::NExpert, E::Dim, E::FfnExp}, K::Experts, P, N,
         L::Moe},
        {Role::FfnDownExpsScale, "ffn_down_exps.scale", "", true, {E::NExpert}, K::Norm, Presence::Optional, N,
         L::Moe},
        {Role::PerLayerInpGate, "inp_gate.weight", "", true, {E::PerLayerDim, E::Dim}, K::Matrix, P, N,
         L::PerLayerInput},
        {Role::PerLayerProj, "proj.weight", "", true, {E::Dim, E::PerLayerDim}, K::Matrix, P, N, L::PerLayerInput},
        {Role::PerLayerPostNorm, "post_norm.weight", "", true, {E::Dim}, K::Norm, P, N, L::PerLayerInput},
        {Role::LayerOutScale, "layer_output_scale.weight", "", true, {E::One}, K::Norm, Presence::Optional},
    };
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string join_names(const std::vector<std::string_view>& names) {
  std::string s;
  for (std::string_view n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

bool contains(const std::vector<std::string_view>& v, std::string_view x) {
  for (std::string_view s : v)
    if (s == x) return true;
  return false;
}

}  // namespace

const std::vector<ArchInfo>& arch_table() {
  static const std::vector<ArchInfo> table = build_table();
  return table;
}

const ArchInfo& arch_info(Arch arch) {
  for (const ArchInfo& r : arch_table())
    if (r.arch == arch) return r;
  PAGODA_CHECK(false, "architecture without a table row");
  return arch_table().front();
}

const ArchInfo* find_arch_by_gguf(std::string_view name, bool has_experts) {
  const ArchInfo* any = nullptr;
  for (const ArchInfo& r : arch_table()) {
    if (r.gguf_name != name && !contains(r.gguf_aliases, name)) continue;
    if (r.has_experts() == has_experts) return &r;
    if (!any) any = &r;
  }
  return any;
}

const ArchInfo* find_arch_by_name(std::string_view name) {
  for (const ArchInfo& r : arch_table())
    if (r.name() == name) return &r;
  return nullptr;
}

const ArchInfo* find_arch_by_hf(std::string_view model_type, std::string_view hf_architecture) {
  for (const ArchInfo& r : arch_table())
    if (contains(r.hf_model_types, model_type)) return &r;
  if (!hf_architecture.empty())
    for (const ArchInfo& r : arch_table())
      if (contains(r.hf_architectures, hf_architecture)) return &r;
  return nullptr;
}

std::string supported_gguf_arch_names() {
  std::vector<std::string_view> names;
  for (const ArchInfo& r : arch_table()) {
    if (!contains(names, r.gguf_name)) names.push_back(r.gguf_name);
    for (std::string_view a : r.gguf_aliases)
      if (!contains(names, a)) names.push_back(a);
  }
  return join_names(names);
}

std::string supported_hf_model_types() {
  std::vector<std::string_view> names;
  for (const ArchInfo& r : arch_table()) names.insert(names.end(), r.hf_model_types.begin(), r.hf_model_types.end());
  return join_names(names);
}

const TensorSpec* ArchInfo::find(Role role) const {
  for (const TensorSpec& t : tensors)
    if (t.role == role) return &t;
  return nullptr;
}

std::string ArchInfo::gguf_tensor(Role role, int64_t layer) const {
  const TensorSpec* t = find(role);
  PAGODA_CHECK(t != nullptr, std::string(gguf_name) + " has no tensor of this role");
  return gguf_tensor_name(*t, layer);
}

std::string ArchInfo::hf_tensor(Role role, int64_t layer) const {
  const TensorSpec* t = find(role);
  PAGODA_CHECK(t != nullptr, std::string(gguf_name) + " has no tensor of this role");
  return hf_tensor_name(*t, layer);
}

bool ArchInfo::supports(RopeScalingType t) const {
  if (t == RopeScalingType::None) return true;
  for (RopeScalingType s : rope_scalings)
    if (s == t) return true;
  return false;
}

std::string gguf_tensor_name(const TensorSpec& t, int64_t layer) {
  if (!t.per_layer) return std::string(t.gguf);
  return "blk." + std::to_string(layer) + "." + std::string(t.gguf);
}

std::string hf_tensor_name(const TensorSpec& t, int64_t layer, int64_t expert) {
  if (t.hf.empty() || !t.per_layer) return std::string(t.hf);
  std::string name(t.hf);
  if (const size_t star = name.find('*'); star != std::string::npos)
    name.replace(star, 1, std::to_string(expert));
  return "model.layers." + std::to_string(layer) + "." + name;
}

std::vector<int64_t> resolve_shape(const TensorSpec& t, const ModelConfig& c, int64_t layer) {
  std::vector<int64_t> out;
  out.reserve(t.shape.size());
  for (Extent e : t.shape) {
    switch (e) {
      case Extent::Vocab: out.push_back(c.n_vocab); break;
      case Extent::Dim: out.push_back(c.dim); break;
      case Extent::QDim: out.push_back(c.q_dim_of(layer)); break;
      case Extent::KvDim: out.push_back(c.kv_dim_of(layer)); break;
      case Extent::HeadDim: out.push_back(c.head_dim_of(layer)); break;
      case Extent::Ffn: out.push_back(c.ffn_of(layer)); break;
      case Extent::RotHalf: out.push_back(c.n_rot / 2); break;
      case Extent::QkvDim: out.push_back(c.q_dim() + 2 * c.kv_dim()); break;
      case Extent::GateUpDim: out.push_back(2 * c.ffn_dim); break;
      case Extent::Heads: out.push_back(c.n_heads); break;
      case Extent::NExpert: out.push_back(c.n_expert); break;
      case Extent::FfnExp: out.push_back(c.expert_ffn_dim); break;
      case Extent::FfnShexp: out.push_back(c.shared_expert_ffn_dim); break;
      case Extent::QGateDim: out.push_back(2 * c.q_dim()); break;
      case Extent::SsmConvDim: out.push_back(c.ssm_conv_dim()); break;
      case Extent::SsmValueDim: out.push_back(c.ssm_value_dim()); break;
      case Extent::SsmVHeads: out.push_back(c.ssm_v_heads); break;
      case Extent::SsmHeadDim: out.push_back(c.ssm_head_dim); break;
      case Extent::SsmConvKernel: out.push_back(c.ssm_conv_kernel); break;
      case Extent::PerLayerDim: out.push_back(c.per_layer_dim); break;
      case Extent::PerLayerAll: out.push_back(c.per_layer_dim * c.n_layers); break;
      case Extent::GateUpExp: out.push_back(2 * c.expert_ffn_dim); break;
      case Extent::One: out.push_back(1); break;
    }
  }
  return out;
}

const char* rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::None: return "none";
    case RopeScalingType::Linear: return "linear";
    case RopeScalingType::Yarn: return "yarn";
    case RopeScalingType::LongRope: return "longrope";
  }
  return "?";
}

}  // namespace pagoda
