// Workloads: deterministic by seed, shaped as their contract says, and the
// request bodies that carry them.
#include "common/error.h"
#include "loadgen/workload.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace pagoda::loadgen {
namespace {

int64_t count_words(std::string_view s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    if (c != ' ' && !in) ++n;
    in = c != ' ';
  }
  return n;
}

WorkloadOptions opts(WorkloadKind kind, uint64_t seed) {
  WorkloadOptions o;
  o.kind = kind;
  o.seed = seed;
  o.input_len = 100;
  o.prefix_len = 400;
  o.turns = 4;
  return o;
}

TEST(BenchWorkload, SameSeedSameJobsInAnyOrder) {
  for (WorkloadKind kind : {WorkloadKind::kRandom, WorkloadKind::kSharedPrefix, WorkloadKind::kMultiTurn}) {
    Workload a(opts(kind, 11), nullptr), b(opts(kind, 11), nullptr);
    Job late = b.job(5);  // drawn first: job(idx) does not depend on call order
    for (int64_t i = 0; i < 6; ++i) {
      Job ja = a.job(i), jb = b.job(i);
      EXPECT_EQ(ja.system, jb.system);
      EXPECT_EQ(ja.user, jb.user);
    }
    EXPECT_EQ(late.user, a.job(5).user);
  }
}

TEST(BenchWorkload, DifferentSeedsOrJobsGiveDifferentPrompts) {
  Workload a(opts(WorkloadKind::kRandom, 1), nullptr), b(opts(WorkloadKind::kRandom, 2), nullptr);
  EXPECT_NE(a.job(0).user, b.job(0).user);
  std::set<std::string> distinct;
  for (int64_t i = 0; i < 50; ++i) distinct.insert(a.job(i).user[0]);
  EXPECT_EQ(distinct.size(), 50u);
}

TEST(BenchWorkload, RandomLengthsStayWithinTwentyPercent) {
  Workload w(opts(WorkloadKind::kRandom, 3), nullptr);
  EXPECT_FALSE(w.tokens_measured());
  int64_t lo = 1 << 30, hi = 0;
  for (int64_t i = 0; i < 200; ++i) {
    Job j = w.job(i);
    ASSERT_EQ(j.user.size(), 1u);
    EXPECT_TRUE(j.system.empty());
    // Approximate tokens: 0.75 words per token, rounding adds at most 2.
    EXPECT_GE(j.user_tokens[0], 80 - 2);
    EXPECT_LE(j.user_tokens[0], 120 + 2);
    EXPECT_EQ(j.user_tokens[0], approx_tokens(j.user[0]));
    lo = std::min(lo, j.user_tokens[0]);
    hi = std::max(hi, j.user_tokens[0]);
  }
  EXPECT_LT(lo, 90);  // the spread is actually used
  EXPECT_GT(hi, 110);
}

TEST(BenchWorkload, ACounterMakesLengthsExact) {
  // A stand-in tokenizer: one token per word plus one per 4 characters of "e".
  TokenCounter counter = [](std::string_view s) {
    int64_t e = 0;
    for (char c : s) e += c == 'e';
    return count_words(s) + e / 4;
  };
  WorkloadOptions o = opts(WorkloadKind::kSharedPrefix, 5);
  Workload w(o, counter);
  EXPECT_TRUE(w.tokens_measured());
  for (int64_t i = 0; i < 20; ++i) {
    Job j = w.job(i);
    EXPECT_EQ(j.system_tokens, 400);
    EXPECT_EQ(counter(j.system), 400);
    EXPECT_EQ(j.user_tokens[0], 100);
    EXPECT_EQ(counter(j.user[0]), 100);
  }
}

TEST(BenchWorkload, SharedPrefixSharesTheSystemPromptOnly) {
  Workload w(opts(WorkloadKind::kSharedPrefix, 9), nullptr);
  Job a = w.job(0), b = w.job(1);
  EXPECT_FALSE(a.system.empty());
  EXPECT_EQ(a.system, b.system);
  EXPECT_NE(a.user[0], b.user[0]);
  EXPECT_NEAR(static_cast<double>(a.system_tokens), 400, 2);
  EXPECT_NEAR(static_cast<double>(a.user_tokens[0]), 100, 2);  // no ±20% outside `random`
}

TEST(BenchWorkload, MultiTurnJobsHaveTurnsDistinctMessages) {
  Workload w(opts(WorkloadKind::kMultiTurn, 9), nullptr);
  EXPECT_EQ(w.turns_per_job(), 4);
  Job j = w.job(3);
  ASSERT_EQ(j.user.size(), 4u);
  EXPECT_EQ(j.user_tokens.size(), 4u);
  EXPECT_TRUE(j.system.empty());
  std::set<std::string> distinct(j.user.begin(), j.user.end());
  EXPECT_EQ(distinct.size(), 4u);
}

TEST(BenchWorkload, MultiTurnSystemPromptsAreEachConversationsOwn) {
  WorkloadOptions o = opts(WorkloadKind::kMultiTurn, 9);
  o.system_len = 300;
  Workload w(o, nullptr);
  const Job a = w.job(0), b = w.job(1);
  EXPECT_NEAR(static_cast<double>(a.system_tokens), 300, 2);
  EXPECT_NE(a.system, b.system);
  EXPECT_EQ(w.job(0).system, a.system) << "not a pure function of the job index";
  const auto body = nlohmann::json::parse(request_body(Endpoint::kChat, "", a, 0, {}, 16, true));
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][0]["content"], a.system);
}

TEST(BenchRequestBody, ChatCarriesHistoryAndFixedOutputLength) {
  Job j;
  j.system = "sys";
  j.user = {"u0", "u1", "u2"};
  j.user_tokens = {1, 1, 1};
  nlohmann::json b = nlohmann::json::parse(request_body(Endpoint::kChat, "m", j, 2, {"a0", "a1"}, 16));
  EXPECT_EQ(b["model"], "m");
  const auto& m = b["messages"];
  ASSERT_EQ(m.size(), 6u);
  std::vector<std::pair<std::string, std::string>> expected = {
      {"system", "sys"}, {"user", "u0"}, {"assistant", "a0"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m[i]["role"], expected[i].first);
    EXPECT_EQ(m[i]["content"], expected[i].second);
  }
  EXPECT_EQ(b["max_tokens"], 16);
  EXPECT_EQ(b["min_tokens"], 16);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
}

TEST(BenchRequestBody, CompletionsRendersTheConversationAsTextAndOmitsAnEmptyModel) {
  Job j;
  j.user = {"u0", "u1"};
  j.user_tokens = {1, 1};
  nlohmann::json b = nlohmann::json::parse(request_body(Endpoint::kCompletions, "", j, 1, {" a0"}, 4));
  EXPECT_FALSE(b.contains("model"));
  EXPECT_FALSE(b.contains("messages"));
  EXPECT_EQ(b["prompt"], "User: u0\nAssistant: a0\nUser: u1\nAssistant:");
}

TEST(BenchRequestBody, WithoutFixedOutputOnlyMaxTokensIsSent) {
  Job j;
  j.user = {"u0"};
  j.user_tokens = {1};
  nlohmann::json b = nlohmann::json::parse(request_body(Endpoint::kChat, "", j, 0, {}, 4, /*fixed_output=*/false));
  EXPECT_EQ(b["max_tokens"], 4);
  EXPECT_FALSE(b.contains("min_tokens"));
  EXPECT_FALSE(b.contains("ignore_eos"));
}

// --extra-body: its members ride on every request, replacing the client's of the same name.
TEST(BenchRequestBody, ExtraBodyMembersAreSetLast) {
  Job j;
  j.user = {"u0"};
  j.user_tokens = {1};
  nlohmann::json b = nlohmann::json::parse(request_body(Endpoint::kCompletions, "", j, 0, {}, 4, true,
                                                        R"({"logit_bias": {"3": -100}, "max_tokens": 9})"));
  EXPECT_EQ(b["logit_bias"]["3"], -100);
  EXPECT_EQ(b["max_tokens"], 9);
  EXPECT_EQ(b["prompt"], "User: u0\nAssistant:");
  EXPECT_EQ(b["stream"], true);
}

TEST(BenchRequestBody, ExtraBodyMustBeAnObjectThatLeavesTheStreamAlone) {
  EXPECT_NO_THROW(check_extra_body(""));
  EXPECT_NO_THROW(check_extra_body(R"({"logit_bias": {}})"));
  EXPECT_THROW(check_extra_body("[1, 2]"), Error);
  EXPECT_THROW(check_extra_body("{not json"), Error);
  for (const char* member : {"stream", "stream_options", "messages", "prompt"})
    EXPECT_THROW(check_extra_body(std::string("{\"") + member + "\": 1}"), Error) << member;
}

TEST(BenchNames, RoundTrip) {
  for (WorkloadKind k : {WorkloadKind::kRandom, WorkloadKind::kSharedPrefix, WorkloadKind::kMultiTurn}) {
    WorkloadKind back;
    ASSERT_TRUE(parse_workload(workload_name(k), &back));
    EXPECT_EQ(back, k);
  }
  WorkloadKind k;
  EXPECT_FALSE(parse_workload("chaos", &k));
  Endpoint e;
  EXPECT_TRUE(parse_endpoint("completions", &e));
  EXPECT_EQ(endpoint_path(e), "/v1/completions");
  EXPECT_FALSE(parse_endpoint("embeddings", &e));
}

TEST(BenchRng, IsTheSameStreamEverywhere) {
  Rng r(0);
  // splitmix64 reference values for seed 0.
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ull);
  Rng e(1);
  double sum = 0;
  for (int i = 0; i < 20000; ++i) sum += e.exponential(4.0);
  EXPECT_NEAR(sum / 20000, 0.25, 0.01);
}

}  // namespace
}  // namespace pagoda::loadgen
