// The report derived from records, the JSON round trip, the text table and
// --compare.
#include "loadgen/results.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace pagoda::loadgen {
namespace {

RequestRecord ok_record(int64_t job, int turn, double ttft, double e2e, int64_t completion, int64_t cached) {
  RequestRecord r;
  r.job_idx = job;
  r.turn_idx = turn;
  r.ttft_ms = ttft;
  r.e2e_ms = e2e;
  r.itl_ms = {1.0, 2.0};
  r.num_content_chunks = 3;
  r.usage_reported = true;
  r.prompt_tokens = 100;
  r.completion_tokens = completion;
  r.cached_tokens = cached;
  r.max_tokens = 9;
  return r;
}

RunResults sample(WorkloadKind kind) {
  RunResults r;
  r.config.url = "http://127.0.0.1:8080";
  r.config.api_key = "secret";
  r.config.workload.kind = kind;
  r.config.workload.seed = 123456789012345ull;
  r.config.concurrency = 4;
  r.config.max_requests = 5;
  r.config.max_duration_s = 60;
  r.config.label = "pagoda <cache on>";
  r.duration_s = 2.0;
  r.records.push_back(ok_record(0, 0, 10, 110, 9, 0));
  r.records.push_back(ok_record(0, 1, 5, 85, 9, 80));
  r.records.push_back(ok_record(1, 0, 20, 120, 5, 0));
  RequestRecord fail;
  fail.error = "http_500";
  fail.http_status = 500;
  fail.detail = "HTTP 500: boom";
  r.records.push_back(fail);
  fail.error = "timeout";
  r.records.push_back(fail);
  return r;
}

TEST(BenchProgress, DoneOfTotalAndAnEtaBoundedByTheDuration) {
  EXPECT_EQ(progress_line(25, 100, 1, 10.0, 600.0), "25/100 done, 1 failed, 10 s elapsed, ETA 30 s");
  EXPECT_EQ(progress_line(25, 100, 0, 10.0, 20.0), "25/100 done, 0 failed, 10 s elapsed, ETA 10 s");  // the cap
  EXPECT_EQ(progress_line(100, 100, 0, 40.0, 600.0), "100/100 done, 0 failed, 40 s elapsed, ETA 0 s");
  EXPECT_EQ(progress_line(0, 100, 0, 1.0, 60.0), "0/100 done, 0 failed, 1 s elapsed, ETA 59 s");
}

TEST(BenchReport, CountsTokensRatesAndTurns) {
  Report rep = make_report(sample(WorkloadKind::kMultiTurn));
  EXPECT_EQ(rep.num_sent, 5);
  EXPECT_EQ(rep.num_ok, 3);
  EXPECT_EQ(rep.num_failed, 2);
  EXPECT_EQ(rep.errors, (std::map<std::string, int64_t>{{"http_500", 1}, {"timeout", 1}}));
  EXPECT_EQ(rep.completion_tokens, 23);
  EXPECT_DOUBLE_EQ(rep.generation_tok_s, 23 / 2.0);
  EXPECT_DOUBLE_EQ(rep.prompt_tok_s, 300 / 2.0);
  EXPECT_EQ(rep.cached_tokens, 80);
  EXPECT_EQ(rep.num_output_len_honoured, 2);  // 9 == max_tokens twice, 5 once
  EXPECT_EQ(rep.itl_ms.count, 6);
  EXPECT_DOUBLE_EQ(rep.ttft_ms.p50, 10);
  // TPOT = (e2e - ttft) / (completion - 1): 100/8, 80/8, 100/4.
  EXPECT_DOUBLE_EQ(rep.tpot_ms.mean, (12.5 + 10 + 25) / 3);
  ASSERT_EQ(rep.per_turn.size(), 2u);
  EXPECT_EQ(rep.per_turn[0].num_ok, 2);
  EXPECT_EQ(rep.per_turn[0].cached_tokens, 0);
  EXPECT_EQ(rep.per_turn[1].cached_tokens, 80);
  EXPECT_DOUBLE_EQ(rep.per_turn[1].ttft_ms.p50, 5);
}

TEST(BenchReport, OtherWorkloadsHaveNoPerTurnRows) {
  EXPECT_TRUE(make_report(sample(WorkloadKind::kRandom)).per_turn.empty());
}

TEST(BenchResultsJson, RoundTripGivesTheSameReportAndHidesTheApiKey) {
  RunResults a = sample(WorkloadKind::kMultiTurn);
  nlohmann::ordered_json j = results_to_json(a);
  EXPECT_EQ(j.dump().find("secret"), std::string::npos);
  RunResults b = results_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report_to_json(make_report(a)).dump(), report_to_json(make_report(b)).dump());
  EXPECT_EQ(results_to_json(b).dump(), j.dump());
  EXPECT_EQ(b.config.workload.seed, 123456789012345ull);
  EXPECT_EQ(b.config.label, "pagoda <cache on>");
  EXPECT_EQ(b.records[3].detail, "HTTP 500: boom");
  EXPECT_EQ(j["summary"]["requests_ok"], 3);
}

TEST(BenchResultsJson, FileRoundTripAndErrorsNameTheProblem) {
  auto dir = std::filesystem::temp_directory_path() / ("loadgen_results_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "r.json").string();
  write_results_file(path, sample(WorkloadKind::kRandom));
  EXPECT_EQ(read_results_file(path).records.size(), 5u);
  EXPECT_THROW(read_results_file((dir / "missing.json").string()), Error);
  std::ofstream(dir / "bad.json") << "{\"format\":\"pagoda-bench/1\"}";
  try {
    read_results_file((dir / "bad.json").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "junk.json") << "not json";
  EXPECT_THROW(read_results_file((dir / "junk.json").string()), Error);
  std::filesystem::remove_all(dir);
}

TEST(BenchFormatReport, ShowsCountsErrorClassesAndApproxLabel) {
  RunResults r = sample(WorkloadKind::kMultiTurn);
  std::string text = format_report(r, make_report(r));
  EXPECT_NE(text.find("5 sent, 3 ok, 2 failed"), std::string::npos) << text;
  EXPECT_NE(text.find("http_500"), std::string::npos);
  EXPECT_NE(text.find("approx"), std::string::npos);
  EXPECT_NE(text.find("TTFT"), std::string::npos);
  EXPECT_NE(text.find("cached tok"), std::string::npos);  // the per-turn table
}

TEST(BenchFormatCompare, PrintsBothRunsAndRatios) {
  RunResults a = sample(WorkloadKind::kMultiTurn), b = sample(WorkloadKind::kMultiTurn);
  a.config.label = "off";
  b.config.label = "on";
  for (RequestRecord& r : b.records) r.ttft_ms /= 2;
  std::string text = format_compare(a, b);
  EXPECT_NE(text.find("off"), std::string::npos) << text;
  EXPECT_NE(text.find("b/a"), std::string::npos);
  // TTFT p50: 10 -> 5 gives a ratio of 0.500; turn 2: 5 -> 2.5.
  size_t row = text.find("TTFT ms p50");
  ASSERT_NE(row, std::string::npos);
  EXPECT_NE(text.substr(row, text.find('\n', row) - row).find("0.500"), std::string::npos) << text;
  EXPECT_NE(text.find("turn 2 TTFT p50 ms"), std::string::npos);
  // Zero in a: no ratio.
  size_t failed = text.find("requests failed");
  EXPECT_NE(text.substr(failed, text.find('\n', failed) - failed).find("1.000"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::loadgen
