#include "vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/ops.h"
#include "tensor/types.h"

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
  if (proj == "gemma3") {
    c.projector = VisionProjector::Gemma3;
  } else if (proj == "gemma4v") {
    c.projector = VisionProjector::Gemma4V;
    c.n_merge = 3;  // llama.cpp's default pooling kernel, unless the file says
  } else {
    throw Error(where(f) + "projector type \"" + proj + "\" is not supported (supported: gemma3, gemma4v)");
  }
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
  if (c.n_merge <= 0 || c.n_merge > 64) throw Error(where(f) + "projector pool size " + std::to_string(c.n_merge) + " is out of range");
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
  for (float sd : c.std)
    if (sd == 0.0f) throw Error(where(f) + "clip.vision.image_std holds a zero");
  const bool gelu = f.get_bool("clip.use_gelu").value_or(false), silu = f.get_bool("clip.use_silu").value_or(false);
  if (gelu && silu) throw Error(where(f) + "both clip.use_gelu and clip.use_silu are set");
  c.activation = gelu ? VisionActivation::Gelu : silu ? VisionActivation::Silu : VisionActivation::GeluQuick;
  if (c.projector == VisionProjector::Gemma3) e->load_gemma3();
  else e->load_gemma4v();
  if (auto pd = f.get_int("clip.vision.projection_dim"); pd && *pd != c.text_dim)
    throw Error(where(f) + "clip.vision.projection_dim " + std::to_string(*pd) +
                " disagrees with mm.input_projection.weight's width " + std::to_string(c.text_dim));
  e->scratch_ = std::make_unique<Scratch>();
  return e;
}

void VisionEncoder::load_gemma3() {
  const gguf::GgufFile& f = *file_;
  VisionConfig& c = config_;
  if (c.image_size % c.patch_size != 0 || c.patches_per_side() % c.n_merge != 0)
    throw Error(where(f) + "projector image size " + std::to_string(c.image_size) + " is not a whole number of " +
                std::to_string(c.patch_size) + "-pixel patches pooled " + std::to_string(c.n_merge) + " by " +
                std::to_string(c.n_merge));
  if (c.n_patches() > 65536) throw Error(where(f) + "projector takes more than 65536 patches per image");
  const int64_t D = c.dim, P = c.patch_size;
  {
    const gguf::TensorInfo& t = tensor(f, "v.patch_embd.weight", {P, P, 3, D});
    if (!traits(t.type).weight_supported) throw Error(where(f) + "v.patch_embd.weight has an unsupported type");
    patch_embd_ = WeightMatrix::prepare(t.type, D, 3 * P * P, t.data);
  }
  patch_bias_ = floats(f, "v.patch_embd.bias", {D});
  pos_embd_ = floats(f, "v.position_embd.weight", {D, c.n_patches()});
  for (int64_t il = 0; il < c.n_layers; ++il) {
    auto L = std::make_unique<Layer>();
    const std::string p = "v.blk." + std::to_string(il) + ".";
    L->ln1_w = floats(f, p + "ln1.weight", {D});
    L->ln1_b = floats(f, p + "ln1.bias", {D});
    L->ln2_w = floats(f, p + "ln2.weight", {D});
    L->ln2_b = floats(f, p + "ln2.bias", {D});
    for (auto [lin, name] : {std::pair{&L->q, "attn_q"}, {&L->k, "attn_k"}, {&L->v, "attn_v"}, {&L->o, "attn_out"}}) {
      lin->w = matrix(f, p + name + ".weight", D, D);
      lin->b = floats(f, p + name + ".bias", {D});
    }
    // Older converters swapped ffn_up and ffn_down (llama.cpp's is_ffn_swapped): the
    // matrix whose input is the width D is the up projection, whatever its name.
    std::string up = p + "ffn_up", down = p + "ffn_down";
    if (const gguf::TensorInfo* d = f.find_tensor(down + ".weight"); d && !d->dims.empty() && d->dims[0] == D &&
                                                                      c.ffn_dim != D)
      std::swap(up, down);
    L->up.w = matrix(f, up + ".weight", c.ffn_dim, D);
    L->up.b = floats(f, up + ".bias", {c.ffn_dim});
    L->down.w = matrix(f, down + ".weight", D, c.ffn_dim);
    L->down.b = floats(f, down + ".bias", {D});
    layers_.push_back(std::move(L));
  }
  post_ln_w_ = floats(f, "v.post_ln.weight", {D});
  post_ln_b_ = floats(f, "v.post_ln.bias", {D});
  soft_emb_norm_ = floats(f, "mm.soft_emb_norm.weight", {D});
  const gguf::TensorInfo* t = f.find_tensor("mm.input_projection.weight");
  if (t == nullptr || t->dims.size() != 2 || t->dims[1] != D)
    throw Error(where(f) + "projector tensor mm.input_projection.weight is missing or not [text width, " +
                std::to_string(D) + "]");
  c.text_dim = t->dims[0];
  const std::vector<float> w = floats(f, "mm.input_projection.weight", {c.text_dim, D});
  // The file holds it as [D rows][text_dim]: out = x · W. The kernels take rows per output.
  input_proj_t_.resize(w.size());
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j < c.text_dim; ++j) input_proj_t_[j * D + i] = w[i * c.text_dim + j];
  input_proj_ = std::make_unique<Linear>();
  input_proj_->w = WeightMatrix::prepare(GgmlType::F32, c.text_dim, D, reinterpret_cast<const uint8_t*>(input_proj_t_.data()));
}

// Gemma4ClippableLinear's scalars beside `name`.weight, each optional.
static void read_clamps(const gguf::GgufFile& f, const std::string& name, float& in_min, float& in_max, float& out_min,
                 float& out_max) {
  auto scalar = [&](const char* suffix, float& out) {
    const std::string n = name + suffix;
    if (f.find_tensor(n) == nullptr) return;
    const std::vector<float> v = floats(f, n, {1});
    out = v[0];
  };
  scalar(".input_min", in_min);
  scalar(".input_max", in_max);
  scalar(".output_min", out_min);
  scalar(".output_max", out_max);
  if (!(in_min <= in_max) || !(out_min <= out_max)) throw Error(where(f) + name + ": a clamp's minimum is above its maximum");
}

void VisionEncoder::load_gemma4v() {
  const gguf::GgufFile& f = *file_;
  VisionConfig& c = config_;
  const int64_t D = c.dim, P = c.patch_size, hd = c.head_dim();
  if (hd % 4 != 0) throw Error(where(f) + "gemma4v needs a head size divisible by 4 (2-D RoPE), not " + std::to_string(hd));
  c.dynamic_size = true;
  // llama.cpp's limits for this projector (clip.cpp: set_limit_image_tokens(40, 280)).
  const int64_t area = P * P * c.n_merge * c.n_merge;
  c.min_pixels = 40 * area;
  c.max_pixels = 280 * area;
  c.rope_theta = 100.0f;
  {
    const gguf::TensorInfo& t = tensor(f, "v.patch_embd.weight", {P, P, 3, D});
    if (!traits(t.type).weight_supported) throw Error(where(f) + "v.patch_embd.weight has an unsupported type");
    patch_embd_ = WeightMatrix::prepare(t.type, D, 3 * P * P, t.data);
  }
  {
    const gguf::TensorInfo* t = f.find_tensor("v.position_embd.weight");
    if (t == nullptr || t->dims.size() < 2 || t->dims[0] != D)
      throw Error(where(f) + "projector tensor v.position_embd.weight is missing or not [" + std::to_string(D) + ", N, 2]");
    c.pos_table = t->dims[1];
    pos_embd_ = floats(f, "v.position_embd.weight", {D, c.pos_table, 2});
  }
  auto lin = [&](Linear& l, const std::string& name, int64_t rows, int64_t cols, bool bias) {
    l.w = matrix(f, name + ".weight", rows, cols);
    if (bias || f.find_tensor(name + ".bias")) l.b = floats(f, name + ".bias", {rows});
    read_clamps(f, name, l.in_min, l.in_max, l.out_min, l.out_max);
  };
  auto optional = [&](const std::string& name, std::vector<int64_t> dims) {
    return f.find_tensor(name) ? floats(f, name, std::move(dims)) : std::vector<float>{};
  };
  for (int64_t il = 0; il < c.n_layers; ++il) {
    auto L = std::make_unique<Layer>();
    const std::string p = "v.blk." + std::to_string(il) + ".";
    L->ln1_w = floats(f, p + "ln1.weight", {D});
    L->ln2_w = floats(f, p + "ln2.weight", {D});
    lin(L->q, p + "attn_q", D, D, false);
    lin(L->k, p + "attn_k", D, D, false);
    lin(L->v, p + "attn_v", D, D, false);
    lin(L->o, p + "attn_out", D, D, false);
    L->q_norm = optional(p + "attn_q_norm.weight", {hd});
    L->k_norm = optional(p + "attn_k_norm.weight", {hd});
    L->attn_post_norm = optional(p + "attn_post_norm.weight", {D});
    L->ffn_post_norm = optional(p + "ffn_post_norm.weight", {D});
    if (const gguf::TensorInfo* t = f.find_tensor(p + "out_scale.weight"))
      L->out_scale = floats(f, p + "out_scale.weight", {t->n_elements() == 1 ? int64_t{1} : D});
    lin(L->up, p + "ffn_up", c.ffn_dim, D, false);
    if (f.find_tensor(p + "ffn_gate.weight")) lin(L->gate, p + "ffn_gate", c.ffn_dim, D, false);
    lin(L->down, p + "ffn_down", D, c.ffn_dim, false);
    layers_.push_back(std::move(L));
  }
  std_bias_ = optional("v.std_bias", {D});
  std_scale_ = optional("v.std_scale", {D});
  if (std_bias_.empty() != std_scale_.empty()) throw Error(where(f) + "v.std_bias and v.std_scale come together");
  const gguf::TensorInfo* t = f.find_tensor("mm.input_projection.weight");
  if (t == nullptr || t->dims.size() != 2 || t->dims[0] != D)
    throw Error(where(f) + "projector tensor mm.input_projection.weight is missing or not [" + std::to_string(D) +
                ", text width]");
  c.text_dim = t->dims[1];
  input_proj_ = std::make_unique<Linear>();
  lin(*input_proj_, "mm.input_projection", c.text_dim, D, false);
  rope_inv_freq_.resize(static_cast<size_t>(hd / 4));
  rope_inv_freq(rope_inv_freq_.data(), hd / 2, c.rope_theta, 1.0f, nullptr);
}

std::string VisionEncoder::image_begin_text() const {
  return config_.projector == VisionProjector::Gemma4V ? "<|image>" : "<start_of_image>";
}
std::string VisionEncoder::image_end_text() const {
  return config_.projector == VisionProjector::Gemma4V ? "<image|>" : "<end_of_image>";
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

int64_t VisionEncoder::tokens_for(int64_t width, int64_t height) const {
  const int64_t m = config_.patch_size * config_.n_merge;
  return (width / m) * (height / m);
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

// Gemma 4's 2-D RoPE on q and k ([T, dim], heads of hd): in each head the first half
// rotates by the patch's column and the second half by its row, each half in NEOX pairs
// (i, i + hd/4) with base rope_theta over hd/2 dims (llama.cpp: two ggml_rope_ext of
// n_dims hd/2, the second offset by hd/2).
void VisionEncoder::rope_2d(int64_t T, int64_t n_x, ThreadPool& pool) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t hd = c.head_dim(), D = c.dim, q4 = hd / 4;
  s.rope_cos.resize(static_cast<size_t>(2 * T * q4));
  s.rope_sin.resize(static_cast<size_t>(2 * T * q4));
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      rope_table(&s.rope_cos[2 * t * q4], &s.rope_sin[2 * t * q4], hd / 2, t % n_x, rope_inv_freq_.data());
      rope_table(&s.rope_cos[(2 * t + 1) * q4], &s.rope_sin[(2 * t + 1) * q4], hd / 2, t / n_x, rope_inv_freq_.data());
      for (float* base : {&s.q[t * D], &s.k[t * D]})
        for (int64_t h = 0; h < c.n_heads; ++h) {
          float* x = base + h * hd;
          rope_apply(x, 1, hd / 2, hd / 2, &s.rope_cos[2 * t * q4], &s.rope_sin[2 * t * q4], true);
          rope_apply(x + hd / 2, 1, hd / 2, hd / 2, &s.rope_cos[(2 * t + 1) * q4], &s.rope_sin[(2 * t + 1) * q4], true);
        }
    }
  });
}

void VisionEncoder::encode(const float* pixels, int64_t width, int64_t height, ThreadPool& pool,
                           std::vector<float>& out) {
  const VisionConfig& c = config_;
  Scratch& s = *scratch_;
  const bool g4 = c.projector == VisionProjector::Gemma4V;
  const int64_t D = c.dim, P = c.patch_size, hd = c.head_dim();
  PAGODA_CHECK(width % (P * c.n_merge) == 0 && height % (P * c.n_merge) == 0 && width > 0 && height > 0,
               "VisionEncoder::encode: the input is not a whole number of pooled patches");
  PAGODA_CHECK(g4 || (width == c.image_size && height == c.image_size), "VisionEncoder::encode: gemma3 takes image_size only");
  const int64_t n_x = width / P, n_y = height / P, T = n_x * n_y;
  PAGODA_CHECK(!g4 || (n_x <= c.pos_table && n_y <= c.pos_table),
               "VisionEncoder::encode: the image has more patches per side than the position table");
  const int64_t K = 3 * P * P;
  s.patches.resize(T * K);
  for (auto* v : {&s.x, &s.xn, &s.q, &s.k, &s.v, &s.attn, &s.tmp}) v->resize(T * D);
  s.ffn.resize(T * c.ffn_dim);
  // Patch embedding: the stride-P convolution as im2col + one matmul; column order
  // (channel, ky, kx) is the conv weight's [P, P, 3, D] layout read row by row. Gemma 4
  // feeds the conv 2x - 1 of its [0, 1] pixels.
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t py = t / n_x, px = t % n_x;
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
  for_rows(pool, T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (!patch_bias_.empty()) add_inplace(&s.x[t * D], patch_bias_.data(), D);
      if (g4) {  // a column table, then a row table
        add_inplace(&s.x[t * D], &pos_embd_[(t % n_x) * D], D);
        add_inplace(&s.x[t * D], &pos_embd_[(c.pos_table + t / n_x) * D], D);
      } else {
        add_inplace(&s.x[t * D], &pos_embd_[t * D], D);
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
      rope_2d(T, n_x, pool);
    }
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
        for (int64_t i = t0 * F; i < t1 * F; ++i) s.ffn[i] *= activate(s.ffn_gate[i], c.activation);
      });
    } else {
      for_rows(pool, T, [&](int64_t t0, int64_t t1) {
        for (int64_t i = t0 * F; i < t1 * F; ++i) s.ffn[i] = activate(s.ffn[i], c.activation);
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
