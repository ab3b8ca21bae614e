// The disk tier's restores and spills off the engine thread (cache/disk_io.h), through the
// Engine on stories260K with a slow disk injected (DiskTierConfig::read_delay_ms, tests
// only): a request restoring 16 blocks from disk waits for them while another request
// keeps decoding (the largest gap between its tokens is far below the injected total,
// which the old synchronous restore put into one step), and its tokens and logprobs are
// bit-identical to a cache-off run; a request cancelled mid-restore ends at once, leaks
// no block and leaves the engine serving correct output; a corrupt record in the middle
// of the chain restores the blocks before it and recomputes the rest, with the same
// output; spills beyond a one-block write queue are dropped and counted, never waited
// for; a stalled disk (every read and write blocked: a hung mount) is a miss that costs
// a request the deadline, not forever, while every other request is served; and a mixed load (shared
// documents, a small pool and RAM tier so restores, spills and pool pressure meet, some
// requests cancelled mid-way) gives every finished request the cache-off tokens and
// leaks nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "cache/block_hash.h"
#include "engine_harness.h"

namespace pagoda {
namespace {

using namespace engine_test;
using Clock = std::chrono::steady_clock;

constexpr int64_t kDiskBlocks = 16;
constexpr int64_t kPromptLen = kDiskBlocks * kBlock + 4;  // 16 full blocks and a tail

struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = "/tmp/pagoda_disk_restore_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

EngineConfig disk_config(const Model& m, const std::string& dir, int read_delay_ms) {
  EngineConfig c = engine_config(m, 2, 128, true, 64);
  c.disk.dir = dir;
  c.disk.read_delay_ms = read_delay_ms;
  return c;
}

// Runs `r` once through an engine on `dir` and stops it: the clean stop writes its blocks.
void fill_disk(const Loaded& l, const std::string& dir, const Request& r) {
  Engine e(*l.model, nullptr, disk_config(*l.model, dir, 0));
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(r, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  e.stop();
  ASSERT_GE(e.stats().cache.disk.blocks, kDiskBlocks);
}

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Reference cache_off(const Loaded& l, const Request& r) {
  const RunResult off = run_all(*l.model, nullptr, engine_config(*l.model, 2, 128, false, 64), {r});
  return {off.tokens[0], off.logprobs[0]};
}

// No leak: after stop, every block left is the prefix cache's and evictable.
void expect_no_leak(const EngineStats& st) {
  EXPECT_EQ(st.pool.blocks_live, 0);
  EXPECT_EQ(st.pool.blocks_evictable, st.cache.cached_blocks);
  EXPECT_EQ(st.running + st.waiting + st.restoring, 0);
  EXPECT_EQ(st.cache.disk.restores_in_flight, 0);
  EXPECT_EQ(st.cache.disk.queued_writes, 0);
}

TEST(DiskRestore, OtherRequestsKeepDecodingWhileOneRestoresAndItsOutputEqualsRecompute) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const Request a = greedy(random_tokens(kPromptLen, V, 11), 8);
  const Reference ref = cache_off(l, a);
  TempDir dir;
  fill_disk(l, dir.path, a);

  constexpr int kDelayMs = 40;  // per block: 640 ms for the 16
  const double injected_ms = kDelayMs * kDiskBlocks;
  Engine e(*l.model, nullptr, disk_config(*l.model, dir.path, kDelayMs));  // a restart
  e.start();
  auto decoding = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(greedy(random_tokens(8, V, 99), 480), decoding).ok());
  ASSERT_TRUE(decoding->wait_tokens(3));
  const auto t_submit = Clock::now();
  auto restoring = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(a, restoring).ok());
  ASSERT_TRUE(restoring->wait_done());
  ASSERT_TRUE(decoding->wait_done());
  const auto t_first = restoring->times().at(0);
  const double waited_ms = std::chrono::duration<double, std::milli>(t_first - t_submit).count();
  EXPECT_GE(waited_ms, injected_ms) << "the restore did not wait for its reads";

  // The decoding request's tokens during the restore window [t_submit, t_first): many,
  // and never far apart (synchronously, one step held all 640 ms).
  const auto times = decoding->times();
  int64_t in_window = 0;
  double max_gap_ms = 0;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i] < t_submit || times[i - 1] >= t_first) continue;
    ++in_window;
    max_gap_ms = std::max(max_gap_ms, std::chrono::duration<double, std::milli>(times[i] - times[i - 1]).count());
  }
  EXPECT_GE(in_window, 20) << "the decoding request made no progress during the restore";
  EXPECT_LT(max_gap_ms, injected_ms / 4) << "a step stalled for the restore's reads";
  std::printf("restore waited %.0f ms (injected %.0f); the other request streamed %lld tokens meanwhile, largest gap %.1f ms\n",
              waited_ms, injected_ms, static_cast<long long>(in_window), max_gap_ms);

  // Bit-identical to recomputing, and the ledger exact.
  EXPECT_EQ(restoring->tokens(), ref.tokens);
  EXPECT_EQ(restoring->logprobs(), ref.logprobs);
  EXPECT_EQ(restoring->result().cached_tokens, kDiskBlocks * kBlock);
  e.stop();
  const EngineStats st = e.stats();
  EXPECT_EQ(st.cache.disk.hits, 1);
  EXPECT_EQ(st.cache.disk.hit_tokens, kDiskBlocks * kBlock);
  EXPECT_EQ(st.cache.disk.reads, kDiskBlocks);
  EXPECT_EQ(st.cache.disk.corrupt, 0);
  EXPECT_GT(st.cache.disk.read_bytes_per_s(), 0);
  expect_no_leak(st);
}

TEST(DiskRestore, ARequestCancelledWhileRestoringEndsAtOnceAndLeaksNothing) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const Request a = greedy(random_tokens(kPromptLen, V, 12), 8);
  const Reference ref = cache_off(l, a);
  TempDir dir;
  fill_disk(l, dir.path, a);

  constexpr int kDelayMs = 100;  // 1.6 s for the 16 blocks
  Engine e(*l.model, nullptr, disk_config(*l.model, dir.path, kDelayMs));
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  const SubmitResult sub = e.submit(a, sink);
  ASSERT_TRUE(sub.ok());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (e.stats().restoring == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const EngineStats during = e.stats();
  ASSERT_EQ(during.restoring, 1);
  EXPECT_EQ(during.running, 0);
  EXPECT_GE(during.pool.blocks_live, kDiskBlocks);  // the fresh blocks being read into
  const auto t_cancel = Clock::now();
  ASSERT_TRUE(e.cancel(sub.request_id));
  ASSERT_TRUE(sink->wait_done());
  const double cancel_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_cancel).count();
  EXPECT_EQ(sink->result().finish, FinishReason::Cancelled);
  EXPECT_LT(cancel_ms, kDelayMs * kDiskBlocks / 2.0) << "the cancel waited for the reads";

  // The engine serves the same prompt correctly afterwards (what the cancelled restore
  // read intact is cached; the rest comes from disk or is computed).
  auto again = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(a, again).ok());
  ASSERT_TRUE(again->wait_done());
  EXPECT_EQ(again->tokens(), ref.tokens);
  EXPECT_EQ(again->logprobs(), ref.logprobs);
  EXPECT_EQ(again->result().cached_tokens, kDiskBlocks * kBlock);
  e.stop();
  const EngineStats st = e.stats();
  EXPECT_EQ(st.cancelled, 1);
  EXPECT_EQ(st.cache.disk.corrupt, 0);
  expect_no_leak(st);
}

TEST(DiskRestore, ACorruptRecordMidChainRestoresTheBlocksBeforeItAndRecomputesTheRest) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const Request a = greedy(random_tokens(kPromptLen, V, 13), 8);
  const Reference ref = cache_off(l, a);
  TempDir dir;
  fill_disk(l, dir.path, a);

  // The record of block 8 (the engine's namespace: model id "model", F16 K/V, no cache
  // key): one payload byte flipped.
  constexpr int64_t kBad = 8;
  BlockHash h = namespace_hash("model", KvType::F16, KvType::F16, kBlock, "");
  for (int64_t b = 0; b <= kBad; ++b)
    h = block_hash(h, std::span<const int32_t>(a.prompt.data() + b * kBlock, kBlock));
  const std::string record = dir.path + "/" + h.hex() + ".kvb";
  ASSERT_TRUE(std::filesystem::exists(record)) << record;
  {
    std::fstream f(record, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(2000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(2000);
    f.write(&c, 1);
  }

  Engine e(*l.model, nullptr, disk_config(*l.model, dir.path, 5));
  e.start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(a, sink).ok());
  ASSERT_TRUE(sink->wait_done());
  EXPECT_EQ(sink->error(), "");
  EXPECT_EQ(sink->tokens(), ref.tokens);
  EXPECT_EQ(sink->logprobs(), ref.logprobs);
  EXPECT_EQ(sink->result().cached_tokens, kBad * kBlock);
  e.stop();
  const EngineStats st = e.stats();
  EXPECT_EQ(st.cache.disk.corrupt, 1);
  EXPECT_EQ(st.cache.disk.reads, kBad);
  EXPECT_EQ(st.cache.disk.hit_tokens, kBad * kBlock);
  EXPECT_GE(st.cache.disk.blocks, kDiskBlocks);  // the clean stop wrote the recomputed blocks back
  expect_no_leak(st);
}

TEST(DiskRestore, SpillsBeyondAOneBlockWriteQueueAreDroppedNeverWaitedFor) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  TempDir dir;
  EngineConfig c = disk_config(*l.model, dir.path, 0);
  c.cache.capacity_bytes = 0;   // every released block is evicted, so spilled, at once
  c.disk.write_queue_bytes = 1;  // one spill queued at a time; the others are dropped
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 4; ++i) rs.push_back(greedy(random_tokens(5 * kBlock, V, 200 + i), 4));
  const RunResult run = run_all(*l.model, nullptr, c, rs);
  // 4 prompts of 5 blocks, 84 tokens each: 5 full blocks each, each spilled once: written
  // or dropped, never waited for.
  const DiskTierStats& d = run.stats.cache.disk;
  EXPECT_EQ(d.writes + d.write_queue_drops, 20);
  EXPECT_GE(d.writes, 1);
  EXPECT_EQ(d.blocks, d.writes);
  EXPECT_EQ(d.write_queue_waits, 0);
  EXPECT_EQ(d.write_queue_capacity_bytes, 1u);
  EXPECT_EQ(d.queued_writes, 0);
  EXPECT_EQ(d.queued_write_bytes, 0u);
  expect_no_leak(run.stats);
}

// Every disk operation blocks while closed: a hung NFS / FUSE mount, in a test.
struct IoGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  void close() {
    std::lock_guard<std::mutex> lk(mu);
    open = false;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lk(mu);
      open = true;
    }
    cv.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return open; });
  }
};

TEST(DiskRestore, AStalledDiskIsAMissAndEveryRequestIsServedMeanwhile) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  const Request a = greedy(random_tokens(kPromptLen, V, 31), 8);
  const Request small = greedy(random_tokens(4, V, 32), 4);
  const Reference ref = cache_off(l, a);
  TempDir dir;
  fill_disk(l, dir.path, a);

  auto gate = std::make_shared<IoGate>();
  EngineConfig c = disk_config(*l.model, dir.path, 0);
  c.disk.io_deadline_ms = 200;
  c.disk.write_queue_bytes = 1;
  c.cache.capacity_bytes = 0;  // every finished block spills behind the stuck read
  c.disk.test_io_hook = [gate](bool) { gate->pass(); };
  gate->close();
  {
    Engine e(*l.model, nullptr, c);
    e.start();
    const auto t0 = Clock::now();
    auto sa = std::make_shared<RecordingSink>();
    ASSERT_TRUE(e.submit(a, sa).ok());
    auto sb = std::make_shared<RecordingSink>();
    ASSERT_TRUE(e.submit(small, sb).ok());
    ASSERT_TRUE(sa->wait_done());
    ASSERT_TRUE(sb->wait_done());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    // The restore is cut at the deadline (0.2 s) plus the engine's idle poll (1 s).
    EXPECT_LT(seconds, 10.0);
    EXPECT_EQ(sa->tokens(), ref.tokens) << "the request computed what the disk could not give";
    EXPECT_EQ(sa->logprobs(), ref.logprobs);
    EXPECT_EQ(sa->result().cached_tokens, 0);
    EXPECT_EQ(sb->error(), "");
    EXPECT_EQ(sb->tokens().size(), 4u);
    // A request after it, while the disk is still stuck: no restore is even tried.
    auto sc = std::make_shared<RecordingSink>();
    ASSERT_TRUE(e.submit(a, sc).ok());
    ASSERT_TRUE(sc->wait_done());
    EXPECT_EQ(sc->tokens(), ref.tokens);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!e.stats().cache.disk.stalled && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const EngineStats during = e.stats();
    EXPECT_TRUE(during.cache.disk.stalled);
    EXPECT_GT(during.cache.disk.stalled_seconds, 0.2);
    EXPECT_EQ(during.cache.disk.restore_timeouts, 1);
    EXPECT_GE(during.cache.disk.write_queue_drops, 1);
    EXPECT_EQ(during.cache.disk.write_queue_waits, 0);
    gate->release();
    e.stop();
    const EngineStats st = e.stats();
    EXPECT_FALSE(st.cache.disk.stalled);
    expect_no_leak(st);
  }
}

TEST(DiskRestore, AMixedLoadWithCancelsMatchesCacheOffAndLeaksNothing) {
  const Loaded l = load(kStories, false);
  const int32_t V = static_cast<int32_t>(l.model->config().n_vocab);
  // 3 documents of 6-9 blocks; 12 requests = a document + their own question.
  std::vector<std::vector<int32_t>> docs;
  for (uint32_t d = 0; d < 3; ++d) docs.push_back(random_tokens((6 + 1.5 * d) * kBlock, V, 500 + d));
  std::vector<Request> rs;
  for (uint32_t i = 0; i < 12; ++i) {
    std::vector<int32_t> p = docs[i % 3];
    const auto q = random_tokens(5 + 3 * (i % 5), V, 900 + i);
    p.insert(p.end(), q.begin(), q.end());
    Request r = greedy(std::move(p), 24);
    r.logprobs = false;
    rs.push_back(std::move(r));
  }
  const RunResult ref = run_all(*l.model, nullptr, engine_config(*l.model, 3, 128, false, 64), rs);

  TempDir dir;
  EngineConfig c = engine_config(*l.model, 3, 22, true, 64);  // 22 blocks: 3 running need up to 33
  c.disk.dir = dir.path;
  c.disk.read_delay_ms = 2;
  c.cache.capacity_bytes = bytes_for_blocks(*l.model, 6);  // most cached blocks spill
  {  // the documents on disk (a clean stop writes them)
    std::vector<Request> warm(rs.begin(), rs.begin() + 3);
    run_all(*l.model, nullptr, c, warm);
  }
  Engine e(*l.model, nullptr, c);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<uint64_t> ids;
  for (const Request& r : rs) {
    sinks.push_back(std::make_shared<RecordingSink>());
    const SubmitResult sub = e.submit(r, sinks.back());
    ASSERT_TRUE(sub.ok()) << sub.message;
    ids.push_back(sub.request_id);
  }
  e.start();
  // Cancel three while they wait, restore or run.
  for (size_t i : {1, 6, 10}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    e.cancel(ids[i]);
  }
  int64_t finished = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait_done()) << i;
    EXPECT_EQ(sinks[i]->error(), "") << i;
    if (sinks[i]->result().finish == FinishReason::Cancelled) continue;
    ++finished;
    EXPECT_EQ(sinks[i]->tokens(), ref.tokens[i]) << "request " << i;
  }
  EXPECT_GE(finished, 9);
  e.stop();
  const EngineStats st = e.stats();
  std::printf("finished %lld of 12; disk: %lld hits, %lld hit tokens, %lld reads, %lld writes; %lld preemptions\n",
              static_cast<long long>(finished), static_cast<long long>(st.cache.disk.hits),
              static_cast<long long>(st.cache.disk.hit_tokens), static_cast<long long>(st.cache.disk.reads),
              static_cast<long long>(st.cache.disk.writes), static_cast<long long>(st.preemptions));
  EXPECT_GT(st.cache.disk.hit_tokens, 0);
  EXPECT_EQ(st.cache.disk.corrupt, 0);
  expect_no_leak(st);
}

}  // namespace
}  // namespace pagoda
