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
  if (s.projector != "gemma3")
    throw Error("synth: mmproj projector '" + s.projector + "' is not supported (gemma3 only)");
  if (s.image_size <= 0 || s.patch_size <= 0 || s.dim <= 0 || s.ffn_dim <= 0 || s.n_layers <= 0 ||
      s.n_heads <= 0 || s.n_merge <= 0)
    throw Error("synth: every mmproj size must be positive");
  if (s.text_dim <= 0) throw Error("synth: the mmproj needs the text model's width (text_dim)");
  if (s.image_size % s.patch_size != 0)
    throw Error("synth: mmproj image size " + num(s.image_size) + " is not a multiple of the patch size " +
                num(s.patch_size));
  const int64_t side = s.image_size / s.patch_size;
  if (side % s.n_merge != 0)
    throw Error("synth: " + num(side) + " patches per side are not a multiple of the merge " + num(s.n_merge));
  if (s.dim % s.n_heads != 0)
    throw Error("synth: mmproj dim " + num(s.dim) + " is not a multiple of its heads " + num(s.n_heads));
  if (!(s.eps > 0.0f)) throw Error("synth: the mmproj norm epsilon must be positive");
  const int64_t blk = traits(s.type).block_size;
  for (int64_t width : {s.dim, s.ffn_dim})
    if (width % blk != 0)
      throw Error("synth: mmproj matrix width " + num(width) + " is not a multiple of the " +
                  std::string(type_name(s.type)) + " block size " + num(blk));
}

void write_synthetic_mmproj(const MmprojSpec& spec, const std::string& path) {
  check_mmproj_spec(spec);
  using gguf::Value;
  using synth_random::fill;
  auto u32 = [](int64_t x) { return Value::u32(static_cast<uint32_t>(x)); };
  const int64_t side = spec.image_size / spec.patch_size, n_patches = side * side;

  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("clip"));
  w.set("general.type", Value::str("mmproj"));
  w.set("general.name", Value::str(spec.name));
  if (auto ft = file_type_of(spec.type)) w.set("general.file_type", u32(static_cast<int64_t>(*ft)));
  w.set("clip.has_vision_encoder", Value::boolean(true));
  w.set("clip.projector_type", Value::str(spec.projector));
  w.set("clip.use_gelu", Value::boolean(true));
  w.set("clip.vision.projection_dim", u32(spec.text_dim));
  w.set("clip.vision.image_size", u32(spec.image_size));
  w.set("clip.vision.patch_size", u32(spec.patch_size));
  w.set("clip.vision.embedding_length", u32(spec.dim));
  w.set("clip.vision.feed_forward_length", u32(spec.ffn_dim));
  w.set("clip.vision.block_count", u32(spec.n_layers));
  w.set("clip.vision.attention.head_count", u32(spec.n_heads));
  w.set("clip.vision.attention.layer_norm_epsilon", Value::f32(spec.eps));
  w.set("clip.vision.image_mean", Value::f32_array({0.5f, 0.5f, 0.5f}));
  w.set("clip.vision.image_std", Value::f32_array({0.5f, 0.5f, 0.5f}));
  // llama.cpp reads it optionally, 4 (every released Gemma 3) when absent; the converter
  // writes it only otherwise.
  if (spec.n_merge != 4) w.set("clip.vision.projector.scale_factor", u32(spec.n_merge));

  synth_random::Rng rng(spec.seed);
  std::vector<float> buf;
  // dims in ggml order (ne0 first).
  auto random = [&](const std::string& name, GgmlType type, std::vector<int64_t> dims, float stddev) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buf.resize(static_cast<size_t>(n));
    fill(rng, buf, stddev);
    w.add_tensor_f32(name, type, dims, buf.data());
  };
  auto norm = [&](const std::string& name, int64_t n) {
    buf = synth_random::norm_weights(rng, n);
    w.add_tensor_f32(name, GgmlType::F32, {n}, buf.data());
  };
  auto bias = [&](const std::string& name, int64_t n) { random(name, GgmlType::F32, {n}, 0.1f); };
  auto inv_sqrt = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };

  const int64_t p = spec.patch_size, d = spec.dim, f = spec.ffn_dim;
  // The patch embedding: a conv of stride p, HF's [dim, 3, p, p] (ggml [p, p, 3, dim]).
  random("v.patch_embd.weight", GgmlType::F32, {p, p, 3, d}, inv_sqrt(3 * p * p));
  bias("v.patch_embd.bias", d);
  random("v.position_embd.weight", GgmlType::F32, {d, n_patches}, 0.5f);
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const std::string b = "v.blk." + num(l) + ".";
    norm(b + "ln1.weight", d);
    bias(b + "ln1.bias", d);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      random(b + m + ".weight", spec.type, {d, d}, inv_sqrt(d));
      bias(b + m + ".bias", d);
    }
    norm(b + "ln2.weight", d);
    bias(b + "ln2.bias", d);
    // ffn_down's ne0 is ffn_dim: llama.cpp swaps up and down of a gemma3 file whose
    // ffn_down has ne0 == dim (old converters' names).
    random(b + "ffn_up.weight", spec.type, {d, f}, inv_sqrt(d));
    bias(b + "ffn_up.bias", f);
    random(b + "ffn_down.weight", spec.type, {f, d}, inv_sqrt(f));
    bias(b + "ffn_down.bias", d);
  }
  norm("v.post_ln.weight", d);
  bias("v.post_ln.bias", d);
  // The projector: soft_emb_norm as the converter stores it (HF's weight + 1), and the
  // projection [text_dim, dim] that llama.cpp transposes before x . W (std 1/sqrt(dim): image
  // embeddings of RMS ~1, as Gemma's scaled token embeddings).
  norm("mm.soft_emb_norm.weight", d);
  random("mm.input_projection.weight", GgmlType::F16, {spec.text_dim, d}, inv_sqrt(d));
  w.write(path);
}

}  // namespace pagoda
