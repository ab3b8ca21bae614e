// Prefix cache benchmarks (#4).
//
//   BM_TtftCold: time to first token of a 2,050-token prompt with nothing cached (one
//     prefill batch + the first logits), synthetic llama (dim 512, 8 layers, 8 heads /
//     2 KV heads of 64, ffn 1536, vocab 4096, Q8_0 weights), f16 KV, block size 32.
//   BM_TtftCachedHistory: the same prompt as the next turn of a conversation whose
//     2,000-token history is cached: lookup + borrow, prefill of the 50-token new message
//     (+ nothing else), first logits. The ratio of the two is the cache's TTFT speedup;
//     it grows with model size (prefill cost per token grows, lookup cost does not).
//   BM_LookupBorrow/<n_tokens>: lookup() + release of a fully cached n_tokens prompt
//     (hashing every block, walking the index, borrowing every block). No K/V is touched,
//     so the cost does not depend on the KV geometry: a 1-layer, 1-head pool keeps the
//     bench's memory small.
//   BM_InsertAlreadyCached/<n_tokens>: insert() of a sequence whose blocks are all cached
//     (what the engine pays per finished request on a hit: hashing).
// Threads: PAGODA_BENCH_THREADS (default: all the process may use).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "cache/prefix_cache.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/paged_kv_store.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

int bench_threads() {
  if (const char* e = std::getenv("PAGODA_BENCH_THREADS")) return std::max(1, std::atoi(e));
  return ThreadPool::default_num_threads();
}

ThreadPool& threads() {
  static ThreadPool pool(bench_threads());
  return pool;
}

std::vector<int32_t> random_tokens(int64_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> p;
  uint32_t x = seed;
  while (static_cast<int64_t>(p.size()) < n) {
    x = x * 1103515245u + 12345u;
    p.push_back(static_cast<int32_t>(2 + (x >> 16) % static_cast<uint32_t>(n_vocab - 2)));
  }
  return p;
}

struct BenchModel {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<Model> model;
};

BenchModel& bench_model() {
  static BenchModel m = [] {
    SynthSpec s;
    s.dim = 512, s.n_layers = 8, s.n_heads = 8, s.n_kv_heads = 2, s.ffn_dim = 1536, s.n_vocab = 4096;
    s.ctx_len = 4096, s.type = GgmlType::Q8_0, s.seed = 3;
    const std::string path = (std::filesystem::temp_directory_path() / ("pagoda_prefix_cache_bench_" + std::to_string(::getpid()) + ".gguf")).string();
    write_synthetic_model(s, path);
    BenchModel b;
    b.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
    b.model = Model::load(b.file);
    std::filesystem::remove(path);  // the mapping keeps the data
    return b;
  }();
  return m;
}

KvConfig kv_config() {
  KvConfig k;
  k.block_size = 32;
  k.budget_bytes = 256ull << 20;
  return k;
}

KvGeometry geometry(const ModelConfig& c) { return KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}; }

// Prefill of prompt[from, n) for `seq` (table already adopted); returns the first token.
int32_t prefill(Model& m, PagedKvStore& store, SeqId seq, const std::vector<int32_t>& prompt, int64_t from,
                std::vector<float>& logits) {
  Batch b;
  for (size_t i = static_cast<size_t>(from); i < prompt.size(); ++i)
    b.add(prompt[i], static_cast<int64_t>(i), seq, i + 1 == prompt.size());
  if (!store.reserve(seq, static_cast<int64_t>(prompt.size())).ok()) std::abort();
  m.forward(b, store, threads(), logits);
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

const int64_t kHistory = 2000, kNewMessage = 50;

void BM_TtftCold(benchmark::State& state) {
  Model& m = *bench_model().model;
  PagedKvPool pool(geometry(m.config()), kv_config());
  PagedKvStore store(pool);
  const auto prompt = random_tokens(kHistory + kNewMessage, 4096, 11);
  std::vector<float> logits;
  for (auto _ : state) {
    benchmark::DoNotOptimize(prefill(m, store, 0, prompt, 0, logits));
    store.remove(0);
  }
  state.counters["prompt_tokens"] = static_cast<double>(prompt.size());
  state.counters["prefilled_tokens"] = static_cast<double>(prompt.size());
}
BENCHMARK(BM_TtftCold)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_TtftCachedHistory(benchmark::State& state) {
  Model& m = *bench_model().model;
  PagedKvPool pool(geometry(m.config()), kv_config());
  PagedKvStore store(pool);
  PrefixCache cache(pool, "bench-model");
  const CacheKey key = cache.key();
  const auto prompt = random_tokens(kHistory + kNewMessage, 4096, 11);
  const std::vector<int32_t> history(prompt.begin(), prompt.begin() + kHistory);
  std::vector<float> logits;
  {  // the previous turn: prefill the history and index it (as finished)
    store.adopt(0, BlockTable{});
    prefill(m, store, 0, history, 0, logits);
    cache.insert(key, history, store.mutable_table(0), /*finished=*/true);
    store.remove(0);
  }
  int64_t cached = 0;
  for (auto _ : state) {
    CacheHit hit = cache.lookup(key, prompt);
    cached = hit.cached_tokens;
    store.adopt(0, std::move(hit.table));
    benchmark::DoNotOptimize(prefill(m, store, 0, prompt, cached, logits));
    store.remove(0);
  }
  state.counters["prompt_tokens"] = static_cast<double>(prompt.size());
  state.counters["cached_tokens"] = static_cast<double>(cached);
  state.counters["prefilled_tokens"] = static_cast<double>(static_cast<int64_t>(prompt.size()) - cached);
}
BENCHMARK(BM_TtftCachedHistory)->Unit(benchmark::kMillisecond)->Iterations(10)->UseRealTime();

// A cache holding one n_tokens sequence (block size 32).
struct CachedSequence {
  PagedKvPool pool;
  PrefixCache cache;
  CacheKey key;
  std::vector<int32_t> tokens;
  explicit CachedSequence(int64_t n)
      : pool(KvGeometry{1, 1, 64}, [] {
          KvConfig k;
          k.block_size = 32;
          k.budget_bytes = 64ull << 20;
          return k;
        }()),
        cache(pool, "bench-model"),
        key(cache.key()),
        tokens(random_tokens(n, 128256, 5)) {
    BlockTable t;
    if (!pool.append_tokens(t, n).ok()) std::abort();
    cache.insert(key, tokens, t, /*finished=*/true);
    pool.free(t);
  }
};

void BM_LookupBorrow(benchmark::State& state) {
  CachedSequence c(state.range(0));
  auto prompt = c.tokens;
  prompt.push_back(7);  // one new token: every cached token is reused
  int64_t cached = 0;
  for (auto _ : state) {
    CacheHit hit = c.cache.lookup(c.key, prompt);
    cached = hit.cached_tokens;
    c.pool.free(hit.table);
  }
  if (cached != state.range(0)) state.SkipWithError("not a full hit");
  state.counters["cached_tokens"] = static_cast<double>(cached);
}
BENCHMARK(BM_LookupBorrow)->Arg(512)->Arg(4000)->Arg(32000)->Unit(benchmark::kMicrosecond);

void BM_InsertAlreadyCached(benchmark::State& state) {
  CachedSequence c(state.range(0));
  BlockTable t = c.cache.lookup(c.key, c.tokens).table;  // all but the last token
  const std::vector<int32_t> prefix(c.tokens.begin(), c.tokens.begin() + t.num_tokens());
  for (auto _ : state) c.cache.insert(c.key, prefix, t, /*finished=*/true);
  c.pool.free(t);
}
BENCHMARK(BM_InsertAlreadyCached)->Arg(4000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagoda

BENCHMARK_MAIN();
