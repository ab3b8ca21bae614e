// Golden end-to-end checks of the forward pass on the real stories260K model
// (../shared/models/stories260K): greedy ids from its README, and batch / decode
// paths agreeing with each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace pagoda {
namespace {

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

class StoriesModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
    file_ = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(kStories));
    model_ = Model::load(file_);
  }
  std::shared_ptr<const gguf::GgufFile> file_;
  std::unique_ptr<Model> model_;
};

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

TEST_F(StoriesModel, ConfigMatchesTheReadme) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.ffn_dim, 172);
  EXPECT_EQ(c.n_vocab, 512);
}

TEST_F(StoriesModel, GreedyFromBosGivesTheReferenceIds) {
  const std::vector<int32_t> expected = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                         421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408,
                                         419, 292, 411, 322, 265, 282, 295, 433, 426, 385};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    ContiguousKvCache kv(5, 4, 8, 64, 1);
    std::vector<float> logits;
    std::vector<int32_t> got;
    int32_t tok = 1;  // BOS
    for (int64_t pos = 0; pos < static_cast<int64_t>(expected.size()); ++pos) {
      Batch b;
      b.add(tok, pos, 0, true);
      model_->forward(b, kv, pool, logits);
      tok = argmax(logits.data(), 512);
      got.push_back(tok);
    }
    EXPECT_EQ(got, expected) << "threads=" << threads;
  }
}

TEST_F(StoriesModel, BatchedPrefillEqualsTokenByTokenDecode) {
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  ThreadPool pool(2);
  std::vector<float> batched, one, stepwise;
  ContiguousKvCache kv1(5, 4, 8, 64, 1), kv2(5, 4, 8, 64, 1);
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int64_t>(i), 0, true);
  model_->forward(b, kv1, pool, batched);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Batch s;
    s.add(tokens[i], static_cast<int64_t>(i), 0, true);
    model_->forward(s, kv2, pool, one);
    stepwise.insert(stepwise.end(), one.begin(), one.end());
  }
  ASSERT_EQ(batched.size(), stepwise.size());
  for (size_t i = 0; i < batched.size(); ++i)
    ASSERT_NEAR(batched[i], stepwise[i], 1e-4f * (1.0f + std::fabs(stepwise[i]))) << "index " << i;
}

TEST_F(StoriesModel, SequencesInOneBatchDoNotSeeEachOther) {
  // Two different sequences batched together give the same logits as each alone.
  const std::vector<int32_t> a = {1, 403, 407, 261}, bseq = {1, 261, 376, 298, 315};
  ThreadPool pool(2);
  ContiguousKvCache kv(5, 4, 8, 64, 2);
  Batch both;
  for (size_t i = 0; i < a.size(); ++i) both.add(a[i], static_cast<int64_t>(i), 0, i + 1 == a.size());
  for (size_t i = 0; i < bseq.size(); ++i) both.add(bseq[i], static_cast<int64_t>(i), 1, i + 1 == bseq.size());
  std::vector<float> joint;
  model_->forward(both, kv, pool, joint);
  ASSERT_EQ(joint.size(), 2u * 512);
  for (int which = 0; which < 2; ++which) {
    const auto& seq = which == 0 ? a : bseq;
    ContiguousKvCache alone_kv(5, 4, 8, 64, 1);
    Batch alone;
    for (size_t i = 0; i < seq.size(); ++i) alone.add(seq[i], static_cast<int64_t>(i), 0, i + 1 == seq.size());
    std::vector<float> ref;
    model_->forward(alone, alone_kv, pool, ref);
    for (int64_t v = 0; v < 512; ++v)
      ASSERT_NEAR(joint[which * 512 + v], ref[v], 1e-4f * (1.0f + std::fabs(ref[v]))) << "seq " << which << " v " << v;
  }
}

TEST_F(StoriesModel, OutOfRangeTokenOrPositionIsAnError) {
  ThreadPool pool(1);
  ContiguousKvCache kv(5, 4, 8, 16, 1);
  std::vector<float> logits;
  Batch bad_token;
  bad_token.add(512, 0, 0, true);
  EXPECT_THROW(model_->forward(bad_token, kv, pool, logits), Error);
  Batch neg_token;
  neg_token.add(-1, 0, 0, true);
  EXPECT_THROW(model_->forward(neg_token, kv, pool, logits), Error);
  Batch bad_pos;
  bad_pos.add(1, 16, 0, true);
  EXPECT_THROW(model_->forward(bad_pos, kv, pool, logits), Error);
}

}  // namespace
}  // namespace pagoda
