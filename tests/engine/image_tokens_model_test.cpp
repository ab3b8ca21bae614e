// Images in the engine (Request::images) on a synthetic Gemma 3: rows fed from embeddings,
// bidirectional attention inside an image, prefill chunks that never cut an image, and the
// prefix cache keyed by the image's placeholder ids (same image: a hit past it; another
// image: nothing shared past its start).
#include "engine_harness.h"

#include <random>

namespace pagoda {
namespace {

using namespace engine_test;

constexpr int64_t kImageTokens = 24;

Loaded load_gemma3_small() {
  SynthSpec s;
  s.arch = "gemma3";
  s.dim = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_dim = 128;
  s.n_vocab = 256;
  s.ctx_len = 1024;
  s.sliding_window = 512;
  s.seed = 5;
  return load_synth_spec(s, "gemma3_images");
}

// An image: placeholder ids and rows drawn from `seed` (ids negative, as the server derives
// them from the pixels' hash).
ImageSpan image(int64_t offset, uint32_t seed, int64_t dim, bool bidirectional = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rows = std::make_shared<std::vector<float>>(static_cast<size_t>(kImageTokens * dim));
  for (float& x : *rows) x = nd(rng);
  ImageSpan im;
  im.offset = offset;
  im.n_tokens = kImageTokens;
  im.embeddings = rows;
  im.bidirectional = bidirectional;
  return im;
}

std::vector<int32_t> placeholders(uint32_t seed) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < kImageTokens; ++i) ids.push_back(-1 - static_cast<int32_t>((seed * 7919u + i) % 100000u));
  return ids;
}

// text(head) + image + text(tail), the image at offset head.size().
Request image_request(const std::vector<int32_t>& head, uint32_t image_seed, const std::vector<int32_t>& tail,
                      int64_t dim, bool bidirectional = true) {
  std::vector<int32_t> prompt = head;
  const std::vector<int32_t> ph = placeholders(image_seed);
  prompt.insert(prompt.end(), ph.begin(), ph.end());
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  Request r = greedy(prompt, 6);
  r.images.push_back(image(static_cast<int64_t>(head.size()), image_seed, dim, bidirectional));
  return r;
}

TEST(ImageTokens, ChunkingNeverCutsAnImageAndGivesTheSameTokens) {
  Loaded l = load_gemma3_small();
  const int64_t dim = l.model->config().dim;
  const Request r = image_request(random_tokens(20, 256, 1), 9, random_tokens(30, 256, 2), dim);
  // 512 tokens a step: one chunk. 32: the first chunk stops at the image (20), the second
  // holds the whole image (20..44 > 32 tokens from its start would have cut it at 52).
  const RunResult one = run_all(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 512), {r});
  const RunResult chunked = run_all(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 32), {r});
  EXPECT_EQ(one.tokens[0], chunked.tokens[0]);
  ASSERT_EQ(one.logprobs[0].size(), chunked.logprobs[0].size());
  for (size_t i = 0; i < one.logprobs[0].size(); ++i) EXPECT_NEAR(one.logprobs[0][i], chunked.logprobs[0][i], 1e-4f);
}

TEST(ImageTokens, ImageRowsAttendBothWays) {
  Loaded l = load_gemma3_small();
  const int64_t dim = l.model->config().dim;
  const auto head = random_tokens(8, 256, 3), tail = random_tokens(12, 256, 4);
  const RunResult both = run_all(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 512),
                                 {image_request(head, 5, tail, dim, true)});
  const RunResult causal = run_all(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 512),
                                   {image_request(head, 5, tail, dim, false)});
  // The rows after the image read K/V the image rows computed while seeing later rows.
  EXPECT_NE(both.logprobs[0], causal.logprobs[0]);
}

TEST(ImageTokens, TheSameImageHitsTheCachePastItAndAnotherImageSharesNothingPastItsStart) {
  Loaded l = load_gemma3_small();
  const int64_t dim = l.model->config().dim;
  // The image spans positions 8..32: exactly two blocks end inside or at it.
  const auto head = random_tokens(8, 256, 6);
  const Request first = image_request(head, 21, random_tokens(20, 256, 7), dim);
  const Request same = image_request(head, 21, random_tokens(20, 256, 8), dim);
  const Request other = image_request(head, 22, random_tokens(20, 256, 8), dim);
  const EngineConfig cached = engine_config(*l.model, 1, 64, true, 512);
  const RunResult run = run_one_by_one(*l.model, nullptr, cached, {first, same, other});
  EXPECT_EQ(run.results[1].cached_tokens, 32);  // the head and the whole image
  EXPECT_EQ(run.results[2].cached_tokens, 8);   // the text before it, nothing of it
  // What the cache gave is what computing it gives.
  const RunResult cold = run_all(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 512), {same, other});
  EXPECT_EQ(run.tokens[1], cold.tokens[0]);
  EXPECT_EQ(run.tokens[2], cold.tokens[1]);
}

TEST(ImageTokens, BadImageSpansAreRefused) {
  Loaded l = load_gemma3_small();
  const int64_t dim = l.model->config().dim;
  Engine e(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 32));
  auto submit = [&](const Request& r) { return e.submit(r, std::make_shared<RecordingSink>()); };
  Request ok = image_request(random_tokens(4, 256, 1), 1, random_tokens(4, 256, 2), dim);
  Request positive = ok;
  positive.prompt[5] = 7;  // an image position holding a token id
  EXPECT_EQ(submit(positive).status, SubmitResult::Status::Invalid);
  Request short_rows = ok;
  short_rows.images[0].embeddings = std::make_shared<std::vector<float>>(10);
  EXPECT_EQ(submit(short_rows).status, SubmitResult::Status::Invalid);
  Request outside = ok;
  outside.images[0].offset = static_cast<int64_t>(ok.prompt.size()) - 3;
  EXPECT_EQ(submit(outside).status, SubmitResult::Status::Invalid);
  Request stray = ok;
  stray.prompt[0] = -5;  // a placeholder outside any image
  EXPECT_EQ(submit(stray).status, SubmitResult::Status::Invalid);
  Engine narrow(*l.model, nullptr, engine_config(*l.model, 1, 64, false, 16));  // 24-token image > 16
  const SubmitResult big = narrow.submit(ok, std::make_shared<RecordingSink>());
  EXPECT_EQ(big.status, SubmitResult::Status::Invalid);
  EXPECT_NE(big.message.find("max-batch-tokens"), std::string::npos) << big.message;
}

}  // namespace
}  // namespace pagoda
