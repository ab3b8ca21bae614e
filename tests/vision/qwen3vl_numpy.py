#!/usr/bin/python3
"""Qwen 3.5's vision encoder (the qwen3vl_merger projector, without deepstack layers) in plain
numpy (float64): the independent reference pagoda's Qwen image path is checked against.

Written from the model definition (llama.cpp b10587's tools/mtmd/models/qwen3vl.cpp and
qwen2vl.cpp graphs, clip.cpp's build_ffn and position inputs for QWEN3VL, ggml's bilinear
interpolate with aligned corners and its vision-mode multi-section RoPE), reading the mmproj
GGUF through tests/model/gguf_numpy.py; it shares no code with pagoda or llama.cpp, and it
works on the patches in raster order, reordering only at the merger (pagoda runs them in
block order throughout).

Contract:
- encode(mmproj_path, pixels_chw) -> float64 (n_tokens, text_dim), rows in merged-block
  order (block (by, bx) at by * nx / 2 + bx). pixels_chw is float32 (3, H, W), H and W
  multiples of 2 * patch_size, already normalized ((x / 255 - mean) / std). Raises
  ValueError for a file or input it does not support rather than computing something else.
- The forward pass (d = embedding_length, hd = d / heads, eps = layer_norm_epsilon,
  ln(v) = (v - mean) / sqrt(var + eps) * w + b):
    patches   one conv of stride p whose kernel is v.patch_embd.weight + v.patch_embd.weight.1
              (the two temporal slices of a still image), plus v.patch_embd.bias; patch
              (py, px) in raster order
    positions v.position_embd.weight, a side x side grid (side^2 rows, raster), resized to
              ny x nx bilinearly with corners aligned: source row i * (side - 1) / (ny - 1)
              (i * side / ny when a side is 1), the four neighbours clamped to the grid
    layer     h = ln1(x); q | k | v = h @ Wqkv.T + bqkv (attn_qkv: [3d, d], q first)
              q, k: NeoX pairs (j, j + hd/2) of each head turn by pos * 10000^(-4m / hd), where
                    for j < hd/4 pos = py, m = j, else pos = px, m = j - hd/4
              o = softmax(q k^T / sqrt(hd)) v over all patches (non-causal), heads joined,
                  @ Wout.T + bout; x = x + o
              h = ln2(x); x = x + act(h @ Wup.T + bup) @ Wdown.T + bdown
              act: gelu_tanh if clip.use_gelu, silu if clip.use_silu, else gelu_quick
    final     x = post_ln(x)
    merger    each 2 x 2 block's rows (dy, dx) = (0,0), (0,1), (1,0), (1,1) side by side [4d];
              y = gelu_tanh(row @ W0.T + b0) @ W2.T + b2 (mm.0, mm.2)

CLI:
  qwen3vl_numpy.py MMPROJ.gguf PIXELS.f32 H W OUT.f32   PIXELS raw little-endian float32
                        [3][H][W], OUT float32 [n_tokens][text_dim]
  qwen3vl_numpy.py --self-test   vectorised against brute force (loops) on a tiny random file
"""

import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import gguf_numpy  # noqa: E402
from llama_numpy import gelu_tanh, silu  # noqa: E402
from gemma4v_numpy import gelu_quick  # noqa: E402
from siglip_numpy import layer_norm  # noqa: E402

ROPE_THETA = 10000.0  # llama.cpp's ggml_rope_multi base for the Qwen-VL encoders (not in the file)


class Qwen3VL:
    """Hyperparameters and float64 weights of a qwen3vl_merger mmproj file."""

    def __init__(self, f):
        g = f.get
        proj = g("clip.projector_type") or g("clip.vision.projector_type")
        if g("general.architecture") != "clip" or proj != "qwen3vl_merger":
            raise ValueError("%s: not a qwen3vl_merger mmproj (architecture %r, projector %r)"
                             % (f.path, g("general.architecture"), proj))
        self.patch = int(g("clip.vision.patch_size"))
        self.dim = int(g("clip.vision.embedding_length"))
        self.n_layers = int(g("clip.vision.block_count"))
        self.n_heads = int(g("clip.vision.attention.head_count"))
        self.eps = float(g("clip.vision.attention.layer_norm_epsilon", 1e-6))
        if int(g("clip.vision.spatial_merge_size", 2)) != 2:
            raise ValueError("%s: spatial_merge_size other than 2" % f.path)
        act = "gelu_tanh" if g("clip.use_gelu", False) else "silu" if g("clip.use_silu", False) else "gelu_quick"
        self.act = {"gelu_tanh": gelu_tanh, "silu": silu, "gelu_quick": gelu_quick}[act]
        if self.dim % self.n_heads or (self.dim // self.n_heads) % 4:
            raise ValueError("%s: head width not a multiple of 4" % f.path)
        self.hd = self.dim // self.n_heads
        for i in range(self.n_layers):
            if f.has_tensor("v.deepstack.%d.fc1.weight" % i):
                raise ValueError("%s: deepstack layers are not modelled here" % f.path)

        def t(name):
            return f.tensor(name).astype(np.float64)

        d, p = self.dim, self.patch
        self.patch_w = t("v.patch_embd.weight") + t("v.patch_embd.weight.1")  # (d, 3, p, p)
        if self.patch_w.shape != (d, 3, p, p):
            raise ValueError("%s: patch embedding %s" % (f.path, self.patch_w.shape))
        self.patch_b = t("v.patch_embd.bias")
        pos = t("v.position_embd.weight")  # (side^2, d)
        self.side = int(round(math.sqrt(pos.shape[0])))
        if pos.ndim != 2 or pos.shape[1] != d or self.side * self.side != pos.shape[0]:
            raise ValueError("%s: position grid %s" % (f.path, pos.shape))
        self.pos = pos.reshape(self.side, self.side, d)
        self.layers = []
        for i in range(self.n_layers):
            b = "v.blk.%d." % i
            L = {}
            for k in ("ln1", "ln2", "attn_qkv", "attn_out", "ffn_up", "ffn_down"):
                L[k] = t(b + k + ".weight")
                L[k + "_b"] = t(b + k + ".bias")
            if L["attn_qkv"].shape != (3 * d, d):
                raise ValueError("%s: %sattn_qkv %s" % (f.path, b, L["attn_qkv"].shape))
            self.layers.append(L)
        self.post_w, self.post_b = t("v.post_ln.weight"), t("v.post_ln.bias")
        self.w0, self.b0 = t("mm.0.weight"), t("mm.0.bias")
        self.w2, self.b2 = t("mm.2.weight"), t("mm.2.bias")
        if self.w0.shape[1] != 4 * d or self.w2.shape[1] != self.w0.shape[0]:
            raise ValueError("%s: merger %s, %s" % (f.path, self.w0.shape, self.w2.shape))
        self.text_dim = self.w2.shape[0]

    def grid(self, pixels):
        if pixels.ndim != 3 or pixels.shape[0] != 3:
            raise ValueError("pixels of shape %s, want (3, H, W)" % (pixels.shape,))
        h, w = pixels.shape[1:]
        a = 2 * self.patch
        if h <= 0 or w <= 0 or h % a or w % a:
            raise ValueError("image %d x %d (H x W) is not a multiple of 2 patches of %d" % (h, w, self.patch))
        return h // self.patch, w // self.patch


def resized_positions(m, ny, nx):
    """(ny, nx, d): the side x side grid resized bilinearly, corners aligned."""
    def coords(n):
        scale = (n - 1) / (m.side - 1) if n > 1 and m.side > 1 else n / m.side
        src = np.arange(n) / scale
        i0 = np.clip(np.floor(src).astype(int), 0, m.side - 1)
        i1 = np.clip(i0 + 1, 0, m.side - 1)
        frac = np.clip(src - i0, 0.0, 1.0)
        return i0, i1, frac
    y0, y1, fy = coords(ny)
    x0, x1, fx = coords(nx)
    fy, fx = fy[:, None, None], fx[None, :, None]
    g = m.pos
    return (g[y0][:, x0] * (1 - fx) * (1 - fy) + g[y0][:, x1] * fx * (1 - fy)
            + g[y1][:, x0] * (1 - fx) * fy + g[y1][:, x1] * fx * fy)


def rope(m, x, pos_y, pos_x):
    """x (n, heads, hd): pairs (j, j + hd/2); quarter one by pos_y, quarter two by pos_x."""
    q = m.hd // 4
    inv = ROPE_THETA ** (-4.0 * np.arange(q) / m.hd)
    ang = np.concatenate([pos_y[:, None] * inv[None, :], pos_x[:, None] * inv[None, :]], axis=1)  # (n, hd/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :2 * q], x[..., 2 * q:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def encode_model(m, pixels_chw):
    ny, nx = m.grid(pixels_chw)
    p, d, hh, hd = m.patch, m.dim, m.n_heads, m.hd
    px = pixels_chw.astype(np.float64)
    cols = px.reshape(3, ny, p, nx, p).transpose(1, 3, 0, 2, 4).reshape(ny * nx, 3 * p * p)
    x = cols @ m.patch_w.reshape(d, 3 * p * p).T + m.patch_b
    x = x + resized_positions(m, ny, nx).reshape(ny * nx, d)
    n = ny * nx
    pos_y, pos_x = np.divmod(np.arange(n), nx)
    for L in m.layers:
        h = layer_norm(x, L["ln1"], L["ln1_b"], m.eps)
        qkv = h @ L["attn_qkv"].T + L["attn_qkv_b"]
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, hh, hd) for i in range(3))
        q, k = rope(m, q, pos_y, pos_x), rope(m, k, pos_y, pos_x)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        o = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), v).reshape(n, d)
        x = x + o @ L["attn_out"].T + L["attn_out_b"]
        h = layer_norm(x, L["ln2"], L["ln2_b"], m.eps)
        x = x + m.act(h @ L["ffn_up"].T + L["ffn_up_b"]) @ L["ffn_down"].T + L["ffn_down_b"]
    x = layer_norm(x, m.post_w, m.post_b, m.eps)
    # (by, dy, bx, dx, d) -> (by, bx, dy, dx, d): each block's four rows side by side.
    blocks = x.reshape(ny // 2, 2, nx // 2, 2, d).transpose(0, 2, 1, 3, 4).reshape(-1, 4 * d)
    return gelu_tanh(blocks @ m.w0.T + m.b0) @ m.w2.T + m.b2


def encode(mmproj_path, pixels_chw):
    """(n_tokens, text_dim) float64 image embeddings of one preprocessed image."""
    return encode_model(Qwen3VL(gguf_numpy.GgufFile(mmproj_path)), pixels_chw)


# ---------------------------------------------------------------------------
# Self-test: brute force, one value at a time where the fast version reshapes
# ---------------------------------------------------------------------------


def encode_brute(m, pixels):
    ny, nx = m.grid(pixels)
    p, d, hh, hd = m.patch, m.dim, m.n_heads, m.hd
    n = ny * nx
    x = np.zeros((n, d))
    for py in range(ny):
        for px in range(nx):
            patch = pixels[:, py * p:(py + 1) * p, px * p:(px + 1) * p].astype(np.float64)
            x[py * nx + px] = np.array([np.sum(m.patch_w[o] * patch) for o in range(d)]) + m.patch_b
    for py in range(ny):
        for px in range(nx):
            def src(i, nn):
                if nn > 1 and m.side > 1:
                    return i * (m.side - 1) / (nn - 1)
                return i * m.side / nn
            sy, sx = src(py, ny), src(px, nx)
            y0, x0 = min(int(math.floor(sy)), m.side - 1), min(int(math.floor(sx)), m.side - 1)
            y1, x1 = min(y0 + 1, m.side - 1), min(x0 + 1, m.side - 1)
            dy, dx = min(max(sy - y0, 0.0), 1.0), min(max(sx - x0, 0.0), 1.0)
            g = m.pos
            x[py * nx + px] += (g[y0, x0] * (1 - dx) * (1 - dy) + g[y0, x1] * dx * (1 - dy)
                                + g[y1, x0] * (1 - dx) * dy + g[y1, x1] * dx * dy)

    def ln(v, w, b):
        mu = sum(v) / len(v)
        var = sum((e - mu) ** 2 for e in v) / len(v)
        return np.array([(v[i] - mu) / math.sqrt(var + m.eps) * w[i] + b[i] for i in range(len(v))])

    def rope_vec(vec, py, px):
        out = vec.copy()
        for j in range(hd // 2):
            quarter = j < hd // 4
            pos, mm = (py, j) if quarter else (px, j - hd // 4)
            a = pos * ROPE_THETA ** (-4.0 * mm / hd)
            u, w_ = vec[j], vec[j + hd // 2]
            out[j], out[j + hd // 2] = u * math.cos(a) - w_ * math.sin(a), u * math.sin(a) + w_ * math.cos(a)
        return out

    for L in m.layers:
        h = np.array([ln(x[t], L["ln1"], L["ln1_b"]) for t in range(n)])
        qkv = h @ L["attn_qkv"].T + L["attn_qkv_b"]
        o = np.zeros((n, d))
        for head in range(hh):
            sl = slice(head * hd, (head + 1) * hd)
            qs = [rope_vec(qkv[t, sl], t // nx, t % nx) for t in range(n)]
            ks = [rope_vec(qkv[t, d:][sl], t // nx, t % nx) for t in range(n)]
            vs = [qkv[t, 2 * d:][sl] for t in range(n)]
            for t in range(n):
                sc = [float(np.dot(qs[t], ks[u])) / math.sqrt(hd) for u in range(n)]
                mx = max(sc)
                e = [math.exp(v - mx) for v in sc]
                z = sum(e)
                o[t, sl] = sum(e[u] / z * vs[u] for u in range(n))
        x = x + o @ L["attn_out"].T + L["attn_out_b"]
        h = np.array([ln(x[t], L["ln2"], L["ln2_b"]) for t in range(n)])
        x = x + m.act(h @ L["ffn_up"].T + L["ffn_up_b"]) @ L["ffn_down"].T + L["ffn_down_b"]
    x = np.array([ln(x[t], m.post_w, m.post_b) for t in range(n)])
    rows = []
    for by in range(ny // 2):
        for bx in range(nx // 2):
            rows.append(np.concatenate([x[(2 * by + dy) * nx + 2 * bx + dx] for dy in (0, 1) for dx in (0, 1)]))
    rows = np.array(rows)
    return gelu_tanh(rows @ m.w0.T + m.b0) @ m.w2.T + m.b2


def write_tiny(path, rng, patch=2, dim=8, ffn=12, layers=2, heads=2, side=3, text_dim=5):
    """A tiny random qwen3vl_merger file in llama.cpp's layout (gguf_numpy's writer)."""
    t = {}
    t["v.patch_embd.weight"] = rng.standard_normal((dim, 3, patch, patch)) * 0.3
    t["v.patch_embd.weight.1"] = rng.standard_normal((dim, 3, patch, patch)) * 0.3
    t["v.patch_embd.bias"] = rng.standard_normal(dim) * 0.1
    t["v.position_embd.weight"] = rng.standard_normal((side * side, dim)) * 0.5
    for i in range(layers):
        b = "v.blk.%d." % i
        for k, shape in (("ln1", (dim,)), ("ln2", (dim,)), ("attn_qkv", (3 * dim, dim)), ("attn_out", (dim, dim)),
                         ("ffn_up", (ffn, dim)), ("ffn_down", (dim, ffn))):
            t[b + k + ".weight"] = (1.0 + 0.1 * rng.standard_normal(shape)) if k.startswith("ln") else \
                rng.standard_normal(shape) / math.sqrt(shape[-1])
            t[b + k + ".bias"] = rng.standard_normal(shape[0]) * 0.1
    t["v.post_ln.weight"] = 1.0 + 0.1 * rng.standard_normal(dim)
    t["v.post_ln.bias"] = 0.1 * rng.standard_normal(dim)
    t["mm.0.weight"] = rng.standard_normal((4 * dim, 4 * dim)) / math.sqrt(4 * dim)
    t["mm.0.bias"] = 0.1 * rng.standard_normal(4 * dim)
    t["mm.2.weight"] = rng.standard_normal((text_dim, 4 * dim)) / math.sqrt(4 * dim)
    t["mm.2.bias"] = 0.1 * rng.standard_normal(text_dim)
    G = gguf_numpy
    meta = [("general.architecture", G.GGUF_STRING, "clip"), ("clip.projector_type", G.GGUF_STRING, "qwen3vl_merger"),
            ("clip.vision.patch_size", G.GGUF_UINT32, patch), ("clip.vision.embedding_length", G.GGUF_UINT32, dim),
            ("clip.vision.block_count", G.GGUF_UINT32, layers),
            ("clip.vision.attention.head_count", G.GGUF_UINT32, heads),
            ("clip.vision.attention.layer_norm_epsilon", G.GGUF_FLOAT32, 1e-6),
            ("clip.vision.spatial_merge_size", G.GGUF_UINT32, 2), ("clip.use_gelu", G.GGUF_BOOL, True)]
    tensors = [(name, list(reversed(a.shape)), G.F32, a.astype("<f4").tobytes()) for name, a in t.items()]
    G.write_gguf(path, meta, tensors)


def self_test():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.gguf")
        write_tiny(path, rng)
        m = Qwen3VL(gguf_numpy.GgufFile(path))
        # 3 x 3 grid resized to 2 x 4 patches and to 6 x 2: both up and down, both axes.
        for h, w in ((4, 8), (12, 4)):
            pixels = rng.standard_normal((3, h, w)).astype(np.float32)
            fast, brute = encode_model(m, pixels), encode_brute(m, pixels)
            err = np.max(np.abs(fast - brute))
            if not err < 1e-9:
                raise AssertionError("vectorised and brute force differ by %g at %d x %d" % (err, h, w))
        # The resize of a same-size grid is the grid itself.
        same = resized_positions(m, m.side, m.side)
        if not np.allclose(same, m.pos, atol=1e-12):
            raise AssertionError("a same-size resize changed the grid")
    print("qwen3vl_numpy self-test: ok")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    m = Qwen3VL(gguf_numpy.GgufFile(argv[0]))
    h, w = int(argv[2]), int(argv[3])
    pixels = np.fromfile(argv[1], dtype="<f4")
    if pixels.size != 3 * h * w:
        raise ValueError("%s: %d floats, want 3 x %d x %d" % (argv[1], pixels.size, h, w))
    encode_model(m, pixels.reshape(3, h, w)).astype("<f4").tofile(argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
