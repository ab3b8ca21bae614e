#include "vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/ops.h"
#include "tensor/types.h"
#include "vision/vision_internal.h"

namespace pagoda {

namespace {

// LayerNorm over n values: (x - mean) / sqrt(var + eps) * w + b, statistics in double.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * inv * w[i] + b[i];
}

// out[i] = act(gate[i]) * up[i], or act(gate[i]) when up is null; out may alias gate or up.
// GELU and gated SiLU through the vector row ops (ops.h); GELU-quick and plain SiLU per value.
void activate_rows(VisionActivation a, const float* gate, const float* up, float* out, int64_t n) {
  if (a == VisionActivation::Gelu) return geglu_tanh(gate, up, out, n);
  if (a == VisionActivation::Silu && up) return swiglu(gate, up, out, n);
  const float k = a == VisionActivation::GeluQuick ? 1.702f : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float y = gate[i] / (1.0f + std::exp(-k * gate[i]));
    out[i] = up ? y * up[i] : y;
  }
}

// K and V enter the attention products as f16 matrices, as llama.cpp's attention keeps
// them: the f16 matmul runs on AMX-BF16 where there is AMX (f16 split exactly into two bf16
// halves), which the f32 path cannot. Measured at 4096 patches (SigLIP at 896 px, 2 Xeon
// threads): f32 attention products ~60 s an image.
constexpr GgmlType kAttnType = GgmlType::F16;

// Rows [0, n) in ranges of about n / tasks, one task each.
template <class F>
void for_rows(ThreadPool& pool, int64_t n, F&& f) {
  const int64_t tasks = std::min<int64_t>(n, pool.num_threads() * 4);
  pool.parallel_for(tasks, [&](int64_t i, int) { f(n * i / tasks, n * (i + 1) / tasks); });
}

void to_f16(const std::vector<float>& in, std::vector<f16_t>& out, ThreadPool& pool) {
  out.resize(in.size());
  const int64_t n = static_cast<int64_t>(in.size());
  for_rows(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = f32_to_f16(in[i]);
  });
}

}  // namespace

VisionEncoder::~VisionEncoder() = default;

std::string VisionEncoder::image_begin_text() const {
  switch (config_.projector) {
    case VisionProjector::Gemma3: return "<start_of_image>";
    case VisionProjector::Gemma4V: return "<|image>";
    case VisionProjector::Qwen3VL: return "<|vision_start|>";
  }
  return "";
}
std::string VisionEncoder::image_end_text() const {
  switch (config_.projector) {
    case VisionProjector::Gemma3: return "<end_of_image>";
    case VisionProjector::Gemma4V: return "<image|>";
    case VisionProjector::Qwen3VL: return "<|vision_end|>";
  }
  return "";
}

std::pair<int64_t, int64_t> VisionEncoder::input_size(int64_t width, int64_t height) const {
  const VisionConfig& c = config_;
  if (!c.dynamic_size) return {c.image_size, c.image_size};
  // llama.cpp's calc_size_preserved_ratio (float arithmetic as there): each side rounded to
  // a multiple of patch x n_merge, then scaled down into max_pixels (floor) or up into
  // min_pixels (ceil), the aspect kept.
  const int64_t a = c.patch_size * c.n_merge;
  auto round_by = [&](float x) { return static_cast<int64_t>(std::round(x / static_cast<float>(a))) * a; };
  auto ceil_by = [&](float x) { return static_cast<int64_t>(std::ceil(x / static_cast<float>(a))) * a; };
  auto floor_by = [&](float x) { return static_cast<int64_t>(std::floor(x / static_cast<float>(a))) * a; };
  int64_t w = std::max(a, round_by(static_cast<float>(width))), h = std::max(a, round_by(static_cast<float>(height)));
  if (h * w > c.max_pixels) {
    const float beta = std::sqrt(static_cast<float>(height) * static_cast<float>(width) / static_cast<float>(c.max_pixels));
    h = std::max(a, floor_by(static_cast<float>(height) / beta));
    w = std::max(a, floor_by(static_cast<float>(width) / beta));
  } else if (h * w < c.min_pixels) {
    const float beta = std::sqrt(static_cast<float>(c.min_pixels) / (static_cast<float>(height) * static_cast<float>(width)));
    h = ceil_by(static_cast<float>(height) * beta);
    w = ceil_by(static_cast<float>(width) * beta);
  }
  return {w, h};
}

std::pair<int64_t, int64_t> VisionEncoder::tokens_grid(int64_t width, int64_t height) const {
  const int64_t m = config_.patch_size * config_.n_merge;
  return {width / m, height / m};
}

int64_t VisionEncoder::tokens_for(int64_t width, int64_t height) const {
  const auto [x, y] = tokens_grid(width, height);
  return x * y;
}

size_t VisionEncoder::weight_bytes() const {
  size_t n = 0;
  for (const gguf::TensorInfo& t : file_->tensors()) n += t.n_bytes;
  return n;
}

void VisionEncoder::attention(int64_t T, ThreadPool& pool) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t D = c.dim, hd = c.head_dim();
  // The products' widths padded with zeros to what the AMX tiles take (columns by 32, rows
  // by 16; SigLIP's head_dim 72 -> 96 and 80): a zero column adds nothing to a dot product,
  // a zero row gives an output nobody reads. Unpadded, 72 fell to the FMA kernel: 41% of an
  // image's encode time at 896 px.
  const int64_t kc = (hd + 31) / 32 * 32, vr = (hd + 15) / 16 * 16;
  // Gemma 4's vision attention is unscaled (its q / k norms set the magnitude).
  const float scale = c.projector == VisionProjector::Gemma4V ? 1.0f : 1.0f / std::sqrt(static_cast<float>(hd));
  s.kh.assign(T * kc, 0.0f);
  s.qh.assign(T * kc, 0.0f);
  s.vth.assign(vr * T, 0.0f);
  s.scores.resize(T * T);
  s.oh.resize(T * vr);
  for (int64_t h = 0; h < c.n_heads; ++h) {
    // Each head is two products through the matmul kernels: scores = Q_h · K_hᵀ with K_h as
    // the "weights" [T rows, hd], then O_h = P · V_h with V_hᵀ [hd rows, T]. At 4096
    // patches that is 2 x 4096² x 72 MACs per head, as much as the layer's matrices, so
    // it must run at matmul speed, not through a per-query loop.
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        std::memcpy(&s.kh[t * kc], &s.k[t * D + h * hd], sizeof(float) * hd);
        for (int64_t i = 0; i < hd; ++i) s.qh[t * kc + i] = s.q[t * D + h * hd + i] * scale;
      }
    });
    for_rows(pool, hd, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t t = 0; t < T; ++t) s.vth[i * T + t] = s.v[t * D + h * hd + i];
    });
    to_f16(s.kh, s.kh16, pool);
    const WeightMatrix kmat = WeightMatrix::prepare(kAttnType, T, kc, reinterpret_cast<const uint8_t*>(s.kh16.data()));
    matmul(kmat, s.qh.data(), T, s.scores.data(), pool);
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) softmax(&s.scores[t * T], T);
    });
    to_f16(s.vth, s.vth16, pool);
    const WeightMatrix vmat = WeightMatrix::prepare(kAttnType, vr, T, reinterpret_cast<const uint8_t*>(s.vth16.data()));
    matmul(vmat, s.scores.data(), T, s.oh.data(), pool);
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) std::memcpy(&s.attn[t * D + h * hd], &s.oh[t * vr], sizeof(float) * hd);
    });
  }
}

void VisionEncoder::linear(const Linear& l, const float* x, int64_t T, float* y, ThreadPool& pool) {
  const int64_t cols = l.w.n_cols(), rows = l.w.n_rows();
  if (l.clamps_in()) {
    Scratch& s = *scratch_;
    s.clamped.resize(static_cast<size_t>(T * cols));
    for_rows(pool, T * cols, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) s.clamped[i] = std::clamp(x[i], l.in_min, l.in_max);
    });
    x = s.clamped.data();
  }
  matmul(l.w, x, T, y, pool);
  if (l.b.empty() && !l.clamps_out()) return;
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* r = y + t * rows;
      if (!l.b.empty()) add_inplace(r, l.b.data(), rows);
      if (l.clamps_out())
        for (int64_t i = 0; i < rows; ++i) r[i] = std::clamp(r[i], l.out_min, l.out_max);
    }
  });
}

// Row t's patch (row, column): raster order, or for qwen3vl_merger block order (each 2 x 2
// block's four patches adjacent, blocks row-major: llama.cpp's permutation before its
// merger, so each block's rows meet it as one [4 D] row).
std::pair<int64_t, int64_t> VisionEncoder::patch_at(int64_t t, int64_t n_x) const {
  if (config_.projector != VisionProjector::Qwen3VL) return {t / n_x, t % n_x};
  const int64_t b = t / 4, r = t % 4, bx_n = n_x / 2;
  return {2 * (b / bx_n) + r / 2, 2 * (b % bx_n) + r % 2};
}

// The 2-D RoPE tables of an image, once per encode (every layer rotates by the same
// positions): per row two quarter-head tables [hd / 4] with base rope_theta over hd / 2
// dims, gemma4v's by the patch's column then its row, qwen3vl_merger's by its row then
// its column.
void VisionEncoder::rope_tables_2d(int64_t T, int64_t n_x, ThreadPool& pool) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim(), q4 = hd / 4;
  const bool column_first = c.projector == VisionProjector::Gemma4V;
  s.rope_cos.resize(static_cast<size_t>(2 * T * q4));
  s.rope_sin.resize(static_cast<size_t>(2 * T * q4));
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto [py, px] = patch_at(t, n_x);
      rope_table(&s.rope_cos[2 * t * q4], &s.rope_sin[2 * t * q4], hd / 2, column_first ? px : py,
                 rope_inv_freq_.data());
      rope_table(&s.rope_cos[(2 * t + 1) * q4], &s.rope_sin[(2 * t + 1) * q4], hd / 2, column_first ? py : px,
                 rope_inv_freq_.data());
    }
  });
}

// q and k ([T, dim], heads of hd) rotated in place by rope_tables_2d's tables.
// gemma4v: in each head the first half by the first table, the second half by the second,
// each half in NEOX pairs (i, i + hd/4) (llama.cpp: two ggml_rope_ext of n_dims hd/2, the
// second offset by hd/2). qwen3vl_merger: NEOX pairs (i, i + hd/2) over the whole head,
// pairs i < hd/4 by the first table, the rest by the second (llama.cpp: ggml_rope_multi,
// vision mode, sections hd/4 each, positions (y, x, y, x)).
void VisionEncoder::rope_2d(int64_t T, ThreadPool& pool) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim(), D = c.dim, q4 = hd / 4;
  const bool qw = c.projector == VisionProjector::Qwen3VL;
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = &s.rope_cos[2 * t * q4];
      const float* sn = &s.rope_sin[2 * t * q4];
      for (float* base : {&s.q[t * D], &s.k[t * D]}) {
        if (qw) {
          rope_apply(base, c.n_heads, hd, hd, cs, sn, true);
          continue;
        }
        for (int64_t h = 0; h < c.n_heads; ++h) {
          float* x = base + h * hd;
          rope_apply(x, 1, hd / 2, hd / 2, cs, sn, true);
          rope_apply(x + hd / 2, 1, hd / 2, hd / 2, cs + q4, sn + q4, true);
        }
      }
    }
  });
}

void VisionEncoder::encode(const float* pixels, int64_t width, int64_t height, ThreadPool& pool,
                           std::vector<float>& out) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const bool g4 = c.projector == VisionProjector::Gemma4V, qw = c.projector == VisionProjector::Qwen3VL;
  const int64_t D = c.dim, P = c.patch_size, hd = c.head_dim();
  PAGODA_CHECK(width % (P * c.n_merge) == 0 && height % (P * c.n_merge) == 0 && width > 0 && height > 0,
               "VisionEncoder::encode: the input is not a whole number of pooled patches");
  PAGODA_CHECK(g4 || qw || (width == c.image_size && height == c.image_size),
               "VisionEncoder::encode: gemma3 takes image_size only");
  const int64_t n_x = width / P, n_y = height / P, T = n_x * n_y;
  PAGODA_CHECK(!g4 || (n_x <= c.pos_table && n_y <= c.pos_table),
               "VisionEncoder::encode: the image has more patches per side than the position table");
  const int64_t K = 3 * P * P;
  s.patches.resize(T * K);
  for (auto* v : {&s.x, &s.xn, &s.q, &s.k, &s.v, &s.attn, &s.tmp}) v->resize(T * D);
  s.ffn.resize(T * c.ffn_dim);
  // Patch embedding: the stride-P convolution as im2col + one matmul; column order
  // (channel, ky, kx) is the conv weight's [P, P, 3, D] layout read row by row. Gemma 4
  // feeds the conv 2x - 1 of its [0, 1] pixels. Row t is the patch at patch_at(t).
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto [py, px] = patch_at(t, n_x);
      float* row = &s.patches[t * K];
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < P; ++ky) {
          float* dst = row + (ch * P + ky) * P;
          std::memcpy(dst, pixels + (ch * height + py * P + ky) * width + px * P, sizeof(float) * P);
          if (g4)
            for (int64_t i = 0; i < P; ++i) dst[i] = 2.0f * dst[i] - 1.0f;
        }
    }
  });
  matmul(patch_embd_, s.patches.data(), T, s.x.data(), pool);
  // qwen3vl_merger: the side x side position grid resized bilinearly to n_x x n_y with the
  // corners aligned, in float and in the order of ggml's interpolate (source x = x *
  // (side - 1) / (n_x - 1), clamped neighbours, a(1-dx)(1-dy) + b dx(1-dy) + c(1-dx)dy + d dx dy).
  const int64_t side = c.pos_table;
  const float sfx = n_x > 1 && side > 1 ? static_cast<float>(n_x - 1) / static_cast<float>(side - 1)
                                        : static_cast<float>(n_x) / static_cast<float>(side);
  const float sfy = n_y > 1 && side > 1 ? static_cast<float>(n_y - 1) / static_cast<float>(side - 1)
                                        : static_cast<float>(n_y) / static_cast<float>(side);
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* x = &s.x[t * D];
      if (!patch_bias_.empty()) add_inplace(x, patch_bias_.data(), D);
      if (g4) {  // a column table, then a row table
        add_inplace(x, &pos_embd_[(t % n_x) * D], D);
        add_inplace(x, &pos_embd_[(c.pos_table + t / n_x) * D], D);
      } else if (qw) {
        const auto [py, px] = patch_at(t, n_x);
        const float fy = static_cast<float>(py) / sfy, fx = static_cast<float>(px) / sfx;
        const int64_t y0 = static_cast<int64_t>(std::floor(fy)), x0 = static_cast<int64_t>(std::floor(fx));
        const int64_t ya = std::clamp<int64_t>(y0, 0, side - 1), yb = std::clamp<int64_t>(y0 + 1, 0, side - 1);
        const int64_t xa = std::clamp<int64_t>(x0, 0, side - 1), xb = std::clamp<int64_t>(x0 + 1, 0, side - 1);
        const float dy = std::clamp(fy - static_cast<float>(ya), 0.0f, 1.0f);
        const float dx = std::clamp(fx - static_cast<float>(xa), 0.0f, 1.0f);
        const float* a = &pos_embd_[(ya * side + xa) * D];
        const float* b = &pos_embd_[(ya * side + xb) * D];
        const float* cc = &pos_embd_[(yb * side + xa) * D];
        const float* d = &pos_embd_[(yb * side + xb) * D];
        for (int64_t i = 0; i < D; ++i)
          x[i] += a[i] * (1 - dx) * (1 - dy) + b[i] * dx * (1 - dy) + cc[i] * (1 - dx) * dy + d[i] * dx * dy;
      } else {
        add_inplace(x, &pos_embd_[t * D], D);
      }
    }
  });
  // LayerNorm (gemma3) or RMS norm (gemma4v) of each row, times w, plus b when given.
  auto norm = [&](const std::vector<float>& w, const std::vector<float>& b, const float* in, float* o) {
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (!g4) {
          layer_norm(in + t * D, w.data(), b.data(), o + t * D, D, c.eps);
          continue;
        }
        rms_norm(in + t * D, w.data(), o + t * D, D, c.eps);
        if (!b.empty()) add_inplace(o + t * D, b.data(), D);
      }
    });
  };
  const std::vector<float> ones(static_cast<size_t>(std::max(D, c.ffn_dim)), 1.0f);
  if (g4 || qw) rope_tables_2d(T, n_x, pool);
  for (const auto& Lp : layers_) {
    const Layer& L = *Lp;
    norm(L.ln1_w, L.ln1_b, s.x.data(), s.xn.data());
    if (!L.q.clamps_in() && !L.k.clamps_in() && !L.v.clamps_in() && !L.q.clamps_out() && !L.k.clamps_out() &&
        !L.v.clamps_out()) {
      const MatmulTarget qkv[] = {{&L.q.w, s.q.data()}, {&L.k.w, s.k.data()}, {&L.v.w, s.v.data()}};
      matmul_multi(qkv, s.xn.data(), T, pool);
      for_rows(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          for (auto [l, y] : {std::pair{&L.q, &s.q}, {&L.k, &s.k}, {&L.v, &s.v}})
            if (!l->b.empty()) add_inplace(&(*y)[t * D], l->b.data(), D);
      });
    } else {
      linear(L.q, s.xn.data(), T, s.q.data(), pool);
      linear(L.k, s.xn.data(), T, s.k.data(), pool);
      linear(L.v, s.xn.data(), T, s.v.data(), pool);
    }
    if (g4) {
      for_rows(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t h = 0; h < c.n_heads; ++h) {
            float* q = &s.q[t * D + h * hd];
            float* k = &s.k[t * D + h * hd];
            float* v = &s.v[t * D + h * hd];
            if (!L.q_norm.empty()) rms_norm(q, L.q_norm.data(), q, hd, c.eps);
            if (!L.k_norm.empty()) rms_norm(k, L.k_norm.data(), k, hd, c.eps);
            rms_norm(v, ones.data(), v, hd, c.eps);  // Gemma 4 normalizes V without a weight
          }
      });
    }
    if (g4 || qw) rope_2d(T, pool);
    attention(T, pool);
    linear(L.o, s.attn.data(), T, s.tmp.data(), pool);
    if (!L.attn_post_norm.empty()) norm(L.attn_post_norm, {}, s.tmp.data(), s.tmp.data());
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) add_inplace(&s.x[t * D], &s.tmp[t * D], D);
    });
    norm(L.ln2_w, L.ln2_b, s.x.data(), s.xn.data());
    linear(L.up, s.xn.data(), T, s.ffn.data(), pool);
    const int64_t F = c.ffn_dim;
    if (!L.gate.empty()) {  // act(gate) * up
      s.ffn_gate.resize(T * F);
      linear(L.gate, s.xn.data(), T, s.ffn_gate.data(), pool);
      for_rows(pool, T, [&](int64_t t0, int64_t t1) {
        activate_rows(c.activation, &s.ffn_gate[t0 * F], &s.ffn[t0 * F], &s.ffn[t0 * F], (t1 - t0) * F);
      });
    } else {
      for_rows(pool, T, [&](int64_t t0, int64_t t1) {
        activate_rows(c.activation, &s.ffn[t0 * F], nullptr, &s.ffn[t0 * F], (t1 - t0) * F);
      });
    }
    linear(L.down, s.ffn.data(), T, s.tmp.data(), pool);
    if (!L.ffn_post_norm.empty()) norm(L.ffn_post_norm, {}, s.tmp.data(), s.tmp.data());
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* x = &s.x[t * D];
        add_inplace(x, &s.tmp[t * D], D);
        if (L.out_scale.size() == 1) scale_f32(x, L.out_scale[0], D);
        else if (!L.out_scale.empty())
          for (int64_t i = 0; i < D; ++i) x[i] *= L.out_scale[i];
      }
    });
  }
  const float* final_rows = s.x.data();
  if (!post_ln_w_.empty()) {
    norm(post_ln_w_, post_ln_b_, s.x.data(), s.xn.data());
    final_rows = s.xn.data();
  }
  if (qw) {  // the merger: rows in block order, so each block's four rows are one [4 D] row
    const int64_t n_out = T / 4, F1 = merger_fc1_->w.n_rows();
    s.ffn.resize(static_cast<size_t>(n_out * F1));
    linear(*merger_fc1_, final_rows, n_out, s.ffn.data(), pool);
    for_rows(pool, n_out, [&](int64_t o0, int64_t o1) {
      activate_rows(VisionActivation::Gelu, &s.ffn[o0 * F1], nullptr, &s.ffn[o0 * F1], (o1 - o0) * F1);
    });
    out.resize(static_cast<size_t>(n_out * c.text_dim));
    linear(*merger_fc2_, s.ffn.data(), n_out, out.data(), pool);
    return;
  }
  // The pool: the mean of each n_merge x n_merge block of the patch grid (tokens row-major
  // over the pooled grid). Gemma 3: an RMS norm with its weight; Gemma 4: times sqrt(width),
  // the standardization, an RMS norm without a weight.
  const int64_t m = c.n_merge, ox_n = n_x / m, n_out = ox_n * (n_y / m);
  std::vector<float>& pooled = s.patches;  // the im2col rows are free again
  pooled.resize(static_cast<size_t>(n_out * D));
  const float sqrt_d = std::sqrt(static_cast<float>(D));
  for_rows(pool, n_out, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t oy = o / ox_n, ox = o % ox_n;
      float* dst = &pooled[o * D];
      std::fill(dst, dst + D, 0.0f);
      for (int64_t dy = 0; dy < m; ++dy)
        for (int64_t dx = 0; dx < m; ++dx) add_inplace(dst, &final_rows[((oy * m + dy) * n_x + ox * m + dx) * D], D);
      scale_f32(dst, 1.0f / static_cast<float>(m * m), D);
      if (!g4) {
        rms_norm(dst, soft_emb_norm_.data(), dst, D, c.eps);
        continue;
      }
      scale_f32(dst, sqrt_d, D);
      if (!std_bias_.empty())
        for (int64_t i = 0; i < D; ++i) dst[i] = (dst[i] - std_bias_[i]) * std_scale_[i];
      rms_norm(dst, ones.data(), dst, D, c.eps);
    }
  });
  out.resize(static_cast<size_t>(n_out * c.text_dim));
  linear(*input_proj_, pooled.data(), n_out, out.data(), pool);
}

}  // namespace pagoda
