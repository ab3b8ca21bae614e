// Speculative decoding inside the engine's step: proposals before the scheduler runs,
// verification after the forward. The policy (spec/draft_planner.h for the lengths):
// - Proposers: `suffix` (earlier requests of the same tenant, spec/suffix_index.h) and
//   `ngram` (the request's own prompt and output); the longer match wins, the suffix on
//   a tie (a match in another request's answer continues further than one in a prompt).
//   `draft` (a small model with the same vocabulary) proposes where neither found a
//   match: after the planner chose how many tokens to verify, the draft model computes
//   them greedily, one batched forward per token for all such sequences (the first one
//   also catches its K/V up with the tokens it has not seen). Its K/V lives in a pool of
//   its own, inside the same budget (engine.h); after verification it is cut back to the
//   accepted tokens. The draft model's own forwards are not in the planner's cost line:
//   a draft a tenth of the target's size adds about a tenth of a step per proposed token.
// - Verification is sampling: each row, from the sampled token's on, is sampled with the
//   request's own Sampler, grammar and penalties exactly as a step of its own would be,
//   and the next proposed token is kept only if it is the token sampled. So every
//   emitted token is drawn from the same distribution as without speculation (for a
//   proposer that offers one token, rejection sampling reduces to this: accept x with
//   probability p(x), else draw from p without x), the Sampler's RNG advances once per
//   emitted token as it would have, and at temperature 0 the tokens are the argmaxes.
//   The logits of a row in a batch of several can differ from a lone row's in the last
//   bits (as they already do with other sequences in the batch): the tests compare the
//   tokens exactly.
// - The K/V of every fed row is written by the forward; after the rows are read the
//   table is truncated to the accepted positions (Scheduler::release_unverified), so no
//   block outlives a rejected proposal.
// - Hybrid models (recurrent layers: Qwen 3.5 / 3.6) do not speculate: a recurrent state
//   cannot be cut back to a rejected position without keeping a state per proposed
//   position (the per-position states cost state_bytes each: 17 MiB per position for
//   Qwen 3.5 4B). Embedding requests never decode.
#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "engine/engine_seq.h"
#include "common/log.h"

namespace pagoda {

namespace {

// The acceptance estimate's step (an exponential average over verified positions): 0.25
// reaches 0.9 after ~6 accepted tokens from the prior 0.5, and halves after 3 rejections.
constexpr double kAlphaStep = 0.25;
constexpr double kAlphaPrior = 0.5;

}  // namespace

bool Engine::speculating() const { return config_.spec.any() && !model_.config().hybrid(); }

void Engine::propose_drafts() {
  if (!speculating()) return;
  draft_cands_.clear();
  draft_seqs_.clear();
  int64_t n_decoding = 0;
  bool prefill_pending = !scheduler_.waiting().empty();
  for (SchedSeq* p : scheduler_.running()) {
    Seq* s = static_cast<Seq*>(p);
    s->draft.clear();
    if (!s->decoding()) {
      prefill_pending = true;
      continue;
    }
    ++n_decoding;
    if (!s->req.speculate || s->req.pooling || !s->req.images.empty()) continue;
    // Room: the proposed tokens sit at positions n_computed + 1 ..., below ctx_size, and
    // more than max_tokens - generated - 1 could never all be emitted.
    int64_t room = std::min<int64_t>(config_.spec.draft_max, config_.ctx_size - static_cast<int64_t>(s->tokens.size()));
    if (s->req.max_tokens > 0) room = std::min(room, s->req.max_tokens - s->generated() - 1);
    if (room < std::max<int64_t>(config_.spec.draft_min, 1)) continue;
    // Into reused buffers: this runs for every decoding sequence every step.
    suffix_proposal_.tokens.clear();
    suffix_proposal_.match = 0;
    if (suffix_) suffix_->propose(spec_tenant(s->key), s->tokens, room, suffix_proposal_);
    const spec::Proposal* best = &suffix_proposal_;
    if (config_.spec.ngram) {
      spec::ngram_lookup(s->tokens, room, ngram_proposal_);
      if (ngram_proposal_.match > best->match) best = &ngram_proposal_;
    }
    if (static_cast<int64_t>(best->tokens.size()) < config_.spec.draft_min || best->tokens.empty()) {
      if (draft_store_) {  // the draft model offers up to `room` tokens, computed once chosen
        draft_cands_.push_back({room, s->spec_alpha, draft_token_cost(), 0});
        draft_seqs_.push_back(s);
      }
      continue;
    }
    s->draft.assign(best->tokens.begin(), best->tokens.end());
    draft_cands_.push_back({static_cast<int64_t>(s->draft.size()), s->spec_alpha, 0.0, 0});
    draft_seqs_.push_back(s);
  }
  if (draft_cands_.empty()) return;
  // With a prefill waiting the step is compute-bound already and its budget is the
  // prefill's: proposals get an eighth of it at most.
  const int64_t base = prefill_pending ? config_.max_batch_tokens : n_decoding;
  int64_t max_extra = config_.max_batch_tokens - n_decoding;
  if (prefill_pending) max_extra = std::min<int64_t>(max_extra, config_.max_batch_tokens / 8);
  spec::plan_drafts(draft_cands_, base, n_decoding, fixed_cost_ ? *fixed_cost_ : step_cost_, max_extra,
                    config_.spec.draft_min);
  model_seqs_.clear();
  model_lens_.clear();
  for (size_t i = 0; i < draft_seqs_.size(); ++i) {
    Seq* s = draft_seqs_[i];
    const int64_t chosen = draft_cands_[i].chosen;
    if (s->draft.empty() && chosen > 0) {  // the draft model's to compute
      model_seqs_.push_back(s);
      model_lens_.push_back(chosen);
      continue;
    }
    s->draft.resize(static_cast<size_t>(chosen));
    // Not verified: the estimate drifts back to the prior, so a sequence whose early
    // proposals failed is tried again once its text starts repeating.
    if (s->draft.empty()) s->spec_alpha += 0.05 * (kAlphaPrior - s->spec_alpha);
  }
  if (!model_seqs_.empty()) generate_drafts();
}

double Engine::draft_token_cost() const {
  // One draft forward per proposed token (shared by the sequences proposing at that depth;
  // counted whole: the conservative side). Before the draft model ran, its weights'
  // bytes against the model's scale the model's own step (decode reads every weight once).
  // A fixed ratio (tests) prices a draft token like a verified row.
  if (config_.spec.fixed_cost_ratio > 0) return config_.spec.fixed_cost_ratio;
  if (draft_cost_.observations() > 0 && step_cost_.observations() > 0)
    return draft_cost_.fixed() + draft_cost_.per_token();
  const double ratio = static_cast<double>(config_.draft_model->resident_weight_bytes()) /
                       static_cast<double>(std::max<size_t>(model_.resident_weight_bytes(), 1));
  return ratio * step_cost_.fixed();
}

void Engine::trim_draft_kv(Seq* s) {
  // Everything before n_computed is the sequence's own now; past it the draft model saw
  // proposals that may have been rejected.
  if (!draft_store_ || s->draft_sid < 0 || s->draft_computed <= s->n_computed) return;
  s->draft_computed = s->n_computed;
  if (draft_store_->capacity(s->draft_sid) > s->draft_computed) draft_store_->truncate(s->draft_sid, s->draft_computed);
}

void Engine::drop_draft_kv(Seq* s) {
  if (!draft_store_ || s->draft_sid < 0) return;
  draft_store_->remove(s->draft_sid);
  s->draft_sid = -1;
  s->draft_computed = 0;
}

void Engine::generate_drafts() {
  Model& dm = *config_.draft_model;
  // Each sequence's draft K/V: its own (a readmitted sequence starts afresh), cut back to
  // the tokens that are still its own (everything before n_computed: the last step
  // verified those), and room for the tokens fed now: every token not seen yet, then
  // the proposals but the last.
  std::vector<Seq*>& seqs = model_seqs_;
  std::vector<int64_t>& lens = model_lens_;
  size_t n = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq* s = seqs[i];
    if (s->draft_sid != s->seq_id) drop_draft_kv(s);
    s->draft_sid = s->seq_id;
    if (draft_store_->contains(s->draft_sid)) trim_draft_kv(s);
    const int64_t need = static_cast<int64_t>(s->tokens.size()) + lens[i] - 1;
    if (!draft_store_->reserve(s->draft_sid, need).ok()) {  // out of draft K/V: no proposal
      drop_draft_kv(s);
      continue;
    }
    seqs[n] = s;
    lens[n++] = lens[i];
  }
  seqs.resize(n);
  lens.resize(n);
  int64_t longest = 0;
  for (int64_t k : lens) longest = std::max(longest, k);
  auto argmax = [&](size_t row) {
    const float* lg = &draft_logits_[row * static_cast<size_t>(n_vocab_)];
    int32_t best = 0;
    for (int32_t t = 1; t < n_text_vocab_; ++t)
      if (lg[t] > lg[best]) best = t;
    return best;
  };
  for (int64_t j = 0; j < longest; ++j) {
    draft_batch_.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq* s = seqs[i];
      if (j >= lens[i]) continue;
      if (j == 0) {  // catch up, then the sampled token: its row gives the first proposal
        for (int64_t p = s->draft_computed; p < static_cast<int64_t>(s->tokens.size()); ++p)
          draft_batch_.add(s->tokens[static_cast<size_t>(p)], p, s->draft_sid,
                           p + 1 == static_cast<int64_t>(s->tokens.size()));
      } else {
        draft_batch_.add(s->draft.back(), s->draft_computed, s->draft_sid, true);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      dm.forward(draft_batch_, *draft_store_, threads_, draft_logits_, nullptr);
      draft_cost_.observe(static_cast<int64_t>(draft_batch_.size()),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    } catch (const std::exception& e) {  // a bad draft model costs the proposals, not the requests
      for (Seq* s : seqs) {
        s->draft.clear();
        drop_draft_kv(s);
      }
      logger().write(LogLevel::Warn, std::string("pagoda: the draft model's forward failed: ") + e.what());
      return;
    }
    ++counters_.spec.draft_forwards;
    size_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq* s = seqs[i];
      if (j >= lens[i]) continue;
      s->draft_computed = j == 0 ? static_cast<int64_t>(s->tokens.size()) : s->draft_computed + 1;
      s->draft.push_back(argmax(row++));
    }
  }
}

void Engine::verify_drafts(Seq* s, const ScheduledChunk& c, int64_t row) {
  const int64_t k = c.n_tokens - 1;
  std::vector<int32_t>& draft = verify_draft_;  // s may finish (and be freed) mid-way
  draft.swap(s->draft);
  s->draft.clear();
  s->result.draft_tokens += k;
  counters_.spec.draft_tokens += k;
  ++counters_.spec.verifications;
  int64_t accepted = 0;
  for (int64_t i = 0; i <= k; ++i) {
    std::span<float> lg(&logits_[static_cast<size_t>((row + i) * n_vocab_)], static_cast<size_t>(n_vocab_));
    // Row i is read only once the tokens before it were accepted: its K/V (the sampled
    // token's for i == 0, proposed token i - 1's after) is then the sequence's own.
    const bool finite = all_finite(lg);
    scheduler_.computed(s, 1, finite);
    if (!finite) {
      fail(s, "the model produced non-finite logits (NaN/inf): its weights are corrupt or overflow "
              "at this precision");
      return;
    }
    s->spec_expect = i < k ? draft[static_cast<size_t>(i)] : -1;
    if (!sample_and_stream(s, lg)) return;  // it ended; its blocks went with it
    if (i == k || s->tokens.back() != draft[static_cast<size_t>(i)]) break;
    ++accepted;
  }
  for (int64_t i = 0; i < accepted; ++i) s->spec_alpha += kAlphaStep * (1.0 - s->spec_alpha);
  if (accepted < k) s->spec_alpha -= kAlphaStep * s->spec_alpha;
  scheduler_.release_unverified(s);
  trim_draft_kv(s);
}

}  // namespace pagoda
