#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <span>

#include "common/error.h"

namespace pagoda {

void SchedulerOutput::clear() {
  chunks.clear();
  preempted.clear();
  admitted.clear();
  deferred.clear();
  restoring.clear();
  ended_length.clear();
  refused.clear();
  n_tokens = 0;
}

Scheduler::Scheduler(const SchedulerConfig& config, PagedKvStore& store, PrefixCache& cache,
                     StateSnapshots* snapshots)
    : config_(config), store_(store), cache_(cache), snapshots_(snapshots) {
  PAGODA_CHECK(config_.parallel >= 1 && config_.max_batch_tokens >= config_.parallel,
               "Scheduler: parallel >= 1 and max_batch_tokens >= parallel");
}

void Scheduler::add(SchedSeq* s) {
  PAGODA_CHECK(!s->admitted && s->n_computed == 0 && !s->tokens.empty(), "Scheduler::add of a scheduled sequence");
  waiting_.push_back(s);
}

void Scheduler::save_snapshot(SchedSeq* s) {
  if (!snapshots_ || !s->admitted || !s->key.use_cache || !cache_.config().enabled || s->n_computed <= 0) return;
  const RecurrentStates& states = store_.recurrent_states();
  PAGODA_CHECK(states.pos(s->seq_id) == s->n_computed, "scheduler: the recurrent state is not at the computed position");
  snapshots_->save(s->key.ns, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_computed)),
                   states.data(s->seq_id));
}

int64_t Scheduler::prompt_boundary(const SchedSeq* s) const {
  if (!snapshots_ || !snapshots_->has_disk() || s->generated() > 0) return 0;
  const int64_t block = store_.pool().block_size();
  return (s->n_prompt - 1) / block * block;
}

void Scheduler::release_kv(SchedSeq* s) {
  s->draft.clear();
  if (!s->admitted) return;
  // The state at the end of the sequence, for the next turn that resends it (or this one,
  // preempted, when it is admitted again); only where its K/V is vouched for and indexed.
  if (s->n_checked == s->n_computed) save_snapshot(s);
  // A write-through disk tier keeps the sequence's last block-aligned state (its K/V
  // blocks up to there go to disk as they are indexed below).
  if (s->boundary_snapshot > 0 && s->n_checked >= s->boundary_snapshot)
    snapshots_->persist(s->key.ns, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->boundary_snapshot)));
  if (s->n_checked > 0) {
    SeqTables& t = store_.mutable_tables(s->seq_id);
    cache_.insert(s->key, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_checked)), t.main,
                  /*finished=*/true, t.local);
  }
  store_.remove(s->seq_id);
  s->admitted = false;
  s->seq_id = -1;
  s->n_computed = 0;
  s->n_checked = 0;
  s->checkpoints.clear();
}

void Scheduler::end_restore(SchedSeq* s, int64_t cached_tokens) {
  if (s->restore == 0) return;
  cache_.end_restore(s->restore, cached_tokens);
  s->restore = 0;
  --n_restoring_;
}

void Scheduler::end(SchedSeq* s) {
  end_restore(s, 0);
  release_kv(s);
  auto r = std::find(running_.begin(), running_.end(), s);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), s);
  if (w != waiting_.end()) waiting_.erase(w);
}

void Scheduler::remove(SchedSeq* s) { end(s); }

void Scheduler::preempt(SchedSeq* s) {
  // The cache keeps its checked prefix (evictable), so recompute is usually a cache hit.
  release_kv(s);
  running_.erase(std::find(running_.begin(), running_.end(), s));
  waiting_.push_front(s);
  ++s->preemptions;
  out_.preempted.push_back(s);
}

// Gives a decoding sequence one more slot, preempting the newest running sequences
// while the pool is out of blocks. False when `s` itself was preempted or ended.
bool Scheduler::reserve_decode(SchedSeq* s) {
  for (;;) {
    const AllocResult r = store_.reserve(s->seq_id, s->n_computed + 1);
    if (r.ok()) return true;
    // Blocks disk restores hold come before any running sequence's: finished restores are
    // unpinned (their blocks stay cached, evictable) and, when s is alone, restores in
    // flight are waited for (the engine thread blocks on the reads: only when the pool is
    // exhausted, where the alternative is ending s with Length for blocks it will get).
    if (r.status != AllocResult::Status::NeverFits) {
      if (cache_.unpin_restores()) continue;
      if (running_.size() == 1 && cache_.restore_blocks() > 0) {
        cache_.wait_restores();
        continue;
      }
    }
    if (r.status == AllocResult::Status::NeverFits || running_.size() == 1) {
      end(s);  // it cannot grow even alone
      out_.ended_length.push_back(s);
      return false;
    }
    SchedSeq* victim = running_.back();
    preempt(victim);
    if (victim == s) return false;
  }
}

void Scheduler::add_chunk(SchedSeq* s, int64_t& budget) {
  int64_t n = std::min(budget, s->pending());
  if (n <= 0) return;
  // Hybrid models: a prefill stops one token short of the prompt's end, so the state
  // there is snapshotted (computed()) for a request resending this prompt: a cache hit
  // always leaves the last prompt token to recompute. One extra step of one token.
  if (snapshots_ && s->generated() == 0 && s->n_computed < s->n_prompt - 1 && s->n_computed + n >= s->n_prompt)
    n = s->n_prompt - 1 - s->n_computed;
  // With a disk tier it also stops at the prompt's last block boundary (see the constructor).
  if (const int64_t b = prompt_boundary(s); b > s->n_computed && b < s->n_computed + n) n = b - s->n_computed;
  // A leader's prefill stops at its next checkpoint (none is needed at the prompt end,
  // which is indexed anyway).
  bool checkpoint = false;
  const int64_t end = s->n_computed + n;
  for (int64_t cp : s->checkpoints)
    if (cp > s->n_computed && cp < static_cast<int64_t>(s->tokens.size())) {
      if (cp <= end) {
        n = cp - s->n_computed;
        checkpoint = true;
      }
      break;
    }
  // A chunk never ends inside an image whose tokens attend both ways: it stops before an
  // image it would cut, or, starting in one (a cached prefix may end there), runs to the
  // image's end, over the budget by less than one image (Engine checks an image fits in
  // max_batch_tokens). Rejected: splitting the image over steps with its later rows'
  // K/V computed twice — llama.cpp also decodes an image in one batch.
  for (const auto& [b, e] : s->atomic_spans) {
    const int64_t chunk_end = s->n_computed + n;
    if (e <= s->n_computed) continue;
    if (b < chunk_end && chunk_end < e) {
      n = b > s->n_computed ? b - s->n_computed : e - s->n_computed;
      checkpoint = false;
      for (int64_t cp : s->checkpoints) checkpoint |= cp == s->n_computed + n;
    }
    break;
  }
  out_.chunks.push_back({s, n, checkpoint || n == s->pending(), false, checkpoint});
  out_.n_tokens += n;
  budget -= n;
}

// True (and s marked, r's checkpoint set) when s should wait for r, a running sequence
// still computing its prompt: that prompt shares at least one block with s beyond what r
// borrowed from the cache and r has not indexed the shared part yet, so once it has, s
// borrows it instead of computing it again. Only an enabled cache, the same namespace
// (model, KV types, tenant key) and a prompt the cache will index (a first prefill,
// generated() == 0) count.
bool Scheduler::defer_behind(SchedSeq* s, SchedSeq* r) {
  if (!prefilling(r) || !r->key.use_cache || !(r->key.ns == s->key.ns)) return false;
  const int64_t block = store_.pool().block_size();
  const int64_t n = std::min<int64_t>(r->n_prompt, static_cast<int64_t>(s->tokens.size()));
  // A block more than r borrowed, and no less than the cache's minimum hit.
  const int64_t need = std::max<int64_t>(r->admit_cached_tokens + block, cache_.config().min_prefix_tokens);
  if (n < need) return false;
  const auto at = [](const SchedSeq* q, int64_t i) { return q->tokens[static_cast<size_t>(i)]; };
  if (at(r, need - 1) != at(s, need - 1)) return false;  // cheap: most unrelated prompts differ there
  int64_t common = 0;
  while (common < n && at(r, common) == at(s, common)) ++common;
  if (common < need) return false;
  // The end of the block holding the last shared token: r's blocks up to there hold every
  // shared position (the last one is borrowed in part and copied on write).
  // Hybrid models need r's state there too, so the checkpoint is where r's snapshot is
  // taken: the last block boundary at or before the fork (a running sequence's partly
  // written block is not indexed yet), short of both prompts' last tokens (a hit never
  // covers those). s recomputes at most a block of what it shares.
  const int64_t until =
      snapshots_ ? std::min({common, static_cast<int64_t>(s->tokens.size()) - 1, r->n_prompt - 1}) / block * block
                 : std::min((common + block - 1) / block * block, r->n_prompt);
  if (until < need) return false;
  if (r->n_checked >= until) return false;  // indexed already: s borrows it now
  // r computed past the fork before s was seen (s came later), so its next index point
  // is its prompt end. With sliding windows the window at the fork is gone by then
  // unless the prompt ends within a block of the fork: waiting would gain nothing.
  if (until <= r->n_computed && until < r->n_prompt && store_.groups().windowed() &&
      r->n_prompt - common > block)
    return false;
  s->deferred = true;
  s->deferred_behind = r->admit_order;
  s->deferred_until = until;
  auto& cps = r->checkpoints;
  const auto it = std::lower_bound(cps.begin(), cps.end(), until);
  if (it == cps.end() || *it != until) cps.insert(it, until);
  return true;
}

bool Scheduler::defer_behind_prefill(SchedSeq* s) {
  const bool was_deferred = s->deferred;
  s->deferred = false;  // also when the cache was turned off meanwhile
  if (!cache_.config().enabled || !s->key.use_cache) return false;
  if (was_deferred)  // the memo: O(running) a step while it waits
    for (const SchedSeq* r : running_)
      if (r->admit_order == s->deferred_behind && prefilling(r) && r->n_checked < s->deferred_until)
        return s->deferred = true;
  for (SchedSeq* r : running_)
    if (defer_behind(s, r)) return true;
  return false;
}

const SchedulerOutput& Scheduler::schedule() {
  out_.clear();
  cache_.poll_restores();  // restores the disk I/O thread finished: indexed, pinned

  // 1. Decode. Iterate over a copy: preemption edits running_ (always at or after the
  // sequence asking, so every one already served keeps its slot).
  decode_scratch_.assign(running_.begin(), running_.end());
  for (SchedSeq* s : decode_scratch_)
    if (s->admitted && s->decoding()) reserve_decode(s);
  // Proposed tokens (SchedSeq::draft) ride in their sequence's decode chunk, within the
  // step's token budget, in slots taken from free or evictable blocks only: a reservation
  // that fails drops the proposal instead of preempting anyone for a guess.
  int64_t room = config_.max_batch_tokens;
  for (const SchedSeq* s : running_) room -= s->decoding() ? 1 : 0;
  for (SchedSeq* s : running_) {
    if (!s->decoding()) {
      s->draft.clear();
      continue;
    }
    int64_t k = std::min<int64_t>(static_cast<int64_t>(s->draft.size()), std::max<int64_t>(room, 0));
    if (k > 0 && !store_.reserve(s->seq_id, s->n_computed + 1 + k).ok()) k = 0;
    s->draft.resize(static_cast<size_t>(k));
    room -= k;
    out_.chunks.push_back({s, 1 + k, true, true});
    out_.n_tokens += 1 + k;
  }

  // 2. Prefill chunks: running sequences first, then admissions (FCFS). Which waiting
  // requests wait for a running prefill they share is decided first, so the leaders'
  // checkpoints are in place before their chunks are cut. The look-ahead is bounded
  // (kMaxDeferredScan), so a long queue costs a bounded scan a step, not O(queue) prefix
  // comparisons.
  constexpr size_t kMaxDeferredScan = 256;
  int64_t budget = config_.max_batch_tokens - out_.n_tokens;
  size_t n_scan = std::min(waiting_.size(), kMaxDeferredScan);
  for (size_t i = 0; i < n_scan; ++i)
    if (defer_behind_prefill(waiting_[i])) out_.deferred.push_back(waiting_[i]);
  for (SchedSeq* s : running_)
    if (!s->decoding() && budget > 0) add_chunk(s, budget);
  size_t w = 0;
  while (budget > 0 && w < n_scan && static_cast<int>(running_.size()) < config_.parallel) {
    SchedSeq* s = waiting_[w];
    if (s->deferred) {
      ++w;
      continue;
    }
    if (s->restore != 0 && cache_.restore_pending(s->restore)) {  // its reads are in flight
      out_.restoring.push_back(s);
      ++w;
      continue;
    }
    if (s->restore == 0) {
      // The slots left are the restoring requests' (running + restoring <= parallel).
      if (static_cast<int64_t>(running_.size()) + n_restoring_ >= config_.parallel) {
        ++w;
        continue;
      }
      if (!s->restore_tried) {
        s->restore_tried = true;
        if (const uint64_t ticket = cache_.begin_restore(s->key, s->tokens)) {
          s->restore = ticket;
          ++n_restoring_;
          out_.restoring.push_back(s);
          ++w;
          continue;
        }
      }
    }
    const SeqId sid = next_seq_id_;
    next_seq_id_ = next_seq_id_ == std::numeric_limits<SeqId>::max() ? 0 : next_seq_id_ + 1;
    CacheHit hit = cache_.lookup(s->key, s->tokens);
    end_restore(s, hit.cached_tokens);  // the lookup borrowed what it restored
    if (snapshots_) {
      // The K/V alone is useless to a hybrid model: the hit goes back to the longest
      // snapshot it covers, whose state is restored (a copy: the snapshot stays).
      RecurrentStates& states = store_.recurrent_states();
      states.erase(sid);
      states.ensure(sid);
      const int64_t p =
          hit.cached_tokens > 0 ? snapshots_->restore_longest(s->key.ns, s->tokens, hit.cached_tokens, states.data(sid))
                                : 0;
      cache_.shorten(hit, p);
      if (p > 0) {
        states.set_pos(sid, p);
      } else {
        states.erase(sid);  // what a failed read left there
        states.ensure(sid);
      }
      s->boundary_snapshot = 0;
    }
    store_.adopt(sid, std::move(hit.table), std::move(hit.local));
    const AllocResult r = store_.reserve(sid, static_cast<int64_t>(s->tokens.size()));
    if (!r.ok()) {
      store_.remove(sid);  // gives the borrowed prefix back
      if (r.status != AllocResult::Status::NeverFits && running_.empty() && cache_.restore_blocks() > 0) {
        // Other restores hold blocks it may need: unpinned now (they stay cached), or in
        // flight (they report soon); either way it tries again, not refused yet.
        cache_.unpin_restores();
        break;
      }
      if (r.status == AllocResult::Status::NeverFits || running_.empty()) {
        // Only a sequence that grew (a preempted one) can get here with generated
        // tokens: it no longer fits. A fresh prompt passed never_fits at submit.
        waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
        --n_scan;
        if (s->generated() > 0) {
          out_.ended_length.push_back(s);
        } else {
          out_.refused.emplace_back(s, r.message.empty() ? "out of KV blocks with nothing running" : r.message);
        }
        continue;  // w names the next one now
      }
      break;  // the first request not deferred waits for running sequences to finish
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    --n_scan;
    s->seq_id = sid;
    s->admitted = true;
    s->deferred = false;
    s->n_computed = hit.cached_tokens;
    s->n_checked = hit.cached_tokens;  // whoever indexed them checked them
    s->admit_order = next_admit_++;
    s->admit_cached_tokens = hit.cached_tokens;
    s->restore_tried = false;  // a preempted one may restore again
    if (s->admissions++ == 0) s->first_cached_tokens = hit.cached_tokens;
    running_.push_back(s);
    out_.admitted.push_back(s);
    // Requests behind it that share its prompt wait for it: their checkpoints are set
    // before its first chunk is cut.
    if (cache_.config().enabled)
      for (size_t i = w; i < n_scan; ++i)
        if (!waiting_[i]->deferred && waiting_[i]->key.use_cache && defer_behind(waiting_[i], s))
          out_.deferred.push_back(waiting_[i]);
    add_chunk(s, budget);
  }
  return out_;
}

void Scheduler::computed(SchedSeq* s, int64_t n_tokens, bool checked) {
  const bool was_prefill = s->generated() == 0;
  s->n_computed += n_tokens;
  // Sliding-window layers give back what no later query reads, before the insert below,
  // so what it keeps for reuse is the window at the prompt's end (or the checkpoint).
  store_.release_out_of_window(s->seq_id, s->n_computed);
  // Hybrid models: snapshots where a later request can start (see the constructor).
  const int64_t interval = config_.state_snapshot_interval;
  const bool crossed = interval > 0 && s->n_computed / interval > (s->n_computed - n_tokens) / interval;
  const bool at_prompt_boundary = s->n_computed > 0 && s->n_computed == prompt_boundary(s);
  if (snapshots_ && was_prefill &&
      (s->n_computed == s->n_prompt - 1 || (crossed && s->n_computed < s->n_prompt - 1) ||
       (checked && s->n_computed < s->n_prompt) || at_prompt_boundary))
    save_snapshot(s);
  if (at_prompt_boundary)
    snapshots_->persist(s->key.ns, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_computed)));
  // With a disk tier, each block boundary a decode crosses replaces the sequence's
  // previous decode boundary snapshot: one per sequence, its latest.
  if (snapshots_ && snapshots_->has_disk() && !was_prefill && s->n_computed % store_.pool().block_size() == 0) {
    if (s->boundary_snapshot > 0)
      snapshots_->erase(s->key.ns,
                        std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->boundary_snapshot)));
    save_snapshot(s);
    s->boundary_snapshot = s->n_computed;
  }
  if (!checked) return;
  s->n_checked = s->n_computed;
  // A checked prefill chunk ends at the prompt end or at a checkpoint: index it, so
  // followers (and later requests) borrow its full blocks and the windows held here.
  if (was_prefill) {
    SeqTables& t = store_.mutable_tables(s->seq_id);
    cache_.insert(s->key, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_computed)), t.main,
                  /*finished=*/false, t.local);
  }
}

void Scheduler::release_unverified(SchedSeq* s) {
  s->draft.clear();
  if (s->admitted && store_.contains(s->seq_id) && store_.capacity(s->seq_id) > s->n_computed)
    store_.truncate(s->seq_id, s->n_computed);
}

int64_t Scheduler::blocks_held() const {
  int64_t n = 0;
  for (const SchedSeq* s : running_) n += store_.blocks_held(s->seq_id);
  return n;
}

void Scheduler::check_invariants() const {
  PAGODA_CHECK(static_cast<int>(running_.size()) <= config_.parallel, "scheduler: more running than parallel");
  PAGODA_CHECK(store_.num_sequences() == running_.size(), "scheduler: store tables != running sequences");
  for (const SchedSeq* s : running_) {
    PAGODA_CHECK(s->admitted && store_.contains(s->seq_id), "scheduler: running sequence without a table");
    PAGODA_CHECK(store_.capacity(s->seq_id) >= static_cast<int64_t>(s->tokens.size()) ||
                     (s->decoding() && store_.capacity(s->seq_id) >= s->n_computed),
                 "scheduler: running sequence lacks reserved slots");
    PAGODA_CHECK(s->n_checked >= 0 && s->n_checked <= s->n_computed, "scheduler: n_checked past n_computed");
    // Between steps no slot is reserved past the tokens (a rejected proposal's are released).
    PAGODA_CHECK(store_.capacity(s->seq_id) <= static_cast<int64_t>(s->tokens.size()) && s->draft.empty(),
                 "scheduler: a running table reserves slots past its tokens");
    store_.check_tables(s->seq_id);
  }
  int64_t restoring = 0;
  for (const SchedSeq* s : waiting_) restoring += s->restore != 0 ? 1 : 0;
  PAGODA_CHECK(restoring == n_restoring_ && static_cast<int64_t>(running_.size()) + restoring <= config_.parallel,
               "scheduler: restoring count drifted, or running + restoring above parallel");
  for (const SchedSeq* s : running_) PAGODA_CHECK(s->restore == 0, "scheduler: a running sequence holds a restore");
  for (const SchedSeq* s : waiting_) {
    PAGODA_CHECK(!s->admitted && s->n_computed == 0 && s->n_checked == 0, "scheduler: waiting sequence holds KV");
    PAGODA_CHECK(std::find(running_.begin(), running_.end(), s) == running_.end(),
                 "scheduler: both running and waiting");
  }
}

}  // namespace pagoda
