#include "tools/synth_mmproj.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tensor/file_type.h"
#include "tools/synth_random.h"

namespace pagoda {

namespace {

std::string num(int64_t x) { return std::to_string(x); }

}  // namespace

void check_mmproj_spec(const MmprojSpec& s) {
  const bool g4 = s.projector == "gemma4v", qw = s.projector == "qwen3vl_merger";
  if (s.projector != "gemma3" && !g4 && !qw)
    throw Error("synth: mmproj projector '" + s.projector + "' is not supported (gemma3, gemma4v or qwen3vl_merger)");
  if (s.image_size <= 0 || s.patch_size <= 0 || s.dim <= 0 || s.ffn_dim <= 0 || s.n_layers <= 0 ||
      s.n_heads <= 0 || s.n_merge <= 0 || (g4 && s.pos_size <= 0))
    throw Error("synth: every mmproj size must be positive");
  if (s.text_dim <= 0) throw Error("synth: the mmproj needs the text model's width (text_dim)");
  if (qw && s.n_merge != 2) throw Error("synth: qwen3vl_merger merges 2 x 2 patches, not " + num(s.n_merge));
  // gemma4v resizes every image to a multiple of patch x merge: image_size is unused;
  // qwen3vl_merger's is its position grid's side in pixels (resized to each image's).
  if (!g4) {
    if (s.image_size % s.patch_size != 0)
      throw Error("synth: mmproj image size " + num(s.image_size) + " is not a multiple of the patch size " +
                  num(s.patch_size));
    const int64_t side = s.image_size / s.patch_size;
    if (!qw && side % s.n_merge != 0)
      throw Error("synth: " + num(side) + " patches per side are not a multiple of the merge " + num(s.n_merge));
  }
  if (s.dim % s.n_heads != 0)
    throw Error("synth: mmproj dim " + num(s.dim) + " is not a multiple of its heads " + num(s.n_heads));
  if ((g4 || qw) && (s.dim / s.n_heads) % 4 != 0)
    throw Error("synth: " + s.projector + " head width " + num(s.dim / s.n_heads) +
                " is not a multiple of 4 (its 2-D RoPE rotates two halves in pairs)");
  if (!(s.eps > 0.0f)) throw Error("synth: the mmproj norm epsilon must be positive");
  const int64_t blk = traits(s.type).block_size;
  for (int64_t width : {s.dim, s.ffn_dim, qw ? 4 * s.dim : s.dim})
    if (width % blk != 0)
      throw Error("synth: mmproj matrix width " + num(width) + " is not a multiple of the " +
                  std::string(type_name(s.type)) + " block size " + num(blk));
}

MmprojSpec gemma4v_mmproj_spec() {
  MmprojSpec s;
  s.projector = "gemma4v";
  s.image_size = 224, s.patch_size = 16, s.dim = 768, s.ffn_dim = 3072, s.n_layers = 16, s.n_heads = 12;
  s.n_merge = 3, s.pos_size = 10240;
  return s;
}

MmprojSpec qwen3vl_mmproj_spec() {
  MmprojSpec s;
  s.projector = "qwen3vl_merger";
  s.image_size = 768, s.patch_size = 16, s.dim = 1152, s.ffn_dim = 4304, s.n_layers = 27, s.n_heads = 16;
  s.n_merge = 2;
  return s;
}

namespace {

float inv_sqrt(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

// Draws a file's tensors from one seeded stream, in the order they are added.
struct TensorMaker {
  gguf::GgufWriter& w;
  synth_random::Rng rng;
  std::vector<float> buf;

  // dims in ggml order (ne0 first).
  void random(const std::string& name, GgmlType type, std::vector<int64_t> dims, float stddev) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buf.resize(static_cast<size_t>(n));
    synth_random::fill(rng, buf, stddev);
    w.add_tensor_f32(name, type, dims, buf.data());
  }
  void norm(const std::string& name, int64_t n) {
    buf = synth_random::norm_weights(rng, n);
    w.add_tensor_f32(name, GgmlType::F32, {n}, buf.data());
  }
  void bias(const std::string& name, int64_t n) { random(name, GgmlType::F32, {n}, 0.1f); }
  // NAME.weight (a norm's, ~1) then NAME.bias: a LayerNorm.
  void layer_norm(const std::string& name, int64_t n) {
    norm(name + ".weight", n);
    bias(name + ".bias", n);
  }
  // NAME.weight [out, in] (std 1/sqrt(in)) then NAME.bias [out]: a biased projection.
  void linear(const std::string& name, GgmlType type, int64_t in, int64_t out) {
    random(name + ".weight", type, {in, out}, inv_sqrt(in));
    bias(name + ".bias", out);
  }
  void scalar(const std::string& name, float v) { w.add_tensor_f32(name, GgmlType::F32, {1}, &v); }
};


void add_gemma3_tensors(const MmprojSpec& spec, TensorMaker& t) {
  const int64_t p = spec.patch_size, d = spec.dim, f = spec.ffn_dim;
  const int64_t side = spec.image_size / spec.patch_size;
  // The patch embedding: a conv of stride p, HF's [dim, 3, p, p] (ggml [p, p, 3, dim]).
  t.random("v.patch_embd.weight", GgmlType::F32, {p, p, 3, d}, inv_sqrt(3 * p * p));
  t.bias("v.patch_embd.bias", d);
  t.random("v.position_embd.weight", GgmlType::F32, {d, side * side}, 0.5f);
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const std::string b = "v.blk." + num(l) + ".";
    t.layer_norm(b + "ln1", d);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) t.linear(b + m, spec.type, d, d);
    t.layer_norm(b + "ln2", d);
    // ffn_down's ne0 is ffn_dim: llama.cpp swaps up and down of a gemma3 file whose
    // ffn_down has ne0 == dim (old converters' names).
    t.linear(b + "ffn_up", spec.type, d, f);
    t.linear(b + "ffn_down", spec.type, f, d);
  }
  t.layer_norm("v.post_ln", d);
  // The projector: soft_emb_norm as the converter stores it (HF's weight + 1), and the
  // projection [text_dim, dim] that llama.cpp transposes before x . W (std 1/sqrt(dim): image
  // embeddings of RMS ~1, as Gemma's scaled token embeddings).
  t.norm("mm.soft_emb_norm.weight", d);
  t.random("mm.input_projection.weight", GgmlType::F16, {spec.text_dim, d}, inv_sqrt(d));
}

// Gemma4ClippableLinear's bounds, set so that they bite on this file's activations (RMS ~1
// into attn_q/k/v, ~0.5 into ffn_down): asymmetric, so a swapped min / max shows. q, k and v
// read the same normed input and carry the same input bounds (their outputs' differ):
// llama.cpp's ggml_clamp works in place, so attn_q's input clamp also reaches the K and V
// products there; with equal input bounds that is the same arithmetic as clamping each
// projection's own input (HF's, and pagoda's). With attn_q's bounds alone, llama-server's
// image rows differ (its first logprob ~0.1 from pagoda's: bench/vision_peer_check_gemma4.md).
struct Clamp {
  const char* matrix;
  float in_min, in_max, out_min, out_max;
};
constexpr Clamp kGemma4vClamps[] = {
    {"attn_q", -1.25f, 1.5f, -1.0f, 1.125f},
    {"attn_k", -1.25f, 1.5f, -1.125f, 0.875f},
    {"attn_v", -1.25f, 1.5f, -0.75f, 1.0f},
    {"ffn_down", -0.5f, 0.75f, -0.875f, 0.75f},
};

void add_gemma4v_tensors(const MmprojSpec& spec, TensorMaker& t) {
  const int64_t p = spec.patch_size, d = spec.dim, f = spec.ffn_dim, hd = spec.dim / spec.n_heads;
  // The patch embedding, no bias: HF's Linear over (ky, kx, c) patches, which the converter
  // permutes to a conv's [dim, 3, p, p] (ggml [p, p, 3, dim]).
  t.random("v.patch_embd.weight", GgmlType::F32, {p, p, 3, d}, inv_sqrt(3 * p * p));
  // Two tables, [2, pos_size, dim] in HF order: row x of the first plus row y of the second.
  t.random("v.position_embd.weight", GgmlType::F32, {d, spec.pos_size, 2}, 0.5f);
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const std::string b = "v.blk." + num(l) + ".";
    t.norm(b + "ln1.weight", d);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"})
      t.random(b + m + ".weight", spec.type, {d, d}, inv_sqrt(d));
    t.norm(b + "attn_q_norm.weight", hd);  // per head
    t.norm(b + "attn_k_norm.weight", hd);
    t.norm(b + "attn_post_norm.weight", d);
    t.norm(b + "ln2.weight", d);
    t.random(b + "ffn_gate.weight", spec.type, {d, f}, inv_sqrt(d));
    t.random(b + "ffn_up.weight", spec.type, {d, f}, inv_sqrt(d));
    t.random(b + "ffn_down.weight", spec.type, {f, d}, inv_sqrt(f));
    t.norm(b + "ffn_post_norm.weight", d);
    t.norm(b + "out_scale.weight", 1);  // HF layer_scalar: the whole layer output times it
    if (spec.clamps)
      for (const Clamp& c : kGemma4vClamps) {
        const std::string m = b + c.matrix;
        t.scalar(m + ".input_min", c.in_min);
        t.scalar(m + ".input_max", c.in_max);
        t.scalar(m + ".output_min", c.out_min);
        t.scalar(m + ".output_max", c.out_max);
      }
  }
  if (spec.std_scale) {
    // Subtracted from / multiplied into the pooled tokens (scaled by sqrt(dim), RMS ~ sqrt(dim)).
    t.random("v.std_bias", GgmlType::F32, {d}, 0.1f * std::sqrt(static_cast<float>(d)));
    t.norm("v.std_scale", d);
  }
  // [dim, text_dim] in ggml order: llama.cpp multiplies it as is (no transpose, unlike gemma3's).
  t.random("mm.input_projection.weight", GgmlType::F16, {d, spec.text_dim}, inv_sqrt(d));
}

// Qwen 3.5's: the 3-D patch convolution's two temporal slices (v.patch_embd.weight and
// .weight.1, HF's [dim, 3, 2, p, p] split as the converter does) with a bias, a square grid
// of learned positions (image_size / patch per side), LayerNorm blocks with a fused biased
// qkv and a biased GELU FFN, the final LayerNorm (the merger's norm: v.post_ln) and the
// merger mm.0 [4 dim -> 4 dim], mm.2 [4 dim -> text_dim], biased.
void add_qwen3vl_tensors(const MmprojSpec& spec, TensorMaker& t) {
  const int64_t p = spec.patch_size, d = spec.dim, f = spec.ffn_dim;
  const int64_t side = spec.image_size / spec.patch_size;
  // Each slice sees the same still image: 1/sqrt(2 fan_in) keeps their sum at 1/sqrt(fan_in).
  t.random("v.patch_embd.weight", GgmlType::F32, {p, p, 3, d}, inv_sqrt(2 * 3 * p * p));
  t.random("v.patch_embd.weight.1", GgmlType::F32, {p, p, 3, d}, inv_sqrt(2 * 3 * p * p));
  t.bias("v.patch_embd.bias", d);
  t.random("v.position_embd.weight", GgmlType::F32, {d, side * side}, 0.5f);
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const std::string b = "v.blk." + num(l) + ".";
    t.layer_norm(b + "ln1", d);
    t.linear(b + "attn_qkv", spec.type, d, 3 * d);
    t.linear(b + "attn_out", spec.type, d, d);
    t.layer_norm(b + "ln2", d);
    t.linear(b + "ffn_up", spec.type, d, f);
    t.linear(b + "ffn_down", spec.type, f, d);
  }
  t.layer_norm("v.post_ln", d);
  t.linear("mm.0", spec.type, 4 * d, 4 * d);
  t.linear("mm.2", spec.type, 4 * d, spec.text_dim);
}

}  // namespace

void write_synthetic_mmproj(const MmprojSpec& spec, const std::string& path) {
  check_mmproj_spec(spec);
  using gguf::Value;
  auto u32 = [](int64_t x) { return Value::u32(static_cast<uint32_t>(x)); };
  const bool g4 = spec.projector == "gemma4v", qw = spec.projector == "qwen3vl_merger";

  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("clip"));
  w.set("general.type", Value::str("mmproj"));
  w.set("general.name", Value::str(spec.name));
  if (auto ft = file_type_of(spec.type)) w.set("general.file_type", u32(static_cast<int64_t>(*ft)));
  w.set("clip.has_vision_encoder", Value::boolean(true));
  if (g4) {
    // As Gemma 4's converter: the per-modality key, and no clip.use_gelu (llama.cpp then runs
    // the FFN with gelu_quick; HF's is gelu_pytorch_tanh).
    w.set("clip.vision.projector_type", Value::str(spec.projector));
  } else {
    w.set("clip.projector_type", Value::str(spec.projector));
    w.set("clip.use_gelu", Value::boolean(true));
  }
  w.set("clip.vision.projection_dim", u32(spec.text_dim));
  w.set("clip.vision.image_size", u32(spec.image_size));
  w.set("clip.vision.patch_size", u32(spec.patch_size));
  w.set("clip.vision.embedding_length", u32(spec.dim));
  w.set("clip.vision.feed_forward_length", u32(spec.ffn_dim));
  w.set("clip.vision.block_count", u32(spec.n_layers));
  w.set("clip.vision.attention.head_count", u32(spec.n_heads));
  w.set("clip.vision.attention.layer_norm_epsilon", Value::f32(spec.eps));
  if (qw) w.set("clip.vision.spatial_merge_size", u32(spec.n_merge));
  // gemma3, qwen3vl_merger: (x - 0.5) / 0.5; gemma4v: x unchanged, its graph maps [0, 1] to
  // [-1, 1] itself.
  const float mean = g4 ? 0.0f : 0.5f, stdev = g4 ? 1.0f : 0.5f;
  w.set("clip.vision.image_mean", Value::f32_array({mean, mean, mean}));
  w.set("clip.vision.image_std", Value::f32_array({stdev, stdev, stdev}));
  // llama.cpp reads it optionally (default 4 for gemma3, 3 for gemma4v); the converters
  // write it only otherwise (gemma4's never).
  if (!qw && spec.n_merge != (g4 ? 3 : 4)) w.set("clip.vision.projector.scale_factor", u32(spec.n_merge));

  TensorMaker t{w, synth_random::Rng(spec.seed), {}};
  if (g4)
    add_gemma4v_tensors(spec, t);
  else if (qw)
    add_qwen3vl_tensors(spec, t);
  else
    add_gemma3_tensors(spec, t);
  w.write(path);
}

}  // namespace pagoda
