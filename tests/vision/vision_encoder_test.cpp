// vision/vision_encoder.h: a synthetic Gemma 3 projector (tools/synth_mmproj.h) encoded by
// pagoda and by the independent numpy reference (tests/vision/siglip_numpy.py, float64),
// for F32 and F16 matrices; and the projector files load() refuses.
#include "vision/vision_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "temp_dir.h"
#include "tools/synth_mmproj.h"

namespace pagoda {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

MmprojSpec tiny(GgmlType type) {
  MmprojSpec s;
  s.image_size = 56, s.patch_size = 14, s.dim = 64, s.ffn_dim = 96, s.n_layers = 2, s.n_heads = 4;
  s.n_merge = 2, s.text_dim = 48, s.type = type, s.seed = 3;
  return s;
}

std::unique_ptr<VisionEncoder> load_encoder(const std::string& path) {
  return VisionEncoder::load(std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path)));
}

// [3][height][width] pixels drawn uniformly from [lo, hi) (default: normalized pixels).
std::vector<float> random_pixels(int64_t width, int64_t height, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> p(static_cast<size_t>(3 * width * height));
  for (float& x : p) x = u(rng);
  return p;
}

bool have_numpy() {
  return std::filesystem::exists(kPython) &&
         std::system((std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0;
}

// Runs a numpy reference script on raw f32 pixels (args between the pixels and the output
// file: none for siglip_numpy.py, "H W" for gemma4v_numpy.py); its f32 output.
std::vector<float> numpy_reference(const std::string& script, const std::string& mmproj,
                                   const std::vector<float>& pixels, const std::string& args, const std::string& dir) {
  const std::string in = dir + "/pixels.f32", out = dir + "/out.f32";
  std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(pixels.data()),
                                            static_cast<std::streamsize>(pixels.size() * sizeof(float)));
  const std::string cmd = std::string(kPython) + " " + PAGODA_SOURCE_DIR + "/tests/vision/" + script + " " + mmproj +
                          " " + in + (args.empty() ? "" : " " + args) + " " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary | std::ios::ate);
  std::vector<float> r(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(r.data()), static_cast<std::streamsize>(r.size() * sizeof(float)));
  return r;
}

// sqrt(sum (got - want)^2 / sum want^2); the sizes must match.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

TEST(VisionEncoder, ReadsTheProjectorsShape) {
  test::TempDir dir("vision_shape");
  std::filesystem::create_directories(dir.path);
  write_synthetic_mmproj(tiny(GgmlType::F16), dir.path + "/p.gguf");
  auto e = load_encoder(dir.path + "/p.gguf");
  const VisionConfig& c = e->config();
  EXPECT_EQ(c.projector_name, "gemma3");
  EXPECT_EQ(c.image_size, 56);
  EXPECT_EQ(c.n_patches(), 16);
  EXPECT_EQ(e->tokens_per_image(), 4);  // 4 x 4 patches pooled 2 x 2
  EXPECT_EQ(c.text_dim, 48);
  EXPECT_EQ(c.activation, VisionActivation::Gelu);
  EXPECT_EQ(e->image_begin_text(), "<start_of_image>");
}

// The whole encoder against float64 numpy (relative RMS error; measured on an AMX Xeon:
// 2.2e-4 with f32 matrices, 1.7e-4 with f16 — the attention products take K and V as f16,
// as llama.cpp's attention does; with f32 K and V it was 2.1e-7): bounded at 10x that.
TEST(VisionEncoder, MatchesTheNumpyReference) {
  if (!have_numpy()) GTEST_SKIP() << "no /usr/bin/python3 with numpy";
  for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    test::TempDir dir("vision_numpy");
    std::filesystem::create_directories(dir.path);
    const std::string path = dir.path + "/p.gguf";
    write_synthetic_mmproj(tiny(type), path);
    auto e = load_encoder(path);
    const std::vector<float> pixels = random_pixels(56, 56, 7);
    ThreadPool pool(2);
    std::vector<float> got;
    e->encode(pixels.data(), pool, got);
    const std::vector<float> want = numpy_reference("siglip_numpy.py", path, pixels, "", dir.path);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 4u * 48u);
    double err = 0, norm = 0, max_abs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    const double rel = std::sqrt(err / norm);
    std::printf("%s: relative error %.3g, max abs %.3g\n", type_name(type), rel, max_abs);
    EXPECT_LT(rel, 2e-3) << type_name(type) << " max abs " << max_abs;
    // A second encode of the same pixels (scratch reused) gives the same rows.
    std::vector<float> again;
    e->encode(pixels.data(), pool, again);
    EXPECT_EQ(again, got);
  }
}

MmprojSpec tiny_gemma4v() {
  MmprojSpec s = gemma4v_mmproj_spec();
  s.dim = 64, s.ffn_dim = 96, s.n_layers = 2, s.n_heads = 4, s.pos_size = 16, s.text_dim = 48, s.seed = 5;
  return s;
}

// Gemma 4's projector (2-D RoPE, position tables, clamps, std scaling, gated MLP) on a
// non-square input against its float64 numpy reference (tests/vision/gemma4v_numpy.py).
// Measured 9.7e-4 relative (8.0e-4 with f32 matrices): unscaled attention over unit-norm
// q and k has scores of ~head_dim, where the f16 K and V of the attention products weigh
// more than in Gemma 3's scaled attention.
TEST(VisionEncoder, Gemma4vMatchesTheNumpyReference) {
  if (!have_numpy()) GTEST_SKIP() << "no /usr/bin/python3 with numpy";
  test::TempDir dir("vision_g4_numpy");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/p.gguf";
  write_synthetic_mmproj(tiny_gemma4v(), path);
  auto e = load_encoder(path);
  EXPECT_EQ(e->config().projector, VisionProjector::Gemma4V);
  EXPECT_EQ(e->image_begin_text(), "<|image>");
  // 4 x 2 pooled tokens: 12 x 6 patches of 16 px.
  const int64_t w = 192, h = 96;
  EXPECT_EQ(e->tokens_for(w, h), 8);
  const std::vector<float> pixels = random_pixels(w, h, 11, 0.0f, 1.0f);  // x / 255 (mean 0, std 1)
  ThreadPool pool(2);
  std::vector<float> got;
  e->encode(pixels.data(), w, h, pool, got);
  const std::vector<float> want =
      numpy_reference("gemma4v_numpy.py", path, pixels, std::to_string(h) + " " + std::to_string(w), dir.path);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), 8u * 48u);
  const double rel = relative_error(got, want);
  std::printf("gemma4v: relative error %.3g\n", rel);
  EXPECT_LT(rel, 2e-3);
}

// llama.cpp's calc_size_preserved_ratio for gemma4v (patch 16, pool 3: sides by 48, 40..280
// tokens): values worked by hand from its rule.
TEST(VisionEncoder, Gemma4vFitsImagesAsLlamaCppDoes) {
  test::TempDir dir("vision_g4_size");
  std::filesystem::create_directories(dir.path);
  write_synthetic_mmproj(tiny_gemma4v(), dir.path + "/p.gguf");
  auto e = load_encoder(dir.path + "/p.gguf");
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(e->input_size(336, 336), P(336, 336));  // 7 x 7 = 49 tokens: kept
  EXPECT_EQ(e->input_size(400, 300), P(384, 288));  // rounded to 48s: 8 x 6 = 48 tokens
  EXPECT_EQ(e->input_size(100, 100), P(336, 336));  // 2 x 2 = 4 < 40 tokens: scaled up, ceil
  EXPECT_EQ(e->input_size(4000, 3000), P(912, 672));  // 84 x 63 > 280 tokens: scaled down, floor
  for (auto [w, h] : {P(1, 1), P(5000, 20), P(20, 5000), P(1024, 768)}) {
    const auto [iw, ih] = e->input_size(w, h);
    EXPECT_EQ(iw % 48, 0);
    EXPECT_EQ(ih % 48, 0);
    EXPECT_LE(e->tokens_for(iw, ih), 280 + 20) << w << "x" << h;  // the floor rule may not reach 280 exactly
  }
}

MmprojSpec tiny_qwen3vl() {
  MmprojSpec s = qwen3vl_mmproj_spec();
  s.image_size = 48, s.dim = 64, s.ffn_dim = 96, s.n_layers = 2, s.n_heads = 4, s.text_dim = 48, s.seed = 9;
  return s;
}

// Qwen 3.5's projector (summed temporal slices, a 3 x 3 position grid resized to the
// image's 4 x 6 patches, 2-D RoPE in block order, the 2 x 2 merger) on a non-square input
// against its float64 numpy reference (tests/vision/qwen3vl_numpy.py), which runs the
// patches in raster order.
TEST(VisionEncoder, Qwen3vlMatchesTheNumpyReference) {
  if (!have_numpy()) GTEST_SKIP() << "no /usr/bin/python3 with numpy";
  for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    test::TempDir dir("vision_qw_numpy");
    std::filesystem::create_directories(dir.path);
    const std::string path = dir.path + "/p.gguf";
    MmprojSpec spec = tiny_qwen3vl();
    spec.type = type;
    write_synthetic_mmproj(spec, path);
    auto e = load_encoder(path);
    EXPECT_EQ(e->config().projector, VisionProjector::Qwen3VL);
    EXPECT_EQ(e->image_begin_text(), "<|vision_start|>");
    EXPECT_EQ(e->image_end_text(), "<|vision_end|>");
    EXPECT_FALSE(e->bidirectional_image_tokens());
    EXPECT_TRUE(e->uses_mrope());
    const int64_t w = 64, h = 96;  // 4 x 6 patches of 16 px: 2 x 3 merged tokens
    EXPECT_EQ(e->tokens_for(w, h), 6);
    EXPECT_EQ(e->tokens_grid(w, h), (std::pair<int64_t, int64_t>(2, 3)));
    const std::vector<float> pixels = random_pixels(w, h, 13);
    ThreadPool pool(2);
    std::vector<float> got;
    e->encode(pixels.data(), w, h, pool, got);
    const std::vector<float> want =
        numpy_reference("qwen3vl_numpy.py", path, pixels, std::to_string(h) + " " + std::to_string(w), dir.path);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 6u * 48u);
    const double rel = relative_error(got, want);
    std::printf("qwen3vl_merger %s: relative error %.3g\n", type_name(type), rel);
    EXPECT_LT(rel, 2e-3) << type_name(type);
  }
}

// llama.cpp's calc_size_preserved_ratio for the Qwen-VL limits (patch 16, merge 2: sides by
// 32, 8..4096 tokens), worked by hand.
TEST(VisionEncoder, Qwen3vlFitsImagesAsLlamaCppDoes) {
  test::TempDir dir("vision_qw_size");
  std::filesystem::create_directories(dir.path);
  write_synthetic_mmproj(tiny_qwen3vl(), dir.path + "/p.gguf");
  auto e = load_encoder(dir.path + "/p.gguf");
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(e->input_size(64, 64), P(96, 96));      // 4 < 8 tokens: sqrt(2) up, ceil to 32s
  EXPECT_EQ(e->input_size(1000, 500), P(992, 512));  // rounded to 32s: 31 x 16 = 496 tokens
  EXPECT_EQ(e->input_size(4000, 4000), P(2048, 2048));  // 125² > 4096 tokens: down, floor
  EXPECT_EQ(e->tokens_for(2048, 2048), 4096);
}

// A Qwen3-VL projector with deepstack layers is refused by name (no language model here
// takes their rows).
TEST(VisionEncoder, Qwen3vlRefusesDeepstackLayers) {
  test::TempDir dir("vision_qw_deep");
  std::filesystem::create_directories(dir.path);
  const std::string good = dir.path + "/p.gguf", bad = dir.path + "/deep.gguf";
  write_synthetic_mmproj(tiny_qwen3vl(), good);
  const gguf::GgufFile f = gguf::GgufFile::open(good);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const gguf::TensorInfo& t : f.tensors())
    w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  const std::vector<float> fc1(64 * 4 * 64, 0.0f);
  w.add_tensor_f32("v.deepstack.0.fc1.weight", GgmlType::F32, {4 * 64, 64}, fc1.data());
  w.write(bad);
  try {
    load_encoder(bad);
    ADD_FAILURE() << "loaded a deepstack projector";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("deepstack"), std::string::npos) << err.what();
  }
}

// The good file rewritten with one key set (or a tensor dropped).
void rewrite(const std::string& from, const std::string& to, const std::string& key, const gguf::Value* value,
             const std::string& drop_tensor = "") {
  const gguf::GgufFile f = gguf::GgufFile::open(from);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, k == key && value ? *value : v);
  for (const gguf::TensorInfo& t : f.tensors())
    if (t.name != drop_tensor) w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  w.write(to);
}

TEST(VisionEncoder, RefusesFilesThatAreNotItsProjectorWithTheReason) {
  test::TempDir dir("vision_bad");
  std::filesystem::create_directories(dir.path);
  const std::string good = dir.path + "/p.gguf", bad = dir.path + "/bad.gguf";
  write_synthetic_mmproj(tiny(GgmlType::F16), good);
  auto expect_error = [&](const std::string& needle) {
    try {
      load_encoder(bad);
      ADD_FAILURE() << "loaded a file that should fail with: " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  const gguf::Value llama = gguf::Value::str("llama"), qwen2 = gguf::Value::str("qwen2vl_merger"),
                    odd = gguf::Value::u32(50), zero = gguf::Value::u32(0);
  rewrite(good, bad, "general.architecture", &llama);
  expect_error("not a projector file");
  rewrite(good, bad, "clip.projector_type", &qwen2);
  expect_error("\"qwen2vl_merger\" is not supported");
  rewrite(good, bad, "clip.vision.image_size", &odd);
  expect_error("not a whole number of 14-pixel patches");
  rewrite(good, bad, "clip.vision.attention.head_count", &zero);
  expect_error("clip.vision.attention.head_count = 0 is out of range");
  rewrite(good, bad, "", nullptr, "v.blk.1.attn_q.weight");
  expect_error("v.blk.1.attn_q.weight is missing");
  // Truncated: the GGUF reader refuses it.
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  EXPECT_THROW(load_encoder(bad), Error);
}

}  // namespace
}  // namespace pagoda
