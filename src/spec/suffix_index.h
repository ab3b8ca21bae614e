// SuffixIndex — the token sequences of earlier requests (prompt + answer), searchable by
// their suffixes, so a request whose recent tokens appeared before is offered what
// followed them then (speculative decoding's `suffix` proposer).
//
// Contract:
// - Single-threaded (the engine thread). Plain values in and out; no pointer into the
//   index outlives a call.
// - Tenants: every sequence is added under a tenant (the engine passes the prefix cache's
//   namespace: model, KV types, the request's cache_key); propose() searches only the
//   caller's tenant, so one tenant's text is never proposed to another (a proposal is
//   verified before anything is emitted, so a leak could only show as speed, and even
//   that is closed).
// - Bounded in bytes: bytes() is what the index holds, counted from its containers'
//   capacities: each sequence's token array (4 bytes a token) and 192 bytes of bookkeeping,
//   and the posting table (16 bytes a slot, kept at most half full, so ~36 bytes a
//   token). It stays at or under capacity_bytes by dropping the least recently added or
//   used sequences; a sequence larger than the whole budget is not kept. A sequence that
//   continues an earlier one of the same tenant (the next turn of a chat, a retried
//   request that went further) replaces it, and an identical one only refreshes it, so a
//   long conversation is held once, not once per turn. Rejected: a node-based hash map
//   of posting vectors (~110 bytes a token once allocator overhead is counted).
// - Search: the last kKeyTokens tokens of the context are looked up (a hash of them,
//   then compared), candidates are ranked by how far back they keep matching (up to
//   kMaxMatch tokens; ties to the most recent), and the best one's continuation is
//   proposed. Cost: one hash lookup and at most kMaxCandidates backward comparisons.
//   Rejected: a suffix tree (SuffixDecoding's): it ranks continuations by frequency,
//   which helps sampling-heavy workloads, at ~40 bytes per token and a harder byte
//   bound; the exact-repeat workloads this serves (retries, tool loops re-reading a
//   file, edits that copy the input) are served by the longest match.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagoda::spec {

struct Proposal {
  std::vector<int32_t> tokens;  // proposed continuation (empty: none)
  int64_t match = 0;            // context tokens it matched (>= the key length when found)
};

struct SuffixIndexStats {
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  int64_t sequences = 0;
  int64_t tokens = 0;
  int64_t added = 0;      // add() calls that stored or refreshed a sequence
  int64_t evicted = 0;    // sequences dropped for the byte bound
  int64_t proposals = 0;  // propose() calls that found a continuation
};

class SuffixIndex {
 public:
  static constexpr int kKeyTokens = 4;
  static constexpr int kMaxMatch = 64;
  static constexpr int kMaxCandidates = 16;

  explicit SuffixIndex(uint64_t capacity_bytes);
  SuffixIndex(const SuffixIndex&) = delete;
  SuffixIndex& operator=(const SuffixIndex&) = delete;

  // Stores a finished sequence under `tenant` (see the contract for replacement).
  void add(uint64_t tenant, std::span<const int32_t> tokens);
  // The continuation (at most max_tokens) of the longest match of context's suffix, into
  // `out` (its buffer reused: the engine calls this every step). The returning form is
  // for tests.
  void propose(uint64_t tenant, std::span<const int32_t> context, int64_t max_tokens, Proposal& out);
  Proposal propose(uint64_t tenant, std::span<const int32_t> context, int64_t max_tokens) {
    Proposal p;
    propose(tenant, context, max_tokens, p);
    return p;
  }
  void clear();

  uint64_t bytes() const { return bytes_; }
  SuffixIndexStats stats() const;
  // Aborts when the postings, the byte count or the LRU disagree (tests).
  void check_invariants() const;

 private:
  struct Seq {
    uint64_t tenant = 0;
    std::vector<int32_t> tokens;
    uint64_t full_hash = 0;  // of (tenant, tokens): finds an identical or extended one
    std::list<uint32_t>::iterator lru;
  };
  // One posting: the kKeyTokens tokens ending before tokens[end] of sequence `seq` hash
  // to `key`. An open-addressing table (linear probing, backward-shift deletion); seq 0
  // marks an empty slot. At most kMaxPostingsPerKey postings share a key (the first
  // ones: a run of repeated tokens would otherwise grow one probe chain without bound).
  struct Slot {
    uint64_t key = 0;
    uint32_t seq = 0;
    uint32_t end = 0;
  };
  static constexpr int kMaxPostingsPerKey = 8;
  // A sequence's map node, LRU node and full-hash node with allocator headers (~170 bytes).
  static constexpr uint64_t kSeqOverheadBytes = 192;
  uint64_t key_of(uint64_t tenant, std::span<const int32_t> window) const;
  uint64_t table_bytes(size_t slots) const { return slots * sizeof(Slot); }
  void insert_posting(uint64_t key, uint32_t seq, uint32_t end);
  void erase_posting(uint64_t key, uint32_t seq, uint32_t end);
  void grow_table(size_t slots);
  void drop(uint32_t id);
  void touch(uint32_t id);
  uint64_t budget_for(size_t extra_tokens) const;

  uint64_t capacity_;
  uint64_t bytes_ = 0;  // tokens + per-sequence overhead + the table
  uint32_t next_id_ = 1;
  std::unordered_map<uint32_t, Seq> seqs_;
  std::vector<Slot> table_;  // power-of-two size (or empty)
  size_t used_slots_ = 0;
  std::unordered_map<uint64_t, uint32_t> by_full_hash_;
  std::list<uint32_t> lru_;  // front: most recent
  int64_t tokens_ = 0, added_ = 0, evicted_ = 0, proposals_ = 0;
};

// Prompt lookup (speculative decoding's `ngram` proposer): the continuation, in the
// sequence's own tokens, of the latest earlier occurrence of its last n tokens, n from
// max_n down to min_n. O(tokens) a call, no state.
void ngram_lookup(std::span<const int32_t> tokens, int64_t max_tokens, Proposal& out, int min_n = 2, int max_n = 4);
inline Proposal ngram_lookup(std::span<const int32_t> tokens, int64_t max_tokens) {
  Proposal p;
  ngram_lookup(tokens, max_tokens, p);
  return p;
}

}  // namespace pagoda::spec
