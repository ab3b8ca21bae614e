"""Qwen 3.5 / 3.6 (GGUF architectures `qwen35` and `qwen35moe`) forward pass in plain
numpy (float64): the reference pagoda's hybrid Gated DeltaNet / full-attention forward
pass is checked against (tests/model/numpy_reference_test.py).

Written from llama.cpp b10587's graphs (src/models/qwen35.cpp, qwen35moe.cpp,
delta-net-base.cpp, llm_graph_context::build_moe_ffn) and ggml's CPU ops (ssm_conv,
l2_norm, gated_delta_net, IMROPE), reading the GGUF through gguf_numpy.py; it shares
no code with pagoda. The llama-family helpers (rms_norm, silu, NeoX rope, causal
attention, the routed experts) come from llama_numpy.py.

Contract:
- Qwen35Model(gguf_file) reads the hyperparameters and dequantizes every trunk
  weight to float64 up front (small test models only). It raises ValueError for
  metadata it does not support (RoPE scaling, key_length != value_length, a
  state size that differs between keys and values) rather than computing
  something subtly different.
- forward(tokens, state=None) -> logits (n_tokens, n_vocab) float64 for every
  position. Without a state the tokens start at position 0 and every layer
  starts from zeros; with a Qwen35State (new_state()) the call continues where
  the previous call on that state stopped, and updates it: what a server's
  decode step does. Calls without a state are stateless.
- greedy(prompt, n_new) -> the n_new greedy ids after prompt (incremental, via a
  state).
- self_test(workdir) checks the reference against itself and against
  llama_numpy (see there) and returns a list of problems; self_test_model(model,
  tokens) checks one model's chunked (stateful) pass against its one-pass forward.

The model (each point is a place where an implementation can silently go wrong):
- Layers: block_count - nextn_predict_layers trunk layers run; the MTP blocks
  stored after them (blk.N.*, with nextn.* tensors) never run in the main pass.
  Layer i is full attention when (i + 1) % full_attention_interval == 0 (default
  4), unless attention.recurrent_layers (one flag per block, or one for all)
  says which are recurrent; every other trunk layer is Gated DeltaNet.
- Every layer: h = x + mixer(rms_norm(x, attn_norm));
  x = h + ffn(rms_norm(h, post_attention_norm)), ffn = down(silu(gate) * up).
- qwen35moe: the same trunk (every key and tensor above under `qwen35moe.`), every
  layer's ffn a mixture of experts (llama.cpp's build_moe_ffn with softmax gating and
  norm_w, then the shared expert as qwen35moe.cpp adds it): per token, softmax over
  ffn_gate_inp's expert_count logits, the expert_used_count largest kept and
  renormalised to sum 1 (no expert_weights_scale: qwen35moe does not read it), their
  SwiGLU outputs (ffn_gate/up/down_exps, width expert_feed_forward_length, default
  feed_forward_length / expert_used_count) summed with those weights (llama_numpy.
  moe_routed), plus sigmoid(ffn_gate_inp_shexp . h) times the shared expert's SwiGLU
  (ffn_gate/up/down_shexp, width expert_shared_feed_forward_length, default
  feed_forward_length). feed_forward_length itself is optional there.
  Final rms_norm(x, output_norm), then output.weight (token_embd when absent).
  Norm weights are used as stored: llama.cpp's graph adds no 1 (a (1 + w) norm of the
  HF checkpoint is the converter's business, not the reader's).
- Full attention: attn_q.weight holds 2 * n_head * head_dim rows, per head h
  first the query [h*2*hd, h*2*hd + hd) then the output gate [.. + hd, (h+1)*2*hd).
  Q and K are RMS-normed per head (attn_q_norm / attn_k_norm, head_dim weights),
  rotated by interleaved multi-section RoPE (IMROPE) over the first n_rot dims:
  pairs (i, i + n_rot/2) as in NeoX, pair i turning by pos_c(i) * base^(-2i/n_rot)
  where c(i) is the position component ggml's IMROPE assigns to sector i %
  sum(sections). Text tokens have positions (p, p, p, 0) (llama.cpp's
  llm_graph_input_pos), so for the released sections ([11, 11, 10, 0], and
  synth's [3, 3, 2, 0]) every pair uses p and this is plain NeoX RoPE; a pair
  falling in the fourth component would not turn at all. Scores scaled by
  1/sqrt(head_dim) (qwen35 does not read attention.scale), GQA head h -> kv head
  h // (n_head / n_head_kv). The attention output is multiplied by
  sigmoid(gate) elementwise, then attn_output.
- Gated DeltaNet (K = ssm.conv_kernel, d = ssm.state_size, Hk = ssm.group_count,
  Hv = ssm.time_step_rank, value head width ssm.inner_size / Hv, which must be d):
  mixed = xn @ attn_qkv^T, z = xn @ attn_gate^T, beta = sigmoid(xn @ ssm_beta^T),
  g = softplus(xn @ ssm_alpha^T + ssm_dt.bias) * ssm_a (ssm_a is stored as
  -exp(A_log): negative), softplus(x) = x above 20 (ggml's op).
  A causal depthwise convolution over time, conv[t, c] = sum_r w[c, r] *
  mixed[t - (K-1) + r, c] (w = ssm_conv1d.weight, numpy (conv_dim, K); the K-1
  positions before the first token are zeros for a new sequence, the previous
  call's last K-1 rows with a state), then SiLU. Channels: q = [0, Hk*d),
  k = [Hk*d, 2*Hk*d), v = the rest, heads of d. q and k are L2-normalised per head:
  x / max(||x||, eps), eps = the RMS-norm eps (ggml_l2_norm).
  Value head h reads key head h % Hk: llama.cpp tiles q and k with ggml_repeat_4d
  (and the fused kernel uses iv1 % neq1), NOT h // (Hv / Hk) as GQA does; for
  Hv = 2 Hk the two differ for every head but 0 and Hv - 1.
  Per value head a state S[i, j] (key index i, value index j), zero at
  position 0; per token t: S *= exp(g[t]); r_j = sum_i S[i, j] k[i];
  delta_j = beta[t] (v[j] - r_j); S[i, j] += k[i] delta_j;
  o[j] = sum_i S[i, j] q[i] / sqrt(d).
  o is RMS-normed per head with ssm_norm (d weights), times silu(z) of the same
  head, then ssm_out.
"""

import numpy as np

import gguf_numpy
import llama_numpy
from llama_numpy import rms_norm, silu, apply_rope, causal_attention


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    # ggml's op_softplus: x > 20 ? x : log(1 + exp(x)). Above 20 the two differ
    # by < 2e-9 anyway; kept for the letter of it.
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2_norm(x, eps):
    """x: (..., n) -> x / max(||x||, eps) over the last axis (ggml_l2_norm)."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


class Qwen35Config:
    """Hyperparameters, from `qwen35.*` / `qwen35moe.*` GGUF metadata keys."""

    def __init__(self, gguf):
        arch = gguf.get("general.architecture")
        if arch not in ("qwen35", "qwen35moe"):
            raise ValueError("architecture %r is not qwen35 or qwen35moe" % arch)
        self.arch = arch
        self.moe = arch == "qwen35moe"

        def key(name, default=None, required=False):
            full = arch + "." + name
            if full not in gguf.metadata:
                if required:
                    raise ValueError("missing metadata key %s" % full)
                return default
            return gguf.metadata[full]

        self.n_embd = int(key("embedding_length", required=True))
        self.n_block = int(key("block_count", required=True))
        self.n_nextn = int(key("nextn_predict_layers", 0))
        if not 0 <= self.n_nextn < self.n_block:
            raise ValueError("nextn_predict_layers %d with block_count %d" % (self.n_nextn, self.n_block))
        self.n_layer = self.n_block - self.n_nextn  # the trunk
        self.n_head = int(key("attention.head_count", required=True))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        if int(key("attention.value_length", self.head_dim)) != self.head_dim:
            raise ValueError("attention.value_length != key_length is not supported (llama.cpp asserts it)")
        self.n_ff = int(key("feed_forward_length", 0 if self.moe else None, required=not self.moe))
        if self.moe:
            self.n_expert = int(key("expert_count", required=True))
            self.n_expert_used = int(key("expert_used_count", required=True))
            if not 1 <= self.n_expert_used <= self.n_expert:
                raise ValueError("expert_used_count %d not in [1, %d]" % (self.n_expert_used, self.n_expert))
            self.n_ff_exp = int(key("expert_feed_forward_length", self.n_ff // self.n_expert_used))
            self.n_ff_shexp = int(key("expert_shared_feed_forward_length", self.n_ff))
            if self.n_ff_exp <= 0 or self.n_ff_shexp <= 0:
                raise ValueError("expert widths %d / %d (keys or feed_forward_length missing)"
                                 % (self.n_ff_exp, self.n_ff_shexp))
        self.rms_eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        sections = key("rope.dimension_sections", None)
        if sections is None:
            raise ValueError("missing %s.rope.dimension_sections (llama.cpp requires it)" % arch)
        if not isinstance(sections, list):
            sections = [sections] * 4
        self.rope_sections = [int(s) for s in (list(sections) + [0, 0, 0, 0])[:4]]
        for k in ("rope.scaling.type", "rope.scaling.factor", "rope.scale_linear"):
            v = key(k, None)
            if v not in (None, "none", 1.0):
                raise ValueError("RoPE scaling (%s = %r) is not supported" % (arch + "." + k, v))

        self.conv_kernel = int(key("ssm.conv_kernel", required=True))
        self.d_state = int(key("ssm.state_size", required=True))
        self.n_k_heads = int(key("ssm.group_count", required=True))
        self.n_v_heads = int(key("ssm.time_step_rank", required=True))
        d_inner = int(key("ssm.inner_size", required=True))
        if d_inner % self.n_v_heads or d_inner // self.n_v_heads != self.d_state:
            raise ValueError("ssm.inner_size %d / time_step_rank %d != state_size %d (llama.cpp asserts S_k == S_v)"
                             % (d_inner, self.n_v_heads, self.d_state))
        if self.n_v_heads % self.n_k_heads:
            raise ValueError("time_step_rank %d is not a multiple of group_count %d"
                             % (self.n_v_heads, self.n_k_heads))
        self.key_dim = self.n_k_heads * self.d_state
        self.value_dim = self.n_v_heads * self.d_state
        self.conv_dim = 2 * self.key_dim + self.value_dim

        recurrent = key("attention.recurrent_layers", None)
        if recurrent is None:
            interval = int(key("full_attention_interval", 4))
            self.is_recurrent = [(i + 1) % interval != 0 for i in range(self.n_layer)]
        else:
            if not isinstance(recurrent, list):
                recurrent = [recurrent] * self.n_block
            if len(recurrent) != self.n_block:
                raise ValueError("attention.recurrent_layers has %d entries, block_count is %d"
                                 % (len(recurrent), self.n_block))
            self.is_recurrent = [bool(r) for r in recurrent[:self.n_layer]]

        if self.n_head % self.n_head_kv:
            raise ValueError("head_count %d is not a multiple of head_count_kv %d" % (self.n_head, self.n_head_kv))
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            raise ValueError("rope.dimension_count %d invalid for head_dim %d" % (self.n_rot, self.head_dim))
        if sum(self.rope_sections) <= 0:
            raise ValueError("rope.dimension_sections %s sum to 0" % self.rope_sections)

    def rope_components(self):
        """(n_rot/2,) which position component (0 t, 1 h, 2 w, 3 e) pair i turns by:
        ggml_mrope_cache_init's interleaved (IMROPE) rule on sector i % sum(sections)."""
        s = self.rope_sections
        out = []
        for i in range(self.n_rot // 2):
            sector = i % sum(s)
            if sector % 3 == 1 and sector < 3 * s[1]:
                out.append(1)
            elif sector % 3 == 2 and sector < 3 * s[2]:
                out.append(2)
            elif sector % 3 == 0 and sector < 3 * s[0]:
                out.append(0)
            else:
                out.append(3)
        return np.array(out)


def rope_angles(cfg, positions):
    """(T, n_rot/2) angles for text positions: components (p, p, p, 0), pair i of
    component c turning by pos_c * base^(-2i/n_rot)."""
    pos = np.asarray(positions, dtype=np.float64)
    i = np.arange(cfg.n_rot // 2, dtype=np.float64)
    inv_freq = cfg.rope_base ** (-2.0 * i / cfg.n_rot)
    text_pos = np.where(cfg.rope_components() == 3, 0.0, 1.0)  # the 4th component is 0 for text
    return pos[:, None] * (text_pos * inv_freq)[None, :]


def rope_angles_mrope(cfg, positions3):
    """(T, n_rot/2) angles for M-RoPE positions (T, 3) = (t, h, w) per token (an image's
    tokens: (t, t + row, t + column)); the fourth component is 0, as for text."""
    pos = np.asarray(positions3, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise ValueError("M-RoPE positions of shape %s, want (T, 3)" % (pos.shape,))
    pos4 = np.concatenate([pos, np.zeros((pos.shape[0], 1))], axis=1)
    i = np.arange(cfg.n_rot // 2, dtype=np.float64)
    inv_freq = cfg.rope_base ** (-2.0 * i / cfg.n_rot)
    return pos4[:, cfg.rope_components()] * inv_freq[None, :]


def attention_with_past(q, k, v, n_head_kv, scale):
    """q: (T, H, hd) at positions P..P+T-1, k/v: (P+T, KV, hd) at 0..P+T-1 -> (T, H, hd).
    Query t sees keys 0..P+t. Written separately from llama_numpy.causal_attention (the
    stateless pass uses that one), so the chunked self-test compares two implementations."""
    T, H, hd = q.shape
    P = k.shape[0] - T
    out = np.empty_like(q)
    for h in range(H):
        kh = k[:, h // (H // n_head_kv), :]
        vh = v[:, h // (H // n_head_kv), :]
        for t in range(T):
            s = kh[:P + t + 1] @ q[t, h] * scale
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ vh[:P + t + 1]
    return out


def causal_conv(mixed, w, tail):
    """mixed: (T, C), w: (C, K), tail: (K-1, C) the inputs before position 0 ->
    (T, C) with out[t, c] = sum_r w[c, r] * x[t - (K-1) + r, c], x = tail then mixed."""
    K = w.shape[1]
    x = np.concatenate([tail, mixed], axis=0)                   # (K-1+T, C)
    T = mixed.shape[0]
    out = np.zeros_like(mixed)
    for r in range(K):
        out += x[r:r + T] * w[:, r][None, :]
    return out


def delta_rule(q, k, v, decay, beta, S):
    """Gated delta rule, token by token. q/k: (T, Hv, d) (already mapped to value heads),
    v: (T, Hv, d), decay/beta: (T, Hv), S: (Hv, d, d) state [head, key i, value j],
    updated in place. Returns o (T, Hv, d), scaled by 1/sqrt(d)."""
    T, Hv, d = v.shape
    o = np.empty_like(v)
    for t in range(T):
        S *= decay[t][:, None, None]
        r = np.einsum("hij,hi->hj", S, k[t])
        delta = beta[t][:, None] * (v[t] - r)
        S += k[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hij,hi->hj", S, q[t]) / np.sqrt(d)
    return o


def delta_rule_parallel(q, k, v, decay, beta):
    """The same recurrence from a zero state in closed form, for the self-test: with
    G(s, t) = prod_{r=s+1..t} decay_r, the value written at s is
    u_s = beta_s (v_s - sum_{s'<s} G(s', s) (k_s . k_s') u_s') (a unit lower-triangular
    solve) and o_t = sum_{s<=t} G(s, t) (q_t . k_s) u_s / sqrt(d)."""
    T, Hv, d = v.shape
    o = np.empty_like(v)
    for h in range(Hv):
        cum = np.cumsum(np.log(decay[:, h]))
        G = np.exp(cum[None, :] - cum[:, None])                  # G[s, t]
        causal = np.tril(np.ones((T, T)), -1)                    # [t, s]: s < t
        A = (k[:, h] @ k[:, h].T) * G.T * causal                 # A[t, s] = G(s,t) k_t.k_s
        M = np.eye(T) + beta[:, h][:, None] * A
        U = np.linalg.solve(M, beta[:, h][:, None] * v[:, h])
        B = (q[:, h] @ k[:, h].T) * G.T * np.tril(np.ones((T, T)))
        o[:, h] = B @ U / np.sqrt(d)
    return o


class Qwen35State:
    """What a server keeps between calls: per Gated DeltaNet layer the last K-1 conv
    inputs and the (Hv, d, d) state; per attention layer the roped K and V."""

    def __init__(self, cfg):
        self.n_past = 0
        self.conv_tail = {}
        self.ssm = {}
        self.k = {}
        self.v = {}
        for il in range(cfg.n_layer):
            if cfg.is_recurrent[il]:
                self.conv_tail[il] = np.zeros((cfg.conv_kernel - 1, cfg.conv_dim))
                self.ssm[il] = np.zeros((cfg.n_v_heads, cfg.d_state, cfg.d_state))
            else:
                self.k[il] = np.zeros((0, cfg.n_head_kv, cfg.head_dim))
                self.v[il] = np.zeros((0, cfg.n_head_kv, cfg.head_dim))


class Qwen35Model:
    def __init__(self, gguf):
        self.cfg = cfg = Qwen35Config(gguf)
        # (T,) smallest routing margin over the layers of the last hidden_states call
        # (llama_numpy.moe_routed); None for qwen35 (numpy_reference_test's interface).
        self.route_gap = None

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
        self.token_embd = weight("token_embd.weight")
        self.n_vocab = self.token_embd.shape[0]
        if self.token_embd.shape != (self.n_vocab, E):
            raise ValueError("token_embd.weight shape %s" % (self.token_embd.shape,))
        self.output_norm = weight("output_norm.weight", (E,))
        self.output = weight("output.weight", (self.n_vocab, E), optional=True)
        self.tied_output = self.output is None
        if self.tied_output:
            self.output = self.token_embd

        Hv, d = cfg.n_v_heads, cfg.d_state
        self.layers = []
        for il in range(cfg.n_layer):
            p = "blk.%d." % il
            L = {
                "attn_norm": weight(p + "attn_norm.weight", (E,)),
                "post_norm": weight(p + "post_attention_norm.weight", (E,)),
            }
            if cfg.moe:
                N, FE, FS = cfg.n_expert, cfg.n_ff_exp, cfg.n_ff_shexp
                L["experts"] = {
                    "router": weight(p + "ffn_gate_inp.weight", (N, E)),
                    "gate": weight(p + "ffn_gate_exps.weight", (N, FE, E)),
                    "up": weight(p + "ffn_up_exps.weight", (N, FE, E)),
                    "down": weight(p + "ffn_down_exps.weight", (N, E, FE)),
                }
                # llama.cpp reads ffn_gate_inp_shexp as {n_embd}: one row of E.
                L["shexp_gate_inp"] = weight(p + "ffn_gate_inp_shexp.weight", (E,)).reshape(1, E)
                L["shexp_gate"] = weight(p + "ffn_gate_shexp.weight", (FS, E))
                L["shexp_up"] = weight(p + "ffn_up_shexp.weight", (FS, E))
                L["shexp_down"] = weight(p + "ffn_down_shexp.weight", (E, FS))
            else:
                L["w_gate"] = weight(p + "ffn_gate.weight", (F, E))
                L["w_up"] = weight(p + "ffn_up.weight", (F, E))
                L["w_down"] = weight(p + "ffn_down.weight", (E, F))
            if cfg.is_recurrent[il]:
                L.update({
                    "qkv": weight(p + "attn_qkv.weight", (cfg.conv_dim, E)),
                    "z": weight(p + "attn_gate.weight", (cfg.value_dim, E)),
                    "conv": weight(p + "ssm_conv1d.weight", (cfg.conv_dim, cfg.conv_kernel)),
                    "dt_bias": weight(p + "ssm_dt.bias", (Hv,)),
                    "a": weight(p + "ssm_a", (Hv,)),
                    "beta": weight(p + "ssm_beta.weight", (Hv, E)),
                    "alpha": weight(p + "ssm_alpha.weight", (Hv, E)),
                    "ssm_norm": weight(p + "ssm_norm.weight", (d,)),
                    "ssm_out": weight(p + "ssm_out.weight", (E, cfg.value_dim)),
                })
            else:
                wq = weight(p + "attn_q.weight", (2 * H * D, E)).reshape(H, 2, D, E)
                L.update({
                    "wq": wq[:, 0].reshape(H * D, E),      # per head: query rows, then gate rows
                    "wg": wq[:, 1].reshape(H * D, E),
                    "wk": weight(p + "attn_k.weight", (KV * D, E)),
                    "wv": weight(p + "attn_v.weight", (KV * D, E)),
                    "q_norm": weight(p + "attn_q_norm.weight", (D,)),
                    "k_norm": weight(p + "attn_k_norm.weight", (D,)),
                    "wo": weight(p + "attn_output.weight", (E, H * D)),
                })
            self.layers.append(L)

    def mm(self, x, w):
        """x (T, n) @ w.T for w (m, n): every weight product goes through here (a numerics
        study can substitute activation rounding)."""
        return x @ w.T

    def new_state(self):
        return Qwen35State(self.cfg)

    def forward(self, tokens, state=None):
        """tokens -> logits (n_tokens, n_vocab) float64; continues `state` when given."""
        return self.mm(self.hidden_states(tokens, state), self.output)

    def hidden_states(self, tokens, state=None, embd=None, mrope=None):
        """embd: (T, dim) rows fed instead of the tokens marked -1 (an image's, used as they
        are); mrope: (T, 3) M-RoPE positions instead of the text positions (p, p, p)."""
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("need a non-empty 1-D token list")
        embedded = tokens == -1
        if embedded.any() and embd is None:
            raise ValueError("tokens marked -1 need embd rows")
        if tokens[~embedded].size and (tokens[~embedded].min() < 0 or tokens[~embedded].max() >= self.n_vocab):
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        n_past = state.n_past if state is not None else 0
        if mrope is None:
            angles = rope_angles(cfg, np.arange(n_past, n_past + tokens.size))
        else:
            angles = rope_angles_mrope(cfg, mrope)
        x = self.token_embd[np.where(embedded, 0, tokens)]
        if embedded.any():
            x = x.copy()
            x[embedded] = np.asarray(embd, dtype=np.float64)[embedded]
        self.route_gap = None
        for il, L in enumerate(self.layers):
            xn = rms_norm(x, L["attn_norm"], cfg.rms_eps)
            if cfg.is_recurrent[il]:
                h = x + self.gated_delta_net(L, xn, state, il)
            else:
                h = x + self.attention(L, xn, angles, state, il)
            hn = rms_norm(h, L["post_norm"], cfg.rms_eps)
            x = h + (self.moe_ffn(L, hn) if cfg.moe else
                     self.mm(silu(self.mm(hn, L["w_gate"])) * self.mm(hn, L["w_up"]), L["w_down"]))
        if state is not None:
            state.n_past += tokens.size
        return rms_norm(x, self.output_norm, cfg.rms_eps)

    def moe_ffn(self, L, hn):
        """qwen35moe's FFN on hn (T, E): the renormalised top-k routed experts plus the
        shared expert times sigmoid(ffn_gate_inp_shexp . hn)."""
        routed, gap = llama_numpy.moe_routed(L["experts"], hn, self.cfg.n_expert_used, True, mm=self.mm)
        if gap is not None:
            self.route_gap = gap if self.route_gap is None else np.minimum(self.route_gap, gap)
        shared = self.mm(silu(self.mm(hn, L["shexp_gate"])) * self.mm(hn, L["shexp_up"]), L["shexp_down"])
        return routed + sigmoid(self.mm(hn, L["shexp_gate_inp"])) * shared

    def attention(self, L, xn, angles, state, il):
        cfg = self.cfg
        T, H, KV, D = xn.shape[0], cfg.n_head, cfg.n_head_kv, cfg.head_dim
        q = rms_norm(self.mm(xn, L["wq"]).reshape(T, H, D), L["q_norm"], cfg.rms_eps)
        gate = self.mm(xn, L["wg"])                                   # (T, H*D)
        k = rms_norm(self.mm(xn, L["wk"]).reshape(T, KV, D), L["k_norm"], cfg.rms_eps)
        v = self.mm(xn, L["wv"]).reshape(T, KV, D)
        q = apply_rope(q, angles, cfg.n_rot, neox=True)
        k = apply_rope(k, angles, cfg.n_rot, neox=True)
        scale = 1.0 / np.sqrt(D)
        if state is None:
            a = causal_attention(q, k, v, KV, scale=scale)
        else:
            state.k[il] = np.concatenate([state.k[il], k])
            state.v[il] = np.concatenate([state.v[il], v])
            a = attention_with_past(q, state.k[il], state.v[il], KV, scale)
        return self.mm(a.reshape(T, H * D) * sigmoid(gate), L["wo"])

    def gated_delta_net(self, L, xn, state, il):
        cfg = self.cfg
        T, Hk, Hv, d, K = xn.shape[0], cfg.n_k_heads, cfg.n_v_heads, cfg.d_state, cfg.conv_kernel
        mixed = self.mm(xn, L["qkv"])                                 # (T, conv_dim)
        z = self.mm(xn, L["z"]).reshape(T, Hv, d)
        beta = sigmoid(self.mm(xn, L["beta"]))                        # (T, Hv)
        decay = np.exp(softplus(self.mm(xn, L["alpha"]) + L["dt_bias"]) * L["a"])
        tail = state.conv_tail[il] if state is not None else np.zeros((K - 1, cfg.conv_dim))
        conv = silu(causal_conv(mixed, L["conv"], tail))
        if state is not None:
            state.conv_tail[il] = np.concatenate([tail, mixed])[-(K - 1):] if K > 1 else tail
        q = l2_norm(conv[:, :cfg.key_dim].reshape(T, Hk, d), cfg.rms_eps)
        k = l2_norm(conv[:, cfg.key_dim:2 * cfg.key_dim].reshape(T, Hk, d), cfg.rms_eps)
        v = conv[:, 2 * cfg.key_dim:].reshape(T, Hv, d)
        k_of_v = np.arange(Hv) % Hk                                   # ggml_repeat tiling
        S = state.ssm[il] if state is not None else np.zeros((Hv, d, d))
        o = delta_rule(q[:, k_of_v], k[:, k_of_v], v, decay, beta, S)
        o = rms_norm(o, L["ssm_norm"], cfg.rms_eps) * silu(z)
        return self.mm(o.reshape(T, Hv * d), L["ssm_out"])

    def greedy(self, prompt, n_new):
        """The n_new greedy ids after prompt, one token per call through a state."""
        state = self.new_state()
        logits = self.forward(list(prompt), state)
        out = []
        for _ in range(n_new):
            out.append(int(np.argmax(logits[-1])))
            logits = self.forward([out[-1]], state)
        return out


def self_test_model(model, tokens):
    """Stateless forward == the same tokens in chunks of 1, 1, n-m-2, m-1 and 1 tokens
    through a state (n >= 8): the carried conv tails (also across 1-token chunks, shorter
    than the K-1 rows a tail holds) and DeltaNet states continue the recurrence exactly,
    and the cached attention (attention_with_past) agrees with
    llama_numpy.causal_attention. Returns a list of problems (empty: consistent)."""
    ref = model.forward(tokens)
    n = len(tokens)
    m = n // 3
    st = model.new_state()
    chunked = np.concatenate([model.forward(tokens[a:b], st)
                              for a, b in ((0, 1), (1, 2), (2, n - m), (n - m, n - 1), (n - 1, n))])
    # Both float64 with the same operations in another grouping: ~1e-15 apart.
    err = np.abs(chunked - ref).max() / np.abs(ref).max()
    return [] if err < 1e-10 else ["chunked forward differs from one pass by %.3g relative" % err]


def self_test_math():
    """The building blocks against second implementations (problems, empty: all hold):
    the token-by-token delta rule == its closed form (delta_rule_parallel) on random
    inputs; the delta rule as associative memory (decay 1, beta 1, orthonormal keys: the
    output for query k_j is v_j / sqrt(d), i.e. the state is read by key index); the
    conv == numpy.convolve per channel; attention_with_past from position 0 ==
    llama_numpy.causal_attention with GQA."""
    problems = []
    rng = np.random.default_rng(0)
    T, Hv, d = 12, 4, 8
    q = l2_norm(rng.standard_normal((T, Hv, d)), 1e-6)
    k = l2_norm(rng.standard_normal((T, Hv, d)), 1e-6)
    v = rng.standard_normal((T, Hv, d))
    decay = np.exp(-rng.uniform(0.01, 2.0, (T, Hv)))
    beta = rng.uniform(0.05, 1.0, (T, Hv))
    seq = delta_rule(q, k, v, decay, beta, np.zeros((Hv, d, d)))
    par = delta_rule_parallel(q, k, v, decay, beta)
    err = np.abs(seq - par).max() / np.abs(par).max()
    if not err < 1e-10:
        problems.append("delta rule differs from its closed form by %.3g relative" % err)

    basis = np.linalg.qr(rng.standard_normal((d, d)))[0].T        # rows orthonormal
    kk = basis[:, None, :].copy()                                 # (d tokens, 1 head, d)
    vv = rng.standard_normal((d, 1, d))
    S = np.zeros((1, d, d))
    delta_rule(kk, kk, vv, np.ones((d, 1)), np.ones((d, 1)), S)
    recall = delta_rule(kk, kk, np.zeros((d, 1, d)), np.ones((d, 1)), np.zeros((d, 1)), S)  # beta 0: read only
    if not np.allclose(recall[:, 0] * np.sqrt(d), vv[:, 0], rtol=0, atol=1e-12):
        problems.append("delta rule does not recall v_j for key k_j")

    x = rng.standard_normal((9, 5))
    w = rng.standard_normal((5, 4))
    tail = rng.standard_normal((3, 5))
    got = causal_conv(x, w, tail)
    full = np.concatenate([tail, x])
    want = np.stack([np.convolve(full[:, c], w[c, ::-1], mode="valid") for c in range(5)], axis=1)
    if not np.allclose(got, want, rtol=0, atol=1e-12):
        problems.append("causal_conv != numpy.convolve")

    qa = rng.standard_normal((10, 4, 16))
    ka = rng.standard_normal((10, 2, 16))
    va = rng.standard_normal((10, 2, 16))
    if not np.allclose(attention_with_past(qa, ka, va, 2, 0.25), causal_attention(qa, ka, va, 2, scale=0.25),
                       rtol=0, atol=1e-12):
        problems.append("attention_with_past != llama_numpy.causal_attention")
    return problems


# ---------------------------------------------------------------------------
# Self-test files, written with gguf_numpy.write_gguf (never compared with pagoda)
# ---------------------------------------------------------------------------
def _write(path, arch, keys, tensors, extra_meta=()):
    """keys: {name: value} under `arch.` (int -> u32, float -> f32, list -> array);
    tensors: {name: float array in numpy shape}, written F32 with GGUF dims reversed."""
    meta = [("general.architecture", gguf_numpy.GGUF_STRING, arch)] + list(extra_meta)
    for name, value in keys.items():
        if isinstance(value, list):
            elem = gguf_numpy.GGUF_BOOL if isinstance(value[0], bool) else gguf_numpy.GGUF_INT32
            meta.append((arch + "." + name, gguf_numpy.GGUF_ARRAY, (elem, value)))
        elif isinstance(value, float):
            meta.append((arch + "." + name, gguf_numpy.GGUF_FLOAT32, value))
        else:
            meta.append((arch + "." + name, gguf_numpy.GGUF_UINT32, value))
    gguf_numpy.write_gguf(path, meta, [(n, list(reversed(a.shape)), gguf_numpy.F32, a.astype("<f4").tobytes())
                                       for n, a in tensors.items()])


def _matrix(rng, rows, cols):
    return rng.standard_normal((rows, cols)) / np.sqrt(cols)


def _norm_weight(rng, n):
    return 1.0 + 0.2 * rng.standard_normal(n)


def write_odd_qwen35(path, seed=1):
    """A qwen35 file with everything synth does not vary: attention.recurrent_layers
    (an array that disagrees with full_attention_interval, which it must override), an
    MTP block, tied output, head_dim != dim / heads, n_rot < head_dim with sections
    [2, 1, 1, 0], Hv = 3 Hk, a 3-tap conv, and slow decays (0.5..0.97 per token) so the
    state carries far between chunks. Returns the trunk's is_recurrent."""
    keys, t, recurrent = _odd_qwen35(seed)
    _write(path, "qwen35", keys, t)
    return recurrent[:5]


def write_odd_qwen35moe_pair(path_moe, path_dense, half, seed=1):
    """write_odd_qwen35's file (path_dense) and a qwen35moe file (path_moe) with the same
    trunk whose FFN gives exactly the dense one's, through one half of the MoE FFN while
    the other half adds zero. half "routed": 5 experts, 2 used, each a copy of the dense
    FFN (so any renormalised top-k mix is the dense FFN; weights that do not sum to 1
    would scale it), router random, shared expert's down zero. half "shared": the routed
    experts' down zero, ffn_gate_inp_shexp zero (sigmoid 1/2) and the shared expert the
    dense FFN with its down doubled. No feed_forward_length (the widths come from the
    expert keys), the routed and shared widths being the dense one."""
    keys, t, _ = _odd_qwen35(seed)
    _write(path_dense, "qwen35", keys, t)
    rng = np.random.default_rng(seed + 100)
    N, k = 5, 2
    F = keys.pop("feed_forward_length")
    keys.update({"expert_count": N, "expert_used_count": k, "expert_feed_forward_length": F,
                 "expert_shared_feed_forward_length": F})
    for il in range(keys["block_count"]):
        p = "blk.%d." % il
        gate, up, down = (t.pop(p + "ffn_%s.weight" % n) for n in ("gate", "up", "down"))
        E = down.shape[0]
        t[p + "ffn_gate_inp.weight"] = _matrix(rng, N, E) * 4.0     # peaked routing
        t[p + "ffn_gate_exps.weight"] = np.stack([gate] * N)
        t[p + "ffn_up_exps.weight"] = np.stack([up] * N)
        t[p + "ffn_down_exps.weight"] = np.stack([down if half == "routed" else 0.0 * down] * N)
        t[p + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(E) / np.sqrt(E) if half == "routed"
                                              else np.zeros(E))
        t[p + "ffn_gate_shexp.weight"] = gate
        t[p + "ffn_up_shexp.weight"] = up
        t[p + "ffn_down_shexp.weight"] = 0.0 * down if half == "routed" else 2.0 * down
    _write(path_moe, "qwen35moe", keys, t)


def _odd_qwen35(seed):
    """write_odd_qwen35's keys, tensors and every block's is_recurrent."""
    rng = np.random.default_rng(seed)
    E, H, KV, D, F, V = 48, 3, 1, 20, 40, 50
    K, d, Hk, Hv = 3, 8, 2, 6
    recurrent = [True, False, True, True, False, True]        # block 5 is the MTP block
    conv_dim = 2 * Hk * d + Hv * d
    keys = {"embedding_length": E, "block_count": 6, "nextn_predict_layers": 1, "feed_forward_length": F,
            "attention.head_count": H, "attention.head_count_kv": KV, "attention.key_length": D,
            "attention.value_length": D, "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1e6,
            "rope.dimension_count": 8, "rope.dimension_sections": [2, 1, 1, 0], "ssm.conv_kernel": K,
            "ssm.state_size": d, "ssm.group_count": Hk, "ssm.time_step_rank": Hv, "ssm.inner_size": Hv * d,
            "full_attention_interval": 4, "attention.recurrent_layers": recurrent, "context_length": 256}
    t = {"token_embd.weight": rng.standard_normal((V, E)), "output_norm.weight": _norm_weight(rng, E)}
    for il in range(6):
        p = "blk.%d." % il
        t[p + "attn_norm.weight"] = _norm_weight(rng, E)
        t[p + "post_attention_norm.weight"] = _norm_weight(rng, E)
        t[p + "ffn_gate.weight"] = _matrix(rng, F, E)
        t[p + "ffn_up.weight"] = _matrix(rng, F, E)
        t[p + "ffn_down.weight"] = _matrix(rng, E, F)
        if recurrent[il] and il < 5:
            t[p + "attn_qkv.weight"] = _matrix(rng, conv_dim, E)
            t[p + "attn_gate.weight"] = _matrix(rng, Hv * d, E)
            t[p + "ssm_conv1d.weight"] = rng.standard_normal((conv_dim, K)) / np.sqrt(K)
            t[p + "ssm_dt.bias"] = 0.3 * rng.standard_normal(Hv)
            t[p + "ssm_a"] = -np.exp(rng.uniform(-3.0, 0.0, Hv))
            t[p + "ssm_beta.weight"] = _matrix(rng, Hv, E)
            t[p + "ssm_alpha.weight"] = _matrix(rng, Hv, E)
            t[p + "ssm_norm.weight"] = _norm_weight(rng, d)
            t[p + "ssm_out.weight"] = _matrix(rng, E, Hv * d)
        else:
            t[p + "attn_q.weight"] = _matrix(rng, 2 * H * D, E)
            t[p + "attn_k.weight"] = _matrix(rng, KV * D, E)
            t[p + "attn_v.weight"] = _matrix(rng, KV * D, E)
            t[p + "attn_q_norm.weight"] = _norm_weight(rng, D)
            t[p + "attn_k_norm.weight"] = _norm_weight(rng, D)
            t[p + "attn_output.weight"] = _matrix(rng, E, H * D)
        if il == 5:
            t[p + "nextn.eh_proj.weight"] = _matrix(rng, E, 2 * E)
            t[p + "nextn.enorm.weight"] = _norm_weight(rng, E)
            t[p + "nextn.hnorm.weight"] = _norm_weight(rng, E)
    return keys, t, recurrent


def write_attention_only_pair(path35, path3, seed=2):
    """The same weights as an all-full-attention qwen35 (full_attention_interval 1) and
    as a qwen3 (llama_numpy's reference): the gate rows of attn_q are zero, so
    sigmoid(gate) = 1/2 everywhere, and the qwen35 attn_output is twice qwen3's; qwen35's
    post_attention_norm is qwen3's ffn_norm. head_dim 12 != 32 / 4, n_rot 8 < head_dim,
    GQA 4:2, tied output. The two references must then agree to float64 rounding."""
    rng = np.random.default_rng(seed)
    E, H, KV, D, F, V, L = 32, 4, 2, 12, 48, 50, 2
    common = {"embedding_length": E, "block_count": L, "feed_forward_length": F, "attention.head_count": H,
              "attention.head_count_kv": KV, "attention.key_length": D, "attention.value_length": D,
              "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1e6, "rope.dimension_count": 8,
              "context_length": 256}
    t3 = {"token_embd.weight": rng.standard_normal((V, E)), "output_norm.weight": _norm_weight(rng, E)}
    t35 = dict(t3)
    for il in range(L):
        p = "blk.%d." % il
        w = {"attn_norm.weight": _norm_weight(rng, E), "ffn_gate.weight": _matrix(rng, F, E),
             "ffn_up.weight": _matrix(rng, F, E), "ffn_down.weight": _matrix(rng, E, F),
             "attn_k.weight": _matrix(rng, KV * D, E), "attn_v.weight": _matrix(rng, KV * D, E),
             "attn_q_norm.weight": _norm_weight(rng, D), "attn_k_norm.weight": _norm_weight(rng, D)}
        wq = _matrix(rng, H * D, E)
        wo = _matrix(rng, E, H * D)
        ffn_norm = _norm_weight(rng, E)
        for n, a in w.items():
            t3[p + n] = t35[p + n] = a
        t3[p + "attn_q.weight"] = wq
        t3[p + "attn_output.weight"] = wo
        t3[p + "ffn_norm.weight"] = ffn_norm
        q_then_gate = np.concatenate([wq.reshape(H, D, E), np.zeros((H, D, E))], axis=1)   # per head
        t35[p + "attn_q.weight"] = q_then_gate.reshape(2 * H * D, E)
        t35[p + "attn_output.weight"] = 2.0 * wo
        t35[p + "post_attention_norm.weight"] = ffn_norm
    _write(path3, "qwen3", common, t3)
    k35 = dict(common, **{"rope.dimension_sections": [2, 1, 1, 0], "full_attention_interval": 1,
                          "ssm.conv_kernel": 4, "ssm.state_size": 8, "ssm.group_count": 1,
                          "ssm.time_step_rank": 1, "ssm.inner_size": 8})
    _write(path35, "qwen35", k35, t35)


def self_test(workdir):
    """Every check on the reference itself (see self_test_math, self_test_model,
    write_odd_qwen35, write_attention_only_pair), on files it writes into workdir.
    Returns a list of problems; empty when the reference is consistent."""
    import os
    problems = self_test_math()
    tokens = [1, 7, 49, 0, 23, 23, 5, 31, 44, 2, 17, 38, 9, 12, 30, 3, 26, 41, 8, 11]
    odd = os.path.join(workdir, "qwen35-selftest-odd.gguf")
    want_recurrent = write_odd_qwen35(odd)
    m = Qwen35Model(gguf_numpy.GgufFile(odd))
    if m.cfg.is_recurrent != want_recurrent:
        problems.append("recurrent_layers read as %s, want %s" % (m.cfg.is_recurrent, want_recurrent))
    if not m.tied_output or len(m.layers) != 5:
        problems.append("odd file: tied %s, %d trunk layers (want tied, 5)" % (m.tied_output, len(m.layers)))
    if list(m.cfg.rope_components()) != [0, 1, 2, 0]:
        problems.append("IMROPE components for sections [2, 1, 1, 0]: %s, want [0, 1, 2, 0]"
                        % list(m.cfg.rope_components()))
    problems += ["odd file: " + p for p in self_test_model(m, tokens)]

    p35 = os.path.join(workdir, "qwen35-selftest-attn.gguf")
    p3 = os.path.join(workdir, "qwen35-selftest-attn-as-qwen3.gguf")
    write_attention_only_pair(p35, p3)
    a = Qwen35Model(gguf_numpy.GgufFile(p35)).forward(tokens[:16])
    b = llama_numpy.LlamaModel(gguf_numpy.GgufFile(p3)).forward(tokens[:16])
    err = np.abs(a - b).max() / np.abs(b).max()
    if not err < 1e-10:
        problems.append("all-attention qwen35 differs from the same weights as qwen3 (llama_numpy) by %.3g" % err)

    for half in ("routed", "shared"):
        pm = os.path.join(workdir, "qwen35moe-selftest-%s.gguf" % half)
        pd = os.path.join(workdir, "qwen35moe-selftest-%s-dense.gguf" % half)
        write_odd_qwen35moe_pair(pm, pd, half)
        moe = Qwen35Model(gguf_numpy.GgufFile(pm))
        a = moe.forward(tokens)
        b = Qwen35Model(gguf_numpy.GgufFile(pd)).forward(tokens)
        err = np.abs(a - b).max() / np.abs(b).max()
        if not err < 1e-10:
            problems.append("qwen35moe whose %s experts are the dense FFN differs from it by %.3g" % (half, err))
        problems += ["qwen35moe (%s) file: %s" % (half, p) for p in self_test_model(moe, tokens)]
    return problems


if __name__ == "__main__":
    import sys
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        found = self_test(tmp)
    for p in found:
        print("FAIL " + p)
    print("qwen35_numpy self-test: " + ("OK" if not found else "%d problems" % len(found)))
    sys.exit(1 if found else 0)
