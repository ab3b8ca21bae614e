// WeightMatrix::prepare (repacking), the matmul dispatcher and work split, the
// scalar kernels, and matmul_reference. The SIMD kernels are in
// matmul_avx2.cpp / matmul_avx512.cpp; the layout they read is described in
// matmul_impl.h.
//
// Work split: the output [n_tokens, n_rows] is cut into tiles of
// tile_rows() rows x kTileTokens tokens, claimed by the pool's threads through
// its task counter. The tiling depends only on the shape and the ISA, never
// on the thread count, and every output element is computed by one tile with
// a fixed order of operations, so results are bit-identical for any number of
// threads (a test pins this).
#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernels/matmul_impl.h"

namespace pagoda {

using namespace matmul_detail;

namespace {

// PAGODA_AVX512_EMULATION: the test-only build of matmul_avx512_emu.h, where
// the AVX-512 kernels run through SIMDe on any x86-64 CPU.
#ifdef PAGODA_AVX512_EMULATION
constexpr bool kEmulatedAvx512 = true;
#else
constexpr bool kEmulatedAvx512 = false;
#endif
bool isa_runs(Isa isa) { return kEmulatedAvx512 || isa_supported(isa); }
bool has_avx512bf16() { return kEmulatedAvx512 || cpu_features().avx512bf16; }

// ---- scalar decoding of one GGUF block into unsigned codes + scales ----

// One unit (32 values for the 32-wide formats, 256 for the K-quants) of one row.
struct UnitCodes {
  uint8_t c[256];   // unsigned codes (see matmul_impl.h for their meaning)
  float d = 0;      // f16 scale widened
  float m = 0;      // Q4_1/Q5_1 min, K-quant dmin
  f16_t d_bits = 0, m_bits = 0;  // the raw f16 words (copied into packed units)
  // Q4_K/Q5_K: 8 x 6-bit scales; Q2_K: 16 x 4-bit scales; Q6_K: 16 x int8 scales,
  // Q3_K: 16 x (scale - 32), IQ4_XS: 8 x (scale - 32), as int8 (stored as bytes)
  uint8_t sc[16];
  uint8_t mn[16];   // Q4_K/Q5_K: 8 x 6-bit mins; Q2_K: 16 x 4-bit mins
};

// The codebook formats: codes c are 4-bit table indices, a value is table[c] times
// the scale (see matmul_impl.h).
bool is_codebook(GgmlType t) { return t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS || t == GgmlType::MXFP4; }
const int8_t* codebook(GgmlType t) { return t == GgmlType::MXFP4 ? kMxfp4Values : kIq4nlValues; }

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (ggml's
// get_scale_min_k4 packing: 8 scales and 8 mins in 12 bytes).
void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Requires: `type` is a quantized weight type; `blk` points at one GGUF block.
void decode_unit(GgmlType type, const uint8_t* blk, UnitCodes& u) {
  auto set_d = [&](f16_t d) { u.d_bits = d; u.d = f16_to_f32(d); };
  auto set_m = [&](f16_t m) { u.m_bits = m; u.m = f16_to_f32(m); };
  switch (type) {
    case GgmlType::Q8_0: {
      BlockQ8_0 b;
      std::memcpy(&b, blk, sizeof b);
      set_d(b.d);
      for (int j = 0; j < 32; ++j) u.c[j] = static_cast<uint8_t>(b.qs[j] + 128);
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const uint8_t* qs;
      if (type == GgmlType::Q4_0) {
        BlockQ4_0 b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        qs = blk + offsetof(BlockQ4_0, qs);
      } else {
        BlockQ4_1 b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        set_m(b.m);
        qs = blk + offsetof(BlockQ4_1, qs);
      }
      for (int j = 0; j < 16; ++j) {
        u.c[j] = qs[j] & 0xF;
        u.c[j + 16] = qs[j] >> 4;
      }
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const uint8_t *qs, *qhp;
      if (type == GgmlType::Q5_0) {
        BlockQ5_0 b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        qs = blk + offsetof(BlockQ5_0, qs);
        qhp = blk + offsetof(BlockQ5_0, qh);
      } else {
        BlockQ5_1 b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        set_m(b.m);
        qs = blk + offsetof(BlockQ5_1, qs);
        qhp = blk + offsetof(BlockQ5_1, qh);
      }
      uint32_t qh;
      std::memcpy(&qh, qhp, 4);
      for (int j = 0; j < 16; ++j) {
        u.c[j] = static_cast<uint8_t>((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
        u.c[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = type == GgmlType::Q5_K;
      const uint8_t* scales = blk + (q5 ? offsetof(BlockQ5_K, scales) : offsetof(BlockQ4_K, scales));
      const uint8_t* qs = blk + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      const uint8_t* qh = q5 ? blk + offsetof(BlockQ5_K, qh) : nullptr;
      f16_t d, dmin;
      std::memcpy(&d, blk, 2);
      std::memcpy(&dmin, blk + 2, 2);
      set_d(d);
      set_m(dmin);
      for (int j = 0; j < 8; ++j) {
        k4_scale_min(j, scales, &u.sc[j], &u.mn[j]);
        // Sub-block j: bytes qs[32 (j/2) + l], low nibble for even j; fifth bit = bit j of qh[l].
        for (int l = 0; l < 32; ++l) {
          uint8_t c = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
          if (q5) c = static_cast<uint8_t>(c | (((qh[l] >> j) & 1) << 4));
          u.c[32 * j + l] = c;
        }
      }
      return;
    }
    case GgmlType::Q6_K: {
      BlockQ6_K b;
      std::memcpy(&b, blk, sizeof b);
      set_d(b.d);
      for (int i = 0; i < 16; ++i) u.sc[i] = static_cast<uint8_t>(b.scales[i]);
      // Two halves of 128: ql[64], qh[32] each; ggml's order.
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        uint8_t* c = u.c + 128 * h;
        for (int l = 0; l < 32; ++l) {
          c[l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
          c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
          c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      // Value e: half h = e / 128, quarter j, lane l = e % 32: bits 2j..2j+1 of
      // qs[32h + l] (Q3_K: plus bit 4h + j of hmask[l] as bit 2, set meaning +4).
      const bool q3 = type == GgmlType::Q3_K;
      const uint8_t* qs = blk + (q3 ? offsetof(BlockQ3_K, qs) : offsetof(BlockQ2_K, qs));
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        uint8_t c = (qs[32 * h + l] >> (2 * j)) & 3;
        if (q3) c = static_cast<uint8_t>(c | ((blk[offsetof(BlockQ3_K, hmask) + l] >> (4 * h + j)) & 1) << 2);
        u.c[e] = c;
      }
      if (q3) {
        BlockQ3_K b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        for (int i = 0; i < 16; ++i) {
          const int low = i < 8 ? b.scales[i] & 0xF : b.scales[i - 8] >> 4;
          const int high = (b.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
          u.sc[i] = static_cast<uint8_t>(static_cast<int8_t>((low | high << 4) - 32));
        }
      } else {
        BlockQ2_K b;
        std::memcpy(&b, blk, sizeof b);
        set_d(b.d);
        set_m(b.dmin);
        for (int i = 0; i < 16; ++i) {
          u.sc[i] = b.scales[i] & 0xF;
          u.mn[i] = b.scales[i] >> 4;
        }
      }
      return;
    }
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: {
      // Q4_0's nibble order after a 2-byte f16 d (IQ4_NL) or a 1-byte exponent (MXFP4).
      const uint8_t* qs = blk + (type == GgmlType::IQ4_NL ? 2 : 1);
      if (type == GgmlType::IQ4_NL) {
        f16_t d;
        std::memcpy(&d, blk, 2);
        set_d(d);
      } else {
        u.d_bits = blk[0];
        u.d = e8m0_to_f32_half(blk[0]);
      }
      for (int j = 0; j < 16; ++j) {
        u.c[j] = qs[j] & 0xF;
        u.c[j + 16] = qs[j] >> 4;
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      BlockIQ4_XS b;
      std::memcpy(&b, blk, sizeof b);
      set_d(b.d);
      for (int j = 0; j < 8; ++j) {
        const int ls = ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((b.scales_h >> (2 * j)) & 3) << 4;
        u.sc[j] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
        for (int l = 0; l < 16; ++l) {
          u.c[32 * j + l] = b.qs[16 * j + l] & 0xF;
          u.c[32 * j + l + 16] = b.qs[16 * j + l] >> 4;
        }
      }
      return;
    }
    default:
      PAGODA_CHECK(false, std::string("decode_unit: not a quantized weight type: ") + type_name(type));
  }
}

// ---- packing (layout in matmul_impl.h) ----

// Writes the codes and scales of row lane `r` of one unit into the packed unit `p`.
void pack_unit_lane(GgmlType type, const UnitCodes& u, int lanes, int r, uint8_t* p) {
  const size_t vb = 4 * static_cast<size_t>(lanes);
  // Puts the 32 codes of a 32-column chunk at `chunk` (nibbles, then the
  // optional high-bit / 2-bit vectors).
  auto put_nibbles = [&](const uint8_t* c, uint8_t* chunk) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      uint8_t& byte = chunk[(s & 3) * vb + 4 * r + i];
      byte = static_cast<uint8_t>(byte | ((c[col] & 0xF) << (s < 4 ? 0 : 4)));
    }
  };
  auto put_high1 = [&](const uint8_t* c, uint8_t* hv) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      hv[4 * r + i] = static_cast<uint8_t>(hv[4 * r + i] | (((c[col] >> 4) & 1) << s));
    }
  };
  auto put_high2 = [&](const uint8_t* c, uint8_t* hv) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      uint8_t& byte = hv[(s / 4) * vb + 4 * r + i];
      byte = static_cast<uint8_t>(byte | (((c[col] >> 4) & 3) << (2 * (s & 3))));
    }
  };
  // Bits 0..1 of the codes into 2 vectors: vector s/4, bits 2(s&3)..+1.
  auto put_low2 = [&](const uint8_t* c, uint8_t* lv) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      uint8_t& byte = lv[(s / 4) * vb + 4 * r + i];
      byte = static_cast<uint8_t>(byte | ((c[col] & 3) << (2 * (s & 3))));
    }
  };
  // Bit 2 of the codes: byte i of the lane, bit s.
  auto put_bit2 = [&](const uint8_t* c, uint8_t* hv) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      hv[4 * r + i] = static_cast<uint8_t>(hv[4 * r + i] | (((c[col] >> 2) & 1) << s));
    }
  };
  auto put_f16 = [&](uint8_t* at, f16_t v) { std::memcpy(at + 2 * r, &v, 2); };
  switch (type) {
    case GgmlType::Q8_0:
      for (int col = 0; col < 32; ++col)
        p[(col / 4) * vb + 4 * r + col % 4] = static_cast<uint8_t>(u.c[col] ^ (q8_codes_signed(lanes) ? 0x80 : 0));
      put_f16(p + 8 * vb, u.d_bits);
      return;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
      put_nibbles(u.c, p);
      put_f16(p + 4 * vb, u.d_bits);
      if (type == GgmlType::Q4_1) put_f16(p + 4 * vb + 2 * lanes, u.m_bits);
      return;
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      put_nibbles(u.c, p);
      put_high1(u.c, p + 4 * vb);
      put_f16(p + 5 * vb, u.d_bits);
      if (type == GgmlType::Q5_1) put_f16(p + 5 * vb + 2 * lanes, u.m_bits);
      return;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = type == GgmlType::Q5_K;
      const size_t chunk = (q5 ? 5 : 4) * vb;
      for (int j = 0; j < 8; ++j) {
        put_nibbles(u.c + 32 * j, p + j * chunk);
        if (q5) put_high1(u.c + 32 * j, p + j * chunk + 4 * vb);
      }
      uint8_t* s = p + 8 * chunk;
      put_f16(s, u.d_bits);
      put_f16(s + 2 * lanes, u.m_bits);
      for (int j = 0; j < 8; ++j) {
        s[4 * lanes + j * lanes + r] = u.sc[j];
        s[12 * lanes + j * lanes + r] = u.mn[j];
      }
      return;
    }
    case GgmlType::Q6_K: {
      const size_t chunk = 6 * vb;
      for (int j = 0; j < 8; ++j) {
        put_nibbles(u.c + 32 * j, p + j * chunk);
        put_high2(u.c + 32 * j, p + j * chunk + 4 * vb);
      }
      uint8_t* s = p + 8 * chunk;
      put_f16(s, u.d_bits);
      for (int i = 0; i < 16; ++i) s[2 * lanes + i * lanes + r] = u.sc[i];
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      const bool q3 = type == GgmlType::Q3_K;
      const size_t chunk = (q3 ? 3 : 2) * vb;
      for (int j = 0; j < 8; ++j) {
        put_low2(u.c + 32 * j, p + j * chunk);
        if (q3) put_bit2(u.c + 32 * j, p + j * chunk + 2 * vb);
      }
      uint8_t* s = p + 8 * chunk;
      put_f16(s, u.d_bits);
      if (q3) {
        for (int i = 0; i < 16; ++i) s[2 * lanes + i * lanes + r] = u.sc[i];
      } else {
        put_f16(s + 2 * lanes, u.m_bits);
        for (int i = 0; i < 16; ++i) s[4 * lanes + i * lanes + r] = static_cast<uint8_t>(u.sc[i] | u.mn[i] << 4);
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      for (int j = 0; j < 8; ++j) put_nibbles(u.c + 32 * j, p + j * 4 * vb);
      uint8_t* s = p + 32 * vb;
      put_f16(s, u.d_bits);
      for (int j = 0; j < 8; ++j) s[2 * lanes + j * lanes + r] = u.sc[j];
      return;
    }
    default:
      PAGODA_CHECK(false, "pack_unit_lane: unsupported type");
  }
}

// Q4_0/Q4_1/Q8_0 (and IQ4_NL, MXFP4: Q4_0's nibble order) pack by plain copies:
// their GGUF code order already is the packed step order (Q4: qs[4s..4s+3] holds columns 4s.. low and 16+4s.. high),
// so a lane's 4 bytes per vector come straight from qs (Q8_0: with the sign
// bit flipped, q + 128, except for AVX2, see matmul_impl.h). 10x faster than
// the per-code path for the two formats most files use.
void pack_fast_lane(GgmlType type, const uint8_t* blk, int lanes, int r, uint8_t* p) {
  const size_t vb = 4 * static_cast<size_t>(lanes);
  if (type == GgmlType::Q8_0) {
    const uint8_t* qs = blk + offsetof(BlockQ8_0, qs);
    const uint8_t flip = q8_codes_signed(lanes) ? 0 : 0x80;
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < 4; ++i) p[s * vb + 4 * r + i] = static_cast<uint8_t>(qs[4 * s + i] ^ flip);
    std::memcpy(p + 8 * vb + 2 * r, blk, 2);
    return;
  }
  if (type == GgmlType::MXFP4) {
    for (int s = 0; s < 4; ++s) std::memcpy(p + s * vb + 4 * r, blk + offsetof(BlockMXFP4, qs) + 4 * s, 4);
    p[4 * vb + r] = blk[0];  // e
    return;
  }
  // Q4_0, Q4_1, IQ4_NL (IQ4_NL's bytes are Q4_0's: f16 d, then the same nibble order)
  const size_t qs_off = type == GgmlType::Q4_1 ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  for (int s = 0; s < 4; ++s) std::memcpy(p + s * vb + 4 * r, blk + qs_off + 4 * s, 4);
  std::memcpy(p + 4 * vb + 2 * r, blk, 2);                                            // d
  if (type == GgmlType::Q4_1) std::memcpy(p + 4 * vb + 2 * lanes + 2 * r, blk + 2, 2);  // m
}

// ---- scalar kernels (GGUF layout, same integer algorithm as the SIMD ones) ----

// One row (GGUF bytes) · one quantized token row.
float dot_quant_scalar(GgmlType type, const uint8_t* row, int64_t n_cols, const QuantizedActs& a,
                       int64_t t) {
  const size_t block_bytes = traits(type).type_size;
  const int8_t* xq = a.q + t * a.n_cols;
  UnitCodes u;
  float acc = 0.0f;
  const int8_t* table = is_codebook(type) ? codebook(type) : nullptr;
  if (table && !is_super_block(type)) {  // IQ4_NL, MXFP4: sum table[c] x, times d dx
    const int64_t nb = n_cols / 32;
    const float* dx = a.d + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
      decode_unit(type, row + b * block_bytes, u);
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += table[u.c[j]] * xq[b * 32 + j];
      acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
    }
    return acc;
  }
  if (!is_super_block(type)) {
    const int64_t nb = n_cols / 32;
    const float* dx = a.d + t * nb;
    const int32_t* sx = a.sum32 + t * nb;
    const float* dsx = a.dsum32 + t * nb;
    const int32_t offset = type == GgmlType::Q8_0 ? 128 : type == GgmlType::Q4_0 ? 8 : 16;
    const bool has_min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
    for (int64_t b = 0; b < nb; ++b) {
      decode_unit(type, row + b * block_bytes, u);
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += u.c[j] * xq[b * 32 + j];
      if (has_min) {
        acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
        acc = std::fma(u.m, dsx[b], acc);
      } else {
        dot -= offset * sx[b];
        acc = std::fma(static_cast<float>(dot), u.d * dx[b], acc);
      }
    }
    return acc;
  }
  const int64_t nsb = n_cols / 256;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    decode_unit(type, row + sb * block_bytes, u);
    const int8_t* x = xq + sb * 256;
    const float dx = a.d[t * nsb + sb];
    if (type == GgmlType::Q2_K) {  // like Q4_K on 16-column sub-blocks
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0, imin = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = 0;
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += u.sc[i] * dot;
        imin += u.mn[i] * s16[i];
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
      acc = std::fma(-static_cast<float>(imin), u.m * dx, acc);
    } else if (type == GgmlType::Q3_K) {  // like Q6_K with codes offset by 4
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = -4 * s16[i];
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += static_cast<int8_t>(u.sc[i]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else if (type == GgmlType::IQ4_XS) {
      int32_t isum = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += table[u.c[32 * j + l]] * x[32 * j + l];
        isum += static_cast<int8_t>(u.sc[j]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else if (type == GgmlType::Q6_K) {
      const int32_t* s16 = a.sum16 + t * (n_cols / 16) + sb * 16;
      int32_t isum = 0;
      for (int i = 0; i < 16; ++i) {
        int32_t dot = -32 * s16[i];
        for (int l = 0; l < 16; ++l) dot += u.c[16 * i + l] * x[16 * i + l];
        isum += static_cast<int8_t>(u.sc[i]) * dot;
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
    } else {
      const int32_t* s32 = a.sum32 + t * (n_cols / 32) + sb * 8;
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += u.c[32 * j + l] * x[32 * j + l];
        isum += u.sc[j] * dot;
        imin += u.mn[j] * s32[j];
      }
      acc = std::fma(static_cast<float>(isum), u.d * dx, acc);
      acc = std::fma(-static_cast<float>(imin), u.m * dx, acc);
    }
  }
  return acc;
}

float load_float_weight(GgmlType type, const uint8_t* row, int64_t k) {
  switch (type) {
    case GgmlType::F32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case GgmlType::F16: {
      f16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return f16_to_f32(h);
    }
    default: {
      bf16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return bf16_to_f32(h);
    }
  }
}

void matmul_float_scalar(const WeightMatrix& w, const float* x, const Tile& tile, float* y) {
  const int64_t n_cols = w.n_cols(), n_rows = w.n_rows();
  for (int64_t r = tile.row_begin; r < tile.row_end; ++r) {
    const uint8_t* row = w.data() + r * w.row_bytes();
    for (int64_t t = tile.tok_begin; t < tile.tok_end; ++t) {
      const float* xt = x + t * n_cols;
      float acc = 0.0f;
      for (int64_t k = 0; k < n_cols; ++k) acc = std::fma(load_float_weight(w.type(), row, k), xt[k], acc);
      y[t * n_rows + r] = acc;
    }
  }
}

void matmul_quant_scalar(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  for (int64_t r = tile.row_begin; r < tile.row_end; ++r) {
    const uint8_t* row = w.data() + r * w.row_bytes();
    for (int64_t t = tile.tok_begin; t < tile.tok_end; ++t)
      y[t * w.n_rows() + r] = dot_quant_scalar(w.type(), row, w.n_cols(), a, t);
  }
}

// ---- activation scratch ----

// Grows to the largest call seen on this thread, then never allocates again.
struct ActScratch {
  std::vector<int8_t> q;
  std::vector<float> d, dsum32, neg8_dsum32;
  std::vector<int32_t> sum32, sum16, sum16_pairs;
  std::vector<uint16_t> bf16;
};
ActScratch& act_scratch() {
  thread_local ActScratch s;
  return s;
}

template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

QuantizedActs quantize_acts(Isa isa, ActKind kind, const float* x, int64_t n_tokens, int64_t n_cols,
                            ThreadPool& pool) {
  ActScratch& s = act_scratch();
  QuantizedActs a;
  a.n_tokens = n_tokens;
  a.n_cols = n_cols;
  a.d_per = kind == ActKind::Block32 ? 32 : 256;
  const size_t nt = static_cast<size_t>(n_tokens), nc = static_cast<size_t>(n_cols);
  int8_t* q = grow(s.q, nt * nc);
  float* d = grow(s.d, nt * nc / a.d_per);
  int32_t* sum32 = grow(s.sum32, nt * nc / 32);
  float* dsum32 = kind == ActKind::Block32 ? grow(s.dsum32, nt * nc / 32) : nullptr;
  float* neg8_dsum32 = kind == ActKind::Block32 ? grow(s.neg8_dsum32, nt * nc / 32) : nullptr;
  int32_t* sum16 = kind == ActKind::Super256 ? grow(s.sum16, nt * nc / 16) : nullptr;
  int32_t* sum16_pairs = kind == ActKind::Super256 ? grow(s.sum16_pairs, nt * nc / 32) : nullptr;
  a.q = q;
  a.d = d;
  a.sum32 = sum32;
  a.dsum32 = dsum32;
  a.neg8_dsum32 = neg8_dsum32;
  a.sum16 = sum16;
  a.sum16_pairs = sum16_pairs;
  auto row = [&](int64_t t) {
    ActRowOut out{q + t * n_cols, d + t * (n_cols / a.d_per), sum32 + t * (n_cols / 32),
                  dsum32 ? dsum32 + t * (n_cols / 32) : nullptr,
                  sum16 ? sum16 + t * (n_cols / 16) : nullptr, neg8_dsum32 ? neg8_dsum32 + t * (n_cols / 32) : nullptr};
    switch (isa) {
      case Isa::Avx512: quantize_act_row_avx512(kind, x + t * n_cols, n_cols, out); break;
      case Isa::Avx2: quantize_act_row_avx2(kind, x + t * n_cols, n_cols, out); break;
      case Isa::Scalar: quantize_act_row_scalar(kind, x + t * n_cols, n_cols, out); break;
    }
    if (sum16_pairs) {
      const int32_t* s16 = sum16 + t * (n_cols / 16);
      for (int64_t j = 0; j < n_cols / 32; ++j)
        sum16_pairs[t * (n_cols / 32) + j] = static_cast<int32_t>(
            static_cast<uint32_t>(static_cast<uint16_t>(s16[2 * j])) | static_cast<uint32_t>(s16[2 * j + 1]) << 16);
    }
  };
  // Quantizing a 2048-wide row takes ~0.5 us with AVX-512; below 16 rows a pool
  // wake-up costs more than it saves.
  if (n_tokens >= 16 && pool.num_threads() > 1) {
    const int64_t per_task = 8;
    pool.parallel_for((n_tokens + per_task - 1) / per_task, [&](int64_t task, int) {
      for (int64_t t = task * per_task; t < std::min(n_tokens, (task + 1) * per_task); ++t) row(t);
    });
  } else {
    for (int64_t t = 0; t < n_tokens; ++t) row(t);
  }
  return a;
}

// Tile shape. Rows: 4 packed groups (64 rows with AVX-512, 32 with AVX2): a
// tile's weights (64 x 2048 Q4_0 = 72 KiB) stay in L2 (512 KiB on Zen 3, 1 MiB
// on Zen 5) while its token micro-tiles stream past, and a 2048-row decode
// still yields 32-64 tasks for load balance. Tokens: 64, so a 512-token
// prefill has 8 token tiles per row tile and the 64 x 2048 int8 activation
// tile (128 KiB) fits L2 next to the weights.
constexpr int64_t kTileTokens = 64;
int64_t tile_rows(const WeightMatrix& w) {
  if (w.isa() == Isa::Scalar) return 16;
  if (is_float_type(w.type())) return 64;
  return 4 * packed_lanes(w.isa());
}

}  // namespace

size_t WeightMatrix::stream_bytes() const {
  return packed_ == nullptr ? static_cast<size_t>(n_rows_) * row_bytes_ : packed_bytes_;
}

WeightMatrix WeightMatrix::row_slice(int64_t row0, int64_t n_rows) const {
  PAGODA_CHECK(row0 >= 0 && n_rows >= 0 && row0 + n_rows <= n_rows_ && row0 % kSliceRowAlign == 0,
               "WeightMatrix::row_slice: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n_rows) +
                   ") outside the matrix or not aligned to " + std::to_string(kSliceRowAlign));
  WeightMatrix m;
  m.type_ = type_;
  m.n_rows_ = n_rows;
  m.n_cols_ = n_cols_;
  m.row_bytes_ = row_bytes_;
  m.isa_ = isa_;
  m.data_ = data_ + static_cast<size_t>(row0) * row_bytes_;
  if (packed_ != nullptr) {
    const int lanes = packed_lanes(isa_);
    const size_t group_bytes = static_cast<size_t>(n_cols_ / unit_cols(type_)) * packed_unit_bytes(type_, lanes);
    m.packed_ = packed_ + static_cast<size_t>(row0 / lanes) * group_bytes;
    m.packed_bytes_ = static_cast<size_t>((n_rows + lanes - 1) / lanes) * group_bytes;
  }
  return m;
}

// Repacking costs one pass over the weights at load, split over all CPUs for
// matrices over 4 MiB: ~1 ms per MiB for Q4_0/Q4_1/Q8_0/IQ4_NL/MXFP4 (plain copies, see
// pack_fast_lane; ~0.6 s for a 600 MiB Q4_0 TinyLlama), ~4 ms per MiB for the
// others (per-code shuffling), measured on 2 busy Zen 3 cores; and, for the
// quantized types, a private
// copy of the matrix: the same size as the GGUF bytes for Q8_0/Q4_x/Q5_x/Q6_K/
// Q2_K/IQ4_NL/MXFP4 (+3% for Q4_K and Q3_K, +2% for Q5_K, +1.5% for IQ4_XS, whose
// 6-bit scales are widened to bytes), plus
// zero rows up to a multiple of 16 (8 for AVX2). The mmap'd GGUF pages are
// then clean page cache the kernel may drop. Float types are never copied.
WeightMatrix WeightMatrix::prepare(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                                   Isa isa) {
  const TypeTraits& tt = traits(type);
  PAGODA_CHECK(tt.weight_supported, std::string("matmul: unsupported weight type ") + tt.name);
  PAGODA_CHECK(n_rows >= 0 && n_cols > 0 && n_cols % tt.block_size == 0,
               std::string("matmul: bad shape for ") + tt.name + ": " + std::to_string(n_rows) + "x" +
                   std::to_string(n_cols));
  PAGODA_CHECK(isa_runs(isa), std::string("matmul: ISA not supported by this CPU: ") + isa_name(isa));
  WeightMatrix m;
  m.type_ = type;
  m.n_rows_ = n_rows;
  m.n_cols_ = n_cols;
  m.row_bytes_ = pagoda::row_bytes(type, n_cols);
  m.data_ = data;
  m.isa_ = isa;
  if (isa == Isa::Scalar || is_float_type(type)) return m;

  const int lanes = packed_lanes(isa);
  const int64_t n_groups = (n_rows + lanes - 1) / lanes;
  const int64_t n_units = n_cols / unit_cols(type);
  const size_t unit_bytes = packed_unit_bytes(type, lanes);
  m.owned_ = HugePageBuffer(static_cast<size_t>(n_groups * n_units) * unit_bytes);  // zeroed
  m.packed_ = m.owned_.data();
  m.packed_bytes_ = m.owned_.size();
  uint8_t* out = m.owned_.data();
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    UnitCodes u;
    for (int64_t g = g0; g < g1; ++g) {
      for (int r = 0; r < lanes && g * lanes + r < n_rows; ++r) {
        const uint8_t* row = data + (g * lanes + r) * m.row_bytes_;
        for (int64_t un = 0; un < n_units; ++un) {
          const uint8_t* blk = row + un * tt.type_size;
          uint8_t* p = out + (g * n_units + un) * unit_bytes;
          if (type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q8_0 ||
              type == GgmlType::IQ4_NL || type == GgmlType::MXFP4) {
            pack_fast_lane(type, blk, lanes, r, p);
            continue;
          }
          decode_unit(type, blk, u);
          pack_unit_lane(type, u, lanes, r, p);
        }
      }
    }
  };
  // Packing runs at 3-6 ms per MiB on one Zen 3 core (per-code shuffling), so
  // matrices over 4 MiB are split over the CPUs: groups are disjoint.
  const int n_threads = m.owned_.size() > (size_t{4} << 20) ? ThreadPool::default_num_threads() : 1;
  if (n_threads <= 1) {
    pack_groups(0, n_groups);
    return m;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back(pack_groups, n_groups * t / n_threads, n_groups * (t + 1) / n_threads);
  for (std::thread& th : threads) th.join();
  return m;
}

namespace {

// The tiles of one matrix's output, in task order.
struct TileGrid {
  int64_t trows = 0, n_tok_tiles = 0, n_tasks = 0;
  TileGrid() = default;
  TileGrid(const WeightMatrix& w, int64_t n_tokens)
      : trows(tile_rows(w)), n_tok_tiles((n_tokens + kTileTokens - 1) / kTileTokens) {
    n_tasks = (w.n_rows() + trows - 1) / trows * n_tok_tiles;
  }
  Tile tile(const WeightMatrix& w, int64_t n_tokens, int64_t task) const {
    // Token tiles inner: the two threads start on neighbouring tiles of the
    // same weight rows, which then come from memory once into the shared L3.
    const int64_t rt = task / n_tok_tiles, tt = task % n_tok_tiles;
    return Tile{rt * trows, std::min(w.n_rows(), (rt + 1) * trows), tt * kTileTokens,
                std::min(n_tokens, (tt + 1) * kTileTokens)};
  }
};

void run_quant_tile(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  switch (w.isa()) {
    case Isa::Avx512: matmul_packed_avx512(w, a, tile, y); break;
    case Isa::Avx2: matmul_packed_avx2(w, a, tile, y); break;
    case Isa::Scalar: matmul_quant_scalar(w, a, tile, y); break;
  }
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0 || w.n_rows() == 0) return;
  const TileGrid grid(w, n_tokens);

  if (is_float_type(w.type())) {
    const uint16_t* xbf = nullptr;
    if (w.isa() == Isa::Avx512 && w.type() == GgmlType::BF16 && has_avx512bf16()) {
      uint16_t* buf = grow(act_scratch().bf16, static_cast<size_t>(n_tokens * w.n_cols()));
      convert_to_bf16_avx512(x, buf, n_tokens * w.n_cols());
      xbf = buf;
    }
    pool.parallel_for(grid.n_tasks, [&](int64_t task, int) {
      const Tile tile = grid.tile(w, n_tokens, task);
      switch (w.isa()) {
        case Isa::Avx512: matmul_float_avx512(w, x, xbf, tile, y); break;
        case Isa::Avx2: matmul_float_avx2(w, x, tile, y); break;
        case Isa::Scalar: matmul_float_scalar(w, x, tile, y); break;
      }
    });
    return;
  }

  const QuantizedActs a = quantize_acts(w.isa(), act_kind(w.type()), x, n_tokens, w.n_cols(), pool);
  pool.parallel_for(grid.n_tasks, [&](int64_t task, int) { run_quant_tile(w, a, grid.tile(w, n_tokens, task), y); });
}

void matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool) {
  constexpr size_t kMaxTargets = 4;
  PAGODA_CHECK(targets.size() <= kMaxTargets, "matmul_multi: at most 4 targets");
  if (n_tokens <= 0 || targets.empty()) return;
  const WeightMatrix& w0 = *targets[0].w;
  bool shared = !is_float_type(w0.type());
  for (const MatmulTarget& t : targets) {
    PAGODA_CHECK(t.w->n_cols() == w0.n_cols(), "matmul_multi: targets differ in n_cols");
    shared = shared && !is_float_type(t.w->type()) && t.w->isa() == w0.isa() &&
             act_kind(t.w->type()) == act_kind(w0.type());
  }
  if (!shared) {  // float weights, or activations quantized differently: one call each
    for (const MatmulTarget& t : targets) matmul(*t.w, x, n_tokens, t.y, pool);
    return;
  }
  // One task list over all targets: target i owns tasks [first[i], first[i + 1]),
  // tiled exactly as matmul() tiles it alone, so results are bit-identical.
  TileGrid grids[kMaxTargets];
  int64_t first[kMaxTargets + 1] = {0};
  for (size_t i = 0; i < targets.size(); ++i) {
    grids[i] = TileGrid(*targets[i].w, n_tokens);
    first[i + 1] = first[i] + (targets[i].w->n_rows() > 0 ? grids[i].n_tasks : 0);
  }
  const QuantizedActs a = quantize_acts(w0.isa(), act_kind(w0.type()), x, n_tokens, w0.n_cols(), pool);
  pool.parallel_for(first[targets.size()], [&](int64_t task, int) {
    size_t i = 0;
    while (task >= first[i + 1]) ++i;
    const WeightMatrix& w = *targets[i].w;
    run_quant_tile(w, a, grids[i].tile(w, n_tokens, task - first[i]), targets[i].y);
  });
}

void matmul_grouped(std::span<const GroupedMatmul> jobs, const float* x, int64_t n_x_rows, ThreadPool& pool) {
  if (jobs.empty() || n_x_rows <= 0) return;
  const WeightMatrix& w0 = *jobs[0].w;
  const int64_t n_cols = w0.n_cols();
  bool shared = !is_float_type(w0.type());
  for (const GroupedMatmul& j : jobs) {
    PAGODA_CHECK(j.w->n_cols() == n_cols, "matmul_grouped: jobs differ in n_cols");
    PAGODA_CHECK(j.row0 >= 0 && j.n_tokens >= 0 && j.row0 + j.n_tokens <= n_x_rows,
                 "matmul_grouped: job rows outside x");
    shared = shared && !is_float_type(j.w->type()) && j.w->isa() == w0.isa() &&
             act_kind(j.w->type()) == act_kind(w0.type());
  }
  if (!shared) {
    for (const GroupedMatmul& j : jobs) matmul(*j.w, x + j.row0 * n_cols, j.n_tokens, j.y, pool);
    return;
  }
  // Activations are quantized row by row, so quantizing all of x once gives
  // each job exactly the codes matmul() would compute for its rows alone.
  const QuantizedActs all = quantize_acts(w0.isa(), act_kind(w0.type()), x, n_x_rows, n_cols, pool);
  // Job i owns tasks [first[i], first[i + 1]); kept per thread, grown once.
  thread_local std::vector<int64_t> first;
  thread_local std::vector<TileGrid> grids;
  first.assign(jobs.size() + 1, 0);
  grids.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    grids[i] = TileGrid(*jobs[i].w, std::max<int64_t>(jobs[i].n_tokens, 1));
    const bool empty = jobs[i].n_tokens == 0 || jobs[i].w->n_rows() == 0;
    first[i + 1] = first[i] + (empty ? 0 : grids[i].n_tasks);
  }
  auto view = [&](const GroupedMatmul& j) {
    QuantizedActs a = all;
    const int64_t r = j.row0;
    a.n_tokens = j.n_tokens;
    a.q += r * n_cols;
    a.d += r * (n_cols / all.d_per);
    a.sum32 += r * (n_cols / 32);
    if (a.dsum32) a.dsum32 += r * (n_cols / 32);
    if (a.neg8_dsum32) a.neg8_dsum32 += r * (n_cols / 32);
    if (a.sum16) a.sum16 += r * (n_cols / 16);
    if (a.sum16_pairs) a.sum16_pairs += r * (n_cols / 32);  // one int16 pair per 32 columns
    return a;
  };
  const int64_t* fp = first.data();
  const TileGrid* gp = grids.data();
  const size_t n_jobs = jobs.size();
  pool.parallel_for(fp[n_jobs], [&](int64_t task, int) {
    const size_t i = static_cast<size_t>(std::upper_bound(fp, fp + n_jobs + 1, task) - fp) - 1;
    const GroupedMatmul& j = jobs[i];
    run_quant_tile(*j.w, view(j), gp[i].tile(*j.w, j.n_tokens, task - fp[i]), j.y);
  });
}

void matmul_reference(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                      const float* x, int64_t n_tokens, float* y) {
  const size_t rb = pagoda::row_bytes(type, n_cols);
  std::vector<float> wrow(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(type, data + r * rb, wrow.data(), n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double acc = 0.0;
      for (int64_t k = 0; k < n_cols; ++k) acc += static_cast<double>(wrow[k]) * x[t * n_cols + k];
      y[t * n_rows + r] = static_cast<float>(acc);
    }
  }
}

}  // namespace pagoda
