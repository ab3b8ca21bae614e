// Percentiles on known data (numpy's "linear" definition).
#include "loadgen/stats.h"

#include <gtest/gtest.h>

namespace pagoda::loadgen {
namespace {

TEST(BenchPercentile, OneToTenMatchesNumpyLinear) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  // numpy.percentile(range(1, 11), [0, 10, 50, 90, 99, 100]) = 1, 1.9, 5.5, 9.1, 9.91, 10
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 10), 1.9);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 90), 9.1);
  EXPECT_NEAR(percentile_sorted(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 100), 10);
}

TEST(BenchPercentile, SingleSampleIsEveryPercentile) {
  std::vector<double> v = {42};
  for (double p : {0.0, 50.0, 99.0, 100.0}) EXPECT_DOUBLE_EQ(percentile_sorted(v, p), 42);
}

TEST(BenchSummarize, SortsAndOrdersItsPercentiles) {
  Summary s = summarize({9, 1, 5, 3, 7, 100});
  EXPECT_EQ(s.count, 6);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 125.0 / 6);
  EXPECT_DOUBLE_EQ(s.p50, 6);  // between 5 and 7
  EXPECT_LE(s.p10, s.p50);
  EXPECT_LE(s.p50, s.p90);
  EXPECT_LE(s.p90, s.p99);
  EXPECT_LE(s.p99, s.max);
}

TEST(BenchSummarize, NoSamplesGivesZeros) {
  Summary s = summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p99, 0);
  EXPECT_EQ(s.mean, 0);
}

}  // namespace
}  // namespace pagoda::loadgen
