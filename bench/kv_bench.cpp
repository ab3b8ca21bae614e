// Paged KV cache benchmarks (#3).
//
//   BM_DecodeAttention/<ctx>/<store>: one decode step's attention of one layer
//     (llama3.2-1b heads: 32 query heads, 8 KV heads, head_dim 64) over ctx positions.
//     store 0 = contiguous f32 (#2), 1..5 = paged f32, f16, bf16, q8, q4.
//   BM_ModelDecode/<ctx>/<store>: a whole decode step of a synthetic llama (dim 512,
//     4 layers, 8 heads / 2 KV heads of 64, f32 weights) with ctx tokens in the cache
//     (filled with random K/V: attention cost does not depend on values).
//   BM_PrefillAttention/<n_tokens>/<store>: one layer's attention for a whole prompt of
//     n_tokens (positions 0..n-1 of one sequence, same geometry as BM_DecodeAttention):
//     the pp512 / pp2048 attention cost of a prefill.
//   BM_PagedAttentionBlockSize/<block_size>: BM_DecodeAttention at 4096, paged f16.
//   BM_DecodeStreams/<depth>/<cold>: eight decoding streams' attention over all layers of
//     a TinyLlama-shape model, one engine step; cold = caches flushed between steps.
//   BM_KvBytesPerToken/<type>: counters only — KV bytes per token (llama3.2-1b geometry).
// Threads: PAGODA_BENCH_THREADS (default: all the process may use).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

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

const char* store_name(int s) {
  static const char* names[] = {"contiguous-f32", "paged-f32", "paged-f16", "paged-bf16", "paged-q8", "paged-q4"};
  return names[s];
}

// A store of kind `s` (0 contiguous, else paged type s-1) holding `ctx` random tokens of
// sequence 0 in every layer, with room for one more.
struct Filled {
  std::unique_ptr<PagedKvPool> pool;
  std::unique_ptr<KvStore> kv;
};

Filled make_store(int s, const KvGeometry& g, int64_t ctx, int block_size = kDefaultKvBlockSize) {
  Filled f;
  if (s == 0) {
    f.kv = std::make_unique<ContiguousKvCache>(g.n_layers, g.n_kv_heads, g.head_dim, ctx + 1, 1);
  } else {
    KvConfig c;
    c.block_size = block_size;
    c.k_type = c.v_type = static_cast<KvType>(s - 1);
    c.budget_bytes = 1;
    PagedKvPool probe(g, KvConfig{block_size, 1ull << 30, c.k_type, c.v_type});
    c.budget_bytes = probe.bytes_per_block() * static_cast<uint64_t>((ctx + 1) / block_size + 2);
    f.pool = std::make_unique<PagedKvPool>(g, c);
    auto paged = std::make_unique<PagedKvStore>(*f.pool);
    if (!paged->reserve(0, ctx + 1).ok()) std::abort();
    f.kv = std::move(paged);
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(g.n_kv_heads * g.head_dim)), v(k.size());
  for (int64_t p = 0; p <= ctx; ++p)
    for (int layer = 0; layer < g.n_layers; ++layer) {
      for (size_t i = 0; i < k.size(); ++i) k[i] = nd(rng), v[i] = nd(rng);
      f.kv->store(layer, 0, p, k.data(), v.data());
    }
  return f;
}

// An attention batch over caller-owned tokens (seq ids, positions, q and out).
AttnBatch attn_batch(const std::vector<SeqId>& seqs, const std::vector<int64_t>& pos, std::vector<float>& q,
                     std::vector<float>& out, int64_t n_heads, const KvGeometry& g) {
  AttnBatch b;
  b.n_tokens = static_cast<int64_t>(seqs.size());
  b.seq_ids = seqs.data();
  b.positions = pos.data();
  b.q = q.data();
  b.out = out.data();
  b.n_heads = n_heads;
  b.n_kv_heads = g.n_kv_heads;
  b.head_dim = g.head_dim;
  b.scale = 0.125f;
  return b;
}

void run_attention(benchmark::State& state, int s, int64_t ctx, int block_size) {
  const KvGeometry g{1, 8, 64};
  const int64_t n_heads = 32;
  Filled f = make_store(s, g, ctx, block_size);
  std::vector<float> q(static_cast<size_t>(n_heads * g.head_dim), 0.1f), out(q.size());
  const std::vector<SeqId> seqs = {0};
  const std::vector<int64_t> pos = {ctx};
  const AttnBatch b = attn_batch(seqs, pos, q, out, n_heads, g);
  for (auto _ : state) {
    f.kv->attend_batch(0, b, threads());
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = s == 0 ? (ctx + 1) * g.n_kv_heads * g.head_dim * 8.0 : f.pool->bytes_per_token() * (ctx + 1);
  state.counters["kv_GB/s"] = benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(store_name(s));
}

void BM_DecodeAttention(benchmark::State& state) {
  run_attention(state, static_cast<int>(state.range(1)), state.range(0), kDefaultKvBlockSize);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{512, 2048, 4096}, {0, 1, 2, 3, 4, 5}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_PrefillAttention(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int s = static_cast<int>(state.range(1));
  const KvGeometry g{1, 8, 64};
  const int64_t n_heads = 32;
  Filled f = make_store(s, g, n - 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n * n_heads * g.head_dim)), out(q.size());
  for (float& x : q) x = nd(rng);
  std::vector<SeqId> seqs(static_cast<size_t>(n), 0);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = i;
  const AttnBatch b = attn_batch(seqs, pos, q, out, n_heads, g);
  for (auto _ : state) {
    f.kv->attend_batch(0, b, threads());
    benchmark::DoNotOptimize(out.data());
  }
  // q·k and p·v over the causal triangle: 2 × 2 × head_dim flops per (query head, position).
  const double flops = 4.0 * g.head_dim * n_heads * (n * (n + 1) / 2.0);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(store_name(s));
}
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{512, 2048}, {0, 1, 2, 5}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_PagedAttentionBlockSize(benchmark::State& state) {
  run_attention(state, 2, 4096, static_cast<int>(state.range(0)));
}
BENCHMARK(BM_PagedAttentionBlockSize)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(128)->Arg(256)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Eight decoding streams' attention, as one engine step runs it: TinyLlama-1.1B geometry
// (22 layers, 32 query heads over 4 KV heads, head_dim 64, f16), 8 sequences of `depth`
// tokens whose blocks were reserved in turns (as streams that grow together get them),
// one attend_batch per layer with one query token per sequence. cold = 1 reads 64 MiB
// between steps (untimed), as the weights' stream does between two steps of a real model.
void BM_DecodeStreams(benchmark::State& state) {
  const int64_t depth = state.range(0);
  const bool cold = state.range(1) != 0;
  constexpr int kStreams = 8;
  const KvGeometry g{22, 4, 64};
  const int64_t n_heads = 32;
  KvConfig c;
  c.k_type = c.v_type = KvType::F16;
  PagedKvPool probe(g, KvConfig{c.block_size, 1ull << 30, c.k_type, c.v_type});
  c.budget_bytes = probe.bytes_per_block() * static_cast<uint64_t>(kStreams * ((depth + 1) / c.block_size + 2));
  PagedKvPool pool(g, c);
  PagedKvStore kv(pool);
  for (int64_t p = c.block_size; p < depth + 1 + c.block_size; p += c.block_size)
    for (SeqId sq = 0; sq < kStreams; ++sq)
      if (!kv.reserve(sq, std::min(p, depth + 1)).ok()) std::abort();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(g.n_kv_heads * g.head_dim)), v(k.size());
  for (SeqId sq = 0; sq < kStreams; ++sq)
    for (int64_t p = 0; p <= depth; ++p)
      for (int layer = 0; layer < g.n_layers; ++layer) {
        for (size_t i = 0; i < k.size(); ++i) k[i] = nd(rng), v[i] = nd(rng);
        kv.store(layer, sq, p, k.data(), v.data());
      }
  std::vector<float> q(static_cast<size_t>(kStreams * n_heads * g.head_dim)), out(q.size());
  for (float& x : q) x = nd(rng);
  std::vector<SeqId> seqs(kStreams);
  std::vector<int64_t> pos(kStreams, depth);
  for (int i = 0; i < kStreams; ++i) seqs[i] = i;
  const AttnBatch b = attn_batch(seqs, pos, q, out, n_heads, g);
  std::vector<uint8_t> flush(cold ? 64u << 20 : 0, 1);
  uint64_t sink = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      for (size_t i = 0; i < flush.size(); i += 64) sink += flush[i]++;
      state.ResumeTiming();
    }
    for (int layer = 0; layer < g.n_layers; ++layer) kv.attend_batch(layer, b, threads());
    benchmark::DoNotOptimize(out.data());
  }
  benchmark::DoNotOptimize(sink);
  state.counters["ns/position/kv_head"] = benchmark::Counter(
      static_cast<double>(kStreams * g.n_layers * g.n_kv_heads * (depth + 1)) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_DecodeStreams)
    ->ArgsProduct({{144, 1024}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

struct SynthModel {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<Model> model;
};

SynthModel& synth_model() {
  static SynthModel m = [] {
    SynthSpec s;
    s.dim = 512;
    s.n_layers = 4;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.ffn_dim = 1024;
    s.n_vocab = 512;
    s.ctx_len = 8192;
    const std::string path = (std::filesystem::temp_directory_path() / ("pagoda_kv_bench_" + std::to_string(::getpid()) + ".gguf")).string();
    write_synthetic_model(s, path);
    SynthModel out;
    out.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
    out.model = Model::load(out.file);
    std::filesystem::remove(path);
    return out;
  }();
  return m;
}

void BM_ModelDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const int s = static_cast<int>(state.range(1));
  Model& m = *synth_model().model;
  const ModelConfig& c = m.config();
  Filled f = make_store(s, KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}, ctx);
  Batch b;
  b.add(7, ctx, 0, true);
  std::vector<float> logits;
  for (auto _ : state) {
    m.forward(b, *f.kv, threads(), logits);  // rewrites position ctx each time
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tok/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(store_name(s));
}
BENCHMARK(BM_ModelDecode)
    ->ArgsProduct({{512, 2048, 4096}, {0, 1, 2, 5}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_KvBytesPerToken(benchmark::State& state) {
  const KvType t = static_cast<KvType>(state.range(0));
  const KvGeometry g{16, 8, 64};  // llama3.2-1b
  PagedKvPool pool(g, KvConfig{kDefaultKvBlockSize, 1ull << 30, t, t});
  for (auto _ : state) benchmark::DoNotOptimize(pool.stats());
  state.counters["kv_bytes_per_token"] = pool.bytes_per_token();
  state.counters["vs_f16"] = pool.bytes_per_token() / (16.0 * 2 * 8 * 64 * 2);
  state.SetLabel(kv_type_name(t));
}
BENCHMARK(BM_KvBytesPerToken)->DenseRange(0, kNumKvTypes - 1);

}  // namespace
}  // namespace pagoda

BENCHMARK_MAIN();
