// Model's forward pass (model.h), in named steps: the batch checked, the embeddings, the
// RoPE tables, the recurrent states claimed, then per layer the input norm, the token mixer
// (attention, or a hybrid model's Gated DeltaNet), the feed-forward block (dense or a
// mixture of experts) and Gemma 4's per-layer input; the hidden states and logits last.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/ops.h"
#include "model/model_internal.h"

namespace pagoda {

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
    // An image's rows take the padding token's (id 0) per-layer embedding, as llama.cpp
    // feeds Gemma 4 an embeddings batch.
    const int32_t id = batch.embedded(static_cast<size_t>(t)) ? 0 : batch.tokens[t];
    dequantize_row(per_layer_embd_->type, per_layer_embd_->data + rb * static_cast<size_t>(id), row, n_pl);
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

// One forward pass, step by step (each below).
void Model::forward(const Batch& batch, KvStore& kv, ThreadPool& pool, std::vector<float>& logits,
                    std::vector<float>* hidden) {
  const bool any_hidden = check_batch(batch, kv, hidden);
  logits.clear();
  if (hidden) hidden->clear();
  const int64_t T = static_cast<int64_t>(batch.size());
  if (T == 0) return;
  scratch_->reserve(config_, static_cast<size_t>(T));
  embed(batch, pool);
  rope_tables(batch);
  RecurrentStates* states = claim_recurrent_states(batch, kv);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = *layers_[li];
    const int layer = static_cast<int>(li);
    input_norm(L, T, pool);
    if (L.recurrent) linear_attention(L, config_.recurrent_slot(layer), batch, *states, pool);
    else attention(L, layer, batch, kv, pool);
    ffn_block(L, T, pool);
    if (!L.recurrent) per_layer_output(L, layer, T, pool);
  }
  if (states) advance_recurrent_states(batch, *states);
  if (any_hidden) hidden_states(batch, *hidden);
  output_logits(batch, pool, logits);
}

bool Model::check_batch(const Batch& batch, const KvStore& kv, const std::vector<float>* hidden) const {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.size());
  PAGODA_CHECK(batch.positions.size() == batch.tokens.size() &&
                   batch.seq_ids.size() == batch.tokens.size() &&
                   batch.want_logits.size() == batch.tokens.size() &&
                   (batch.want_hidden.empty() || batch.want_hidden.size() == batch.tokens.size()),
               "batch arrays differ in length");
  PAGODA_CHECK((batch.embd.empty() && batch.attend_end.empty()) ||
                   (batch.embd.size() == batch.tokens.size() && batch.attend_end.size() == batch.tokens.size()),
               "batch embedding arrays differ in length");
  PAGODA_CHECK(batch.mrope.empty() || batch.mrope.size() == batch.tokens.size(), "batch M-RoPE positions differ in length");
  if (!batch.mrope.empty() && c.rope_sections.empty())
    throw Error("M-RoPE positions (an image's grid) given to a " + c.arch_name + " model, which has no RoPE sections");
  const bool any_hidden = std::find(batch.want_hidden.begin(), batch.want_hidden.end(), 1) != batch.want_hidden.end();
  PAGODA_CHECK(!any_hidden || hidden != nullptr, "Model::forward: hidden states wanted but no output given");
  for (int64_t t = 0; t < T; ++t) {
    if (!batch.embedded(t) && (batch.tokens[t] < 0 || batch.tokens[t] >= c.n_vocab))
      throw Error("token id " + std::to_string(batch.tokens[t]) + " is outside the vocabulary [0, " +
                  std::to_string(c.n_vocab) + ")");
    if (batch.positions[t] < 0 || batch.positions[t] >= kv.capacity(batch.seq_ids[t]))
      throw Error("position " + std::to_string(batch.positions[t]) + " is outside the context of " +
                  std::to_string(kv.capacity(batch.seq_ids[t])) + " tokens");
  }
  return any_hidden;
}

// Embeddings: dequantize one row per token (Gemma: times sqrt(dim)); tied and repacked:
// from the output projection's copy (bit-identical to the file's row). Gemma 4's
// per-layer inputs come from them.
void Model::embed(const Batch& batch, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size()), dim = c.dim;
  const size_t emb_row = row_bytes(token_embd_->type, dim);
  const float e = c.info().embed_scale ? std::sqrt(static_cast<float>(dim)) : 1.0f;
  for (int64_t t = 0; t < T; ++t) {
    float* x = &s.x[t * dim];
    if (batch.embedded(static_cast<size_t>(t))) {
      std::memcpy(x, batch.embd[t], sizeof(float) * dim);
      continue;
    }
    if (embd_from_output_) output_.read_row(batch.tokens[t], x);
    else dequantize_row(token_embd_->type, token_embd_->data + emb_row * batch.tokens[t], x, dim);
    if (e != 1.0f)
      for (int64_t i = 0; i < dim; ++i) x[i] *= e;
  }
  if (per_layer_embd_) per_layer_inputs(batch, pool);
}

// RoPE angles depend only on the position: one cos/sin table per token serves q and k of
// every layer (n_rot/2 sin+cos in double cost ~2 us per call); local layers with their own
// base (Gemma 3 / 4) get a second table.
void Model::rope_tables(const Batch& batch) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size());
  const int64_t half_rot = c.n_rot / 2;
  for (int64_t t = 0; t < T; ++t)
    rope_table(&s.rope_cos[t * half_rot], &s.rope_sin[t * half_rot], c.n_rot, batch.positions[t],
               rope_inv_freq_.data(), rope_attn_factor_);
  if (!batch.mrope.empty()) mrope_tables(batch);
  const int64_t half_rot_local = static_cast<int64_t>(rope_inv_freq_local_.size());  // Gemma 4: its own n_rot
  if (!rope_inv_freq_local_.empty())
    for (int64_t t = 0; t < T; ++t)
      rope_table(&s.rope_cos_local[t * half_rot_local], &s.rope_sin_local[t * half_rot_local], 2 * half_rot_local,
                 batch.positions[t], rope_inv_freq_local_.data(), rope_attn_factor_local_);
}

// Interleaved M-RoPE (llama.cpp's IMROPE, Qwen 3.5 / 3.6): pair i takes the position
// mrope_component_[i] names (set_context_size derives it from the sections). Each entry
// comes from rope_table at that position, so a row whose three positions equal its own
// gets the table above bit for bit (on [11, 11, 10, 0] no pair reaches the fourth).
void Model::mrope_tables(const Batch& batch) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size()), half_rot = c.n_rot / 2;
  float* cs = s.mrope_cos.data();  // [4][half_rot]: one row's tables at its four positions
  float* sn = s.mrope_sin.data();
  for (int64_t t = 0; t < T; ++t) {
    const std::array<int64_t, 3>& p = batch.mrope[static_cast<size_t>(t)];
    if (p[0] == batch.positions[t] && p[1] == p[0] && p[2] == p[0] && !mrope_reaches_fourth_)
      continue;  // a text row at its own position: the plain table is already right
    const int64_t pos[4] = {p[0], p[1], p[2], 0};
    for (int k = 0; k < 4; ++k)
      rope_table(cs + k * half_rot, sn + k * half_rot, c.n_rot, pos[k], rope_inv_freq_.data(), rope_attn_factor_);
    for (int64_t i = 0; i < half_rot; ++i) {
      const int64_t k = mrope_component_[static_cast<size_t>(i)];
      s.rope_cos[t * half_rot + i] = cs[k * half_rot + i];
      s.rope_sin[t * half_rot + i] = sn[k * half_rot + i];
    }
  }
}

// Hybrid models: each sequence's tokens of this batch, which must continue its recurrent
// state (consecutive positions from the state's), checked before any state changes.
RecurrentStates* Model::claim_recurrent_states(const Batch& batch, KvStore& kv) {
  const ModelConfig& c = config_;
  if (!c.hybrid()) return nullptr;
  Scratch& s = *scratch_;
  RecurrentStates* states = kv.recurrent();
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
  return states;
}

void Model::advance_recurrent_states(const Batch& batch, RecurrentStates& states) {
  const Scratch& s = *scratch_;
  for (size_t q = 0; q < s.seqs.size(); ++q) states.set_pos(s.seqs[q], batch.positions[s.seq_tokens[q].back()] + 1);
}

void Model::input_norm(const Layer& L, int64_t T, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t dim = c.dim;
  for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rms_norm(&s.x[t * dim], L.attn_norm.data(), &s.xn[t * dim], dim, c.rms_eps);
  });
}

// Attention of layer `layer` over the batch's normed rows (scratch xn) into scratch tmp:
// Q, K, V (fused where the file has them so), biases, QK-norms, RoPE, the K/V stored in
// the paged cache, the whole batch's attention, the output gate and projection.
void Model::attention(const Layer& L, int layer, const Batch& batch, KvStore& kv, ThreadPool& pool) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const ArchInfo& row = c.info();
  const bool neox = row.rope == RopeKind::Neox;
  const int64_t T = static_cast<int64_t>(batch.size()), dim = c.dim;
  const int kv_layer = static_cast<int>(c.kv_layer(layer));
  const int64_t window = c.layer_window(layer);
  // This layer's shape (Gemma 4: local and global layers differ in head size, KV heads
  // and rotary dims; a shared-KV layer projects only Q and reads an earlier layer's K/V).
  const int64_t hd = c.head_dim_of(layer), n_kv = c.kv_heads_of(layer), n_rot = c.rot_of(layer);
  const int64_t q_dim = c.n_heads * hd, kv_dim = n_kv * hd;
  const bool own_kv = c.has_own_kv(layer);
  const bool local_rope = window > 0 && !rope_inv_freq_local_.empty();
  const int64_t half = local_rope ? static_cast<int64_t>(rope_inv_freq_local_.size()) : c.n_rot / 2;
  const float* rope_cos = local_rope ? s.rope_cos_local.data() : s.rope_cos.data();
  const float* rope_sin = local_rope ? s.rope_sin_local.data() : s.rope_sin.data();
  const bool use_rope = c.layer_uses_rope(layer);
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
  ab.scale = c.attention_scale();
  ab.window = window;
  ab.softcap = c.attn_softcap;
  ab.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
  ab.attend_end = batch.attend_end.empty() ? nullptr : batch.attend_end.data();
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
}

// Final hidden states (the output norm applied) of the rows embeddings pool.
void Model::hidden_states(const Batch& batch, std::vector<float>& hidden) {
  const ModelConfig& c = config_;
  const Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size()), dim = c.dim;
  int64_t n_hidden = 0;
  for (int64_t t = 0; t < T; ++t) n_hidden += batch.want_hidden[t];
  hidden.resize(static_cast<size_t>(n_hidden * dim));
  int64_t h = 0;
  for (int64_t t = 0; t < T; ++t)
    if (batch.want_hidden[t]) rms_norm(&s.x[t * dim], output_norm_.data(), &hidden[h++ * dim], dim, c.rms_eps);
}

// Final norm and the vocabulary projection, only for rows that want logits.
void Model::output_logits(const Batch& batch, ThreadPool& pool, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t T = static_cast<int64_t>(batch.size()), dim = c.dim;
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
