"""Gemma 4 (GGUF architecture `gemma4`) forward pass in plain numpy (float64): the
reference pagoda's gemma4 forward pass is checked against
(tests/model/numpy_reference_test.py).

Written from llama.cpp b10587's graph and loader (src/models/gemma4.cpp,
llama-model.cpp's hparams, llama-graph.cpp's build_moe_ffn, the KV cache's layer
reuse rule), reading the GGUF through gguf_numpy.py; it shares no code with pagoda.
The llama-family helpers (rms_norm, gelu_tanh, NeoX rope, causal attention) come
from llama_numpy.py.

Contract:
- Gemma4Model(gguf_file) reads the hyperparameters and dequantizes every weight to
  float64 up front (small test models only). It raises ValueError for metadata it
  does not support or that is inconsistent (array lengths, a shared layer reading a
  layer of the other kind) rather than computing something subtly different.
- forward(tokens) -> logits (n_tokens, n_vocab) float64 for every position, from
  position 0, stateless. greedy(prompt, n_new) -> the n_new greedy ids.
- route_gap: after forward, (n_tokens,) the smallest router margin over the MoE
  layers (logit of the last chosen expert minus the first unchosen), or None.

The model (each point is a place where an implementation can silently go wrong):
- Layer kinds: attention.sliding_window_pattern holds one bool per layer (true:
  local, sees keys k with q - W < k <= q, W = attention.sliding_window); a scalar
  means every layer.
- Shapes per layer: local layers have heads of attention.key_length_swa and rotate
  rope.dimension_count_swa dims with base rope.freq_base_swa (default 10000), no
  frequency factors; global layers have heads of attention.key_length, rotate
  rope.dimension_count dims with base rope.freq_base, pair i's frequency divided by
  rope_freqs.weight[i] (1 for the rotated quarter, 1e30 elsewhere: HF's
  "proportional" RoPE). NeoX pairs (i, i + n_rot/2). attention.head_count_kv and
  feed_forward_length may be per-layer arrays.
- Attention: Q = attn_q x, RMS-normed per head with attn_q_norm, rotated. A layer
  below n_layer - attention.shared_kv_layers computes K = attn_k x, V = attn_v x
  (attn_v absent: V = the same K projection, before K's norm), K RMS-normed per head
  with attn_k_norm and rotated, V RMS-normed per head without a weight. A later
  (shared) layer computes no K/V: it attends to those of layer n_kv - 2 if it is
  local, n_kv - 1 if global (n_kv = n_layer - shared_kv_layers), which must be of
  its own kind. Scores q.k with scale 1 (no 1/sqrt(d)), GQA head h -> kv head
  h // (n_head / n_head_kv), softmax, attn_output.
- Block: h = x + post_attention_norm(attn(attn_norm(x)));
  dense = down(gelu_tanh(gate f) * up f), f = ffn_norm(h);
  without experts: y = post_ffw_norm(dense);
  with experts (the layer has ffn_gate_inp): y = post_ffw_norm(post_ffw_norm_1(dense)
  + post_ffw_norm_2(moe(pre_ffw_norm_2(h)))), the router's logits
  ffn_gate_inp . (rms(h) / sqrt(n_embd) * ffn_gate_inp.scale), softmax over all
  experts, top k (ties to the lower id), weights renormalised to sum 1, expert e's
  output down_e(gelu_tanh(gate_e) * up_e) times ffn_down_exps.scale[e];
  ffn_gate_up_exps holds each expert's gate rows then its up rows.
  x' = h + y.
- Per-layer embeddings (embedding_length_per_layer_input = P > 0): per token,
  pl_tok = per_layer_token_embd[token] (n_layer * P values) * sqrt(P);
  pl_proj = per_layer_model_proj . e / sqrt(n_embd), e the scaled token embedding,
  RMS-normed per layer slice with per_layer_proj_norm; inp = (pl_proj + pl_tok) /
  sqrt(2). After layer l's block: x' += post_norm(proj(gelu_tanh(inp_gate x') *
  inp[l])) (RMS norm with blk.l.post_norm).
- Then x' *= layer_output_scale when the layer has one.
- Embedding: token_embd[token] * sqrt(n_embd). Output: output_norm, output.weight
  (token_embd when absent), then c * tanh(logits / c) when final_logit_softcapping
  c is in the file. Norm weights are used as stored (no + 1).
"""

import numpy as np

from llama_numpy import rms_norm, gelu_tanh, apply_rope, causal_attention


# Tolerance studies only: when set, a function applied to every input of a matmul with
# a quantized weight (e.g. rounding rows to Q8_0 blocks, as ggml and pagoda do), to
# measure how much a quantized type's activation rounding legitimately moves the logits.
ACT_ROUND = None


def mm(x, w):
    """x @ w.T, x's rows rounded by ACT_ROUND when set."""
    return (x if ACT_ROUND is None else ACT_ROUND(x)) @ w.T


class Gemma4Config:
    def __init__(self, gguf):
        arch = gguf.get("general.architecture")
        if arch != "gemma4":
            raise ValueError("not a gemma4 file (architecture %r)" % arch)

        def key(name, default=None, required=False):
            full = "gemma4." + name
            if full not in gguf.metadata:
                if required:
                    raise ValueError("missing metadata key " + full)
                return default
            return gguf.metadata[full]

        self.n_embd = int(key("embedding_length", required=True))
        self.n_layer = int(key("block_count", required=True))
        self.n_head = int(key("attention.head_count", required=True))

        def per_layer(name, default=None, required=False):
            v = key(name, default, required)
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(v) != self.n_layer:
                    raise ValueError("gemma4.%s has %d entries for %d layers" % (name, len(v), self.n_layer))
                return [int(x) for x in v]
            return [int(v)] * self.n_layer

        self.local = [bool(x) for x in per_layer("attention.sliding_window_pattern", required=True)]
        self.window = int(key("attention.sliding_window", required=True))
        self.n_head_kv = per_layer("attention.head_count_kv", self.n_head)
        self.n_ff = per_layer("feed_forward_length", required=True)
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_local = int(key("attention.key_length_swa", required=True))
        if int(key("attention.value_length", self.head_dim)) != self.head_dim or \
                int(key("attention.value_length_swa", required=True)) != self.head_dim_local:
            raise ValueError("value_length differs from key_length")
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.n_rot_local = int(key("rope.dimension_count_swa", self.n_rot))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.rope_base_local = float(key("rope.freq_base_swa", 10000.0))
        if key("rope.scaling.type", "none") not in ("none", "linear") or float(key("rope.scaling.factor", 1.0)) != 1.0:
            raise ValueError("RoPE scaling is not supported")
        self.rms_eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.final_softcap = float(key("final_logit_softcapping", 0.0))
        self.per_layer_dim = int(key("embedding_length_per_layer_input", required=True))
        self.shared = int(key("attention.shared_kv_layers", 0))
        self.n_expert = int(key("expert_count", 0))
        self.n_expert_used = int(key("expert_used_count", 0))
        self.n_ff_exp = int(key("expert_feed_forward_length", 0))
        self.n_kv_from_start = self.n_layer - self.shared
        for il in range(self.n_layer):
            if self.n_head % self.n_head_kv[il]:
                raise ValueError("layer %d: head_count not a multiple of head_count_kv" % il)
            src = self.kv_source(il)
            if src < 0 or src >= self.n_kv_from_start or self.local[src] != self.local[il]:
                raise ValueError("shared layer %d would read layer %d" % (il, src))

    def kv_source(self, il):
        """The layer whose K/V layer il attends to (itself unless shared)."""
        if il < self.n_kv_from_start:
            return il
        return self.n_kv_from_start - (2 if self.local[il] else 1)

    def head_dim_of(self, il):
        return self.head_dim_local if self.local[il] else self.head_dim


def rope_angles(n_tokens, n_rot, base, freq_factors=None):
    """(n_tokens, n_rot/2): position p, pair i -> p * base^(-2i/n_rot) / ff[i]."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    return np.arange(n_tokens, dtype=np.float64)[:, None] * inv_freq[None, :]


class Gemma4Model:
    def __init__(self, gguf):
        self.cfg = cfg = Gemma4Config(gguf)

        def weight(name, shape=None, optional=False):
            if not gguf.has_tensor(name):
                if optional:
                    return None
                raise ValueError("missing tensor " + name)
            w = gguf.tensor(name).astype(np.float64)
            if shape is not None and w.shape != tuple(shape):
                raise ValueError("tensor %s has numpy shape %s, want %s" % (name, w.shape, tuple(shape)))
            return w

        E, H, P, L = cfg.n_embd, cfg.n_head, cfg.per_layer_dim, cfg.n_layer
        self.token_embd = weight("token_embd.weight")
        self.n_vocab = self.token_embd.shape[0]
        self.output = weight("output.weight", (self.n_vocab, E), optional=True)
        if self.output is None:
            self.output = self.token_embd
        self.output_norm = weight("output_norm.weight", (E,))
        self.rope_freqs = weight("rope_freqs.weight", (cfg.n_rot // 2,), optional=True)
        if P > 0:
            self.pl_tok = weight("per_layer_token_embd.weight", (self.n_vocab, L * P))
            self.pl_model_proj = weight("per_layer_model_proj.weight", (L * P, E))
            self.pl_proj_norm = weight("per_layer_proj_norm.weight", (P,))
        self.layers = []
        for il in range(L):
            p = "blk.%d." % il
            D, KV, F = cfg.head_dim_of(il), cfg.n_head_kv[il], cfg.n_ff[il]
            own = il < cfg.n_kv_from_start
            lay = {
                "attn_norm": weight(p + "attn_norm.weight", (E,)),
                "wq": weight(p + "attn_q.weight", (H * D, E)),
                "q_norm": weight(p + "attn_q_norm.weight", (D,)),
                "wo": weight(p + "attn_output.weight", (E, H * D)),
                "attn_post_norm": weight(p + "post_attention_norm.weight", (E,)),
                "ffn_norm": weight(p + "ffn_norm.weight", (E,)),
                "w_gate": weight(p + "ffn_gate.weight", (F, E)),
                "w_up": weight(p + "ffn_up.weight", (F, E)),
                "w_down": weight(p + "ffn_down.weight", (E, F)),
                "ffn_post_norm": weight(p + "post_ffw_norm.weight", (E,)),
                "out_scale": weight(p + "layer_output_scale.weight", (1,), optional=True),
                "experts": None,
            }
            if own:
                lay["wk"] = weight(p + "attn_k.weight", (KV * D, E))
                lay["wv"] = weight(p + "attn_v.weight", (KV * D, E), optional=True)  # None: V = K
                lay["k_norm"] = weight(p + "attn_k_norm.weight", (D,))
            if gguf.has_tensor(p + "ffn_gate_inp.weight"):
                N, FE = cfg.n_expert, cfg.n_ff_exp
                if N == 0:
                    raise ValueError("layer %d has ffn_gate_inp but expert_count is missing" % il)
                gate_up = weight(p + "ffn_gate_up_exps.weight", (N, 2 * FE, E), optional=True)
                if gate_up is not None:
                    gate, up = gate_up[:, :FE, :], gate_up[:, FE:, :]
                else:
                    gate = weight(p + "ffn_gate_exps.weight", (N, FE, E))
                    up = weight(p + "ffn_up_exps.weight", (N, FE, E))
                scale = weight(p + "ffn_down_exps.scale", (N,), optional=True)
                lay["experts"] = {
                    "router": weight(p + "ffn_gate_inp.weight", (N, E)),
                    "router_scale": weight(p + "ffn_gate_inp.scale", (E,)),
                    "pre_norm_2": weight(p + "pre_ffw_norm_2.weight", (E,)),
                    "post_norm_1": weight(p + "post_ffw_norm_1.weight", (E,)),
                    "post_norm_2": weight(p + "post_ffw_norm_2.weight", (E,)),
                    "gate": gate,
                    "up": up,
                    "down": weight(p + "ffn_down_exps.weight", (N, E, FE)),
                    "down_scale": np.ones(N) if scale is None else scale,
                }
            if P > 0:
                lay["pl_gate"] = weight(p + "inp_gate.weight", (P, E))
                lay["pl_proj"] = weight(p + "proj.weight", (E, P))
                lay["pl_post_norm"] = weight(p + "post_norm.weight", (E,))
            self.layers.append(lay)
        self.route_gap = None

    def moe(self, X, h):
        """h: (T, E), the attention block's output -> (T, E) the experts' sum (before
        post_ffw_norm_2); records the routing margin."""
        cfg = self.cfg
        r = rms_norm(h, 1.0, cfg.rms_eps) / np.sqrt(cfg.n_embd) * X["router_scale"]
        logits = r @ X["router"].T                                      # (T, N)
        xin = rms_norm(h, X["pre_norm_2"], cfg.rms_eps)
        k = cfg.n_expert_used
        if k < cfg.n_expert:
            srt = -np.sort(-logits, axis=1)
            gap = srt[:, k - 1] - srt[:, k]
            self.route_gap = gap if self.route_gap is None else np.minimum(self.route_gap, gap)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            pr = np.exp(logits[t] - logits[t].max())
            pr = pr / pr.sum()
            top = np.argsort(-pr, kind="stable")[:k]
            w = pr[top] / max(pr[top].sum(), 6.103515625e-5)
            for e, we in zip(top, w):
                xe = mm(xin[t:t + 1], X["gate"][e])[0], mm(xin[t:t + 1], X["up"][e])[0]
                ff = gelu_tanh(xe[0]) * xe[1]
                out[t] += we * X["down_scale"][e] * mm(ff[None, :], X["down"][e])[0]
        return out

    def forward(self, tokens):
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0 or tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("need a non-empty token list within the vocabulary")
        T, H, E, P = tokens.size, cfg.n_head, cfg.n_embd, cfg.per_layer_dim
        ang_global = rope_angles(T, cfg.n_rot, cfg.rope_base, self.rope_freqs)
        ang_local = rope_angles(T, cfg.n_rot_local, cfg.rope_base_local)
        self.route_gap = None
        x = self.token_embd[tokens] * np.sqrt(E)                        # (T, E)
        if P > 0:
            tok = self.pl_tok[tokens].reshape(T, cfg.n_layer, P) * np.sqrt(P)
            proj = (mm(x, self.pl_model_proj) / np.sqrt(E)).reshape(T, cfg.n_layer, P)
            proj = rms_norm(proj, self.pl_proj_norm, cfg.rms_eps)
            pl_inp = (proj + tok) / np.sqrt(2.0)                        # (T, n_layer, P)
        kv = {}                                                          # layer -> (k, v) of the whole sequence
        for il, Lw in enumerate(self.layers):
            local = cfg.local[il]
            D = cfg.head_dim_of(il)
            ang, n_rot = (ang_local, cfg.n_rot_local) if local else (ang_global, cfg.n_rot)
            hn = rms_norm(x, Lw["attn_norm"], cfg.rms_eps)
            q = mm(hn, Lw["wq"]).reshape(T, H, D)
            q = apply_rope(rms_norm(q, Lw["q_norm"], cfg.rms_eps), ang, n_rot, True)
            if il < cfg.n_kv_from_start:
                KV = cfg.n_head_kv[il]
                k_raw = mm(hn, Lw["wk"])
                v_raw = k_raw if Lw["wv"] is None else mm(hn, Lw["wv"])
                k = apply_rope(rms_norm(k_raw.reshape(T, KV, D), Lw["k_norm"], cfg.rms_eps), ang, n_rot, True)
                v = rms_norm(v_raw.reshape(T, KV, D), 1.0, cfg.rms_eps)
                kv[il] = (k, v)
            k, v = kv[cfg.kv_source(il)]
            attn = causal_attention(q, k, v, k.shape[1], scale=1.0, window=cfg.window if local else 0)
            h = x + rms_norm(mm(attn.reshape(T, H * D), Lw["wo"]), Lw["attn_post_norm"], cfg.rms_eps)
            f = rms_norm(h, Lw["ffn_norm"], cfg.rms_eps)
            dense = mm(gelu_tanh(mm(f, Lw["w_gate"])) * mm(f, Lw["w_up"]), Lw["w_down"])
            X = Lw["experts"]
            if X is None:
                y = dense
            else:
                y = rms_norm(dense, X["post_norm_1"], cfg.rms_eps) + rms_norm(self.moe(X, h), X["post_norm_2"],
                                                                                cfg.rms_eps)
            x = h + rms_norm(y, Lw["ffn_post_norm"], cfg.rms_eps)
            if P > 0:
                g = gelu_tanh(mm(x, Lw["pl_gate"])) * pl_inp[:, il, :]
                x = x + rms_norm(mm(g, Lw["pl_proj"]), Lw["pl_post_norm"], cfg.rms_eps)
            if Lw["out_scale"] is not None:
                x = x * Lw["out_scale"][0]
        logits = mm(rms_norm(x, self.output_norm, cfg.rms_eps), self.output)
        if cfg.final_softcap > 0:
            logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
        return logits

    def greedy(self, prompt, n_new):
        tokens = list(prompt)
        for _ in range(n_new):
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens[len(prompt):]
