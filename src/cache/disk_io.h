// DiskIo — the disk tier's I/O thread: restores (block reads) and spills (block writes)
// run here, off the engine thread, so a request restoring a long prefix from disk waits
// for its reads and the running requests do not (PrefixCache::begin_restore).
//
// Contract:
// - One thread, one FIFO queue of jobs (writes and reads in submission order). A read
//   submitted after a write of the same block finds its record: a block evicted a moment
//   ago and asked for again is restored, not recomputed (PrefixCache asks write_queued()).
// - Reads: read(blocks) reads each block's record (DiskTier::get: size, hash, tokens,
//   checksum checked) into the thread's own buffer and copies it into the caller's
//   memory (the fresh pool blocks the caller holds), in order, stopping at the first that
//   fails; take_done() then reports how many leading blocks were copied in intact. The
//   copy is made under the lock cancel() takes, so once cancel() returns the job's
//   destination memory is never written again, even by a read stuck in the kernel that
//   returns an hour later: the caller can hand those blocks out at once. The price is one
//   memcpy per block (~50 us for a 704 KiB TinyLlama block against ~0.5 ms to read it);
//   rejected: reading straight into the pool block, which made a hung read (a FIFO, a
//   hung NFS or FUSE mount) pin its blocks, and its request, for as long as it hung.
// - Deadline: an operation (one block's read or write) running longer than
//   DiskTierConfig::io_deadline_ms marks the thread stalled (stalled(); stats' `stalled`)
//   until it returns. The caller treats a stalled tier as a miss: PrefixCache cancels the
//   restores in flight (their requests compute instead) and starts none while it lasts.
// - Writes: write() copies the block (payload and tokens) into the queue at once, so the
//   pool block can be reused as soon as it returns. The queue is bounded by
//   DiskTierConfig::write_queue_bytes (payload + token bytes; 64 MiB by default, about
//   90 TinyLlama blocks of 704 KiB: 50 ms of the measured 1.3 GB/s write speed). When it
//   is full a spill is dropped (counted in write_queue_drops; the block is recomputed if
//   asked for again) — the engine thread never waits on the disk. Rejected: waiting for
//   room, which froze every request, a 4-token chat included, once 64 MiB of spills
//   queued behind one stuck write. write(..., WhenFull::Wait) (a clean shutdown's flush,
//   where nothing is being served) waits instead, unless the thread is stalled.
// - Threads: write(), read(), cancel(), take_done(), drain(), discard_writes(), stats()
//   from one owner thread (the engine's); the I/O thread calls only DiskTier (which is
//   thread-safe) and the `on_done` callback, after each read job, with no DiskIo lock
//   held (the engine uses it to wake its loop).
// - Lifetime: stop() (and the destructor) finishes the queued jobs and joins while the
//   thread makes progress. A thread stalled past the deadline is left behind (detached,
//   its callback cleared, the queue dropped): stop() returns false, and the DiskTier must
//   then outlive the process (the owner leaks it), since the stuck call may still return
//   into it. Everything else the thread touches it owns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
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
  // One block read now, for the caller to wait on (the engine thread, restoring a
  // hybrid model's state snapshot): queued like read(), then waited for, not reported by
  // take_done(). Returns whether it was copied in intact; false as well when the thread
  // stalls past the deadline meanwhile (the job is cancelled: dst is never written after).
  bool read_now(ReadBlock block, size_t payload_bytes);
  // Ends the job: afterwards its destination memory is never written and take_done()
  // never reports it. Returns how many leading blocks were copied in intact before.
  int64_t cancel(uint64_t ticket);
  // Appends (ticket, leading blocks read intact) for the read jobs finished since the
  // last call.
  void take_done(std::vector<std::pair<uint64_t, int64_t>>& out);

  enum class WhenFull { Drop, Wait };
  // Copies the block into the queue; a full queue drops it (or, with Wait, waits for room
  // while the thread is not stalled). See the contract.
  void write(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload,
             WhenFull when_full = WhenFull::Drop);
  // Queued or being written.
  bool write_queued(const BlockHash& h) const;
  // Drops the writes not started yet (a disk reset).
  void discard_writes();
  // Waits until the queue is empty and the thread idle; gives up (false) when the thread
  // is stalled.
  bool drain();
  // An operation has run past the deadline and not returned yet.
  bool stalled() const;
  // Finishes the queued jobs and joins; false when the thread stalled and was left
  // behind (see Lifetime). Idempotent.
  bool stop();

  // The queue fields of DiskTierStats.
  void fill_stats(DiskTierStats& s) const;

 private:
  struct State;  // shared with the thread (which may outlive this object: Lifetime)
  std::shared_ptr<State> s_;
  bool stopped_ = false;
  bool left_behind_ = false;
};

}  // namespace pagoda
