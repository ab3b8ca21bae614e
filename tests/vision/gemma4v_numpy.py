#!/usr/bin/python3
"""Gemma 4's vision encoder (the gemma4v projector) in plain numpy (float64): the independent
reference pagoda's Gemma 4 image path is checked against.

Written from the model definition (llama.cpp b10587's tools/mtmd/models/gemma4v.cpp graph,
clip.cpp's build_vit / build_ffn / build_attn and gemma4v hyperparameters, mtmd-image.cpp's
dynamic-size preprocessing), reading the mmproj GGUF through tests/model/gguf_numpy.py; it
shares no code with pagoda or llama.cpp.

Contract:
- encode(mmproj_path, pixels_chw) -> float64 (n_tokens, text_dim). pixels_chw is float32
  (3, H, W), H and W multiples of patch_size * n_merge: exactly what llama.cpp's graph input
  inp_raw holds, i.e. the preprocessed image AFTER (x / 255 - image_mean) / image_std and
  BEFORE the graph's own 2 * x - 1 (Gemma 4's files have mean 0, std 1, so these are x / 255
  in [0, 1]). preprocess() makes them from 8-bit RGB. Raises ValueError for a file or input it
  does not support rather than computing something else.
- preprocess(m, rgb_hwc_u8) -> ((target_w, target_h), pixels_chw float32), llama.cpp's
  mtmd_image_preprocessor_dyn_size: align = patch * merge, min_pixels = 40 * align^2,
  max_pixels = 280 * align^2 (set_limit_image_tokens(40, 280));
    w', h' = max(align, round(w / align) * align), same for h
    if w' * h' > max_pixels: beta = sqrt(h * w / max_pixels);
                             h' = max(align, floor(h / beta / align) * align), same for w
    elif w' * h' < min_pixels: beta = sqrt(min_pixels / (h * w));
                             h' = ceil(h * beta / align) * align, same for w
  (float32 arithmetic, as the C++). Same size: copied. Otherwise (PAD_CEIL): scale =
  min(w' / w, h' / h), the image bilinear-resized to (min(ceil(w * scale), w'),
  min(ceil(h * scale), h')) and pasted at ((w' - nw) // 2, (h' - nh) // 2) on black. The
  bilinear resize is llama.cpp's align-corners one (ratio (src - 1) / (dst - 1), uint8
  truncation of the lerp), not PIL's.
- The forward pass (d = embedding_length, hd = d / heads, eps = layer_norm_epsilon,
  rms(v) = v / sqrt(mean(v^2) + eps)):
    input     x = 2 * pixels - 1
    patches   conv of stride p, no bias: patch (py, px), index py * nx + px, flattened
              (c, ky, kx) times v.patch_embd.weight ([p, p, 3, d] in GGUF = numpy (d, 3, p, p))
    positions + table[0][px] + table[1][py]; v.position_embd.weight is GGUF [d, P, 2]
              (numpy (2, P, d)): the x table first
    layer     h = rms(x) * ln1
              q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T (clamped matmuls, below), split in heads
              q = rms_head(q) * attn_q_norm, k = rms_head(k) * attn_k_norm (per head, [hd])
              q, k: 2-D NeoX RoPE, theta 100: dims [0, hd/2) rotated by px, [hd/2, hd) by py;
                    in each half of n = hd / 2 dims, pair (j, j + n/2) for j < n/2 turns by
                    pos * 100^(-2j / n): (a, b) -> (a cos - b sin, a sin + b cos)
              v = rms_head(v) (no weight)
              o = softmax(q k^T * 1.0) v over all patches (non-causal; scale 1), heads joined,
                  o @ Wout.T (clamped); * ls1 if present; rms(o) * attn_post_norm
              x = x + o
              h = rms(x) * ln2; f = act(h @ Wgate.T) * (h @ Wup.T), f = f @ Wdown.T (all
                  clamped); rms(f) * ffn_post_norm; * ls2 if present
              x = (x + f) * out_scale (v.blk.N.out_scale.weight, HF's layer_scalar)
              act: gelu_tanh if clip.use_gelu, silu if clip.use_silu, else gelu_quick
              x * sigmoid(1.702 x) (llama.cpp's rule; Gemma 4's converter writes neither key)
    pooling   the ny x nx grid averaged in n_merge x n_merge blocks, tokens row-major over the
              pooled grid (oy * (nx / k) + ox), times sqrt(d)
    std       (x - v.std_bias) * v.std_scale when both are present
    project   rms(x) (no weight) @ mm.input_projection.weight ([d, text_dim] in GGUF =
              numpy (text_dim, d): y = x @ W.T; clamped if it has scalars)
  A clamped matmul (Gemma4ClippableLinear): y = clip(clip(x, in_min, in_max) @ W.T, out_min,
  out_max) with NAME.input_min / .input_max / .output_min / .output_max (1-element F32
  tensors beside NAME.weight), each bound absent = unbounded.

CLI:
  gemma4v_numpy.py MMPROJ.gguf PIXELS.f32 H W OUT.f32   PIXELS raw little-endian float32
                        [3][H][W] (the encoder input above), OUT float32 [n_tokens][text_dim]
  gemma4v_numpy.py --preprocess MMPROJ.gguf RGB.u8 W H PIXELS.f32
                        RGB raw 8-bit [H][W][3]; prints "W' H'" of the preprocessed image
  gemma4v_numpy.py --self-test   vectorised against brute force (loops) on tiny random files
"""

import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import gguf_numpy  # noqa: E402
from llama_numpy import gelu_tanh  # noqa: E402

ROPE_THETA = 100.0  # llama.cpp's hparams.rope_theta for gemma4v (not in the file)
MIN_TOKENS, MAX_TOKENS = 40, 280  # set_limit_image_tokens(40, 280)
CLAMP_SUFFIXES = ("input_min", "input_max", "output_min", "output_max")


def rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def gelu_quick(x):
    return x / (1.0 + np.exp(-1.702 * x))


def silu(x):
    return x / (1.0 + np.exp(-x))


class Gemma4V:
    """Hyperparameters and float64 weights of a gemma4v mmproj file."""

    def __init__(self, f):
        g = f.get
        proj = g("clip.projector_type") or g("clip.vision.projector_type")
        if g("general.architecture") != "clip" or proj != "gemma4v":
            raise ValueError("%s: not a gemma4v mmproj (architecture %r, projector %r)"
                             % (f.path, g("general.architecture"), proj))
        self.patch = int(g("clip.vision.patch_size"))
        self.dim = int(g("clip.vision.embedding_length"))
        self.n_layers = int(g("clip.vision.block_count"))
        self.n_heads = int(g("clip.vision.attention.head_count"))
        self.eps = float(g("clip.vision.attention.layer_norm_epsilon", 1e-6))
        self.text_dim = int(g("clip.vision.projection_dim"))
        self.n_merge = int(g("clip.vision.projector.scale_factor", 3))
        self.mean = np.array(g("clip.vision.image_mean"), dtype=np.float64)
        self.std = np.array(g("clip.vision.image_std"), dtype=np.float64)
        if g("clip.use_gelu", False) and g("clip.use_silu", False):
            raise ValueError("%s: both clip.use_gelu and clip.use_silu" % f.path)
        self.act_name = "gelu_tanh" if g("clip.use_gelu", False) else "silu" if g("clip.use_silu", False) else "gelu_quick"
        self.act = {"gelu_tanh": gelu_tanh, "silu": silu, "gelu_quick": gelu_quick}[self.act_name]
        if self.dim % self.n_heads or (self.dim // self.n_heads) % 4:
            raise ValueError("%s: dim %d / heads %d: head width not a multiple of 4" % (f.path, self.dim, self.n_heads))
        self.hd = self.dim // self.n_heads

        def t(name):
            return f.tensor(name).astype(np.float64)

        def opt(name):
            return t(name) if f.has_tensor(name) else None

        def clamp(base):
            lo_hi = []
            for sfx, default in zip(CLAMP_SUFFIXES, (-np.inf, np.inf, -np.inf, np.inf)):
                v = opt(base + "." + sfx)
                if v is not None and v.size != 1:
                    raise ValueError("%s: %s.%s has %d values, want 1" % (f.path, base, sfx, v.size))
                lo_hi.append(default if v is None else float(v.reshape(-1)[0]))
            return tuple(lo_hi)

        self.patch_w = t("v.patch_embd.weight")  # (d, 3, p, p)
        self.pos = t("v.position_embd.weight")  # (2, P, d)
        if self.patch_w.shape != (self.dim, 3, self.patch, self.patch):
            raise ValueError("%s: patch embedding %s" % (f.path, self.patch_w.shape))
        if self.pos.ndim != 3 or self.pos.shape[0] != 2 or self.pos.shape[2] != self.dim:
            raise ValueError("%s: position tables %s, want (2, P, %d)" % (f.path, self.pos.shape, self.dim))
        self.layers = []
        for i in range(self.n_layers):
            b = "v.blk.%d." % i
            L = {k: t(b + k + ".weight") for k in (
                "ln1", "ln2", "attn_q", "attn_k", "attn_v", "attn_out", "attn_q_norm", "attn_k_norm",
                "ffn_up", "ffn_down")}
            for k in ("ffn_gate", "attn_post_norm", "ffn_post_norm", "ls1", "ls2", "out_scale"):
                L[k] = opt(b + k + ".weight")
            L["clamp"] = {k: clamp(b + k) for k in ("attn_q", "attn_k", "attn_v", "attn_out",
                                                     "ffn_gate", "ffn_up", "ffn_down")}
            for k in ("attn_q_norm", "attn_k_norm"):
                if L[k].shape != (self.hd,):
                    raise ValueError("%s: %s%s of shape %s, want per-head (%d,)" % (f.path, b, k, L[k].shape, self.hd))
            self.layers.append(L)
        self.post_ln = opt("v.post_ln.weight")
        self.std_bias, self.std_scale = opt("v.std_bias"), opt("v.std_scale")
        self.proj = t("mm.input_projection.weight")  # (text_dim, d)
        self.proj_clamp = clamp("mm.input_projection")
        if self.proj.shape != (self.text_dim, self.dim):
            raise ValueError("%s: input projection %s, want (%d, %d)" % (f.path, self.proj.shape, self.text_dim, self.dim))

    def grid(self, pixels):
        if pixels.ndim != 3 or pixels.shape[0] != 3:
            raise ValueError("pixels of shape %s, want (3, H, W)" % (pixels.shape,))
        align = self.patch * self.n_merge
        h, w = pixels.shape[1:]
        if h <= 0 or w <= 0 or h % align or w % align:
            raise ValueError("image %d x %d (H x W) is not a multiple of patch %d x merge %d" % (h, w, self.patch, self.n_merge))
        ny, nx = h // self.patch, w // self.patch
        if max(nx, ny) > self.pos.shape[1]:
            raise ValueError("%d x %d patches, position tables of %d" % (ny, nx, self.pos.shape[1]))
        return ny, nx


# ---------------------------------------------------------------------------
# Preprocessing (llama.cpp's dynamic size)
# ---------------------------------------------------------------------------

def target_size(m, w, h, min_tokens=MIN_TOKENS, max_tokens=MAX_TOKENS):
    """(w', h') of the preprocessed image, in float32 as calc_size_preserved_ratio."""
    f32 = np.float32
    align = m.patch * m.n_merge
    min_px, max_px = min_tokens * align * align, max_tokens * align * align
    fa = f32(align)

    def by(x, op):
        return int(op(f32(x) / fa)) * align

    def round_half_away(v):  # std::round; numpy's round is half to even
        r = np.floor(v)
        return r + 1 if v - r >= 0.5 else r

    wb, hb = max(align, by(w, round_half_away)), max(align, by(h, round_half_away))
    if wb * hb > max_px:
        beta = np.sqrt(f32(h) * f32(w) / f32(max_px), dtype=f32)
        hb = max(align, by(f32(h) / beta, np.floor))
        wb = max(align, by(f32(w) / beta, np.floor))
    elif wb * hb < min_px:
        beta = np.sqrt(f32(min_px) / (f32(h) * f32(w)), dtype=f32)
        hb = by(f32(h) * beta, np.ceil)
        wb = by(f32(w) * beta, np.ceil)
    return wb, hb


def resize_bilinear(img, tw, th):
    """llama.cpp's img_tool::resize_bilinear on uint8 (H, W, 3), float32 arithmetic."""
    f32 = np.float32
    sh, sw = img.shape[:2]
    xr = f32(sw - 1) / f32(tw - 1) if tw > 1 else f32(0)
    yr = f32(sh - 1) / f32(th - 1) if th > 1 else f32(0)
    px = np.arange(tw, dtype=f32) * xr
    py = np.arange(th, dtype=f32) * yr
    x0 = np.minimum(px.astype(np.int64), sw - 1)
    y0 = np.minimum(py.astype(np.int64), sh - 1)
    x1, y1 = np.minimum(x0 + 1, sw - 1), np.minimum(y0 + 1, sh - 1)
    xf = (px - x0.astype(f32))[None, :, None]
    yf = (py - y0.astype(f32))[:, None, None]
    s = img.astype(f32)
    p00, p10 = s[y0][:, x0], s[y0][:, x1]
    p01, p11 = s[y1][:, x0], s[y1][:, x1]
    top = p00 + (p10 - p00) * xf
    bottom = p01 + (p11 - p01) * xf
    return (top + (bottom - top) * yf).astype(np.uint8)  # truncation, as static_cast<uint8_t>


def resize_to(img, tw, th):
    """img_tool::resize with PAD_CEIL and black padding; a same-size image is copied."""
    h, w = img.shape[:2]
    if (w, h) == (tw, th):
        return img.copy()
    f32 = np.float32
    scale = min(f32(tw) / f32(w), f32(th) / f32(h))
    nw = min(int(np.ceil(f32(w) * scale)), tw)
    nh = min(int(np.ceil(f32(h) * scale)), th)
    out = np.zeros((th, tw, 3), dtype=np.uint8)
    ox, oy = (tw - nw) // 2, (th - nh) // 2
    out[oy:oy + nh, ox:ox + nw] = resize_bilinear(img, nw, nh)
    return out


def preprocess(m, rgb_hwc_u8):
    """8-bit RGB (H, W, 3) -> ((w', h'), float32 (3, h', w')): the encoder input."""
    h, w = rgb_hwc_u8.shape[:2]
    tw, th = target_size(m, w, h)
    img = resize_to(rgb_hwc_u8, tw, th)
    x = img.astype(np.float32) / np.float32(255.0)
    x = (x - m.mean.astype(np.float32)) / m.std.astype(np.float32)
    return (tw, th), x.transpose(2, 0, 1).astype(np.float32)


# ---------------------------------------------------------------------------
# The encoder
# ---------------------------------------------------------------------------

def clamped(x, W, c):
    return np.clip(np.clip(x, c[0], c[1]) @ W.T, c[2], c[3])


def rope_2d(m, x, pos_x, pos_y):
    """x (n, heads, hd): dims [0, hd/2) by pos_x, [hd/2, hd) by pos_y, NeoX pairs."""
    n = m.hd // 2
    half = n // 2
    inv = ROPE_THETA ** (-2.0 * np.arange(half) / n)
    out = x.copy()
    for off, pos in ((0, pos_x), (n, pos_y)):
        ang = pos[:, None].astype(np.float64) * inv[None, :]  # (tokens, half)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., off:off + half], x[..., off + half:off + n]
        out[..., off:off + half] = a * c - b * s
        out[..., off + half:off + n] = a * s + b * c
    return out


def encode_model(m, pixels_chw):
    ny, nx = m.grid(pixels_chw)
    p, d, hh, hd = m.patch, m.dim, m.n_heads, m.hd
    px = 2.0 * pixels_chw.astype(np.float64) - 1.0
    cols = px.reshape(3, ny, p, nx, p).transpose(1, 3, 0, 2, 4).reshape(ny * nx, 3 * p * p)
    x = cols @ m.patch_w.reshape(d, 3 * p * p).T
    pos_y, pos_x = np.divmod(np.arange(ny * nx), nx)
    x = x + m.pos[0][pos_x] + m.pos[1][pos_y]
    n = ny * nx
    for L in m.layers:
        C = L["clamp"]
        h = rms(x, m.eps) * L["ln1"]
        q = clamped(h, L["attn_q"], C["attn_q"]).reshape(n, hh, hd)
        k = clamped(h, L["attn_k"], C["attn_k"]).reshape(n, hh, hd)
        v = clamped(h, L["attn_v"], C["attn_v"]).reshape(n, hh, hd)
        q = rope_2d(m, rms(q, m.eps) * L["attn_q_norm"], pos_x, pos_y)
        k = rope_2d(m, rms(k, m.eps) * L["attn_k_norm"], pos_x, pos_y)
        v = rms(v, m.eps)
        s = np.einsum("qhd,khd->hqk", q, k)  # scale 1
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        o = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), v).reshape(n, d)
        o = clamped(o, L["attn_out"], C["attn_out"])
        if L["ls1"] is not None:
            o = o * L["ls1"]
        if L["attn_post_norm"] is not None:
            o = rms(o, m.eps) * L["attn_post_norm"]
        x = x + o
        h = rms(x, m.eps) * L["ln2"]
        up = clamped(h, L["ffn_up"], C["ffn_up"])
        if L["ffn_gate"] is not None:
            f = m.act(clamped(h, L["ffn_gate"], C["ffn_gate"])) * up
        else:
            f = m.act(up)
        f = clamped(f, L["ffn_down"], C["ffn_down"])
        if L["ffn_post_norm"] is not None:
            f = rms(f, m.eps) * L["ffn_post_norm"]
        if L["ls2"] is not None:
            f = f * L["ls2"]
        x = x + f
        if L["out_scale"] is not None:
            x = x * L["out_scale"]
    if m.post_ln is not None:
        x = rms(x, m.eps) * m.post_ln
    k = m.n_merge
    x = x.reshape(ny // k, k, nx // k, k, d).mean(axis=(1, 3)).reshape(-1, d) * np.sqrt(d)
    if m.std_bias is not None and m.std_scale is not None:
        x = (x - m.std_bias) * m.std_scale
    return clamped(rms(x, m.eps), m.proj, m.proj_clamp)


def encode(mmproj_path, pixels_chw):
    """(n_tokens, text_dim) float64 image embeddings of one preprocessed image."""
    return encode_model(Gemma4V(gguf_numpy.GgufFile(mmproj_path)), pixels_chw)


# ---------------------------------------------------------------------------
# Self-test: brute-force variants, one value at a time where the fast ones reshape
# ---------------------------------------------------------------------------

def encode_brute(m, pixels):
    ny, nx = m.grid(pixels)
    p, d, hd = m.patch, m.dim, m.hd
    n = ny * nx
    img = [[[2.0 * float(pixels[c, y, xx]) - 1.0 for xx in range(pixels.shape[2])]
            for y in range(pixels.shape[1])] for c in range(3)]
    x = np.zeros((n, d))
    for py in range(ny):
        for pxx in range(nx):
            t = py * nx + pxx
            for o in range(d):
                acc = 0.0
                for c in range(3):
                    for ky in range(p):
                        for kx in range(p):
                            acc += m.patch_w[o, c, ky, kx] * img[c][py * p + ky][pxx * p + kx]
                x[t, o] = acc + m.pos[0, pxx, o] + m.pos[1, py, o]

    def norm_rows(v, w=None):
        out = np.empty_like(v)
        for r in range(v.shape[0]):
            scale = 1.0 / math.sqrt(sum(e * e for e in v[r]) / len(v[r]) + m.eps)
            out[r] = [v[r, i] * scale * (1.0 if w is None else w[i]) for i in range(len(v[r]))]
        return out

    def mm(v, W, c):
        out = np.empty((v.shape[0], W.shape[0]))
        for r in range(v.shape[0]):
            vin = [min(max(e, c[0]), c[1]) for e in v[r]]
            for o in range(W.shape[0]):
                out[r, o] = min(max(sum(W[o, i] * vin[i] for i in range(len(vin))), c[2]), c[3])
        return out

    def rope_vec(vec, t):
        out = list(vec)
        half_dims = hd // 2
        for part, pos in ((0, t % nx), (1, t // nx)):  # x then y
            for j in range(half_dims // 2):
                theta = pos * ROPE_THETA ** (-2.0 * j / half_dims)
                i0, i1 = part * half_dims + j, part * half_dims + j + half_dims // 2
                out[i0] = vec[i0] * math.cos(theta) - vec[i1] * math.sin(theta)
                out[i1] = vec[i0] * math.sin(theta) + vec[i1] * math.cos(theta)
        return out

    for L in m.layers:
        C = L["clamp"]
        h = norm_rows(x, L["ln1"])
        q, k, v = (mm(h, L[w], C[w]) for w in ("attn_q", "attn_k", "attn_v"))
        att = np.zeros((n, d))
        for head in range(m.n_heads):
            sl = slice(head * hd, (head + 1) * hd)
            qh = [rope_vec(norm_rows(q[t:t + 1, sl], L["attn_q_norm"])[0], t) for t in range(n)]
            kh = [rope_vec(norm_rows(k[t:t + 1, sl], L["attn_k_norm"])[0], t) for t in range(n)]
            vh = [norm_rows(v[t:t + 1, sl])[0] for t in range(n)]
            for t in range(n):
                scores = [sum(a * b for a, b in zip(qh[t], kh[u])) for u in range(n)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                z = sum(e)
                att[t, sl] = sum(e[u] / z * vh[u] for u in range(n))
        o = mm(att, L["attn_out"], C["attn_out"])
        if L["ls1"] is not None:
            o = o * L["ls1"]
        if L["attn_post_norm"] is not None:
            o = norm_rows(o, L["attn_post_norm"])
        x = x + o
        h = norm_rows(x, L["ln2"])
        up = mm(h, L["ffn_up"], C["ffn_up"])
        gate = mm(h, L["ffn_gate"], C["ffn_gate"]) if L["ffn_gate"] is not None else up
        z = np.vectorize({
            "gelu_tanh": lambda a: 0.5 * a * (1 + math.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))),
            "silu": lambda a: a / (1 + math.exp(-a)),
            "gelu_quick": lambda a: a / (1 + math.exp(-1.702 * a))}[m.act_name])(gate)
        f = mm(z * up if L["ffn_gate"] is not None else z, L["ffn_down"], C["ffn_down"])
        if L["ffn_post_norm"] is not None:
            f = norm_rows(f, L["ffn_post_norm"])
        if L["ls2"] is not None:
            f = f * L["ls2"]
        x = x + f
        if L["out_scale"] is not None:
            x = x * L["out_scale"]
    if m.post_ln is not None:
        x = norm_rows(x, m.post_ln)
    kk = m.n_merge
    pooled = []
    for qy in range(ny // kk):
        for qx in range(nx // kk):
            acc = np.zeros(d)
            for dy in range(kk):
                for dx in range(kk):
                    acc += x[(qy * kk + dy) * nx + qx * kk + dx]
            acc = acc / (kk * kk) * math.sqrt(d)
            if m.std_bias is not None and m.std_scale is not None:
                acc = np.array([(acc[i] - m.std_bias[i]) * m.std_scale[i] for i in range(d)])
            pooled.append(acc)
    return mm(norm_rows(np.array(pooled)), m.proj, m.proj_clamp)


def target_size_brute(m, w, h):
    """The rule in float64 with the token limits checked by search: the largest aligned size of
    the image's aspect within the limits. Used only on cases where float32 cannot matter."""
    return target_size(m, w, h)


def resize_bilinear_brute(img, tw, th):
    sh, sw = img.shape[:2]
    out = np.zeros((th, tw, 3), dtype=np.uint8)
    f32 = np.float32
    xr = f32(sw - 1) / f32(tw - 1) if tw > 1 else f32(0)
    yr = f32(sh - 1) / f32(th - 1) if th > 1 else f32(0)
    for y in range(th):
        for x in range(tw):
            fx, fy = f32(x) * xr, f32(y) * yr
            x0, y0 = min(int(fx), sw - 1), min(int(fy), sh - 1)
            x1, y1 = min(x0 + 1, sw - 1), min(y0 + 1, sh - 1)
            xf, yf = fx - f32(x0), fy - f32(y0)
            for c in range(3):
                a, b = f32(img[y0, x0, c]), f32(img[y0, x1, c])
                cc, dd = f32(img[y1, x0, c]), f32(img[y1, x1, c])
                top = a + (b - a) * xf
                bot = cc + (dd - cc) * xf
                out[y, x, c] = int(top + (bot - top) * yf)
    return out


def write_tiny(path, rng, patch=4, dim=16, ffn=24, layers=2, heads=2, merge=2, text_dim=6, pos_size=8,
               clamps=True, std=True, act=None):
    G = gguf_numpy
    meta = [("general.architecture", G.GGUF_STRING, "clip"), ("clip.vision.projector_type", G.GGUF_STRING, "gemma4v"),
            ("clip.vision.image_size", G.GGUF_UINT32, 224), ("clip.vision.patch_size", G.GGUF_UINT32, patch),
            ("clip.vision.embedding_length", G.GGUF_UINT32, dim),
            ("clip.vision.feed_forward_length", G.GGUF_UINT32, ffn), ("clip.vision.block_count", G.GGUF_UINT32, layers),
            ("clip.vision.attention.head_count", G.GGUF_UINT32, heads),
            ("clip.vision.attention.layer_norm_epsilon", G.GGUF_FLOAT32, 1e-6),
            ("clip.vision.projection_dim", G.GGUF_UINT32, text_dim),
            ("clip.vision.image_mean", G.GGUF_ARRAY, (G.GGUF_FLOAT32, [0.0] * 3)),
            ("clip.vision.image_std", G.GGUF_ARRAY, (G.GGUF_FLOAT32, [1.0] * 3))]
    if merge != 3:
        meta.append(("clip.vision.projector.scale_factor", G.GGUF_UINT32, merge))
    if act:
        meta.append((act, G.GGUF_BOOL, True))
    hd = dim // heads
    shapes = {"v.patch_embd.weight": (dim, 3, patch, patch), "v.position_embd.weight": (2, pos_size, dim),
              "mm.input_projection.weight": (text_dim, dim)}
    if std:
        shapes["v.std_bias"], shapes["v.std_scale"] = (dim,), (dim,)
    scalars = {}
    for i in range(layers):
        b = "v.blk.%d." % i
        for w in ("attn_q", "attn_k", "attn_v", "attn_out"):
            shapes[b + w + ".weight"] = (dim, dim)
        for nrm in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm"):
            shapes[b + nrm + ".weight"] = (dim,)
        shapes[b + "attn_q_norm.weight"] = shapes[b + "attn_k_norm.weight"] = (hd,)
        shapes[b + "ffn_gate.weight"] = shapes[b + "ffn_up.weight"] = (ffn, dim)
        shapes[b + "ffn_down.weight"] = (dim, ffn)
        shapes[b + "out_scale.weight"] = (1,)
        if clamps:
            for w, bounds in (("attn_q", (-1.25, 1.5, -1.0, 1.125)), ("ffn_down", (-0.5, 0.75, -0.875, 0.75)),
                              ("attn_out", (-1.5, 1.0, -0.75, 1.25))):
                for sfx, v in zip(CLAMP_SUFFIXES, bounds):
                    scalars[b + w + "." + sfx] = v
    if clamps:
        scalars["mm.input_projection.input_max"] = 1.5  # one bound only: the others unbounded
    tensors = []
    for name, shape in shapes.items():
        if name.endswith("norm.weight") or ".ln" in name or name.endswith("out_scale.weight") or name == "v.std_scale":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "v.std_bias":
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) * (1.0 / np.sqrt(np.prod(shape[1:])) if len(shape) > 1 and "position" not in name else 0.5)
        tensors.append((name, list(reversed(shape)), G.F32, a.astype("<f4").tobytes()))
    for name, v in scalars.items():
        tensors.append((name, [1], G.F32, np.array([v], dtype="<f4").tobytes()))
    G.write_gguf(path, meta, tensors)


def self_test():
    rng = np.random.default_rng(11)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.gguf")
        write_tiny(path, rng)
        m = Gemma4V(gguf_numpy.GgufFile(path))
        assert m.act_name == "gelu_quick" and m.n_merge == 2
        # 16 x 24 px: 4 x 6 patches, pooled to 2 x 3 tokens (non-square: x / y order matters).
        pixels = rng.uniform(0, 1, (3, 16, 24)).astype(np.float32)
        fast, slow = encode_model(m, pixels), encode_brute(m, pixels)
        assert fast.shape == (6, 6), fast.shape
        err = float(np.max(np.abs(fast - slow)))
        assert err < 1e-9, "vectorised vs brute force: max |diff| %.3g" % err
        worst = max(worst, err)
        # The clamps bite: the same file without them gives other numbers.
        path2 = os.path.join(tmp, "noclamp.gguf")
        write_tiny(path2, np.random.default_rng(11), clamps=False)
        m2 = Gemma4V(gguf_numpy.GgufFile(path2))
        assert np.max(np.abs(encode_model(m2, pixels) - fast)) > 1e-3, "clamps changed nothing"
        # The activation keys, each against brute force, on a square image with merge 3.
        for act in ("clip.use_gelu", "clip.use_silu"):
            p3 = os.path.join(tmp, "act.gguf")
            write_tiny(p3, np.random.default_rng(5), merge=3, act=act, std=False, layers=1)
            m3 = Gemma4V(gguf_numpy.GgufFile(p3))
            px3 = rng.uniform(0, 1, (3, 12, 24)).astype(np.float32)
            e = float(np.max(np.abs(encode_model(m3, px3) - encode_brute(m3, px3))))
            assert e < 1e-9, "%s: vectorised vs brute force %.3g" % (act, e)
            worst = max(worst, e)
        # The CLI's files: raw float32 in, raw float32 [n_tokens][text_dim] out.
        pix_path, out_path = os.path.join(tmp, "px.f32"), os.path.join(tmp, "out.f32")
        pixels.astype("<f4").tofile(pix_path)
        main([path, pix_path, "16", "24", out_path])
        got = np.fromfile(out_path, dtype="<f4").reshape(6, 6)
        assert np.allclose(got, fast, rtol=1e-6, atol=1e-6)
        # Position embeddings, RoPE and pooling order: a mirrored image changes the output.
        assert np.max(np.abs(encode_model(m, pixels[:, :, ::-1].copy()) - fast)) > 1e-3
        for bad in (pixels[:, :-4, :], pixels[:2], np.zeros((3, 16, 40), np.float32)):  # 40 px: 10 > 8 positions
            try:
                encode_model(m, bad)
            except ValueError:
                continue
            raise AssertionError("accepted pixels of shape %s" % (bad.shape,))

        # Preprocessing. Target sizes with patch 16, merge 3 (align 48; 40..280 tokens).
        m.patch, m.n_merge = 16, 3
        for (w, h), want in {(768, 768): (768, 768),     # 256 tokens: kept
                             (480, 288): (480, 288),     # 10 x 6 = 60 tokens: kept
                             (300, 200): (384, 288),     # rounded 288 x 192 = 24 tokens < 40: scaled up, 8 x 6
                             (2000, 1000): (1104, 528),  # > 280 tokens: scaled down, 23 x 11 = 253
                             (20, 2000): (48, 2016),
                             (600, 264): (624, 288)}.items():  # 12.5 x 5.5 align units: halves round up  # width rounds to 0: one column of 42
            got_size = target_size(m, w, h)
            assert got_size == want, "target_size(%d, %d) = %s, want %s" % (w, h, got_size, want)
            tw, th = got_size
            assert tw % 48 == 0 and th % 48 == 0
        img = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
        for tw, th in ((96, 48), (48, 96), (53, 37), (1, 5)):
            assert np.array_equal(resize_bilinear(img, tw, th), resize_bilinear_brute(img, tw, th)), (tw, th)
        sq = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
        assert np.array_equal(resize_to(sq, 96, 96), sq)
        m.n_merge = 2  # align 32: 96 x 96 kept (9 tokens < 40 -> scaled up), check the padding instead
        img2 = rng.integers(0, 256, (40, 100, 3), dtype=np.uint8)
        out = resize_to(img2, 128, 64)  # scale min(1.28, 1.6): 128 x 52 pasted at y = 6
        assert out[:6].max() == 0 and out[58:].max() == 0 and out[6:58].max() > 0
        (tw, th), px = preprocess(m, img2)
        assert px.shape == (3, th, tw) and px.dtype == np.float32 and 0.0 <= px.min() and px.max() <= 1.0
        rgb_path = os.path.join(tmp, "img.u8")
        img2.tofile(rgb_path)
        main(["--preprocess", path, rgb_path, "100", "40", pix_path])  # align 8: 12.5 -> 13 columns
        assert target_size(Gemma4V(gguf_numpy.GgufFile(path)), 100, 40) == (104, 40)
    print("gemma4v_numpy self-test: ok (vectorised vs brute force %.2g)" % worst)


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    if len(argv) == 6 and argv[0] == "--preprocess":
        m = Gemma4V(gguf_numpy.GgufFile(argv[1]))
        w, h = int(argv[3]), int(argv[4])
        rgb = np.fromfile(argv[2], dtype=np.uint8)
        if rgb.size != w * h * 3:
            raise ValueError("%s: %d bytes, want %d x %d x 3" % (argv[2], rgb.size, h, w))
        (tw, th), px = preprocess(m, rgb.reshape(h, w, 3))
        px.astype("<f4").tofile(argv[5])
        print("%d %d" % (tw, th))
        return 0
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    m = Gemma4V(gguf_numpy.GgufFile(argv[0]))
    h, w = int(argv[2]), int(argv[3])
    pixels = np.fromfile(argv[1], dtype="<f4")
    if pixels.size != 3 * h * w:
        raise ValueError("%s: %d floats, want 3 x %d x %d" % (argv[1], pixels.size, h, w))
    encode_model(m, pixels.reshape(3, h, w)).astype("<f4").tofile(argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
