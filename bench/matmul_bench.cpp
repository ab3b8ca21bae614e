// Matmul throughput at TinyLlama-1.1B shapes (dim 2048, FFN 5632, vocab 32000),
// per weight type and ISA: matvec (decode, 1 token) reports bytes/s of weights
// streamed (compare with MemoryReadBandwidth, the roofline), the 8-token matmul (eight
// decoding streams; weights cold like matvec's) and the 512-token one (prefill) report
// ops/s (2 x rows x cols x tokens).
//
//   matmul_bench [--benchmark_filter=Matvec/q4_0] ; PAGODA_THREADS=n (default:
//   all CPUs this process may use); PAGODA_BENCH_HOT=1 (see cold_bytes). Random weights: speed does not depend on
//   the values, only on the scales being finite normal numbers (denormals or
//   NaNs could slow the float parts), so the f16 scale fields are set to 0.01.
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "tensor/types.h"

namespace pagoda {
namespace {

ThreadPool& bench_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("PAGODA_THREADS");
    return env ? std::max(1, std::atoi(env)) : ThreadPool::default_num_threads();
  }());
  return pool;
}

std::vector<uint8_t> random_weights(GgmlType type, int64_t n_rows, int64_t n_cols) {
  const TypeTraits& tt = traits(type);
  std::vector<uint8_t> w(row_bytes(type, n_cols) * n_rows);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&w[i], &v, 8);
  }
  if (type == GgmlType::F32) {
    for (size_t i = 0; i < w.size(); i += 4) {
      const float f = static_cast<float>(w[i] % 200) / 100.0f - 1.0f;
      std::memcpy(&w[i], &f, 4);
    }
    return w;
  }
  if (!tt.is_quantized) {
    for (size_t i = 0; i < w.size(); i += 2) {
      const uint16_t h = type == GgmlType::F16 ? f32_to_f16(static_cast<float>(w[i] % 200) / 100.0f - 1.0f)
                                               : f32_to_bf16(static_cast<float>(w[i] % 200) / 100.0f - 1.0f);
      std::memcpy(&w[i], &h, 2);
    }
    return w;
  }
  const f16_t s = f32_to_f16(0.01f);
  for (size_t off = 0; off < w.size(); off += tt.type_size) {
    if (type == GgmlType::Q6_K) {
      std::memcpy(&w[off + 208], &s, 2);
    } else if (type == GgmlType::Q2_K) {
      std::memcpy(&w[off + 80], &s, 2);
      std::memcpy(&w[off + 82], &s, 2);
    } else if (type == GgmlType::Q3_K) {
      std::memcpy(&w[off + 108], &s, 2);
    } else if (type == GgmlType::MXFP4) {
      w[off] = 121;  // 2^-7
    } else if (type == GgmlType::IQ4_NL || type == GgmlType::IQ4_XS) {
      std::memcpy(&w[off], &s, 2);
    } else {
      std::memcpy(&w[off], &s, 2);
      if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && type != GgmlType::Q5_0) std::memcpy(&w[off + 2], &s, 2);
    }
  }
  return w;
}

struct Shape {
  const char* name;
  int64_t n_rows, n_cols;
};
constexpr Shape kShapes[] = {
    {"2048x2048", 2048, 2048},    // wq, wo (wk/wv are 256x2048 with 4 KV heads)
    {"5632x2048", 5632, 2048},    // w1, w3 (gate, up)
    {"2048x5632", 2048, 5632},    // w2 (down)
    {"32000x2048", 32000, 2048},  // output
};

// Decode streams each weight from DRAM once per token; a matrix smaller than
// the L3 (32 MiB) would be served from cache when benchmarked alone, so
// matvec (and the 8-token matmul) cycles through copies totalling >= cold_bytes(). PAGODA_BENCH_HOT=1
// benchmarks one copy instead (cache-resident for the smaller shapes), which
// shows how far a kernel is from being compute-bound at decode.
size_t cold_bytes() { return std::getenv("PAGODA_BENCH_HOT") ? 0 : size_t{256} << 20; }

// Copies of a random `type` matrix of `shape`, prepared for `isa`, as many as total at
// least `bytes` (at least one): cycling through them streams the weights from DRAM.
// `sources` holds the GGUF bytes of the copies that still read them (the Scalar level).
struct WeightCopies {
  std::vector<std::vector<uint8_t>> sources;
  std::vector<WeightMatrix> mats;
};
WeightCopies weight_copies(GgmlType type, Isa isa, Shape shape, size_t bytes) {
  const size_t gguf_bytes = row_bytes(type, shape.n_cols) * shape.n_rows;
  const size_t n_copies = std::max<size_t>(1, (bytes + gguf_bytes - 1) / gguf_bytes);
  WeightCopies c;
  for (size_t i = 0; i < n_copies; ++i) {
    std::vector<uint8_t> src = random_weights(type, shape.n_rows, shape.n_cols);
    c.mats.push_back(WeightMatrix::prepare(type, shape.n_rows, shape.n_cols, src.data(), isa));
    if (!c.mats.back().reads_own_copy()) c.sources.push_back(std::move(src));
  }
  return c;
}

// n activations, standard normal, the same for every benchmark.
std::vector<float> random_acts(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  return x;
}

void run_matmul(benchmark::State& state, GgmlType type, Isa isa, Shape shape, int64_t n_tokens) {
  const WeightCopies copies = weight_copies(type, isa, shape, n_tokens <= 8 ? cold_bytes() : 0);
  const std::vector<WeightMatrix>& mats = copies.mats;
  const std::vector<float> x = random_acts(n_tokens * shape.n_cols);
  std::vector<float> y(static_cast<size_t>(n_tokens * shape.n_rows));
  ThreadPool& pool = bench_pool();
  for (const WeightMatrix& m : mats) matmul(m, x.data(), n_tokens, y.data(), pool);  // warm: scratch, pages
  size_t next = 0;
  for (auto _ : state) {
    matmul(mats[next], x.data(), n_tokens, y.data(), pool);
    next = next + 1 == mats.size() ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(mats[0].stream_bytes()) * iters,
                                                 benchmark::Counter::kIsRate);
  state.counters["ops/s"] = benchmark::Counter(2.0 * shape.n_rows * shape.n_cols * n_tokens * iters,
                                               benchmark::Counter::kIsRate);
  state.counters["threads"] = pool.num_threads();
}

// A layer's attention inputs at decode: wq 2048x2048, wk and wv 256x2048
// (TinyLlama, 4 KV heads) on one token, as three matmul() calls (fused = 0)
// or one matmul_multi() (fused = 1: one quantization, one pool job). Copies
// cycle as in run_matmul so the weights come from DRAM.
void BM_MatvecQkv(benchmark::State& state, GgmlType type, bool fused) {
  const int64_t dim = 2048, kv_dim = 256;
  const int64_t rows[3] = {dim, kv_dim, kv_dim};
  const size_t set_bytes = row_bytes(type, dim) * (dim + 2 * kv_dim);
  const size_t n_sets = std::max<size_t>(1, (cold_bytes() + set_bytes - 1) / set_bytes);
  std::vector<std::vector<uint8_t>> sources;
  std::vector<WeightMatrix> mats;
  for (size_t c = 0; c < n_sets; ++c)
    for (int64_t r : rows) {
      sources.push_back(random_weights(type, r, dim));
      mats.push_back(WeightMatrix::prepare(type, r, dim, sources.back().data()));
    }
  const std::vector<float> x = random_acts(dim);
  std::vector<float> y(dim + 2 * kv_dim);
  ThreadPool& pool = bench_pool();
  float* ys[3] = {y.data(), y.data() + dim, y.data() + dim + kv_dim};
  size_t next = 0;
  for (auto _ : state) {
    const WeightMatrix* m = &mats[3 * next];
    if (fused) {
      const MatmulTarget t[] = {{m, ys[0]}, {m + 1, ys[1]}, {m + 2, ys[2]}};
      matmul_multi(t, x.data(), 1, pool);
    } else {
      for (int i = 0; i < 3; ++i) matmul(m[i], x.data(), 1, ys[i], pool);
    }
    next = next + 1 == n_sets ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(set_bytes) * state.iterations(),
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = pool.num_threads();
}

// Decode's fraction of the roofline, measured in pairs: a probe pass (256 MiB) right
// before each full cycle through the copies (>= 256 MiB), so each kernel rate is set
// beside the bandwidth of the same second. This VM's memory flips between ~35 and ~62
// GB/s (two threads) within seconds; a probe median taken over minutes mixes the two
// and a kernel's "fraction" then says more about the minute than about the kernel.
// Counters: ratio (median of kernel / probe over the pairs), ratio_fast (the same over
// the pairs whose probe read at or above the pairs' 3rd quartile: the fast phase),
// probe_min / probe_max, and bytes/s (the kernel's median).
void run_matvec_paired(benchmark::State& state, GgmlType type, Shape shape) {
  const WeightCopies copies = weight_copies(type, best_isa(), shape, size_t{256} << 20);
  const std::vector<WeightMatrix>& mats = copies.mats;
  const std::vector<float> x = random_acts(shape.n_cols);
  std::vector<float> y(static_cast<size_t>(shape.n_rows));
  ThreadPool& pool = bench_pool();
  BandwidthProbe probe(pool, size_t{256} << 20);
  for (const WeightMatrix& m : mats) matmul(m, x.data(), 1, y.data(), pool);
  std::vector<double> kernel_rates;
  for (auto _ : state) {
    probe.run(1);
    const auto t0 = std::chrono::steady_clock::now();
    for (const WeightMatrix& m : mats) matmul(m, x.data(), 1, y.data(), pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kernel_rates.push_back(static_cast<double>(mats[0].stream_bytes() * mats.size()) / s);
    benchmark::DoNotOptimize(y.data());
  }
  const std::vector<double>& probe_rates = probe.rates();
  const size_t n = kernel_rates.size();
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> ratios, fast;
  std::vector<double> sorted_probe = probe_rates;
  std::sort(sorted_probe.begin(), sorted_probe.end());
  const double q3 = sorted_probe.empty() ? 0 : sorted_probe[sorted_probe.size() * 3 / 4];
  for (size_t i = 0; i < n; ++i) {
    ratios.push_back(kernel_rates[i] / probe_rates[i]);
    if (probe_rates[i] >= q3) fast.push_back(kernel_rates[i] / probe_rates[i]);
  }
  state.counters["bytes/s"] = median(kernel_rates);
  state.counters["ratio"] = median(ratios);
  state.counters["ratio_fast"] = median(fast);
  state.counters["probe_min"] = sorted_probe.empty() ? 0 : sorted_probe.front();
  state.counters["probe_max"] = sorted_probe.empty() ? 0 : sorted_probe.back();
  state.counters["threads"] = pool.num_threads();
}

void BM_MemoryReadBandwidth(benchmark::State& state) {
  double bw = 0;
  for (auto _ : state) bw = measure_read_bandwidth(bench_pool(), size_t{1} << 30, 5);
  state.counters["bytes/s"] = bw;
  state.counters["threads"] = bench_pool().num_threads();
}

// The same with 16-byte loads and 8 independent accumulators per thread: the
// scalar 8-byte loop of measure_read_bandwidth issues 2x the loads and can
// read low on a busy core. The roofline is the better of the two.
void BM_MemoryReadBandwidthSse(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30, n = bytes / 16;
  ThreadPool& pool = bench_pool();
  auto* buf = static_cast<__m128i*>(std::aligned_alloc(64, bytes));
  pool.parallel_for(pool.num_threads(), [&](int64_t t, int) {
    auto* b = reinterpret_cast<uint64_t*>(buf);
    for (size_t i = bytes / 8 * t / pool.num_threads(); i < bytes / 8 * (t + 1) / pool.num_threads(); ++i)
      b[i] = i * 0x9E3779B97F4A7C15ull;
  });
  const int64_t chunks = pool.num_threads() * 16;
  std::vector<uint64_t> sinks(2 * pool.num_threads());
  for (auto _ : state) {
    pool.parallel_for(chunks, [&](int64_t c, int thread) {
      const size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      __m128i a[8];
      for (__m128i& v : a) v = _mm_setzero_si128();
      size_t i = lo;
      for (; i + 8 <= hi; i += 8)
        for (int j = 0; j < 8; ++j) a[j] = _mm_or_si128(a[j], _mm_load_si128(buf + i + j));
      for (int j = 1; j < 8; ++j) a[0] = _mm_or_si128(a[0], a[j]);
      uint64_t out[2];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), a[0]);
      sinks[2 * thread] ^= out[0] ^ out[1];
    });
    benchmark::DoNotOptimize(sinks.data());
  }
  std::free(buf);
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations(),
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = pool.num_threads();
}

void register_all() {
  benchmark::RegisterBenchmark("MemoryReadBandwidth", BM_MemoryReadBandwidth)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("MemoryReadBandwidthSse", BM_MemoryReadBandwidthSse)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0})
    for (bool fused : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("MatvecQkv/") + type_name(type) + (fused ? "/fused" : "/separate")).c_str(),
          [=](benchmark::State& st) { BM_MatvecQkv(st, type, fused); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::BF16,
                        GgmlType::F16})
    for (const Shape& s : {kShapes[1], kShapes[2]})
      benchmark::RegisterBenchmark((std::string("MatvecPaired/") + type_name(type) + "/" + s.name).c_str(),
                                   [=](benchmark::State& st) { run_matvec_paired(st, type, s); })
          ->Unit(benchmark::kMillisecond)
          ->Iterations(24);
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16,  GgmlType::Q4_K,
                            GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q4_1, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::BF16, GgmlType::F32,  GgmlType::Q2_K,
                            GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
  for (const char* kind : {"Matvec", "Matmul8", "Matmul512"}) {
    const int64_t n_tokens = std::strcmp(kind, "Matvec") == 0 ? 1 : std::strcmp(kind, "Matmul8") == 0 ? 8 : 512;
    for (GgmlType type : types)
      for (Isa isa : {Isa::Amx, Isa::Avx512, Isa::Avx2, Isa::Scalar}) {
        if (!isa_supported(isa)) continue;
        // The scalar kernels are references; 512 tokens would take minutes.
        if (isa == Isa::Scalar && n_tokens > 1) continue;
        for (const Shape& s : kShapes) {
          const std::string name =
              std::string(kind) + "/" + type_name(type) + "/" + isa_name(isa) + "/" + s.name;
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
            run_matmul(st, type, isa, s, n_tokens);
          })->Unit(n_tokens > 1 ? benchmark::kMillisecond : benchmark::kMicrosecond)->UseRealTime();
        }
      }
  }
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  pagoda::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
