// BandwidthProbe: passes accumulate across run() calls, the summary orders them, and the
// one-shot measure_read_bandwidth is the median of its passes.
#include "kernels/membw.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace pagoda {
namespace {

TEST(BandwidthProbe, PassesAccumulateAndTheSummaryOrdersThem) {
  ThreadPool pool(2);
  BandwidthProbe probe(pool, size_t{16} << 20);
  EXPECT_EQ(probe.summary().passes, 0);
  EXPECT_EQ(probe.summary().median, 0.0);
  probe.run(3);
  probe.run(2);  // e.g. beside the next repeat
  const BandwidthSummary s = probe.summary();
  ASSERT_EQ(s.passes, 5);
  ASSERT_EQ(probe.rates().size(), 5u);
  std::vector<double> r = probe.rates();
  std::sort(r.begin(), r.end());
  EXPECT_EQ(s.min, r.front());
  EXPECT_EQ(s.max, r.back());
  EXPECT_EQ(s.median, r[2]);
  EXPECT_GT(s.min, 1e8);  // any machine streams 16 MiB faster than 100 MB/s
  // An even count: the mean of the middle two.
  probe.run(1);
  r = probe.rates();
  std::sort(r.begin(), r.end());
  EXPECT_DOUBLE_EQ(probe.summary().median, (r[2] + r[3]) / 2);
}

TEST(BandwidthProbe, OneShotIsThePositiveMedian) {
  ThreadPool pool(1);
  EXPECT_GT(measure_read_bandwidth(pool, size_t{8} << 20, 3), 1e8);
}

}  // namespace
}  // namespace pagoda
