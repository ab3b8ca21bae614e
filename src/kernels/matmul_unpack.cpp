// WeightMatrix::read_row: one row of a repacked matrix, read back from the packed
// copy as the GGUF bytes it was packed from, then dequantized by the codec.
//
// Why: a model with tied embeddings reads token_embd twice, as the output
// projection (repacked) and row by row for the embedding. Reading the embedding
// rows from the file kept a second copy resident as tokens were seen (Qwen2.5-0.5B
// Q8_0: +138 MiB once most rows had been read); reading them from the packed copy
// lets the file's pages go. Rebuilding the GGUF block and calling the codec's
// dequantize_row makes the row bit-identical to reading the file; the alternative,
// computing values from the packed codes (d * sc * c - dmin * m ...), would repeat
// every codec's float order to stay bit-identical. Cost: one row per token, a few
// microseconds against a decode step's milliseconds.
//
// Each unpacking here is the inverse of the packing in matmul_pack.cpp (layout in
// matmul_impl.h); matmul_unpack_test round-trips random GGUF blocks of every type
// through both, for both lane widths.
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"

namespace pagoda {

using namespace matmul_detail;

namespace {

// The fast types (Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4): the inverse of pack_fast_lane,
// plain copies of row lane `r` of packed unit `p` back into GGUF block `blk`.
void unpack_fast_lane(GgmlType type, const uint8_t* p, int lanes, int r, uint8_t* blk) {
  const size_t vb = 4 * static_cast<size_t>(lanes);
  const UnitLayout lay = unit_layout(type);
  const uint8_t* const scales = p + static_cast<size_t>(lay.chunk_vectors) * vb;
  auto at = [&](int off) { return scales + static_cast<size_t>(off) * static_cast<size_t>(lanes); };
  if (type == GgmlType::Q8_0) {
    uint8_t* qs = blk + offsetof(BlockQ8_0, qs);
    const uint8_t flip = q8_codes_signed(lanes) ? 0 : 0x80;
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < 4; ++i) qs[4 * s + i] = static_cast<uint8_t>(p[s * vb + 4 * r + i] ^ flip);
    std::memcpy(blk, at(lay.d) + 2 * r, 2);
    return;
  }
  if (type == GgmlType::MXFP4) {
    for (int s = 0; s < 4; ++s) std::memcpy(blk + offsetof(BlockMXFP4, qs) + 4 * s, p + s * vb + 4 * r, 4);
    blk[0] = at(lay.d)[r];
    return;
  }
  const size_t qs_off = type == GgmlType::Q4_1 ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  for (int s = 0; s < 4; ++s) std::memcpy(blk + qs_off + 4 * s, p + s * vb + 4 * r, 4);
  std::memcpy(blk, at(lay.d) + 2 * r, 2);
  if (lay.m >= 0) std::memcpy(blk + 2, at(lay.m) + 2 * r, 2);
}

// The inverse of pack_unit_lane: the codes and scales of row lane `r` of packed unit `p`.
void unpack_unit_lane(GgmlType type, const uint8_t* p, int lanes, int r, UnitCodes& u) {
  const size_t vb = 4 * static_cast<size_t>(lanes);
  // Each getter reads what the matching put_* of pack_unit_lane wrote: step s = col / 4,
  // byte i = col % 4 of the lane.
  auto get_nibbles = [&](const uint8_t* chunk, uint8_t* c) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      c[col] = (chunk[(s & 3) * vb + 4 * r + i] >> (s < 4 ? 0 : 4)) & 0xF;
    }
  };
  auto get_high1 = [&](const uint8_t* hv, uint8_t* c) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      c[col] = static_cast<uint8_t>(c[col] | ((hv[4 * r + i] >> s) & 1) << 4);
    }
  };
  auto get_high2 = [&](const uint8_t* hv, uint8_t* c) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      c[col] = static_cast<uint8_t>(c[col] | ((hv[(s / 4) * vb + 4 * r + i] >> (2 * (s & 3))) & 3) << 4);
    }
  };
  auto get_low2 = [&](const uint8_t* lv, uint8_t* c) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      c[col] = (lv[(s / 4) * vb + 4 * r + i] >> (2 * (s & 3))) & 3;
    }
  };
  auto get_bit2 = [&](const uint8_t* hv, uint8_t* c) {
    for (int col = 0; col < 32; ++col) {
      const int s = col / 4, i = col % 4;
      c[col] = static_cast<uint8_t>(c[col] | ((hv[4 * r + i] >> s) & 1) << 2);
    }
  };
  auto get_f16 = [&](const uint8_t* at) {
    f16_t v;
    std::memcpy(&v, at + 2 * r, 2);
    return v;
  };
  // Every offset from the type's UnitLayout (matmul_impl.h), as pack_unit_lane wrote them.
  const UnitLayout lay = unit_layout(type);
  const size_t chunk = static_cast<size_t>(lay.chunk_vectors) * vb;
  const uint8_t* const scales = p + static_cast<size_t>(lay.chunks) * chunk;
  auto at = [&](int off) { return scales + static_cast<size_t>(off) * static_cast<size_t>(lanes); };
  switch (type) {
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      get_nibbles(p, u.c);
      get_high1(p + lay.high * vb, u.c);
      u.d_bits = get_f16(at(lay.d));
      if (lay.m >= 0) u.m_bits = get_f16(at(lay.m));
      return;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::IQ4_XS:
      for (int j = 0; j < 8; ++j) {
        get_nibbles(p + j * chunk, u.c + 32 * j);
        if (lay.high >= 0) get_high1(p + j * chunk + lay.high * vb, u.c + 32 * j);
      }
      u.d_bits = get_f16(at(lay.d));
      if (lay.m >= 0) u.m_bits = get_f16(at(lay.m));
      for (int j = 0; j < lay.n_scales; ++j) {
        u.sc[j] = at(lay.sc)[j * lanes + r];
        if (lay.mn >= 0) u.mn[j] = at(lay.mn)[j * lanes + r];
      }
      return;
    case GgmlType::Q6_K:
      for (int j = 0; j < 8; ++j) {
        get_nibbles(p + j * chunk, u.c + 32 * j);
        get_high2(p + j * chunk + lay.high * vb, u.c + 32 * j);
      }
      u.d_bits = get_f16(at(lay.d));
      for (int i = 0; i < lay.n_scales; ++i) u.sc[i] = at(lay.sc)[i * lanes + r];
      return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      const bool q3 = type == GgmlType::Q3_K;
      for (int j = 0; j < 8; ++j) {
        get_low2(p + j * chunk, u.c + 32 * j);
        if (q3) get_bit2(p + j * chunk + lay.high * vb, u.c + 32 * j);
      }
      u.d_bits = get_f16(at(lay.d));
      if (q3) {
        for (int i = 0; i < lay.n_scales; ++i) u.sc[i] = at(lay.sc)[i * lanes + r];
      } else {
        u.m_bits = get_f16(at(lay.m));
        for (int i = 0; i < lay.n_scales; ++i) {
          const uint8_t b = at(lay.sc)[i * lanes + r];
          u.sc[i] = b & 0xF;
          u.mn[i] = b >> 4;
        }
      }
      return;
    }
    default:
      PAGODA_CHECK(false, std::string("unpack_unit_lane: no packed layout for ") + type_name(type));
  }
}

// The inverse of decode_unit (matmul_pack.cpp): the GGUF block whose codes and scales are `u`.
void encode_unit(GgmlType type, const UnitCodes& u, uint8_t* blk) {
  auto put_f16 = [&](size_t off, f16_t v) { std::memcpy(blk + off, &v, 2); };
  switch (type) {
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const bool q51 = type == GgmlType::Q5_1;
      put_f16(0, u.d_bits);
      if (q51) put_f16(offsetof(BlockQ5_1, m), u.m_bits);
      uint8_t* qs = blk + (q51 ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs));
      uint32_t qh = 0;
      for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<uint8_t>((u.c[j] & 0xF) | (u.c[j + 16] & 0xF) << 4);
        qh |= static_cast<uint32_t>((u.c[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((u.c[j + 16] >> 4) & 1) << (j + 16);
      }
      std::memcpy(blk + (q51 ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh)), &qh, 4);
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = type == GgmlType::Q5_K;
      put_f16(0, u.d_bits);
      put_f16(2, u.m_bits);
      // ggml's get_scale_min_k4 packing, inverted: 6-bit scale / min j < 4 in the low
      // bits of bytes j / j + 4; j >= 4 as nibbles of byte j + 4 with their top 2 bits
      // in bits 6..7 of bytes j - 4 (scale) and j (min).
      uint8_t* q = blk + (q5 ? offsetof(BlockQ5_K, scales) : offsetof(BlockQ4_K, scales));
      for (int j = 0; j < 4; ++j) {
        q[j] = static_cast<uint8_t>((u.sc[j] & 63) | (u.sc[j + 4] >> 4) << 6);
        q[j + 4] = static_cast<uint8_t>((u.mn[j] & 63) | (u.mn[j + 4] >> 4) << 6);
        q[j + 8] = static_cast<uint8_t>((u.sc[j + 4] & 0xF) | (u.mn[j + 4] & 0xF) << 4);
      }
      uint8_t* qs = blk + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      uint8_t* qh = q5 ? blk + offsetof(BlockQ5_K, qh) : nullptr;
      std::memset(qs, 0, kQK_K / 2);
      if (q5) std::memset(qh, 0, kQK_K / 8);
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
          const uint8_t c = u.c[32 * j + l];
          qs[32 * (j / 2) + l] = static_cast<uint8_t>(qs[32 * (j / 2) + l] | (c & 0xF) << (4 * (j & 1)));
          if (q5) qh[l] = static_cast<uint8_t>(qh[l] | ((c >> 4) & 1) << j);
        }
      return;
    }
    case GgmlType::Q6_K: {
      BlockQ6_K b;
      for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(u.sc[i]);
      b.d = u.d_bits;
      for (int h = 0; h < 2; ++h) {
        uint8_t* ql = b.ql + 64 * h;
        uint8_t* qh = b.qh + 32 * h;
        const uint8_t* c = u.c + 128 * h;
        for (int l = 0; l < 32; ++l) {
          ql[l] = static_cast<uint8_t>((c[l] & 0xF) | (c[l + 64] & 0xF) << 4);
          ql[l + 32] = static_cast<uint8_t>((c[l + 32] & 0xF) | (c[l + 96] & 0xF) << 4);
          qh[l] = static_cast<uint8_t>((c[l] >> 4 & 3) | (c[l + 32] >> 4 & 3) << 2 | (c[l + 64] >> 4 & 3) << 4 |
                                       (c[l + 96] >> 4 & 3) << 6);
        }
      }
      std::memcpy(blk, &b, sizeof b);
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      const bool q3 = type == GgmlType::Q3_K;
      uint8_t* qs = blk + (q3 ? offsetof(BlockQ3_K, qs) : offsetof(BlockQ2_K, qs));
      std::memset(qs, 0, kQK_K / 4);
      if (q3) std::memset(blk + offsetof(BlockQ3_K, hmask), 0, kQK_K / 8);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | (u.c[e] & 3) << (2 * j));
        if (q3) {
          uint8_t& hm = blk[offsetof(BlockQ3_K, hmask) + l];
          hm = static_cast<uint8_t>(hm | ((u.c[e] >> 2) & 1) << (4 * h + j));
        }
      }
      if (q3) {
        uint8_t* sc = blk + offsetof(BlockQ3_K, scales);
        std::memset(sc, 0, kKScaleBytes);
        for (int i = 0; i < 16; ++i) {
          const int v = static_cast<int8_t>(u.sc[i]) + 32;  // the stored 6-bit scale
          if (i < 8) sc[i] = static_cast<uint8_t>(sc[i] | (v & 0xF));
          else sc[i - 8] = static_cast<uint8_t>(sc[i - 8] | (v & 0xF) << 4);
          sc[8 + i % 4] = static_cast<uint8_t>(sc[8 + i % 4] | ((v >> 4) & 3) << (2 * (i / 4)));
        }
        put_f16(offsetof(BlockQ3_K, d), u.d_bits);
      } else {
        for (int i = 0; i < 16; ++i)
          blk[offsetof(BlockQ2_K, scales) + i] = static_cast<uint8_t>(u.sc[i] | u.mn[i] << 4);
        put_f16(offsetof(BlockQ2_K, d), u.d_bits);
        put_f16(offsetof(BlockQ2_K, dmin), u.m_bits);
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      BlockIQ4_XS b;
      b.d = u.d_bits;
      b.scales_h = 0;
      std::memset(b.scales_l, 0, sizeof b.scales_l);
      for (int j = 0; j < 8; ++j) {
        const int ls = static_cast<int8_t>(u.sc[j]) + 32;
        b.scales_l[j / 2] = static_cast<uint8_t>(b.scales_l[j / 2] | (ls & 0xF) << (4 * (j % 2)));
        b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls >> 4) & 3) << (2 * j));
        for (int l = 0; l < 16; ++l)
          b.qs[16 * j + l] = static_cast<uint8_t>((u.c[32 * j + l] & 0xF) | (u.c[32 * j + l + 16] & 0xF) << 4);
      }
      std::memcpy(blk, &b, sizeof b);
      return;
    }
    default:
      PAGODA_CHECK(false, std::string("encode_unit: no GGUF encoding for ") + type_name(type));
  }
}

}  // namespace

void WeightMatrix::read_row(int64_t r, float* out) const {
  PAGODA_CHECK(r >= 0 && r < n_rows_, "WeightMatrix::read_row: row " + std::to_string(r) + " outside [0, " +
                                          std::to_string(n_rows_) + ")");
  if (packed_ == nullptr) {
    pagoda::dequantize_row(type_, data_ + static_cast<size_t>(r) * row_bytes_, out, n_cols_);
    return;
  }
  if (is_float_type(type_)) {  // F16 / BF16 panels: the row's 32 columns at a time
    const PackedAddr addr = panel_addr(packed_, n_rows_, n_cols_, panel_chunk_cols(isa_));
    for (int64_t k = 0; k < n_cols_; k += 32) pagoda::dequantize_row(type_, panel_at(addr, r, k), out + k, 32);
    return;
  }
  const int lanes = packed_lanes(isa_);
  const int64_t n_units = n_cols_ / unit_cols(type_);
  const size_t block_bytes = static_cast<size_t>(traits(type_).type_size);
  const PackedAddr addr = packed_addr(*this);
  const int lane = static_cast<int>(r % lanes);
  const bool fast = type_ == GgmlType::Q4_0 || type_ == GgmlType::Q4_1 || type_ == GgmlType::Q8_0 ||
                    type_ == GgmlType::IQ4_NL || type_ == GgmlType::MXFP4;
  // One row of GGUF bytes; thread_local so the per-token call allocates once per thread.
  thread_local std::vector<uint8_t> row;
  row.resize(row_bytes_);
  UnitCodes u;
  for (int64_t un = 0; un < n_units; ++un) {
    const uint8_t* p = addr.unit(r / lanes, un);
    uint8_t* blk = row.data() + static_cast<size_t>(un) * block_bytes;
    if (fast) {
      unpack_fast_lane(type_, p, lanes, lane, blk);
    } else {
      unpack_unit_lane(type_, p, lanes, lane, u);
      encode_unit(type_, u, blk);
    }
  }
  pagoda::dequantize_row(type_, row.data(), out, n_cols_);
}

}  // namespace pagoda
