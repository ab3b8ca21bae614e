// Request-body parse time against body size (#31): a body whose ignored field holds an
// array of `{}`, the shape that made the old depth-limited parse quadratic.
//
//   BM_BoundedParse/<KiB>: common/json_parse.h (a linear depth scan, then nlohmann's
//     parser without a callback): what every route uses.
//   BM_CallbackParse/<KiB>: nlohmann's parser with a depth-limit callback, as parse_body
//     did before: after each closed object its DOM builder rescans the parent array.
//     Sizes stop at 512 KiB (5.6 s there; 8 MiB would take ~24 minutes).
// Counter: MB_per_s (body bytes / time). Run: build/release/bench/json_parse_bench
#include <benchmark/benchmark.h>

#include <string>

#include "common/json_parse.h"

namespace {

std::string body_of(size_t bytes) {
  std::string body = R"({"model":"m","prompt":"hi","ignored":[)";
  while (body.size() < bytes) body += "{},";
  return body + "{}]}";
}

void BM_BoundedParse(benchmark::State& state) {
  const std::string body = body_of(static_cast<size_t>(state.range(0)) << 10);
  for (auto _ : state) benchmark::DoNotOptimize(pagoda::parse_ordered_json_or_discarded(body));
  state.counters["MB_per_s"] =
      benchmark::Counter(static_cast<double>(body.size()) * state.iterations() / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BoundedParse)->RangeMultiplier(4)->Range(32, 8192)->Unit(benchmark::kMillisecond);

void BM_CallbackParse(benchmark::State& state) {
  const std::string body = body_of(static_cast<size_t>(state.range(0)) << 10);
  for (auto _ : state) {
    benchmark::DoNotOptimize(nlohmann::ordered_json::parse(
        body, [](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) { return depth <= 64; }));
  }
  state.counters["MB_per_s"] =
      benchmark::Counter(static_cast<double>(body.size()) * state.iterations() / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CallbackParse)->RangeMultiplier(4)->Range(32, 512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
