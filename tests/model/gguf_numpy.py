"""GGUF reader and ggml dequantizers in plain numpy: the independent half of the
numpy reference check (tests/model/numpy_reference_test.py).

Written from the GGUF file-format spec (ggml docs/gguf.md) and the ggml block
layouts (ggml-common.h) / decode rules (dequantize_row_* in ggml-quants.c).
It shares no code with pagoda's C++ reader, on purpose.

Contract:
- GgufFile(path) reads the whole file into memory and parses the header,
  metadata and tensor infos; it raises GgufError (one line, naming the file)
  on anything malformed. Supports GGUF v2 and v3 (v1 used 32-bit counts and is
  not supported).
- GgufFile.tensor(name) dequantizes one tensor to float32 with the numpy shape
  reversed from the GGUF dims: a GGUF [cols, rows] matrix comes back as
  (rows, cols), so y = W @ x. 1-D tensors come back as (n,).
- dequantize(raw_bytes, ggml_type, n_values) is the flat decoder; it is
  vectorised over blocks. Arithmetic is float32 in the same order as ggml's
  scalar reference, so decoded weights are bit-identical to ggml's in the
  common case (an FMA-contracting C compiler may differ in the last bit of
  Q4_1 / Q5_1 / K-quant values; irrelevant at the tolerances used).
- write_gguf() is a minimal writer used only by the self-test (parser round
  trip); it is not used to make the models pagoda is compared on.

Run `/usr/bin/python3 gguf_numpy.py` to self-test (scalar vs vectorised
decoders on random blocks, writer/reader round trip).
"""

import struct

import numpy as np


class GgufError(Exception):
    pass


# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------

# GGUF metadata value types.
GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16 = 0, 1, 2, 3
GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL = 4, 5, 6, 7
GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64 = 8, 9, 10, 11, 12

# Fixed-size scalar value types: struct format (little-endian) and numpy dtype.
_SCALAR_FORMATS = {
    GGUF_UINT8: ("<B", "<u1"),
    GGUF_INT8: ("<b", "<i1"),
    GGUF_UINT16: ("<H", "<u2"),
    GGUF_INT16: ("<h", "<i2"),
    GGUF_UINT32: ("<I", "<u4"),
    GGUF_INT32: ("<i", "<i4"),
    GGUF_FLOAT32: ("<f", "<f4"),
    GGUF_BOOL: ("<?", "<u1"),
    GGUF_UINT64: ("<Q", "<u8"),
    GGUF_INT64: ("<q", "<i8"),
    GGUF_FLOAT64: ("<d", "<f8"),
}

# ggml tensor types: id -> (name, values per block, bytes per block).
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 10, 11, 12, 13, 14, 30
IQ4_NL, IQ4_XS, MXFP4 = 20, 23, 39
QK = 32     # values per block of the 32-wide formats
QK_K = 256  # values per super-block of the K-quants
GGML_TYPES = {
    F32: ("F32", 1, 4),
    F16: ("F16", 1, 2),
    BF16: ("BF16", 1, 2),
    Q4_0: ("Q4_0", QK, 2 + QK // 2),                      # d, qs[16]
    Q4_1: ("Q4_1", QK, 2 + 2 + QK // 2),                  # d, m, qs[16]
    Q5_0: ("Q5_0", QK, 2 + 4 + QK // 2),                  # d, qh[4], qs[16]
    Q5_1: ("Q5_1", QK, 2 + 2 + 4 + QK // 2),              # d, m, qh[4], qs[16]
    Q8_0: ("Q8_0", QK, 2 + QK),                           # d, qs[32]
    Q4_K: ("Q4_K", QK_K, 2 + 2 + 12 + QK_K // 2),         # d, dmin, scales[12], qs[128]
    Q5_K: ("Q5_K", QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),  # ... qh[32], qs[128]
    Q6_K: ("Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),  # ql, qh, scales, d
    Q2_K: ("Q2_K", QK_K, QK_K // 16 + QK_K // 4 + 2 + 2),  # scales[16], qs[64], d, dmin
    Q3_K: ("Q3_K", QK_K, QK_K // 8 + QK_K // 4 + 12 + 2),  # hmask[32], qs[64], scales[12], d
    IQ4_NL: ("IQ4_NL", QK, 2 + QK // 2),                  # d, qs[16]
    IQ4_XS: ("IQ4_XS", QK_K, 2 + 2 + QK_K // 64 + QK_K // 2),  # d, scales_h, scales_l[4], qs[128]
    MXFP4: ("MXFP4", QK, 1 + QK // 2),                    # e (E8M0), qs[16]
}

# ggml's kvalues_iq4nl (the non-linear IQ4 codebook) and kvalues_mxfp4 (the e2m1
# values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled to integers).
IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)


def type_name(ggml_type):
    return GGML_TYPES[ggml_type][0] if ggml_type in GGML_TYPES else "type%d" % ggml_type


# ---------------------------------------------------------------------------
# Dequantizers. Each takes a uint8 array of whole blocks, shape (n_blocks,
# block_bytes), and returns float32 values, shape (n_blocks, values_per_block).
# ---------------------------------------------------------------------------

def _f16(blocks, start):
    """The little-endian f16 at byte `start` of each block, as float32, shape (n_blocks, 1)."""
    return np.ascontiguousarray(blocks[:, start:start + 2]).view("<f2").astype(np.float32)


def _nibbles_lo_then_hi(qs):
    """qs: (n, 16) bytes -> (n, 32): low nibbles are values 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh4):
    """qh4: (n, 4) bytes = one little-endian uint32 per block; bit j is the
    fifth bit (value 16) of value j. Returns (n, 32) of 0/16."""
    qh = np.ascontiguousarray(qh4).view("<u4")                 # (n, 1)
    return (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _deq_q4_0(b):
    # x = d * (q - 8)
    d = _f16(b, 0)
    q = _nibbles_lo_then_hi(b[:, 2:18]).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def _deq_q4_1(b):
    # x = d * q + m
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles_lo_then_hi(b[:, 4:20])
    return d * q.astype(np.float32) + m


def _deq_q5_0(b):
    # x = d * (q - 16), q = nibble | fifth bit from qh
    d = _f16(b, 0)
    q = _nibbles_lo_then_hi(b[:, 6:22]) | _fifth_bits(b[:, 2:6])
    return d * (q.astype(np.float32) - np.float32(16))


def _deq_q5_1(b):
    # x = d * q + m
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles_lo_then_hi(b[:, 8:24]) | _fifth_bits(b[:, 4:8])
    return d * q.astype(np.float32) + m


def _deq_q8_0(b):
    # x = d * q, q int8
    d = _f16(b, 0)
    q = np.ascontiguousarray(b[:, 2:34]).view(np.int8)
    return d * q.astype(np.float32)


def _k_scales_mins(s):
    """Unpack the 12-byte K-quant scale field into 8 six-bit scales and 8 six-bit mins.

    Sub-blocks 0..3: scale = low 6 bits of s[j], min = low 6 bits of s[j+4].
    Sub-blocks 4..7: low 4 bits from s[j+4] (scale: low nibble, min: high nibble),
    high 2 bits from the top 2 bits of s[j-4] (scale) and s[j] (min).
    s: (n, 12) uint8 -> (scales (n, 8), mins (n, 8)) uint8.
    """
    lo_sc = s[:, 0:4] & 63
    lo_m = s[:, 4:8] & 63
    hi_sc = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    hi_m = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return np.concatenate([lo_sc, hi_sc], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def _k4_nibbles(qs):
    """qs: (n, 128) -> (n, 8, 32). Chunk c (of 4) holds 32 bytes: their low
    nibbles are sub-block 2c, their high nibbles sub-block 2c+1."""
    qs = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)


def _deq_q4_k(b):
    # Sub-block s (32 values): x = (d * sc[s]) * q - (dmin * m[s])
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales_mins(b[:, 4:16])
    q = _k4_nibbles(b[:, 16:144])
    d1 = (d * sc.astype(np.float32))[:, :, None]
    m1 = (dmin * m.astype(np.float32))[:, :, None]
    return (d1 * q.astype(np.float32) - m1).reshape(-1, QK_K)


def _deq_q5_k(b):
    # As Q4_K, plus a fifth bit: bit s of qh[l] is the high bit of value l of sub-block s.
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]
    q = _k4_nibbles(b[:, 48:176])
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4
    q = q | high
    d1 = (d * sc.astype(np.float32))[:, :, None]
    m1 = (dmin * m.astype(np.float32))[:, :, None]
    return (d1 * q.astype(np.float32) - m1).reshape(-1, QK_K)


def _deq_q6_k(b):
    # 256 values in two halves of 128; half h uses ql[64h:64h+64], qh[32h:32h+32].
    # Within a half, quarter k (32 values, l = 0..31):
    #   k=0: ql[l]    low nibble,  qh[l] bits 0-1
    #   k=1: ql[l+32] low nibble,  qh[l] bits 2-3
    #   k=2: ql[l]    high nibble, qh[l] bits 4-5
    #   k=3: ql[l+32] high nibble, qh[l] bits 6-7
    # q = low4 | high2 << 4, x = (d * scales[e // 16]) * (q - 32) for value e.
    ql = b[:, 0:128].reshape(-1, 2, 1, 2, 32)        # (n, half, -, part, l)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32)         # (n, half, -, l)
    scales = np.ascontiguousarray(b[:, 192:208]).view(np.int8)  # (n, 16)
    d = _f16(b, 208)
    low4 = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(-1, 2, 4, 32)  # k = nib*2 + part
    shifts = (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]
    high2 = (qh >> shifts) & 3                       # (n, half, k, l)
    q = (low4 | (high2 << 4)).reshape(-1, QK_K).astype(np.float32) - np.float32(32)
    dl = d * np.repeat(scales.astype(np.float32), 16, axis=1)   # (n, 256)
    return dl * q


def _low2_codes(qs):
    """Q2_K / Q3_K qs: (n, 64) -> (n, 256) 2-bit codes. Half h (128 values) owns
    qs[32h:32h+32]; its quarter j (32 values) is bits 2j..2j+1 of those bytes."""
    qs = qs.reshape(-1, 2, 1, 32)
    shifts = (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]
    return ((qs >> shifts) & 3).reshape(-1, QK_K)


def _deq_q2_k(b):
    # Sub-block i (16 values): x = (d * (scales[i] & 15)) * q - dmin * (scales[i] >> 4)
    scales = b[:, 0:16]
    d, dmin = _f16(b, 80), _f16(b, 82)
    q = _low2_codes(b[:, 16:80]).astype(np.float32)
    dl = np.repeat(d * (scales & 0x0F).astype(np.float32), 16, axis=1)
    ml = np.repeat(dmin * (scales >> 4).astype(np.float32), 16, axis=1)
    return dl * q - ml


def _deq_q3_k(b):
    # q = low2 - 4 unless the hmask bit is set (bit 4h + j of hmask[l]), in -4..3;
    # x = (d * (s - 32)) * q with s the 6-bit scale of sub-block i:
    # low 4 bits: scales[i] & 15 (i < 8) or scales[i - 8] >> 4; high 2 bits:
    # bits 2 (i // 4) .. +1 of scales[8 + i % 4].
    hmask, scales = b[:, 0:32], b[:, 96:108]
    d = _f16(b, 108)
    low2 = _low2_codes(b[:, 32:96]).astype(np.int8)
    hshift = np.arange(8, dtype=np.uint8).reshape(1, 2, 4, 1)    # (h, j) -> 4h + j
    hbit = ((hmask.reshape(-1, 1, 1, 32) >> hshift) & 1).reshape(-1, QK_K).astype(np.int8)
    q = low2 - np.int8(4) * (np.int8(1) - hbit)
    i = np.arange(16)
    low4 = np.concatenate([scales[:, 0:8] & 0x0F, scales[:, 0:8] >> 4], axis=1)
    high2 = (scales[:, 8 + i % 4] >> (2 * (i // 4)).astype(np.uint8)) & 3
    s = (low4 | (high2 << 4)).astype(np.int32) - 32
    dl = np.repeat(d * s.astype(np.float32), 16, axis=1)
    return dl * q.astype(np.float32)


def _deq_iq4_nl(b):
    # x = d * IQ4NL_VALUES[index], indices in Q4_0's nibble order
    d = _f16(b, 0)
    return d * IQ4NL_VALUES[_nibbles_lo_then_hi(b[:, 2:18])].astype(np.float32)


def _deq_iq4_xs(b):
    # Sub-block j (32 values): ls = nibble j % 2 of scales_l[j // 2] | bits 2j..2j+1 of
    # the uint16 scales_h << 4; x = (d * (ls - 32)) * IQ4NL_VALUES[index], each
    # sub-block's 16 bytes in IQ4_NL's nibble order.
    d = _f16(b, 0)
    scales_h = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)    # (n, 1)
    scales_l = b[:, 4:8].astype(np.int32)
    j = np.arange(8)
    ls = ((scales_l[:, j // 2] >> (4 * (j % 2))) & 0x0F) | (((scales_h >> (2 * j)) & 3) << 4)
    dl = (d * (ls - 32).astype(np.float32))[:, :, None]                          # (n, 8, 1)
    qs = b[:, 8:136].reshape(-1, 8, 16)
    idx = np.concatenate([qs & 0x0F, qs >> 4], axis=2)                          # (n, 8, 32)
    return (dl * IQ4NL_VALUES[idx].astype(np.float32)).reshape(-1, QK_K)


def e8m0_to_f32_half(e):
    """E8M0 bytes -> 2^(e - 128) as float32 (ggml's halved scale), exact: the f32
    exponent field e - 1 for e >= 2, the subnormals 2^-127 / 2^-128 for e = 1 / 0."""
    e = np.asarray(e).astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _deq_mxfp4(b):
    # x = MXFP4_VALUES[index] * 2^(e - 128), indices in Q4_0's nibble order
    d = e8m0_to_f32_half(b[:, 0:1])
    with np.errstate(over="ignore"):  # 12 x 2^127 is inf in float32, as in C
        return MXFP4_VALUES[_nibbles_lo_then_hi(b[:, 1:17])].astype(np.float32) * d


def _deq_f32(raw):
    return raw.view("<f4").astype(np.float32)


def _deq_f16(raw):
    return raw.view("<f2").astype(np.float32)


def _deq_bf16(raw):
    # bfloat16 is the top 16 bits of an IEEE float32.
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


_BLOCK_DECODERS = {
    Q4_0: _deq_q4_0, Q4_1: _deq_q4_1, Q5_0: _deq_q5_0, Q5_1: _deq_q5_1,
    Q8_0: _deq_q8_0, Q4_K: _deq_q4_k, Q5_K: _deq_q5_k, Q6_K: _deq_q6_k,
    Q2_K: _deq_q2_k, Q3_K: _deq_q3_k, IQ4_NL: _deq_iq4_nl, IQ4_XS: _deq_iq4_xs, MXFP4: _deq_mxfp4,
}
_PLAIN_DECODERS = {F32: _deq_f32, F16: _deq_f16, BF16: _deq_bf16}


def dequantize(raw, ggml_type, n_values):
    """raw: uint8 array holding exactly n_values of ggml_type -> float32 (n_values,)."""
    if ggml_type not in GGML_TYPES:
        raise GgufError("unsupported tensor type %s" % type_name(ggml_type))
    _, block_values, block_bytes = GGML_TYPES[ggml_type]
    if n_values % block_values != 0:
        raise GgufError("%d values is not a whole number of %s blocks" % (n_values, type_name(ggml_type)))
    n_blocks = n_values // block_values
    raw = np.asarray(raw, dtype=np.uint8)
    if raw.size != n_blocks * block_bytes:
        raise GgufError("%s: expected %d bytes, got %d" % (type_name(ggml_type), n_blocks * block_bytes, raw.size))
    if ggml_type in _PLAIN_DECODERS:
        return _PLAIN_DECODERS[ggml_type](np.ascontiguousarray(raw))
    blocks = raw.reshape(n_blocks, block_bytes)
    return _BLOCK_DECODERS[ggml_type](blocks).reshape(n_values).astype(np.float32)


# ---------------------------------------------------------------------------
# File reader
# ---------------------------------------------------------------------------

class TensorInfo:
    def __init__(self, name, dims, ggml_type, offset):
        self.name = name
        self.dims = dims            # GGUF/ggml order: dims[0] is the contiguous (column) dim
        self.ggml_type = ggml_type
        self.offset = offset        # relative to the start of the data section
        self.n_values = int(np.prod(dims, dtype=np.int64)) if dims else 1

    @property
    def shape(self):
        """numpy shape: GGUF dims reversed, so a [cols, rows] matrix is (rows, cols)."""
        return tuple(reversed(self.dims))

    @property
    def n_bytes(self):
        _, block_values, block_bytes = GGML_TYPES[self.ggml_type]
        return self.n_values // block_values * block_bytes

    def __repr__(self):
        return "TensorInfo(%s, dims=%s, %s)" % (self.name, self.dims, type_name(self.ggml_type))


class _Cursor:
    """Little-endian reader over the file bytes with bounds checks."""

    def __init__(self, data, path):
        self.data = data
        self.pos = 0
        self.path = path

    def fail(self, what):
        raise GgufError("%s: %s (at byte %d)" % (self.path, what, self.pos))

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            self.fail("truncated: need %d bytes" % n)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def scalar(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self):
        return self.scalar("<I")

    def u64(self):
        return self.scalar("<Q")

    def string(self):
        n = self.u64()
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype, depth=0):
        if vtype in _SCALAR_FORMATS:
            v = self.scalar(_SCALAR_FORMATS[vtype][0])
            return bool(v) if vtype == GGUF_BOOL else v
        if vtype == GGUF_STRING:
            return self.string()
        if vtype == GGUF_ARRAY:
            if depth > 8:
                self.fail("arrays nested too deep")
            elem_type = self.u32()
            count = self.u64()
            if elem_type in _SCALAR_FORMATS:
                # Fixed-size elements: one numpy view, converted to a list.
                fmt, dtype = _SCALAR_FORMATS[elem_type]
                raw = self.take(count * struct.calcsize(fmt))
                items = np.frombuffer(raw, dtype=dtype).tolist()
                return [bool(x) for x in items] if elem_type == GGUF_BOOL else items
            if elem_type not in (GGUF_STRING, GGUF_ARRAY):
                self.fail("unknown array element type %d" % elem_type)
            if count > len(self.data) - self.pos:  # each element takes >= 8 bytes
                self.fail("array count %d exceeds the file" % count)
            return [self.value(elem_type, depth + 1) for _ in range(count)]
        self.fail("unknown metadata value type %d" % vtype)


class GgufFile:
    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            self.data = f.read()
        cur = _Cursor(self.data, self.path)
        if cur.take(4) != b"GGUF":
            cur.fail("not a GGUF file (bad magic)")
        self.version = cur.u32()
        if self.version not in (2, 3):
            cur.fail("unsupported GGUF version %d (want 2 or 3)" % self.version)
        n_tensors = cur.u64()
        n_kv = cur.u64()
        if n_tensors > len(self.data) or n_kv > len(self.data):
            cur.fail("tensor/kv counts exceed the file size")

        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            if key in self.metadata:
                cur.fail("duplicate metadata key %r" % key)
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = vtype

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if not 1 <= n_dims <= 4:
                cur.fail("tensor %r has %d dims" % (name, n_dims))
            dims = [cur.u64() for _ in range(n_dims)]
            ggml_type = cur.u32()
            offset = cur.u64()
            if name in self.tensors:
                cur.fail("duplicate tensor %r" % name)
            self.tensors[name] = TensorInfo(name, dims, ggml_type, offset)

        self.alignment = int(self.metadata.get("general.alignment", 32))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            cur.fail("general.alignment %d is not a power of two" % self.alignment)
        self.data_offset = (cur.pos + self.alignment - 1) // self.alignment * self.alignment

        for t in self.tensors.values():
            if t.offset % self.alignment:
                raise GgufError("%s: tensor %s offset %d not aligned to %d"
                                % (self.path, t.name, t.offset, self.alignment))
            if t.ggml_type in GGML_TYPES:
                block_values = GGML_TYPES[t.ggml_type][1]
                if t.dims[0] % block_values:
                    raise GgufError("%s: tensor %s dim0 %d is not a multiple of %s block size %d"
                                    % (self.path, t.name, t.dims[0], type_name(t.ggml_type), block_values))
                end = self.data_offset + t.offset + t.n_bytes
                if end > len(self.data):
                    raise GgufError("%s: tensor %s ends at byte %d, past the end of the file (%d)"
                                    % (self.path, t.name, end, len(self.data)))

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def has_tensor(self, name):
        return name in self.tensors

    def raw(self, name):
        """The tensor's bytes as a uint8 array (no copy)."""
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return np.frombuffer(self.data, dtype=np.uint8, count=t.n_bytes, offset=start)

    def tensor(self, name):
        """Dequantized float32 array with numpy shape = reversed GGUF dims."""
        if name not in self.tensors:
            raise GgufError("%s: no tensor %r" % (self.path, name))
        t = self.tensors[name]
        if t.ggml_type not in GGML_TYPES:
            raise GgufError("%s: tensor %s has unsupported type %s" % (self.path, name, type_name(t.ggml_type)))
        return dequantize(self.raw(name), t.ggml_type, t.n_values).reshape(t.shape)


# ---------------------------------------------------------------------------
# Minimal writer (self-test only)
# ---------------------------------------------------------------------------

def _pack_value(vtype, value):
    if vtype in _SCALAR_FORMATS:
        return struct.pack(_SCALAR_FORMATS[vtype][0], value)
    if vtype == GGUF_STRING:
        raw = value.encode("utf-8")
        return struct.pack("<Q", len(raw)) + raw
    if vtype == GGUF_ARRAY:
        elem_type, items = value
        out = struct.pack("<IQ", elem_type, len(items))
        return out + b"".join(_pack_value(elem_type, x) for x in items)
    raise ValueError(vtype)


def write_gguf(path, metadata, tensors, version=3, alignment=32):
    """metadata: list of (key, vtype, value); an ARRAY value is (elem_type, items),
    nested arrays as (GGUF_ARRAY, [(elem_type, items), ...]).
    tensors: list of (name, dims in GGUF order, ggml_type, raw bytes)."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, vtype, value in metadata:
        out += _pack_value(GGUF_STRING, key) + struct.pack("<I", vtype) + _pack_value(vtype, value)
    offset = 0
    offsets = []
    for name, dims, ggml_type, raw in tensors:
        offsets.append(offset)
        out += _pack_value(GGUF_STRING, name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += (len(raw) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for (_, _, _, raw), off in zip(tensors, offsets):
        assert len(out) % alignment == 0
        out += raw
        out += b"\0" * (-len(out) % alignment)
    with open(path, "wb") as f:
        f.write(bytes(out))


# ---------------------------------------------------------------------------
# Self-test: scalar decoders written straight from the block spec, one value at
# a time, compared with the vectorised ones on random blocks.
# ---------------------------------------------------------------------------

def _scalar_decode(ggml_type, block):
    """One block (bytes) -> list of float32 values, the ggml dequantize_row_* loops."""
    f32 = np.float32
    half = lambda off: f32(np.frombuffer(block[off:off + 2], "<f2")[0])
    out = [f32(0)] * GGML_TYPES[ggml_type][1]
    if ggml_type in (Q4_0, Q4_1, Q5_0, Q5_1):
        d = half(0)
        m = half(2) if ggml_type in (Q4_1, Q5_1) else None
        qh = 0
        if ggml_type == Q5_0:
            qh = struct.unpack("<I", block[2:6])[0]
        if ggml_type == Q5_1:
            qh = struct.unpack("<I", block[4:8])[0]
        qs = block[{Q4_0: 2, Q4_1: 4, Q5_0: 6, Q5_1: 8}[ggml_type]:]
        for j in range(16):
            x0, x1 = qs[j] & 0x0F, qs[j] >> 4
            if ggml_type in (Q5_0, Q5_1):
                x0 |= ((qh >> j) & 1) << 4
                x1 |= ((qh >> (j + 16)) & 1) << 4
            if ggml_type == Q4_0:
                x0, x1 = x0 - 8, x1 - 8
            if ggml_type == Q5_0:
                x0, x1 = x0 - 16, x1 - 16
            if m is None:
                out[j], out[j + 16] = f32(x0) * d, f32(x1) * d
            else:
                out[j], out[j + 16] = f32(x0) * d + m, f32(x1) * d + m
    elif ggml_type == Q8_0:
        d = half(0)
        for j in range(32):
            out[j] = f32(struct.unpack("<b", block[2 + j:3 + j])[0]) * d
    elif ggml_type in (Q4_K, Q5_K):
        d, dmin = half(0), half(2)
        s = block[4:16]

        def scale_min(j):
            if j < 4:
                return s[j] & 63, s[j + 4] & 63
            return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)

        qh = block[16:48] if ggml_type == Q5_K else None
        q = block[48:] if ggml_type == Q5_K else block[16:]
        y = 0
        for c in range(4):  # 64 values per step
            sc1, m1 = scale_min(2 * c)
            sc2, m2 = scale_min(2 * c + 1)
            d1, dm1, d2, dm2 = d * f32(sc1), dmin * f32(m1), d * f32(sc2), dmin * f32(m2)
            for l in range(32):
                v = q[32 * c + l] & 0xF
                if qh is not None and qh[l] & (1 << (2 * c)):
                    v += 16
                out[y + l] = d1 * f32(v) - dm1
            for l in range(32):
                v = q[32 * c + l] >> 4
                if qh is not None and qh[l] & (2 << (2 * c)):
                    v += 16
                out[y + 32 + l] = d2 * f32(v) - dm2
            y += 64
    elif ggml_type == Q6_K:
        ql, qh = block[0:128], block[128:192]
        sc = struct.unpack("<16b", block[192:208])
        d = half(208)
        for n in range(2):
            for l in range(32):
                is_ = 8 * n + l // 16
                a = ql[64 * n + l]
                b = ql[64 * n + l + 32]
                h = qh[32 * n + l]
                q1 = ((a & 0xF) | (((h >> 0) & 3) << 4)) - 32
                q2 = ((b & 0xF) | (((h >> 2) & 3) << 4)) - 32
                q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32
                q4 = ((b >> 4) | (((h >> 6) & 3) << 4)) - 32
                base = 128 * n
                out[base + l] = d * f32(sc[is_ + 0]) * f32(q1)
                out[base + l + 32] = d * f32(sc[is_ + 2]) * f32(q2)
                out[base + l + 64] = d * f32(sc[is_ + 4]) * f32(q3)
                out[base + l + 96] = d * f32(sc[is_ + 6]) * f32(q4)
    elif ggml_type in (Q2_K, Q3_K):
        # ggml's loops: two halves of 128 (32 bytes of qs each), four shifts, and per
        # shift two runs of 16 values with their own scale. Q3_K's scales unpacked
        # with ggml's 32-bit mask arithmetic (kmask1/kmask2), not per scale.
        if ggml_type == Q2_K:
            sc_bytes, q = block[0:16], block[16:80]
            d, dmin = half(80), half(82)
        else:
            hm, q, raw = block[0:32], block[32:96], block[96:108]
            d = half(108)
            a = list(struct.unpack("<3I", raw))
            tmp = a[2]
            k1, k2 = 0x03030303, 0x0F0F0F0F
            aux = [(a[0] & k2) | (((tmp >> 0) & k1) << 4), (a[1] & k2) | (((tmp >> 2) & k1) << 4),
                   ((a[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4), ((a[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)]
            sc6 = struct.unpack("<16b", struct.pack("<4I", *aux))
        y, is_, m = 0, 0, 1
        for n in range(2):
            shift = 0
            for j in range(4):
                for part in range(2):
                    if ggml_type == Q2_K:
                        sc = sc_bytes[is_]
                        dl, ml = d * f32(sc & 0xF), dmin * f32(sc >> 4)
                    else:
                        dl = d * f32(sc6[is_] - 32)
                    is_ += 1
                    for l in range(16 * part, 16 * part + 16):
                        v = (q[32 * n + l] >> shift) & 3
                        if ggml_type == Q2_K:
                            out[y] = dl * f32(v) - ml
                        else:
                            out[y] = dl * f32(v - (0 if hm[l] & m else 4))
                        y += 1
                shift += 2
                m <<= 1
    elif ggml_type in (IQ4_NL, MXFP4):
        if ggml_type == IQ4_NL:
            d, qs, table = half(0), block[2:18], IQ4NL_VALUES
        else:
            d = f32(2.0 ** (block[0] - 128))  # exact in float64, representable in float32
            qs, table = block[1:17], MXFP4_VALUES
        for j in range(16):
            out[j] = d * f32(table[qs[j] & 0xF])
            out[j + 16] = d * f32(table[qs[j] >> 4])
    elif ggml_type == IQ4_XS:
        d = half(0)
        scales_h = struct.unpack("<H", block[2:4])[0]
        scales_l, qs = block[4:8], block[8:136]
        for ib in range(8):
            ls = ((scales_l[ib // 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4)
            dl = d * f32(ls - 32)
            for j in range(16):
                out[32 * ib + j] = dl * f32(IQ4NL_VALUES[qs[16 * ib + j] & 0xF])
                out[32 * ib + j + 16] = dl * f32(IQ4NL_VALUES[qs[16 * ib + j] >> 4])
    else:
        raise ValueError(ggml_type)
    return out


def _random_blocks(ggml_type, n_blocks, rng):
    """Random block bytes with the f16 scale fields set to finite values."""
    _, _, block_bytes = GGML_TYPES[ggml_type]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    half_offsets = {Q4_0: [0], Q4_1: [0, 2], Q5_0: [0], Q5_1: [0, 2], Q8_0: [0],
                    Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208], Q2_K: [80, 82], Q3_K: [108],
                    IQ4_NL: [0], IQ4_XS: [0], MXFP4: []}[ggml_type]
    for off in half_offsets:
        vals = rng.uniform(-0.1, 0.1, size=n_blocks).astype("<f2")
        blocks[:, off:off + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def self_test(verbose=True):
    """Raises AssertionError on failure."""
    import os
    import tempfile

    rng = np.random.default_rng(1234)
    for ggml_type in (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4):
        blocks = _random_blocks(ggml_type, 7, rng)
        if ggml_type == MXFP4:  # every exponent: subnormal scales (e = 0, 1) up to 2^127
            blocks = _random_blocks(ggml_type, 256, rng)
            blocks[:, 0] = np.arange(256, dtype=np.uint8)
        got = dequantize(blocks.reshape(-1), ggml_type, blocks.shape[0] * GGML_TYPES[ggml_type][1])
        with np.errstate(over="ignore"):
            want = np.concatenate([np.array(_scalar_decode(ggml_type, bytes(b)), np.float32) for b in blocks])
        bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
        assert bad.size == 0, "%s: vectorised != scalar at value %d: %r vs %r" % (
            type_name(ggml_type), bad[0], got[bad[0]], want[bad[0]])
        if verbose:
            print("  dequant %-6s vectorised == scalar on %d random blocks" % (type_name(ggml_type), blocks.shape[0]))

    # Hand-made Q4_0 block: d = 1, byte j = (lo=j%16, hi=15-j%16) -> element j = j-8, element 16+j = 7-j.
    blk = np.zeros(18, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:18] = [(j & 0xF) | ((15 - j) << 4) for j in range(16)]
    want = np.array([j - 8 for j in range(16)] + [7 - j for j in range(16)], np.float32)
    assert np.array_equal(dequantize(blk, Q4_0, 32), want), "Q4_0 nibble order"

    # F16 / BF16 exact decodes.
    assert np.array_equal(dequantize(np.array([0x00, 0x3C, 0x00, 0xC0], np.uint8), F16, 2), [1.0, -2.0])
    assert np.array_equal(dequantize(np.array([0x80, 0x3F, 0x40, 0xC0], np.uint8), BF16, 2), [1.0, -3.0])

    # Writer/reader round trip: every value type, a nested array, v2 and v3, odd alignment.
    meta = [
        ("general.architecture", GGUF_STRING, "llama"),
        ("u8", GGUF_UINT8, 200), ("i8", GGUF_INT8, -5), ("u16", GGUF_UINT16, 60000),
        ("i16", GGUF_INT16, -30000), ("u32", GGUF_UINT32, 4000000000), ("i32", GGUF_INT32, -7),
        ("f32", GGUF_FLOAT32, 0.5), ("b", GGUF_BOOL, True), ("u64", GGUF_UINT64, 2 ** 40),
        ("i64", GGUF_INT64, -(2 ** 40)), ("f64", GGUF_FLOAT64, 1e-300),
        ("strs", GGUF_ARRAY, (GGUF_STRING, ["a", "", "\u2581x\u00e9"])),
        ("ints", GGUF_ARRAY, (GGUF_INT32, [1, -2, 3])),
        ("nested", GGUF_ARRAY, (GGUF_ARRAY, [(GGUF_UINT8, [1, 2]), (GGUF_STRING, ["z"])])),
    ]
    w = rng.standard_normal((3, 64)).astype(np.float32)
    q_blocks = _random_blocks(Q8_0, 6, rng)
    for version, alignment in ((2, 32), (3, 64)):
        m = meta + ([("general.alignment", GGUF_UINT32, alignment)] if alignment != 32 else [])
        tensors = [("w", [64, 3], F32, w.tobytes()), ("q", [64, 3], Q8_0, q_blocks.tobytes()),
                   ("v", [5], F16, np.arange(5, dtype="<f2").tobytes())]
        fd, path = tempfile.mkstemp(suffix=".gguf")
        os.close(fd)
        try:
            write_gguf(path, m, tensors, version=version, alignment=alignment)
            g = GgufFile(path)
        finally:
            os.unlink(path)
        assert g.version == version and g.alignment == alignment and g.data_offset % alignment == 0
        for key, vtype, value in meta:
            got = g.metadata[key]
            if vtype == GGUF_ARRAY:
                elem_type, items = value
                want = [x[1] for x in items] if elem_type == GGUF_ARRAY else items
            else:
                want = value
            if vtype == GGUF_FLOAT32:
                want = float(np.float32(want))
            assert got == want, "metadata %s: %r != %r" % (key, got, want)
        assert g.tensors["w"].shape == (3, 64)
        assert np.array_equal(g.tensor("w"), w)
        assert np.array_equal(g.tensor("q").reshape(-1), dequantize(q_blocks.reshape(-1), Q8_0, 192))
        assert np.array_equal(g.tensor("v"), np.arange(5, dtype=np.float32))
        if verbose:
            print("  GGUF v%d alignment %d: metadata (all types, nested arrays) and tensors round-trip"
                  % (version, alignment))


if __name__ == "__main__":
    self_test()
    print("gguf_numpy self-test: OK")
