// Private to the matmul kernels (matmul.cpp, matmul_avx2.cpp, matmul_avx512.cpp,
// matmul_amx.cpp): the repacked weight layout and its per-type packing traits, the
// quantized-activation buffers, and the per-ISA entry points each level registers in
// its kernel table (kernel_table.h), through which matmul.cpp dispatches. Nothing
// outside kernels/ (and its tests) includes this.
//
// Packed layout of a quantized WeightMatrix (owned_ bytes), for SIMD width
// L int32 lanes (L = 16 for AVX-512, 8 for AVX2; VB = 4 * L bytes = one vector):
//   rows are cut into groups of L rows (the last one zero-padded); group g is
//   n_units consecutive units of unit_bytes, a unit covering the same column
//   range (32 columns for the 32-wide formats, 256 for the K-quants) of all L
//   rows. Within a unit every value is a small unsigned code c; lane r of a
//   vector holds 4 consecutive codes of row g*L + r, so one vpdpbusd with the
//   4 matching activation bytes broadcast to every lane advances all L rows by
//   4 columns ("step"). A 32-column chunk has 8 steps; step s covers columns
//   4s..4s+3 of the chunk.
//   - nibble vectors (4 per chunk): vector s&3, low nibble for s < 4, high
//     nibble for s >= 4 (Q4_0's own layout: low = j, high = j + 16).
//   - Q5 high-bit vector (1 per chunk): byte i of a lane, bit s = bit 4 of
//     the code of column 4s+i.
//   - Q6 2-bit vectors (2 per chunk): vector s/4, byte i, bits 2(s&3)..+1 =
//     bits 4..5 of the code of column 4s+i.
//   - low 2-bit vectors (Q2_K, Q3_K; 2 per chunk): as the Q6 2-bit vectors but
//     holding bits 0..1 of the code.
//   - Q3 high-bit vector (1 per chunk): as the Q5 one, holding bit 2 of the code.
//   - codebook formats (IQ4_NL, IQ4_XS, MXFP4): nibble vectors of 4-bit table
//     indices; the kernel turns each index into its table level with one byte
//     shuffle (vpshufb) of a 16-entry table: level + 128 (u8) for AVX-512, the
//     signed level for AVX2, exactly as Q8_0's codes.
//   - Q8_0 byte vectors (8 per chunk): code = q + 128 (u8) for AVX-512
//     (vpdpbusd wants unsigned weights); for AVX2 (L = 8) q itself (s8), as
//     in GGUF, because pmaddubsw takes |q| x sign(x, q) and the xor back to
//     signed was 8 of the ~70 vector uops per 32 columns of a decode matvec.
// Unit layouts (scales after the codes, f16 as in GGUF, u8/s8 per lane):
//   Q8_0  [8 VB codes][d: L f16]                                   (= GGUF bytes)
//   Q4_0  [4 VB nibbles][d]                                         (= GGUF)
//   Q4_1  [4 VB nibbles][d][m: L f16]                               (= GGUF)
//   Q5_0  [4 VB nibbles][1 VB high bits][d]                         (= GGUF)
//   Q5_1  [4 VB nibbles][1 VB high bits][d][m]                      (= GGUF)
//   Q4_K  8 x [4 VB nibbles], [d][dmin][sc: 8 x L u8][m: 8 x L u8]  (148 vs 144 B/row)
//   Q5_K  8 x [4 VB nibbles][1 VB high bits], [d][dmin][sc][m]      (180 vs 176 B/row)
//   Q6_K  8 x [4 VB nibbles][2 VB 2-bit], [d][sc: 16 x L s8]        (= GGUF, 210)
//   Q2_K  8 x [2 VB low 2-bit], [d][dmin][sc | m << 4: 16 x L u8]   (= GGUF, 84)
//   Q3_K  8 x [2 VB low 2-bit][1 VB high bits], [d][sc - 32: 16 x L s8]  (114 vs 110)
//   IQ4_NL [4 VB nibbles][d]                                        (= GGUF)
//   MXFP4 [4 VB nibbles][e: L u8]                                   (= GGUF)
//   IQ4_XS 8 x [4 VB nibbles], [d][ls - 32: 8 x L s8]               (138 vs 136)
// Value of a code: Q8_0/Q4_0/Q5_0: d*(c - 128/8/16); Q4_1/Q5_1: d*c + m;
// Q4_K/Q5_K: d*sc[j]*c - dmin*m[j] (j = 32-column sub-block); Q6_K: d*sc[i]*(c - 32)
// (i = 16-column sub-block); Q2_K: d*sc[i]*c - dmin*m[i]; Q3_K: d*sc[i]*(c - 4);
// IQ4_NL: d*table[c]; IQ4_XS: d*sc[j]*table[c]; MXFP4: 2^(e-128)*table[c]. The
// K-quants' 6-bit scales are unpacked to one byte each so a lane loads them with
// one vpmovzxbd instead of the 12-byte bit puzzle; Q2_K's 4-bit scale and min stay
// in their byte and are split with an and and a shift per 16 columns and 16 rows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/decode_prefetch.h"
#include "kernels/matmul.h"
#include "tensor/types.h"

namespace pagoda::matmul_detail {

enum class ActKind {
  Block32,  // Q8_0-style: one f32 scale per 32 values, + int sum and d*sum per block
  Super256  // Q8_K-style: one f32 scale per 256 values, + int sums per 16 and 32
};

// Where each part of a packed unit lies (the unit layouts above): the one description
// that pack_unit_lane (matmul_pack.cpp), its inverse (matmul_unpack.cpp) and the kernels
// (matmul_simd.h) read. A unit is `chunks` 32-column chunks of `chunk_vectors` code
// vectors (VB = 4 x lanes bytes each: the nibble or low 2-bit vectors, then the high-bit
// ones from `high`), then the scale area, whose parts sit at offsets counted in `lanes`
// bytes (a 2-byte f16 per lane spans 2): d (f16; MXFP4's e8m0 byte), m (f16 m or dmin),
// sc and mn (one byte per lane for each of the unit's n_scales sub-block scales / mins;
// Q2_K keeps sc | mn << 4 in sc). -1: the part is absent.
struct UnitLayout {
  int chunks = 1;
  int chunk_vectors = 0;
  int high = -1;  // first high-bit / 2-bit vector within a chunk
  int d = 0, m = -1, sc = -1, mn = -1;
  int n_scales = 0;
};
constexpr UnitLayout unit_layout(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return {1, 8, -1, 0, -1, -1, -1, 0};
    case GgmlType::Q4_0: case GgmlType::IQ4_NL: case GgmlType::MXFP4: return {1, 4, -1, 0, -1, -1, -1, 0};
    case GgmlType::Q4_1: return {1, 4, -1, 0, 2, -1, -1, 0};
    case GgmlType::Q5_0: return {1, 5, 4, 0, -1, -1, -1, 0};
    case GgmlType::Q5_1: return {1, 5, 4, 0, 2, -1, -1, 0};
    case GgmlType::Q4_K: return {8, 4, -1, 0, 2, 4, 12, 8};
    case GgmlType::Q5_K: return {8, 5, 4, 0, 2, 4, 12, 8};
    case GgmlType::Q6_K: return {8, 6, 4, 0, -1, 2, -1, 16};
    case GgmlType::Q2_K: return {8, 2, -1, 0, 2, 4, -1, 16};
    case GgmlType::Q3_K: return {8, 3, 2, 0, -1, 2, -1, 16};
    case GgmlType::IQ4_XS: return {8, 4, -1, 0, -1, 2, -1, 8};
    default: return {};
  }
}

// Packing traits of one weight type, derived from its UnitLayout: whether it has a packed
// layout (the float types, Q8_1, ... have none: packed = false), which activation format
// its kernels take, and a unit's columns, code vectors and scale bytes per lane.
struct PackTraits {
  bool packed = false;
  ActKind act = ActKind::Block32;  // Super256 for the 256-value super-block formats
  int64_t unit_cols = 32;          // columns per packed unit (one GGUF block or super-block)
  int code_vectors = 0;            // code vectors (VB = 4 x lanes bytes) per unit
  int scale_bytes = 0;             // scale / min bytes per row (lane) per unit
};
constexpr PackTraits pack_traits(GgmlType t) {
  const UnitLayout l = unit_layout(t);
  if (l.chunk_vectors == 0) return {};
  // The scale area ends after its last part: d (f16; MXFP4's one e8m0 byte), m, sc, mn.
  int end = l.d + (t == GgmlType::MXFP4 ? 1 : 2);
  if (l.m >= 0) end = l.m + 2;
  if (l.sc >= 0) end = l.sc + l.n_scales;
  if (l.mn >= 0) end = l.mn + l.n_scales;
  return {true, l.chunks > 1 ? ActKind::Super256 : ActKind::Block32, 32 * l.chunks, l.chunks * l.chunk_vectors, end};
}
// The unit sizes the layouts above state (code vectors, scale bytes per lane).
static_assert(pack_traits(GgmlType::Q8_0).code_vectors == 8 && pack_traits(GgmlType::Q8_0).scale_bytes == 2 &&
              pack_traits(GgmlType::Q4_1).scale_bytes == 4 && pack_traits(GgmlType::Q5_1).code_vectors == 5 &&
              pack_traits(GgmlType::MXFP4).scale_bytes == 1 && pack_traits(GgmlType::Q4_K).code_vectors == 32 &&
              pack_traits(GgmlType::Q4_K).scale_bytes == 20 && pack_traits(GgmlType::Q5_K).code_vectors == 40 &&
              pack_traits(GgmlType::Q6_K).code_vectors == 48 && pack_traits(GgmlType::Q6_K).scale_bytes == 18 &&
              pack_traits(GgmlType::Q2_K).code_vectors == 16 && pack_traits(GgmlType::Q2_K).scale_bytes == 20 &&
              pack_traits(GgmlType::Q3_K).code_vectors == 24 && pack_traits(GgmlType::Q3_K).scale_bytes == 18 &&
              pack_traits(GgmlType::IQ4_XS).code_vectors == 32 && pack_traits(GgmlType::IQ4_XS).scale_bytes == 10 &&
              pack_traits(GgmlType::Q4_K).unit_cols == 256 && pack_traits(GgmlType::Q4_0).unit_cols == 32 &&
              !pack_traits(GgmlType::F16).packed);

// The types whose blocks are 256-value super-blocks (activations as Q8_K).
constexpr bool is_super_block(GgmlType t) { return pack_traits(t).unit_cols == 256; }
inline bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}
constexpr ActKind act_kind(GgmlType t) { return pack_traits(t).act; }
constexpr int64_t unit_cols(GgmlType t) { return pack_traits(t).unit_cols; }

// Bytes of one packed unit for `lanes` rows.
inline size_t packed_unit_bytes(GgmlType t, int lanes) {
  const PackTraits p = pack_traits(t);
  // A size of 0 would make prepare() pack nothing and the kernels read past it.
  PAGODA_CHECK(p.packed, std::string("packed_unit_bytes: no packed layout for ") + type_name(t));
  const size_t l = static_cast<size_t>(lanes);
  return static_cast<size_t>(p.code_vectors) * 4 * l + static_cast<size_t>(p.scale_bytes) * l;
}

// Where unit u of row group g sits in a packed matrix. The groups of one row tile (the
// kernel table's tile_rows_quant: 4 groups; tile_groups) lie column chunk by column chunk:
// chunk c (units [c C, c C + C'), C = chunk_units, C' = C or the last chunk's rest) holds
// those units of the tile's first group, then of its second, ... So a one-token pass
// that walks a tile chunk by chunk, every group's part of a chunk in turn, reads memory
// in one line and reads each chunk of activations for all the tile's groups while it is
// still in L1. Group after group across whole rows instead, a row of 4096+ columns let the
// streaming weights evict the activations from L1 before the next group came back to them
// (Q4_0, one Zen 4 thread: 0.74-0.85 of the probe at 4096-11264 columns against 0.95 at
// 2048; with the kernel's activation reads folded onto their first 64 units, 0.94-0.96).
// Walking the old layout chunk by chunk instead jumped every 18 KiB and read 0.60.
// tile_groups 1 (and chunk_units = n_units) is plain group-major order: the AMX and AVX2
// levels, the K-quants, rows under kPackedChunkMinCols, and matrices whose
// row_slice()s would not fall on tiles.
struct PackedAddr {
  const uint8_t* base = nullptr;
  int64_t n_groups = 0, n_units = 0, chunk_units = 1;
  int tile_groups = 1;
  size_t unit_bytes = 0;

  const uint8_t* unit(int64_t g, int64_t u) const {
    const int64_t t = g / tile_groups, gg = g % tile_groups;
    const int64_t k = std::min<int64_t>(tile_groups, n_groups - t * tile_groups);  // groups in tile t
    const int64_t c0 = u / chunk_units * chunk_units;
    const int64_t width = std::min(chunk_units, n_units - c0);
    const int64_t index = t * tile_groups * n_units + c0 * k + gg * width + (u - c0);
    return base + static_cast<size_t>(index) * unit_bytes;
  }
  // Units [u, chunk end) of a group are consecutive.
  int64_t chunk_end(int64_t u) const { return std::min(n_units, (u / chunk_units + 1) * chunk_units); }
  // Bytes from unit u of group g to unit u of group g + 1, for two groups of one row tile.
  size_t group_stride(int64_t u) const {
    return static_cast<size_t>(tile_groups == 1 ? n_units : chunk_end(u) - u / chunk_units * chunk_units) * unit_bytes;
  }
};

// The column chunk of the 32-wide formats' tiled layout: ~16 KiB of one group's units (Q4_0
// 56 units, Q8_0 30), small enough that a chunk's activations stay in L1 while one group's
// part streams past, large enough that a multi-token pass makes few calls (chunks of 4.5 KiB
// cost Matmul8 / Matmul512 5-15% on 2048 x 5632; 16 KiB within the machine's noise, two
// alternating rounds). Zen 4, both layouts in one process (cold matvecs, each pass beside its
// own probe pass, alternating per pass; 4.5 KiB chunks), fraction of the probe, one thread:
// Q4_0 2048 x 5632 0.78 -> 0.92, 1024 x 11264 0.77 -> 0.91, 2048 x 4096 0.70 -> 0.88; two
// threads at ~58-60 GB/s Q4_0 2048 x 4096 0.64 -> 0.76, Q8_0 2048 x 5632 0.81 -> 0.84. With
// 16 KiB against the build before (separate runs): one thread Q4_0 0.75-0.83 -> 0.84-0.91
// on those shapes; two at ~60 GB/s Q4_0 1024 x 11264 0.64 -> 0.91. The same bits.
constexpr size_t kPackedChunkBytes = 16384;
// Rows of fewer columns stay whole: at 2048 the activations stay in L1 anyway, and chunking
// them too cost Q4_0 5632 x 2048 0.97 -> 0.93 of the probe on one thread and Q8_0's 2048
// columns gained 0-3%.
constexpr int64_t kPackedChunkMinCols = 4096;

// Activations quantized for one matmul call. All arrays are token-major with
// the strides below; the quantizer fills the arrays its kind needs.
struct QuantizedActs {
  int64_t n_tokens = 0;
  int64_t n_cols = 0;
  const int8_t* q = nullptr;       // [n_tokens, n_cols] codes in [-127, 127]
  const float* d = nullptr;        // [n_tokens, n_scales]: per 32 (Block32) or 256 (Super256)
  const int32_t* sum32 = nullptr;  // [n_tokens, n_cols / 32] sum of q over each 32
  const float* dsum32 = nullptr;   // Block32: [n_tokens, n_cols / 32] d * sum32
  const float* neg8_dsum32 = nullptr;  // Block32: -8 * dsum32, Q4_0's offset term
  const int32_t* sum16 = nullptr;  // Super256: [n_tokens, n_cols / 16] sum of q over each 16
  // Super256: [n_tokens, n_cols / 32] the two 16-sums of each 32 as int16 pairs (low half
  // sum16[2j], high half sum16[2j+1]; |sum| <= 16 x 127 fits), the operand of the
  // Q2_K / Q3_K kernels' 16-bit dot products (vpdpwssd / pmaddwd) with per-row pairs.
  const int32_t* sum16_pairs = nullptr;
  // Super256: [n_tokens, n_cols / 64] the 32-sums of each two 32-column sub-blocks as
  // int16 pairs (|sum| <= 32 x 127 fits), the operand of the Q4_K / Q5_K kernels' min
  // term: one 16-bit dot product against the rows' mins as pairs per 64 columns.
  const int32_t* sum32_pairs = nullptr;
  int64_t d_per = 32;              // values per scale: 32 (Block32) or 256 (Super256)
  // When the caller asks for them (a level whose prefill kernel reads them: AMX): each
  // whole 16-token group's codes block by block, the A tile layout, and the per-token
  // scalars its kernels read (Block32Tiles, Super256Tiles). Null otherwise: the kernel
  // lays out its tokens itself.
  const int8_t* tile_q = nullptr;
  const float* tile_scalars = nullptr;
  const int32_t* tile_sum32_pairs = nullptr;  // Super256 only
  int64_t n_scales() const { return n_cols / d_per; }
};

// One 16-token group of Block32 activations laid out block by block: block u holds the
// 16 tokens' 32 codes each (q + u * 512: an AMX A tile of 16 rows x 32 bytes, contiguous)
// and per token its d, -8 * dsum32 (Q4_0's offset term) and -128 * dsum32 (Q8_0's: its
// packed codes are q + 128), each at [u * 16 + token]. Contiguous per block, because read
// in place the tokens' codes sit n_cols apart (at n_cols = 2048 all in two L1 sets) and
// the per-token scalars 4 * n_blocks bytes apart. The offsets are the same float products
// the AVX-512 kernels form, so kernels reading them stay bit-identical to those.
struct Block32Tiles {
  int8_t* q;
  float* d;
  float* off_q4;
  float* off_q8;
  static constexpr size_t kGroupBlockBytes = 512;  // codes of one block of the group
  // Group g of groups laid out back to back: codes at q0 + g * 16 * n_cols, and scalars
  // (d, off_q4, off_q8: 16 per block each) at s0 + g * 48 * n_blocks.
  static Block32Tiles group(int8_t* q0, float* s0, int64_t n_cols, int64_t g) {
    const int64_t nb = n_cols / 32;
    float* s = s0 + g * 48 * nb;
    return {q0 + g * 16 * n_cols, s, s + 16 * nb, s + 32 * nb};
  }
  // Group g of a's layout (cast away const: the buffers belong to the caller's scratch,
  // as for the other arrays). Requires: a.tile_q.
  static Block32Tiles group(const QuantizedActs& a, int64_t g) {
    return group(const_cast<int8_t*>(a.tile_q), const_cast<float*>(a.tile_scalars), a.n_cols, g);
  }
  // Writes token `t` of a (its row already quantized) into this group as its
  // (t % 16)-th token.
  void write_token(const QuantizedActs& a, int64_t t) const {
    const int64_t nb = a.n_cols / 32, r = t % 16;
    const int8_t* src = a.q + t * a.n_cols;
    for (int64_t u = 0; u < nb; ++u) {
      std::memcpy(q + u * kGroupBlockBytes + r * 32, src + u * 32, 32);
      const int64_t i = t * nb + u;
      d[u * 16 + r] = a.d[i];
      off_q4[u * 16 + r] = a.neg8_dsum32[i];
      off_q8[u * 16 + r] = -128.0f * a.dsum32[i];
    }
  }
};

// One 16-token group of Super256 activations laid out for the AMX Q4_K / Q6_K kernels
// (Q6_K reads the codes and scales; its 16-sums come from QuantizedActs): the codes
// as Block32Tiles' (32-column sub-block k at q + k * 512, token r at + r * 32), and per
// super-block u the tokens' scales d[u * 16 + token] and the 32-sums of sub-blocks
// (2i, 2i + 1) as one int16 pair (low half the first; |sum| <= 32 x 127 fits) at
// sum32_pairs[(u * 4 + i) * 16 + token]: the operand of one vpdpwssd against the rows'
// mins as pairs, so the min term is 4 instructions per token and super-block.
struct Super256Tiles {
  int8_t* q;
  float* d;
  int32_t* sum32_pairs;
  // Group g of groups laid out back to back: codes at q0 + g * 16 * n_cols, scales at
  // d0 + g * 16 * n_superblocks, pairs at p0 + g * 64 * n_superblocks.
  static Super256Tiles group(int8_t* q0, float* d0, int32_t* p0, int64_t n_cols, int64_t g) {
    const int64_t nsb = n_cols / 256;
    return {q0 + g * 16 * n_cols, d0 + g * 16 * nsb, p0 + g * 64 * nsb};
  }
  // Group g of a's layout. Requires: a.tile_q.
  static Super256Tiles group(const QuantizedActs& a, int64_t g) {
    return group(const_cast<int8_t*>(a.tile_q), const_cast<float*>(a.tile_scalars),
                 const_cast<int32_t*>(a.tile_sum32_pairs), a.n_cols, g);
  }
  void write_token(const QuantizedActs& a, int64_t t) const {
    const int64_t nb = a.n_cols / 32, nsb = a.n_cols / 256, r = t % 16;
    const int8_t* src = a.q + t * a.n_cols;
    for (int64_t k = 0; k < nb; ++k) std::memcpy(q + k * 512 + r * 32, src + k * 32, 32);
    for (int64_t u = 0; u < nsb; ++u) {
      d[u * 16 + r] = a.d[t * nsb + u];
      for (int64_t i = 0; i < 4; ++i) sum32_pairs[(u * 4 + i) * 16 + r] = a.sum32_pairs[t * (nb / 2) + u * 4 + i];
    }
  }
};

// Quantizes one token row x[n_cols] into the rows `token` of the arrays of a
// (cast away const: the buffers belong to the caller's scratch). Every ISA
// produces bit-identical codes and scales: d = amax / 127, q = round-to-nearest-
// even(x * (1/d)), the same float operations in the same order.
struct ActRowOut {
  int8_t* q;
  float* d;
  int32_t* sum32;
  float* dsum32;   // Block32 only
  int32_t* sum16;  // Super256 only
  float* neg8_dsum32;  // Block32 only
};
void quantize_act_row_scalar(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out);
void quantize_act_row_avx2(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out);
void quantize_act_row_avx512(ActKind kind, const float* x, int64_t n_cols, const ActRowOut& out);

// One tile of work: rows [row_begin, row_end) (row_begin a multiple of the
// group size for packed kernels), tokens [tok_begin, tok_end). y is the whole
// output [n_tokens, n_rows].
struct Tile {
  int64_t row_begin, row_end, tok_begin, tok_end;
};

// Float-weight kernels walk columns in chunks (walk_chunks' kc). AVX2: kFloatKcAvx2, where
// a 4-row x 2-token micro-tile then reads 4 KiB of f16 weights and 4 KiB of activations
// per chunk, all from L1, where whole 2048-column rows (16 + 16 KiB per micro-tile)
// streamed from L2 at 32 B/cycle and held the FMAs to ~45% of peak. AVX-512:
// kFloatKcAvx512, since each chunk ends in a reduction of 16 accumulators (4 x 4
// micro-tile) that 256 vdpbf16ps must pay for: one Zen 4 core, 512 tokens x 5632 x 2048,
// chunks of 512 / 1024 / 2048 / 4096 columns: BF16 174 / 196 / 209 / 207 Gop/s, F16 99 /
// 105 / 111 / 110 (after reduce_4x4); a 4-token micro-tile's bf16 activations are then
// 16 KiB, in L1 beside the weight rows streaming from L2. Chunk boundaries depend only on
// n_cols and the level, so the summation order is the same for every tiling.
constexpr int64_t kFloatKcAvx2 = 512;
constexpr int64_t kFloatKcAvx512 = 2048;

// Panels of 16-bit floats: at Isa::Avx512, F16 weights, and BF16 weights on CPUs with
// AVX512_BF16 (the vdpbf16ps kernel), and at Isa::Avx2 F16 and BF16 weights, with
// n_cols % 32 == 0 are copied into panels instead of rows (prepare(), half_panels()). Rows
// go in tiles of 16 (zero rows pad the last), a tile column chunk (the level's walk_chunks
// kc, panel_chunk_cols) by column chunk, a chunk panel (4 rows) by
// panel, a panel 32 columns by 32, and those 32 columns of its 4 rows one after another
// (4 x 64 B): PackedAddr's tiled layout (panel_addr). The decode walk (walk_chunks with
// kPanelTileRows) then reads each thread's rows as one sequential stream, where rows read
// 4 streams a row apart, and the tile's 4 panels take the chunk's activations from L1 in
// turn, where a whole 4-row group's rows (4 x 11 KiB at 5632 columns) pushed them out
// between groups. Same products, same order: bit-identical to the row kernels. Measured
// on a Zen 4, BF16, both layouts in one process, alternating per pass after a probe pass
// each (matmul_bench, 16 pairs, two rounds; fraction of the probe over 2048x2048 /
// 5632x2048 / 2048x5632 / 32000x2048): one thread 0.71-0.82 -> 0.96-1.01, two threads
// 0.77-0.96 -> 0.97-1.01; F16 (no software prefetch on panels, see float_micro) one thread
// 0.77-0.81 -> 0.82-0.99, two threads 0.81-0.96 -> 0.93-1.00. 512-token prefill in one
// process: BF16 -8% to +1% time, F16 +1-2%. Plain 4-row panels (no column chunks) lost at
// 5632 columns on one thread in a prototype (0.90 -> 0.88). AVX2 on the same Zen 4
// (PAGODA_ISA=avx2, measured the same way, two threads): see matmul_avx2.cpp's float_micro.
constexpr int64_t kPanelRows = 4;
constexpr int64_t kPanelTileRows = 16;
// The column chunk of a panel copy for level isa: the chunk its float kernels walk, so a
// pass never leaves one.
inline int64_t panel_chunk_cols(Isa isa) { return isa == Isa::Avx2 ? kFloatKcAvx2 : kFloatKcAvx512; }

// Whether prepare() lays out a matrix in panels.
bool half_panels(GgmlType type, Isa isa, int64_t n_cols);

// The panel copy at base is PackedAddr's tiled layout: groups of kPanelRows rows, units of
// 32 columns (the panel's 4 x 32 values, 256 B), row tiles of 4 groups, column chunks of
// chunk_cols columns; rows padded to whole tiles. Requires: n_cols % 32 == 0, chunk_cols % 32 == 0.
inline PackedAddr panel_addr(const uint8_t* base, int64_t n_rows, int64_t n_cols, int64_t chunk_cols) {
  PackedAddr a;
  a.base = base;
  a.n_groups = (n_rows + kPanelTileRows - 1) / kPanelTileRows * (kPanelTileRows / kPanelRows);
  a.n_units = n_cols / 32;
  a.chunk_units = chunk_cols / 32;
  a.tile_groups = static_cast<int>(kPanelTileRows / kPanelRows);
  a.unit_bytes = kPanelRows * 32 * sizeof(uint16_t);
  return a;
}

// W[r][k] in the panel copy a describes.
inline const uint8_t* panel_at(const PackedAddr& a, int64_t r, int64_t k) {
  return a.unit(r / kPanelRows, k / 32) + (r % kPanelRows * 32 + k % 32) * sizeof(uint16_t);
}

// Sets rows[i] to row r0 + i's column k0 (elem bytes a value) in w's rows, or in its panel
// copy (w.packed(), see kPanelRows), and returns the bytes from one of a row's 32-column
// steps to the next: 32 values in rows, a panel's 4 x 32 in panels (a pass never leaves
// one column chunk, whose steps sit that far apart).
template <int RM>
inline int64_t micro_rows(const WeightMatrix& w, int64_t r0, int64_t k0, int64_t elem, const uint8_t* (&rows)[RM]) {
  if (w.packed() == nullptr) {
    for (int i = 0; i < RM; ++i) rows[i] = w.data() + (r0 + i) * w.row_bytes() + k0 * elem;
    return 32 * elem;
  }
  // A panel's rows sit 64 B apart: panel_at (two 64-bit divisions) once per panel, not
  // per row. Per row it cost AVX2's 512-column, 2-token micro-tiles 1-6% of a 512-token
  // matmul against rows (Zen 4, one process); once per panel, within 1%.
  const PackedAddr addr = panel_addr(w.packed(), w.n_rows(), w.n_cols(), panel_chunk_cols(w.isa()));
  rows[0] = panel_at(addr, r0, k0);
  for (int i = 1; i < RM; ++i)
    rows[i] = (r0 + i) % kPanelRows == 0 ? panel_at(addr, r0 + i, k0) : rows[i - 1] + 32 * sizeof(uint16_t);
  return static_cast<int64_t>(addr.unit_bytes);
}

// Calls pass(k0, k1, r0, r1) over the tile, in column chunks of kc. With more tokens than one
// micro-tile holds, chunks are the outer loop (the chunk's weights are reused
// from L1/L2 by every token micro-tile); with few (decode), each group of 4
// rows runs through all its chunks before the next, so weights stream
// sequentially from DRAM. Both orders add the same chunk sums in the same
// order into y, so a token's result does not depend on the batch around it.
// block_rows: the rows a decode pass takes at a time (4; kPanelTileRows for panels,
// whose tile is laid out chunk by chunk).
template <class Pass>
void walk_chunks(int64_t n_cols, int64_t kc, const Tile& tile, int64_t micro_tokens, Pass&& pass,
                 int64_t block_rows = 4) {
  if (tile.tok_end - tile.tok_begin > micro_tokens) {
    for (int64_t k0 = 0; k0 < n_cols; k0 += kc) pass(k0, std::min(n_cols, k0 + kc), tile.row_begin, tile.row_end);
    return;
  }
  for (int64_t r = tile.row_begin; r < tile.row_end; r += block_rows)
    for (int64_t k0 = 0; k0 < n_cols; k0 += kc)
      pass(k0, std::min(n_cols, k0 + kc), r, std::min(tile.row_end, r + block_rows));
}

// Quantized weights, packed layout, quantized activations.
void matmul_packed_avx512(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y);
void matmul_packed_avx2(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y);
// AMX-INT8 (matmul_amx.cpp) over the AVX-512 packing, bit-identical to
// matmul_packed_avx512: Q8_0, Q4_0, Q4_K and Q6_K, whole 16-token sub-tiles on the tiles, the
// rest of the tile's tokens through the AVX-512 kernel.
// Requires: isa_supported(Isa::Amx), w.isa() == Isa::Amx (or Avx512: the same packing).
void matmul_packed_amx(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y);
// AMX-BF16 (matmul_bf16_amx.cpp) for BF16 weights: whole 16-token groups of the tile on the
// tiles (xvnni: the call's 16-token groups in bf16_acts_vnni_amx's layout, see matmul()), the rest through
// matmul_float_avx512. Requires: isa_supported(Isa::Amx) and AMX-BF16.
void matmul_bf16_amx(const WeightMatrix& w, const float* x, const uint16_t* xbf, const uint16_t* xvnni,
                     const Tile& tile, float* y);
void bf16_acts_vnni_amx(const uint16_t* rows, int64_t n_cols, uint16_t* out);
// Float weights (F32/F16/BF16) in GGUF layout, f32 activations x [n_tokens, n_cols].
// xbf: the activations rounded to bf16 ([n_tokens, n_cols]) for BF16 weights on
// CPUs with avx512bf16, else nullptr.
void matmul_float_avx512(const WeightMatrix& w, const float* x, const uint16_t* xbf,
                         const Tile& tile, float* y);
void matmul_float_avx2(const WeightMatrix& w, const float* x, const Tile& tile, float* y);
// f32 -> bf16 (round to nearest even) of n values, AVX-512 BF16.
void convert_to_bf16_avx512(const float* x, uint16_t* out, int64_t n);

// The rows of a group of the packed layout of a level: kernel_table(isa).packed_lanes
// (kernel_table.cpp). Requires: isa != Isa::Scalar (no packing there).
int packed_lanes(Isa isa);

// The addressing of w's packed bytes. Requires: w.packed() != nullptr.
inline PackedAddr packed_addr(const WeightMatrix& w) {
  const int lanes = packed_lanes(w.isa());
  PackedAddr a;
  a.base = w.packed();
  a.n_groups = (w.n_rows() + lanes - 1) / lanes;
  a.n_units = w.n_cols() / unit_cols(w.type());
  a.chunk_units = w.packed_chunk_units();
  a.tile_groups = w.packed_tile_groups();
  a.unit_bytes = packed_unit_bytes(w.type(), lanes);
  return a;
}
// Whether packed Q8_0 codes are q (AVX2, 8 lanes) rather than q + 128.
inline bool q8_codes_signed(int lanes) { return lanes == 8; }

// PAGODA_AVX512_EMULATION: the test-only build (preset `emu`, avx512_emulation.h), where the AVX-512
// kernels run through SIMDe on any x86-64 CPU.
#ifdef PAGODA_AVX512_EMULATION
inline constexpr bool kEmulatedAvx512 = true;
#else
inline constexpr bool kEmulatedAvx512 = false;
#endif
inline bool isa_runs(Isa isa) { return (kEmulatedAvx512 && isa != Isa::Amx) || isa_supported(isa); }

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
constexpr bool is_codebook(GgmlType t) { return t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS || t == GgmlType::MXFP4; }
inline const int8_t* codebook(GgmlType t) { return t == GgmlType::MXFP4 ? kMxfp4Values : kIq4nlValues; }

// Decodes one unit of a GGUF row (matmul_pack.cpp): what packing interleaves and the
// scalar kernels compute from.
void decode_unit(GgmlType type, const uint8_t* blk, UnitCodes& u);

}  // namespace pagoda::matmul_detail
