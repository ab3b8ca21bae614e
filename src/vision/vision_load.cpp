// VisionEncoder::load and each projector's tensors (the contract: vision/vision_encoder.h).
#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/ops.h"
#include "tensor/types.h"
#include "vision/vision_internal.h"

namespace pagoda {

using namespace vision_detail;

namespace {

// A block's two LayerNorms (gemma3, qwen3vl_merger): PREFIX ln1 / ln2 .weight and .bias.
template <class Layer>
void read_layer_norms(const gguf::GgufFile& f, const std::string& p, int64_t D, Layer& L) {
  L.ln1_w = floats(f, p + "ln1.weight", {D});
  L.ln1_b = floats(f, p + "ln1.bias", {D});
  L.ln2_w = floats(f, p + "ln2.weight", {D});
  L.ln2_b = floats(f, p + "ln2.bias", {D});
}

}  // namespace

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
  } else if (proj == "qwen3vl_merger") {
    c.projector = VisionProjector::Qwen3VL;
    c.n_merge = f.get_int("clip.vision.spatial_merge_size").value_or(2);
  } else {
    throw Error(where(f) + "projector type \"" + proj + "\" is not supported (supported: gemma3, gemma4v, qwen3vl_merger)");
  }
  c.image_size = positive_key(f, "clip.vision.image_size");
  c.patch_size = positive_key(f, "clip.vision.patch_size");
  c.dim = positive_key(f, "clip.vision.embedding_length");
  c.ffn_dim = positive_key(f, "clip.vision.feed_forward_length");
  c.n_layers = positive_key(f, "clip.vision.block_count");
  c.n_heads = positive_key(f, "clip.vision.attention.head_count");
  c.eps = static_cast<float>(f.get_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
  if (auto m = f.get_int("clip.vision.projector.scale_factor"); m && c.projector != VisionProjector::Qwen3VL) c.n_merge = *m;
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
  else if (c.projector == VisionProjector::Gemma4V) e->load_gemma4v();
  else e->load_qwen3vl();
  if (auto pd = f.get_int("clip.vision.projection_dim"); pd && *pd != c.text_dim)
    throw Error(where(f) + "clip.vision.projection_dim " + std::to_string(*pd) +
                " disagrees with the projection's output width " + std::to_string(c.text_dim));
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
    read_layer_norms(f, p, D, *L);
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

void VisionEncoder::load_qwen3vl() {
  const gguf::GgufFile& f = *file_;
  VisionConfig& c = config_;
  const int64_t D = c.dim, P = c.patch_size, hd = c.head_dim(), m = c.n_merge;
  if (m != 2) throw Error(where(f) + "qwen3vl_merger merges 2 x 2 patches, not " + std::to_string(m) + " x " + std::to_string(m));
  if (hd % 4 != 0) throw Error(where(f) + "qwen3vl_merger needs a head size divisible by 4 (2-D RoPE), not " + std::to_string(hd));
  // Deepstack layers (Qwen3-VL) feed extra rows into the language model's first layers,
  // which no language model here takes (Qwen 3.5's projector has none).
  for (int64_t il = 0; il < c.n_layers; ++il)
    if (f.find_tensor("v.deepstack." + std::to_string(il) + ".fc1.weight"))
      throw Error(where(f) + "the projector has deepstack layers (Qwen3-VL), which are not supported: "
                  "the Qwen 3.5 / 3.6 projectors have none");
  c.dynamic_size = true;
  // llama.cpp's limits for the Qwen-VL projectors (clip.cpp: set_limit_image_tokens(8, 4096)).
  const int64_t area = P * P * m * m;
  c.min_pixels = 8 * area;
  c.max_pixels = 4096 * area;
  c.rope_theta = 10000.0f;
  // The two temporal slices of the 3-D patch convolution see the same still image (llama.cpp
  // adds the two convolutions): one convolution with their sum, read as f32.
  {
    const std::vector<float> w0 = floats(f, "v.patch_embd.weight", {P, P, 3, D});
    const std::vector<float> w1 = floats(f, "v.patch_embd.weight.1", {P, P, 3, D});
    patch_w_sum_.resize(w0.size());
    for (size_t i = 0; i < w0.size(); ++i) patch_w_sum_[i] = w0[i] + w1[i];
    patch_embd_ = WeightMatrix::prepare(GgmlType::F32, D, 3 * P * P, reinterpret_cast<const uint8_t*>(patch_w_sum_.data()));
  }
  patch_bias_ = floats(f, "v.patch_embd.bias", {D});
  {
    const gguf::TensorInfo* t = f.find_tensor("v.position_embd.weight");
    if (t == nullptr || t->dims.size() != 2 || t->dims[0] != D)
      throw Error(where(f) + "projector tensor v.position_embd.weight is missing or not [" + std::to_string(D) + ", N]");
    const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(t->dims[1]))));
    if (side * side != t->dims[1] || side < 1)
      throw Error(where(f) + "v.position_embd.weight's " + std::to_string(t->dims[1]) + " rows are not a square grid");
    c.pos_table = side;
    pos_embd_ = floats(f, "v.position_embd.weight", {D, t->dims[1]});
  }
  auto lin = [&](Linear& l, const std::string& name, int64_t rows, int64_t cols) {
    l.w = matrix(f, name + ".weight", rows, cols);
    l.b = floats(f, name + ".bias", {rows});
  };
  for (int64_t il = 0; il < c.n_layers; ++il) {
    auto L = std::make_unique<Layer>();
    const std::string p = "v.blk." + std::to_string(il) + ".";
    read_layer_norms(f, p, D, *L);
    if (f.find_tensor(p + "attn_qkv.weight")) {
      // The fused [3D, D] matrix as three row ranges (q, k, v): views into the file.
      const gguf::TensorInfo& t = matrix_tensor(f, p + "attn_qkv.weight", 3 * D, D);
      const std::vector<float> b = floats(f, p + "attn_qkv.bias", {3 * D});
      const size_t rb = row_bytes(t.type, D);
      Linear* parts[] = {&L->q, &L->k, &L->v};
      for (int64_t i = 0; i < 3; ++i) {
        parts[i]->w = WeightMatrix::prepare(t.type, D, D, t.data + static_cast<size_t>(i * D) * rb);
        parts[i]->b.assign(b.begin() + i * D, b.begin() + (i + 1) * D);
      }
    } else {
      lin(L->q, p + "attn_q", D, D);
      lin(L->k, p + "attn_k", D, D);
      lin(L->v, p + "attn_v", D, D);
    }
    lin(L->o, p + "attn_out", D, D);
    lin(L->up, p + "ffn_up", c.ffn_dim, D);
    lin(L->down, p + "ffn_down", D, c.ffn_dim);
    layers_.push_back(std::move(L));
  }
  post_ln_w_ = floats(f, "v.post_ln.weight", {D});
  post_ln_b_ = floats(f, "v.post_ln.bias", {D});
  // The merger: each 2 x 2 block's four rows side by side [4D], mm.0 (+ bias), GELU, mm.2.
  const gguf::TensorInfo* t0 = f.find_tensor("mm.0.weight");
  const gguf::TensorInfo* t2 = f.find_tensor("mm.2.weight");
  if (t0 == nullptr || t0->dims.size() != 2 || t0->dims[0] != 4 * D)
    throw Error(where(f) + "projector tensor mm.0.weight is missing or not [" + std::to_string(4 * D) + ", N]");
  if (t2 == nullptr || t2->dims.size() != 2 || t2->dims[0] != t0->dims[1])
    throw Error(where(f) + "projector tensor mm.2.weight is missing or not [" + std::to_string(t0->dims[1]) +
                ", text width]");
  c.text_dim = t2->dims[1];
  merger_fc1_ = std::make_unique<Linear>();
  merger_fc2_ = std::make_unique<Linear>();
  lin(*merger_fc1_, "mm.0", t0->dims[1], 4 * D);
  lin(*merger_fc2_, "mm.2", c.text_dim, t0->dims[1]);
  rope_inv_freq_.resize(static_cast<size_t>(hd / 4));
  rope_inv_freq(rope_inv_freq_.data(), hd / 2, c.rope_theta, 1.0f, nullptr);
}

}  // namespace pagoda
