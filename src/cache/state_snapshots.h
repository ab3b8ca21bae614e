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
  // Drops every snapshot.
  void clear();

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
  void evict_front();

  uint64_t capacity_bytes_, state_bytes_;
  int64_t block_size_;
  Lru lru_;
  std::unordered_map<BlockHash, std::vector<Lru::iterator>, BlockHashHasher> by_anchor_;
  mutable SnapshotStats counters_;
};

}  // namespace pagoda
