// SuffixIndex, ngram_lookup and the draft planner against hand-worked cases.
#include "spec/suffix_index.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "common/error.h"
#include "spec/draft_planner.h"

namespace pagoda::spec {
namespace {

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab = 32000) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(to));
}

TEST(SuffixIndex, ProposesWhatFollowedTheLongestMatch) {
  SuffixIndex idx(1 << 20);
  const auto a = random_tokens(200, 1);
  idx.add(7, a);
  idx.check_invariants();
  // The context ends with a[90..100): the continuation is a[100..).
  std::vector<int32_t> ctx = random_tokens(30, 2);
  ctx.insert(ctx.end(), a.begin() + 90, a.begin() + 100);
  const Proposal p = idx.propose(7, ctx, 8);
  EXPECT_EQ(p.tokens, slice(a, 100, 108));
  EXPECT_EQ(p.match, 10);
  // Capped by what the sequence has left.
  ctx.assign(a.begin() + 180, a.begin() + 197);
  EXPECT_EQ(idx.propose(7, ctx, 8).tokens, slice(a, 197, 200));
  // The end of a stored sequence has no continuation.
  ctx.assign(a.begin() + 150, a.end());
  EXPECT_TRUE(idx.propose(7, ctx, 8).tokens.empty());
  // Fewer than kKeyTokens matching tokens: nothing.
  ctx = random_tokens(10, 3);
  ctx.insert(ctx.end(), a.begin() + 50, a.begin() + 53);
  EXPECT_TRUE(idx.propose(7, ctx, 8).tokens.empty());
}

TEST(SuffixIndex, TheLongerBackwardMatchWins) {
  SuffixIndex idx(1 << 20);
  const auto key = random_tokens(4, 9);
  const auto before_a = random_tokens(20, 10), before_b = random_tokens(20, 11);
  const auto after_a = random_tokens(10, 12), after_b = random_tokens(10, 13);
  auto a = before_a, b = before_b;
  a.insert(a.end(), key.begin(), key.end());
  a.insert(a.end(), after_a.begin(), after_a.end());
  b.insert(b.end(), key.begin(), key.end());
  b.insert(b.end(), after_b.begin(), after_b.end());
  idx.add(1, a);
  idx.add(1, b);  // newer
  // The context shares 6 tokens before the key with a, none with b.
  auto ctx = slice(before_a, 14, 20);
  ctx.insert(ctx.end(), key.begin(), key.end());
  EXPECT_EQ(idx.propose(1, ctx, 5).tokens, slice(after_a, 0, 5));
  // Only the key: the tie goes to the newer sequence.
  EXPECT_EQ(idx.propose(1, key, 5).tokens, slice(after_b, 0, 5));
}

TEST(SuffixIndex, TenantsNeverSeeEachOthersSequences) {
  SuffixIndex idx(1 << 20);
  const auto secret = random_tokens(100, 21);
  idx.add(1, secret);
  const auto ctx = slice(secret, 0, 40);
  EXPECT_FALSE(idx.propose(1, ctx, 8).tokens.empty());
  EXPECT_TRUE(idx.propose(2, ctx, 8).tokens.empty());
  // The same tokens stored by the other tenant are its own copy.
  idx.add(2, secret);
  EXPECT_EQ(idx.stats().sequences, 2);
  EXPECT_EQ(idx.propose(2, ctx, 8).tokens, slice(secret, 40, 48));
  idx.check_invariants();
}

TEST(SuffixIndex, AContinuedSequenceReplacesItsPrefixAndARepeatOnlyRefreshes) {
  SuffixIndex idx(1 << 20);
  const auto turn3 = random_tokens(300, 31);
  idx.add(5, slice(turn3, 0, 100));
  idx.add(5, slice(turn3, 0, 100));  // identical
  EXPECT_EQ(idx.stats().sequences, 1);
  idx.add(5, slice(turn3, 0, 200));  // the next turn continues it
  EXPECT_EQ(idx.stats().sequences, 1);
  EXPECT_EQ(idx.stats().tokens, 200);
  idx.add(5, turn3);
  EXPECT_EQ(idx.stats().sequences, 1);
  EXPECT_EQ(idx.stats().tokens, 300);
  idx.check_invariants();
  // Another tenant's continuation replaces nothing of this one.
  idx.add(6, slice(turn3, 0, 320 > turn3.size() ? turn3.size() : 320));
  EXPECT_EQ(idx.stats().sequences, 2);
}

TEST(SuffixIndex, StaysUnderItsByteBudgetDroppingTheOldest) {
  const uint64_t cap = 256 << 10;
  SuffixIndex idx(cap);
  std::vector<std::vector<int32_t>> added;
  for (uint32_t i = 0; i < 200; ++i) {
    added.push_back(random_tokens(500, 100 + i));
    idx.add(3, added.back());
    ASSERT_LE(idx.bytes(), cap) << i;
    idx.check_invariants();
  }
  const SuffixIndexStats st = idx.stats();
  EXPECT_GT(st.evicted, 0);
  EXPECT_LT(st.sequences, 200);
  EXPECT_EQ(st.bytes, idx.bytes());
  EXPECT_EQ(st.capacity_bytes, cap);
  // ~36 bytes a token (4 for the token, 32 for a posting slot at most half full).
  EXPECT_GE(static_cast<double>(st.bytes) / static_cast<double>(st.tokens), 20.0);
  EXPECT_LE(static_cast<double>(st.bytes) / static_cast<double>(st.tokens), 80.0);
  // The newest is there, the first is gone.
  EXPECT_FALSE(idx.propose(3, slice(added.back(), 0, 50), 4).tokens.empty());
  EXPECT_TRUE(idx.propose(3, slice(added.front(), 0, 50), 4).tokens.empty());
  // A sequence larger than the whole budget is not kept, and costs nothing.
  idx.add(3, random_tokens(100000, 5));
  EXPECT_FALSE(idx.propose(3, slice(added.back(), 0, 50), 4).tokens.empty());
  idx.clear();
  EXPECT_EQ(idx.bytes(), 0u);
  idx.check_invariants();
}

TEST(SuffixIndex, ARunOfOneRepeatedTokenKeepsLookupsBounded) {
  SuffixIndex idx(64 << 20);
  std::vector<int32_t> spaces(100000, 220);
  spaces.push_back(5);
  idx.add(1, spaces);
  idx.check_invariants();
  const Proposal p = idx.propose(1, std::vector<int32_t>(10, 220), 8);
  EXPECT_EQ(p.tokens.size(), 8u);  // from one of the first postings of the key
}

TEST(NgramLookup, FindsTheLatestEarlierOccurrenceLongestFirst) {
  // ... 1 2 3 4 [9 9] ... 3 4 [7 7] ... 2 3 4 -> the 3-gram "2 3 4" matches at the first.
  std::vector<int32_t> t = {1, 2, 3, 4, 9, 9, 50, 3, 4, 7, 7, 60, 2, 3, 4};
  Proposal p = ngram_lookup(t, 2);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(p.match, 3);
  // Only the bigram "3 4" matches: the latest one, followed by 7 7.
  t = {1, 2, 3, 4, 9, 9, 50, 3, 4, 7, 7, 60, 8, 3, 4};
  p = ngram_lookup(t, 5);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{7, 7, 60, 8, 3}));
  EXPECT_EQ(p.match, 2);
  EXPECT_TRUE(ngram_lookup(std::vector<int32_t>{1, 2, 3, 4, 5}, 4).tokens.empty());
  EXPECT_TRUE(ngram_lookup(std::vector<int32_t>{}, 4).tokens.empty());
  EXPECT_TRUE(ngram_lookup(t, 0).tokens.empty());
}

TEST(SpecTypes, ParseAndRefuse) {
  SpecConfig c = parse_spec_types("suffix,ngram");
  EXPECT_TRUE(c.suffix && c.ngram);
  EXPECT_EQ(spec_types_name(c), "suffix,ngram");
  c = parse_spec_types("ngram");
  EXPECT_TRUE(!c.suffix && c.ngram);
  c = parse_spec_types("none");
  EXPECT_FALSE(c.any());
  EXPECT_EQ(spec_types_name(c), "none");
  EXPECT_THROW(parse_spec_types("suffix,none"), Error);
  EXPECT_THROW(parse_spec_types("eagle"), Error);
  EXPECT_THROW(parse_spec_types(""), Error);
  c = parse_spec_types("suffix,draft");
  EXPECT_TRUE(c.suffix && c.draft && !c.ngram);
  EXPECT_EQ(spec_types_name(c), "suffix,draft");
  EXPECT_THROW(parse_spec_types("mtp"), Error);
}

TEST(StepCostModel, FitsALineAndFallsBackToThePrior) {
  StepCostModel m;
  EXPECT_DOUBLE_EQ(m.fixed(), 1.0);
  EXPECT_DOUBLE_EQ(m.per_token(), StepCostModel::kPriorRatio);
  for (int i = 0; i < 50; ++i) m.observe(1, 0.030);  // one size only: the prior ratio, scaled
  EXPECT_NEAR(m.fixed() * (1 + StepCostModel::kPriorRatio), 0.030, 1e-9);
  for (int i = 0; i < 200; ++i) {
    const int n = 1 + i % 32;
    m.observe(n, 0.030 + 0.002 * n);
  }
  EXPECT_NEAR(m.per_token(), 0.002, 2e-4);
  EXPECT_NEAR(m.fixed(), 0.030, 3e-3);
}

TEST(PlanDrafts, LongProposalsWhenRowsAreCheapAndAcceptanceHigh) {
  StepCostModel cheap;
  for (int i = 0; i < 100; ++i) cheap.observe(1 + i % 16, 0.030 + 0.0003 * (1 + i % 16));
  std::vector<DraftCandidate> c = {{16, 0.95, 0}, {16, 0.1, 0}, {16, 0.5, 0}};
  plan_drafts(c, 3, 3, cheap, 100, 1);
  EXPECT_EQ(c[0].chosen, 16);  // 0.95^16 = 0.44 still beats a 1% dearer step
  EXPECT_LE(c[1].chosen, 2);
  EXPECT_GT(c[2].chosen, c[1].chosen);
  EXPECT_LT(c[2].chosen, c[0].chosen);
  // The step's budget caps the total.
  plan_drafts(c, 3, 3, cheap, 5, 1);
  EXPECT_EQ(c[0].chosen + c[1].chosen + c[2].chosen, 5);
}

TEST(PlanDrafts, NothingWhenRowsCostAsMuchAsTheyCouldYield) {
  StepCostModel dear;  // compute-bound: each row costs as much as the fixed part
  for (int i = 0; i < 100; ++i) dear.observe(1 + i % 16, 0.010 * (1 + i % 16));
  std::vector<DraftCandidate> c = {{16, 0.9, 0}};
  plan_drafts(c, 64, 64, dear, 100, 1);
  EXPECT_EQ(c[0].chosen, 0);
  // draft_min: a shorter choice is not verified at all.
  StepCostModel mid;
  for (int i = 0; i < 100; ++i) mid.observe(1 + i % 16, 0.030 + 0.01 * (1 + i % 16));
  c = {{16, 0.5, 0}};
  plan_drafts(c, 1, 1, mid, 100, 1);
  const int64_t free_choice = c[0].chosen;
  ASSERT_GT(free_choice, 0);
  plan_drafts(c, 1, 1, mid, 100, free_choice + 1);
  EXPECT_EQ(c[0].chosen, 0);
}

}  // namespace
}  // namespace pagoda::spec
