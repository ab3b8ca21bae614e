// M-RoPE image positions (Qwen 3.5's projector: ImageSpan::grid_x / grid_y): the positions
// the engine gives each row (worked by hand from llama.cpp's mtmd rule), the model's
// interleaved multi-section RoPE on image rows against the float64 numpy reference
// (tests/model/qwen35_mrope_numpy.py over tests/model/qwen35_numpy.py), and prefill chunks
// that cut an image (Qwen's image tokens are causal) giving the same tokens as one chunk.
#include "engine_harness.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

using namespace engine_test;

constexpr const char* kPython = "/usr/bin/python3";

ImageSpan grid_image(int64_t offset, int64_t gx, int64_t gy, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ImageSpan im;
  im.offset = offset;
  im.n_tokens = gx * gy;
  im.grid_x = gx;
  im.grid_y = gy;
  im.bidirectional = false;
  auto rows = std::make_shared<std::vector<float>>(static_cast<size_t>(im.n_tokens * dim));
  for (float& x : *rows) x = nd(rng);
  im.embeddings = rows;
  return im;
}

TEST(MropePositions, FollowLlamaCppsImageLayout) {
  std::vector<ImageSpan> images;
  images.push_back(grid_image(5, 4, 3, 1, 1));   // 12 tokens, advances t by max(4, 3) = 4
  images.push_back(grid_image(20, 2, 2, 1, 2));  // 4 tokens, advances t by 2
  using P = std::array<int64_t, 3>;
  EXPECT_EQ(mrope_position(images, 3), (P{3, 3, 3}));
  EXPECT_EQ(mrope_position(images, 5), (P{5, 5, 5}));     // the first image token
  EXPECT_EQ(mrope_position(images, 12), (P{5, 6, 8}));    // i = 7: row 1, column 3
  EXPECT_EQ(mrope_position(images, 16), (P{5, 7, 8}));    // the last: row 2, column 3
  EXPECT_EQ(mrope_position(images, 17), (P{9, 9, 9}));    // 12 tokens took 4 positions
  EXPECT_EQ(mrope_position(images, 19), (P{11, 11, 11}));
  EXPECT_EQ(mrope_position(images, 23), (P{12, 13, 13}));  // second image, i = 3
  EXPECT_EQ(mrope_position(images, 24), (P{14, 14, 14}));  // 8 + 2 saved
  EXPECT_EQ(mrope_position({}, 7), (P{7, 7, 7}));
}

Loaded load_qwen35_tiny() {
  SynthSpec s;
  s.arch = "qwen35";
  s = resolved_for_row(s, /*tiny_shape=*/true);
  s.n_vocab = 256;
  s.ctx_len = 512;
  s.seed = 17;
  return load_synth_spec(s, "qwen35_mrope");
}

// text(6) + a 3 x 2 image + text(5), the image's rows fed at M-RoPE positions, every row's
// logits against numpy's; and the same rows at plain positions differ (the positions count).
TEST(MropeModel, ImageRowsAtMropePositionsMatchTheNumpyReference) {
  if (!std::filesystem::exists(kPython) ||
      std::system((std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no /usr/bin/python3 with numpy";
  const Loaded l = load_qwen35_tiny();
  const Model& m = *l.model;
  const ModelConfig& c = m.config();
  ASSERT_FALSE(c.rope_sections.empty());
  const int64_t dim = c.dim;
  const std::vector<int32_t> head = random_tokens(6, 256, 1), tail = random_tokens(5, 256, 2);
  std::vector<ImageSpan> images{grid_image(6, 3, 2, dim, 3)};
  const int64_t T = 6 + 6 + 5;
  auto run = [&](bool mrope) {
    KvConfig k;
    k.block_size = kBlock;
    k.budget_bytes = 64ull << 20;
    k.k_type = k.v_type = KvType::F32;  // the reference keeps K / V in float64
    PagedKvPool pool(KvGeometry{c.n_attention_layers(), c.n_kv_heads, c.head_dim}, k);
    PagedKvStore store(pool);
    configure_recurrent_states(c, store.recurrent_states());
    EXPECT_TRUE(store.reserve(0, T).ok());
    ThreadPool threads(2);
    Batch b;
    for (int64_t t = 0; t < T; ++t) {
      if (t >= 6 && t < 12)
        b.add_embedded(-1, images[0].embeddings->data() + (t - 6) * dim, t, 0, 0, true);
      else
        b.add(t < 6 ? head[static_cast<size_t>(t)] : tail[static_cast<size_t>(t - 12)], t, 0, true);
    }
    if (mrope)
      for (int64_t t = 0; t < T; ++t) b.mrope.push_back(mrope_position(images, t));
    std::vector<float> logits;
    const_cast<Model&>(m).forward(b, store, threads, logits);
    return logits;
  };
  const std::vector<float> got = run(true), plain = run(false);
  ASSERT_EQ(got.size(), static_cast<size_t>(T * c.n_vocab));
  // The reference's input: tokens (-1 for a fed row), rows, positions.
  nlohmann::json spec;
  spec["tokens"] = nlohmann::json::array();
  spec["rows"] = nlohmann::json::array();
  spec["mrope"] = nlohmann::json::array();
  for (int64_t t = 0; t < T; ++t) {
    const bool img = t >= 6 && t < 12;
    spec["tokens"].push_back(img ? -1 : t < 6 ? head[static_cast<size_t>(t)] : tail[static_cast<size_t>(t - 12)]);
    if (img) {
      const float* r = images[0].embeddings->data() + (t - 6) * dim;
      spec["rows"].push_back(std::vector<float>(r, r + dim));
    } else {
      spec["rows"].push_back(nullptr);
    }
    const auto p = mrope_position(images, t);
    spec["mrope"].push_back({p[0], p[1], p[2]});
  }
  const std::string dir = std::filesystem::temp_directory_path() / ("pagoda_mrope_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/in.json") << spec.dump();
  const std::string cmd = std::string(kPython) + " " + PAGODA_SOURCE_DIR + "/tests/model/qwen35_mrope_numpy.py " +
                          l.file->path() + " " + dir + "/in.json " + dir + "/out.f32";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dir + "/out.f32", std::ios::binary | std::ios::ate);
  std::vector<float> want(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(want.size(), got.size());
  double max_logit = 0, err = 0, moved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_logit = std::max(max_logit, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    moved = std::max(moved, std::fabs(static_cast<double>(plain[i]) - want[i]));
  }
  std::printf("M-RoPE logits: max error %.3g of max logit %.3g; plain positions off by %.3g\n", err, max_logit, moved);
  EXPECT_LT(err, 1e-4 * max_logit);          // f32 weights: the forward pass's F32 bound
  EXPECT_GT(moved, 100 * 1e-4 * max_logit);  // the positions matter
}

// Qwen's image tokens are causal: a prefill chunk may end inside the image. Chunks of 8
// (cutting the 12-token image twice) give the tokens and log-probabilities one chunk does.
TEST(MropeModel, ChunksCuttingAnImageGiveTheSameTokens) {
  const Loaded l = load_qwen35_tiny();
  const Model& m = *l.model;
  const int64_t dim = m.config().dim;
  std::vector<int32_t> prompt = random_tokens(10, 256, 4);
  for (int64_t i = 0; i < 12; ++i) prompt.push_back(-100 - static_cast<int32_t>(i));
  const std::vector<int32_t> tail = random_tokens(7, 256, 5);
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  Request r = greedy(prompt, 6);
  r.images.push_back(grid_image(10, 4, 3, dim, 6));
  auto config = [&](int64_t max_batch) {
    EngineConfig c = engine_config(m, 1, 64, false, max_batch);
    c.kv.budget_bytes = 64ull << 20;
    return c;
  };
  const RunResult one = run_all(const_cast<Model&>(m), nullptr, config(512), {r});
  const RunResult chunked = run_all(const_cast<Model&>(m), nullptr, config(8), {r});
  ASSERT_EQ(one.tokens[0].size(), 6u);
  EXPECT_EQ(one.tokens[0], chunked.tokens[0]);
  ASSERT_EQ(one.logprobs[0].size(), chunked.logprobs[0].size());
  for (size_t i = 0; i < one.logprobs[0].size(); ++i) EXPECT_NEAR(one.logprobs[0][i], chunked.logprobs[0][i], 1e-4f);
  // Without the grid (plain positions) the answer differs: the engine did apply them.
  Request plain = r;
  plain.images[0].grid_x = plain.images[0].grid_y = 0;
  const RunResult p = run_all(const_cast<Model&>(m), nullptr, config(512), {plain});
  EXPECT_NE(p.logprobs[0], one.logprobs[0]);
}

TEST(MropeModel, BadGridsAreRefused) {
  const Loaded l = load_qwen35_tiny();
  const int64_t dim = l.model->config().dim;
  EngineConfig c = engine_config(*l.model, 1, 64, false, 64);
  c.kv.budget_bytes = 64ull << 20;
  Engine e(*l.model, nullptr, c);
  std::vector<int32_t> prompt = random_tokens(4, 256, 1);
  for (int64_t i = 0; i < 6; ++i) prompt.push_back(-10 - static_cast<int32_t>(i));
  Request r = greedy(prompt, 2);
  r.images.push_back(grid_image(4, 3, 2, dim, 1));
  r.images[0].grid_y = 3;  // 3 x 3 is not its 6 tokens
  const SubmitResult bad = e.submit(r, std::make_shared<RecordingSink>());
  EXPECT_EQ(bad.status, SubmitResult::Status::Invalid);
  EXPECT_NE(bad.message.find("grid"), std::string::npos) << bad.message;
  // A grid on a model without RoPE sections (llama): refused, not run at plain positions.
  const Loaded llama = load_synth();
  Engine e2(*llama.model, nullptr, engine_config(*llama.model, 1, 64, false, 64));
  Request r2 = greedy(prompt, 2);
  r2.images.push_back(grid_image(4, 3, 2, llama.model->config().dim, 1));
  const SubmitResult bad2 = e2.submit(r2, std::make_shared<RecordingSink>());
  EXPECT_EQ(bad2.status, SubmitResult::Status::Invalid);
  EXPECT_NE(bad2.message.find("M-RoPE"), std::string::npos) << bad2.message;
}

}  // namespace
}  // namespace pagoda
