// Memory read bandwidth, measured, for the decode roofline (a decode step must
// stream every weight byte once, so tokens/s <= bandwidth / weight bytes).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/thread_pool.h"

namespace pagoda {

// Min / median / max of the passes a probe timed (bytes per second; 0 with none).
struct BandwidthSummary {
  double min = 0, median = 0, max = 0;
  int passes = 0;
};

// A read-bandwidth probe whose passes can be spread over a benchmark. On a shared VM the
// bandwidth drifts by 2x within minutes (28-59 GB/s on one Zen 4 run), so one probe before
// or after the runs measures another machine than the runs saw; interleaving a pass with
// each run and taking the median of all of them makes "fraction of the roofline" refer to
// the same minutes. Owns a buffer of `bytes` (huge pages, every page touched) until
// destroyed; call from the pool's owner thread.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(ThreadPool& pool, size_t bytes = size_t{1} << 30);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;
  // Times `n` reads of the whole buffer over all threads (the probe's first read is an
  // untimed warm-up) and keeps their rates.
  void run(int n = 1);
  BandwidthSummary summary() const;
  const std::vector<double>& rates() const { return rates_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<double> rates_;
};

// One probe of `repeats` passes at once; the median bytes per second.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace pagoda
