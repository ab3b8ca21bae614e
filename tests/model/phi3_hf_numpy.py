"""Phi-3 as transformers defines it (modeling_phi3.py, rope "longrope"), in
plain numpy (float64), read from a Hugging Face directory: the reference for
pagoda's HF-directory path (tests/model/numpy_reference_test.py). It shares
no code with pagoda and none with llama_numpy.py, which reads GGUF: this one
reads config.json and safetensors and follows HF's names and conventions.

- write_phi3_dir(dir, ...) writes a random-weight Phi-3 directory (config.json
  with LongRoPE short/long factors, original_max_position_embeddings,
  partial_rotary_factor, tied embeddings; model.safetensors in F32).
- Phi3Reference(dir).forward(tokens, use_long) -> logits (n_tokens, n_vocab).
  use_long picks the long factors (transformers picks them when the sequence
  is longer than original_max_position_embeddings; llama.cpp and pagoda when
  the context they run with is), the only place the two rules differ.

HF conventions, each a place where an implementation can go wrong:
- qkv_proj rows: Q (n_heads*head_dim), K (n_kv*head_dim), V (n_kv*head_dim).
- gate_up_proj rows: gate (ffn), then up (ffn); out = down(up * silu(gate)).
- RoPE on the first rotary_dim = int(head_dim * partial_rotary_factor) dims of
  each head, rotate_half (pairs i, i + rotary_dim/2); inv_freq[i] =
  1 / (ext[i] * base^(2i/rotary_dim)); cos and sin multiplied by
  attention_scaling = sqrt(1 + ln(s) / ln(orig)), s = max_pos / orig (1 if s <= 1).
- Scores scaled by 1/sqrt(head_dim); RMSNorm x / sqrt(mean(x^2) + eps) * w.
"""

import json
import math
import os
import struct

import numpy as np


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 ndarray (row-major). F32 only."""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise ValueError("%s: dtype %s (reference reads F32 only)" % (name, e["dtype"]))
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[base + b:base + end], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return out


def write_phi3_dir(path, dim=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn=512, vocab=320, max_pos=128,
                   orig=32, partial_rotary=0.75, tied=True, seed=11):
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    head_dim = dim // n_heads
    rot = int(head_dim * partial_rotary)
    half = rot // 2
    x = np.arange(half) / max(1, half - 1)
    config = {
        "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "hidden_size": dim,
        "intermediate_size": ffn, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "max_position_embeddings": max_pos,
        "original_max_position_embeddings": orig, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "partial_rotary_factor": partial_rotary, "tie_word_embeddings": tied, "vocab_size": vocab,
        "sliding_window": 262144, "hidden_act": "silu",
        "rope_scaling": {"type": "longrope", "short_factor": list(1.0 + 0.2 * x),
                         "long_factor": list(1.0 + 5.0 * x * x)},
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)

    def mat(rows, cols, std):
        return (rng.uniform(-1, 1, size=(rows, cols)) * std * math.sqrt(3)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.uniform(-1, 1, size=n)).astype(np.float32)

    q_dim, kv_dim = n_heads * head_dim, n_kv_heads * head_dim
    t = {"model.embed_tokens.weight": mat(vocab, dim, 1.0)}
    for i in range(n_layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = norm(dim)
        t[p + "self_attn.qkv_proj.weight"] = mat(q_dim + 2 * kv_dim, dim, dim ** -0.5)
        t[p + "self_attn.o_proj.weight"] = mat(dim, q_dim, q_dim ** -0.5)
        t[p + "post_attention_layernorm.weight"] = norm(dim)
        t[p + "mlp.gate_up_proj.weight"] = mat(2 * ffn, dim, dim ** -0.5)
        t[p + "mlp.down_proj.weight"] = mat(dim, ffn, ffn ** -0.5)
    t["model.norm.weight"] = norm(dim)
    if not tied:
        t["lm_head.weight"] = mat(vocab, dim, dim ** -0.5)
    write_safetensors(os.path.join(path, "model.safetensors"), t)
    return config


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Phi3Reference:
    def __init__(self, path):
        with open(os.path.join(path, "config.json")) as f:
            self.c = c = json.load(f)
        self.w = read_safetensors(os.path.join(path, "model.safetensors"))
        self.n_heads, self.n_kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["hidden_size"] // self.n_heads
        self.rot = int(self.head_dim * c.get("partial_rotary_factor", 1.0))
        self.eps = c["rms_norm_eps"]
        self.out = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.n_vocab = self.out.shape[0]

    def cos_sin(self, n_tokens, use_long):
        c = self.c
        rs = c["rope_scaling"]
        ext = np.asarray(rs["long_factor"] if use_long else rs["short_factor"], dtype=np.float64)
        inv_freq = 1.0 / (ext * c["rope_theta"] ** (np.arange(0, self.rot, 2, dtype=np.float64) / self.rot))
        orig = c["original_max_position_embeddings"]
        s = c["max_position_embeddings"] / orig
        scaling = math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1.0 else 1.0
        freqs = np.arange(n_tokens, dtype=np.float64)[:, None] * inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)   # (T, rot)
        return np.cos(emb) * scaling, np.sin(emb) * scaling

    def forward(self, tokens, use_long):
        w, H, KV, D, R = self.w, self.n_heads, self.n_kv, self.head_dim, self.rot
        T = len(tokens)
        cos, sin = self.cos_sin(T, use_long)
        cos, sin = cos[:, None, :], sin[:, None, :]
        x = w["model.embed_tokens.weight"][np.asarray(tokens)]
        mask = np.triu(np.ones((T, T), dtype=bool), k=1)
        for i in range(self.c["num_hidden_layers"]):
            p = "model.layers.%d." % i
            h = _rms(x, w[p + "input_layernorm.weight"], self.eps)
            qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
            q = qkv[:, :H * D].reshape(T, H, D)
            k = qkv[:, H * D:H * D + KV * D].reshape(T, KV, D)
            v = qkv[:, H * D + KV * D:].reshape(T, KV, D)
            q = np.concatenate([q[..., :R] * cos + _rotate_half(q[..., :R]) * sin, q[..., R:]], axis=-1)
            k = np.concatenate([k[..., :R] * cos + _rotate_half(k[..., :R]) * sin, k[..., R:]], axis=-1)
            rep = H // KV
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
            scores = np.where(mask[None], -np.inf, scores)
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", probs, v).reshape(T, H * D)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            h = _rms(x, w[p + "post_attention_layernorm.weight"], self.eps)
            gate, up = np.split(h @ w[p + "mlp.gate_up_proj.weight"].T, 2, axis=-1)
            x = x + (up * (gate / (1.0 + np.exp(-gate)))) @ w[p + "mlp.down_proj.weight"].T
        return _rms(x, w["model.norm.weight"], self.eps) @ self.out.T
