"""gpt-oss (GGUF architecture `gpt-oss`) forward pass in plain numpy (float64): the
reference pagoda's gpt-oss forward pass is checked against
(tests/model/numpy_reference_test.py).

Written from llama.cpp b10587's graph (src/models/openai-moe.cpp, llm_graph_context::
build_moe_ffn and build_attn with sinks) and ggml's CPU ops (rope with YaRN, soft_max with
sinks, swiglu_oai), reading the GGUF through gguf_numpy.py; it shares no code with pagoda.
rms_norm comes from llama_numpy.py.

Contract:
- GptOssModel(gguf_file) reads the hyperparameters and dequantizes every weight to
  float64 up front (small test models only). It raises ValueError for metadata it does
  not support (RoPE scaling other than yarn, rope.dimension_count != key_length, no
  sliding window, a sliding_window_pattern array) rather than computing something subtly
  different.
- forward(tokens) -> logits (n_tokens, n_vocab) float64 for every position, the tokens
  at positions 0.. (stateless: each call recomputes everything). route_gap afterwards
  holds, per position, the smallest margin over the layers between the last chosen and
  the first unchosen router logit (where an implementation's rounding may pick the other
  expert).
- greedy(prompt, n_new) -> the n_new greedy ids after prompt.

The model (each point is a place where an implementation can silently go wrong):
- Every layer: h = x + attn_output(attn(rms_norm(x, attn_norm))) + attn_output.bias;
  x = h + moe(rms_norm(h, post_attention_norm)). Final rms_norm(x, output_norm), then
  output.weight (always present: gpt-oss has untied embeddings).
- Attention: q = xn @ attn_q^T + attn_q.bias (likewise k, v), heads of head_dim; NeoX RoPE
  (pairs (i, i + n_rot/2)) over the whole head (n_rot must be head_dim: llama.cpp uses
  n_rot as the head size); scores q.k / sqrt(head_dim); GQA head h -> kv head
  h // (n_head / n_head_kv).
- Sinks: per query head one learned logit s_h (attn_sinks.weight) joins the softmax as
  one more column that weighs no value: p_j = e^(a_j) / (sum_i e^(a_i) + e^(s_h)). The
  sink is not scaled.
- Windows: layer il is local when il % P < P - 1 (P = attention.sliding_window_pattern,
  default 2: the even layers), and a local layer's query at t sees keys k with
  t - W < k <= t, W = attention.sliding_window.
- RoPE with YaRN (ggml's rope_yarn): for pair i, theta_extrap = p * base^(-2i/n_rot),
  theta_interp = theta_extrap / factor; corr dims from
  corr(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln base): low = max(0, floor(corr(32))),
  high = min(n_rot - 1, ceil(corr(1))); ramp(i) = 1 - clip((i - low) / max(0.001,
  high - low), 0, 1); theta = theta_interp (1 - ramp) + theta_extrap ramp; cos and sin
  scaled by rope.scaling.attn_factor * (1 + 0.1 ln factor) (llama.cpp divides its own
  get_mscale back out before ggml multiplies this in). Local layers use
  rope.freq_base_swa when present, with the same scaling. Without scaling: plain NeoX.
- MoE: router logits = xn @ ffn_gate_inp^T + ffn_gate_inp.bias; the n_expert_used largest
  logits chosen (ties to the lower id), their weights the softmax over the chosen logits
  only. Expert e: g = W_gate[e] xn + b_gate[e], u = W_up[e] xn + b_up[e],
  a = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clip(u, -7, 7) + 1),
  y = W_down[e] a + b_down[e]; out = sum_e w_e y_e (the bias weighted too).
"""

import numpy as np

from llama_numpy import rms_norm

SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0


class GptOssConfig:
    def __init__(self, gguf):
        arch = gguf.get("general.architecture")
        if arch != "gpt-oss":
            raise ValueError("not a gpt-oss file: %r" % arch)

        def key(name, default=None, required=False):
            full = "gpt-oss." + name
            if full not in gguf.metadata:
                if required:
                    raise ValueError("missing metadata key " + full)
                return default
            return gguf.metadata[full]

        self.n_embd = int(key("embedding_length", required=True))
        self.n_layer = int(key("block_count", required=True))
        self.n_head = int(key("attention.head_count", required=True))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        if self.n_rot != self.head_dim:
            raise ValueError("rope.dimension_count %d != head size %d" % (self.n_rot, self.head_dim))
        self.n_expert = int(key("expert_count", required=True))
        self.n_expert_used = int(key("expert_used_count", required=True))
        self.n_ff_exp = int(key("expert_feed_forward_length", required=True))
        self.rms_eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.rope_base_local = float(key("rope.freq_base_swa", self.rope_base))
        self.n_ctx = int(key("context_length", 0))
        self.window = int(key("attention.sliding_window", required=True))
        pattern = key("attention.sliding_window_pattern", 2)
        if isinstance(pattern, (list, tuple)):
            raise ValueError("attention.sliding_window_pattern as an array is not supported")
        self.swa_period = int(pattern)
        scaling = key("rope.scaling.type", "none")
        self.yarn_factor = float(key("rope.scaling.factor", 1.0) or 1.0)
        if scaling == "yarn" and self.yarn_factor != 1.0:
            self.yarn = True
        elif scaling in ("none", "yarn"):
            self.yarn = False
        else:
            raise ValueError("unsupported rope.scaling.type %r" % scaling)
        self.yarn_orig_ctx = int(key("rope.scaling.original_context_length", self.n_ctx))
        self.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))
        if self.n_head % self.n_head_kv:
            raise ValueError("head_count %d is not a multiple of head_count_kv %d" % (self.n_head, self.n_head_kv))

    def is_local(self, il):
        p = self.swa_period
        return p == 0 or il % p < p - 1


def yarn_rope_tables(cfg, n_tokens, base):
    """cos, sin (n_tokens, n_rot/2), already multiplied by the magnitude scale."""
    half = cfg.n_rot // 2
    i = np.arange(half, dtype=np.float64)
    pos = np.arange(n_tokens, dtype=np.float64)
    theta_extrap = pos[:, None] * base ** (-2.0 * i[None, :] / cfg.n_rot)
    if not cfg.yarn:
        return np.cos(theta_extrap), np.sin(theta_extrap)
    factor = cfg.yarn_factor

    def corr_dim(rotations):
        return cfg.n_rot * np.log(cfg.yarn_orig_ctx / (rotations * 2.0 * np.pi)) / (2.0 * np.log(base))

    low = max(0.0, np.floor(corr_dim(YARN_BETA_FAST)))
    high = min(cfg.n_rot - 1.0, np.ceil(corr_dim(YARN_BETA_SLOW)))
    ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    theta = theta_extrap / factor * (1.0 - ramp) + theta_extrap * ramp
    mscale = cfg.rope_attn_factor * (1.0 + 0.1 * np.log(factor))
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def neox_rope(x, cos, sin):
    """x: (T, heads, hd) with hd == n_rot; pairs (i, i + hd/2)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def attention_with_sinks(q, k, v, n_head_kv, sinks, window):
    """q: (T, H, hd), k/v: (T, KV, hd), sinks: (H,) -> (T, H, hd)."""
    n_tokens, n_head, hd = q.shape
    kv_of_head = np.arange(n_head) // (n_head // n_head_kv)
    k = k[:, kv_of_head, :]
    v = v[:, kv_of_head, :]
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)          # (H, T, T)
    qpos = np.arange(n_tokens)[:, None]
    kpos = np.arange(n_tokens)[None, :]
    hidden = kpos > qpos
    if window > 0:
        hidden = hidden | (kpos <= qpos - window)
    scores = np.where(hidden[None], -np.inf, scores)
    # The sink as one more column per (head, query), dropped after the softmax.
    sink_col = np.broadcast_to(sinks[:, None, None], (n_head, n_tokens, 1))
    full = np.concatenate([scores, sink_col], axis=-1)
    full = full - full.max(axis=-1, keepdims=True)
    p = np.exp(full)
    p = p / p.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p[..., :n_tokens], v)


def swiglu_oai(g, u):
    g = np.minimum(g, SWIGLU_LIMIT)
    u = np.clip(u, -SWIGLU_LIMIT, SWIGLU_LIMIT)
    return g / (1.0 + np.exp(-SWIGLU_ALPHA * g)) * (u + 1.0)


class GptOssModel:
    def __init__(self, gguf):
        self.cfg = cfg = GptOssConfig(gguf)

        def weight(name, shape):
            if not gguf.has_tensor(name):
                raise ValueError("missing tensor %s" % name)
            w = gguf.tensor(name).astype(np.float64)
            if w.shape != tuple(shape):
                raise ValueError("tensor %s has numpy shape %s, want %s" % (name, w.shape, tuple(shape)))
            return w

        E, H, KV, D = cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim
        N, FE = cfg.n_expert, cfg.n_ff_exp
        self.token_embd = gguf.tensor("token_embd.weight").astype(np.float64)
        self.n_vocab = self.token_embd.shape[0]
        self.output_norm = weight("output_norm.weight", (E,))
        self.output = weight("output.weight", (self.n_vocab, E))
        self.layers = []
        for il in range(cfg.n_layer):
            p = "blk.%d." % il
            self.layers.append({
                "attn_norm": weight(p + "attn_norm.weight", (E,)),
                "wq": weight(p + "attn_q.weight", (H * D, E)), "bq": weight(p + "attn_q.bias", (H * D,)),
                "wk": weight(p + "attn_k.weight", (KV * D, E)), "bk": weight(p + "attn_k.bias", (KV * D,)),
                "wv": weight(p + "attn_v.weight", (KV * D, E)), "bv": weight(p + "attn_v.bias", (KV * D,)),
                "wo": weight(p + "attn_output.weight", (E, H * D)), "bo": weight(p + "attn_output.bias", (E,)),
                "sinks": weight(p + "attn_sinks.weight", (H,)),
                "ffn_norm": weight(p + "post_attention_norm.weight", (E,)),
                "router": weight(p + "ffn_gate_inp.weight", (N, E)), "router_b": weight(p + "ffn_gate_inp.bias", (N,)),
                "gate": weight(p + "ffn_gate_exps.weight", (N, FE, E)), "gate_b": weight(p + "ffn_gate_exps.bias", (N, FE)),
                "up": weight(p + "ffn_up_exps.weight", (N, FE, E)), "up_b": weight(p + "ffn_up_exps.bias", (N, FE)),
                "down": weight(p + "ffn_down_exps.weight", (N, E, FE)), "down_b": weight(p + "ffn_down_exps.bias", (N, E)),
            })
        self.route_gap = None

    def forward(self, tokens):
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0 or tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("need a non-empty 1-D list of ids in [0, %d)" % self.n_vocab)
        T, H, KV, D = tokens.size, cfg.n_head, cfg.n_head_kv, cfg.head_dim
        tables = {"global": yarn_rope_tables(cfg, T, cfg.rope_base),
                  "local": yarn_rope_tables(cfg, T, cfg.rope_base_local)}
        self.route_gap = np.full(T, np.inf)
        x = self.token_embd[tokens]
        for il, L in enumerate(self.layers):
            local = cfg.is_local(il)
            cos, sin = tables["local" if local else "global"]
            h = rms_norm(x, L["attn_norm"], cfg.rms_eps)
            q = (h @ L["wq"].T + L["bq"]).reshape(T, H, D)
            k = (h @ L["wk"].T + L["bk"]).reshape(T, KV, D)
            v = (h @ L["wv"].T + L["bv"]).reshape(T, KV, D)
            q = neox_rope(q, cos, sin)
            k = neox_rope(k, cos, sin)
            a = attention_with_sinks(q, k, v, KV, L["sinks"], cfg.window if local else 0).reshape(T, H * D)
            x = x + a @ L["wo"].T + L["bo"]
            x = x + self.moe(L, rms_norm(x, L["ffn_norm"], cfg.rms_eps))
        return rms_norm(x, self.output_norm, cfg.rms_eps) @ self.output.T

    def moe(self, L, h):
        cfg = self.cfg
        k = cfg.n_expert_used
        logits = h @ L["router"].T + L["router_b"]                    # (T, N)
        if k < cfg.n_expert:
            srt = -np.sort(-logits, axis=1)
            self.route_gap = np.minimum(self.route_gap, srt[:, k - 1] - srt[:, k])
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-logits[t], kind="stable")[:k]
            w = np.exp(logits[t][top] - logits[t][top].max())
            w = w / w.sum()
            for e, we in zip(top, w):
                g = L["gate"][e] @ h[t] + L["gate_b"][e]
                u = L["up"][e] @ h[t] + L["up_b"][e]
                out[t] += we * (L["down"][e] @ swiglu_oai(g, u) + L["down_b"][e])
        return out

    def greedy(self, prompt, n_new):
        tokens = list(prompt)
        for _ in range(n_new):
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens[len(prompt):]
