// The prefix cache's asynchronous restore (PrefixCache::begin_restore / poll_restores /
// end_restore over a DiskIo thread) on the token-identity harness: blocks come back
// token-exact with the ledger exact, lookup() alone never reads the disk, a block computed
// while its copy was being read is shared rather than duplicated, a RAM reset or the cache
// turned off mid-restore gives every block back, a cancelled restore gives its blocks back
// at once and the thread never writes them, spills queued but not yet written are
// restored, a burst on one document restores it once (later requests join the restore in
// flight; one whose every holder left is not joined), and a stalled disk (a hung mount)
// is a miss that never blocks the caller. Cache invariants are checked after every step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "temp_dir.h"
#include "cache/disk_io.h"
#include "cache/disk_tier.h"
#include "cache_harness.h"

namespace pagoda {
namespace {

using testing::concat;
using testing::Harness;
using testing::Request;
using testing::tokens;

constexpr int kBs = 8;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pagoda_disk_restore_unit") {}
};

// A cache spilling to `dir` through an I/O thread; reads sleep `read_delay_ms` each.
struct AsyncHarness {
  AsyncHarness(const std::string& dir, int64_t n_blocks, uint64_t ram_capacity, int read_delay_ms = 0)
      : disk([&] {
          DiskTierConfig c;
          c.dir = dir;
          c.read_delay_ms = read_delay_ms;
          return c;
        }()),
        io(disk),
        h(kBs, n_blocks, [&] {
          PrefixCacheConfig c;
          c.capacity_bytes = ram_capacity;
          return c;
        }()) {
    h.cache.set_disk_tier(&disk);
    h.cache.set_disk_io(&io);
  }
  ~AsyncHarness() {
    io.drain();
    h.cache.poll_restores();
    h.cache.set_disk_io(nullptr);
    h.cache.set_disk_tier(nullptr);
  }
  void check() {
    h.check();
    disk.check_invariants();
  }
  // Waits for the I/O thread and publishes what it finished.
  void settle() {
    io.drain();
    h.cache.poll_restores();
    check();
  }
  DiskTier disk;
  DiskIo io;
  Harness h;
};

TEST(PrefixCacheAsyncRestore, BlocksComeBackTokenExactWithTheLedgerExact) {
  TempDir dir;
  AsyncHarness t(dir.path, 32, /*ram_capacity=*/0);
  const auto prompt = tokens(44, 100);  // 5 full blocks + 4
  Request a = t.h.admit(prompt);
  t.h.finish(a);  // RAM capacity 0: evicted, spilled through the queue
  t.settle();
  ASSERT_EQ(t.disk.stats().blocks, 5);
  const auto next = concat(prompt, tokens(5, 9000));
  EXPECT_EQ(t.h.cache.lookup(t.h.cache.key(), next).cached_tokens, 0);  // lookup alone never reads
  EXPECT_EQ(t.disk.stats().reads, 0);
  const uint64_t ticket = t.h.cache.begin_restore(t.h.cache.key(), next);
  ASSERT_NE(ticket, 0u);
  EXPECT_EQ(t.h.cache.restore_blocks(), 5);
  t.settle();
  EXPECT_FALSE(t.h.cache.restore_pending(ticket));
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 5);  // published, pinned: not evicted at capacity 0
  Request b = t.h.admit(next);
  t.h.cache.end_restore(ticket, b.cached_tokens);
  EXPECT_EQ(b.cached_tokens, 40);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  const DiskTierStats s = t.disk.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.hit_tokens, 40);
  EXPECT_EQ(s.reads, 5);
  EXPECT_EQ(t.h.cache.restore_blocks(), 0);
  t.check();
  t.h.drop(b);
  t.settle();
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
}

TEST(PrefixCacheAsyncRestore, ABlockComputedMeanwhileIsSharedNotDuplicated) {
  TempDir dir;
  AsyncHarness t(dir.path, 32, PrefixCacheConfig::kUnlimitedBytes, /*read_delay_ms=*/20);
  const auto prompt = tokens(40, 100);
  Request a = t.h.admit(prompt);
  t.h.finish(a);
  t.h.cache.flush_to_disk();
  t.h.cache.reset(CacheTier::Ram);
  const auto next = concat(prompt, tokens(3, 9000));
  const uint64_t ticket = t.h.cache.begin_restore(t.h.cache.key(), next);
  ASSERT_NE(ticket, 0u);
  // While the reads are in flight, another request computes the same prefix and indexes it.
  Request c = t.h.admit(next);
  EXPECT_EQ(c.cached_tokens, 0);
  t.h.finish(c);
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 6);  // 5 full + the partial tail
  t.settle();
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 6) << "restored copies were indexed beside the computed blocks";
  Request b = t.h.admit(next);
  t.h.cache.end_restore(ticket, b.cached_tokens);
  EXPECT_EQ(b.cached_tokens, 42);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  t.check();
  t.h.drop(b);
  t.check();
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
}

TEST(PrefixCacheAsyncRestore, ARamResetOrTheCacheTurnedOffMidRestoreGivesEveryBlockBack) {
  for (const bool turn_off : {false, true}) {
    TempDir dir;
    AsyncHarness t(dir.path, 8, PrefixCacheConfig::kUnlimitedBytes, /*read_delay_ms=*/20);
    const auto prompt = tokens(40, 100);
    Request a = t.h.admit(prompt);
    t.h.finish(a);
    Request other = t.h.admit(tokens(40, 5000));  // pool pressure: the chain's tail spills
    t.h.drop(other);
    t.settle();
    ASSERT_GT(t.disk.stats().blocks, 0);
    const auto next = concat(prompt, tokens(3, 9000));
    const uint64_t ticket = t.h.cache.begin_restore(t.h.cache.key(), next);
    ASSERT_NE(ticket, 0u);
    if (turn_off) {
      PrefixCacheConfig off = t.h.cache.config();
      off.enabled = false;
      t.h.cache.set_config(off);
    } else {
      t.h.cache.reset(CacheTier::Ram);
    }
    t.settle();
    EXPECT_EQ(t.h.cache.stats().cached_blocks, 0) << (turn_off ? "cache off" : "RAM reset");
    t.h.cache.end_restore(ticket, 0);
    EXPECT_EQ(t.h.cache.restore_blocks(), 0);
    EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
    EXPECT_EQ(t.disk.stats().hits, 0);
    t.check();
  }
}

TEST(PrefixCacheAsyncRestore, ACancelledRestoreGivesItsBlocksBackAtOnceAndTheThreadNeverWritesThem) {
  TempDir dir;
  AsyncHarness t(dir.path, 32, 0, /*read_delay_ms=*/30);
  const auto prompt = tokens(40, 100);
  Request a = t.h.admit(prompt);
  t.h.finish(a);
  t.settle();
  const auto next = concat(prompt, tokens(3, 9000));
  const uint64_t ticket = t.h.cache.begin_restore(t.h.cache.key(), next);
  ASSERT_NE(ticket, 0u);
  t.h.cache.end_restore(ticket, 0);  // the request went away while the first read sleeps
  EXPECT_EQ(t.h.cache.restore_blocks(), 0);
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
  // The blocks it was reading into are handed out again at once; the read in progress
  // returns into the thread's own buffer and is never copied into them.
  Request other = t.h.admit(tokens(40, 7000));
  t.settle();
  EXPECT_TRUE(t.h.holds_its_tokens(other));
  t.h.drop(other);
  t.settle();
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
  EXPECT_LE(t.disk.stats().reads, 1);  // the thread skipped the rest
  EXPECT_EQ(t.disk.stats().hits, 0);
  Request b = t.h.admit(next);  // recomputed (capacity 0 keeps nothing in RAM)
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  t.h.drop(b);
  t.check();
}

// Stands in for a hung mount: every disk operation blocks while the gate is closed.
struct IoGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int blocked = 0;
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
    ++blocked;
    cv.wait(lk, [&] { return open; });
    --blocked;
  }
  bool someone_blocked() {
    std::lock_guard<std::mutex> lk(mu);
    return blocked > 0;
  }
};

void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(done());
}

TEST(PrefixCacheAsyncRestore, AStalledDiskIsAMissAndNeverBlocksTheCaller) {
  TempDir dir;
  auto gate = std::make_shared<IoGate>();
  DiskTierConfig dc;
  dc.dir = dir.path;
  dc.io_deadline_ms = 100;
  dc.write_queue_bytes = 1;  // one spill queued at most
  dc.test_io_hook = [gate](bool) { gate->pass(); };
  DiskTier disk(dc);
  Harness h(kBs, 32, [] {
    PrefixCacheConfig c;
    c.capacity_bytes = 0;
    return c;
  }());
  {
    DiskIo io(disk);
    h.cache.set_disk_tier(&disk);
    const auto prompt = tokens(40, 100);
    Request a = h.admit(prompt);
    h.finish(a);  // spilled synchronously (no I/O thread yet)
    ASSERT_EQ(disk.stats().blocks, 5);
    h.cache.set_disk_io(&io);

    gate->close();
    const auto next = concat(prompt, tokens(3, 9000));
    const uint64_t ticket = h.cache.begin_restore(h.cache.key(), next);
    ASSERT_NE(ticket, 0u);
    wait_until([&] { return gate->someone_blocked(); });
    h.cache.poll_restores();
    EXPECT_TRUE(h.cache.restore_pending(ticket)) << "cut short before the deadline";
    wait_until([&] { return io.stalled(); });
    h.cache.poll_restores();
    EXPECT_FALSE(h.cache.restore_pending(ticket));
    EXPECT_EQ(h.cache.stats().disk.restore_timeouts, 1);
    EXPECT_TRUE(h.cache.stats().disk.stalled);
    EXPECT_EQ(h.cache.begin_restore(h.cache.key(), next), 0u) << "a restore started on a stalled tier";
    Request b = h.admit(next);  // computes: the stuck read's blocks went back to the pool
    h.cache.end_restore(ticket, b.cached_tokens);
    EXPECT_EQ(b.cached_tokens, 0);
    EXPECT_TRUE(h.holds_its_tokens(b));
    EXPECT_EQ(h.cache.restore_blocks(), 0);
    // Spills behind the stuck read: one is queued, the rest dropped, none waited for.
    const auto t0 = std::chrono::steady_clock::now();
    h.finish(b);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
    const DiskTierStats s = h.cache.stats().disk;
    EXPECT_EQ(s.queued_writes, 1);
    EXPECT_GE(s.write_queue_drops, 1);
    EXPECT_EQ(s.write_queue_waits, 0);
    EXPECT_FALSE(io.drain()) << "drain waited on a stalled thread";
    h.check();

    gate->release();
    wait_until([&] { return !io.stalled(); });
    ASSERT_TRUE(io.drain());
    h.cache.poll_restores();
    h.check();
    disk.check_invariants();
    h.cache.set_disk_io(nullptr);
  }
  h.cache.set_disk_tier(nullptr);
  EXPECT_EQ(h.pool.stats().blocks_live, 0);
}

TEST(DiskIoLifetime, StopLeavesAStalledThreadBehindInsteadOfHanging) {
  TempDir dir;
  auto gate = std::make_shared<IoGate>();
  DiskTierConfig dc;
  dc.dir = dir.path;
  dc.io_deadline_ms = 50;
  dc.test_io_hook = [gate](bool) { gate->pass(); };
  // The stuck call returns into the tier after stop(): it must outlive the thread, as
  // the engine leaks it (a global keeps LeakSanitizer quiet about it).
  static DiskTier* disk = nullptr;
  disk = new DiskTier(dc);
  std::vector<uint8_t> payload(64, 7);
  const std::vector<int32_t> toks(kBs, 3);
  bool stopped = true;
  {
    DiskIo io(*disk);
    gate->close();
    io.write(block_hash(BlockHash{}, toks), toks, payload);
    wait_until([&] { return gate->someone_blocked(); });
    const auto t0 = std::chrono::steady_clock::now();
    stopped = io.stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
  EXPECT_FALSE(stopped);
  gate->release();  // the thread returns into the (still alive) tier and exits
  // The directory is removed by TempDir: wait for the write to land first.
  wait_until([&] { return disk->stats().writes + disk->stats().write_errors == 1; });
}

TEST(PrefixCacheAsyncRestore, ASpillStillQueuedIsRestoredNotRecomputed) {
  TempDir dir;
  AsyncHarness t(dir.path, 32, 0);
  const auto prompt = tokens(40, 100);
  Request a = t.h.admit(prompt);
  t.h.finish(a);  // 5 spills queued (maybe some written already)
  const auto next = concat(prompt, tokens(3, 9000));
  const uint64_t ticket = t.h.cache.begin_restore(t.h.cache.key(), next);
  ASSERT_NE(ticket, 0u);
  t.settle();
  Request b = t.h.admit(next);
  t.h.cache.end_restore(ticket, b.cached_tokens);
  EXPECT_EQ(b.cached_tokens, 40);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  t.h.drop(b);
  t.check();
}

TEST(PrefixCacheAsyncRestore, ABurstOnOneDocumentRestoresItOnce) {
  TempDir dir;
  AsyncHarness t(dir.path, 32, 0, /*read_delay_ms=*/10);
  const auto doc = tokens(40, 100);
  Request a = t.h.admit(doc);
  t.h.finish(a);
  t.settle();
  const auto q1 = concat(doc, tokens(3, 9000)), q2 = concat(doc, tokens(6, 9100));
  const uint64_t t1 = t.h.cache.begin_restore(t.h.cache.key(), q1);
  const uint64_t t2 = t.h.cache.begin_restore(t.h.cache.key(), q2);
  ASSERT_NE(t1, 0u);
  EXPECT_EQ(t2, t1) << "the second request read the document again";
  EXPECT_EQ(t.h.cache.restore_blocks(), 5);
  t.settle();
  Request b1 = t.h.admit(q1);
  t.h.cache.end_restore(t1, b1.cached_tokens);
  EXPECT_EQ(t.h.cache.restore_blocks(), 5);  // pinned for the second
  Request b2 = t.h.admit(q2);
  t.h.cache.end_restore(t2, b2.cached_tokens);
  EXPECT_EQ(t.h.cache.restore_blocks(), 0);
  EXPECT_EQ(b1.cached_tokens, 40);
  EXPECT_EQ(b2.cached_tokens, 40);
  EXPECT_TRUE(t.h.holds_its_tokens(b1));
  EXPECT_TRUE(t.h.holds_its_tokens(b2));
  const DiskTierStats s = t.disk.stats();
  EXPECT_EQ(s.reads, 5);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.hit_tokens, 80);
  t.check();
  t.h.drop(b1);
  t.h.drop(b2);
  t.settle();
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);

  // Both holders gone while in flight: the restore is cancelled, and is not joined again.
  const uint64_t t3 = t.h.cache.begin_restore(t.h.cache.key(), q1);
  ASSERT_NE(t3, 0u);
  EXPECT_EQ(t.h.cache.begin_restore(t.h.cache.key(), q2), t3);
  t.h.cache.end_restore(t3, 0);
  EXPECT_EQ(t.h.cache.restore_pending(t3), true);
  t.h.cache.end_restore(t3, 0);
  const uint64_t t4 = t.h.cache.begin_restore(t.h.cache.key(), q1);
  EXPECT_NE(t4, t3);
  t.settle();
  t.h.cache.end_restore(t4, 0);
  EXPECT_EQ(t.h.cache.restore_blocks(), 0);
  EXPECT_EQ(t.h.pool.stats().blocks_live, 0);
  t.check();
}

}  // namespace
}  // namespace pagoda
