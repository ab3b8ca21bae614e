// tools/synth_mmproj.h: small Gemma 3 and Gemma 4 (gemma4v) projectors read back with
// pagoda's GGUF reader (keys, tensor names, shapes and types as llama.cpp's clip loader reads
// them), and the specs it refuses.
#include "tools/synth_mmproj.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "temp_dir.h"

namespace pagoda {
namespace {

MmprojSpec tiny() {
  MmprojSpec s;
  s.image_size = 56, s.patch_size = 14, s.dim = 64, s.ffn_dim = 96, s.n_layers = 2, s.n_heads = 4;
  s.n_merge = 2, s.text_dim = 128;
  return s;
}

using TensorSpecs = std::map<std::string, std::pair<std::vector<int64_t>, GgmlType>>;

// The file holds exactly these tensors, each with its ggml dims and type.
void expect_exactly_these_tensors(const gguf::GgufFile& f, const TensorSpecs& want) {
  EXPECT_EQ(f.tensors().size(), want.size());
  for (const auto& [name, shape_type] : want) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, shape_type.first) << name;
    EXPECT_EQ(t->type, shape_type.second) << name;
  }
}

TEST(SynthMmproj, KeysTensorsShapesAndTypes) {
  test::TempDir dir("synth_mmproj");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/mmproj.gguf";
  write_synthetic_mmproj(tiny(), path);
  const gguf::GgufFile f = gguf::GgufFile::open(path);

  EXPECT_EQ(f.get_string("general.architecture"), "clip");
  EXPECT_EQ(f.get_string("general.type"), "mmproj");
  EXPECT_EQ(f.get_uint("general.file_type"), 1u);  // MOSTLY_F16
  EXPECT_EQ(f.get_string("clip.projector_type"), "gemma3");
  EXPECT_EQ(f.get_bool("clip.has_vision_encoder"), true);
  EXPECT_EQ(f.get_bool("clip.use_gelu"), true);
  EXPECT_EQ(f.get_uint("clip.vision.image_size"), 56u);
  EXPECT_EQ(f.get_uint("clip.vision.patch_size"), 14u);
  EXPECT_EQ(f.get_uint("clip.vision.embedding_length"), 64u);
  EXPECT_EQ(f.get_uint("clip.vision.feed_forward_length"), 96u);
  EXPECT_EQ(f.get_uint("clip.vision.block_count"), 2u);
  EXPECT_EQ(f.get_uint("clip.vision.attention.head_count"), 4u);
  EXPECT_EQ(f.get_uint("clip.vision.projection_dim"), 128u);
  EXPECT_EQ(f.get_uint("clip.vision.projector.scale_factor"), 2u);
  ASSERT_TRUE(f.get_float("clip.vision.attention.layer_norm_epsilon"));
  EXPECT_NEAR(*f.get_float("clip.vision.attention.layer_norm_epsilon"), 1e-6, 1e-12);
  for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
    const gguf::Array* a = f.get_array(key);
    ASSERT_NE(a, nullptr) << key;
    ASSERT_EQ(a->items.size(), 3u) << key;
    EXPECT_EQ(a->elem_type, gguf::ValueType::FLOAT32) << key;
    for (const auto& v : a->items) EXPECT_FLOAT_EQ(static_cast<float>(*v.as_double()), 0.5f) << key;
  }

  // name -> (ggml dims, type): every tensor, nothing else.
  TensorSpecs want = {
      {"v.patch_embd.weight", {{14, 14, 3, 64}, GgmlType::F32}},
      {"v.patch_embd.bias", {{64}, GgmlType::F32}},
      {"v.position_embd.weight", {{64, 16}, GgmlType::F32}},
      {"v.post_ln.weight", {{64}, GgmlType::F32}},
      {"v.post_ln.bias", {{64}, GgmlType::F32}},
      {"mm.soft_emb_norm.weight", {{64}, GgmlType::F32}},
      {"mm.input_projection.weight", {{128, 64}, GgmlType::F16}},
  };
  for (int l = 0; l < 2; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    for (const char* n : {"ln1", "ln2"}) {
      want[b + n + ".weight"] = {{64}, GgmlType::F32};
      want[b + n + ".bias"] = {{64}, GgmlType::F32};
    }
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      want[b + m + ".weight"] = {{64, 64}, GgmlType::F16};
      want[b + m + ".bias"] = {{64}, GgmlType::F32};
    }
    // ffn_down's ne0 is the FFN width: llama.cpp would swap a file whose ffn_down ne0 == dim.
    want[b + "ffn_up.weight"] = {{64, 96}, GgmlType::F16};
    want[b + "ffn_up.bias"] = {{96}, GgmlType::F32};
    want[b + "ffn_down.weight"] = {{96, 64}, GgmlType::F16};
    want[b + "ffn_down.bias"] = {{64}, GgmlType::F32};
  }
  expect_exactly_these_tensors(f, want);
  // Norm weights near 1, not all equal; finite random matrices.
  const gguf::TensorInfo* norm = f.find_tensor("mm.soft_emb_norm.weight");
  const auto* w = reinterpret_cast<const float*>(norm->data);
  bool differ = false;
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(w[i], 1.0f, 0.1001f);
    differ |= w[i] != w[0];
  }
  EXPECT_TRUE(differ);
}

TEST(SynthMmproj, DefaultMergeWritesNoScaleFactorAndSeedsDiffer) {
  test::TempDir dir("synth_mmproj");
  std::filesystem::create_directories(dir.path);
  MmprojSpec s = tiny();
  s.image_size = 112, s.n_merge = 4, s.type = GgmlType::F32;  // 8 patches per side
  write_synthetic_mmproj(s, dir.path + "/a.gguf");
  s.seed = 2;
  write_synthetic_mmproj(s, dir.path + "/b.gguf");
  const gguf::GgufFile a = gguf::GgufFile::open(dir.path + "/a.gguf");
  const gguf::GgufFile b = gguf::GgufFile::open(dir.path + "/b.gguf");
  EXPECT_FALSE(a.get_uint("clip.vision.projector.scale_factor"));
  EXPECT_EQ(a.get_uint("general.file_type"), 0u);  // ALL_F32
  EXPECT_EQ(a.find_tensor("v.blk.0.attn_q.weight")->type, GgmlType::F32);
  EXPECT_EQ(a.find_tensor("mm.input_projection.weight")->type, GgmlType::F16);  // forced, as the converter
  EXPECT_EQ(a.find_tensor("v.position_embd.weight")->dims, (std::vector<int64_t>{64, 64}));
  const auto* wa = reinterpret_cast<const float*>(a.find_tensor("v.blk.1.attn_v.weight")->data);
  const auto* wb = reinterpret_cast<const float*>(b.find_tensor("v.blk.1.attn_v.weight")->data);
  EXPECT_NE(wa[0], wb[0]);
  // Projections scaled 1/sqrt(fan_in): the std of a 64-wide matrix near 1/8.
  double ss = 0;
  for (int i = 0; i < 64 * 64; ++i) ss += static_cast<double>(wa[i]) * wa[i];
  EXPECT_NEAR(std::sqrt(ss / (64 * 64)), 0.125, 0.01);
}

TEST(SynthMmproj, BadSpecsThrow) {
  test::TempDir dir("synth_mmproj");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/bad.gguf";
  auto expect_throw = [&](MmprojSpec s, const std::string& what) {
    EXPECT_THROW(write_synthetic_mmproj(s, path), Error) << what;
    EXPECT_FALSE(std::filesystem::exists(path)) << what;
  };
  MmprojSpec s = tiny();
  s.image_size = 60;  // not a multiple of 14
  expect_throw(s, "image size");
  s = tiny(), s.n_merge = 3;  // 4 patches per side
  expect_throw(s, "merge");
  s = tiny(), s.n_heads = 5;
  expect_throw(s, "heads");
  s = tiny(), s.text_dim = 0;
  expect_throw(s, "text_dim");
  s = tiny(), s.n_layers = 0;
  expect_throw(s, "layers");
  s = tiny(), s.projector = "qwen2vl";
  expect_throw(s, "projector");
  s = tiny(), s.type = GgmlType::Q4_0, s.ffn_dim = 48;  // 48 not a multiple of 32
  expect_throw(s, "block");
  EXPECT_THROW(write_synthetic_mmproj(tiny(), dir.path + "/no/such/dir/x.gguf"), Error);
}

MmprojSpec tiny4() {
  MmprojSpec s = gemma4v_mmproj_spec();
  s.dim = 64, s.ffn_dim = 96, s.n_layers = 2, s.n_heads = 4, s.n_merge = 2, s.pos_size = 40, s.text_dim = 128;
  return s;
}

TEST(SynthMmproj, Gemma4vKeysTensorsShapesAndTypes) {
  test::TempDir dir("synth_mmproj");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/mmproj.gguf";
  write_synthetic_mmproj(tiny4(), path);
  const gguf::GgufFile f = gguf::GgufFile::open(path);

  EXPECT_EQ(f.get_string("general.architecture"), "clip");
  EXPECT_EQ(f.get_string("clip.vision.projector_type"), "gemma4v");
  EXPECT_FALSE(f.get_string("clip.projector_type"));
  EXPECT_FALSE(f.get_bool("clip.use_gelu"));  // as the converter: llama.cpp's gelu_quick
  EXPECT_EQ(f.get_uint("clip.vision.image_size"), 224u);
  EXPECT_EQ(f.get_uint("clip.vision.patch_size"), 16u);
  EXPECT_EQ(f.get_uint("clip.vision.embedding_length"), 64u);
  EXPECT_EQ(f.get_uint("clip.vision.feed_forward_length"), 96u);
  EXPECT_EQ(f.get_uint("clip.vision.block_count"), 2u);
  EXPECT_EQ(f.get_uint("clip.vision.attention.head_count"), 4u);
  EXPECT_EQ(f.get_uint("clip.vision.projection_dim"), 128u);
  EXPECT_EQ(f.get_uint("clip.vision.projector.scale_factor"), 2u);
  for (const auto& [key, want] : {std::pair{"clip.vision.image_mean", 0.0f}, std::pair{"clip.vision.image_std", 1.0f}}) {
    const gguf::Array* a = f.get_array(key);
    ASSERT_NE(a, nullptr) << key;
    ASSERT_EQ(a->items.size(), 3u) << key;
    for (const auto& v : a->items) EXPECT_FLOAT_EQ(static_cast<float>(*v.as_double()), want) << key;
  }

  TensorSpecs want = {
      {"v.patch_embd.weight", {{16, 16, 3, 64}, GgmlType::F32}},
      {"v.position_embd.weight", {{64, 40, 2}, GgmlType::F32}},
      {"v.std_bias", {{64}, GgmlType::F32}},
      {"v.std_scale", {{64}, GgmlType::F32}},
      {"mm.input_projection.weight", {{64, 128}, GgmlType::F16}},
  };
  for (int l = 0; l < 2; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    for (const char* n : {"ln1", "ln2", "attn_post_norm", "ffn_post_norm"}) want[b + n + ".weight"] = {{64}, GgmlType::F32};
    for (const char* n : {"attn_q_norm", "attn_k_norm"}) want[b + n + ".weight"] = {{16}, GgmlType::F32};
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) want[b + m + ".weight"] = {{64, 64}, GgmlType::F16};
    want[b + "ffn_gate.weight"] = {{64, 96}, GgmlType::F16};
    want[b + "ffn_up.weight"] = {{64, 96}, GgmlType::F16};
    want[b + "ffn_down.weight"] = {{96, 64}, GgmlType::F16};
    want[b + "out_scale.weight"] = {{1}, GgmlType::F32};
    for (const char* m : {"attn_q", "attn_k", "attn_v", "ffn_down"})
      for (const char* c : {"input_min", "input_max", "output_min", "output_max"})
        want[b + m + "." + c] = {{1}, GgmlType::F32};
  }
  expect_exactly_these_tensors(f, want);
  auto scalar = [&](const std::string& name) { return *reinterpret_cast<const float*>(f.find_tensor(name)->data); };
  EXPECT_LT(scalar("v.blk.1.attn_q.input_min"), 0.0f);
  // q, k and v read the same rows and share their input bounds (llama.cpp's in-place clamp
  // makes q's reach k and v: synth_mmproj.cpp), not their output bounds.
  for (const char* m : {"attn_k", "attn_v"}) {
    EXPECT_EQ(scalar(std::string("v.blk.1.") + m + ".input_min"), scalar("v.blk.1.attn_q.input_min")) << m;
    EXPECT_EQ(scalar(std::string("v.blk.1.") + m + ".input_max"), scalar("v.blk.1.attn_q.input_max")) << m;
    EXPECT_NE(scalar(std::string("v.blk.1.") + m + ".output_min"), scalar("v.blk.1.attn_q.output_min")) << m;
  }
  EXPECT_GT(scalar("v.blk.1.attn_q.input_max"), 0.0f);
  EXPECT_LT(scalar("v.blk.0.ffn_down.output_min"), scalar("v.blk.0.ffn_down.output_max"));
  EXPECT_NE(scalar("v.blk.0.attn_q.input_min"), -scalar("v.blk.0.attn_q.input_max"));  // asymmetric
}

TEST(SynthMmproj, Gemma4vDefaultsOptionalTensorsAndRefusals) {
  test::TempDir dir("synth_mmproj");
  std::filesystem::create_directories(dir.path);
  const MmprojSpec d = gemma4v_mmproj_spec();
  EXPECT_EQ(d.dim, 768);
  EXPECT_EQ(d.n_layers, 16);
  EXPECT_EQ(d.n_heads, 12);
  EXPECT_EQ(d.ffn_dim, 3072);
  EXPECT_EQ(d.patch_size, 16);
  EXPECT_EQ(d.n_merge, 3);
  EXPECT_EQ(d.pos_size, 10240);

  MmprojSpec s = tiny4();
  s.n_merge = 3, s.std_scale = false, s.clamps = false;
  write_synthetic_mmproj(s, dir.path + "/a.gguf");
  const gguf::GgufFile a = gguf::GgufFile::open(dir.path + "/a.gguf");
  EXPECT_FALSE(a.get_uint("clip.vision.projector.scale_factor"));  // llama.cpp's default 3
  EXPECT_EQ(a.find_tensor("v.std_bias"), nullptr);
  EXPECT_EQ(a.find_tensor("v.blk.0.attn_q.input_max"), nullptr);
  EXPECT_EQ(a.tensors().size(), 3u + 2u * 14u);  // per layer: 4 norms, 2 head norms, 7 matrices, out_scale

  auto expect_throw = [&](MmprojSpec bad, const std::string& what) {
    EXPECT_THROW(write_synthetic_mmproj(bad, dir.path + "/bad.gguf"), Error) << what;
  };
  s = tiny4(), s.n_heads = 8;  // head width 8: fine
  EXPECT_NO_THROW(check_mmproj_spec(s));
  s = tiny4(), s.dim = 72, s.n_heads = 12;  // head width 6: the 2-D RoPE needs a multiple of 4
  expect_throw(s, "head width");
  s = tiny4(), s.pos_size = 0;
  expect_throw(s, "pos_size");
  s = tiny4(), s.image_size = 100;  // unused by gemma4v: no multiple of the patch needed
  EXPECT_NO_THROW(check_mmproj_spec(s));
}

// Qwen 3.5's projector as llama.cpp's converter writes qwen3vl_merger: the keys its loader
// reads, both temporal patch slices, a square position grid, fused biased qkv, the merger.
TEST(SynthMmproj, Qwen3vlKeysTensorsShapesAndTypes) {
  test::TempDir dir("synth_mmproj_qwen");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/mmproj.gguf";
  MmprojSpec spec = qwen3vl_mmproj_spec();
  spec.image_size = 48, spec.dim = 64, spec.ffn_dim = 96, spec.n_layers = 2, spec.n_heads = 4, spec.text_dim = 128;
  write_synthetic_mmproj(spec, path);
  const gguf::GgufFile f = gguf::GgufFile::open(path);
  EXPECT_EQ(f.get_string("clip.projector_type"), "qwen3vl_merger");
  EXPECT_EQ(f.get_bool("clip.use_gelu"), true);
  EXPECT_EQ(f.get_uint("clip.vision.spatial_merge_size"), 2u);
  EXPECT_EQ(f.get_uint("clip.vision.image_size"), 48u);
  EXPECT_EQ(f.get_uint("clip.vision.projection_dim"), 128u);
  EXPECT_FALSE(f.get_uint("clip.vision.projector.scale_factor"));
  TensorSpecs want = {
      {"v.patch_embd.weight", {{16, 16, 3, 64}, GgmlType::F32}},
      {"v.patch_embd.weight.1", {{16, 16, 3, 64}, GgmlType::F32}},
      {"v.patch_embd.bias", {{64}, GgmlType::F32}},
      {"v.position_embd.weight", {{64, 9}, GgmlType::F32}},  // a 3 x 3 grid (48 / 16)
      {"v.post_ln.weight", {{64}, GgmlType::F32}},
      {"v.post_ln.bias", {{64}, GgmlType::F32}},
      {"mm.0.weight", {{256, 256}, GgmlType::F16}},
      {"mm.0.bias", {{256}, GgmlType::F32}},
      {"mm.2.weight", {{256, 128}, GgmlType::F16}},
      {"mm.2.bias", {{128}, GgmlType::F32}},
  };
  for (int l = 0; l < 2; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    for (const char* n : {"ln1", "ln2"}) {
      want[b + n + ".weight"] = {{64}, GgmlType::F32};
      want[b + n + ".bias"] = {{64}, GgmlType::F32};
    }
    want[b + "attn_qkv.weight"] = {{64, 192}, GgmlType::F16};
    want[b + "attn_qkv.bias"] = {{192}, GgmlType::F32};
    want[b + "attn_out.weight"] = {{64, 64}, GgmlType::F16};
    want[b + "attn_out.bias"] = {{64}, GgmlType::F32};
    want[b + "ffn_up.weight"] = {{64, 96}, GgmlType::F16};
    want[b + "ffn_up.bias"] = {{96}, GgmlType::F32};
    want[b + "ffn_down.weight"] = {{96, 64}, GgmlType::F16};
    want[b + "ffn_down.bias"] = {{64}, GgmlType::F32};
  }
  expect_exactly_these_tensors(f, want);
  spec.n_merge = 3;
  EXPECT_THROW(write_synthetic_mmproj(spec, path), Error);  // the merger is 2 x 2
}

}  // namespace
}  // namespace pagoda
