// Internal to src/vision: the encoder's parts (layers, projections, scratch) and the GGUF
// readers the loaders share (vision_load.cpp reads, vision_encoder.cpp runs).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "tensor/types.h"
#include "vision/vision_encoder.h"

namespace pagoda {

// A projection: y = clamp_out(clamp_in(x) · Wᵀ + b). The clamps are Gemma 4's
// Gemma4ClippableLinear (scalars beside the weight; none: ±inf, skipped).
struct VisionEncoder::Linear {
  WeightMatrix w;
  std::vector<float> b;  // [rows] or empty
  float in_min = -INFINITY, in_max = INFINITY, out_min = -INFINITY, out_max = INFINITY;
  bool clamps_in() const { return in_min != -INFINITY || in_max != INFINITY; }
  bool clamps_out() const { return out_min != -INFINITY || out_max != INFINITY; }
  bool empty() const { return w.n_rows() == 0; }
};

struct VisionEncoder::Layer {
  // Norm weights [dim]; the biases are empty for RMS norms (gemma4v).
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
  Linear q, k, v, o;                      // [dim, dim]
  Linear up, gate, down;                  // [ffn, dim] (gate empty: ungated), [dim, ffn]
  std::vector<float> q_norm, k_norm;      // [head_dim] (gemma4v) or empty
  std::vector<float> attn_post_norm, ffn_post_norm;  // [dim] (gemma4v) or empty
  std::vector<float> out_scale;           // [dim] or [1] (gemma4v) or empty
};

struct VisionEncoder::Scratch {
  std::vector<float> patches;  // [T, 3 * patch²] (im2col)
  std::vector<float> x;        // [T, dim] residual stream
  std::vector<float> xn;       // [T, dim]
  std::vector<float> q, k, v;  // [T, dim]
  std::vector<float> attn;     // [T, dim]
  std::vector<float> tmp;      // [T, dim]
  std::vector<float> ffn, ffn_gate;  // [T, ffn]
  std::vector<float> clamped;  // a projection's clamped input
  std::vector<float> rope_cos, rope_sin;  // gemma4v: [T][head_dim / 4] by column, then by row
  // One head at a time: K_h [T, hd], V_hᵀ [hd, T], Q_h [T, hd], scores [T, T], O_h [T, hd].
  std::vector<float> kh, vth, qh, scores, oh;
  std::vector<f16_t> kh16, vth16;  // K_h and V_hᵀ as the attention products' f16 "weights"
};

namespace vision_detail {

inline std::string where(const gguf::GgufFile& f) { return f.path() + ": "; }

inline const gguf::TensorInfo& tensor(const gguf::GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw Error(where(f) + "projector tensor " + name + " is missing");
  if (!t->type_known || t->data == nullptr) throw Error(where(f) + "projector tensor " + name + " has an unknown type");
  std::vector<int64_t> got = t->dims;
  while (got.size() > dims.size() && got.back() == 1) got.pop_back();
  if (got != dims) {
    std::string want = "[";
    for (size_t i = 0; i < dims.size(); ++i) want += (i ? ", " : "") + std::to_string(dims[i]);
    throw Error(where(f) + "projector tensor " + name + " has shape " + t->shape_string() + ", expected " + want + "]");
  }
  return *t;
}

inline std::vector<float> floats(const gguf::GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
  const gguf::TensorInfo& t = tensor(f, name, dims);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const int64_t row = t.dims[0];
  if (row % traits(t.type).block_size != 0) throw Error(where(f) + "projector tensor " + name + ": bad row length");
  const size_t rb = row_bytes(t.type, row);
  for (int64_t r = 0; r < t.n_rows(); ++r) dequantize_row(t.type, t.data + r * rb, &out[r * row], row);
  for (float v : out)
    if (!std::isfinite(v)) throw Error(where(f) + "projector tensor " + name + " holds a non-finite value");
  return out;
}

// The [rows, cols] matrix `name`, checked for a type the matrix kernels take at that width.
inline const gguf::TensorInfo& matrix_tensor(const gguf::GgufFile& f, const std::string& name, int64_t rows,
                                             int64_t cols) {
  const gguf::TensorInfo& t = tensor(f, name, {cols, rows});
  if (!traits(t.type).weight_supported || cols % traits(t.type).block_size != 0)
    throw Error(where(f) + "projector tensor " + name + " has type " + std::string(type_name(t.type)) +
                ", which the matrix kernels do not take at width " + std::to_string(cols));
  return t;
}

inline WeightMatrix matrix(const gguf::GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo& t = matrix_tensor(f, name, rows, cols);
  return WeightMatrix::prepare(t.type, rows, cols, t.data);
}

inline int64_t positive_key(const gguf::GgufFile& f, const std::string& key) {
  const auto v = f.get_int(key);
  if (!v) throw Error(where(f) + "projector key " + key + " is missing");
  if (*v <= 0 || *v > (int64_t{1} << 20)) throw Error(where(f) + "projector key " + key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}


}  // namespace vision_detail
}  // namespace pagoda
