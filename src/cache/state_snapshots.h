// StateSnapshots — the prefix cache's second half for hybrid models (Gated DeltaNet layers,
// qwen35): copies of a sequence's recurrent state at chosen token positions, so a later
// request sharing that prefix restores the state instead of recomputing it. A K/V prefix
// alone is useless to such a model: its recurrent layers fold the whole prefix into a
// fixed-size state, which no cached K/V block can give back.
//
// Contract:
// - A snapshot is the state after tokens[0, p) of one namespace (the prefix cache's: model,
//   KV types, block size, tenant key). Its identity is the chained hash of the prompt's
//   full blocks below p (block_hash.h, the same chain the K/V index uses) plus the tokens
//   of the partial block up to p, so equal identities mean equal token prefixes.
// - find(ns, prompt, limit) gives the largest p <= limit with a snapshot of prompt[0, p):
//   one hash per full block of the prompt (as the K/V lookup computes) and a token compare
//   per snapshot anchored on the path. restore() copies it out; a hit never consumes it.
// - Memory: each snapshot holds state_bytes, booked exactly; the total never exceeds
//   capacity_bytes: save() evicts least recently used snapshots (used = saved or restored)
//   first, and keeps none when one alone is over the cap. The cap is the snapshots' own
//   share of the KV budget (the engine carves it out), so snapshots never crowd out K/V.
//   Saving a prefix already held refreshes it in place (same bytes, most recently used).
// - Disk (set_disk, the prefix cache's disk tier): block-aligned snapshots (p a multiple
//   of the block size) are kept there too, as records of the same tier (disk_tier.h,
//   one LRU and one byte cap for K/V and states), because the tier stores full K/V blocks
//   only: after a restart a hit ends at a block boundary, and only a snapshot there can
//   start it. Written when evicted from RAM or at flush_to_disk() (a clean shutdown), and
//   also at save(..., persist) with a write-through tier (policy all: a kill -9 keeps
//   what was persisted). A record's key is the chain hash at p hashed once more with a
//   mark no token id takes (kDiskMark), so it never equals a K/V block's hash; a record
//   of another model or state size is a miss (the namespace is in the chain; the tier
//   checks the payload size and checksum). restore_longest() reads one back when it
//   beats every RAM snapshot, synchronously through the tier's I/O thread (a stuck disk
//   is a miss after its deadline), and keeps it in RAM as well.
// - Not thread-safe: the engine thread only. stats() is a value.
//
// Invariants (check_invariants()): the LRU list and the anchor map hold the same
// snapshots; bytes() == count x state_bytes <= capacity_bytes.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/disk_io.h"
#include "cache/disk_tier.h"
#include "cache/prefix_cache_config.h"

namespace pagoda {

class StateSnapshots {
 public:
  // block_size: the K/V index's (the hash chain's); state_bytes: one snapshot's size.
  StateSnapshots(uint64_t capacity_bytes, uint64_t state_bytes, int64_t block_size);

  // Keeps a copy of `state` (state_bytes) as the state after `tokens` (all of them) in
  // namespace ns. Returns false when it cannot be kept (over the cap alone, or no tokens).
  bool save(const BlockHash& ns, std::span<const int32_t> tokens, const uint8_t* state);
  // The largest p <= limit such that a snapshot of prompt[0, p) exists; 0 when none.
  int64_t find(const BlockHash& ns, std::span<const int32_t> prompt, int64_t limit) const;
  // Copies the snapshot of prompt[0, p) into `state` and marks it used. False when there
  // is none (find() says which p exist).
  bool restore(const BlockHash& ns, std::span<const int32_t> prompt, int64_t p, uint8_t* state);
  // The largest p <= limit with a snapshot of prompt[0, p) in RAM or on disk, copied into
  // `state` and marked used; 0 when none (state then holds unspecified bytes). A disk
  // record that fails to read is skipped for the next best.
  int64_t restore_longest(const BlockHash& ns, std::span<const int32_t> prompt, int64_t limit, uint8_t* state);
  // Drops the snapshot of exactly `tokens` (a sequence replacing its own older one).
  void erase(const BlockHash& ns, std::span<const int32_t> tokens);
  // Drops every snapshot (RAM; the disk tier is reset with the prefix cache's).
  void clear();

  // The disk tier (null: none) and its I/O thread; write_through: policy all.
  void set_disk(DiskTier* tier, DiskIo* io, bool write_through);
  bool has_disk() const { return disk_ != nullptr; }
  // With a write-through tier, queues the snapshot of exactly `tokens` (block-aligned) for
  // the disk now. See the contract.
  void persist(const BlockHash& ns, std::span<const int32_t> tokens);
  // Writes every block-aligned RAM snapshot not on disk yet, least recently used first,
  // waiting for room in the write queue (a clean shutdown).
  void flush_to_disk();

  int64_t size() const { return static_cast<int64_t>(lru_.size()); }
  uint64_t bytes() const { return static_cast<uint64_t>(lru_.size()) * state_bytes_; }
  uint64_t state_bytes() const { return state_bytes_; }
  SnapshotStats stats() const;
  void check_invariants() const;

 private:
  struct Snapshot {
    BlockHash anchor;              // the chain hash at the last block boundary below p (ns at 0)
    std::vector<int32_t> tail;     // tokens from that boundary to p (< block_size of them)
    int64_t p = 0;
    std::vector<uint8_t> state;
  };
  using Lru = std::list<Snapshot>;  // front: least recently used
  // The snapshot of exactly prompt[0, p) anchored at `anchor`, or end().
  Lru::iterator locate(const BlockHash& anchor, std::span<const int32_t> tail);
  BlockHash anchor_of(const BlockHash& ns, std::span<const int32_t> tokens) const;
  void unlink(Lru::iterator s);
  void evict_front();
  // The snapshot's disk record (block-aligned ones only), through the I/O thread;
  // wait: a full queue is waited for (shutdown) rather than dropped.
  void write_to_disk(const Snapshot& s, bool wait);

  uint64_t capacity_bytes_, state_bytes_;
  int64_t block_size_;
  Lru lru_;
  std::unordered_map<BlockHash, std::vector<Lru::iterator>, BlockHashHasher> by_anchor_;
  mutable SnapshotStats counters_;
  DiskTier* disk_ = nullptr;
  DiskIo* io_ = nullptr;
  bool write_through_ = false;
};

// A block-aligned snapshot's disk record key: the chain hash at its position, hashed
// once more over kDiskMark (no token id is negative, so no K/V block hashes the same).
inline constexpr int32_t kDiskMark = -0x5354;  // "ST"
BlockHash snapshot_disk_key(const BlockHash& anchor);

}  // namespace pagoda
