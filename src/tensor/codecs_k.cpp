// Scalar reference codecs for the K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.
//
// Decoding is ggml's (dequantize_row_q*_K), written per element rather than in
// ggml's unrolled order; the layouts are spelled out next to each decoder.
//
// Encoding is ggml's reference scheme (quantize_row_q*_K_ref) with its search
// simplified where noted: per sub-block a weighted least-squares fit of
// scale (and min) over a small grid of candidate inverse scales, then the
// sub-block scales are themselves quantized against one f16 super-block scale,
// and finally every value is re-coded against the scale it will be decoded with
// (so each value is the nearest level of its sub-block's final grid).
// Measured on N(0,1) data (codecs_test pins these with ~15% margin), RMS error / RMS(x):
//   Q2_K 0.27, Q3_K 0.15, Q4_K 0.071, Q5_K 0.036, Q6_K 0.018, Q8_K 0.0069 (Q4_0 0.085,
//   Q8_0 0.0053 for scale).
// Q2_K and Q3_K use the same fits as Q4_K and Q6_K on their 16-value sub-blocks, not
// ggml's further searches (make_qkx3 / imatrix weights): the blocks are valid and each
// value is the nearest level of its final grid, but the bytes differ from llama.cpp's
// quantizer and the error is somewhat higher.
// The f16 super-block scale is about amax/1000 (Q4_K) or amax/4000 (Q6_K), an f16
// subnormal once a block's amax drops below ~0.05, which costs up to a few percent
// extra relative error on such tiny blocks, exactly as in ggml.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/codecs_internal.h"
#include "tensor/codecs_k.h"
#include "tensor/types.h"

namespace pagoda {

namespace {

using codecs_internal::load_block;
using codecs_internal::signed_absmax;
using codecs_internal::store_block;

// Round half to even, as ggml's nearest_int (default FP rounding mode assumed).
int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }

constexpr int kSubBlocks = 8;     // Q4_K / Q5_K: 8 sub-blocks of 32
constexpr int kSubBlockSize = 32;
// Below this a group is treated as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Q4_K/Q5_K scales[12]: sub-block j (0..7) has a 6-bit scale sc and 6-bit min m.
//   j < 4:  sc = scales[j] & 63,  m = scales[j+4] & 63
//   j >= 4: sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4
//           m  = (scales[j+4] >> 4) | (scales[j]   >> 6) << 4
// i.e. bytes 0..7 carry the low 6 bits of sub-blocks 0..3 and lend their top two
// bits to the high bits of sub-blocks 4..7, whose low nibbles fill bytes 8..11.
void unpack_scale_min(const uint8_t* scales, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0f) | (scales[j - 4] >> 6) << 4;
    *m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
  }
}

// Inverse of unpack_scale_min. Requires: 0 <= sc[j], m[j] <= 63.
void pack_scale_min(const int* sc, const int* m, uint8_t* scales) {
  std::memset(scales, 0, kKScaleBytes);
  for (int j = 0; j < kSubBlocks; ++j) {
    if (j < 4) {
      scales[j] |= static_cast<uint8_t>(sc[j]);
      scales[j + 4] |= static_cast<uint8_t>(m[j]);
    } else {
      scales[j + 4] = static_cast<uint8_t>((sc[j] & 0x0f) | (m[j] & 0x0f) << 4);
      scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// ---- decoders ----

// Q4_K qs: sub-blocks are paired (0,1), (2,3), ...; pair p owns qs[32p .. 32p+32),
// the even sub-block in the low nibbles and the odd one in the high nibbles.
int q4_k_code(const uint8_t* qs, int e) {
  const int j = e / kSubBlockSize, l = e % kSubBlockSize;
  const uint8_t byte = qs[32 * (j / 2) + l];
  return (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
}

// Q5_K adds bit j of qh[l] as the fifth bit of element l of sub-block j.
int q5_k_code(const uint8_t* qs, const uint8_t* qh, int e) {
  const int j = e / kSubBlockSize, l = e % kSubBlockSize;
  return q4_k_code(qs, e) | ((qh[l] >> j) & 1) << 4;
}

// Q6_K: two halves of 128 values, each with 64 bytes of ql and 32 of qh. Within
// half h, quarter k (32 values) and lane l: the low 4 bits are in
// ql[64h + 32(k&1) + l] (low nibble for k = 0,1, high nibble for k = 2,3), the
// high 2 bits are bits 2k..2k+1 of qh[32h + l]. Value e uses scales[e / 16].
int q6_k_code(const uint8_t* ql, const uint8_t* qh, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t low_byte = ql[64 * h + 32 * (k & 1) + l];
  const int low = k < 2 ? (low_byte & 0x0f) : (low_byte >> 4);
  const int high = (qh[32 * h + l] >> (2 * k)) & 3;
  return low | high << 4;
}

// Q4_K and Q5_K share the scale/min layout: value e of sub-block j decodes to
// d·sc_j·code(b, e) - dmin·m_j, where code(b, e) is the format's 4- or 5-bit code.
template <typename Block, typename CodeFn>
void dequantize_scale_min_k(const void* src, float* y, int64_t num_blocks, CodeFn code) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<Block>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int j = 0; j < kSubBlocks; ++j) {
      int sc, m;
      unpack_scale_min(b.scales, j, &sc, &m);
      const float scale = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
      for (int l = 0; l < kSubBlockSize; ++l) {
        const int e = j * kSubBlockSize + l;
        y[e] = scale * static_cast<float>(code(b, e)) - offset;
      }
    }
  }
}

// Q2_K / Q3_K: the 2-bit code of value e; half h = e / 128 owns qs[32h .. 32h+32),
// and its quarter j = (e % 128) / 32 sits in bits 2j..2j+1 of byte l = e % 32.
int low2_code(const uint8_t* qs, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * j)) & 3;
}

// Q3_K: the third bit of value e is bit 4h + j of hmask[l] (h, j, l as low2_code).
int q3_k_high_bit(const uint8_t* hmask, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return (hmask[l] >> (4 * h + j)) & 1;
}

// Q3_K's 6-bit scale i (0..15), still biased by 32: low nibble from byte i (i < 8) or
// the high nibble of byte i - 8, top two bits from byte 8 + i % 4 at bit 2 (i / 4).
int q3_k_scale(const uint8_t* scales, int i) {
  const int low = i < 8 ? scales[i] & 0x0f : scales[i - 8] >> 4;
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | high << 4;
}

}  // namespace

void dequantize_q2_k(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sm = b.scales[e / 16];
      const float scale = d * static_cast<float>(sm & 0x0f), offset = dmin * static_cast<float>(sm >> 4);
      y[e] = scale * static_cast<float>(low2_code(b.qs, e)) - offset;
    }
  }
}

void dequantize_q3_k(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d = f16_to_f32(b.d);
    for (int e = 0; e < kQK_K; ++e) {
      const float scale = d * static_cast<float>(q3_k_scale(b.scales, e / 16) - 32);
      const int q = low2_code(b.qs, e) - (q3_k_high_bit(b.hmask, e) ? 0 : 4);
      y[e] = scale * static_cast<float>(q);
    }
  }
}

void dequantize_q4_k(const void* src, float* y, int64_t num_blocks) {
  dequantize_scale_min_k<BlockQ4_K>(src, y, num_blocks,
                                    [](const BlockQ4_K& b, int e) { return q4_k_code(b.qs, e); });
}

void dequantize_q5_k(const void* src, float* y, int64_t num_blocks) {
  dequantize_scale_min_k<BlockQ5_K>(src, y, num_blocks,
                                    [](const BlockQ5_K& b, int e) { return q5_k_code(b.qs, b.qh, e); });
}

void dequantize_q6_k(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = f16_to_f32(b.d);
    for (int e = 0; e < kQK_K; ++e) {
      y[e] = d * static_cast<float>(b.scales[e / 16]) *
             static_cast<float>(q6_k_code(b.ql, b.qh, e) - 32);
    }
  }
}

void dequantize_q8_k(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int e = 0; e < kQK_K; ++e) y[e] = b.d * static_cast<float>(b.qs[e]);
  }
}

// ---- encoders ----

namespace {

// Fits x[l] ~= scale * q[l] - offset, q in 0..nmax, offset >= 0 (the sub-block's
// minimum, clipped so 0 stays representable), minimising sum w[l] * err^2.
// ggml's make_qkx2_quants: try inverse scales (nmax + rmin + rdelta*s)/(max-min)
// for s = 0..num_steps, re-fit scale and offset to each resulting code vector by
// weighted least squares, keep the best. Returns scale (0 for a constant group).
float fit_scale_offset(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                       int num_steps, uint8_t* q, float* offset) {
  float min = *std::min_element(x, x + n), max = *std::max_element(x, x + n);
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(q, q + n, 0);
    *offset = -min;
    return 0.0f;
  }
  auto code = [&](float v, float iscale) {
    return static_cast<uint8_t>(std::clamp(nearest_int(iscale * (v - min)), 0, nmax));
  };
  auto weighted_error = [&](const uint8_t* codes, float scale, float min_value) {
    float err = 0;
    for (int l = 0; l < n; ++l) {
      const float diff = scale * static_cast<float>(codes[l]) + min_value - x[l];
      err += w[l] * diff * diff;
    }
    return err;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int l = 0; l < n; ++l) q[l] = code(x[l], iscale);
  float best_error = weighted_error(q, scale, min);

  float sum_w = 0, sum_x = 0;
  for (int l = 0; l < n; ++l) {
    sum_w += w[l];
    sum_x += w[l] * x[l];
  }
  uint8_t trial[kQK_K];
  for (int s = 0; s <= num_steps; ++s) {
    iscale = (rmin + rdelta * static_cast<float>(s) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int l = 0; l < n; ++l) {
      trial[l] = code(x[l], iscale);
      const float lv = trial[l];
      sum_l += w[l] * lv;
      sum_l2 += w[l] * lv * lv;
      sum_xl += w[l] * lv * x[l];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // keep 0 representable: refit the scale alone with min = 0
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float err = weighted_error(trial, this_scale, this_min);
    if (err < best_error) {
      std::copy(trial, trial + n, q);
      best_error = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *offset = -min;
  return scale;
}

// Shared by Q4_K and Q5_K: fits the 8 sub-blocks, quantizes their scales and
// offsets to 6 bits against f16 d and dmin, then re-codes every value against its
// final decoded grid. Writes d, dmin, scales[12] and codes q[256] in 0..nmax.
void quantize_k_scales_and_codes(const float* x, int nmax, float rmin, float rdelta,
                                 int num_steps, f16_t* d_out, f16_t* dmin_out,
                                 uint8_t* scales_out, uint8_t* q) {
  float weights[kSubBlockSize];
  float sub_scale[kSubBlocks], sub_offset[kSubBlocks];
  float max_scale = 0, max_offset = 0;
  for (int j = 0; j < kSubBlocks; ++j) {
    const float* xs = x + j * kSubBlockSize;
    // Weights as ggml: favour large-magnitude values, with a floor (the sub-block's
    // RMS) so that small ones still count.
    float sum_x2 = 0;
    for (int l = 0; l < kSubBlockSize; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / kSubBlockSize);
    for (int l = 0; l < kSubBlockSize; ++l) weights[l] = av_x + std::fabs(xs[l]);
    sub_scale[j] = fit_scale_offset(xs, weights, kSubBlockSize, nmax, rmin, rdelta, num_steps,
                                    q + j * kSubBlockSize, &sub_offset[j]);
    max_scale = std::max(max_scale, sub_scale[j]);
    max_offset = std::max(max_offset, sub_offset[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_offset = max_offset > 0 ? 63.0f / max_offset : 0.0f;
  int sc[kSubBlocks], m[kSubBlocks];
  for (int j = 0; j < kSubBlocks; ++j) {
    sc[j] = std::clamp(nearest_int(inv_scale * sub_scale[j]), 0, 63);
    m[j] = std::clamp(nearest_int(inv_offset * sub_offset[j]), 0, 63);
  }
  pack_scale_min(sc, m, scales_out);
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_offset / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  for (int j = 0; j < kSubBlocks; ++j) {
    const float scale = d * static_cast<float>(sc[j]);
    if (scale == 0.0f) continue;  // every value decodes to -offset; keep the fit's codes
    const float offset = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < kSubBlockSize; ++l) {
      const int e = j * kSubBlockSize + l;
      q[e] = static_cast<uint8_t>(std::clamp(nearest_int((x[e] + offset) / scale), 0, nmax));
    }
  }
}

// Symmetric fit x[l] ~= scale * (q[l] - nmax), q - nmax in -nmax..nmax-1, weights x^2
// (ggml's make_qx_quants with rmse_type 1). The inverse scale is -nmax/max with max
// the signed extreme, so the extreme lands on -nmax, the level with no mirror; 19
// nearby inverse scales are tried and the least-squares scale of the best kept.
float fit_symmetric(const float* x, int n, int nmax, uint8_t* q) {
  float max, amax;
  signed_absmax(x, n, &max, &amax);
  if (amax < kGroupMaxEps) {
    // Scale 0 makes every code decode to 0; code 0 (not nmax) is what ggml writes.
    std::fill(q, q + n, 0);
    return 0.0f;
  }
  auto code = [&](float v, float iscale) {
    return std::clamp(nearest_int(iscale * v), -nmax, nmax - 1);
  };
  // Least-squares scale for codes at this inverse scale, and its figure of merit
  // sumlx^2/suml2 (larger is smaller weighted error).
  auto evaluate = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int l = 0; l < n; ++l) {
      const float lv = static_cast<float>(code(x[l], iscale));
      const float w = x[l] * x[l];
      *sumlx += w * x[l] * lv;
      *suml2 += w * lv * lv;
    }
  };
  float best_iscale = -static_cast<float>(nmax) / max;
  float sumlx, suml2;
  evaluate(best_iscale, &sumlx, &suml2);
  float scale = suml2 > 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int s = -9; s <= 9; ++s) {
    if (s == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(s)) / max;
    evaluate(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      best_iscale = iscale;
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  for (int l = 0; l < n; ++l) q[l] = static_cast<uint8_t>(code(x[l], best_iscale) + nmax);
  return scale;
}

// Packs the 2-bit codes q[256] & 3 into qs[64] (layout: low2_code).
void pack_low2(const uint8_t* q, uint8_t* qs) {
  std::memset(qs, 0, kQK_K / 4);
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    qs[32 * h + l] |= static_cast<uint8_t>((q[e] & 3) << (2 * j));
  }
}

}  // namespace

// Per 16-value sub-block a scale and offset fit with codes 0..3 (Q4_K's search), the
// 16 scales and offsets quantized to 4 bits against f16 d = max / 15 and dmin, then
// every value re-coded against its decoded grid.
void quantize_q2_k(const float* x, void* dst, int64_t num_blocks) {
  constexpr int kGroups = kQK_K / 16;
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ2_K b;
    uint8_t q[kQK_K];
    float weights[16], sub_scale[kGroups], sub_offset[kGroups];
    float max_scale = 0, max_offset = 0;
    for (int g = 0; g < kGroups; ++g) {
      const float* xs = x + 16 * g;
      float sum_x2 = 0;
      for (int l = 0; l < 16; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 16);
      for (int l = 0; l < 16; ++l) weights[l] = av_x + std::fabs(xs[l]);
      sub_scale[g] = fit_scale_offset(xs, weights, 16, 3, -0.5f, 0.1f, 15, q + 16 * g, &sub_offset[g]);
      max_scale = std::max(max_scale, sub_scale[g]);
      max_offset = std::max(max_offset, sub_offset[g]);
    }
    const float inv_scale = max_scale > 0 ? 15.0f / max_scale : 0.0f;
    const float inv_offset = max_offset > 0 ? 15.0f / max_offset : 0.0f;
    int sc[kGroups], m[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = std::clamp(nearest_int(inv_scale * sub_scale[g]), 0, 15);
      m[g] = std::clamp(nearest_int(inv_offset * sub_offset[g]), 0, 15);
      b.scales[g] = static_cast<uint8_t>(sc[g] | m[g] << 4);
    }
    b.d = f32_to_f16(max_scale / 15.0f);
    b.dmin = f32_to_f16(max_offset / 15.0f);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int g = 0; g < kGroups; ++g) {
      const float scale = d * static_cast<float>(sc[g]);
      if (scale == 0.0f) continue;  // every value decodes to -offset; keep the fit's codes
      const float offset = dmin * static_cast<float>(m[g]);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * g + l;
        q[e] = static_cast<uint8_t>(std::clamp(nearest_int((x[e] + offset) / scale), 0, 3));
      }
    }
    pack_low2(q, b.qs);
    store_block(dst, i, b);
  }
}

// Per 16-value sub-block a symmetric fit with codes -4..3 (Q6_K's), the 16 scales
// quantized to 6 bits (-32..31, the signed extreme on -32) against f16 d, then every
// value re-coded against its decoded scale.
void quantize_q3_k(const float* x, void* dst, int64_t num_blocks) {
  constexpr int kGroups = kQK_K / 16;
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ3_K b;
    std::memset(&b, 0, sizeof(b));
    uint8_t q[kQK_K];  // value + 4, 0..7
    float group_scale[kGroups];
    for (int g = 0; g < kGroups; ++g) group_scale[g] = fit_symmetric(x + 16 * g, 16, 4, q + 16 * g);
    float max_scale, max_abs_scale;
    signed_absmax(group_scale, kGroups, &max_scale, &max_abs_scale);
    if (max_abs_scale < kGroupMaxEps) {  // all zeros: d = 0 decodes everything to 0
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -32.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    int ls[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      ls[g] = std::clamp(nearest_int(iscale * group_scale[g]), -32, 31);
      const int v = ls[g] + 32;
      if (g < 8) b.scales[g] |= static_cast<uint8_t>(v & 0x0f);
      else b.scales[g - 8] |= static_cast<uint8_t>((v & 0x0f) << 4);
      b.scales[8 + g % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (g / 4)));
    }
    const float d = f16_to_f32(b.d);
    for (int g = 0; g < kGroups; ++g) {
      const float scale = d * static_cast<float>(ls[g]);
      if (scale == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * g + l;
        q[e] = static_cast<uint8_t>(std::clamp(nearest_int(x[e] / scale), -4, 3) + 4);
      }
    }
    pack_low2(q, b.qs);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      b.hmask[l] |= static_cast<uint8_t>((q[e] >> 2) << (4 * h + j));
    }
    store_block(dst, i, b);
  }
}

void quantize_q4_k(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ4_K b;
    uint8_t q[kQK_K];
    quantize_k_scales_and_codes(x, 15, -1.0f, 0.1f, 20, &b.d, &b.dmin, b.scales, q);
    std::memset(b.qs, 0, sizeof(b.qs));
    for (int e = 0; e < kQK_K; ++e) {
      const int j = e / kSubBlockSize, l = e % kSubBlockSize;
      b.qs[32 * (j / 2) + l] |= static_cast<uint8_t>(q[e] << (4 * (j % 2)));
    }
    store_block(dst, i, b);
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ5_K b;
    uint8_t q[kQK_K];
    quantize_k_scales_and_codes(x, 31, -0.5f, 0.1f, 15, &b.d, &b.dmin, b.scales, q);
    std::memset(b.qs, 0, sizeof(b.qs));
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int e = 0; e < kQK_K; ++e) {
      const int j = e / kSubBlockSize, l = e % kSubBlockSize;
      b.qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q[e] & 0x0f) << (4 * (j % 2)));
      b.qh[l] |= static_cast<uint8_t>((q[e] >> 4) << j);
    }
    store_block(dst, i, b);
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t num_blocks) {
  constexpr int kGroups = kQK_K / 16;
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ6_K b;
    std::memset(&b, 0, sizeof(b));
    uint8_t q[kQK_K];
    float group_scale[kGroups];
    for (int g = 0; g < kGroups; ++g) group_scale[g] = fit_symmetric(x + 16 * g, 16, 32, q + 16 * g);
    float max_scale, max_abs_scale;
    signed_absmax(group_scale, kGroups, &max_scale, &max_abs_scale);
    if (max_abs_scale < kGroupMaxEps) {  // all zeros: d = 0 decodes everything to 0
      store_block(dst, i, b);
      continue;
    }
    // Same trick one level up: the signed extreme scale maps to -128.
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    for (int g = 0; g < kGroups; ++g) {
      b.scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * group_scale[g])));
    }
    const float d = f16_to_f32(b.d);
    for (int g = 0; g < kGroups; ++g) {
      const float scale = d * static_cast<float>(b.scales[g]);
      if (scale == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * g + l;
        q[e] = static_cast<uint8_t>(std::clamp(nearest_int(x[e] / scale), -32, 31) + 32);
      }
    }
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      b.ql[64 * h + 32 * (k & 1) + l] |= static_cast<uint8_t>((q[e] & 0x0f) << (k < 2 ? 0 : 4));
      b.qh[32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
    }
    store_block(dst, i, b);
  }
}

// As ggml: d = max/-127 with max the signed extreme (so d may be negative), codes
// clamped to 127 (the extreme itself maps to -127); bsums are the 16-value sums of
// the codes, precomputed for the K-quant dot products' min terms.
void quantize_q8_k(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockQ8_K b;
    std::memset(&b, 0, sizeof(b));
    float max, amax;
    signed_absmax(x, kQK_K, &max, &amax);
    if (amax != 0.0f) {
      const float iscale = -127.0f / max;
      for (int e = 0; e < kQK_K; ++e) {
        b.qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[e])));
      }
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
        b.bsums[g] = static_cast<int16_t>(sum);
      }
      b.d = 1.0f / iscale;
    }
    store_block(dst, i, b);
  }
}

}  // namespace pagoda
