// Scalar reference block codecs: dequantize_row / quantize_row for the 32-wide
// formats (Q4_0 .. Q8_1), the plain float types, and the dispatch for all.
// The K-quants (Q2_K .. Q6_K, Q8_K) live in codecs_k.cpp, the codebook formats
// (IQ4_NL, IQ4_XS, MXFP4) in codecs_iq.cpp.
//
// Decoding follows ggml's rules bit for bit (the layouts are documented on the
// block structs in types.h). Encoding follows ggml's reference quantizers
// (quantize_row_*_ref): same scale choice, same rounding of the codes, scale
// computed in f32 and stored as f16, so a row quantized here is byte-identical
// to one quantized by ggml's reference path. Not a hot path: every block is
// memcpy'd to a local struct so a src/dst at any byte offset is fine.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "tensor/codecs_internal.h"
#include "tensor/codecs_k.h"
#include "tensor/types.h"

namespace pagoda {

namespace {

using codecs_internal::load_block;
using codecs_internal::signed_absmax;
using codecs_internal::store_block;

// ---- decoders ----

void dequantize_q4_0(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((b.qs[j] & 0x0f) - 8);
      y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(b.qs[j] & 0x0f) + m;
      y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
    }
  }
}

uint32_t load_qh(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

// 5-bit code of element j (0..31) of a Q5_0/Q5_1 block.
int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int nibble = j < kQK / 2 ? (qs[j] & 0x0f) : (qs[j - kQK / 2] >> 4);
  return nibble | static_cast<int>((qh >> j) & 1u) << 4;
}

void dequantize_q5_0(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q5_code(b.qs, qh, j) - 16);
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q5_code(b.qs, qh, j)) + m;
  }
}

// Q8_0 and Q8_1 decode alike (Q8_1's sum s is only for dot products).
template <typename Block>
void dequantize_q8(const void* src, float* y, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, y += kQK) {
    const auto b = load_block<Block>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(b.qs[j]);
  }
}

// ---- encoders (ggml's reference quantizers) ----

void quantize_q4_0(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    float max, amax;
    signed_absmax(x, kQK, &max, &amax);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // x*id lies in [-8, 8]; +8.5 then truncation rounds half up onto 0..16, and the
      // one value that reaches 16 (the mirror of the extreme) is clamped to 15.
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
    store_block(dst, i, b);
  }
}

// Scale of the offset formats (Q4_1, Q5_1): codes 0..max_code span [min, max] of the
// block x[0..kQK), i.e. x ~= min + d * code.
struct MinScale {
  float min;
  float d;
  float id;  // 1 / d, or 0 for a constant block (every code 0)
};

MinScale min_scale(const float* x, float max_code) {
  const auto [lo, hi] = std::minmax_element(x, x + kQK);
  const float d = (*hi - *lo) / max_code;
  return {*lo, d, d != 0.0f ? 1.0f / d : 0.0f};
}

void quantize_q4_1(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    const MinScale s = min_scale(x, 15.0f);
    BlockQ4_1 b;
    b.d = f32_to_f16(s.d);
    b.m = f32_to_f16(s.min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - s.min) * s.id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + kQK / 2] - s.min) * s.id + 0.5f));
      b.qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
    store_block(dst, i, b);
  }
}

// Splits 5-bit codes q[0..32) into nibbles (element j and j+16 share qs[j]) and the
// fifth bits (bit j of qh for element j).
template <typename Block>
void pack_q5(const int* q, Block* b) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    b->qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + kQK / 2] & 0x0f) << 4);
  }
  for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) b->qh[k] = static_cast<uint8_t>(qh >> (8 * k));
}

void quantize_q5_0(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    float max, amax;
    signed_absmax(x, kQK, &max, &amax);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b;
    b.d = f32_to_f16(d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    pack_q5(q, &b);
    store_block(dst, i, b);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    const MinScale s = min_scale(x, 31.0f);
    BlockQ5_1 b;
    b.d = f32_to_f16(s.d);
    b.m = f32_to_f16(s.min);
    int q[kQK];
    // ggml does not clamp here; the clamp only guards against (max-min)*id rounding above 31.5.
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>((x[j] - s.min) * s.id + 0.5f));
    pack_q5(q, &b);
    store_block(dst, i, b);
  }
}

// Q8_0 and Q8_1 share the codes: d = amax/127, q = round-half-away(x/d).
template <typename Block>
Block quantize_q8_block(const float* x, int* sum_q) {
  float max, amax;
  signed_absmax(x, kQK, &max, &amax);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Block b;
  b.d = f32_to_f16(d);
  *sum_q = 0;
  for (int j = 0; j < kQK; ++j) {
    b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    *sum_q += b.qs[j];
  }
  return b;
}

void quantize_q8_0(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    int sum_q;
    store_block(dst, i, quantize_q8_block<BlockQ8_0>(x, &sum_q));
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i, x += kQK) {
    int sum_q;
    auto b = quantize_q8_block<BlockQ8_1>(x, &sum_q);
    // As ggml: s uses the f32 scale, before d is rounded to f16.
    float max, amax;
    signed_absmax(x, kQK, &max, &amax);
    b.s = f32_to_f16(static_cast<float>(sum_q) * (amax / 127.0f));
    store_block(dst, i, b);
  }
}

void check_row(const char* what, GgmlType type, int64_t n) {
  const TypeTraits& t = traits(type);
  PAGODA_CHECK(n >= 0 && n % t.block_size == 0,
               std::string(what) + ": row of " + std::to_string(n) +
                   " values is not a whole number of " + t.name + " blocks of " +
                   std::to_string(t.block_size));
}

[[noreturn]] void unsupported(const char* what, GgmlType type) {
  PAGODA_CHECK(false, std::string(what) + ": unsupported type " + type_name(type));
  std::abort();
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  check_row("dequantize_row", type, n);
  const int64_t num_blocks = n / traits(type).block_size;
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
    case GgmlType::BF16: {
      const auto* p = static_cast<const uint8_t*>(src);
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, p + 2 * j, 2);
        dst[j] = type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    }
    case GgmlType::Q4_0: return dequantize_q4_0(src, dst, num_blocks);
    case GgmlType::Q4_1: return dequantize_q4_1(src, dst, num_blocks);
    case GgmlType::Q5_0: return dequantize_q5_0(src, dst, num_blocks);
    case GgmlType::Q5_1: return dequantize_q5_1(src, dst, num_blocks);
    case GgmlType::Q8_0: return dequantize_q8<BlockQ8_0>(src, dst, num_blocks);
    case GgmlType::Q8_1: return dequantize_q8<BlockQ8_1>(src, dst, num_blocks);
    case GgmlType::Q4_K: return dequantize_q4_k(src, dst, num_blocks);
    case GgmlType::Q5_K: return dequantize_q5_k(src, dst, num_blocks);
    case GgmlType::Q6_K: return dequantize_q6_k(src, dst, num_blocks);
    case GgmlType::Q8_K: return dequantize_q8_k(src, dst, num_blocks);
    case GgmlType::Q2_K: return dequantize_q2_k(src, dst, num_blocks);
    case GgmlType::Q3_K: return dequantize_q3_k(src, dst, num_blocks);
    case GgmlType::IQ4_NL: return dequantize_iq4_nl(src, dst, num_blocks);
    case GgmlType::IQ4_XS: return dequantize_iq4_xs(src, dst, num_blocks);
    case GgmlType::MXFP4: return dequantize_mxfp4(src, dst, num_blocks);
    default: unsupported("dequantize_row", type);
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  check_row("quantize_row", type, n);
  const int64_t num_blocks = n / traits(type).block_size;
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
    case GgmlType::BF16: {
      auto* p = static_cast<uint8_t*>(dst);
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t h = type == GgmlType::F16 ? f32_to_f16(src[j]) : f32_to_bf16(src[j]);
        std::memcpy(p + 2 * j, &h, 2);
      }
      return;
    }
    case GgmlType::Q4_0: return quantize_q4_0(src, dst, num_blocks);
    case GgmlType::Q4_1: return quantize_q4_1(src, dst, num_blocks);
    case GgmlType::Q5_0: return quantize_q5_0(src, dst, num_blocks);
    case GgmlType::Q5_1: return quantize_q5_1(src, dst, num_blocks);
    case GgmlType::Q8_0: return quantize_q8_0(src, dst, num_blocks);
    case GgmlType::Q8_1: return quantize_q8_1(src, dst, num_blocks);
    case GgmlType::Q4_K: return quantize_q4_k(src, dst, num_blocks);
    case GgmlType::Q5_K: return quantize_q5_k(src, dst, num_blocks);
    case GgmlType::Q6_K: return quantize_q6_k(src, dst, num_blocks);
    case GgmlType::Q8_K: return quantize_q8_k(src, dst, num_blocks);
    case GgmlType::Q2_K: return quantize_q2_k(src, dst, num_blocks);
    case GgmlType::Q3_K: return quantize_q3_k(src, dst, num_blocks);
    case GgmlType::IQ4_NL: return quantize_iq4_nl(src, dst, num_blocks);
    case GgmlType::IQ4_XS: return quantize_iq4_xs(src, dst, num_blocks);
    case GgmlType::MXFP4: return quantize_mxfp4(src, dst, num_blocks);
    default: unsupported("quantize_row", type);
  }
}

}  // namespace pagoda
