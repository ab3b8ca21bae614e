#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Params with every filter off: plain softmax sampling at temperature 1.
SamplingParams plain(uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

SamplingParams greedy() {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  return p;
}

std::vector<float> logits_of_probs(std::initializer_list<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Draws n tokens from the same logits (copied each time: sample() modifies
// them) and returns how often each id came up.
std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    const int32_t id = s.sample(l);
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(logits.size()));
    ++counts[id];
  }
  s.check_invariants();
  return counts;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> l(n);
  for (auto& v : l) v = dist(rng);
  return l;
}

// ---- greedy ---------------------------------------------------------------

TEST(SamplerGreedy, PicksArgmax) {
  Sampler s(greedy(), 5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(SamplerGreedy, TieGoesToLowestId) {
  Sampler s(greedy(), 5);
  std::vector<float> l = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(SamplerGreedy, IgnoresNaNLogits) {
  Sampler s(greedy(), 3);
  std::vector<float> l = {std::numeric_limits<float>::quiet_NaN(), -5.0f, -7.0f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(SamplerGreedy, AllBannedReturnsLowestId) {
  SamplingParams p = plain();
  p.logit_bias = {{0, -kInf}, {1, -kInf}, {2, -kInf}};
  Sampler s(p, 3);
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(s.sample(l), 0);
}

TEST(SamplerTopK, TopKOneEqualsGreedyOnRandomLogits) {
  SamplingParams p = plain(42);
  p.top_k = 1;
  Sampler topk1(p, 1000);
  Sampler argmax(greedy(), 1000);
  for (uint64_t trial = 0; trial < 50; ++trial) {
    std::vector<float> a = random_logits(1000, trial);
    // Put a tie at the top on some trials: both must take the lower id.
    if (trial % 2 == 0) {
      const auto it = std::max_element(a.begin(), a.end());
      a[(it - a.begin() + 500) % 1000] = *it;
    }
    std::vector<float> b = a;
    EXPECT_EQ(topk1.sample(a), argmax.sample(b)) << "trial " << trial;
  }
}

// ---- determinism ----------------------------------------------------------

TEST(SamplerSeed, SameSeedGivesSameSequence) {
  Sampler a(plain(1234), 500);
  Sampler b(plain(1234), 500);
  for (uint64_t step = 0; step < 200; ++step) {
    std::vector<float> la = random_logits(500, step, 1.0f);
    std::vector<float> lb = la;
    const int32_t ta = a.sample(la);
    ASSERT_EQ(ta, b.sample(lb)) << "step " << step;
    a.accept(ta);
    b.accept(ta);
  }
}

TEST(SamplerSeed, DifferentSeedGivesDifferentSequence) {
  Sampler a(plain(1), 500);
  Sampler b(plain(2), 500);
  int same = 0;
  const std::vector<float> flat(500, 0.0f);
  for (int step = 0; step < 200; ++step) {
    std::vector<float> la = flat, lb = flat;
    same += a.sample(la) == b.sample(lb);
  }
  EXPECT_LT(same, 20);  // 200 draws over 500 equal tokens: ~0.4 expected matches
}

TEST(SamplerSeed, ResetReplaysTheSequence) {
  SamplingParams p = plain(99);
  p.repetition_penalty = 1.3f;
  Sampler s(p, 50);
  auto run = [&] {
    std::vector<int32_t> out;
    for (uint64_t step = 0; step < 100; ++step) {
      std::vector<float> l = random_logits(50, step, 1.0f);
      out.push_back(s.sample(l));
      s.accept(out.back());
    }
    return out;
  };
  const auto first = run();
  s.reset();
  s.check_invariants();
  EXPECT_EQ(run(), first);
}

TEST(SamplerSeed, RandomSeedIsDrawnAndReported) {
  SamplingParams p = plain(SamplingParams::kRandomSeed);
  Sampler a(p, 10);
  Sampler b(p, 10);
  EXPECT_NE(a.seed(), SamplingParams::kRandomSeed);
  EXPECT_NE(a.seed(), b.seed());  // 2^-64 chance of a false failure
  // The reported seed reproduces the stream.
  Sampler c(plain(a.seed()), 10);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l1(10, 0.0f), l2(10, 0.0f);
    ASSERT_EQ(a.sample(l1), c.sample(l2));
  }
}

// ---- distribution and filters ----------------------------------------------

TEST(SamplerDistribution, FrequenciesMatchSoftmaxAtTemperatureOne) {
  Sampler s(plain(7), 3);
  const int n = 20000;
  const auto counts = histogram(s, logits_of_probs({0.5, 0.3, 0.2}), n);
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(SamplerDistribution, TemperatureSharpensAndFlattens) {
  // p ∝ exp(logit / T): at T = 0.5 the probs .5 .3 .2 become ∝ .25 .09 .04.
  SamplingParams p = plain(8);
  p.temperature = 0.5f;
  Sampler s(p, 3);
  const int n = 20000;
  const auto counts = histogram(s, logits_of_probs({0.5, 0.3, 0.2}), n);
  const double z = 0.25 + 0.09 + 0.04;
  EXPECT_NEAR(counts[0] / double(n), 0.25 / z, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.09 / z, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.04 / z, 0.02);
}

TEST(SamplerDistribution, TinyTemperatureActsLikeGreedy) {
  SamplingParams p = plain(14);
  p.temperature = std::numeric_limits<float>::denorm_min();
  Sampler s(p, 4);
  const auto counts = histogram(s, {0.5f, 2.0f, 1.999f, -1.0f}, 200);
  EXPECT_EQ(counts[1], 200);
}

TEST(SamplerTopP, CutsTheTailExactly) {
  // Cumulative .5, .8 >= .7: ids 0 and 1 stay, renormalized to .625 / .375.
  SamplingParams p = plain(9);
  p.top_p = 0.7f;
  Sampler s(p, 3);
  const int n = 20000;
  const auto counts = histogram(s, logits_of_probs({0.5, 0.3, 0.2}), n);
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / double(n), 0.625, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.375, 0.02);
}

TEST(SamplerTopP, KeepsTheTokenThatCrossesTheThreshold) {
  SamplingParams p = plain(10);
  p.top_p = 0.5f;  // .5 alone reaches it
  Sampler s(p, 3);
  std::vector<float> l = logits_of_probs({0.5, 0.3, 0.2});
  s.sample(l);
  EXPECT_EQ(s.last_candidate_ids(), std::vector<int32_t>{0});
  p.top_p = 0.51f;
  Sampler t(p, 3);
  l = logits_of_probs({0.2, 0.3, 0.5});
  t.sample(l);
  auto ids = t.last_candidate_ids();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
}

// Reference for top-k -> top-p -> min-p by full sort, for large vocabularies
// where the fast path sorts only a growing prefix.
std::vector<int32_t> reference_kept(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids.resize(p.top_k);
  // Float exps summed in double, as the sampler does, so a cumulative sum that
  // lands within float rounding of the threshold cannot flip the cut.
  const float max = logits[ids[0]];
  if (p.top_p < 1.0f) {
    double total = 0;
    for (int32_t id : ids) total += std::exp(logits[id] - max);
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += std::exp(logits[ids[i]] - max);
      if (cum >= p.top_p * total) {
        ids.resize(i + 1);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const float threshold = max + std::log(p.min_p);
    std::erase_if(ids, [&](int32_t id) { return logits[id] < threshold; });
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(SamplerFilters, KeptSetMatchesFullSortReferenceOnLargeVocab) {
  const size_t n_vocab = 150000;
  enum Shape { kNormal, kTies, kHalfBanned };
  struct Case {
    int32_t top_k;
    float top_p;
    float min_p;
    float scale;  // logit spread: small = flat distribution, many tokens kept
    Shape shape;
  };
  // Covers the heap and nth_element top-k paths, and the sort-all and bucketed
  // top-p paths.
  const Case cases[] = {
      {0, 0.95f, 0.0f, 3.0f, kNormal},     {0, 0.95f, 0.0f, 0.3f, kNormal},
      {0, 0.5f, 0.05f, 1.0f, kNormal},     {40, 0.95f, 0.05f, 3.0f, kNormal},
      {1000, 0.9f, 0.0f, 0.5f, kNormal},   {0, 1.0f, 0.01f, 2.0f, kNormal},
      {0, 0.999f, 0.0f, 8.0f, kNormal},    {7, 1.0f, 0.0f, 1.0f, kNormal},
      {30000, 0.9f, 0.0f, 1.0f, kNormal},  {0, 0.9f, 0.0f, 2.0f, kTies},
      {50, 0.8f, 0.0f, 2.0f, kTies},       {0, 0.9f, 0.02f, 2.0f, kHalfBanned},
      {20000, 0.99f, 0.0f, 0.01f, kTies},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    SamplingParams p = plain(c);
    p.top_k = cases[c].top_k;
    p.top_p = cases[c].top_p;
    p.min_p = cases[c].min_p;
    Sampler s(p, n_vocab);
    std::vector<float> logits = random_logits(n_vocab, 100 + c, cases[c].scale);
    for (size_t i = 0; i < n_vocab; ++i) {
      if (cases[c].shape == kTies) logits[i] = std::round(logits[i] * 4.0f) / 4.0f;
      if (cases[c].shape == kHalfBanned && i % 2 == 1) logits[i] = -kInf;
    }
    std::vector<float> work = logits;
    const int32_t id = s.sample(work);
    s.check_invariants();
    auto kept = s.last_candidate_ids();
    std::sort(kept.begin(), kept.end());
    const auto want = reference_kept(logits, p);
    EXPECT_EQ(kept, want) << "case " << c << ": kept " << kept.size() << ", want " << want.size();
    EXPECT_TRUE(std::binary_search(want.begin(), want.end(), id)) << "case " << c;
  }
}

TEST(SamplerMinP, DropsTokensBelowFractionOfTheMax) {
  // min_p .2 of .5 = .1: ids 0..2 stay, .05 goes.
  SamplingParams p = plain(11);
  p.min_p = 0.2f;
  Sampler s(p, 4);
  const auto counts = histogram(s, logits_of_probs({0.5, 0.3, 0.15, 0.05}), 20000);
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_NEAR(counts[0] / 20000.0, 0.5 / 0.95, 0.02);

  p.min_p = 0.5f;  // threshold .25: only ids 0 and 1
  Sampler t(p, 4);
  const auto counts2 = histogram(t, logits_of_probs({0.5, 0.3, 0.15, 0.05}), 5000);
  EXPECT_EQ(counts2[2] + counts2[3], 0);
  EXPECT_GT(counts2[1], 0);
}

TEST(SamplerTopK, DrawsOnlyTheKBest) {
  SamplingParams p = plain(12);
  p.top_k = 2;
  Sampler s(p, 5);
  const auto counts = histogram(s, logits_of_probs({0.1, 0.3, 0.05, 0.35, 0.2}), 5000);
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
}

// ---- bias and penalties ------------------------------------------------------

TEST(SamplerLogitBias, NegativeInfinityBansAToken) {
  SamplingParams p = plain(13);
  p.logit_bias = {{0, -kInf}};
  Sampler s(p, 3);
  const auto counts = histogram(s, logits_of_probs({0.9, 0.05, 0.05}), 5000);
  EXPECT_EQ(counts[0], 0);

  SamplingParams g = greedy();
  g.logit_bias = {{0, -kInf}};
  Sampler t(g, 3);
  std::vector<float> l = {5.0f, 1.0f, 2.0f};
  EXPECT_EQ(t.sample(l), 2);
}

TEST(SamplerLogitBias, AddsToTheLogitAndIsVisibleAfterSample) {
  SamplingParams p = greedy();
  p.logit_bias = {{1, 2.5f}, {2, -1.0f}};
  Sampler s(p, 3);
  std::vector<float> l = {1.0f, 0.0f, 1.0f};
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 2.5f, 0.0f}));
}

TEST(SamplerPenalties, RepetitionDividesPositiveAndMultipliesNegative) {
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  Sampler s(p, 5);
  s.accept(0);
  s.accept(1);
  s.accept(0);  // repeated: still penalized once
  s.accept(4);
  std::vector<float> l = {3.0f, -1.5f, 0.5f, 1.0f, 0.0f};
  s.sample(l);
  EXPECT_EQ(l, (std::vector<float>{1.5f, -3.0f, 0.5f, 1.0f, 0.0f}));
  s.check_invariants();
}

TEST(SamplerPenalties, PresenceAndFrequencyFollowOpenAIFormula) {
  // logit -= count * frequency + (count > 0) * presence
  SamplingParams p = greedy();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, 4);
  for (int32_t t : {2, 0, 2, 2}) s.accept(t);
  std::vector<float> l = {1.0f, 1.0f, 1.0f, -1.0f};
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 1.0f - 1 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
  EXPECT_FLOAT_EQ(l[2], 1.0f - 3 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[3], -1.0f);
}

TEST(SamplerPenalties, RepetitionAppliesBeforePresenceAndFrequency) {
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 0.5f;
  Sampler s(p, 2);
  s.accept(0);
  s.accept(0);
  std::vector<float> l = {4.0f, 0.0f};
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 4.0f / 2.0f - 2 * 0.5f - 1.0f);
}

TEST(SamplerPenalties, CountOnlyTheLastNAcceptedTokens) {
  SamplingParams p = greedy();
  p.frequency_penalty = 1.0f;
  p.penalty_last_n = 3;
  Sampler s(p, 4);
  for (int32_t t : {0, 0, 1, 2, 1}) s.accept(t);  // window: 1 2 1
  s.check_invariants();
  std::vector<float> l = {0.0f, 0.0f, 0.0f, 0.0f};
  s.sample(l);
  EXPECT_EQ(l, (std::vector<float>{0.0f, -2.0f, -1.0f, 0.0f}));
}

TEST(SamplerPenalties, MinusOneCountsTheWholeHistory) {
  SamplingParams p = greedy();
  p.frequency_penalty = 1.0f;
  p.penalty_last_n = -1;
  Sampler s(p, 2);
  for (int i = 0; i < 500; ++i) s.accept(0);
  std::vector<float> l = {0.0f, 0.0f};
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_FLOAT_EQ(l[0], -500.0f);
}

TEST(SamplerPenalties, ZeroLastNDisablesThem) {
  SamplingParams p = greedy();
  p.repetition_penalty = 3.0f;
  p.penalty_last_n = 0;
  Sampler s(p, 2);
  s.accept(0);
  std::vector<float> l = {3.0f, 1.0f};
  s.sample(l);
  EXPECT_EQ(l, (std::vector<float>{3.0f, 1.0f}));
}

TEST(SamplerPenalties, ResetForgetsHistory) {
  SamplingParams p = greedy();
  p.presence_penalty = 1.0f;
  Sampler s(p, 2);
  s.accept(0);
  s.reset();
  std::vector<float> l = {1.0f, 0.0f};
  s.sample(l);
  EXPECT_EQ(l[0], 1.0f);
}

TEST(SamplerPenalties, BiasIsAppliedBeforeRepetition) {
  // (1 + 3) / 2, not 1 / 2 + 3.
  SamplingParams p = greedy();
  p.logit_bias = {{0, 3.0f}};
  p.repetition_penalty = 2.0f;
  Sampler s(p, 2);
  s.accept(0);
  std::vector<float> l = {1.0f, 0.0f};
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 2.0f);
}

// ---- validation ---------------------------------------------------------------

TEST(SamplingParamsValidate, DefaultsAreValid) { EXPECT_EQ(SamplingParams{}.validate(), std::nullopt); }

TEST(SamplingParamsValidate, NamesTheBadField) {
  struct Case {
    void (*mutate)(SamplingParams&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = std::numeric_limits<float>::quiet_NaN(); }, "temperature"},
      {[](SamplingParams& p) { p.temperature = kInf; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = std::numeric_limits<float>::quiet_NaN(); }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = kInf; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = std::numeric_limits<float>::quiet_NaN(); },
       "frequency_penalty"},
      {[](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n"},
      {[](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias"},
      {[](SamplingParams& p) { p.logit_bias = {{1, kInf}}; }, "logit_bias"},
      {[](SamplingParams& p) { p.logit_bias = {{1, std::numeric_limits<float>::quiet_NaN()}}; }, "logit_bias"},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const auto err = p.validate();
    ASSERT_TRUE(err.has_value()) << c.field;
    EXPECT_NE(err->find(c.field), std::string::npos) << *err;
  }
}

TEST(SamplingParamsValidate, AcceptsBoundaryValues) {
  SamplingParams p;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.penalty_last_n = -1;
  p.presence_penalty = -2.0f;
  p.logit_bias = {{0, -kInf}, {5, -100.0f}};
  EXPECT_EQ(p.validate(), std::nullopt);
}

TEST(SamplingParamsValidate, ChecksLogitBiasIdsAgainstTheVocabWhenKnown) {
  SamplingParams p;
  p.logit_bias = {{10, 1.0f}};
  EXPECT_EQ(p.validate(), std::nullopt);
  EXPECT_EQ(p.validate(11), std::nullopt);
  const auto err = p.validate(10);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("10"), std::string::npos) << *err;
}

// ---- logprobs -----------------------------------------------------------------

TEST(TopLogprobs, ReturnsMostLikelyFirstWithNaturalLogs) {
  const std::vector<float> l = logits_of_probs({0.2, 0.5, 0.3});
  const auto top = top_logprobs(l, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].token_id, 1);
  EXPECT_NEAR(top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(top[1].token_id, 2);
  EXPECT_NEAR(top[1].logprob, std::log(0.3), 1e-6);
  EXPECT_NEAR(token_logprob(l, 0), std::log(0.2), 1e-6);
}

TEST(TopLogprobs, TiesGoToLowerIdAndNIsClamped) {
  const std::vector<float> l = {1.0f, 2.0f, 2.0f, 1.0f};
  const auto top = top_logprobs(l, 10);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].token_id, 1);
  EXPECT_EQ(top[1].token_id, 2);
  EXPECT_EQ(top[2].token_id, 0);
  EXPECT_EQ(top[3].token_id, 3);
  EXPECT_TRUE(top_logprobs(l, 0).empty());
}

TEST(TopLogprobs, MatchesFullSortOnLargeVocab) {
  const std::vector<float> l = random_logits(150000, 5);
  const auto top = top_logprobs(l, 20);
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 20, ids.end(), [&](int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
  });
  ASSERT_EQ(top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(top[i].token_id, ids[i]) << "rank " << i;
    EXPECT_NEAR(top[i].logprob, token_logprob(l, ids[i]), 1e-5) << "rank " << i;
  }
}

TEST(TopLogprobs, SeePenaltiesWhenGivenTheSampledSpan) {
  SamplingParams p = greedy();
  p.logit_bias = {{0, -kInf}};
  Sampler s(p, 3);
  std::vector<float> l = logits_of_probs({0.5, 0.25, 0.25});
  const int32_t id = s.sample(l);
  EXPECT_EQ(id, 1);
  const auto top = top_logprobs(l, 3);
  EXPECT_EQ(top[0].token_id, 1);
  EXPECT_NEAR(top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(top[2].token_id, 0);
  EXPECT_EQ(top[2].logprob, -kInf);
  EXPECT_NEAR(token_logprob(l, id), std::log(0.5), 1e-6);
}

TEST(TopLogprobs, AllBannedGivesMinusInfinityNotNaN) {
  const std::vector<float> l = {-kInf, -kInf};
  EXPECT_EQ(token_logprob(l, 1), -kInf);
  EXPECT_EQ(top_logprobs(l, 1)[0].logprob, -kInf);
}

}  // namespace
}  // namespace pagoda
