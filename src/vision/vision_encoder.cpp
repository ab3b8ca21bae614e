#include "vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/ops.h"
#include "tensor/types.h"

namespace pagoda {

struct VisionEncoder::Layer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // [dim]
  WeightMatrix wq, wk, wv, wo;                     // [dim, dim]
  std::vector<float> bq, bk, bv, bo;               // [dim]
  WeightMatrix up, down;                           // [ffn, dim], [dim, ffn]
  std::vector<float> b_up, b_down;                 // [ffn], [dim]
};

struct VisionEncoder::Scratch {
  std::vector<float> patches;  // [T, 3 * patch²] (im2col)
  std::vector<float> x;        // [T, dim] residual stream
  std::vector<float> xn;       // [T, dim]
  std::vector<float> q, k, v;  // [T, dim]
  std::vector<float> attn;     // [T, dim]
  std::vector<float> tmp;      // [T, dim]
  std::vector<float> ffn;      // [T, ffn]
  // One head at a time: K_h [T, hd], V_hᵀ [hd, T], Q_h [T, hd], scores [T, T], O_h [T, hd].
  std::vector<float> kh, vth, qh, scores, oh;
  std::vector<f16_t> kh16, vth16;  // K_h and V_hᵀ as the attention products' f16 "weights"
};

namespace {

std::string where(const gguf::GgufFile& f) { return f.path() + ": "; }

const gguf::TensorInfo& tensor(const gguf::GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
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

std::vector<float> floats(const gguf::GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
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

WeightMatrix matrix(const gguf::GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo& t = tensor(f, name, {cols, rows});
  if (!traits(t.type).weight_supported || cols % traits(t.type).block_size != 0)
    throw Error(where(f) + "projector tensor " + name + " has type " + std::string(type_name(t.type)) +
                ", which the matrix kernels do not take at width " + std::to_string(cols));
  return WeightMatrix::prepare(t.type, rows, cols, t.data);
}

int64_t positive_key(const gguf::GgufFile& f, const std::string& key) {
  const auto v = f.get_int(key);
  if (!v) throw Error(where(f) + "projector key " + key + " is missing");
  if (*v <= 0 || *v > (int64_t{1} << 20)) throw Error(where(f) + "projector key " + key + " = " + std::to_string(*v) + " is out of range");
  return *v;
}

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

float activate(float x, VisionActivation a) {
  switch (a) {
    case VisionActivation::Gelu:
      return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case VisionActivation::GeluQuick:
      return x / (1.0f + std::exp(-1.702f * x));
    case VisionActivation::Silu:
      return x / (1.0f + std::exp(-x));
  }
  return x;
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

std::unique_ptr<VisionEncoder> VisionEncoder::load(std::shared_ptr<const gguf::GgufFile> file) {
  const gguf::GgufFile& f = *file;
  if (f.get_string("general.architecture").value_or("") != "clip")
    throw Error(where(f) + "not a projector file (general.architecture is not \"clip\"); --mmproj takes an mmproj GGUF");
  if (f.get_bool("clip.has_vision_encoder") == false)
    throw Error(where(f) + "the projector has no vision encoder");
  std::string proj = f.get_string("clip.vision.projector_type").value_or(f.get_string("clip.projector_type").value_or(""));
  if (proj.empty()) throw Error(where(f) + "projector key clip.projector_type is missing");
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  e->file_ = std::move(file);
  VisionConfig& c = e->config_;
  c.projector_name = proj;
  if (proj != "gemma3")
    throw Error(where(f) + "projector type \"" + proj + "\" is not supported (supported: gemma3)");
  c.projector = VisionProjector::Gemma3;
  c.image_size = positive_key(f, "clip.vision.image_size");
  c.patch_size = positive_key(f, "clip.vision.patch_size");
  c.dim = positive_key(f, "clip.vision.embedding_length");
  c.ffn_dim = positive_key(f, "clip.vision.feed_forward_length");
  c.n_layers = positive_key(f, "clip.vision.block_count");
  c.n_heads = positive_key(f, "clip.vision.attention.head_count");
  c.eps = static_cast<float>(f.get_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
  if (auto m = f.get_int("clip.vision.projector.scale_factor")) c.n_merge = *m;
  if (c.n_layers > 1024 || c.n_heads > c.dim || c.dim % c.n_heads != 0)
    throw Error(where(f) + "projector has an impossible shape (heads must divide the width)");
  if (c.image_size % c.patch_size != 0 || c.n_merge <= 0 || c.patches_per_side() % c.n_merge != 0)
    throw Error(where(f) + "projector image size " + std::to_string(c.image_size) + " is not a whole number of " +
                std::to_string(c.patch_size) + "-pixel patches pooled " + std::to_string(c.n_merge) + " by " +
                std::to_string(c.n_merge));
  if (c.n_patches() > 65536) throw Error(where(f) + "projector takes more than 65536 patches per image");
  auto read3 = [&](const char* key, std::array<float, 3>& out) {
    const gguf::Array* a = f.get_array(key);
    if (a == nullptr) return;
    if (a->items.size() != 3) throw Error(where(f) + std::string(key) + " must hold 3 values");
    for (int i = 0; i < 3; ++i) {
      const auto v = a->items[i].as_double();
      if (!v || !std::isfinite(*v)) throw Error(where(f) + std::string(key) + " must hold numbers");
      out[i] = static_cast<float>(*v);
    }
  };
  read3("clip.vision.image_mean", c.mean);
  read3("clip.vision.image_std", c.std);
  for (float s : c.std)
    if (s == 0.0f) throw Error(where(f) + "clip.vision.image_std holds a zero");
  const bool gelu = f.get_bool("clip.use_gelu").value_or(false), silu = f.get_bool("clip.use_silu").value_or(false);
  if (gelu && silu) throw Error(where(f) + "both clip.use_gelu and clip.use_silu are set");
  c.activation = gelu ? VisionActivation::Gelu : silu ? VisionActivation::Silu : VisionActivation::GeluQuick;

  const int64_t D = c.dim, P = c.patch_size;
  {
    const gguf::TensorInfo& t = tensor(f, "v.patch_embd.weight", {P, P, 3, D});
    if (!traits(t.type).weight_supported) throw Error(where(f) + "v.patch_embd.weight has an unsupported type");
    e->patch_embd_ = WeightMatrix::prepare(t.type, D, 3 * P * P, t.data);
  }
  e->patch_bias_ = floats(f, "v.patch_embd.bias", {D});
  e->pos_embd_ = floats(f, "v.position_embd.weight", {D, c.n_patches()});
  for (int64_t il = 0; il < c.n_layers; ++il) {
    auto L = std::make_unique<Layer>();
    const std::string p = "v.blk." + std::to_string(il) + ".";
    L->ln1_w = floats(f, p + "ln1.weight", {D});
    L->ln1_b = floats(f, p + "ln1.bias", {D});
    L->ln2_w = floats(f, p + "ln2.weight", {D});
    L->ln2_b = floats(f, p + "ln2.bias", {D});
    L->wq = matrix(f, p + "attn_q.weight", D, D);
    L->wk = matrix(f, p + "attn_k.weight", D, D);
    L->wv = matrix(f, p + "attn_v.weight", D, D);
    L->wo = matrix(f, p + "attn_out.weight", D, D);
    L->bq = floats(f, p + "attn_q.bias", {D});
    L->bk = floats(f, p + "attn_k.bias", {D});
    L->bv = floats(f, p + "attn_v.bias", {D});
    L->bo = floats(f, p + "attn_out.bias", {D});
    // Older converters swapped ffn_up and ffn_down (llama.cpp's is_ffn_swapped): the
    // matrix whose input is the width D is the up projection, whatever its name.
    std::string up = p + "ffn_up", down = p + "ffn_down";
    if (const gguf::TensorInfo* d = f.find_tensor(down + ".weight"); d && !d->dims.empty() && d->dims[0] == D &&
                                                                      c.ffn_dim != D)
      std::swap(up, down);
    L->up = matrix(f, up + ".weight", c.ffn_dim, D);
    L->b_up = floats(f, up + ".bias", {c.ffn_dim});
    L->down = matrix(f, down + ".weight", D, c.ffn_dim);
    L->b_down = floats(f, down + ".bias", {D});
    e->layers_.push_back(std::move(L));
  }
  e->post_ln_w_ = floats(f, "v.post_ln.weight", {D});
  e->post_ln_b_ = floats(f, "v.post_ln.bias", {D});
  e->soft_emb_norm_ = floats(f, "mm.soft_emb_norm.weight", {D});
  {
    const gguf::TensorInfo* t = f.find_tensor("mm.input_projection.weight");
    if (t == nullptr || t->dims.size() != 2 || t->dims[1] != D)
      throw Error(where(f) + "projector tensor mm.input_projection.weight is missing or not [text width, " +
                  std::to_string(D) + "]");
    c.text_dim = t->dims[0];
    const std::vector<float> w = floats(f, "mm.input_projection.weight", {c.text_dim, D});
    // The file holds it as [D rows][text_dim]: out = x · W. The kernels take rows per output.
    e->input_proj_t_.resize(w.size());
    for (int64_t i = 0; i < D; ++i)
      for (int64_t j = 0; j < c.text_dim; ++j) e->input_proj_t_[j * D + i] = w[i * c.text_dim + j];
    e->input_proj_ = WeightMatrix::prepare(GgmlType::F32, c.text_dim, D,
                                           reinterpret_cast<const uint8_t*>(e->input_proj_t_.data()));
  }
  if (auto pd = f.get_int("clip.vision.projection_dim"); pd && *pd != c.text_dim)
    throw Error(where(f) + "clip.vision.projection_dim " + std::to_string(*pd) +
                " disagrees with mm.input_projection.weight's width " + std::to_string(c.text_dim));
  e->scratch_ = std::make_unique<Scratch>();
  return e;
}

std::string VisionEncoder::image_begin_text() const { return "<start_of_image>"; }
std::string VisionEncoder::image_end_text() const { return "<end_of_image>"; }

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
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
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

void VisionEncoder::encode(const float* pixels, ThreadPool& pool, std::vector<float>& out) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t D = c.dim, P = c.patch_size, side = c.patches_per_side(), T = c.n_patches(), S = c.image_size;
  const int64_t K = 3 * P * P;
  s.patches.resize(T * K);
  for (auto* v : {&s.x, &s.xn, &s.q, &s.k, &s.v, &s.attn, &s.tmp}) v->resize(T * D);
  s.ffn.resize(T * c.ffn_dim);
  // Patch embedding: the stride-P convolution as im2col + one matmul; column order
  // (channel, ky, kx) is the conv weight's [P, P, 3, D] layout read row by row.
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t py = t / side, px = t % side;
      float* row = &s.patches[t * K];
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < P; ++ky)
          std::memcpy(row + (ch * P + ky) * P, pixels + (ch * S + py * P + ky) * S + px * P, sizeof(float) * P);
    }
  });
  matmul(patch_embd_, s.patches.data(), T, s.x.data(), pool);
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      add_inplace(&s.x[t * D], patch_bias_.data(), D);
      add_inplace(&s.x[t * D], &pos_embd_[t * D], D);
    }
  });
  for (const auto& Lp : layers_) {
    const Layer& L = *Lp;
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) layer_norm(&s.x[t * D], L.ln1_w.data(), L.ln1_b.data(), &s.xn[t * D], D, c.eps);
    });
    const MatmulTarget qkv[] = {{&L.wq, s.q.data()}, {&L.wk, s.k.data()}, {&L.wv, s.v.data()}};
    matmul_multi(qkv, s.xn.data(), T, pool);
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        add_inplace(&s.q[t * D], L.bq.data(), D);
        add_inplace(&s.k[t * D], L.bk.data(), D);
        add_inplace(&s.v[t * D], L.bv.data(), D);
      }
    });
    attention(T, pool);
    matmul(L.wo, s.attn.data(), T, s.tmp.data(), pool);
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        add_inplace(&s.tmp[t * D], L.bo.data(), D);
        add_inplace(&s.x[t * D], &s.tmp[t * D], D);
        layer_norm(&s.x[t * D], L.ln2_w.data(), L.ln2_b.data(), &s.xn[t * D], D, c.eps);
      }
    });
    matmul(L.up, s.xn.data(), T, s.ffn.data(), pool);
    const int64_t F = c.ffn_dim;
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* r = &s.ffn[t * F];
        for (int64_t i = 0; i < F; ++i) r[i] = activate(r[i] + L.b_up[i], c.activation);
      }
    });
    matmul(L.down, s.ffn.data(), T, s.tmp.data(), pool);
    for_rows(pool, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        add_inplace(&s.tmp[t * D], L.b_down.data(), D);
        add_inplace(&s.x[t * D], &s.tmp[t * D], D);
      }
    });
  }
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) layer_norm(&s.x[t * D], post_ln_w_.data(), post_ln_b_.data(), &s.xn[t * D], D, c.eps);
  });
  // Gemma 3's projector: the mean of each n_merge x n_merge block of the patch grid (tokens
  // row-major over the pooled grid), an RMS norm, then the map to the text width.
  const int64_t m = c.n_merge, pside = side / m, n_out = pside * pside;
  s.tmp.resize(std::max(T, n_out) * D);
  for_rows(pool, n_out, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t oy = o / pside, ox = o % pside;
      float* dst = &s.tmp[o * D];
      std::fill(dst, dst + D, 0.0f);
      for (int64_t dy = 0; dy < m; ++dy)
        for (int64_t dx = 0; dx < m; ++dx) add_inplace(dst, &s.xn[((oy * m + dy) * side + ox * m + dx) * D], D);
      scale_f32(dst, 1.0f / static_cast<float>(m * m), D);
      rms_norm(dst, soft_emb_norm_.data(), dst, D, c.eps);
    }
  });
  out.resize(static_cast<size_t>(n_out * c.text_dim));
  matmul(input_proj_, s.tmp.data(), n_out, out.data(), pool);
}

}  // namespace pagoda
