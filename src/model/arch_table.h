// The architecture table: one row per supported model architecture, the only
// place that says what an architecture is made of.
//
// Contract:
// - Every reader of models goes through this table: ModelConfig::from_gguf
//   (general.architecture -> row, metadata keys under the row's prefix),
//   HfModelDir::open (config.json model_type / architectures -> row),
//   load_hf_weights (HF tensor name -> GGUF name, shape, Q/K permutation),
//   convert_hf_to_gguf (the row's GGUF name), write_synthetic_model (which
//   tensors to write, their shapes and how to fill them) and Model::load
//   (tensor names by role). Adding an architecture is a row here plus the ops
//   its forward pass needs in model.cpp.
// - Rows are static, immutable, and live for the whole program: a `const
//   ArchInfo&` may be kept anywhere, read from any thread.
// - Tensor shapes are written symbolically (Extent) in row-major (HF) order and
//   resolved against a ModelConfig; GGUF dims are the reverse (ggml order).
//
// How to add a row: append the Arch enumerator, write the row in arch_table.cpp
// (names from llama.cpp's gguf-py constants / convert_hf_to_gguf.py, which is
// what other GGUF readers expect), list its tensors in the order synth should
// draw them, then give Model::load / Model::forward the ops the row's flags ask
// for. Fields marked "(not read yet)" are declared for rows still to come
// (mixture-of-experts routers); a row that sets them must also add the code
// that reads them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct ModelConfig;

// Mixtral is GGUF architecture `llama` with experts: a row of its own (HF names,
// tensors) that find_arch_by_gguf picks for a `llama` file with llama.expert_count.
enum class Arch { Llama, Qwen2, Qwen3, Phi3, Gemma2, Gemma3, Qwen3Moe, Mixtral, Olmoe, Qwen35, Qwen35Moe, Smollm3, GptOss, Gemma4 };

// RoPE context-extension scaling a model may declare (GGUF rope.scaling.type,
// HF rope_scaling.type). Llama 3's scaling is carried by rope_freqs.weight and
// needs no type here. LongRope (Phi-3) has no GGUF type either: a file has it
// when it holds rope_factors_long/short.weight (as llama.cpp decides).
enum class RopeScalingType { None, Linear, Yarn, LongRope };

enum class NormKind {
  Rms,  // x / rms(x) * w (Gemma's x / rms(x) * (1 + w): the GGUF stores 1 + w, see hf_norm_shift)
};

enum class Activation {
  Silu,      // gated: down(silu(gate(x)) * up(x))
  GeluTanh,  // gated: down(gelu_tanh(gate(x)) * up(x)) (Gemma's gelu_pytorch_tanh)
  // gpt-oss (ggml's swiglu_oai, alpha 1.702, limit 7): g = min(gate, 7), u = clamp(up, -7, 7),
  // down(g * sigmoid(1.702 g) * (u + 1)).
  SwigluOai,
};

enum class RopeKind {
  Normal,  // GGML's interleaved pairs (2i, 2i+1): llama after the HF->GGUF Q/K permutation
  Neox,    // halves (i, i + n_rot/2), as HF's rotate_half, on unpermuted weights
};

// Mixture-of-experts routing: how the router's logits over the n_expert experts
// become the weights of the k experts a token uses.
enum class RouterKind {
  None,                    // dense FFN
  SoftmaxTopK,             // softmax over all experts, keep the top k weights as they are (OLMoE)
  SoftmaxTopKRenormalized, // softmax, top k, weights renormalised to sum 1 (Qwen3-MoE
                           // norm_topk_prob; Mixtral's softmax over the top-k logits is the same)
};

// Sliding-window attention layout over layers: which layers are local (attend to the
// last `sliding_window` positions only: key position k is visible from query position q
// when q - window < k <= q, as llama.cpp's LLAMA_SWA_TYPE_STANDARD and HF's sliding mask).
struct SlidingWindowSpec {
  enum class Pattern {
    None,        // every layer attends to the whole context
    Ignored,     // the model declares a window ({arch}.attention.sliding_window, HF
                 // sliding_window), read into ModelConfig, but every layer attends to the
                 // whole context, as llama.cpp does for phi3 (its loader disables phi3 SWA)
    AllLayers,   // every layer uses the window
    EveryNthGlobal,  // layer i is global when (i + 1) % period == 0, local otherwise
    PerLayerArray,   // {arch}.attention.sliding_window_pattern: one bool per layer, true =
                     // local (Gemma 4; llama.cpp's get_key_or_arr: a scalar means every layer)
  };
  Pattern pattern = Pattern::None;
  int64_t period = 0;  // EveryNthGlobal only
  // The file must say its window ({arch}.attention.sliding_window): llama.cpp requires the
  // key for gpt-oss (no default window).
  bool window_required = false;
  // The period may come from {arch}.attention.sliding_window_pattern (a number; 0: every
  // layer local), as llama.cpp's openai-moe loader reads it (default `period`). That loader
  // ignores an array there; pagoda refuses one that disagrees with the period it would use.
  bool period_key = false;
  // {arch}.rope.freq_base_swa, when present, is the local layers' RoPE base with the global
  // scaling kept (gpt-oss: llama.cpp's rope_freq_scale_train_swa = the global scale).
  bool local_rope_base_key = false;
  // Window when the file has no {arch}.attention.sliding_window key (llama.cpp's
  // gemma2 default 4096); 0: no key means no window (gemma3, as llama.cpp).
  int64_t default_window = 0;
  // RoPE base of the local layers when the file has no {arch}.rope.freq_base_swa key;
  // local layers then also drop the RoPE scaling (gemma3: 10000, unscaled, while the
  // global layers use rope.freq_base 1e6 and linear 8 on 4B+). 0: local layers use the
  // global RoPE (gemma2).
  float local_rope_theta = 0.0f;
};

struct MoeSpec {
  RouterKind router = RouterKind::None;  // None: the row has no experts
  // The expert FFN width comes from {arch}.expert_feed_forward_length (qwen3moe)
  // rather than feed_forward_length (mixtral: llama's key, the expert width).
  bool expert_ffn_key = false;
  // config.json keys: the expert count (qwen3_moe num_experts, mixtral
  // num_local_experts) and one expert's FFN width ("" : intermediate_size is it).
  std::string_view hf_expert_count_key{};
  std::string_view hf_expert_ffn_key{};
  // A shared expert beside the routed ones (qwen35moe, as llama.cpp's qwen2moe / qwen3next /
  // qwen35moe graphs): every token's FFN output is the routed experts' weighted sum plus
  // sigmoid(ffn_gate_inp_shexp · x) times a SwiGLU FFN of width
  // {arch}.expert_shared_feed_forward_length (default feed_forward_length). Such rows read
  // feed_forward_length as optional (llama.cpp does; Qwen 3.5's MoE config has no dense
  // width) and, without expert_feed_forward_length, take feed_forward_length /
  // expert_used_count as the expert width (llama.cpp's fallback).
  bool shared_expert = false;
};

// A symbolic tensor extent, resolved by resolve_shape() against a ModelConfig.
enum class Extent {
  Vocab,      // n_vocab
  Dim,        // dim (embedding_length / hidden_size)
  QDim,       // n_heads * head_dim
  KvDim,      // n_kv_heads * head_dim
  HeadDim,    // head_dim
  Ffn,        // ffn_dim
  RotHalf,    // n_rot / 2
  QkvDim,     // q_dim + 2 * kv_dim (fused Q, K, V rows, in that order)
  GateUpDim,  // 2 * ffn_dim (fused gate then up rows)
  Heads,      // n_heads (one value per query head: attention sinks)
  NExpert,    // n_expert
  FfnExp,     // expert_ffn_dim (one expert's FFN width)
  FfnShexp,   // shared_expert_ffn_dim (the shared expert's FFN width)
  // Gated attention and Gated DeltaNet (qwen35, qwen35moe; ModelConfig's ssm_* fields):
  QGateDim,     // 2 * q_dim: each head's query followed by its output gate
  SsmConvDim,   // the convolved channels: 2 * key_dim + value_dim (Q, K, V of the linear layer)
  SsmValueDim,  // value_dim = n_v_heads * head_dim (ssm.inner_size)
  SsmVHeads,    // value heads (ssm.time_step_rank)
  SsmHeadDim,   // head_dim of the linear layer's heads (ssm.state_size)
  SsmConvKernel,  // the causal convolution's width (ssm.conv_kernel)
  // Gemma 4:
  PerLayerDim,  // per_layer_dim (embedding_length_per_layer_input)
  PerLayerAll,  // per_layer_dim * n_layers: one token's per-layer embeddings, every layer
  GateUpExp,    // 2 * expert_ffn_dim (fused expert gate then up rows)
  One,          // 1 (a scalar stored as a 1-element tensor)
};

// What a tensor is for: Model::load and synth look tensors up by role.
enum class Role {
  TokenEmbd, OutputNorm, Output, RopeFreqs, RopeFactorsLong, RopeFactorsShort,
  AttnNorm, AttnQ, AttnK, AttnV, AttnQkv, AttnQBias, AttnKBias, AttnVBias, AttnQNorm, AttnKNorm, AttnOut,
  AttnPostNorm,  // RMSNorm of the attention output before the residual add (Gemma 2/3)
  FfnNorm, FfnGate, FfnUp, FfnGateUp, FfnDown,
  FfnPostNorm,   // RMSNorm of the FFN output before the residual add (Gemma 2/3)
  FfnRouter,                          // [n_expert, dim] router logits (ffn_gate_inp)
  FfnGateExps, FfnUpExps, FfnDownExps, // [n_expert, ffn_exp, dim] / [n_expert, dim, ffn_exp]
  // The shared expert (MoeSpec::shared_expert): its gate's projection and its SwiGLU FFN.
  FfnGateInpShexp,                       // [dim] sigmoid(w · x) scales the shared expert's output
  FfnGateShexp, FfnUpShexp, FfnDownShexp, // [ffn_shexp, dim] / [ffn_shexp, dim] / [dim, ffn_shexp]
  // gpt-oss: the attention output's bias, a learned logit per query head that joins every
  // softmax (attn_sinks), the router's bias and each expert's biases ([n_expert, rows]).
  AttnOutBias, AttnSinks, FfnRouterBias, FfnGateExpsBias, FfnUpExpsBias, FfnDownExpsBias,
  // Gated DeltaNet (linear attention) layers; their fused Q, K, V projection is AttnQkv.
  SsmGate,      // [value_dim, dim] z: the output gate (attn_gate)
  SsmConv1d,    // [conv_dim, conv_kernel] the depthwise causal convolution
  SsmDtBias,    // [n_v_heads] added to alpha before softplus
  SsmA,         // [n_v_heads] -exp(A_log): the decay rate (negative)
  SsmBeta,      // [n_v_heads, dim] the write strength's projection
  SsmAlpha,     // [n_v_heads, dim] the decay's projection
  SsmNorm,      // [head_dim] the gated RMSNorm of the output
  SsmOut,       // [dim, value_dim] the output projection
  // Gemma 4. Per-layer token embeddings: per token a row of per_layer_dim values for every
  // layer, mixed with a projection of the token's embedding, gated into each layer's output.
  PerLayerTokenEmbd,  // [n_vocab, n_layers * per_layer_dim] read by rows, never repacked
  PerLayerModelProj,  // [n_layers * per_layer_dim, dim]
  PerLayerProjNorm,   // [per_layer_dim]
  PerLayerInpGate,    // [per_layer_dim, dim] (per layer)
  PerLayerProj,       // [dim, per_layer_dim] (per layer)
  PerLayerPostNorm,   // [dim] (per layer)
  LayerOutScale,      // [1] the layer's output (the whole residual) times this scalar
  FfnRouterScale,     // [dim] ffn_gate_inp.scale: the router's input (RMS-normed, / sqrt(dim)) times it
  FfnPreNorm2,        // [dim] the experts' input norm (pre_ffw_norm_2)
  FfnPostNorm1,       // [dim] the dense FFN's output norm in a MoE layer (post_ffw_norm_1)
  FfnPostNorm2,       // [dim] the experts' output norm (post_ffw_norm_2)
  FfnGateUpExps,      // [n_expert, 2 ffn_exp, dim] gate rows then up rows of each expert
  FfnDownExpsScale,   // [n_expert] each expert's output times this (ffn_down_exps.scale)
};

// How synth fills a tensor (and how convert stores it: everything but Matrix is 1-D F32).
enum class TensorKind {
  Matrix,      // 2-D weight, uniform with std 1/sqrt(columns) (token_embd: std 1)
  Norm,        // 1 + small jitter
  Bias,        // small values
  RopeFactors, // computed from the RoPE scaling, never random
  Router,      // 2-D like Matrix, but always F32 (llama.cpp's converter and quantizer
               // keep ffn_gate_inp F32: 128 x 2048 is 1 MiB a layer, and routing is
               // a discrete choice that quantization noise would flip); 1-D for the
               // shared expert's gate (ffn_gate_inp_shexp [dim], one logit per token)
  Experts,     // 3-D [n_expert, rows, cols]: n_expert matrices drawn like Matrix; in HF
               // directories one 2-D tensor per expert (the hf name's '*' is the index)
  Decay,       // 1-D, negative: -uniform(1, 16) (a DeltaNet's -exp(A_log)), always F32
  ExpertBias,  // 2-D [n_expert, rows]: one bias row per expert (gpt-oss), small values, F32
  Sinks,       // 1-D attention-sink logits, uniform with std 1, always F32 (as large as the
               // scores they compete with, so a model that ignored them would show)
};

// Which layers of a hybrid model (ModelConfig::is_recurrent) hold a per-layer tensor.
enum class LayerKind {
  All,
  Attention,  // full-attention layers only
  Recurrent,  // linear-attention (Gated DeltaNet) layers only
  OwnKv,      // layers that write their own K/V (not Gemma 4's shared-KV layers)
  OwnV,       // OwnKv layers with a V projection (not attention_k_eq_v global layers)
  Moe,        // layers with a mixture of experts (ModelConfig::moe_layers)
  PerLayerInput,  // present when the model has per-layer token embeddings (per_layer_dim
                  // > 0; also for global tensors)
};

enum class Presence {
  Required,  // always in the file
  Untied,    // present unless the embeddings are tied (output.weight)
  Optional,  // may be absent; who needs it checks (rope_freqs.weight: llama3 scaling)
};

// Which head count the HF->GGUF Q/K row permutation groups rows by (only for
// rows with permute_qk; llama.cpp's LlamaModel.permute).
enum class Permute { None, ByHeads, ByKvHeads };

struct TensorSpec {
  Role role;
  // Names without the layer prefix for per-layer tensors: GGUF "blk.N." + gguf,
  // HF "model.layers.N." + hf. hf == "" means the tensor is not stored in HF
  // directories: the HF loader computes it from config.json (rope_freqs).
  // Experts: hf holds one '*', replaced by the expert index.
  std::string_view gguf;
  std::string_view hf;
  bool per_layer;
  std::vector<Extent> shape;  // row-major (HF) order
  TensorKind kind;
  Presence presence = Presence::Required;
  Permute permute = Permute::None;
  LayerKind layers = LayerKind::All;
};

struct ArchInfo {
  Arch arch;
  std::string_view gguf_name;                     // general.architecture written, metadata key prefix
  std::string_view id{};                          // synth --arch name when gguf_name is shared ("mixtral")
  std::vector<std::string_view> gguf_aliases{};     // other general.architecture values read as this row
  std::vector<std::string_view> hf_model_types{};   // config.json model_type values
  std::vector<std::string_view> hf_architectures{}; // config.json architectures[0] values
  NormKind norm = NormKind::Rms;
  Activation activation = Activation::Silu;
  RopeKind rope = RopeKind::Normal;
  std::vector<RopeScalingType> rope_scalings{};     // accepted rope.scaling types (None always)
  bool qk_norm = false;       // RMSNorm over head_dim of every q and k head, before RoPE
  bool qk_norm_full = false;  // RMSNorm over all of q (q_dim) and of k (kv_dim), before the
                              // head split and RoPE (OLMoE); excludes qk_norm
  bool qkv_bias = false;      // q/k/v projections carry biases
  bool permute_qk = false;    // HF->GGUF permutes Q/K rows into GGML's RoPE pair order
  bool tied_allowed = true;   // output.weight may be absent (reads token_embd.weight)
  // Gemma: HF checkpoints store RMSNorm weights w applied as (1 + w); llama.cpp's
  // converter writes w + 1 into the GGUF (Gemma2Model / Gemma3Model modify_tensors), so
  // GGUF norms are used as they are and load_hf_weights adds this shift to every HF
  // norm tensor (TensorKind::Norm, q/k norms included). 0: no shift.
  float hf_norm_shift = 0.0f;
  bool embed_scale = false;   // embeddings multiplied by sqrt(dim) (Gemma)
  // Attention logit soft-capping s -> c * tanh(s / c) read from {arch}.attn_logit_softcapping,
  // with this default when the key is absent (gemma2: 50, as llama.cpp); 0: never capped.
  float attn_softcap_default = 0.0f;
  bool attn_softcap = false;  // the row reads attn_logit_softcapping at all
  // Final-logit soft-capping from {arch}.final_logit_softcapping (read when final_softcap),
  // this default when absent (gemma2: 30; gemma3: 0, i.e. only when the file says so).
  bool final_softcap = false;
  float final_softcap_default = 0.0f;
  // llama.cpp's query scale for Gemma: 1/sqrt(dim / n_heads) for the 27B models (this
  // block count), 1/sqrt(head_dim) otherwise; it has no GGUF key (HF: query_pre_attn_scalar,
  // which equals those numbers). 0: always 1/sqrt(head_dim).
  int64_t attn_scale_dim_over_heads_layers = 0;
  // A fixed attention score scale (gemma4: 1, its q and k are RMS-normed per head, as
  // llama.cpp's f_attention_scale); 0: the rules above.
  float fixed_attn_scale = 0.0f;
  // V RMS-normed per head without a weight before it is stored (gemma4).
  bool v_norm = false;
  SlidingWindowSpec sliding_window{};
  MoeSpec moe{};
  // Gated attention (qwen35, qwen35moe): attn_q's rows hold, per head, the query and then a gate of
  // head_dim; the attention output is multiplied by sigmoid(gate) before attn_output.
  bool gated_attention = false;
  // Hybrid linear attention (qwen35, qwen35moe): Gated DeltaNet layers beside full-attention ones,
  // read from {arch}.ssm.* keys; {arch}.attention.recurrent_layers (an array) says which
  // layers are linear, else {arch}.full_attention_interval (default below): layer i is
  // full attention when (i + 1) % interval == 0, as llama.cpp reads them.
  bool linear_attention = false;
  int64_t default_full_attention_interval = 0;
  // NoPE layers (SmolLM3): layer i skips RoPE when (i + 1) % nope_interval == 0. llama.cpp
  // fixes it per architecture (n_no_rope_layer_step 4 for smollm3) and reads no GGUF key.
  // 0: every layer rotates.
  int64_t nope_interval = 0;
  std::vector<TensorSpec> tensors{};  // global tensors first, then one layer's, in synth's drawing order

  // The spec for `role`, or nullptr when the row has no such tensor.
  const TensorSpec* find(Role role) const;
  bool has(Role role) const { return find(role) != nullptr; }
  // Full GGUF / HF name of `role` (layer ignored for global tensors).
  // Requires: has(role) (always-on check).
  std::string gguf_tensor(Role role, int64_t layer = 0) const;
  std::string hf_tensor(Role role, int64_t layer = 0) const;
  bool supports(RopeScalingType t) const;
  bool has_experts() const { return moe.router != RouterKind::None; }
  // The row's name for synth and messages: id, else gguf_name.
  std::string_view name() const { return id.empty() ? gguf_name : id; }
};

// Every row, in table order.
const std::vector<ArchInfo>& arch_table();
const ArchInfo& arch_info(Arch arch);
// Lookups: nullptr when no row matches. Among rows sharing a GGUF name (llama and
// mixtral), the one whose has_experts() equals `has_experts` ({arch}.expert_count > 0).
const ArchInfo* find_arch_by_gguf(std::string_view general_architecture, bool has_experts = false);
// By name() (synth --arch): nullptr when none.
const ArchInfo* find_arch_by_name(std::string_view name);
const ArchInfo* find_arch_by_hf(std::string_view model_type, std::string_view hf_architecture);
// "llama, mistral, qwen2, qwen3": for "unsupported" messages.
std::string supported_gguf_arch_names();
std::string supported_hf_model_types();

// Full names of a spec at `layer` (and, for Experts tensors in HF, `expert`).
std::string gguf_tensor_name(const TensorSpec& t, int64_t layer);
std::string hf_tensor_name(const TensorSpec& t, int64_t layer, int64_t expert = 0);
// Row-major (HF) shape of `t` for config `c` at `layer` (per-layer extents: Gemma 4's
// heads and FFN widths differ by layer).
std::vector<int64_t> resolve_shape(const TensorSpec& t, const ModelConfig& c, int64_t layer = 0);

const char* rope_scaling_name(RopeScalingType t);

}  // namespace pagoda
