// Summary statistics for latency samples.
//
// Percentile definition (stated once, used everywhere in pagoda bench): linear
// interpolation between the closest ranks — numpy's default ("linear",
// Hyndman & Fan type 7). For sorted x[0..n-1] and p in [0, 100]:
//   h = (n - 1) * p / 100,  P(p) = x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h]).
// So P(0) = min, P(100) = max, P(50) of {1, 2, 3, 4} = 2.5. Chosen over
// nearest-rank because it is what vLLM's and SGLang's benchmark scripts report
// (both call numpy.percentile), so numbers compare across tools.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda::loadgen {

// Requires: `sorted` is non-empty and ascending; 0 <= p <= 100.
double percentile_sorted(std::span<const double> sorted, double p);

struct Summary {
  int64_t count = 0;  // all other fields are 0 when count == 0
  double mean = 0, min = 0, p10 = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Summary summarize(std::vector<double> values);

}  // namespace pagoda::loadgen
