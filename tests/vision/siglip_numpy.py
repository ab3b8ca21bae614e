#!/usr/bin/python3
"""Gemma 3's vision encoder (SigLIP + the gemma3 projector) in plain numpy (float64):
the independent reference pagoda's image path is checked against.

Written from the model definition (llama.cpp's tools/mtmd clip graph for PROJECTOR_TYPE_GEMMA3
and HF's SiglipVisionModel + Gemma3MultiModalProjector), reading the mmproj GGUF through
tests/model/gguf_numpy.py; it shares no code with pagoda.

Contract:
- encode(mmproj_path, pixels_chw) -> float64 array (n_tokens, text_dim). pixels_chw is the
  encoder's input, float32 (3, H, W) with H = W = clip.vision.image_size, already normalised
  ((x / 255 - image_mean) / image_std per channel; normalize_rgb() does that for 8-bit RGB).
  Raises ValueError for a file it does not support (another projector, a non-square or
  wrongly sized image, sizes that do not divide) rather than computing something else.
- The forward pass:
    patches   conv of stride p as a reshape + matmul: patch (py, px) of the image, index
              py * n_side + px, flattened (c, ky, kx) times v.patch_embd.weight, + bias,
              + v.position_embd.weight row of that index;
    layers    x += out(attn(LN1(x))); x += down(gelu_tanh(up(LN2(x)))), LayerNorm with
              weight and bias (eps = clip.vision.attention.layer_norm_epsilon), q/k/v/out
              with biases, full (non-causal) multi-head softmax attention, scale 1/sqrt(hd);
    post      LayerNorm v.post_ln;
    projector the n_side x n_side grid average-pooled in n_merge x n_merge blocks (tokens
              row-major over the pooled grid), RMS norm (same eps) times
              mm.soft_emb_norm.weight, times mm.input_projection.weight ([text_dim, dim] in
              GGUF order, so numpy (dim, text_dim): y = x @ W).
- GGUF matrices are dims [cols, rows] (numpy (rows, cols)): Y = X @ W.T for q/k/v/out and
  the FFN; v.patch_embd.weight is [p, p, 3, dim] (numpy (dim, 3, p, p), HF's conv layout).

CLI:
  siglip_numpy.py MMPROJ.gguf PIXELS.f32 OUT.f32   PIXELS raw little-endian float32 [3][H][W],
                                                    OUT raw float32 [n_tokens][text_dim]
  siglip_numpy.py --self-test                       the vectorised encoder against a brute-force
                                                    one (direct conv loops, per-head attention,
                                                    per-block pooling) on a tiny random file
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import gguf_numpy  # noqa: E402
from llama_numpy import gelu_tanh, rms_norm  # noqa: E402


def layer_norm(x, weight, bias, eps):
    mu = np.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    return xc / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps) * weight + bias


class SiglipGemma3:
    """Hyperparameters and float64 weights of a gemma3 mmproj file."""

    def __init__(self, f):
        g = f.get
        if g("general.architecture") != "clip" or g("clip.projector_type") != "gemma3":
            raise ValueError("%s: not a gemma3 mmproj (architecture %r, projector %r)"
                             % (f.path, g("general.architecture"), g("clip.projector_type")))
        if not g("clip.use_gelu", False):
            raise ValueError("%s: clip.use_gelu is not set (only GELU is implemented)" % f.path)
        self.image_size = int(g("clip.vision.image_size"))
        self.patch = int(g("clip.vision.patch_size"))
        self.dim = int(g("clip.vision.embedding_length"))
        self.n_layers = int(g("clip.vision.block_count"))
        self.n_heads = int(g("clip.vision.attention.head_count"))
        self.eps = float(g("clip.vision.attention.layer_norm_epsilon"))
        self.text_dim = int(g("clip.vision.projection_dim"))
        self.n_merge = int(g("clip.vision.projector.scale_factor", 4))
        self.mean = np.array(g("clip.vision.image_mean"), dtype=np.float64)
        self.std = np.array(g("clip.vision.image_std"), dtype=np.float64)
        if self.image_size % self.patch or self.dim % self.n_heads:
            raise ValueError("%s: image size / patch or dim / heads do not divide" % f.path)
        self.n_side = self.image_size // self.patch
        if self.n_side % self.n_merge:
            raise ValueError("%s: %d patches per side, merge %d" % (f.path, self.n_side, self.n_merge))

        def t(name):
            return f.tensor(name).astype(np.float64)

        self.patch_w, self.patch_b = t("v.patch_embd.weight"), t("v.patch_embd.bias")
        self.pos = t("v.position_embd.weight")
        self.layers = []
        for i in range(self.n_layers):
            b = "v.blk.%d." % i
            self.layers.append({k: t(b + k) for k in (
                "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
                "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
                "attn_v.weight", "attn_v.bias", "attn_out.weight", "attn_out.bias",
                "ffn_up.weight", "ffn_up.bias", "ffn_down.weight", "ffn_down.bias")})
        self.post_w, self.post_b = t("v.post_ln.weight"), t("v.post_ln.bias")
        self.soft_norm = t("mm.soft_emb_norm.weight")
        self.proj = t("mm.input_projection.weight")  # (dim, text_dim)
        if self.pos.shape != (self.n_side * self.n_side, self.dim):
            raise ValueError("%s: position embeddings %s for %d patches" % (f.path, self.pos.shape, self.n_side ** 2))
        if self.proj.shape != (self.dim, self.text_dim):
            raise ValueError("%s: input projection %s, want (%d, %d)" % (f.path, self.proj.shape, self.dim, self.text_dim))

    def check_pixels(self, pixels):
        if pixels.shape != (3, self.image_size, self.image_size):
            raise ValueError("pixels of shape %s, want (3, %d, %d)" % (pixels.shape, self.image_size, self.image_size))
        return pixels.astype(np.float64)


def normalize_rgb(m, rgb_hwc_u8):
    """8-bit RGB (H, W, 3) -> the encoder's input (3, H, W): (x / 255 - mean) / std."""
    x = rgb_hwc_u8.astype(np.float64) / 255.0
    return ((x - m.mean) / m.std).transpose(2, 0, 1)


def embed_patches(m, px):
    n, p = m.n_side, m.patch
    # (3, n*p, n*p) -> (py, px, c, ky, kx) -> one row per patch, (c, ky, kx) flattened.
    cols = px.reshape(3, n, p, n, p).transpose(1, 3, 0, 2, 4).reshape(n * n, 3 * p * p)
    return cols @ m.patch_w.reshape(m.dim, 3 * p * p).T + m.patch_b + m.pos


def attention(m, L, x):
    n, hd = x.shape[0], m.dim // m.n_heads
    q = (x @ L["attn_q.weight"].T + L["attn_q.bias"]).reshape(n, m.n_heads, hd).transpose(1, 0, 2)
    k = (x @ L["attn_k.weight"].T + L["attn_k.bias"]).reshape(n, m.n_heads, hd).transpose(1, 0, 2)
    v = (x @ L["attn_v.weight"].T + L["attn_v.bias"]).reshape(n, m.n_heads, hd).transpose(1, 0, 2)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    o = (s / s.sum(axis=-1, keepdims=True)) @ v  # (heads, n, hd)
    return o.transpose(1, 0, 2).reshape(n, m.dim) @ L["attn_out.weight"].T + L["attn_out.bias"]


def project(m, x):
    n, k = m.n_side, m.n_merge
    pooled = x.reshape(n // k, k, n // k, k, m.dim).mean(axis=(1, 3)).reshape(-1, m.dim)
    return rms_norm(pooled, m.soft_norm, m.eps) @ m.proj


def encode_model(m, pixels_chw):
    x = embed_patches(m, m.check_pixels(pixels_chw))
    for L in m.layers:
        x = x + attention(m, L, layer_norm(x, L["ln1.weight"], L["ln1.bias"], m.eps))
        h = layer_norm(x, L["ln2.weight"], L["ln2.bias"], m.eps)
        x = x + gelu_tanh(h @ L["ffn_up.weight"].T + L["ffn_up.bias"]) @ L["ffn_down.weight"].T + L["ffn_down.bias"]
    return project(m, layer_norm(x, m.post_w, m.post_b, m.eps))


def encode(mmproj_path, pixels_chw):
    """(n_tokens, text_dim) float64 image embeddings of one image."""
    return encode_model(SiglipGemma3(gguf_numpy.GgufFile(mmproj_path)), pixels_chw)


# ---------------------------------------------------------------------------
# Self-test: a brute-force encoder, one value at a time where the fast one reshapes
# ---------------------------------------------------------------------------

def encode_brute(m, pixels):
    px = m.check_pixels(pixels)
    n, p, d = m.n_side, m.patch, m.dim
    x = np.zeros((n * n, d))
    for py in range(n):
        for pxx in range(n):
            for o in range(d):
                acc = m.patch_b[o]
                for c in range(3):
                    for ky in range(p):
                        for kx in range(p):
                            acc += m.patch_w[o, c, ky, kx] * px[c, py * p + ky, pxx * p + kx]
                x[py * n + pxx, o] = acc + m.pos[py * n + pxx, o]

    def ln(v, w, b):
        out = np.empty_like(v)
        for r in range(v.shape[0]):
            mu = sum(v[r]) / d
            var = sum((e - mu) ** 2 for e in v[r]) / d
            out[r] = [(v[r, i] - mu) / np.sqrt(var + m.eps) * w[i] + b[i] for i in range(d)]
        return out

    hd = d // m.n_heads
    for L in m.layers:
        h = ln(x, L["ln1.weight"], L["ln1.bias"])
        q, k, v = (np.array([[L[w + ".bias"][o] + sum(L[w + ".weight"][o, i] * h[t, i] for i in range(d))
                              for o in range(d)] for t in range(n * n)])
                   for w in ("attn_q", "attn_k", "attn_v"))
        att = np.zeros((n * n, d))
        for head in range(m.n_heads):
            sl = slice(head * hd, (head + 1) * hd)
            for t in range(n * n):
                scores = [float(np.dot(q[t, sl], k[u, sl])) / np.sqrt(hd) for u in range(n * n)]
                top = max(scores)
                e = [np.exp(s - top) for s in scores]
                z = sum(e)
                att[t, sl] = sum(e[u] / z * v[u, sl] for u in range(n * n))
        x = x + att @ L["attn_out.weight"].T + L["attn_out.bias"]
        h = ln(x, L["ln2.weight"], L["ln2.bias"])
        u = h @ L["ffn_up.weight"].T + L["ffn_up.bias"]
        u = np.vectorize(lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3))))(u)
        x = x + u @ L["ffn_down.weight"].T + L["ffn_down.bias"]
    x = ln(x, m.post_w, m.post_b)
    k = m.n_merge
    out = []
    for qy in range(n // k):
        for qx in range(n // k):
            acc = np.zeros(d)
            for dy in range(k):
                for dx in range(k):
                    acc += x[(qy * k + dy) * n + qx * k + dx]
            acc /= k * k
            acc = acc / np.sqrt(sum(acc * acc) / d + m.eps) * m.soft_norm
            out.append([sum(acc[i] * m.proj[i, j] for i in range(d)) for j in range(m.text_dim)])
    return np.array(out)


def write_tiny(path, rng, image_size=28, patch=7, dim=8, ffn=12, layers=2, heads=2, merge=2, text_dim=6):
    G = gguf_numpy
    meta = [("general.architecture", G.GGUF_STRING, "clip"), ("clip.projector_type", G.GGUF_STRING, "gemma3"),
            ("clip.use_gelu", G.GGUF_BOOL, True), ("clip.vision.image_size", G.GGUF_UINT32, image_size),
            ("clip.vision.patch_size", G.GGUF_UINT32, patch), ("clip.vision.embedding_length", G.GGUF_UINT32, dim),
            ("clip.vision.feed_forward_length", G.GGUF_UINT32, ffn), ("clip.vision.block_count", G.GGUF_UINT32, layers),
            ("clip.vision.attention.head_count", G.GGUF_UINT32, heads),
            ("clip.vision.attention.layer_norm_epsilon", G.GGUF_FLOAT32, 1e-6),
            ("clip.vision.projection_dim", G.GGUF_UINT32, text_dim),
            ("clip.vision.projector.scale_factor", G.GGUF_UINT32, merge),
            ("clip.vision.image_mean", G.GGUF_ARRAY, (G.GGUF_FLOAT32, [0.5] * 3)),
            ("clip.vision.image_std", G.GGUF_ARRAY, (G.GGUF_FLOAT32, [0.5] * 3))]
    n_patches = (image_size // patch) ** 2
    shapes = {"v.patch_embd.weight": (dim, 3, patch, patch), "v.patch_embd.bias": (dim,),
              "v.position_embd.weight": (n_patches, dim), "v.post_ln.weight": (dim,), "v.post_ln.bias": (dim,),
              "mm.soft_emb_norm.weight": (dim,), "mm.input_projection.weight": (dim, text_dim)}
    for i in range(layers):
        b = "v.blk.%d." % i
        for w in ("attn_q", "attn_k", "attn_v", "attn_out"):
            shapes[b + w + ".weight"], shapes[b + w + ".bias"] = (dim, dim), (dim,)
        for n in ("ln1", "ln2"):
            shapes[b + n + ".weight"], shapes[b + n + ".bias"] = (dim,), (dim,)
        shapes[b + "ffn_up.weight"], shapes[b + "ffn_up.bias"] = (ffn, dim), (ffn,)
        shapes[b + "ffn_down.weight"], shapes[b + "ffn_down.bias"] = (dim, ffn), (dim,)
    tensors = []
    for name, shape in shapes.items():
        a = rng.standard_normal(shape) * (1.0 / np.sqrt(shape[-1]) if len(shape) > 1 else 0.3)
        if name.endswith("norm.weight") or ".ln" in name and name.endswith(".weight") or name == "v.post_ln.weight":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        tensors.append((name, list(reversed(shape)), G.F32, a.astype("<f4").tobytes()))
    G.write_gguf(path, meta, tensors)


def self_test():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.gguf")
        write_tiny(path, rng)
        m = SiglipGemma3(gguf_numpy.GgufFile(path))
        pixels = rng.uniform(-1, 1, (3, m.image_size, m.image_size)).astype(np.float32)
        fast, slow = encode_model(m, pixels), encode_brute(m, pixels)
        assert fast.shape == (4, 6), fast.shape
        err = float(np.max(np.abs(fast - slow)))
        assert err < 1e-9, "vectorised vs brute force: max |diff| %.3g" % err
        # The CLI's files: raw float32 in, raw float32 [n_tokens][text_dim] out.
        pix_path, out_path = os.path.join(tmp, "px.f32"), os.path.join(tmp, "out.f32")
        pixels.astype("<f4").tofile(pix_path)
        main([path, pix_path, out_path])
        got = np.fromfile(out_path, dtype="<f4").reshape(4, 6)
        assert np.allclose(got, fast, rtol=1e-6, atol=1e-6)
        # Position embeddings and pooling order matter: a transposed image changes the output.
        assert np.max(np.abs(encode_model(m, pixels.transpose(0, 2, 1)) - fast)) > 1e-3
        # Refusals.
        for bad in (pixels[:, :-1, :], pixels[:2]):
            try:
                encode_model(m, bad)
            except ValueError:
                continue
            raise AssertionError("accepted pixels of shape %s" % (bad.shape,))
    print("siglip_numpy self-test: ok (vectorised vs brute force %.2g)" % err)


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    m = SiglipGemma3(gguf_numpy.GgufFile(argv[0]))
    pixels = np.fromfile(argv[1], dtype="<f4")
    if pixels.size != 3 * m.image_size * m.image_size:
        raise ValueError("%s: %d floats, want 3 x %d x %d" % (argv[1], pixels.size, m.image_size, m.image_size))
    encode_model(m, pixels.reshape(3, m.image_size, m.image_size)).astype("<f4").tofile(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
