#include "tensor/kv_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/ascii.h"
#include "common/error.h"
#include "tensor/types.h"

namespace pagoda {

namespace {

constexpr float kF16Max = 65504.0f;

f16_t to_f16_saturating(float x) { return f32_to_f16(std::clamp(x, -kF16Max, kF16Max)); }

// A Q8 / Q4 row that dequantizes to NaN everywhere (see kv_quantize_row).
void store_non_finite_row(KvType t, int64_t d, void* data, void* side) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (t == KvType::Q8) {
    std::memset(data, 0, static_cast<size_t>(d));
    std::memcpy(side, &nan, sizeof nan);
    return;
  }
  const int64_t g = q4_group_size(d);
  std::memset(data, 0, static_cast<size_t>(d / 2));
  const f16_t nan16 = f32_to_f16(nan);
  uint8_t* sd = static_cast<uint8_t*>(side);
  for (int64_t g0 = 0; g0 < d; g0 += g) {
    uint8_t* gs = sd + (g0 / g) * kQ4SideBytesPerGroup;
    std::memcpy(gs, &nan16, 2);
    std::memcpy(gs + 2, &nan16, 2);
    std::memcpy(gs + 4, &nan16, 2);
    gs[6] = 0;
  }
}

}  // namespace

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
    case KvType::Q8: return "q8";
    case KvType::Q4: return "q4";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  const std::string lower = ascii_lower(name);
  for (int i = 0; i < kNumKvTypes; ++i) {
    KvType t = static_cast<KvType>(i);
    if (lower == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

std::string kv_type_names() { return "f32, f16, bf16, q8, q4"; }

int64_t q4_group_size(int64_t head_dim) {
  for (int64_t g : {32, 16, 8})
    if (head_dim > 0 && head_dim % g == 0) return g;
  return 0;
}

bool kv_type_supports(KvType t, int64_t head_dim) {
  if (head_dim < 1) return false;
  return t != KvType::Q4 || q4_group_size(head_dim) != 0;
}

size_t kv_row_bytes(KvType t, int64_t head_dim) {
  const size_t d = static_cast<size_t>(head_dim);
  switch (t) {
    case KvType::F32: return d * 4;
    case KvType::F16:
    case KvType::BF16: return d * 2;
    case KvType::Q8: return d;
    case KvType::Q4: return d / 2;
  }
  return 0;
}

size_t kv_row_sidecar_bytes(KvType t, int64_t head_dim) {
  switch (t) {
    case KvType::Q8: return sizeof(float);
    case KvType::Q4: return static_cast<size_t>(head_dim / q4_group_size(head_dim)) * kQ4SideBytesPerGroup;
    default: return 0;
  }
}

void kv_quantize_row(KvType t, const float* x, int64_t d, void* data, void* side) {
  // Weights are input: a corrupt model file can make K/V rows NaN or inf, so that is a
  // handled case, not an assert. F32/F16/BF16 store the row as is (NaN stays NaN; F16
  // saturates inf). Q8/Q4 would cast NaN to an integer (undefined behaviour), so a
  // non-finite row is stored as zeros with NaN scales: it dequantizes to NaN, which
  // reaches the logits, where the engine ends the request. Cost: one pass over
  // head_dim floats, next to the quantization's own two.
  if (t == KvType::Q8 || t == KvType::Q4) {
    bool finite = true;
    for (int64_t i = 0; i < d; ++i) finite &= std::isfinite(x[i]);
    if (!finite) {
      store_non_finite_row(t, d, data, side);
      return;
    }
  }
  switch (t) {
    case KvType::F32:
      std::memcpy(data, x, static_cast<size_t>(d) * 4);
      return;
    case KvType::F16: {
      f16_t* o = static_cast<f16_t*>(data);
      for (int64_t i = 0; i < d; ++i) o[i] = to_f16_saturating(x[i]);
      return;
    }
    case KvType::BF16: {
      bf16_t* o = static_cast<bf16_t*>(data);
      for (int64_t i = 0; i < d; ++i) o[i] = f32_to_bf16(x[i]);
      return;
    }
    case KvType::Q8: {
      float amax = 0.0f;
      for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float s = amax / 127.0f;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      int8_t* o = static_cast<int8_t*>(data);
      for (int64_t i = 0; i < d; ++i)
        o[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
      std::memcpy(side, &s, sizeof s);
      return;
    }
    case KvType::Q4: {
      const int64_t g = q4_group_size(d);
      const int64_t half = g / 2;
      uint8_t* o = static_cast<uint8_t*>(data);
      uint8_t* sd = static_cast<uint8_t*>(side);
      for (int64_t g0 = 0; g0 < d; g0 += g) {
        const float* xr = x + g0;
        // The outlier: the group's min or max, whichever leaves the smaller range for
        // the other g - 1 values.
        int64_t i_lo = 0, i_hi = 0;
        for (int64_t i = 1; i < g; ++i) {
          if (xr[i] < xr[i_lo]) i_lo = i;
          if (xr[i] > xr[i_hi]) i_hi = i;
        }
        float lo2 = std::numeric_limits<float>::infinity(), hi2 = -lo2;  // without i_lo / i_hi
        for (int64_t i = 0; i < g; ++i) {
          if (i != i_lo) lo2 = std::min(lo2, xr[i]);
          if (i != i_hi) hi2 = std::max(hi2, xr[i]);
        }
        const bool drop_lo = xr[i_hi] - lo2 <= hi2 - xr[i_lo];
        const int64_t i_out = drop_lo ? i_lo : i_hi;
        const float lo = drop_lo ? lo2 : xr[i_lo], hi = drop_lo ? xr[i_hi] : hi2;
        // Quantize against the f16-rounded d and m the decoder will see.
        const f16_t d16 = to_f16_saturating((hi - lo) / 15.0f);
        const f16_t m16 = to_f16_saturating(lo);
        const f16_t o16 = to_f16_saturating(xr[i_out]);
        const float dd = f16_to_f32(d16), mm = f16_to_f32(m16);
        const float inv = dd > 0.0f ? 1.0f / dd : 0.0f;
        uint8_t q[32];
        for (int64_t i = 0; i < g; ++i)
          q[i] = static_cast<uint8_t>(std::clamp(std::nearbyint((xr[i] - mm) * inv), 0.0f, 15.0f));
        q[i_out] = 0;  // replaced by the outlier when decoding
        for (int64_t i = 0; i < half; ++i) o[g0 / 2 + i] = static_cast<uint8_t>(q[i] | (q[i + half] << 4));
        uint8_t* gs = sd + (g0 / g) * kQ4SideBytesPerGroup;
        std::memcpy(gs, &d16, 2);
        std::memcpy(gs + 2, &m16, 2);
        std::memcpy(gs + 4, &o16, 2);
        gs[6] = static_cast<uint8_t>(i_out);
      }
      return;
    }
  }
}

void kv_dequantize_row_ref(KvType t, const void* data, const void* side, int64_t d, float* out) {
  switch (t) {
    case KvType::F32:
      std::memcpy(out, data, static_cast<size_t>(d) * 4);
      return;
    case KvType::F16: {
      const f16_t* in = static_cast<const f16_t*>(data);
      for (int64_t i = 0; i < d; ++i) out[i] = f16_to_f32(in[i]);
      return;
    }
    case KvType::BF16: {
      const bf16_t* in = static_cast<const bf16_t*>(data);
      for (int64_t i = 0; i < d; ++i) out[i] = bf16_to_f32(in[i]);
      return;
    }
    case KvType::Q8: {
      float s;
      std::memcpy(&s, side, sizeof s);
      const int8_t* in = static_cast<const int8_t*>(data);
      for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(in[i]) * s;
      return;
    }
    case KvType::Q4: {
      const int64_t g = q4_group_size(d);
      const int64_t half = g / 2;
      const uint8_t* in = static_cast<const uint8_t*>(data);
      const uint8_t* sd = static_cast<const uint8_t*>(side);
      for (int64_t g0 = 0; g0 < d; g0 += g) {
        const Q4Group p = q4_group_params(sd + (g0 / g) * kQ4SideBytesPerGroup);
        for (int64_t i = 0; i < half; ++i) {
          const uint8_t b = in[g0 / 2 + i];
          out[g0 + i] = std::fma(p.d, static_cast<float>(b & 0x0F), p.m);
          out[g0 + half + i] = std::fma(p.d, static_cast<float>(b >> 4), p.m);
        }
        out[g0 + p.outlier_idx] = p.outlier;
      }
      return;
    }
  }
}

}  // namespace pagoda
