// DiskTier — the prefix cache's second tier: full KV blocks kept in a directory, one
// file per block, named by the block's chained hash (block_hash.h), across restarts.
//
// Contract:
// - What: a record is one full block: its hash, its tokens, the pool's raw slab bytes
//   (PagedKvPool::block_bytes) and a CRC-32C over all of it. The hash's namespace
//   (model, KV types, block size, cache key) is what keeps another model, KV type,
//   block size or tenant from ever matching; a record whose payload size differs from
//   the caller's block is a miss too. PrefixCache decides what goes in (blocks evicted
//   from RAM, or every full block with policy All) and reads blocks back (prefix_cache.h).
// - Files: DIR/<64 hex digits>.kvb, created 0600 (DIR 0700 when we create it). A record
//   is written to <name>.tmp then renamed, so a reader never sees a half-written name;
//   a process killed mid-write leaves at most a .tmp, deleted at the next open. After a
//   power loss a renamed file could still be torn (no fsync: it would cost a disk flush
//   per block); get() checks size, header, hash, tokens and checksum, and any mismatch
//   is a miss and the record is deleted — never bytes fed to attention.
// - Ledger: bytes = the real bytes on disk of every record (st_blocks × 512: the file
//   system's block rounding is the per-record overhead) plus DIR itself (the directory
//   is the index: its size grows with the entries) plus the lock file. After every call
//   bytes <= capacity_bytes: put() evicts least recently used records first (used:
//   written, or read back). LRU order survives a restart through the files' mtimes
//   (a read-back touches it).
// - One process per DIR: an flock on DIR/lock, taken at construction (a second server
//   on the same DIR is refused with a one-line error).
// - Threads: any thread may call any method. The ledger (records, LRU, counters) is
//   under one mutex held only for bookkeeping, never across a file's read or write, so
//   the engine thread's contains() does not wait behind the disk I/O thread's reads and
//   writes (disk_io.h; at ~0.5 ms a 704 KiB block, holding it across the I/O would stall
//   a 500-block lookup walk up to a quarter of a second). A record evicted or reset while
//   another thread reads it is read from the open file or missed, never half-read: files
//   are replaced by rename and unlinked, not rewritten in place. stats() is a copy.
// - Failures: a bad DIR (not creatable, not a directory, not writable, locked) throws
//   pagoda::Error with one line naming it. I/O errors after that (disk full) are not
//   fatal: the block is simply not kept (counted in write_errors).
// - Only regular files are opened: records with O_NOFOLLOW | O_NONBLOCK and checked with
//   fstat (a FIFO or device put in a record's place would block a read forever; it is a
//   corrupt record, deleted), temporary files created with O_EXCL. Symlinks are not
//   booked at startup.
//
// Invariants (check_invariants()):
//  1. The records map and the LRU list hold the same hashes; every record's file exists.
//  2. bytes == sum of record bytes + directory bytes + lock file bytes, and <= capacity.
//  3. LRU stamps (mtime order) do not decrease from head (next to evict) to tail.
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <functional>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"

namespace pagoda {

struct DiskTierConfig {
  enum class Policy { Evict, All };
  std::string dir;                          // empty: no disk tier
  uint64_t capacity_bytes = 4ull << 30;     // --prompt-cache-disk-bytes
  Policy policy = Policy::Evict;            // --prompt-cache-disk-policy evict|all
  // Spills waiting for the disk I/O thread (disk_io.h) at most, in payload + token bytes;
  // when it is full a spill is dropped, the engine thread never waits (DiskIo::write).
  uint64_t write_queue_bytes = 64ull << 20;
  // One block's read or write running longer than this marks the tier stalled: restores
  // in flight become misses and none start until it returns (disk_io.h). A block takes
  // ~0.5 ms here (704 KiB at 1.3 GB/s) and an 8 MiB block of a 27B model ~80 ms on a
  // 100 MB/s disk, so 2 s is 25x the slowest healthy case. --prompt-cache-disk-deadline-ms.
  int io_deadline_ms = 2000;
  // Tests only (no flag): every get() sleeps this long first, a slow disk to restore from,
  // and test_io_hook (when set) runs at the start of every get() and put() (write: true),
  // where a test can block to stand in for a hung mount.
  int read_delay_ms = 0;
  std::function<void(bool write)> test_io_hook;
};

// "evict" | "all"; throws pagoda::Error naming the flag otherwise.
DiskTierConfig::Policy parse_disk_policy(std::string_view text, std::string_view flag = "--prompt-cache-disk-policy");
const char* disk_policy_name(DiskTierConfig::Policy p);

struct DiskTierStats {
  bool enabled = false;
  int64_t blocks = 0;           // records on disk
  uint64_t bytes = 0;           // real bytes on disk: records + directory + lock file
  uint64_t capacity_bytes = 0;
  int64_t hits = 0;             // lookups that read at least one block back (PrefixCache counts)
  int64_t hit_tokens = 0;       // prompt tokens those blocks gave a request
  int64_t writes = 0;           // records written
  int64_t reads = 0;            // records read back intact
  int64_t evictions = 0;        // records deleted to stay under capacity_bytes
  int64_t corrupt = 0;          // records that failed a check (torn, flipped, wrong size): deleted, a miss
  int64_t write_errors = 0;     // writes the file system refused (the block was not kept)
  uint64_t read_bytes = 0;      // payload bytes read back
  double read_seconds = 0;      // time spent in those reads (open, read, checksum)
  uint64_t written_bytes = 0;   // payload bytes written
  double write_seconds = 0;
  // The asynchronous path (disk_io.h; zeros without it): spills copied and waiting for
  // the I/O thread, their bytes (payload + tokens; bounded by write_queue_capacity_bytes),
  // the times the engine thread waited for room and for how long, and block reads of
  // restores in flight.
  int64_t queued_writes = 0;
  uint64_t queued_write_bytes = 0;
  uint64_t write_queue_capacity_bytes = 0;
  int64_t write_queue_waits = 0;
  double write_queue_wait_seconds = 0;
  int64_t restores_in_flight = 0;
  int64_t write_queue_drops = 0;  // spills dropped because the queue was full (the engine never waits)
  // The I/O thread is stuck in one operation past DiskTierConfig::io_deadline_ms (a hung
  // mount, a FIFO in place of a file): restores are misses while it lasts; for how long.
  bool stalled = false;
  double stalled_seconds = 0;
  int64_t restore_timeouts = 0;   // restores given up because the tier stalled (PrefixCache counts)
  // Restore throughput: read_bytes / read_seconds (0 before any read).
  double read_bytes_per_s() const { return read_seconds > 0 ? static_cast<double>(read_bytes) / read_seconds : 0.0; }
};

class DiskTier {
 public:
  // Opens DIR (creating it), takes its lock, deletes leftover .tmp files, books the
  // records found (LRU order by mtime) and evicts down to the capacity. Throws
  // pagoda::Error for a bad DIR (see the contract).
  explicit DiskTier(const DiskTierConfig& config);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const DiskTierConfig& config() const { return config_; }
  bool contains(const BlockHash& h) const;
  // Writes the record for block h (tokens: its block_size tokens; payload: its slab).
  // Already present: only marks it used. False when it was not kept (larger than the
  // capacity, or an I/O error).
  bool put(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  // Reads block h's payload into `payload` (exactly its size) after checking the record
  // against h, `tokens` and its checksum; marks it used. False on a miss; a record that
  // fails a check is deleted (counted in corrupt). `payload` is unspecified after false.
  bool get(const BlockHash& h, std::span<const int32_t> tokens, std::span<uint8_t> payload);
  // A lookup read `tokens` prompt tokens back from this tier (stats only).
  void count_hit(int64_t tokens);
  // Deletes every record.
  void reset();

  DiskTierStats stats() const;
  // Least recently used first (tests).
  std::vector<BlockHash> lru_order() const;
  // The bytes the ledger should hold, recounted from the file system (tests).
  uint64_t recount_bytes() const;
  void check_invariants() const;

 private:
  struct Record {
    uint64_t bytes = 0;                      // st_blocks × 512
    std::list<BlockHash>::iterator lru;      // position in lru_
  };
  std::string path_of(const BlockHash& h) const;
  // The rest: with mu_ held.
  void touch(const BlockHash& h, int fd);    // to the LRU tail, mtime next_stamp()
  std::array<struct timespec, 2> next_stamp();  // for futimens: now, strictly after the last
  void erase(const BlockHash& h);            // unlink + unbook
  void refresh_dir_bytes();
  // Evicts LRU records until bytes + incoming <= capacity; false when even an empty
  // tier would not fit `incoming`.
  bool make_room(uint64_t incoming);

  DiskTierConfig config_;
  int lock_fd_ = -1;
  mutable std::mutex mu_;                    // guards everything below
  std::unordered_map<BlockHash, Record, BlockHashHasher> records_;
  std::list<BlockHash> lru_;                 // head: least recently used
  uint64_t record_bytes_ = 0;
  uint64_t dir_bytes_ = 0;                   // DIR and its lock file
  int64_t last_stamp_ns_ = 0;               // the newest mtime given (ns since the epoch)
  DiskTierStats counters_;
};

}  // namespace pagoda
