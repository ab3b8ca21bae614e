#include "kernels/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/huge_page_buffer.h"
#include "kernels/cpu_features.h"

#if defined(__x86_64__)
// GCC 12 flags its own _mm512_undefined_*() as uninitialized once inlined (bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace pagoda {

namespace {

// One thread's read of [p, p + n) (n a multiple of 256 bytes, p 64-byte aligned) with the
// widest loads the CPU has. The scalar 8-byte loop this replaced was core-bound: on the
// Intel Xeon of 2026-12-01 (2 vCPUs) it read 17-19 GB/s where 64-byte loads read 26 GB/s,
// so Q8_0 / F16 decode measured at 106-140% of "the roofline". Four independent
// accumulators keep the loads from waiting on one dependency chain.
using ReadFn = uint64_t (*)(const uint8_t* p, size_t n);

uint64_t read_scalar(const uint8_t* p, size_t n) {
  const uint64_t* b = reinterpret_cast<const uint64_t*>(p);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < n / 8; i += 4) {
    a0 ^= b[i];
    a1 ^= b[i + 1];
    a2 ^= b[i + 2];
    a3 ^= b[i + 3];
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

#if defined(__x86_64__) && !defined(PAGODA_AVX512_EMULATION)
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  // An OR, not an add, folds the lanes: a signed add of arbitrary bits overflows (UB).
  return static_cast<uint64_t>(_mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3))));
}
#endif

// By the CPU, not by PAGODA_ISA: the roofline is what the hardware can stream.
ReadFn widest_read() {
#if defined(__x86_64__) && !defined(PAGODA_AVX512_EMULATION)
  const CpuFeatures& f = cpu_features();
  if (f.avx512f) return read_avx512;
  if (f.avx2) return read_avx2;
#endif
  return read_scalar;
}

}  // namespace

struct BandwidthProbe::Impl {
  Impl(ThreadPool& p, size_t bytes) : pool(p), mem(bytes / 256 * 256), lines(bytes / 256) {
    uint64_t* buf = reinterpret_cast<uint64_t*>(mem.data());
    const size_t n = lines * 256 / sizeof(uint64_t);
    // Touch every page with distinct values so the reads hit real memory, not a shared zero page.
    pool.parallel_for(pool.num_threads(), [&](int64_t t, int) {
      size_t lo = n * t / pool.num_threads(), hi = n * (t + 1) / pool.num_threads();
      for (size_t i = lo; i < hi; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
    });
    sinks.assign(static_cast<size_t>(pool.num_threads()) * 8, 0);
  }
  double read_once() {
    // Chunks of whole 256-byte lines so every read function sees aligned, full strides.
    const int64_t chunks = pool.num_threads() * 16;
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(chunks, [&](int64_t c, int thread) {
      const size_t lo = lines * c / chunks, hi = lines * (c + 1) / chunks;
      sinks[thread * 8] ^= read(mem.data() + lo * 256, (hi - lo) * 256);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(lines * 256) / s;
  }
  ThreadPool& pool;
  // Huge pages like the weights it stands in for (HugePageBuffer): the roofline is the
  // rate at which the weights can stream, not a TLB-miss-bound 4 KiB-page rate.
  HugePageBuffer mem;
  size_t lines;
  std::vector<uint64_t> sinks;
  const ReadFn read = widest_read();
  bool warm = false;
};

BandwidthProbe::BandwidthProbe(ThreadPool& pool, size_t bytes) : impl_(std::make_unique<Impl>(pool, bytes)) {}

BandwidthProbe::~BandwidthProbe() {
  volatile uint64_t keep = 0;
  for (uint64_t v : impl_->sinks) keep = keep ^ v;
  (void)keep;
}

void BandwidthProbe::run(int n) {
  if (!impl_->warm) {
    impl_->read_once();
    impl_->warm = true;
  }
  for (int i = 0; i < n; ++i) rates_.push_back(impl_->read_once());
}

BandwidthSummary BandwidthProbe::summary() const {
  BandwidthSummary s;
  if (rates_.empty()) return s;
  std::vector<double> r = rates_;
  std::sort(r.begin(), r.end());
  s.min = r.front();
  s.max = r.back();
  s.median = r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2;
  s.passes = static_cast<int>(r.size());
  return s;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  BandwidthProbe probe(pool, bytes);
  probe.run(repeats);
  return probe.summary().median;
}

}  // namespace pagoda
