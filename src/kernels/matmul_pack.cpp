// WeightMatrix::prepare (repacking at load) and row_slice, with the scalar decoding of
// one GGUF block into unsigned codes + scales that packing and the scalar kernels share
// (decode_unit, declared in matmul_impl.h). The packed layout is described in
// matmul_impl.h; the kernels that read it are in matmul.cpp / matmul_avx2.cpp /
// matmul_avx512.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernels/matmul.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"

namespace pagoda {

using namespace matmul_detail;

namespace {

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

// fn(i0, i1) over [0, n) at load: split over the CPUs into disjoint ranges when the
// output is over 4 MiB (packing runs at 3-6 ms per MiB on one Zen 3 core, per-code
// shuffling; a float copy faults in a huge page per 2 MiB), else in one call.
template <class Fn>
void for_row_ranges(int64_t n, size_t out_bytes, Fn&& fn) {
  const int n_threads = out_bytes > (size_t{4} << 20) ? ThreadPool::default_num_threads() : 1;
  if (n_threads <= 1 || n <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) threads.emplace_back(fn, n * t / n_threads, n * (t + 1) / n_threads);
  for (std::thread& th : threads) th.join();
}

}  // namespace

// ---- scalar decoding of one GGUF block into unsigned codes + scales ----

// Requires: `type` is a quantized weight type; `blk` points at one GGUF block.
void matmul_detail::decode_unit(GgmlType type, const uint8_t* blk, UnitCodes& u) {
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

namespace {

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
  // Every offset from the type's UnitLayout (matmul_impl.h), which the kernels read too.
  const UnitLayout lay = unit_layout(type);
  const size_t chunk = static_cast<size_t>(lay.chunk_vectors) * vb;
  uint8_t* const scales = p + static_cast<size_t>(lay.chunks) * chunk;
  auto at = [&](int off) { return scales + static_cast<size_t>(off) * static_cast<size_t>(lanes); };
  switch (type) {
    case GgmlType::Q8_0:
      for (int col = 0; col < 32; ++col)
        p[(col / 4) * vb + 4 * r + col % 4] = static_cast<uint8_t>(u.c[col] ^ (q8_codes_signed(lanes) ? 0x80 : 0));
      put_f16(at(lay.d), u.d_bits);
      return;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      put_nibbles(u.c, p);
      if (lay.high >= 0) put_high1(u.c, p + lay.high * vb);
      put_f16(at(lay.d), u.d_bits);
      if (lay.m >= 0) put_f16(at(lay.m), u.m_bits);
      return;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::IQ4_XS:
      for (int j = 0; j < 8; ++j) {
        put_nibbles(u.c + 32 * j, p + j * chunk);
        if (lay.high >= 0) put_high1(u.c + 32 * j, p + j * chunk + lay.high * vb);
      }
      put_f16(at(lay.d), u.d_bits);
      if (lay.m >= 0) put_f16(at(lay.m), u.m_bits);
      for (int j = 0; j < lay.n_scales; ++j) {
        at(lay.sc)[j * lanes + r] = u.sc[j];
        if (lay.mn >= 0) at(lay.mn)[j * lanes + r] = u.mn[j];
      }
      return;
    case GgmlType::Q6_K:
      for (int j = 0; j < 8; ++j) {
        put_nibbles(u.c + 32 * j, p + j * chunk);
        put_high2(u.c + 32 * j, p + j * chunk + lay.high * vb);
      }
      put_f16(at(lay.d), u.d_bits);
      for (int i = 0; i < lay.n_scales; ++i) at(lay.sc)[i * lanes + r] = u.sc[i];
      return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      const bool q3 = type == GgmlType::Q3_K;
      for (int j = 0; j < 8; ++j) {
        put_low2(u.c + 32 * j, p + j * chunk);
        if (q3) put_bit2(u.c + 32 * j, p + j * chunk + lay.high * vb);
      }
      put_f16(at(lay.d), u.d_bits);
      if (q3) {
        for (int i = 0; i < lay.n_scales; ++i) at(lay.sc)[i * lanes + r] = u.sc[i];
      } else {
        put_f16(at(lay.m), u.m_bits);
        for (int i = 0; i < lay.n_scales; ++i) at(lay.sc)[i * lanes + r] = static_cast<uint8_t>(u.sc[i] | u.mn[i] << 4);
      }
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
  const UnitLayout lay = unit_layout(type);
  uint8_t* const scales = p + static_cast<size_t>(lay.chunk_vectors) * vb;
  auto at = [&](int off) { return scales + static_cast<size_t>(off) * static_cast<size_t>(lanes); };
  if (type == GgmlType::Q8_0) {
    const uint8_t* qs = blk + offsetof(BlockQ8_0, qs);
    const uint8_t flip = q8_codes_signed(lanes) ? 0 : 0x80;
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < 4; ++i) p[s * vb + 4 * r + i] = static_cast<uint8_t>(qs[4 * s + i] ^ flip);
    std::memcpy(at(lay.d) + 2 * r, blk, 2);
    return;
  }
  if (type == GgmlType::MXFP4) {
    for (int s = 0; s < 4; ++s) std::memcpy(p + s * vb + 4 * r, blk + offsetof(BlockMXFP4, qs) + 4 * s, 4);
    at(lay.d)[r] = blk[0];  // e
    return;
  }
  // Q4_0, Q4_1, IQ4_NL (IQ4_NL's bytes are Q4_0's: f16 d, then the same nibble order)
  const size_t qs_off = type == GgmlType::Q4_1 ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  for (int s = 0; s < 4; ++s) std::memcpy(p + s * vb + 4 * r, blk + qs_off + 4 * s, 4);
  std::memcpy(at(lay.d) + 2 * r, blk, 2);                           // d
  if (lay.m >= 0) std::memcpy(at(lay.m) + 2 * r, blk + 2, 2);  // m (Q4_1)
}

}  // namespace

bool matmul_detail::half_panels(GgmlType type, Isa isa, int64_t n_cols) {
  if (n_cols % 32 != 0) return false;
  if (isa == Isa::Avx2) return type == GgmlType::F16 || type == GgmlType::BF16;
  return isa == Isa::Avx512 && (type == GgmlType::F16 || (type == GgmlType::BF16 && kernel_table(isa).bf16_acts));
}

// A slice starts on a row tile: row_slice() requires row0 % kSliceRowAlign == 0.
static_assert(WeightMatrix::kSliceRowAlign % kPanelTileRows == 0);

WeightMatrix WeightMatrix::row_slice(int64_t row0, int64_t n_rows) const {
  PAGODA_CHECK(row0 >= 0 && n_rows >= 0 && row0 + n_rows <= n_rows_ && row0 % kSliceRowAlign == 0,
               "WeightMatrix::row_slice: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n_rows) +
                   ") outside the matrix or not aligned to " + std::to_string(kSliceRowAlign));
  if (packed_ != nullptr && tile_groups_ > 1) {
    const int64_t tile_rows = static_cast<int64_t>(tile_groups_) * packed_lanes(isa_);
    PAGODA_CHECK(row0 % tile_rows == 0 && (n_rows % tile_rows == 0 || row0 + n_rows == n_rows_),
                 "WeightMatrix::row_slice: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n_rows) +
                     ") are not whole row tiles of " + std::to_string(tile_rows) + " (prepare's slice_rows)");
  }
  WeightMatrix m;
  m.type_ = type_;
  m.n_rows_ = n_rows;
  m.n_cols_ = n_cols_;
  m.row_bytes_ = row_bytes_;
  m.isa_ = isa_;
  m.data_ = data_ + static_cast<size_t>(row0) * row_bytes_;
  m.own_copy_ = own_copy_;
  m.tile_groups_ = tile_groups_;
  m.chunk_units_ = chunk_units_;
  if (packed_ != nullptr && is_float_type(type_)) {  // panels: whole tiles from row0
    const auto tile_bytes = static_cast<size_t>(kPanelTileRows * n_cols_) * sizeof(uint16_t);
    m.packed_ = packed_ + static_cast<size_t>(row0 / kPanelTileRows) * tile_bytes;
    m.packed_bytes_ = static_cast<size_t>((n_rows + kPanelTileRows - 1) / kPanelTileRows) * tile_bytes;
  } else if (packed_ != nullptr) {
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
// then clean page cache the kernel may drop. Float types (F32 / F16 / BF16) are copied
// into huge pages at the SIMD levels (see below): as they are, or F16 / BF16 at AVX-512 and
// AVX2 into panel tiles (half_panels, kPanelRows in matmul_impl.h).
WeightMatrix WeightMatrix::prepare(GgmlType type, int64_t n_rows, int64_t n_cols, const uint8_t* data,
                                   Isa isa, int64_t slice_rows) {
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
  if (isa == Isa::Scalar) return m;
  if (is_float_type(type)) {
    // F16 / BF16 at AVX-512 and AVX2 go into panel tiles (see kPanelRows); otherwise the float
    // kernels read the GGUF layout, so the copy is byte for byte, and exists for its
    // pages. Decode streams every weight byte once per token, and mmap'd file pages are
    // 4 KiB: a 2 GiB F16 model is ~550k pages, a TLB walk for each, where the repacked
    // quantized weights sit in 2 MiB pages. Measured (matvec 2048-5632 x 2048, 2 threads,
    // Xeon, cold): F16 17.8 -> 20.8 GB/s, BF16 19.3 -> 21.6 GB/s averaged over 8 shapes x
    // runs. The file's pages are dropped after the copy (reads_own_copy), so the weights
    // stay resident once; the cost is one copy at load (~0.3 s per GiB). Matrices under
    // 2 MiB (heap memory, no huge pages) are copied too: a fused QKV tensor's parts are
    // dropped from the file only when all of them read their own copies.
    if (half_panels(type, isa, n_cols)) {  // see kPanelRows
      const int64_t tiles = (n_rows + kPanelTileRows - 1) / kPanelTileRows;
      const size_t bytes = static_cast<size_t>(tiles * kPanelTileRows * n_cols) * sizeof(uint16_t);
      if (bytes == 0) return m;
      m.owned_ = HugePageBuffer(bytes);  // zeroed: the last tile's padding rows
      uint8_t* out = m.owned_.data();
      const PackedAddr addr = panel_addr(out, n_rows, n_cols, panel_chunk_cols(isa));
      for_row_ranges(n_rows, bytes, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t k = 0; k < n_cols; k += 32)
            std::memcpy(out + (panel_at(addr, r, k) - addr.base), data + static_cast<size_t>(r) * m.row_bytes_ + 2 * k, 64);
      });
      m.packed_ = m.owned_.data();
      m.packed_bytes_ = bytes;
      m.own_copy_ = true;
      return m;
    }
    const size_t bytes = m.row_bytes_ * static_cast<size_t>(n_rows);
    if (bytes == 0) return m;
    m.owned_ = HugePageBuffer(bytes);
    uint8_t* out = m.owned_.data();
    const size_t rb = m.row_bytes_;
    for_row_ranges(n_rows, bytes, [&](int64_t r0, int64_t r1) {
      std::memcpy(out + static_cast<size_t>(r0) * rb, data + static_cast<size_t>(r0) * rb, static_cast<size_t>(r1 - r0) * rb);
    });
    m.data_ = out;
    m.own_copy_ = true;
    return m;
  }

  const int lanes = packed_lanes(isa);
  const int64_t n_groups = (n_rows + lanes - 1) / lanes;
  const int64_t n_units = n_cols / unit_cols(type);
  const size_t unit_bytes = packed_unit_bytes(type, lanes);
  m.owned_ = HugePageBuffer(static_cast<size_t>(n_groups * n_units) * unit_bytes);  // zeroed
  m.packed_ = m.owned_.data();
  m.packed_bytes_ = m.owned_.size();
  m.own_copy_ = true;
  // Row tiles in column chunks (PackedAddr) for the 32-wide formats at the AVX-512 level,
  // where it was measured; the AMX kernels, the K-quants and AVX2 read groups whole.
  const int64_t tile_groups = kernel_table(isa).tile_rows_quant / lanes;
  m.chunk_units_ = n_units;
  if (unit_cols(type) == 32 && isa == Isa::Avx512 && tile_groups > 1 &&
      n_cols >= kPackedChunkMinCols && (slice_rows == 0 || slice_rows % (tile_groups * lanes) == 0)) {
    m.tile_groups_ = static_cast<int>(tile_groups);
    m.chunk_units_ = std::clamp<int64_t>(static_cast<int64_t>(kPackedChunkBytes / unit_bytes), 1, n_units);
  }
  const PackedAddr addr = packed_addr(m);
  uint8_t* out = m.owned_.data();
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    UnitCodes u;
    for (int64_t g = g0; g < g1; ++g) {
      for (int r = 0; r < lanes && g * lanes + r < n_rows; ++r) {
        const uint8_t* row = data + (g * lanes + r) * m.row_bytes_;
        for (int64_t un = 0; un < n_units; ++un) {
          const uint8_t* blk = row + un * tt.type_size;
          uint8_t* p = out + (addr.unit(g, un) - addr.base);
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
  for_row_ranges(n_groups, m.owned_.size(), pack_groups);
  return m;
}

}  // namespace pagoda
