#include "model/model.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/ops.h"

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

Model::~Model() = default;

void configure_recurrent_states(const ModelConfig& c, RecurrentStates& states) {
  if (c.hybrid()) states.configure(c.n_recurrent_layers(), c.recurrent_state_floats());
}

uint64_t recurrent_state_bytes(const ModelConfig& c) {
  if (!c.hybrid()) return 0;
  return static_cast<uint64_t>(c.n_recurrent_layers()) * static_cast<uint64_t>(c.recurrent_state_floats()) *
         sizeof(float);
}

namespace {

class TensorLoader {
 public:
  // sole_user: the model holds the only reference to `f`, so it may free what it copied.
  TensorLoader(const WeightSource& f, bool sole_user) : f_(f), sole_user_(sole_user) {}

  const gguf::TensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }
  const std::string& path() const { return f_.path(); }

  // The tensor `name` with exactly `dims` (ggml order) and a supported weight type.
  const gguf::TensorInfo& require(const std::string& name, std::vector<int64_t> dims) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) throw Error(f_.path() + ": missing tensor '" + name + "'");
    check(*t, dims);
    return *t;
  }

  void check(const gguf::TensorInfo& t, const std::vector<int64_t>& dims) const {
    if (!t.type_known || !traits(t.type).weight_supported) {
      std::string tn = t.type_known ? type_name(t.type) : "type id " + std::to_string(t.type_id);
      throw Error(f_.path() + ": tensor '" + t.name + "' has unsupported type " + tn +
                  " (supported: " + supported_weight_types() + ")");
    }
    std::vector<int64_t> actual = t.dims;
    while (actual.size() > dims.size() && actual.back() == 1) actual.pop_back();
    if (actual != dims) {
      std::string want = "[";
      for (size_t i = 0; i < dims.size(); ++i) want += (i ? ", " : "") + std::to_string(dims[i]);
      want += "]";
      throw Error(f_.path() + ": tensor '" + t.name + "' has shape " + t.shape_string() +
                  ", expected " + want);
    }
  }

  // The matrix `name`, repacked where the ISA wants it. A repacked matrix is read
  // only through its copy, so its file pages leave the resident set right away
  // (else a 607 MiB TinyLlama Q4_0 kept 570 MiB of file pages beside the 556 MiB
  // copy). Tied embeddings too: the embedding reads its rows from the repacked
  // output copy (WeightMatrix::read_row). Bytes the source owns (--quantize's
  // copies) are freed outright when the model is the source's only user.
  WeightMatrix matrix(const std::string& name, int64_t n_rows, int64_t n_cols) const {
    const gguf::TensorInfo& t = require(name, {n_cols, n_rows});
    WeightMatrix w = WeightMatrix::prepare(t.type, n_rows, n_cols, t.data);
    if (w.reads_own_copy()) copied(t);
    return w;
  }

  // `t` was repacked whole (a fused tensor: all its parts): see matrix().
  void copied(const gguf::TensorInfo& t) const {
    if (sole_user_) released_ += f_.release(t);
    else f_.drop_resident(t);
  }

  std::vector<float> vector(const std::string& name, int64_t n, bool optional = false) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return {};
      throw Error(f_.path() + ": missing tensor '" + name + "'");
    }
    check(*t, {n});
    std::vector<float> out(n);
    dequantize_row(t->type, t->data, out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(out[i]))
        throw Error(f_.path() + ": tensor '" + name + "' holds a non-finite value at index " +
                    std::to_string(i));
    return out;
  }

  // A small 2-D tensor [rows, cols] (row-major) as f32 values, checked finite: per-expert
  // biases.
  std::vector<float> table(const std::string& name, int64_t rows, int64_t cols) const {
    const gguf::TensorInfo& t = require(name, {cols, rows});
    std::vector<float> out(static_cast<size_t>(rows * cols));
    const size_t rb = row_bytes(t.type, cols);
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t.type, t.data + r * rb, &out[r * cols], cols);
    for (size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i]))
        throw Error(f_.path() + ": tensor '" + name + "' holds a non-finite value at index " + std::to_string(i));
    return out;
  }

  // Bytes release() handed back (freed copies, or dropped file pages).
  size_t released() const { return released_; }

 private:
  const WeightSource& f_;
  bool sole_user_;
  mutable size_t released_ = 0;
};

// The router and the expert tensors of layer i. Each 3-D [n_expert, rows, cols]
// tensor is n_expert consecutive matrices: expert e's matrix is a view at
// e * rows * row_bytes (no copy unless the kernel repacks it, per slice).
template <class Layer, class Tick>
void load_experts(const TensorLoader& ld, const ArchInfo& row, const ModelConfig& c, int64_t i, Layer& L,
                  Tick&& tick) {
  L.moe = true;
  L.router = ld.matrix(row.gguf_tensor(Role::FfnRouter, i), c.n_expert, c.dim);
  if (row.has(Role::FfnRouterBias)) L.router_bias = ld.vector(row.gguf_tensor(Role::FfnRouterBias, i), c.n_expert);
  if (row.has(Role::FfnGateExpsBias)) {
    L.exp_gate_bias = ld.table(row.gguf_tensor(Role::FfnGateExpsBias, i), c.n_expert, c.expert_ffn_dim);
    L.exp_up_bias = ld.table(row.gguf_tensor(Role::FfnUpExpsBias, i), c.n_expert, c.expert_ffn_dim);
    L.exp_down_bias = ld.table(row.gguf_tensor(Role::FfnDownExpsBias, i), c.n_expert, c.dim);
  }
  if (row.has(Role::FfnRouterScale)) {  // Gemma 4: the router's scale and the two branches' norms
    L.router_scale = ld.vector(row.gguf_tensor(Role::FfnRouterScale, i), c.dim);
    L.ffn_pre_norm2 = ld.vector(row.gguf_tensor(Role::FfnPreNorm2, i), c.dim);
    L.ffn_post_norm1 = ld.vector(row.gguf_tensor(Role::FfnPostNorm1, i), c.dim);
    L.ffn_post_norm2 = ld.vector(row.gguf_tensor(Role::FfnPostNorm2, i), c.dim);
  }
  if (row.has(Role::FfnDownExpsScale))
    L.down_exps_scale = ld.vector(row.gguf_tensor(Role::FfnDownExpsScale, i), c.n_expert, /*optional=*/true);
  tick();
  // One prepare of the whole tensor, then row slices: the repacked experts sit
  // in one huge-page buffer. Qwen3-30B-A3B's 768 x 2048 Q4_0 expert is 864 KiB,
  // under HugePageBuffer's 2 MiB threshold: prepared alone, each would be a 4 KiB-
  // page heap block (TLB walks on every decode read), and 18k allocations.
  auto stack = [&](Role role, int64_t rows, int64_t cols, WeightMatrix& all, std::vector<WeightMatrix>& out) {
    const gguf::TensorInfo& t = ld.require(row.gguf_tensor(role, i), {cols, rows, c.n_expert});
    const size_t slice = row_bytes(t.type, cols) * static_cast<size_t>(rows);
    out.clear();
    out.reserve(c.n_expert);
    if (rows % WeightMatrix::kSliceRowAlign == 0) {
      all = WeightMatrix::prepare(t.type, rows * c.n_expert, cols, t.data);
      for (int64_t e = 0; e < c.n_expert; ++e) out.push_back(all.row_slice(e * rows, rows));
    } else {
      for (int64_t e = 0; e < c.n_expert; ++e)
        out.push_back(WeightMatrix::prepare(t.type, rows, cols, t.data + e * slice));
    }
    // Every expert is read through its copy from now on: drop the file's pages (a
    // 32-expert Q4_0 synth kept all 119 MiB of them beside the copies, 2.0x RSS).
    if (std::all_of(out.begin(), out.end(), [](const WeightMatrix& w) { return w.reads_own_copy(); }))
      ld.copied(t);
    tick();
  };
  if (c.fused_gate_up_exps) {
    // [n_expert, 2 ffn_exp, dim]: expert e's gate rows then its up rows, both row slices of
    // one prepared matrix (or, unaligned, prepared per expert from the file's rows).
    const int64_t f = c.expert_ffn_dim;
    const gguf::TensorInfo& t = ld.require(row.gguf_tensor(Role::FfnGateUpExps, i), {c.dim, 2 * f, c.n_expert});
    const size_t rb = row_bytes(t.type, c.dim);
    L.exp_gate.clear();
    L.exp_up.clear();
    if (f % WeightMatrix::kSliceRowAlign == 0) {
      L.all_gate = WeightMatrix::prepare(t.type, 2 * f * c.n_expert, c.dim, t.data);
      for (int64_t e = 0; e < c.n_expert; ++e) {
        L.exp_gate.push_back(L.all_gate.row_slice(2 * f * e, f));
        L.exp_up.push_back(L.all_gate.row_slice(2 * f * e + f, f));
      }
    } else {
      for (int64_t e = 0; e < c.n_expert; ++e) {
        L.exp_gate.push_back(WeightMatrix::prepare(t.type, f, c.dim, t.data + rb * static_cast<size_t>(2 * f * e)));
        L.exp_up.push_back(WeightMatrix::prepare(t.type, f, c.dim, t.data + rb * static_cast<size_t>(2 * f * e + f)));
      }
    }
    auto own = [](const std::vector<WeightMatrix>& v) {
      return std::all_of(v.begin(), v.end(), [](const WeightMatrix& w) { return w.reads_own_copy(); });
    };
    if (own(L.exp_gate) && own(L.exp_up)) ld.copied(t);
    tick();
    tick();
  } else {
    stack(Role::FfnGateExps, c.expert_ffn_dim, c.dim, L.all_gate, L.exp_gate);
    stack(Role::FfnUpExps, c.expert_ffn_dim, c.dim, L.all_up, L.exp_up);
  }
  stack(Role::FfnDownExps, c.dim, c.expert_ffn_dim, L.all_down, L.exp_down);
  if (row.moe.shared_expert) {
    // llama.cpp reads ffn_gate_inp_shexp as {n_embd}: one logit per token. Also accepted
    // as [dim, 1] (the checker drops trailing 1s), which is how HF's Linear(dim, 1) reads.
    L.shexp_gate_inp = ld.vector(row.gguf_tensor(Role::FfnGateInpShexp, i), c.dim);
    L.shexp_gate = ld.matrix(row.gguf_tensor(Role::FfnGateShexp, i), c.shared_expert_ffn_dim, c.dim);
    L.shexp_up = ld.matrix(row.gguf_tensor(Role::FfnUpShexp, i), c.shared_expert_ffn_dim, c.dim);
    L.shexp_down = ld.matrix(row.gguf_tensor(Role::FfnDownShexp, i), c.dim, c.shared_expert_ffn_dim);
    tick();
  }
}


// A full-attention layer's projections and norms (every layer of a non-hybrid model), in
// the layer's own shape (Gemma 4: head_dim_of / q_dim_of / kv_dim_of). A shared-KV layer
// has no K / V projections, a V-from-K layer no V projection.
template <class Layer, class Tick>
void load_attention(const TensorLoader& ld, const ModelConfig& c, int64_t i, Layer& L, Tick&& tick) {
  const ArchInfo& row = c.info();
  auto name = [&](Role role) { return row.gguf_tensor(role, i); };
  const int64_t hd = c.head_dim_of(i), q_dim = c.q_dim_of(i), kv_dim = c.kv_dim_of(i);
  const bool own_kv = c.has_own_kv(i);
  if (row.qk_norm) {
    L.q_norm = ld.vector(name(Role::AttnQNorm), hd);
    if (own_kv) L.k_norm = ld.vector(name(Role::AttnKNorm), hd);
  } else if (row.qk_norm_full) {
    L.q_norm = ld.vector(name(Role::AttnQNorm), q_dim);
    L.k_norm = ld.vector(name(Role::AttnKNorm), kv_dim);
  }
  if (row.qkv_bias) {
    L.bq = ld.vector(name(Role::AttnQBias), q_dim);
    L.bk = ld.vector(name(Role::AttnKBias), kv_dim);
    L.bv = ld.vector(name(Role::AttnVBias), kv_dim);
  }
  if (row.has(Role::AttnQkv) && !row.linear_attention) {
    // Fused [q_dim + 2 kv_dim, dim]: Q, K, V are consecutive row ranges, so
    // each is a view of the same bytes (no copy, one forward path).
    const gguf::TensorInfo& t = ld.require(name(Role::AttnQkv), {c.dim, q_dim + 2 * kv_dim});
    const size_t rb = row_bytes(t.type, c.dim);
    L.wq = WeightMatrix::prepare(t.type, q_dim, c.dim, t.data);
    L.wk = WeightMatrix::prepare(t.type, kv_dim, c.dim, t.data + rb * q_dim);
    L.wv = WeightMatrix::prepare(t.type, kv_dim, c.dim, t.data + rb * (q_dim + kv_dim));
    if (L.wq.reads_own_copy() && L.wk.reads_own_copy() && L.wv.reads_own_copy()) ld.copied(t);
    for (int k = 0; k < 3; ++k) tick();
  } else {
    // Gated attention: each head's query rows then its gate rows, one [2 q_dim, dim] matrix.
    L.wq = ld.matrix(name(Role::AttnQ), row.gated_attention ? 2 * q_dim : q_dim, c.dim);
    tick();
    if (own_kv) L.wk = ld.matrix(name(Role::AttnK), kv_dim, c.dim);
    tick();
    if (own_kv && !c.layer_v_from_k(i)) L.wv = ld.matrix(name(Role::AttnV), kv_dim, c.dim);
    tick();
  }
  L.wo = ld.matrix(name(Role::AttnOut), c.dim, q_dim);
  if (row.has(Role::AttnOutBias)) L.bo = ld.vector(name(Role::AttnOutBias), c.dim);
  // A sink is a logit beside q·k scores: any finite value is valid (ld.vector checks).
  if (row.has(Role::AttnSinks)) L.sinks = ld.vector(name(Role::AttnSinks), c.n_heads);
  tick();
}

// A Gated DeltaNet layer (ArchInfo::linear_attention). The small tensors (convolution,
// decay, bias, norm) are f32 copies; the decay must be negative and finite so exp(g) is a
// true decay (a positive one would grow the state without bound).
template <class Layer, class Tick>
void load_linear_attention(const TensorLoader& ld, const ModelConfig& c, int64_t i, Layer& L, Tick&& tick) {
  const ArchInfo& row = c.info();
  auto name = [&](Role role) { return row.gguf_tensor(role, i); };
  L.recurrent = true;
  L.w_ssm_qkv = ld.matrix(name(Role::AttnQkv), c.ssm_conv_dim(), c.dim);
  tick();
  L.w_ssm_gate = ld.matrix(name(Role::SsmGate), c.ssm_value_dim(), c.dim);
  tick();
  L.w_ssm_beta = ld.matrix(name(Role::SsmBeta), c.ssm_v_heads, c.dim);
  L.w_ssm_alpha = ld.matrix(name(Role::SsmAlpha), c.ssm_v_heads, c.dim);
  tick();
  L.w_ssm_out = ld.matrix(name(Role::SsmOut), c.dim, c.ssm_value_dim());
  tick();
  {
    const gguf::TensorInfo& t = ld.require(name(Role::SsmConv1d), {c.ssm_conv_kernel, c.ssm_conv_dim()});
    const int64_t n = c.ssm_conv_kernel * c.ssm_conv_dim();
    L.conv1d.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < c.ssm_conv_dim(); ++r)
      dequantize_row(t.type, t.data + r * row_bytes(t.type, c.ssm_conv_kernel), &L.conv1d[r * c.ssm_conv_kernel],
                     c.ssm_conv_kernel);
    for (float x : L.conv1d)
      if (!std::isfinite(x)) throw Error(ld.path() + ": tensor '" + t.name + "' holds a non-finite value");
  }
  L.dt_bias = ld.vector(name(Role::SsmDtBias), c.ssm_v_heads);
  L.ssm_a = ld.vector(name(Role::SsmA), c.ssm_v_heads);
  for (float a : L.ssm_a)
    if (!(a <= 0.0f))
      throw Error(ld.path() + ": tensor '" + name(Role::SsmA) + "' must hold -exp(A_log) <= 0 (got " +
                  std::to_string(a) + ")");
  L.ssm_norm = ld.vector(name(Role::SsmNorm), c.ssm_head_dim);
}

}  // namespace

std::unique_ptr<Model> Model::load(std::shared_ptr<const gguf::GgufFile> file,
                                   const LoadProgress& progress) {
  const ModelConfig config = ModelConfig::from_gguf(*file);
  std::unique_ptr<Model> m =
      load(config, stack_legacy_experts(gguf_weight_source(file), config.n_layers, config.n_expert), progress);
  m->file_ = std::move(file);
  return m;
}

std::unique_ptr<Model> Model::load(const ModelConfig& config, std::shared_ptr<const WeightSource> weights,
                                   const LoadProgress& progress) {
  std::unique_ptr<Model> m(new Model());
  m->weights_ = std::move(weights);
  m->config_ = config;
  const ModelConfig& c = m->config_;
  TensorLoader ld(*m->weights_, m->weights_.use_count() == 1);

  const ArchInfo& row = c.info();
  auto name = [&](Role role, int64_t layer = 0) { return row.gguf_tensor(role, layer); };
  m->token_embd_ = &ld.require(name(Role::TokenEmbd), {c.dim, c.n_vocab});
  m->output_norm_ = ld.vector(name(Role::OutputNorm), c.dim);
  const size_t total = static_cast<size_t>(c.n_layers) * (row.has_experts() ? 8 + row.moe.shared_expert : 7) + 1;
  size_t done = 0;
  auto tick = [&] {
    ++done;
    if (progress.on_tensor) progress.on_tensor(done, total);
  };
  if (row.has(Role::Output) && ld.find(name(Role::Output))) {
    m->output_ = ld.matrix(name(Role::Output), c.n_vocab, c.dim);
  } else if (row.tied_allowed) {  // tied embeddings
    m->output_ = ld.matrix(name(Role::TokenEmbd), c.n_vocab, c.dim);
    // Repacked: the embedding rows come from the copy, the file's are gone (a row
    // read from the file faulted its page back in: with every token seen, the
    // table was resident twice; Qwen2.5-0.5B Q8_0: +138 MiB).
    m->embd_from_output_ = m->output_.reads_own_copy();
  } else {
    throw Error(m->weights_->path() + ": missing tensor '" + name(Role::Output) + "'");
  }
  tick();
  // A reranker head (model.h). Its row count is the file's: Qwen3-Reranker has 2
  // (yes, no); BERT-style rerankers 1.
  if (const gguf::TensorInfo* cls = ld.find("cls.output.weight")) {
    if (cls->dims.size() != 2 || cls->dims[0] != c.dim || cls->dims[1] < 1 || cls->dims[1] > 4096)
      throw Error(m->weights_->path() + ": tensor 'cls.output.weight' has shape " + cls->shape_string() +
                  ", expected [" + std::to_string(c.dim) + ", n_cls_out] with 1 <= n_cls_out <= 4096");
    m->cls_out_ = ld.matrix("cls.output.weight", cls->dims[1], c.dim);
    m->cls_out_bias_ = ld.vector("cls.output.bias", cls->dims[1], /*optional=*/true);
  }

  // RoPE frequencies: theta^(-2i/n_rot), divided by llama3 frequency factors when
  // the file has rope_freqs.weight, or by the LongRoPE factors (long or short, by
  // the context size: set_context_size), and by the linear scaling factor.
  if (row.has(Role::RopeFreqs))
    m->rope_freq_factors_ = ld.vector(name(Role::RopeFreqs), c.n_rot / 2, /*optional=*/true);
  if (c.rope_scaling == RopeScalingType::LongRope) {
    m->rope_factors_long_ = ld.vector(name(Role::RopeFactorsLong), c.n_rot / 2);
    m->rope_factors_short_ = ld.vector(name(Role::RopeFactorsShort), c.n_rot / 2);
    for (const std::vector<float>* f : {&m->rope_factors_long_, &m->rope_factors_short_})
      for (float x : *f)
        if (!(x > 0.0f)) throw Error(m->weights_->path() + ": LongRoPE factors must be > 0");
  }
  m->set_context_size(c.ctx_len);
  if (c.per_layer_dim > 0) {
    const int64_t n_pl = c.n_layers * c.per_layer_dim;
    m->per_layer_embd_ = &ld.require(name(Role::PerLayerTokenEmbd), {n_pl, c.n_vocab});
    m->per_layer_proj_ = ld.matrix(name(Role::PerLayerModelProj), n_pl, c.dim);
    m->per_layer_proj_norm_ = ld.vector(name(Role::PerLayerProjNorm), c.per_layer_dim);
  }
  m->ones_.assign(static_cast<size_t>(std::max({c.dim, c.head_dim, c.head_dim_local, c.per_layer_dim})), 1.0f);

  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto L = std::make_unique<Layer>();
    L->attn_norm = ld.vector(name(Role::AttnNorm, i), c.dim);
    L->ffn_norm = ld.vector(name(Role::FfnNorm, i), c.dim);
    if (row.has(Role::AttnPostNorm)) L->attn_post_norm = ld.vector(name(Role::AttnPostNorm, i), c.dim);
    if (row.has(Role::FfnPostNorm)) L->ffn_post_norm = ld.vector(name(Role::FfnPostNorm, i), c.dim);
    if (c.is_recurrent(i)) {
      load_linear_attention(ld, c, i, *L, tick);
    } else {
      load_attention(ld, c, i, *L, tick);
    }
    const int64_t ffn = c.ffn_of(i);
    if (c.is_moe_layer(i)) load_experts(ld, row, c, i, *L, tick);
    if (row.has(Role::FfnGateUp)) {
      // Fused [2 ffn, dim]: gate rows first, then up (HF's gate_up_proj.chunk(2)).
      const gguf::TensorInfo& t = ld.require(name(Role::FfnGateUp, i), {c.dim, 2 * ffn});
      const size_t rb = row_bytes(t.type, c.dim);
      L->w_gate = WeightMatrix::prepare(t.type, ffn, c.dim, t.data);
      L->w_up = WeightMatrix::prepare(t.type, ffn, c.dim, t.data + rb * ffn);
      if (L->w_gate.reads_own_copy() && L->w_up.reads_own_copy()) ld.copied(t);
      for (int k = 0; k < 2; ++k) tick();
    } else if (row.has(Role::FfnGate)) {  // dense FFN (Gemma 4's MoE layers have one too)
      L->w_gate = ld.matrix(name(Role::FfnGate, i), ffn, c.dim);
      tick();
      L->w_up = ld.matrix(name(Role::FfnUp, i), ffn, c.dim);
      tick();
    }
    if (row.has(Role::FfnDown)) {
      L->w_down = ld.matrix(name(Role::FfnDown, i), c.dim, ffn);
      tick();
    }
    if (c.per_layer_dim > 0) {
      L->pl_gate = ld.matrix(name(Role::PerLayerInpGate, i), c.per_layer_dim, c.dim);
      L->pl_proj = ld.matrix(name(Role::PerLayerProj, i), c.dim, c.per_layer_dim);
      L->pl_post_norm = ld.vector(name(Role::PerLayerPostNorm, i), c.dim);
    }
    if (row.has(Role::LayerOutScale))
      if (std::vector<float> sc = ld.vector(name(Role::LayerOutScale, i), 1, /*optional=*/true); !sc.empty())
        L->out_scale = sc[0];
    m->layers_.push_back(std::move(L));
  }
  m->scratch_ = std::make_unique<Scratch>();
#ifdef __GLIBC__
  // Freed copies (--quantize's re-encoded matrices, 0.3-36 MiB each) may sit in the
  // middle of the heap, where free() keeps them resident; hand them back now (a
  // GGUF load freed nothing and the trim finds little: ~1 ms).
  if (ld.released() > 0) malloc_trim(0);
#endif
  return m;
}

void Model::set_context_size(int64_t n_ctx) {
  PAGODA_CHECK(n_ctx > 0, "context size must be > 0");
  const ModelConfig& c = config_;
  RopeScaling scaling;
  scaling.type = c.rope_scaling == RopeScalingType::Linear ? RopeScaling::Type::Linear
                 : c.rope_scaling == RopeScalingType::Yarn ? RopeScaling::Type::Yarn
                                                           : RopeScaling::Type::None;
  scaling.factor = c.rope_scaling_factor;
  scaling.orig_ctx = c.rope_orig_ctx;
  scaling.attn_factor = c.rope_attn_factor;
  const float* factors = rope_freq_factors_.empty() ? nullptr : rope_freq_factors_.data();
  rope_long_in_use_ = false;
  if (c.rope_scaling == RopeScalingType::LongRope) {
    // llama.cpp (llama_model::get_rope_factors): long when n_ctx_per_seq > n_ctx_orig.
    rope_long_in_use_ = n_ctx > c.rope_orig_ctx;
    factors = rope_long_in_use_ ? rope_factors_long_.data() : rope_factors_short_.data();
  }
  rope_inv_freq_.resize(c.n_rot / 2);
  rope_attn_factor_ = rope_scaled_inv_freq(rope_inv_freq_.data(), c.n_rot, c.rope_theta, scaling, factors);
  rope_inv_freq_local_.clear();
  rope_attn_factor_local_ = 1.0f;
  if (c.rope_theta_local > 0.0f) {
    const int64_t n_rot_local = c.n_rot_local > 0 ? c.n_rot_local : c.n_rot;  // Gemma 4: its own
    rope_inv_freq_local_.resize(n_rot_local / 2);
    // gemma3's local layers drop the scaling; gpt-oss's rope.freq_base_swa keeps it.
    rope_attn_factor_local_ = rope_scaled_inv_freq(rope_inv_freq_local_.data(), n_rot_local, c.rope_theta_local,
                                                   c.rope_local_scaled ? scaling : RopeScaling{},
                                                   c.rope_local_scaled ? factors : nullptr);
  }
}

// The matrices of layer L that every token reads (all but the routed experts): attention or
// Gated DeltaNet projections, a dense FFN, the router, the shared expert.
size_t Model::dense_stream_bytes(const Layer& L) {
  size_t b = 0;
  for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.shexp_gate,
                                &L.shexp_up, &L.shexp_down, &L.w_ssm_qkv, &L.w_ssm_gate, &L.w_ssm_beta,
                                &L.w_ssm_alpha, &L.w_ssm_out, &L.pl_gate, &L.pl_proj})
    b += w->stream_bytes();
  return b;
}

size_t Model::weight_bytes() const {
  size_t b = output_.stream_bytes() + per_layer_proj_.stream_bytes();
  for (const auto& L : layers_) {
    b += dense_stream_bytes(*L);
    for (size_t e = 0; e < L->exp_gate.size(); ++e)
      b += L->exp_gate[e].stream_bytes() + L->exp_up[e].stream_bytes() + L->exp_down[e].stream_bytes();
  }
  return b;
}

size_t Model::decode_step_bytes() const {
  const ModelConfig& c = config_;
  // One embedding row (dequantized per token) besides the matrices.
  size_t b = output_.stream_bytes() + row_bytes(token_embd_->type, c.dim) + per_layer_proj_.stream_bytes();
  if (per_layer_embd_) b += row_bytes(per_layer_embd_->type, c.n_layers * c.per_layer_dim);
  for (const auto& L : layers_) {
    b += dense_stream_bytes(*L);
    // Experts of a layer are the same size: k of them are read per token.
    if (!L->exp_gate.empty())
      b += static_cast<size_t>(c.n_expert_used) *
           (L->exp_gate[0].stream_bytes() + L->exp_up[0].stream_bytes() + L->exp_down[0].stream_bytes());
  }
  return b;
}

size_t Model::resident_weight_bytes() const {
  // Norms, biases and RoPE factors: f32 copies.
  size_t b = (output_norm_.size() + rope_inv_freq_.size() + rope_freq_factors_.size() + rope_factors_long_.size() +
              rope_factors_short_.size()) *
             sizeof(float);
  for (const auto& L : layers_) {
    for (const std::vector<float>* v : {&L->attn_norm, &L->ffn_norm, &L->q_norm, &L->k_norm, &L->bq, &L->bk, &L->bv,
                                        &L->shexp_gate_inp, &L->conv1d, &L->dt_bias, &L->ssm_a, &L->ssm_norm, &L->bo,
                                        &L->sinks, &L->router_bias, &L->exp_gate_bias, &L->exp_up_bias,
                                        &L->exp_down_bias})
      b += v->size() * sizeof(float);
  }
  // The matrices: their repacked copy, or the file bytes they view.
  b += weight_bytes();
  // The embedding is read from the file row by row, unless it is the output projection
  // (tied): then it is read from output_, repacked or viewing the same file bytes.
  if (!embd_from_output_ && output_.data() != token_embd_->data) b += token_embd_->n_bytes;
  // Gemma 4's per-layer embeddings, read in place (counted whole: every row may be read).
  if (per_layer_embd_) b += per_layer_embd_->n_bytes;
  return b;
}

size_t Model::file_tensor_bytes() const {
  size_t b = 0;
  for (const auto& t : weights_->tensors()) b += t.n_bytes;
  return b;
}

namespace {

// Runs fn(t0, t1) over [0, n_tokens) in ranges of at least kMinTokens tokens, on the
// pool when there is more than one range. The per-token row ops (norms, RoPE,
// residual adds, SwiGLU) ran on the owner thread alone while the other workers idled:
// 0.16 s of a 3.6 s 512-token prefill on 2 threads, 0.11 s split.
template <class Fn>
void for_token_ranges(ThreadPool& pool, int64_t n_tokens, Fn&& fn) {
  constexpr int64_t kMinTokens = 16;
  const int64_t n_ranges = std::min<int64_t>(pool.num_threads() * 4, n_tokens / kMinTokens);
  if (n_ranges <= 1 || pool.num_threads() == 1) {
    fn(int64_t{0}, n_tokens);
    return;
  }
  pool.parallel_for(n_ranges, [&](int64_t i, int) { fn(n_tokens * i / n_ranges, n_tokens * (i + 1) / n_ranges); });
}

// Routing: softmax over the experts' logits, the k largest kept (ties to the
// lower expert id), renormalised to sum 1 for SoftmaxTopKRenormalized.
// Computed in double: a float softmax over 128 logits can swap two near-equal
// experts' order against a float64 reference (the choice is discrete).
void route_token(const float* logits, int64_t n_expert, int64_t k, RouterKind kind, int32_t* chosen, float* weight) {
  double mx = logits[0];
  for (int64_t e = 1; e < n_expert; ++e) mx = std::max(mx, static_cast<double>(logits[e]));
  double sum = 0.0;
  for (int64_t e = 0; e < n_expert; ++e) sum += std::exp(static_cast<double>(logits[e]) - mx);
  // Selection by repeated max: k <= 8 of <= 128 in practice, no allocation.
  double kept = 0.0;
  for (int64_t r = 0; r < k; ++r) {
    int32_t best = -1;
    for (int64_t e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < r; ++q) taken = taken || chosen[q] == e;
      if (taken) continue;
      if (best < 0 || logits[e] > logits[best]) best = static_cast<int32_t>(e);
    }
    chosen[r] = best;
    const double p = std::exp(static_cast<double>(logits[best]) - mx) / sum;
    weight[r] = static_cast<float>(p);
    kept += p;
  }
  if (kind == RouterKind::SoftmaxTopKRenormalized)
    for (int64_t r = 0; r < k; ++r) weight[r] = static_cast<float>(weight[r] / kept);
}

// The batch's sequences in order of first appearance, and each one's token indices in
// batch order. Vectors are reused across calls.
void group_by_sequence(const Batch& batch, std::vector<SeqId>& seqs, std::vector<std::vector<int64_t>>& tokens) {
  size_t n = 0;
  for (int64_t t = 0; t < static_cast<int64_t>(batch.size()); ++t) {
    const SeqId sid = batch.seq_ids[t];
    size_t q = 0;
    while (q < n && seqs[q] != sid) ++q;  // a batch has at most --parallel sequences
    if (q == n) {
      if (seqs.size() <= n) seqs.resize(n + 1);
      if (tokens.size() <= n) tokens.resize(n + 1);
      seqs[n] = sid;
      tokens[n].clear();
      ++n;
    }
    tokens[q].push_back(t);
  }
  seqs.resize(n);
  tokens.resize(n);
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // ggml's threshold
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

// Gated DeltaNet (qwen35), as llama.cpp b10587's qwen35 graph and ggml's gated_delta_net
// compute it: the fused projection's channels through a depthwise causal convolution
// (its last conv_kernel - 1 inputs are the state) and SiLU; per key head, q and k
// L2-normalised; per value head h (using key head h mod n_k_heads, ggml's repeat), the
// decay exp(softplus(alpha + dt_bias) * a) and write strength sigmoid(beta); the gated
// delta rule over the head's state (kernels/ops.h gated_delta_step), q scaled by
// 1/sqrt(head_dim); the output RMS-normed per head and gated by silu(z); ssm_out.
//
// Prefill runs the recurrence token by token per (sequence, head) rather than in the
// chunked WY form: on a CPU the state (64 KiB for a 128 x 128 head) stays in L1/L2 and a
// token costs ~3 d^2 FMAs per head, ~1% of the layer's matmul FLOPs for the 4B shape, so
// the chunked form's extra matmuls would buy nothing here. Work fans out over
// (sequence, channel range) for the convolution and (sequence, value head) for the rule.
void Model::linear_attention(const Layer& L, int64_t slot, const Batch& batch, RecurrentStates& states,
                             ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size());
  const int64_t conv_dim = c.ssm_conv_dim(), key_dim = c.ssm_key_dim(), value_dim = c.ssm_value_dim();
  const int64_t n_v = c.ssm_v_heads, n_k = c.ssm_k_heads, d = c.ssm_head_dim, taps = c.ssm_conv_kernel;
  const MatmulTarget proj[] = {{&L.w_ssm_qkv, s.ssm_qkv.data()},
                               {&L.w_ssm_gate, s.ssm_z.data()},
                               {&L.w_ssm_beta, s.ssm_beta.data()},
                               {&L.w_ssm_alpha, s.ssm_alpha.data()}};
  matmul_multi(proj, s.xn.data(), T, pool);

  // The convolution: the window's oldest input first, the state then the batch's tokens.
  constexpr int64_t kConvChannels = 256;
  const int64_t n_chunks = (conv_dim + kConvChannels - 1) / kConvChannels;
  const int64_t n_seqs = static_cast<int64_t>(s.seqs.size());
  pool.parallel_for(n_seqs * n_chunks, [&](int64_t task, int) {
    const int64_t q = task / n_chunks;
    const int64_t c0 = (task % n_chunks) * kConvChannels, c1 = std::min(conv_dim, c0 + kConvChannels);
    float* window = states.slot(s.seqs[q], slot);  // [taps - 1, conv_dim]
    for (const int64_t t : s.seq_tokens[q]) {
      const float* x = &s.ssm_qkv[t * conv_dim];
      float* y = &s.ssm_conv[t * conv_dim];
      for (int64_t ch = c0; ch < c1; ++ch) {
        const float* w = &L.conv1d[ch * taps];
        float acc = w[taps - 1] * x[ch];
        for (int64_t r = 0; r < taps - 1; ++r) acc += w[r] * window[r * conv_dim + ch];
        y[ch] = acc / (1.0f + std::exp(-acc));  // SiLU
        for (int64_t r = 0; r + 1 < taps - 1; ++r) window[r * conv_dim + ch] = window[(r + 1) * conv_dim + ch];
        window[(taps - 2) * conv_dim + ch] = x[ch];
      }
    }
  });
  // q and k of every key head L2-normalised: x / max(|x|, eps), as ggml_l2_norm.
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < 2 * n_k; ++h) {
        float* x = &s.ssm_conv[t * conv_dim + h * d];
        const float norm = std::sqrt(std::max(dot_f32(x, x, d), 0.0f));
        scale_f32(x, 1.0f / std::max(norm, c.rms_eps), d);
      }
  });
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  pool.parallel_for(n_seqs * n_v, [&](int64_t task, int) {
    const int64_t q = task / n_v, h = task % n_v, hk = h % n_k;
    float* state = states.slot(s.seqs[q], slot) + c.conv_state_floats() + h * d * d;
    for (const int64_t t : s.seq_tokens[q]) {
      const float* ch = &s.ssm_conv[t * conv_dim];
      const float decay = std::exp(softplus(s.ssm_alpha[t * n_v + h] + L.dt_bias[h]) * L.ssm_a[h]);
      const float beta = sigmoid(s.ssm_beta[t * n_v + h]);
      float* out = &s.ssm_out[t * value_dim + h * d];
      gated_delta_step(state, d, d, ch + hk * d, ch + key_dim + hk * d, ch + 2 * key_dim + h * d, decay, beta, scale,
                       out);
      // The gated RMSNorm: norm(out) * w * silu(z).
      rms_norm(out, L.ssm_norm.data(), out, d, c.rms_eps);
      const float* z = &s.ssm_z[t * value_dim + h * d];
      for (int64_t i = 0; i < d; ++i) out[i] *= z[i] / (1.0f + std::exp(-z[i]));
    }
  });
  matmul(L.w_ssm_out, s.ssm_out.data(), T, s.tmp.data(), pool);
}

// The mixture-of-experts FFN of one layer on `in` (normed), routed by `router_in`, added
// into `out` (s.xn, s.xn, s.x but for Gemma 4's MoE layers).
// Tokens are grouped by expert: expert e's weights are read once per call for
// all the tokens routed to it (a 512-token prefill with 8 of 128 experts sends
// ~32 tokens to each, so each expert's matrices are streamed once, not 32
// times), and a decode step reads only its k experts.
//
// A shared expert (qwen35moe) takes every token: its rows follow the routed slots in
// s.exp_in, so its gate and up projections ride in the routed experts' grouped call (one
// pool round trip for all of them); its down projection is a call of its own, as its width
// may differ from the routed experts' (one more round trip per layer at decode, ~5 us).
// Its output, times sigmoid(ffn_gate_inp_shexp · x), is added after the routed sum.
void Model::moe_ffn(const Layer& L, int64_t T, const float* router_in, const float* in, float* out,
                    ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t dim = c.dim, n_exp = c.n_expert, k = c.n_expert_used, ffn = c.expert_ffn_dim;
  const int64_t ffn_sh = c.shared_expert_ffn_dim;
  const bool shared = !L.shexp_gate_inp.empty();
  const RouterKind kind = c.info().moe.router;
  matmul(L.router, router_in, T, s.router_logits.data(), pool);
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (!L.router_bias.empty()) add_inplace(&s.router_logits[t * n_exp], L.router_bias.data(), n_exp);
      route_token(&s.router_logits[t * n_exp], n_exp, k, kind, &s.chosen[t * k], &s.chosen_w[t * k]);
      // Gemma 4: each expert's output scale (ffn_down_exps.scale) folded into its weight.
      if (!L.down_exps_scale.empty())
        for (int64_t r = 0; r < k; ++r) s.chosen_w[t * k + r] *= L.down_exps_scale[s.chosen[t * k + r]];
    }
  });
  // Counting sort of the T * k (token, rank) pairs by expert.
  std::fill(s.expert_first.begin(), s.expert_first.end(), 0);
  for (int64_t i = 0; i < T * k; ++i) ++s.expert_first[s.chosen[i] + 1];
  for (int64_t e = 0; e < n_exp; ++e) s.expert_first[e + 1] += s.expert_first[e];
  {
    // expert_first[e] doubles as expert e's next free slot while filling.
    for (int64_t i = 0; i < T * k; ++i) s.slot_of[i] = s.expert_first[s.chosen[i]]++;
    for (int64_t e = n_exp; e > 0; --e) s.expert_first[e] = s.expert_first[e - 1];
    s.expert_first[0] = 0;
  }
  const int64_t n_slots = T * k;
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = 0; r < k; ++r)
        std::memcpy(&s.exp_in[s.slot_of[t * k + r] * dim], &in[t * dim], sizeof(float) * dim);
      if (shared) {
        std::memcpy(&s.exp_in[(n_slots + t) * dim], &in[t * dim], sizeof(float) * dim);
        s.shexp_scale[t] = sigmoid(dot_f32(L.shexp_gate_inp.data(), &in[t * dim], dim));
      }
    }
  });
  s.jobs.clear();
  for (int64_t e = 0; e < n_exp; ++e) {
    const int64_t n = s.expert_first[e + 1] - s.expert_first[e];
    if (n == 0) continue;
    s.jobs.push_back({&L.exp_gate[e], s.expert_first[e], n, &s.exp_gate[s.expert_first[e] * ffn]});
    s.jobs.push_back({&L.exp_up[e], s.expert_first[e], n, &s.exp_up[s.expert_first[e] * ffn]});
  }
  if (shared) {
    s.jobs.push_back({&L.shexp_gate, n_slots, T, s.gate.data()});
    s.jobs.push_back({&L.shexp_up, n_slots, T, s.up.data()});
  }
  matmul_grouped(s.jobs, s.exp_in.data(), n_slots + (shared ? T : 0), pool);
  // Slot i's expert, for the per-expert biases (slots are sorted by expert).
  auto expert_of_slot = [&](int64_t i) {
    return static_cast<int64_t>(std::upper_bound(s.expert_first.begin(), s.expert_first.end(), i) -
                                s.expert_first.begin()) - 1;
  };
  const bool oai = c.info().activation == Activation::SwigluOai;
  for_token_ranges(pool, n_slots, [&](int64_t i0, int64_t i1) {
    if (!L.exp_gate_bias.empty())
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t e = expert_of_slot(i);
        add_inplace(&s.exp_gate[i * ffn], &L.exp_gate_bias[e * ffn], ffn);
        add_inplace(&s.exp_up[i * ffn], &L.exp_up_bias[e * ffn], ffn);
      }
    if (oai)  // llama.cpp's openai-moe constants (LLM_FFN_SWIGLU_OAI_MOE)
      swiglu_oai(&s.exp_gate[i0 * ffn], &s.exp_up[i0 * ffn], &s.exp_gate[i0 * ffn], (i1 - i0) * ffn, 1.702f, 7.0f);
    else if (c.info().activation == Activation::GeluTanh)  // Gemma 4
      geglu_tanh(&s.exp_gate[i0 * ffn], &s.exp_up[i0 * ffn], &s.exp_gate[i0 * ffn], (i1 - i0) * ffn);
    else
      swiglu(&s.exp_gate[i0 * ffn], &s.exp_up[i0 * ffn], &s.exp_gate[i0 * ffn], (i1 - i0) * ffn);
  });
  s.jobs.clear();
  for (int64_t e = 0; e < n_exp; ++e) {
    const int64_t n = s.expert_first[e + 1] - s.expert_first[e];
    if (n > 0) s.jobs.push_back({&L.exp_down[e], s.expert_first[e], n, &s.exp_out[s.expert_first[e] * dim]});
  }
  matmul_grouped(s.jobs, s.exp_gate.data(), n_slots, pool);
  if (shared) {
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      swiglu(&s.gate[t0 * ffn_sh], &s.up[t0 * ffn_sh], &s.gate[t0 * ffn_sh], (t1 - t0) * ffn_sh);
    });
    matmul(L.shexp_down, s.gate.data(), T, s.tmp.data(), pool);
  }
  if (!L.exp_down_bias.empty())
    for_token_ranges(pool, n_slots, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) add_inplace(&s.exp_out[i * dim], &L.exp_down_bias[expert_of_slot(i) * dim], dim);
    });
  // Weighted sum into `out`, per token in rank order, then the gated shared expert.
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* xt = &out[t * dim];
      for (int64_t r = 0; r < k; ++r) {
        const float w = s.chosen_w[t * k + r];
        const float* o = &s.exp_out[s.slot_of[t * k + r] * dim];
        for (int64_t j = 0; j < dim; ++j) xt[j] += w * o[j];
      }
      if (shared) {
        const float g = s.shexp_scale[t];
        const float* o = &s.tmp[t * dim];
        for (int64_t j = 0; j < dim; ++j) xt[j] += g * o[j];
      }
    }
  });
}

// The mixer's output (s.tmp) into the residual, then the feed-forward block (SwiGLU, or
// GELU-tanh gated for Gemma; a mixture of experts) added into it. Gemma 4 (llama.cpp's
// gemma4 graph): a MoE layer runs its dense FFN and its experts side by side on the
// attention block's output h, out = post_ffw_norm(post_ffw_norm_1(dense(ffn_norm(h))) +
// post_ffw_norm_2(experts(pre_ffw_norm_2(h)))), routed by router · (rms(h) / sqrt(dim) *
// ffn_gate_inp.scale); then the per-layer embedding's gated term and layer_output_scale.
void Model::ffn_block(const Layer& L, int64_t T, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t dim = c.dim;
  const ArchInfo& row = c.info();
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    if (!L.attn_post_norm.empty())
      for (int64_t t = t0; t < t1; ++t)
        rms_norm(&s.tmp[t * dim], L.attn_post_norm.data(), &s.tmp[t * dim], dim, c.rms_eps);
    add_inplace(&s.x[t0 * dim], &s.tmp[t0 * dim], (t1 - t0) * dim);
    for (int64_t t = t0; t < t1; ++t) rms_norm(&s.x[t * dim], L.ffn_norm.data(), &s.xn[t * dim], dim, c.rms_eps);
  });
  if (L.moe && L.w_gate.n_rows() == 0) {  // experts only (qwen3moe, mixtral, olmoe)
    moe_ffn(L, T, s.xn.data(), s.xn.data(), s.x.data(), pool);
    return;
  }
  const MatmulTarget gate_up[] = {{&L.w_gate, s.gate.data()}, {&L.w_up, s.up.data()}};
  matmul_multi(gate_up, s.xn.data(), T, pool);
  const int64_t ffn = L.w_gate.n_rows();
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    if (row.activation == Activation::GeluTanh)
      geglu_tanh(&s.gate[t0 * ffn], &s.up[t0 * ffn], &s.gate[t0 * ffn], (t1 - t0) * ffn);
    else
      swiglu(&s.gate[t0 * ffn], &s.up[t0 * ffn], &s.gate[t0 * ffn], (t1 - t0) * ffn);
  });
  matmul(L.w_down, s.gate.data(), T, s.tmp.data(), pool);
  if (L.moe) {  // Gemma 4: dense and experts side by side
    const float inv_sqrt_dim = 1.0f / std::sqrt(static_cast<float>(dim));
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* h = &s.x[t * dim];
        rms_norm(&s.tmp[t * dim], L.ffn_post_norm1.data(), &s.tmp[t * dim], dim, c.rms_eps);
        rms_norm(h, ones_.data(), &s.router_in[t * dim], dim, c.rms_eps);
        for (int64_t j = 0; j < dim; ++j) s.router_in[t * dim + j] *= inv_sqrt_dim * L.router_scale[j];
        rms_norm(h, L.ffn_pre_norm2.data(), &s.xn[t * dim], dim, c.rms_eps);
      }
      std::fill(&s.mlp[t0 * dim], &s.mlp[t1 * dim], 0.0f);
    });
    moe_ffn(L, T, s.router_in.data(), s.xn.data(), s.mlp.data(), pool);
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        rms_norm(&s.mlp[t * dim], L.ffn_post_norm2.data(), &s.mlp[t * dim], dim, c.rms_eps);
        add_inplace(&s.tmp[t * dim], &s.mlp[t * dim], dim);
      }
    });
  }
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    if (!L.ffn_post_norm.empty())
      for (int64_t t = t0; t < t1; ++t)
        rms_norm(&s.tmp[t * dim], L.ffn_post_norm.data(), &s.tmp[t * dim], dim, c.rms_eps);
    add_inplace(&s.x[t0 * dim], &s.tmp[t0 * dim], (t1 - t0) * dim);
  });
}

// Gemma 4's per-layer embedding term of layer `layer`: x += rms(proj · (gelu(inp_gate · x) *
// pl_inp[layer])) * post_norm, then x *= layer_output_scale.
void Model::per_layer_output(const Layer& L, int64_t layer, int64_t T, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t dim = c.dim, pld = c.per_layer_dim;
  if (pld > 0) {
    matmul(L.pl_gate, s.x.data(), T, s.pl_gate.data(), pool);
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* g = &s.pl_gate[t * pld];
        geglu_tanh(g, &s.pl_inp[(t * c.n_layers + layer) * pld], g, pld);
      }
    });
    matmul(L.pl_proj, s.pl_gate.data(), T, s.tmp.data(), pool);
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        rms_norm(&s.tmp[t * dim], L.pl_post_norm.data(), &s.tmp[t * dim], dim, c.rms_eps);
        add_inplace(&s.x[t * dim], &s.tmp[t * dim], dim);
      }
    });
  }
  if (L.out_scale != 1.0f)
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) { scale_f32(&s.x[t0 * dim], L.out_scale, (t1 - t0) * dim); });
}

// Gemma 4's per-layer inputs (llama.cpp's build_inp_per_layer and project_per_layer_inputs):
// per token, its per_layer_token_embd row times sqrt(per_layer_dim), plus the projection of
// its scaled embedding times 1/sqrt(dim), RMS-normed per layer by per_layer_proj_norm; the
// sum times 1/sqrt(2). Rows are dequantized from the file mapping as they are read.
void Model::per_layer_inputs(const Batch& batch, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size());
  const int64_t pld = c.per_layer_dim, n_pl = c.n_layers * pld;
  matmul(per_layer_proj_, s.x.data(), T, s.pl_inp.data(), pool);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const float embd_scale = std::sqrt(static_cast<float>(pld));
  const float mix_scale = 1.0f / std::sqrt(2.0f);
  const size_t rb = row_bytes(per_layer_embd_->type, n_pl);
  // On this thread: a row dequantizes in ~10 us (E4B: 10,752 values), next to the
  // projection's matmul over the batch; one scratch row, no allocation.
  float* row = s.pl_row.data();
  for (int64_t t = 0; t < T; ++t) {
    dequantize_row(per_layer_embd_->type, per_layer_embd_->data + rb * static_cast<size_t>(batch.tokens[t]), row, n_pl);
    float* p = &s.pl_inp[t * n_pl];
    for (int64_t l = 0; l < c.n_layers; ++l) {
      float* pl = p + l * pld;
      scale_f32(pl, proj_scale, pld);
      rms_norm(pl, per_layer_proj_norm_.data(), pl, pld, c.rms_eps);
      for (int64_t j = 0; j < pld; ++j) pl[j] = (pl[j] + row[l * pld + j] * embd_scale) * mix_scale;
    }
  }
}

void Model::classify(const float* hidden, int64_t n, float* out, ThreadPool& pool) const {
  PAGODA_CHECK(n_cls_out() > 0, "Model::classify: the model has no classification head");
  if (n <= 0) return;
  matmul(cls_out_, hidden, n, out, pool);
  if (!cls_out_bias_.empty())
    for (int64_t i = 0; i < n; ++i) add_inplace(out + i * n_cls_out(), cls_out_bias_.data(), n_cls_out());
}

void Model::forward(const Batch& batch, KvStore& kv, ThreadPool& pool, std::vector<float>& logits,
                    std::vector<float>* hidden) {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.size());
  PAGODA_CHECK(batch.positions.size() == batch.tokens.size() &&
                   batch.seq_ids.size() == batch.tokens.size() &&
                   batch.want_logits.size() == batch.tokens.size() &&
                   (batch.want_hidden.empty() || batch.want_hidden.size() == batch.tokens.size()),
               "batch arrays differ in length");
  const bool any_hidden = std::find(batch.want_hidden.begin(), batch.want_hidden.end(), 1) != batch.want_hidden.end();
  PAGODA_CHECK(!any_hidden || hidden != nullptr, "Model::forward: hidden states wanted but no output given");
  logits.clear();
  if (hidden) hidden->clear();
  if (T == 0) return;
  for (int64_t t = 0; t < T; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= c.n_vocab)
      throw Error("token id " + std::to_string(batch.tokens[t]) + " is outside the vocabulary [0, " +
                  std::to_string(c.n_vocab) + ")");
    if (batch.positions[t] < 0 || batch.positions[t] >= kv.capacity(batch.seq_ids[t]))
      throw Error("position " + std::to_string(batch.positions[t]) + " is outside the context of " +
                  std::to_string(kv.capacity(batch.seq_ids[t])) + " tokens");
  }

  Scratch& s = *scratch_;
  s.reserve(c, static_cast<size_t>(T));
  const int64_t dim = c.dim;
  const float attn_scale = c.attention_scale();
  const ArchInfo& row = c.info();
  const bool neox = row.rope == RopeKind::Neox;

  // Embeddings: dequantize one row per token (Gemma: times sqrt(dim)); tied and
  // repacked: from the output projection's copy (bit-identical to the file's row).
  const size_t emb_row = row_bytes(token_embd_->type, dim);
  for (int64_t t = 0; t < T; ++t) {
    if (embd_from_output_) output_.read_row(batch.tokens[t], &s.x[t * dim]);
    else dequantize_row(token_embd_->type, token_embd_->data + emb_row * batch.tokens[t], &s.x[t * dim], dim);
  }
  if (row.embed_scale) {
    const float e = std::sqrt(static_cast<float>(dim));
    for (int64_t i = 0; i < T * dim; ++i) s.x[i] *= e;
  }
  if (per_layer_embd_) per_layer_inputs(batch, pool);

  // RoPE angles depend only on the position: one cos/sin table per token serves
  // q and k of every layer (n_rot/2 sin+cos in double cost ~2 us per call).
  const int64_t half_rot = c.n_rot / 2;
  for (int64_t t = 0; t < T; ++t)
    rope_table(&s.rope_cos[t * half_rot], &s.rope_sin[t * half_rot], c.n_rot, batch.positions[t],
               rope_inv_freq_.data(), rope_attn_factor_);
  const int64_t half_rot_local = static_cast<int64_t>(rope_inv_freq_local_.size());  // Gemma 4: its own n_rot
  if (!rope_inv_freq_local_.empty())
    for (int64_t t = 0; t < T; ++t)
      rope_table(&s.rope_cos_local[t * half_rot_local], &s.rope_sin_local[t * half_rot_local], 2 * half_rot_local,
                 batch.positions[t], rope_inv_freq_local_.data(), rope_attn_factor_local_);

  // Hybrid models: each sequence's tokens of this batch, which must continue its recurrent
  // state (consecutive positions from the state's), checked before any state changes.
  RecurrentStates* states = c.hybrid() ? kv.recurrent() : nullptr;
  if (c.hybrid()) {
    PAGODA_CHECK(states != nullptr && states->n_slots() == c.n_recurrent_layers() &&
                     states->floats_per_slot() == c.recurrent_state_floats(),
                 "Model::forward: a hybrid model needs a store with its recurrent state configured");
    group_by_sequence(batch, s.seqs, s.seq_tokens);
    for (size_t q = 0; q < s.seqs.size(); ++q) {
      const int64_t first = batch.positions[s.seq_tokens[q].front()];
      if (first != states->pos(s.seqs[q]))
        throw Error("sequence " + std::to_string(s.seqs[q]) + " continues at position " + std::to_string(first) +
                    " but its recurrent state holds " + std::to_string(states->pos(s.seqs[q])) + " tokens");
      for (size_t j = 1; j < s.seq_tokens[q].size(); ++j)
        if (batch.positions[s.seq_tokens[q][j]] != first + static_cast<int64_t>(j))
          throw Error("sequence " + std::to_string(s.seqs[q]) +
                      ": a hybrid model's batch needs its positions consecutive, in order");
      states->ensure(s.seqs[q]);
    }
  }

  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = *layers_[li];
    const int layer = static_cast<int>(li);
    if (L.recurrent) {
      for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) rms_norm(&s.x[t * dim], L.attn_norm.data(), &s.xn[t * dim], dim, c.rms_eps);
      });
      linear_attention(L, c.recurrent_slot(layer), batch, *states, pool);
      ffn_block(L, T, pool);
      continue;
    }
    const int kv_layer = static_cast<int>(c.kv_layer(layer));
    const int64_t window = c.layer_window(layer);
    // This layer's shape (Gemma 4: local and global layers differ in head size, KV heads
    // and rotary dims; a shared-KV layer projects only Q and reads an earlier layer's K/V).
    const int64_t hd = c.head_dim_of(layer), n_kv = c.kv_heads_of(layer), n_rot = c.rot_of(layer);
    const int64_t q_dim = c.n_heads * hd, kv_dim = n_kv * hd;
    const bool own_kv = c.has_own_kv(layer);
    const bool local_rope = window > 0 && !rope_inv_freq_local_.empty();
    const int64_t half = local_rope ? half_rot_local : half_rot;
    const float* rope_cos = local_rope ? s.rope_cos_local.data() : s.rope_cos.data();
    const float* rope_sin = local_rope ? s.rope_sin_local.data() : s.rope_sin.data();
    const bool use_rope = c.layer_uses_rope(layer);
    // --- attention ---
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) rms_norm(&s.x[t * dim], L.attn_norm.data(), &s.xn[t * dim], dim, c.rms_eps);
    });
    {
      const MatmulTarget qkv[] = {{&L.wq, row.gated_attention ? s.q_gate.data() : s.q.data()}, {&L.wk, s.k.data()},
                                  {&L.wv, s.v.data()}};
      const size_t n_targets = !own_kv ? 1 : L.wv.n_rows() == 0 ? 2 : 3;
      matmul_multi(std::span<const MatmulTarget>(qkv, n_targets), s.xn.data(), T, pool);
    }
    if (own_kv && L.wv.n_rows() == 0)  // Gemma 4 attention_k_eq_v: V is the K projection
      std::memcpy(s.v.data(), s.k.data(), sizeof(float) * static_cast<size_t>(T * kv_dim));
    if (row.gated_attention) {  // each head's query then its gate: the queries to s.q
      for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t h = 0; h < c.n_heads; ++h)
            std::memcpy(&s.q[t * q_dim + h * hd], &s.q_gate[t * 2 * q_dim + h * 2 * hd], sizeof(float) * hd);
      });
    }
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* qt = &s.q[t * q_dim];
        float* kt = &s.k[t * kv_dim];
        float* vt = &s.v[t * kv_dim];
        if (row.qkv_bias) {
          add_inplace(qt, L.bq.data(), q_dim);
          add_inplace(kt, L.bk.data(), kv_dim);
          add_inplace(vt, L.bv.data(), kv_dim);
        }
        if (row.qk_norm_full) {
          rms_norm(qt, L.q_norm.data(), qt, q_dim, c.rms_eps);
          rms_norm(kt, L.k_norm.data(), kt, kv_dim, c.rms_eps);
        }
        if (row.qk_norm) {
          for (int64_t h = 0; h < c.n_heads; ++h) rms_norm(qt + h * hd, L.q_norm.data(), qt + h * hd, hd, c.rms_eps);
          if (own_kv)
            for (int64_t h = 0; h < n_kv; ++h) rms_norm(kt + h * hd, L.k_norm.data(), kt + h * hd, hd, c.rms_eps);
        }
        if (row.v_norm && own_kv)
          for (int64_t h = 0; h < n_kv; ++h) rms_norm(vt + h * hd, ones_.data(), vt + h * hd, hd, c.rms_eps);
        if (!use_rope) continue;  // a NoPE layer (SmolLM3)
        const float* rc = &rope_cos[t * half];
        const float* rs = &rope_sin[t * half];
        rope_apply(qt, c.n_heads, hd, n_rot, rc, rs, neox);
        if (own_kv) rope_apply(kt, n_kv, hd, n_rot, rc, rs, neox);
      }
    });
    // The store stays on this thread: it may copy a shared block on write.
    if (own_kv)
      for (int64_t t = 0; t < T; ++t)
        kv.store(kv_layer, batch.seq_ids[t], batch.positions[t], &s.k[t * kv_dim], &s.v[t * kv_dim]);
    // The whole batch's attention: the store fans out over (token, KV head) and, for
    // long contexts, over parts of the sequence (KvStore::attend_batch).
    AttnBatch ab;
    ab.n_tokens = T;
    ab.seq_ids = batch.seq_ids.data();
    ab.positions = batch.positions.data();
    ab.q = s.q.data();
    ab.out = s.attn.data();
    ab.n_heads = c.n_heads;
    ab.n_kv_heads = n_kv;
    ab.head_dim = hd;
    ab.scale = attn_scale;
    ab.window = window;
    ab.softcap = c.attn_softcap;
    ab.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
    kv.attend_batch(kv_layer, ab, pool);
    if (row.gated_attention) {  // out *= sigmoid(gate), per head
      for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t h = 0; h < c.n_heads; ++h) {
            float* o = &s.attn[t * q_dim + h * hd];
            const float* g = &s.q_gate[t * 2 * q_dim + h * 2 * hd + hd];
            for (int64_t i = 0; i < hd; ++i) o[i] *= 1.0f / (1.0f + std::exp(-g[i]));
          }
      });
    }
    matmul(L.wo, s.attn.data(), T, s.tmp.data(), pool);
    if (!L.bo.empty())
      for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) add_inplace(&s.tmp[t * dim], L.bo.data(), dim);
      });
    ffn_block(L, T, pool);
    per_layer_output(L, layer, T, pool);
  }
  if (states)
    for (size_t q = 0; q < s.seqs.size(); ++q)
      states->set_pos(s.seqs[q], batch.positions[s.seq_tokens[q].back()] + 1);

  // Final hidden states (the output norm applied) of the rows embeddings pool.
  if (any_hidden) {
    int64_t n_hidden = 0;
    for (int64_t t = 0; t < T; ++t) n_hidden += batch.want_hidden[t];
    hidden->resize(static_cast<size_t>(n_hidden * dim));
    int64_t h = 0;
    for (int64_t t = 0; t < T; ++t)
      if (batch.want_hidden[t]) rms_norm(&s.x[t * dim], output_norm_.data(), &(*hidden)[h++ * dim], dim, c.rms_eps);
  }

  // Final norm and the vocabulary projection, only for rows that want logits.
  int64_t n_out = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!batch.want_logits[t]) continue;
    rms_norm(&s.x[t * dim], output_norm_.data(), &s.xn[n_out * dim], dim, c.rms_eps);
    ++n_out;
  }
  if (n_out == 0) return;
  logits.resize(static_cast<size_t>(n_out * c.n_vocab));
  matmul(output_, s.xn.data(), n_out, logits.data(), pool);
  if (c.final_softcap > 0.0f) softcap_inplace(logits.data(), n_out * c.n_vocab, c.final_softcap);
}

}  // namespace pagoda
