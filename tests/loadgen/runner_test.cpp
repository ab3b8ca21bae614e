// The run loop against a stub server made in the test: error accounting per
// class, counts that add up, ordered percentiles, multi-turn history and cached
// tokens per turn, and the run's bounds.
#include "loadgen/runner.h"

#include <gtest/gtest.h>

#include "loadgen/http_client.h"
#include "stub_server.h"

namespace pagoda::loadgen {
namespace {

using testing::StubServer;

BenchConfig base_config(const std::string& url, const std::string& model) {
  BenchConfig c;
  c.url = url;
  c.model = model;
  c.workload.kind = WorkloadKind::kRandom;
  c.workload.input_len = 16;
  c.workload.output_len = 8;
  c.workload.seed = 7;
  c.concurrency = 4;
  c.max_requests = 12;
  c.max_duration_s = 30;
  c.timeout_s = 5;
  return c;
}

Report run(const BenchConfig& c, RunResults* out = nullptr) {
  Workload w(c.workload, nullptr);
  RunResults r = run_bench(c, w);
  Report rep = make_report(r);
  EXPECT_EQ(rep.num_ok + rep.num_failed + rep.num_hung_up, rep.num_sent);
  EXPECT_EQ(rep.num_sent, static_cast<int64_t>(r.records.size()));
  int64_t failures = 0;
  for (const auto& [cls, n] : rep.errors) failures += n;
  EXPECT_EQ(failures, rep.num_failed);
  for (const Summary* s : {&rep.ttft_ms, &rep.itl_ms, &rep.tpot_ms, &rep.e2e_ms}) {
    if (s->count == 0) continue;
    EXPECT_LE(s->min, s->p10);
    EXPECT_LE(s->p10, s->p50);
    EXPECT_LE(s->p50, s->p90);
    EXPECT_LE(s->p90, s->p99);
    EXPECT_LE(s->p99, s->max);
  }
  if (out) *out = std::move(r);
  return rep;
}

TEST(BenchRunner, StreamsFromAHealthyServerAreMeasured) {
  StubServer server;
  server.set_chunk_delay(std::chrono::microseconds(200));
  RunResults results;
  Report rep = run(base_config(server.url(), "ok"), &results);
  EXPECT_EQ(rep.num_sent, 12);
  EXPECT_EQ(rep.num_ok, 12);
  EXPECT_EQ(server.num_requests(), 12);
  EXPECT_EQ(rep.completion_tokens, 12 * 8);
  EXPECT_EQ(rep.num_output_len_honoured, 12);
  EXPECT_EQ(rep.num_usage_reported, 12);
  EXPECT_EQ(rep.ttft_ms.count, 12);
  EXPECT_EQ(rep.itl_ms.count, 12 * 7);  // 8 content chunks -> 7 gaps each
  EXPECT_EQ(rep.tpot_ms.count, 12);
  EXPECT_GT(rep.generation_tok_s, 0);
  for (const RequestRecord& r : results.records) {
    EXPECT_GE(r.ttft_ms, 0);
    EXPECT_LE(r.ttft_ms, r.e2e_ms);
    EXPECT_EQ(r.num_content_chunks, 8);
    EXPECT_EQ(r.cached_tokens, 0);  // one message: nothing cached
  }
  // Every request asked for a fixed output length, streamed, with usage.
  for (const nlohmann::json& body : server.bodies()) {
    EXPECT_EQ(body["max_tokens"], 8);
    EXPECT_EQ(body["min_tokens"], 8);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
  }
  for (const std::string& t : server.targets()) EXPECT_EQ(t, "/v1/chat/completions");
}

TEST(BenchRunner, CompletionsEndpointWithBasePathAndApiKey) {
  StubServer server;
  BenchConfig c = base_config(server.url() + "/", "ok");
  c.endpoint = Endpoint::kCompletions;
  c.api_key = "sekrit";
  c.max_requests = 3;
  Report rep = run(c);
  EXPECT_EQ(rep.num_ok, 3);
  for (const std::string& t : server.targets()) EXPECT_EQ(t, "/v1/completions");
  for (const std::string& a : server.auth_headers()) EXPECT_EQ(a, "Bearer sekrit");
  for (const nlohmann::json& body : server.bodies()) EXPECT_TRUE(body.contains("prompt"));
}

TEST(BenchRunner, CloseFramedStreamWithMergedEventsCountsAsOk) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "ok-close");
  c.max_requests = 4;
  Report rep = run(c);
  EXPECT_EQ(rep.num_ok, 4);
  EXPECT_EQ(rep.completion_tokens, 4 * 8);
}

TEST(BenchRunner, WithoutUsageTokensFallBackToChunkCounts) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "ok-no-usage");
  c.max_requests = 3;
  RunResults results;
  Report rep = run(c, &results);
  EXPECT_EQ(rep.num_ok, 3);
  EXPECT_EQ(rep.num_usage_reported, 0);
  EXPECT_EQ(rep.num_cached_reported, 0);
  for (const RequestRecord& r : results.records) {
    EXPECT_FALSE(r.usage_reported);
    EXPECT_EQ(r.completion_tokens, 8);
    EXPECT_EQ(r.prompt_tokens, r.expected_prompt_tokens);
  }
}

struct ErrorCase {
  const char* model;
  const char* expected_class;
};

class BenchRunnerErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(BenchRunnerErrors, EveryRequestFailsWithItsClass) {
  StubServer server;
  BenchConfig c = base_config(server.url(), GetParam().model);
  c.max_requests = 3;
  c.concurrency = 3;
  c.timeout_s = 0.3;
  RunResults results;
  Report rep = run(c, &results);
  EXPECT_EQ(rep.num_sent, 3);
  EXPECT_EQ(rep.num_ok, 0);
  EXPECT_EQ(rep.num_failed, 3);
  ASSERT_EQ(rep.errors.size(), 1u);
  EXPECT_EQ(rep.errors.begin()->first, GetParam().expected_class);
  for (const RequestRecord& r : results.records) EXPECT_FALSE(r.detail.empty()) << r.error;
  EXPECT_EQ(rep.ttft_ms.count, 0);
  EXPECT_EQ(rep.generation_tok_s, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Classes, BenchRunnerErrors,
    ::testing::Values(ErrorCase{"500", "http_500"}, ErrorCase{"404", "http_404"},
                      ErrorCase{"stall-head", "timeout"}, ErrorCase{"stall-body", "timeout"},
                      ErrorCase{"malformed", "malformed_sse"}, ErrorCase{"close-mid", "incomplete_stream"},
                      ErrorCase{"no-done", "incomplete_stream"}, ErrorCase{"stream-error", "stream_error"},
                      ErrorCase{"not-sse", "malformed_sse"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) {
      std::string name = info.param.model;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return "model_" + name;
    });

TEST(BenchRunner, MixedFailuresAreCountedExactlyPerClass) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "mixed");
  c.max_requests = 21;  // three of each of the 7 behaviours
  c.concurrency = 7;
  c.timeout_s = 0.4;
  Report rep = run(c);
  EXPECT_EQ(rep.num_sent, 21);
  EXPECT_EQ(rep.num_ok, 3);
  EXPECT_EQ(rep.num_failed, 18);
  std::map<std::string, int64_t> expected = {{"http_500", 3},          {"timeout", 3},      {"malformed_sse", 3},
                                             {"incomplete_stream", 6}, {"stream_error", 3}};
  EXPECT_EQ(rep.errors, expected);
}

// No server listening: every request would be refused, so the run stops at the first
// refusal; only the requests already in flight (at most the concurrency) are counted.
TEST(BenchRunner, TheRunStopsAtTheFirstRefusedConnection) {
  BenchConfig c = base_config("http://127.0.0.1:" + std::to_string(StubServer::closed_port()), "ok");
  c.max_requests = 100;
  Report rep = run(c);
  EXPECT_GE(rep.num_sent, 1);
  EXPECT_LE(rep.num_sent, c.concurrency);
  EXPECT_EQ(rep.num_failed, rep.num_sent);
  EXPECT_EQ(rep.errors["connect_refused"], rep.num_sent);
  EXPECT_EQ(rep.e2e_ms.count, 0);
}

TEST(BenchRunner, UnparsableUrlGivesOneBadUrlRecord) {
  BenchConfig c = base_config("ftp://example.com", "ok");
  Report rep = run(c);
  EXPECT_EQ(rep.num_sent, 1);
  EXPECT_EQ(rep.errors["bad_url"], 1);
}

TEST(BenchRunner, MultiTurnResendsHistoryAndReportsCachedTokensPerTurn) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "ok");
  c.workload.kind = WorkloadKind::kMultiTurn;
  c.workload.turns = 3;
  c.concurrency = 2;  // two conversations at a time
  c.max_requests = 2 * 3;
  RunResults results;
  Report rep = run(c, &results);
  EXPECT_EQ(rep.num_ok, 6);  // the stub answers 400 when an assistant message differs from its answer
  ASSERT_EQ(rep.per_turn.size(), 3u);
  for (const TurnReport& t : rep.per_turn) {
    EXPECT_EQ(t.num_ok, 2);
    EXPECT_EQ(t.num_cached_reported, 2);
    EXPECT_EQ(t.ttft_ms.count, 2);
    if (t.turn_idx == 0) {
      EXPECT_EQ(t.cached_tokens, 0);
    } else {
      EXPECT_GT(t.cached_tokens, 0) << "turn " << t.turn_idx;
      EXPECT_GT(t.prompt_tokens, rep.per_turn[static_cast<size_t>(t.turn_idx) - 1].prompt_tokens);
    }
  }
  // Turn k carries 2k + 1 messages: user (assistant user)*k.
  for (const nlohmann::json& body : server.bodies()) {
    size_t n = body["messages"].size();
    EXPECT_EQ(n % 2, 1u);
    EXPECT_LE(n, 5u);
  }
}

TEST(BenchRunner, MultiTurnStopsAConversationAtItsFirstFailure) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "500");
  c.workload.kind = WorkloadKind::kMultiTurn;
  c.workload.turns = 4;
  c.concurrency = 2;
  c.max_requests = 8;
  Report rep = run(c);
  // The run has ceil(8 / 4) = 2 jobs; each stops after its failed first turn.
  EXPECT_EQ(rep.num_sent, 2);
  EXPECT_EQ(rep.errors["http_500"], 2);
}

TEST(BenchRunner, OpenLoopSendsAllRequestsAtThePoissonRate) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "ok");
  c.rate = 200;  // mean gap 5 ms
  c.max_requests = 10;
  c.concurrency = 64;
  RunResults results;
  Report rep = run(c, &results);
  EXPECT_EQ(rep.num_ok, 10);
  std::vector<double> scheduled;
  for (const RequestRecord& r : results.records) {
    scheduled.push_back(r.scheduled_s);
    EXPECT_GE(r.start_s + 1e-3, r.scheduled_s);
  }
  std::sort(scheduled.begin(), scheduled.end());
  EXPECT_GT(scheduled.front(), 0);
  EXPECT_LT(scheduled.back(), 1.0);  // 10 arrivals at 200/s: ~50 ms
}

TEST(BenchRunner, DurationBoundsARunAgainstAStallingServer) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "stall-head");
  c.max_requests = 1000;
  c.concurrency = 2;
  c.max_duration_s = 0.5;
  c.timeout_s = 0.2;
  auto t0 = std::chrono::steady_clock::now();
  Report rep = run(c);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // ~0.7 s; the failure (every request to its 0.2 s timeout) takes 1000 x 0.2 / 2 = 100 s.
  EXPECT_LT(took, 10.0);
  EXPECT_GE(rep.num_sent, 2);
  EXPECT_LE(rep.num_sent, 2 * 4);  // 2 workers, each at most ceil(0.5 / 0.2) requests
  EXPECT_EQ(rep.errors["timeout"], rep.num_sent);
}

TEST(BenchRunner, HangUpJobsAreSpreadEvenlyAndExactly) {
  BenchConfig c;
  auto count = [&](double f, int64_t jobs) {
    c.hangup_fraction = f;
    int64_t n = 0;
    for (int64_t j = 0; j < jobs; ++j) n += job_hangs_up(c, j) ? 1 : 0;
    return n;
  };
  EXPECT_EQ(count(0, 100), 0);
  EXPECT_EQ(count(1, 100), 100);
  EXPECT_EQ(count(0.5, 64), 32);
  EXPECT_EQ(count(0.25, 100), 25);
  EXPECT_EQ(count(0.3, 10), 3);
  c.hangup_fraction = 0.5;  // every other job: 1, 3, 5, ...
  for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(job_hangs_up(c, j), j % 2 == 1) << j;
}

TEST(BenchRunner, HangUpJobsCloseMidStreamAndAreCountedApart) {
  StubServer server;
  server.set_chunk_delay(std::chrono::milliseconds(2));
  BenchConfig c = base_config(server.url(), "ok");
  c.hangup_fraction = 0.5;
  c.hangup_after_chunks = 3;
  RunResults results;
  Report rep = run(c, &results);
  EXPECT_EQ(rep.num_sent, 12);
  EXPECT_EQ(rep.num_hung_up, 6);
  EXPECT_EQ(rep.num_ok, 6);
  EXPECT_EQ(rep.num_failed, 0);
  EXPECT_TRUE(rep.errors.empty());
  // Only the streams that ran to [DONE] are in the figures.
  EXPECT_EQ(rep.ttft_ms.count, 6);
  EXPECT_EQ(rep.completion_tokens, 6 * 8);
  for (const RequestRecord& r : results.records) {
    if (r.job_idx % 2 == 1) {
      EXPECT_EQ(r.error, kHungUp) << r.job_idx;
      EXPECT_EQ(r.num_content_chunks, 3);
      EXPECT_GE(r.ttft_ms, 0);
    } else {
      EXPECT_EQ(r.error, "ok") << r.job_idx << " " << r.detail;
      EXPECT_EQ(r.num_content_chunks, 8);
    }
  }
  // The counts survive the results file, and the report says what happened.
  RunResults back = results_from_json(nlohmann::json::parse(results_to_json(results).dump()));
  EXPECT_EQ(back.config.hangup_fraction, 0.5);
  EXPECT_EQ(back.config.hangup_after_chunks, 3);
  EXPECT_EQ(make_report(back).num_hung_up, 6);
  EXPECT_NE(format_report(results, rep).find("hung up on purpose: 6"), std::string::npos);
}

TEST(BenchRunner, AHungUpTurnEndsItsConversation) {
  StubServer server;
  server.set_chunk_delay(std::chrono::milliseconds(1));
  BenchConfig c = base_config(server.url(), "ok");
  c.workload.kind = WorkloadKind::kMultiTurn;
  c.workload.turns = 3;
  c.concurrency = 2;
  c.max_requests = 4 * 3;
  c.hangup_fraction = 0.5;
  c.hangup_after_chunks = 2;
  Report rep = run(c);
  // Jobs 0 and 2 run their 3 turns; jobs 1 and 3 stop after their first.
  EXPECT_EQ(rep.num_ok, 6);
  EXPECT_EQ(rep.num_hung_up, 2);
  EXPECT_EQ(rep.num_sent, 8);
}

TEST(BenchRunner, ProgressSeesEveryRecord) {
  StubServer server;
  BenchConfig c = base_config(server.url(), "ok");
  c.max_requests = 5;
  Workload w(c.workload, nullptr);
  int calls = 0;
  RunResults r = run_bench(c, w, [&](const RequestRecord&) { ++calls; });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(r.records.size(), 5u);
}

}  // namespace
}  // namespace pagoda::loadgen
