// Scalar reference codecs for the codebook formats: IQ4_NL, IQ4_XS and MXFP4.
//
// Each stores 4-bit indices into a fixed table of 16 integer levels (kIq4nlValues,
// non-linear, for IQ4_NL/IQ4_XS; kMxfp4Values, the e2m1 values doubled, for MXFP4)
// times a scale: an f16 per 32 values (IQ4_NL), a 6-bit sub-scale per 32 under an
// f16 per 256 (IQ4_XS), or a power of two per 32 (MXFP4's E8M0 byte). Decoding is
// ggml's rule, per element (layouts on the block structs in types.h).
//
// Encoding is this file's own, simpler than ggml's (which searches more scales and
// can weight values by an importance matrix): the blocks are valid and decode
// exactly as ggml decodes them, every value is the nearest table level of its final
// scale, but the bytes differ from llama.cpp's quantizer. Measured on N(0,1) data,
// RMS error / RMS(x) (codecs_test pins these with margin): IQ4_NL 0.076, IQ4_XS 0.076,
// MXFP4 0.11.
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

int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }

// Below this a group is treated as all zeros (as the K-quants).
constexpr float kGroupMaxEps = 1e-15f;

// Index of the level of table[16] nearest to v (the first on ties).
uint8_t nearest_level(const int8_t* table, float v) {
  int best = 0;
  float best_dist = std::fabs(v - static_cast<float>(table[0]));
  for (int k = 1; k < 16; ++k) {
    const float dist = std::fabs(v - static_cast<float>(table[k]));
    if (dist < best_dist) {
      best_dist = dist;
      best = k;
    }
  }
  return static_cast<uint8_t>(best);
}

// Codes in ggml's nibble order: qs[j] low nibble = value j, high nibble = value j + 16.
void pack_nibbles32(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | q[j + 16] << 4);
}

// Fits x[0..32) ~= scale * kIq4nlValues[q]: for 17 inverse scales around the one
// that puts the signed extreme on -127 (the table's one level with no mirror), codes
// are the nearest levels and the scale their weighted least-squares fit (weights
// x^2 plus the mean x^2, so small values still count); the fit with the smallest
// weighted error is kept. Returns the scale (0 for an all-zero group; codes then 8,
// the level 1 nearest zero). Codes are those of the returned scale before any
// rounding of it; callers re-code against the scale they store.
float fit_iq4(const float* x, uint8_t* q) {
  constexpr int n = 32;
  float max, amax;
  signed_absmax(x, n, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(q, q + n, 8);
    return 0.0f;
  }
  float sum_x2 = 0;
  for (int l = 0; l < n; ++l) sum_x2 += x[l] * x[l];
  float w[n];
  for (int l = 0; l < n; ++l) w[l] = sum_x2 / n + x[l] * x[l];
  float best_merit = -1.0f, best_scale = 0.0f;
  uint8_t trial[n];
  for (int s = -8; s <= 8; ++s) {
    const float iscale = (static_cast<float>(kIq4nlValues[0]) + static_cast<float>(s)) / max;
    float sum_qx = 0, sum_q2 = 0;
    for (int l = 0; l < n; ++l) {
      trial[l] = nearest_level(kIq4nlValues, iscale * x[l]);
      const float v = kIq4nlValues[trial[l]];
      sum_qx += w[l] * v * x[l];
      sum_q2 += w[l] * v * v;
    }
    // The weighted error of the least-squares scale is sum(w x^2) - sum_qx^2 / sum_q2:
    // the largest sum_qx^2 / sum_q2 wins.
    if (sum_q2 > 0 && sum_qx * sum_qx / sum_q2 > best_merit) {
      best_merit = sum_qx * sum_qx / sum_q2;
      best_scale = sum_qx / sum_q2;
      std::copy(trial, trial + n, q);
    }
  }
  return best_scale;
}

// Re-codes x[0..32) against the decoded scale (nothing to do for scale 0).
void recode_iq4(const float* x, float scale, uint8_t* q) {
  if (scale == 0.0f) return;
  for (int l = 0; l < 32; ++l) q[l] = nearest_level(kIq4nlValues, x[l] / scale);
}

}  // namespace

void dequantize_iq4_nl(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockIQ4_NL>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[b.qs[j] & 0x0f]);
      y[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[b.qs[j] >> 4]);
    }
  }
}

namespace {

// Sub-block j's 6-bit scale, biased by 32 (see BlockIQ4_XS).
int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
  const int high = (b.scales_h >> (2 * j)) & 3;
  return low | high << 4;
}

}  // namespace

void dequantize_iq4_xs(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK_K) {
    const auto b = load_block<BlockIQ4_XS>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK_K / 32; ++j) {
      const float scale = d * static_cast<float>(iq4_xs_scale(b, j) - 32);
      const uint8_t* qs = b.qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        y[32 * j + l] = scale * static_cast<float>(kIq4nlValues[qs[l] & 0x0f]);
        y[32 * j + l + 16] = scale * static_cast<float>(kIq4nlValues[qs[l] >> 4]);
      }
    }
  }
}

void dequantize_mxfp4(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockMXFP4>(src, i);
    const float d = e8m0_to_f32_half(b.e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[b.qs[j] & 0x0f]) * d;
      y[j + kQK / 2] = static_cast<float>(kMxfp4Values[b.qs[j] >> 4]) * d;
    }
  }
}

void quantize_iq4_nl(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    BlockIQ4_NL b;
    uint8_t q[kQK];
    b.d = f32_to_f16(fit_iq4(x, q));
    recode_iq4(x, f16_to_f32(b.d), q);
    pack_nibbles32(q, b.qs);
    store_block(dst, i, b);
  }
}

// Sub-block scales from fit_iq4, quantized to 6 bits (-32..31) against an f16 d that
// puts the signed extreme on -32, then every value re-coded against its decoded scale.
void quantize_iq4_xs(const float* x, void* dst, int64_t num_blocks) {
  constexpr int kSubBlocks = kQK_K / 32;
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK_K) {
    BlockIQ4_XS b;
    std::memset(&b, 0, sizeof(b));
    uint8_t q[kQK_K];
    float sub_scale[kSubBlocks];
    for (int j = 0; j < kSubBlocks; ++j) sub_scale[j] = fit_iq4(x + 32 * j, q + 32 * j);
    float max_scale, max_abs_scale;
    signed_absmax(sub_scale, kSubBlocks, &max_scale, &max_abs_scale);
    int ls[kSubBlocks] = {};
    if (max_abs_scale >= kGroupMaxEps) {
      const float iscale = -32.0f / max_scale;
      b.d = f32_to_f16(1.0f / iscale);
      for (int j = 0; j < kSubBlocks; ++j) ls[j] = std::clamp(nearest_int(iscale * sub_scale[j]), -32, 31);
    }
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const int v = ls[j] + 32;
      b.scales_l[j / 2] |= static_cast<uint8_t>((v & 0x0f) << (4 * (j % 2)));
      b.scales_h |= static_cast<uint16_t>((v >> 4) << (2 * j));
      recode_iq4(x + 32 * j, d * static_cast<float>(ls[j]), q + 32 * j);
      pack_nibbles32(q + 32 * j, b.qs + 16 * j);
    }
    store_block(dst, i, b);
  }
}

// The block exponent: the largest level (12 x 2^(e-128) = 1.5 x 2^(e-127)) just
// covers amax at e = floor(log2 amax) + 125 (the OCP MX rule, which may clip values
// in (1.5, 2) x 2^floor(log2 amax) to the top level), or e + 1 (no clipping, coarser
// steps): both are tried, the smaller squared error kept. An all-zero block gets
// e = 0 and codes 0.
void quantize_mxfp4(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    BlockMXFP4 b;
    std::memset(&b, 0, sizeof(b));
    float max, amax;
    signed_absmax(x, kQK, &max, &amax);
    uint8_t q[kQK] = {};
    if (amax > 0.0f && std::isfinite(amax)) {
      const int e0 = std::clamp(std::ilogb(amax) + 125, 0, 254);
      float best_err = INFINITY;
      for (int e = e0; e <= e0 + 1; ++e) {
        const float d = e8m0_to_f32_half(static_cast<uint8_t>(e));
        uint8_t trial[kQK];
        float err = 0;
        for (int l = 0; l < kQK; ++l) {
          trial[l] = nearest_level(kMxfp4Values, x[l] / d);
          const float diff = x[l] - static_cast<float>(kMxfp4Values[trial[l]]) * d;
          err += diff * diff;
        }
        if (err < best_err) {
          best_err = err;
          b.e = static_cast<uint8_t>(e);
          std::copy(trial, trial + kQK, q);
        }
      }
    }
    pack_nibbles32(q, b.qs);
    store_block(dst, i, b);
  }
}

}  // namespace pagoda
