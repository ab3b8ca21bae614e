#include "model/model.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/ops.h"
#include "model/model_internal.h"

namespace pagoda {

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
      all = WeightMatrix::prepare(t.type, rows * c.n_expert, cols, t.data, best_isa(), rows);
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
      L.all_gate = WeightMatrix::prepare(t.type, 2 * f * c.n_expert, c.dim, t.data, best_isa(), f);
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
  // M-RoPE (rope.dimension_sections): the position each pair turns by, llama.cpp's
  // interleaved rule on sector i % (sum of sections): 1 mod 3 and below 3 x sections[1]
  // the height, 2 mod 3 and below 3 x sections[2] the width, 0 mod 3 and below 3 x
  // sections[0] the temporal, else the fourth position (0 for every row in llama.cpp).
  mrope_component_.clear();
  mrope_reaches_fourth_ = false;
  if (!c.rope_sections.empty()) {
    int64_t sect_dims = 0;
    for (int64_t v : c.rope_sections) sect_dims += v;
    auto section = [&](size_t k) { return k < c.rope_sections.size() ? c.rope_sections[k] : int64_t{0}; };
    for (int64_t i = 0; i < c.n_rot / 2; ++i) {
      const int64_t sector = sect_dims > 0 ? i % sect_dims : i;
      uint8_t k = 3;
      if (sector % 3 == 1 && sector < 3 * section(1)) k = 1;
      else if (sector % 3 == 2 && sector < 3 * section(2)) k = 2;
      else if (sector % 3 == 0 && sector < 3 * section(0)) k = 0;
      mrope_component_.push_back(k);
      mrope_reaches_fourth_ |= k == 3;
    }
  }
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

}  // namespace pagoda
