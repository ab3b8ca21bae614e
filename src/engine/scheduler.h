// Scheduler — decides each engine step: which running sequences decode, which are
// preempted when the pool runs out, how the rest of the token budget goes to chunked
// prefill, and which waiting requests are admitted. It owns the waiting and running
// lists and operates the KV store and the prefix cache (reserve, borrow, release,
// index); it has no thread, no model and no sinks: Engine runs the loop, the forward
// and the sinks around it (vLLM v1's schedule() -> SchedulerOutput is the model).
//
// Contract:
// - Single-threaded (the engine thread). Sequences are the caller's (SchedSeq objects
//   it owns, usually as the base of its own request type); the scheduler holds
//   pointers between add() and remove(), or until schedule() reports them ended.
// - schedule() implements the scheduling policy, in this order. This is its one statement:
//   Engine's header and the docs (docs/architecture.md) point here.
//    1. Decode: every running sequence whose prompt is computed reserves one more slot,
//       in running order; when the pool has no block left (evictable cached blocks are
//       taken first, LRU) the most recently admitted running sequence is preempted
//       (possibly the one asking): its checked prefix is indexed, its blocks released,
//       and it goes to the front of waiting. A sequence that cannot grow even alone is
//       removed and reported in `ended_length`. Then proposed tokens (speculative
//       decoding: SchedSeq::draft, which the engine sets before schedule()) ride in their
//       sequence's decode chunk, in running order, within what the decodes leave of
//       max_batch_tokens, in slots from free or evictable blocks only: a reservation that
//       fails drops the proposal rather than preempt anyone for a guess.
//    2. Prefill: the rest of max_batch_tokens goes, in admission order, to running
//       sequences still computing their prompt, then to admissions FCFS while running
//       < parallel. Admission borrows the longest cached prefix and reserves the whole
//       remaining prompt (all or nothing); when it does not fit the head waits, unless
//       nothing runs (or it can never fit): then it is removed and reported, in
//       `ended_length` when it had generated tokens (a preempted one that grew), else in
//       `refused` with the pool's reason. With the whole prompt reserved at admission an
//       admitted prefill never runs out of blocks mid-way, and no running sequence is
//       preempted to admit one (that would trade one sequence's progress for another's and
//       can thrash). Rejected: "longest cached prefix
//       first" -- it starves cold prompts under a hot-prefix load; FCFS is the order a
//       client can reason about. A prefill in progress takes the budget before new
//       admissions, so with a small max_batch_tokens a long prompt delays the first token
//       of requests behind it (not the tokens of running streams: decode comes first).
//       Shared prefix computed once: a waiting request whose prompt shares at least one
//       block more with the prompt of a running sequence still in prefill (the leader)
//       than the leader borrowed from the cache is deferred (reported in `deferred`)
//       until the leader has computed and indexed the shared part, then admitted to
//       borrow it. The leader's prefill stops at a *checkpoint*: the end of the block in
//       which the two prompts part (or the leader's prompt end, if sooner); that chunk
//       gets a logits row only to vouch for its K/V (ScheduledChunk::checkpoint: checked,
//       not sampled) and computed() indexes it, with the sliding-window companions the
//       leader holds there. So the follower borrows exactly the common prefix and
//       computes only its own tokens, and waits only for the shared part, not for the
//       leader's whole prompt. Requests that share nothing are admitted meanwhile (they
//       overtake only deferred ones). Deferral is decided before the running prefills
//       are chunked (the head of the queue, kMaxDeferredScan at most), so a checkpoint
//       is placed even in a step whose budget the leader takes whole; a leader admitted
//       in this step looks for its followers behind it before its first chunk.
//       Without this a burst of N requests on one document computes its uncached part
//       up to N times (measured: 8 requests on a 1.7k-token document each prefilled
//       ~275 tokens where ~40 were new). Rejected: (1) admitting the follower and
//       skipping the shared positions until the leader writes them — the forward would
//       read K/V another sequence has not written yet, and a leader preempted or
//       cancelled mid-way would leave holes; (2) waiting for the leader's prompt end (the
//       first version of this): with sliding windows the leader has released the window
//       at the fork by then, so a follower whose own part is longer than about a block
//       (window 40, block 16, 60-token questions: 4 x 260 tokens computed with the cache
//       on, as many as with it off) borrowed nothing after waiting; (3) indexing every
//       chunk's blocks as it completes — a logits row per chunk, and with windows the
//       companions of every block, i.e. no window saving at all. A checkpoint costs one
//       logits row (n_vocab x dim MACs, ~0.01% of a 512-token chunk at 1.1B) and at
//       most one extra step for the leader per checkpoint. A leader cancelled or
//       preempted before its checkpoint leaves nothing indexed: its followers are
//       re-examined the next step (one becomes the new leader); after it, they borrow
//       what it indexed. A request that arrives after the leader computed past the fork
//       waits for the leader's prompt end (its next index point), except with sliding
//       windows when that is more than a block past the fork: the window there is gone
//       by then, so it is admitted and computes the prefix itself.
//       Restoring from disk (PrefixCache::set_disk_io): a request at the point of admission
//       whose cached prefix continues on disk first starts a restore
//       (PrefixCache::begin_restore) and waits for it *in the waiting list*, not admitted,
//       computing nothing: it is reported in `restoring`, and the requests behind it are
//       admitted past it, as past a deferred one. It holds a running slot meanwhile
//       (running + restoring <= parallel), so restores never pin more blocks than that
//       many admissions would borrow. Each step begins by publishing the restores the
//       I/O thread finished (poll_restores); such a request is then admitted like any
//       other: its lookup borrows the restored blocks, and the restore is ended. A
//       request is restored once per admission (a restore that ended short of its chain
//       -- a failed read, blocks evicted again before admission -- recomputes the rest).
//       Removed (cancelled, deadline) while restoring: the request ends at once and its
//       restore is ended (cancelled once no other request shares it: PrefixCache's
//       contract; the I/O thread is fenced, what it read intact stays cached and the other
//       blocks go back to the pool at once). Restores' blocks yield to running
//       sequences: when a decode cannot reserve its slot, finished restores are unpinned
//       (left cached, evictable) before anyone is preempted, and a sequence running alone
//       waits for restores in flight rather than end with Length; when the head of the
//       queue does not fit with nothing running, restores are unpinned and it tries again
//       before it is refused.
// - After the forward the caller reports each chunk with computed(); a chunk whose
//   logits row was finite is `checked`, which also indexes a just-completed prompt (or a
//   checkpoint).
//   Only checked tokens are ever indexed in the prefix cache (see SchedSeq::n_checked).
// - Hot path: schedule() reuses its output's vectors; it allocates only on growth.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/state_snapshots.h"
#include "kv/paged_kv_store.h"

namespace pagoda {

struct SchedulerConfig {
  int parallel = 4;                // running sequences at most
  int64_t max_batch_tokens = 512;  // tokens per step (decode + prefill)
  // Hybrid models (a StateSnapshots given): a prefill also snapshots the recurrent state
  // each time it crosses a multiple of this many tokens (0: only the fixed points below).
  int64_t state_snapshot_interval = 0;
};

// The scheduler's part of one request.
struct SchedSeq {
  std::vector<int32_t> tokens;  // prompt + generated: what the KV must hold (last one pending)
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // leading tokens whose K/V is in the store
  // Leading computed tokens a finite logits row vouched for: the row at position p
  // attends to every K/V at positions <= p, so a NaN/inf there would have reached it.
  // Only these are indexed in the prefix cache (a prefill chunk without a logits row,
  // or the step whose logits were non-finite, is vouched for by nothing).
  int64_t n_checked = 0;
  CacheKey key;
  // Prompt ranges [begin, end) a prefill chunk must not end inside (an image whose tokens
  // attend both ways: each needs the whole image in its batch or already stored). Sorted.
  std::vector<std::pair<int64_t, int64_t>> atomic_spans;
  SeqId seq_id = -1;            // while admitted
  bool admitted = false;
  uint64_t admit_order = 0;
  int64_t admissions = 0;       // times admitted (1 + preemptions once running again)
  int64_t first_cached_tokens = 0;  // prompt tokens borrowed from the cache at the 1st admission
  int64_t admit_cached_tokens = 0;  // ... at the current admission
  // While waiting: the admit_order of the prefilling sequence it was deferred behind
  // (a memo, so a long wait costs O(running) per step instead of a prefix comparison).
  uint64_t deferred_behind = 0;
  int64_t deferred_until = 0;  // ... and the position of that prompt it waits to borrow up to
  bool deferred = false;
  // While prefilling as a leader: positions where deferred followers' shares end, sorted
  // ascending; the prefill stops at each to index it (see the contract). Cleared when
  // its KV is released.
  std::vector<int64_t> checkpoints;
  int64_t preemptions = 0;
  // While waiting: the disk restore it waits for (PrefixCache ticket; 0: none), and
  // whether this admission tried one already.
  uint64_t restore = 0;
  bool restore_tried = false;
  // Hybrid models with a disk tier: the position of this sequence's latest block-aligned
  // decode snapshot (0: none), replaced by the next one (scheduler.h, save_snapshot).
  int64_t boundary_snapshot = 0;
  // Speculative decoding: tokens proposed to follow tokens.back(), set by the engine before
  // schedule() for a decoding sequence. schedule() verifies them in its decode chunk when
  // their slots fit in blocks free or evictable now (never by preempting anyone) and the
  // step's token budget allows; else it shortens or clears them. Cleared when released.
  std::vector<int32_t> draft;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  // Everything but the last token is computed and that token is sampled: feed it.
  bool decoding() const { return generated() > 0 && n_computed + 1 == static_cast<int64_t>(tokens.size()); }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

struct ScheduledChunk {
  SchedSeq* seq = nullptr;
  int64_t n_tokens = 0;  // batch tokens of this sequence, from position seq->n_computed
  bool logits = false;   // its last token wants a logits row
  bool decode = false;   // one sampled token fed back (else a prefill chunk)
  // A prefill chunk ending at a leader's checkpoint (logits is true): the row only
  // vouches for the K/V (finite: computed(checked) indexes it); nothing is sampled.
  bool checkpoint = false;
  // The chunk computes the prompt's last token (derived: a row that is not a checkpoint).
  bool ends_prompt() const { return logits && !checkpoint; }
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // batch order: decodes, then prefill chunks
  std::vector<SchedSeq*> preempted;    // in preemption order (now at the front of waiting)
  std::vector<SchedSeq*> admitted;     // in admission order (each also has a chunk)
  std::vector<SchedSeq*> deferred;     // waiting for a running prefill they share (stay waiting)
  std::vector<SchedSeq*> restoring;    // waiting for their disk restore (stay waiting)
  std::vector<SchedSeq*> ended_length;  // removed: out of KV for good; end them (Length)
  std::vector<std::pair<SchedSeq*, std::string>> refused;  // removed: a prompt the pool cannot take
  int64_t n_tokens = 0;                // sum of chunks' n_tokens
  void clear();
};

class Scheduler {
 public:
  // snapshots: a hybrid model's recurrent-state snapshots (cache/state_snapshots.h), or
  // null. With them a cache hit is cut back to the longest snapshot it covers (the state
  // restored there, the rest recomputed), and snapshots are taken where the next request
  // can use them: one token short of each prompt's end (a prefill chunk is cut there, so
  // a resent prompt, whose last token is always recomputed, finds it), at the end of a
  // sequence (the next turn of a conversation resends it), at prefill checkpoints (a
  // deferred follower's share, block-aligned) and every state_snapshot_interval tokens.
  // With a disk tier, whose K/V hits end at block boundaries, also at the last block
  // boundary of the prompt and of the sequence (each decode boundary replaces the
  // sequence's previous one); with a write-through tier those two go to disk at once.
  Scheduler(const SchedulerConfig& config, PagedKvStore& store, PrefixCache& cache,
            StateSnapshots* snapshots = nullptr);
  // The engine resolves an automatic interval once the pool exists (before any step).
  void set_state_snapshot_interval(int64_t n) { config_.state_snapshot_interval = n; }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A new request, at the back of the waiting queue. Requires: not admitted,
  // n_computed == 0, tokens non-empty.
  void add(SchedSeq* s);
  // Takes s out of the scheduler (it finished, was cancelled or failed): its checked
  // prefix is indexed and its blocks released. A sequence already out is left alone.
  void remove(SchedSeq* s);
  // One step's decision. The reference stays valid until the next schedule().
  const SchedulerOutput& schedule();
  // After the forward: `n_tokens` more of s are computed; `checked` when the chunk's
  // logits row was finite (then a prompt that just completed is indexed, so concurrent
  // requests with the same prefix share its full blocks).
  void computed(SchedSeq* s, int64_t n_tokens, bool checked);
  // After a decode chunk with proposed tokens: the slots of those rejected are released
  // (the table truncated to n_computed), so no block holds K/V past what was accepted.
  void release_unverified(SchedSeq* s);

  const std::vector<SchedSeq*>& running() const { return running_; }
  const std::deque<SchedSeq*>& waiting() const { return waiting_; }
  int64_t blocks_held() const;  // the running tables' blocks (shared ones counted per table)
  int64_t restoring() const { return n_restoring_; }  // waiting requests with a restore
  // Invariants 1-2 of Engine's header that are the scheduler's, and the pool's tables.
  void check_invariants() const;

 private:
  bool reserve_decode(SchedSeq* s);
  void preempt(SchedSeq* s);
  void release_kv(SchedSeq* s);
  void end(SchedSeq* s);  // out of running / waiting, KV released, restore ended
  void end_restore(SchedSeq* s, int64_t cached_tokens);
  void add_chunk(SchedSeq* s, int64_t& budget);
  static bool prefilling(const SchedSeq* r) { return r->generated() == 0 && r->n_computed < r->n_prompt; }
  // True when s waits for a running prefill it shares (see defer_behind).
  bool defer_behind_prefill(SchedSeq* s);
  // True when s waits for r; then s is marked and r has a checkpoint where s's share ends.
  bool defer_behind(SchedSeq* s, SchedSeq* r);

  // Hybrid models: a snapshot of s's state (tokens[0, n_computed)) when its K/V up to there
  // is indexed or will be by release.
  void save_snapshot(SchedSeq* s);
  // With a disk tier, the last block boundary of s's prompt short of its last token (a
  // prefill stops there to snapshot); else 0.
  int64_t prompt_boundary(const SchedSeq* s) const;

  SchedulerConfig config_;
  PagedKvStore& store_;
  PrefixCache& cache_;
  StateSnapshots* snapshots_ = nullptr;
  std::vector<SchedSeq*> running_;  // admission order (oldest first)
  std::deque<SchedSeq*> waiting_;   // FCFS; preempted ones at the front
  std::vector<SchedSeq*> decode_scratch_;
  SchedulerOutput out_;
  int64_t n_restoring_ = 0;  // waiting sequences with restore != 0
  SeqId next_seq_id_ = 0;
  uint64_t next_admit_ = 0;
};

}  // namespace pagoda
