// Memory read bandwidth, measured, for the decode roofline (a decode step must
// stream every weight byte once, so tokens/s <= bandwidth / weight bytes).
#pragma once

#include <cstddef>

#include "common/thread_pool.h"

namespace pagoda {

// Streams a buffer of `bytes` (much larger than the caches) `repeats` times over
// all threads of `pool`; returns the median bytes per second. Allocates the buffer.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace pagoda
