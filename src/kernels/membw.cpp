#include "kernels/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/huge_page_buffer.h"

namespace pagoda {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  // Huge pages like the weights it stands in for (HugePageBuffer): the roofline is the
  // rate at which the weights can stream, not a TLB-miss-bound 4 KiB-page rate.
  HugePageBuffer mem(n * sizeof(uint64_t));
  uint64_t* buf = reinterpret_cast<uint64_t*>(mem.data());
  // Touch every page with distinct values so the reads hit real memory, not a shared zero page.
  pool.parallel_for(pool.num_threads(), [&](int64_t t, int) {
    size_t lo = n * t / pool.num_threads(), hi = n * (t + 1) / pool.num_threads();
    for (size_t i = lo; i < hi; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  });
  std::vector<double> rates;
  std::vector<uint64_t> sinks(pool.num_threads() * 8);
  const int64_t chunks = pool.num_threads() * 16;
  for (int r = 0; r < repeats + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(chunks, [&](int64_t c, int thread) {
      size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      size_t i = lo;
      for (; i + 4 <= hi; i += 4) {
        a0 ^= buf[i];
        a1 ^= buf[i + 1];
        a2 ^= buf[i + 2];
        a3 ^= buf[i + 3];
      }
      for (; i < hi; ++i) a0 ^= buf[i];
      sinks[thread * 8] ^= a0 ^ a1 ^ a2 ^ a3;
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(n * sizeof(uint64_t)) / s);  // first run warms up
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sinks) keep = keep ^ v;
  (void)keep;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace pagoda
