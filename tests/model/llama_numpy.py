"""Llama-family forward pass in plain numpy (float64): the reference pagoda's
C++ forward pass is checked against (tests/model/numpy_reference_test.py).

Architectures: `llama` (with experts: Mixtral), `qwen2`, `qwen3`, `phi3`,
`qwen3moe`, `olmoe`, `smollm3`, read from GGUF metadata.
Written from the model definitions (llama.cpp's llama/qwen2/qwen3/phi3 graphs,
Meta's, Qwen's and Microsoft's reference models in transformers), sharing no
code with pagoda.

Contract:
- LlamaModel(gguf_file) reads the hyperparameters and dequantizes every weight
  up front into float64 (8 bytes per parameter: meant for small test models).
  It raises ValueError for metadata it does not support (other architectures,
  YaRN/longrope scaling, key_length != value_length) rather than computing
  something subtly different.
- forward(tokens) -> logits, float64 array (n_tokens, n_vocab): causal
  attention over the whole token list from position 0, logits for every
  position. Stateless, no KV cache: each call recomputes everything.

Conventions (each is a place where an implementation can silently go wrong):
- GGUF stores a weight as dims [cols, rows] (ggml order), numpy shape (rows,
  cols): y = W @ x, i.e. Y = X @ W.T for row-vector activations X.
- RoPE pairs: `llama` rotates adjacent pairs (2i, 2i+1) ("normal" ggml rope),
  because the HF->GGUF converter permutes the Q/K rows of Llama checkpoints
  into that order; `qwen2`/`qwen3` are converted unpermuted and rotate the
  halves (i, i + n_rot/2) ("NeoX" rope). Only the first n_rot = rope.dimension_count
  dims of each head rotate; any rest passes through unchanged.
- Pair i (0 <= i < n_rot/2) at position p turns by
      p * base^(-2i/n_rot) / freq_factor[i] / linear_factor
  where freq_factor comes from the `rope_freqs.weight` tensor (Llama 3.1
  style frequency factors; 1 when absent) and linear_factor from
  `rope.scaling.factor` when the scaling type is linear (1 otherwise).
- Optional tensors are used when present: attn_q/k/v biases (qwen2),
  attn_q_norm/attn_k_norm (qwen3: RMSNorm over head_dim of every head of q and
  k, before RoPE), output.weight (absent: tied to token_embd.weight),
  rope_freqs.weight.
- GQA: query head h reads kv head h // (n_head / n_head_kv). Scores are scaled
  by 1/sqrt(head_dim). FFN is SwiGLU: down(silu(gate(x)) * up(x)).
- phi3: Q, K and V are one matrix `attn_qkv` (rows: Q, then K, then V) and
  gate and up one matrix `ffn_up` (rows: gate, then up), as HF's qkv_proj and
  gate_up_proj. LongRoPE (transformers' Phi3 "longrope"): the file holds
  rope_factors_long/short.weight; pair i's frequency is divided by the long
  factor when the context the model runs with (n_ctx) exceeds
  rope.scaling.original_context_length, else by the short one (llama.cpp's
  choice, fixed per context), and cos/sin are multiplied by
  rope.scaling.attn_factor.
- smollm3 (SmolLM3, llama.cpp's smollm3 graph): a llama whose layer il attends without
  RoPE (NoPE: q and k not rotated at all) when (il + 1) % 4 == 0; llama.cpp fixes the 4
  (no GGUF key). Its Q/K rows are permuted like llama's (adjacent-pair rope).
- gemma2 / gemma3 (Google's Gemma 2 and Gemma 3 text models, llama.cpp's graphs
  and transformers' modeling_gemma2/3):
  * norm weights are used as the GGUF stores them: llama.cpp's converter already
    wrote HF's (1 + w) into the file;
  * embeddings times sqrt(n_embd); tied output;
  * a block is x += post_attention_norm(attn(attn_norm(x)));
    x += post_ffw_norm(ffn(ffn_norm(x))), ffn = down(gelu_tanh(gate) * up);
  * scores q.k * s where s = 1/sqrt(n_embd / n_head) for the 27B models (46 layers for
    gemma2, 62 for gemma3), 1/sqrt(head_dim) otherwise (query_pre_attn_scalar);
  * gemma2 caps scores to c * tanh(s / c), c = attn_logit_softcapping (default 50),
    and logits likewise with final_logit_softcapping (default 30); gemma3 caps logits
    only when the file has the key; gemma3 has q/k norms;
  * local layers: layer i is global when (i + 1) % P == 0 (P = 2 gemma2, 6 gemma3),
    otherwise it sees keys k with q - W < k <= q, W = attention.sliding_window
    (gemma2 default 4096; gemma3 without the key has no local layers);
  * gemma3's local layers rotate with base rope.freq_base_swa (default 10000) and
    no scaling; its global layers use rope.freq_base and the linear factor.
"""

import numpy as np

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "olmoe", "smollm3")
# Every NOPE_STEP-th layer skips RoPE (SmolLM3's n_no_rope_layer_step in llama.cpp).
NOPE_STEP = {"smollm3": 4}
NEOX_ROPE_ARCHS = ("qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "olmoe")
GEMMA_ARCHS = ("gemma2", "gemma3")
# Mixture-of-experts architectures whose top-k routing weights are renormalised to
# sum 1: Qwen3-MoE (norm_topk_prob, as llama.cpp's qwen3moe graph), Mixtral (GGUF
# `llama` with expert_count; HF softmaxes then renormalises the top k).
# OLMoE keeps the top-k softmax weights as they are (norm_topk_prob false).
RENORMALIZED_TOPK_ARCHS = ("qwen3moe", "llama")


class LlamaConfig:
    """Hyperparameters, from `{arch}.*` GGUF metadata keys."""

    def __init__(self, gguf):
        arch = gguf.get("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ValueError("unsupported architecture %r (want one of %s)" % (arch, ", ".join(SUPPORTED_ARCHS)))

        def key(name, default=None, required=False):
            full = "%s.%s" % (arch, name)
            if full not in gguf.metadata:
                if required:
                    raise ValueError("missing metadata key %s" % full)
                return default
            return gguf.metadata[full]

        self.arch = arch
        self.n_embd = int(key("embedding_length", required=True))
        self.n_layer = int(key("block_count", required=True))
        self.n_head = int(key("attention.head_count", required=True))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        value_length = int(key("attention.value_length", self.head_dim))
        if value_length != self.head_dim:
            raise ValueError("attention.value_length %d != key_length %d is not supported"
                             % (value_length, self.head_dim))
        self.n_ff = int(key("feed_forward_length", required=True))
        # Mixture of experts: every layer's FFN is n_expert SwiGLU experts of width
        # n_ff_exp, a token using the n_expert_used with the largest router softmax.
        self.n_expert = int(key("expert_count", 0))
        self.n_expert_used = int(key("expert_used_count", 0))
        self.n_ff_exp = int(key("expert_feed_forward_length", self.n_ff))
        if arch in ("qwen3moe", "olmoe") and self.n_expert == 0:
            raise ValueError("%s without expert_count" % arch)
        if self.n_expert and not 1 <= self.n_expert_used <= self.n_expert:
            raise ValueError("expert_used_count %d not in [1, %d]" % (self.n_expert_used, self.n_expert))
        self.rms_eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.n_ctx = int(key("context_length", 0))
        self.rope_neox = arch in NEOX_ROPE_ARCHS
        self.nope_step = NOPE_STEP.get(arch, 0)
        self.rope_orig_ctx = int(key("rope.scaling.original_context_length", self.n_ctx))
        self.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))

        # RoPE scaling. `linear` divides every angle by the factor. `none`
        # never scales. Llama-3.1 style scaling has no linear factor: it lives in
        # the rope_freqs.weight tensor (some writers also label it "llama3").
        # Anything else (yarn, longrope) changes the formula: refuse it.
        scaling_type = key("rope.scaling.type", None)
        factor = key("rope.scaling.factor", None)
        if factor is None:
            factor = key("rope.scale_linear", None)  # older GGUF key
        factor = float(factor) if factor else 1.0
        if scaling_type in (None, "linear"):
            self.rope_linear_factor = factor
        elif scaling_type in ("none", "llama3"):
            self.rope_linear_factor = 1.0
        else:
            raise ValueError("unsupported rope.scaling.type %r" % scaling_type)

        self.gemma = arch in GEMMA_ARCHS
        self.sliding_window = 0
        self.swa_period = 0
        self.rope_base_local = None
        self.attn_softcap = 0.0
        self.final_softcap = 0.0
        self.attn_scale = 1.0 / np.sqrt(self.head_dim)
        if self.gemma:
            self.swa_period = 2 if arch == "gemma2" else 6
            self.sliding_window = int(key("attention.sliding_window", 4096 if arch == "gemma2" else 0))
            if arch == "gemma3" and self.sliding_window > 0:
                self.rope_base_local = float(key("rope.freq_base_swa", 10000.0))
            if arch == "gemma2":
                self.attn_softcap = float(key("attn_logit_softcapping", 50.0))
            self.final_softcap = float(key("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0))
            if self.n_layer == (46 if arch == "gemma2" else 62):
                self.attn_scale = 1.0 / np.sqrt(self.n_embd // self.n_head)

        if self.n_head % self.n_head_kv:
            raise ValueError("head_count %d is not a multiple of head_count_kv %d" % (self.n_head, self.n_head_kv))
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            raise ValueError("rope.dimension_count %d invalid for head_dim %d" % (self.n_rot, self.head_dim))

    def __repr__(self):
        return ("LlamaConfig(arch=%s, n_embd=%d, n_layer=%d, n_head=%d, n_head_kv=%d, head_dim=%d, n_ff=%d, "
                "eps=%g, rope_base=%g, n_rot=%d, neox=%s, linear_factor=%g)"
                % (self.arch, self.n_embd, self.n_layer, self.n_head, self.n_head_kv, self.head_dim, self.n_ff,
                   self.rms_eps, self.rope_base, self.n_rot, self.rope_neox, self.rope_linear_factor))


def rms_norm(x, weight, eps):
    """x: (..., n), weight: (n,) -> x / sqrt(mean(x^2) + eps) * weight."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def rope_angles(cfg, n_tokens, freq_factors, base=None, linear_factor=None):
    """(n_tokens, n_rot/2) angles: position p, pair i -> p * base^(-2i/n_rot) / ff[i] / linear."""
    base = cfg.rope_base if base is None else base
    linear_factor = cfg.rope_linear_factor if linear_factor is None else linear_factor
    i = np.arange(cfg.n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / cfg.n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    inv_freq = inv_freq / linear_factor
    pos = np.arange(n_tokens, dtype=np.float64)
    return pos[:, None] * inv_freq[None, :]


def apply_rope(x, angles, n_rot, neox, magnitude=1.0):
    """x: (n_tokens, n_heads, head_dim); angles: (n_tokens, n_rot/2). Returns a rotated copy,
    the rotated dims scaled by `magnitude` (LongRoPE's attention factor)."""
    out = x.copy()
    cos = magnitude * np.cos(angles)[:, None, :]  # broadcast over heads
    sin = magnitude * np.sin(angles)[:, None, :]
    if neox:
        a, b = x[..., 0:n_rot // 2], x[..., n_rot // 2:n_rot]
        out[..., 0:n_rot // 2] = a * cos - b * sin
        out[..., n_rot // 2:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def causal_attention(q, k, v, n_head_kv, scale=None, window=0, softcap=0.0):
    """q: (T, n_head, hd), k/v: (T, n_head_kv, hd) -> (T, n_head, hd).
    Query head h attends with kv head h // (n_head / n_head_kv); position t sees 0..t
    (window w > 0: t-w+1..t). Scores q.k * scale (default 1/sqrt(hd)), then c*tanh(s/c)
    when softcap c > 0."""
    n_tokens, n_head, head_dim = q.shape
    group = n_head // n_head_kv
    kv_of_head = np.arange(n_head) // group
    k = k[:, kv_of_head, :]            # (T, n_head, hd): kv heads repeated per group
    v = v[:, kv_of_head, :]
    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale
    scores = np.einsum("qhd,khd->hqk", q, k) * scale   # (n_head, T, T)
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    qpos = np.arange(n_tokens)[:, None]
    kpos = np.arange(n_tokens)[None, :]
    hidden = kpos > qpos
    if window > 0:
        hidden = hidden | (kpos <= qpos - window)
    scores = np.where(hidden[None, :, :], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", probs, v)


def moe_routed(X, h, n_used, renormalize, mm=None):
    """A mixture of experts' routed FFN. X: {"router": (N, E), "gate"/"up": (N, FE, E),
    "down": (N, E, FE)}; h: (T, E) normed -> (out (T, E), gap). Per token, softmax over
    the router logits, the n_used largest kept (ties to the lower expert id),
    renormalised to sum 1 when `renormalize`, and the chosen experts' SwiGLU outputs
    summed with those weights. Token by token, every expert computed densely: no
    grouping. gap: (T,) the logit gap between the last chosen and the first unchosen
    expert (None when every expert is used): where it is below an implementation's
    logit error the choice may legitimately differ (the comparison skips those
    positions). mm(x, w) = x @ w.T for every weight product (a numerics study can
    substitute activation rounding); default plain numpy."""
    if mm is None:
        def mm(x, w):
            return x @ w.T
    N = X["router"].shape[0]
    out = np.zeros_like(h)
    logits = mm(h, X["router"])                                        # (T, N)
    gap = None
    if n_used < N:
        srt = -np.sort(-logits, axis=1)
        gap = srt[:, n_used - 1] - srt[:, n_used]
    for t in range(h.shape[0]):
        p = np.exp(logits[t] - logits[t].max())
        p = p / p.sum()
        top = np.argsort(-p, kind="stable")[:n_used]
        w = p[top]
        if renormalize:
            w = w / w.sum()
        ht = h[t:t + 1]
        for e, we in zip(top, w):
            ff = silu(mm(ht, X["gate"][e])) * mm(ht, X["up"][e])        # (1, FE)
            out[t] += we * mm(ff, X["down"][e])[0]
    return out, gap


class LlamaModel:
    def __init__(self, gguf, n_ctx=None):
        """n_ctx: the context length the model runs with (LongRoPE picks its factors
        by it); default the file's context_length."""
        self.cfg = cfg = LlamaConfig(gguf)
        self.n_ctx = cfg.n_ctx if n_ctx is None else int(n_ctx)

        def weight(name, shape=None, optional=False):
            if not gguf.has_tensor(name):
                if optional:
                    return None
                raise ValueError("missing tensor %s" % name)
            w = gguf.tensor(name).astype(np.float64)
            if shape is not None and w.shape != tuple(shape):
                raise ValueError("tensor %s has numpy shape %s, want %s" % (name, w.shape, tuple(shape)))
            return w

        E, H, KV, D, F = cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff
        self.token_embd = weight("token_embd.weight")                  # (n_vocab, E)
        self.n_vocab = self.token_embd.shape[0]
        if self.token_embd.shape != (self.n_vocab, E):
            raise ValueError("token_embd.weight shape %s" % (self.token_embd.shape,))
        self.output_norm = weight("output_norm.weight", (E,))
        self.output = weight("output.weight", (self.n_vocab, E), optional=True)
        self.tied_output = self.output is None
        if self.tied_output:
            self.output = self.token_embd
        self.rope_freqs = weight("rope_freqs.weight", (cfg.n_rot // 2,), optional=True)
        long_f = weight("rope_factors_long.weight", (cfg.n_rot // 2,), optional=True)
        short_f = weight("rope_factors_short.weight", (cfg.n_rot // 2,), optional=True)
        if (long_f is None) != (short_f is None):
            raise ValueError("only one of rope_factors_long/short.weight")
        self.longrope_long = None
        if long_f is not None:
            if self.rope_freqs is not None:
                raise ValueError("both rope_freqs and LongRoPE factors")
            self.longrope_long = self.n_ctx > cfg.rope_orig_ctx
            self.rope_freqs = long_f if self.longrope_long else short_f

        self.layers = []
        for il in range(cfg.n_layer):
            p = "blk.%d." % il
            if gguf.has_tensor(p + "attn_qkv.weight"):
                qkv = weight(p + "attn_qkv.weight", (H * D + 2 * KV * D, E))
                wq, wk, wv = qkv[:H * D], qkv[H * D:H * D + KV * D], qkv[H * D + KV * D:]
            else:
                wq = weight(p + "attn_q.weight", (H * D, E))
                wk = weight(p + "attn_k.weight", (KV * D, E))
                wv = weight(p + "attn_v.weight", (KV * D, E))
            experts = None
            if cfg.n_expert:
                N, FE = cfg.n_expert, cfg.n_ff_exp
                experts = {
                    "router": weight(p + "ffn_gate_inp.weight", (N, E)),
                    "gate": weight(p + "ffn_gate_exps.weight", (N, FE, E)),
                    "up": weight(p + "ffn_up_exps.weight", (N, FE, E)),
                    "down": weight(p + "ffn_down_exps.weight", (N, E, FE)),
                }
                w_gate = w_up = None
            elif cfg.arch == "phi3":
                gate_up = weight(p + "ffn_up.weight", (2 * F, E))
                w_gate, w_up = gate_up[:F], gate_up[F:]
            else:
                w_gate = weight(p + "ffn_gate.weight", (F, E))
                w_up = weight(p + "ffn_up.weight", (F, E))
            self.layers.append({
                "attn_norm": weight(p + "attn_norm.weight", (E,)),
                "wq": wq,
                "wk": wk,
                "wv": wv,
                "bq": weight(p + "attn_q.bias", (H * D,), optional=True),
                "bk": weight(p + "attn_k.bias", (KV * D,), optional=True),
                "bv": weight(p + "attn_v.bias", (KV * D,), optional=True),
                # OLMoE: q/k norms over the whole projection ([H*D], [KV*D]), not per head.
                "q_norm": weight(p + "attn_q_norm.weight", (H * D,) if cfg.arch == "olmoe" else (D,), optional=True),
                "k_norm": weight(p + "attn_k_norm.weight", (KV * D,) if cfg.arch == "olmoe" else (D,), optional=True),
                "wo": weight(p + "attn_output.weight", (E, H * D)),
                "ffn_norm": weight(p + "ffn_norm.weight", (E,)),
                "attn_post_norm": weight(p + "post_attention_norm.weight", (E,), optional=not cfg.gemma),
                "ffn_post_norm": weight(p + "post_ffw_norm.weight", (E,), optional=not cfg.gemma),
                "w_gate": w_gate,
                "w_up": w_up,
                "w_down": None if experts else weight(p + "ffn_down.weight", (E, F)),
                "experts": experts,
            })
        if cfg.arch in ("qwen3", "gemma3") and self.layers and self.layers[0]["q_norm"] is None:
            raise ValueError("%s model without attn_q_norm.weight" % cfg.arch)
        if cfg.gemma and not self.tied_output:
            raise ValueError("gemma with output.weight (llama.cpp uses token_embd)")

    def forward(self, tokens):
        """tokens: list of ids -> logits (n_tokens, n_vocab) float64, every position."""
        logits = self.hidden_states(tokens) @ self.output.T            # (T, n_vocab)
        if self.cfg.final_softcap > 0:
            logits = self.cfg.final_softcap * np.tanh(logits / self.cfg.final_softcap)
        return logits

    def hidden_states(self, tokens):
        """tokens: list of ids -> the final hidden states (n_tokens, n_embd) float64 after
        the output norm: what embeddings pool and the vocabulary projection reads."""
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        T, H, KV, D = tokens.size, cfg.n_head, cfg.n_head_kv, cfg.head_dim
        angles = rope_angles(cfg, T, self.rope_freqs)                  # (T, n_rot/2)
        angles_local = angles
        if cfg.rope_base_local is not None:
            angles_local = rope_angles(cfg, T, None, base=cfg.rope_base_local, linear_factor=1.0)

        # (T,) smallest routing margin over the layers (moe_ffn), None for dense models.
        self.route_gap = None
        x = self.token_embd[tokens]                                    # (T, E) residual stream
        if cfg.gemma:
            x = x * np.sqrt(cfg.n_embd)
        for il, L in enumerate(self.layers):
            local = cfg.sliding_window > 0 and (il + 1) % cfg.swa_period != 0
            ang = angles_local if local else angles
            h = rms_norm(x, L["attn_norm"], cfg.rms_eps)
            q = h @ L["wq"].T                                          # (T, H*D)
            k = h @ L["wk"].T                                          # (T, KV*D)
            v = h @ L["wv"].T
            if L["bq"] is not None:
                q = q + L["bq"]
            if L["bk"] is not None:
                k = k + L["bk"]
            if L["bv"] is not None:
                v = v + L["bv"]
            if cfg.arch == "olmoe":
                q = rms_norm(q, L["q_norm"], cfg.rms_eps)
                k = rms_norm(k, L["k_norm"], cfg.rms_eps)
            q = q.reshape(T, H, D)
            k = k.reshape(T, KV, D)
            v = v.reshape(T, KV, D)
            if L["q_norm"] is not None and cfg.arch != "olmoe":
                q = rms_norm(q, L["q_norm"], cfg.rms_eps)
            if L["k_norm"] is not None and cfg.arch != "olmoe":
                k = rms_norm(k, L["k_norm"], cfg.rms_eps)
            if not (cfg.nope_step and (il + 1) % cfg.nope_step == 0):
                q = apply_rope(q, ang, cfg.n_rot, cfg.rope_neox, cfg.rope_attn_factor)
                k = apply_rope(k, ang, cfg.n_rot, cfg.rope_neox, cfg.rope_attn_factor)
            attn = causal_attention(q, k, v, KV, scale=cfg.attn_scale, window=cfg.sliding_window if local else 0,
                                    softcap=cfg.attn_softcap).reshape(T, H * D)
            a = attn @ L["wo"].T
            if L["attn_post_norm"] is not None:
                a = rms_norm(a, L["attn_post_norm"], cfg.rms_eps)
            x = x + a

            h = rms_norm(x, L["ffn_norm"], cfg.rms_eps)
            if L["experts"] is not None:
                x = x + self.moe_ffn(L["experts"], h)
            else:
                act = gelu_tanh if cfg.gemma else silu
                ff = act(h @ L["w_gate"].T) * (h @ L["w_up"].T)            # (T, F)
                f = ff @ L["w_down"].T
                if L["ffn_post_norm"] is not None:
                    f = rms_norm(f, L["ffn_post_norm"], cfg.rms_eps)
                x = x + f

        return rms_norm(x, self.output_norm, cfg.rms_eps)                # (T, E)

    def moe_ffn(self, X, h):
        """h: (T, E) normed -> (T, E), through moe_routed; keeps the routing margins."""
        cfg = self.cfg
        out, gap = moe_routed(X, h, cfg.n_expert_used, cfg.arch in RENORMALIZED_TOPK_ARCHS)
        if gap is not None:
            self.route_gap = gap if self.route_gap is None else np.minimum(self.route_gap, gap)
        return out

    def greedy(self, prompt, n_new):
        """Greedy decoding: the n_new ids after prompt (recomputes the full sequence per step)."""
        tokens = list(prompt)
        for _ in range(n_new):
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens[len(prompt):]
