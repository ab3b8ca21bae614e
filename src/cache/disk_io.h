// DiskIo — the disk tier's I/O thread: restores (block reads) and spills (block writes)
// run here, off the engine thread, so a request restoring a long prefix from disk waits
// for its reads and the running requests do not (PrefixCache::begin_restore).
//
// Contract:
// - One thread, one FIFO queue of jobs (writes and reads in submission order). A read
//   submitted after a write of the same block finds its record: a block evicted a moment
//   ago and asked for again is restored, not recomputed (PrefixCache asks write_queued()).
// - Reads: read(blocks) reads each block's record (DiskTier::get: size, hash, tokens,
//   checksum checked) straight into the caller's memory (the fresh pool blocks the
//   caller holds), in order, stopping at the first that fails; take_done() then reports
//   how many leading blocks were read intact. The caller must keep the destination
//   memory untouched and allocated until its job is reported (the pool blocks stay held
//   by the restore: a cancelled one is not handed out while the thread may write it).
//   cancel() makes the thread skip the job's remaining blocks; it is still reported.
// - Writes: write() copies the block (payload and tokens) into the queue at once, so the
//   pool block can be reused as soon as it returns. The queue is bounded by
//   DiskTierConfig::write_queue_bytes (payload + token bytes; 64 MiB by default, about
//   90 TinyLlama blocks of 704 KiB: 50 ms of the measured 1.3 GB/s write speed). When it
//   is full, write() waits for room: a dropped spill would be lost work (recomputing a
//   32-token TinyLlama block costs ~0.1-0.3 s on 2 cores, writing it ~0.5 ms), so the
//   engine thread waits only while evictions outrun the disk by the whole queue, and
//   then for about one block's write. Counted (write_queue_waits, seconds).
// - Threads: write(), read(), cancel(), take_done(), drain(), discard_writes(), stats()
//   from one owner thread (the engine's); the I/O thread calls only DiskTier (which is
//   thread-safe) and the `on_done` callback, after each read job, with no DiskIo lock
//   held (the engine uses it to wake its loop).
// - Lifetime: the destructor finishes every queued job (reads too) and joins.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_hash.h"
#include "cache/disk_tier.h"

namespace pagoda {

class DiskIo {
 public:
  DiskIo(DiskTier& disk, std::function<void()> on_done = {});
  ~DiskIo();
  DiskIo(const DiskIo&) = delete;
  DiskIo& operator=(const DiskIo&) = delete;

  // A block of a read job: its hash and tokens, and where its payload goes.
  struct ReadBlock {
    BlockHash hash;
    std::vector<int32_t> tokens;
    uint8_t* dst = nullptr;
  };
  // Queues a read job; returns its ticket (never 0).
  uint64_t read(std::vector<ReadBlock> blocks, size_t payload_bytes);
  // The job's blocks not started yet are skipped.
  void cancel(uint64_t ticket);
  // Appends (ticket, leading blocks read intact) for the read jobs finished since the
  // last call.
  void take_done(std::vector<std::pair<uint64_t, int64_t>>& out);

  // Copies the block into the queue (waits while the queue is full; see the contract).
  void write(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  // Queued or being written.
  bool write_queued(const BlockHash& h) const;
  // Drops the writes not started yet (a disk reset).
  void discard_writes();
  // Waits until the queue is empty and the thread idle.
  void drain();

  // The queue fields of DiskTierStats.
  void fill_stats(DiskTierStats& s) const;

 private:
  struct ReadJob {
    uint64_t ticket = 0;
    std::vector<ReadBlock> blocks;
    size_t payload_bytes = 0;
    std::atomic<bool> cancelled{false};
  };
  struct Job {
    std::shared_ptr<ReadJob> read;  // null: a write
    BlockHash hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    uint64_t bytes() const { return payload.size() + tokens.size() * sizeof(int32_t); }
  };
  void loop();
  void unqueue_write(const Job& j);  // with mu_ held

  DiskTier& disk_;
  std::function<void()> on_done_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the thread: a job or stop
  std::condition_variable idle_cv_;  // the owner: room in the queue, or idle
  std::deque<Job> queue_;
  bool busy_ = false;  // the thread is running a job taken off the queue (a write stays booked)
  std::unordered_map<BlockHash, int, BlockHashHasher> queued_;  // writes queued or running
  std::unordered_map<uint64_t, std::shared_ptr<ReadJob>> reads_;  // queued or running
  std::vector<std::pair<uint64_t, int64_t>> done_;
  uint64_t next_ticket_ = 1;
  uint64_t queued_bytes_ = 0;
  int64_t queued_writes_ = 0;
  int64_t waits_ = 0;
  double wait_seconds_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pagoda
