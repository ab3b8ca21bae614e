// The Engine's per-request outputs and limits on stories260K and a small synthetic llama:
// cached-token and timing reports, logprobs, extra end-of-generation ids, cancellation of
// queued requests and by deadline, the KV budget ending a sequence with Length, stop()
// with requests in flight, refusals of bad requests, stop strings, EOS / min_tokens /
// ignore_eos. Engines run with check_invariants on.
#include "engine/engine_harness.h"

namespace pagoda {
namespace {

using namespace engine_test;

TEST(EngineModel, ReportsCachedTokensAndTimings) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Request r;
  r.prompt = random_tokens(70, 256, 11);
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  Engine e(m, nullptr, engine_config(m, 2, 256, true));
  e.start();
  std::vector<RequestResult> res;
  for (int i = 0; i < 2; ++i) {  // the second one finds the first one's prompt cached
    r.logprobs = i == 1;
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(e.submit(r, sink).ok());
    ASSERT_TRUE(sink->wait_done());
    res.push_back(sink->result());
    for (float lp : sink->logprobs()) {
      if (i == 1) {
        EXPECT_LE(lp, 0.0f);
      } else {
        EXPECT_TRUE(std::isnan(lp));
      }
    }
  }
  EXPECT_EQ(res[0].cached_tokens, 0);
  EXPECT_EQ(res[1].cached_tokens, 69);  // all but the last prompt token
  EXPECT_EQ(res[1].tokens, res[0].tokens);
  for (const RequestResult& x : res) {
    EXPECT_EQ(x.prompt_tokens, 70);
    EXPECT_EQ(x.generated_tokens, 10);
    EXPECT_EQ(x.finish, FinishReason::Length);
    EXPECT_GE(x.timings.ttft_ms, x.timings.queue_ms);
    EXPECT_EQ(x.timings.token_intervals_ms.size(), 9u);
    EXPECT_GE(x.timings.total_ms, x.timings.ttft_ms);
  }
  EXPECT_GE(e.stats().cache.hits, 1);
}

TEST(EngineModel, TopLogprobsListTheGreedyTokenFirstInDescendingOrder) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Request r;
  r.prompt = random_tokens(20, 256, 5);
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.logprobs = true;
  r.top_logprobs = 5;
  Engine e(m, nullptr, engine_config(m, 2, 256, false));
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(r, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  const auto tops = sink->top();
  const auto toks = sink->tokens();
  const auto lps = sink->logprobs();
  ASSERT_EQ(tops.size(), 6u);
  for (size_t i = 0; i < tops.size(); ++i) {
    ASSERT_EQ(tops[i].size(), 5u);
    EXPECT_EQ(tops[i][0].token_id, toks[i]);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(tops[i][0].logprob, lps[i]);
    for (size_t j = 1; j < 5; ++j) EXPECT_LE(tops[i][j].logprob, tops[i][j - 1].logprob);
  }
  Request bad = r;
  bad.top_logprobs = 21;
  EXPECT_EQ(e.submit(bad, std::make_shared<RecordingSink>()).status, SubmitResult::Status::Invalid);
}

TEST(EngineModel, ExtraEndOfGenerationIdsStopGeneration) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Request r;
  r.prompt = random_tokens(12, 256, 9);
  r.max_tokens = 8;
  r.sampling.temperature = 0;
  std::vector<int32_t> free_run;
  {
    Engine e(m, nullptr, engine_config(m, 2, 256, false));
    e.start();
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(e.submit(r, sink).ok());
    ASSERT_TRUE(sink->wait_done());
    free_run = sink->tokens();
    ASSERT_EQ(free_run.size(), 8u);
  }
  EngineConfig c = engine_config(m, 2, 256, false);
  c.extra_eog_ids = {free_run[3]};
  Engine e(m, nullptr, c);
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(r, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]);
  EXPECT_EQ(sink->tokens(), std::vector<int32_t>(free_run.begin(), first + 1));
  EXPECT_EQ(sink->result().finish, FinishReason::Stop);
  // The engine marks the stop token as end-of-generation (sinks do not work it out).
  std::vector<bool> eogs(sink->tokens().size(), false);
  eogs.back() = true;
  EXPECT_EQ(sink->eogs(), eogs);
  Request keep = r;
  keep.ignore_eos = true;  // ignore_eos covers the extra ids too
  auto sink2 = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(keep, sink2).ok());
  ASSERT_TRUE(sink2->wait_done());
  EXPECT_EQ(sink2->tokens(), free_run);
  EXPECT_EQ(sink2->eogs(), std::vector<bool>(free_run.size(), false));
  EngineConfig bad = engine_config(m, 2, 256, false);
  bad.extra_eog_ids = {static_cast<int32_t>(m.config().n_vocab)};
  EXPECT_THROW(Engine(m, nullptr, bad), Error);
}

TEST(EngineModel, CancelsAQueuedRequestBeforeItRuns) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Engine e(m, nullptr, engine_config(m, 1, 256, true));
  auto a = std::make_shared<RecordingSink>(), b = std::make_shared<RecordingSink>();
  Request r;
  r.prompt = random_tokens(9, 256, 5);
  r.max_tokens = 8;
  ASSERT_TRUE(e.submit(r, a).ok());
  const SubmitResult sb = e.submit(r, b);
  ASSERT_TRUE(sb.ok());
  EXPECT_TRUE(e.cancel(sb.request_id));
  e.start();
  ASSERT_TRUE(a->wait_done());
  ASSERT_TRUE(b->wait_done());
  EXPECT_EQ(a->result().finish, FinishReason::Length);
  EXPECT_EQ(b->result().finish, FinishReason::Cancelled);
  EXPECT_TRUE(b->tokens().empty());
}

TEST(EngineModel, ARequestPastItsDeadlineEndsCancelled) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Engine e(m, nullptr, engine_config(m, 1, 256, true));  // one running: b waits behind a
  auto a = std::make_shared<RecordingSink>(), b = std::make_shared<RecordingSink>();
  Request r;
  r.prompt = random_tokens(9, 256, 5);
  r.max_tokens = 3000;
  r.ignore_eos = true;
  const SubmitResult sa = e.submit(r, a);
  ASSERT_TRUE(sa.ok());
  r.timeout_ms = 20;
  ASSERT_TRUE(e.submit(r, b).ok());
  e.start();
  ASSERT_TRUE(b->wait_done());
  EXPECT_EQ(b->result().finish, FinishReason::Cancelled);
  EXPECT_TRUE(b->tokens().empty());
  EXPECT_GE(b->result().timings.total_ms, 20.0);
  e.cancel(sa.request_id);
  ASSERT_TRUE(a->wait_done());
}

TEST(EngineModel, ASequenceThatOutgrowsTheWholeKvBudgetEndsWithLength) {
  Loaded l = load_synth();
  Model& m = *l.model;
  Engine e(m, nullptr, engine_config(m, 2, 4, false));  // 4 blocks: 64 tokens
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  Request r;
  r.prompt = random_tokens(30, 256, 5);
  r.ignore_eos = true;  // max_tokens -1: until something stops it
  ASSERT_TRUE(e.submit(r, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  EXPECT_EQ(sink->result().finish, FinishReason::Length);
  EXPECT_EQ(sink->result().generated_tokens, 64 - 30 + 1);  // 64 slots, the last token unfed
}

TEST(EngineModel, StopWithRequestsInFlightCancelsThem) {
  Loaded l = load_synth();
  Model& m = *l.model;
  auto sink = std::make_shared<RecordingSink>();
  {
    Engine e(m, nullptr, engine_config(m, 2, 256, true));
    Request r;
    r.prompt = random_tokens(9, 256, 5);
    r.max_tokens = 3000;
    r.ignore_eos = true;
    ASSERT_TRUE(e.submit(r, sink).ok());
    e.start();
    ASSERT_TRUE(sink->wait_tokens(2));
  }  // destructor stops
  ASSERT_TRUE(sink->done());
  EXPECT_EQ(sink->result().finish, FinishReason::Cancelled);
}

TEST(EngineModel, RefusesBadRequestsAsInvalid) {
  Loaded l = load_synth();
  Model& m = *l.model;
  EngineConfig cfg = engine_config(m, 2, 8, true);  // 8 blocks: 128 tokens at most
  cfg.ctx_size = 1000;
  Engine e(m, nullptr, cfg);
  auto sink = std::make_shared<RecordingSink>();
  auto refused = [&](Request r) {
    const SubmitResult s = e.submit(std::move(r), sink);
    EXPECT_EQ(s.status, SubmitResult::Status::Invalid);
    return s.message;
  };
  Request ok;
  ok.prompt = {5, 6, 7};
  Request r = ok;
  r.prompt.clear();
  EXPECT_NE(refused(r).find("empty"), std::string::npos);
  r = ok;
  r.prompt = random_tokens(1000, 256, 3);
  EXPECT_NE(refused(r).find("context"), std::string::npos);
  r = ok;
  r.prompt = random_tokens(200, 256, 3);  // fits the context, not the KV budget
  EXPECT_NE(refused(r).find("KV budget"), std::string::npos);
  r = ok;
  r.sampling.top_p = 2.0f;
  EXPECT_NE(refused(r).find("top_p"), std::string::npos);
  r = ok;
  r.prompt = {5, 256};
  refused(r);
  r = ok;
  r.stop = {"x"};
  refused(r);
  EXPECT_TRUE(e.submit(ok, sink).ok());
  e.start();
  EXPECT_TRUE(sink->wait_done());
}

TEST(EngineModel, StoriesStopStringEndsTheTextBeforeIt) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  Loaded l = load(kStories, true);
  Model& m = *l.model;
  Request r;
  r.prompt = l.tokenizer->encode("Once upon a time", true, false);
  r.sampling.temperature = 0;
  r.max_tokens = 60;
  const RunResult free_run = run_all(m, l.tokenizer.get(), engine_config(m, 2, 256, true), {r});
  const std::string text = free_run.results[0].text;
  ASSERT_GT(text.size(), 40u) << text;
  const std::string stop = text.substr(30, 6);
  const std::string expect = text.substr(0, text.find(stop));
  r.stop = {stop};
  const RunResult stopped = run_all(m, l.tokenizer.get(), engine_config(m, 2, 256, true), {r});
  EXPECT_EQ(stopped.results[0].finish, FinishReason::Stop);
  EXPECT_EQ(stopped.results[0].stop_matched, stop);
  EXPECT_EQ(stopped.results[0].text, expect);
}

TEST(EngineModel, StoriesEndsAtEosUnlessMinTokensOrIgnoreEosSayOtherwise) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  Loaded l = load(kStories, true);
  Model& m = *l.model;
  const int32_t eos = l.tokenizer->eos();
  ASSERT_GE(eos, 0);
  Request r;
  r.prompt = l.tokenizer->encode("Once upon a time", true, false);
  r.sampling.temperature = 0;
  r.sampling.logit_bias = {{eos, 100.0f}};  // greedy picks EOS whenever it is allowed
  r.max_tokens = 20;
  const EngineConfig cfg = engine_config(m, 2, 256, true);
  const RequestResult first = run_all(m, l.tokenizer.get(), cfg, {r}).results[0];
  EXPECT_EQ(first.finish, FinishReason::Stop);
  EXPECT_EQ(first.tokens, std::vector<int32_t>{eos});
  EXPECT_EQ(first.text, "");

  r.min_tokens = 5;  // EOS banned for the first 5
  const RequestResult later = run_all(m, l.tokenizer.get(), cfg, {r}).results[0];
  EXPECT_EQ(later.finish, FinishReason::Stop);
  ASSERT_EQ(later.generated_tokens, 6);
  EXPECT_EQ(later.tokens.back(), eos);
  for (int i = 0; i < 5; ++i) EXPECT_NE(later.tokens[static_cast<size_t>(i)], eos);

  r.min_tokens = 0;
  r.ignore_eos = true;  // EOS is an ordinary token: generation runs to max_tokens
  const RequestResult ignoring = run_all(m, l.tokenizer.get(), cfg, {r}).results[0];
  EXPECT_EQ(ignoring.finish, FinishReason::Length);
  EXPECT_EQ(ignoring.generated_tokens, 20);
}

}  // namespace
}  // namespace pagoda
