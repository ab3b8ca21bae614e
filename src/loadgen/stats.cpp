#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace pagoda::loadgen {

double percentile_sorted(std::span<const double> sorted, double p) {
  PAGODA_CHECK(!sorted.empty(), "percentile of no samples");
  PAGODA_CHECK(p >= 0 && p <= 100, "percentile out of [0, 100]");
  double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.min = values.front();
  s.max = values.back();
  s.p10 = percentile_sorted(values, 10);
  s.p50 = percentile_sorted(values, 50);
  s.p90 = percentile_sorted(values, 90);
  s.p99 = percentile_sorted(values, 99);
  return s;
}

}  // namespace pagoda::loadgen
