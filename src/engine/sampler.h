// Sampler — turns one row of logits into one token id, per sequence.
//
// Contract:
// - One Sampler per sequence, owned and called by the engine thread only; it is
//   not thread-safe. It holds no pointer into the logits it is given.
// - The chain, in the order of llama.cpp's default sampler chain:
//     logit bias -> penalties (repetition, presence, frequency over the last
//     penalty_last_n accepted tokens) -> top-k -> top-p -> min-p ->
//     temperature -> softmax -> draw.
//   temperature <= 0 means greedy: the argmax after bias and penalties, ties
//   going to the lowest id (top-k/p/min-p never drop the argmax, so they are
//   skipped), and the RNG is not advanced.
// - Penalties count only tokens passed to accept(): the caller decides whether
//   prompt tokens count (llama.cpp's server accepts them; vLLM applies presence
//   and frequency to generated tokens only) by whether it accepts them.
// - Determinism: the RNG is std::mt19937_64 seeded with `seed` (its output
//   sequence is fixed by the C++ standard), and a draw turns its top 53 bits into
//   a double in [0, 1) by hand rather than through std::uniform_real_distribution,
//   whose algorithm is left to each standard library. So the same seed, the same
//   params and the same sequence of logits and accept() calls give the same
//   tokens on every build whose expf() agrees. reset() returns to the state right
//   after construction, RNG included.
// - Cost per token, 152k vocab, one core of this (shared, AMD EPYC) machine:
//   greedy 0.15 ms; the default chain (top-k 40 first) 0.2 ms; top-k off with
//   top-p 0.95 2 ms; everything off 1 ms. Top-k for small k scans the logits
//   once with a k-entry heap (no sort, no [n_vocab] fill). With top-k off, top-p
//   is exact without a full sort: it buckets the candidates by logit (256
//   buckets), finds the bucket where the mass crosses top_p and sorts only that
//   bucket. What remains is one scalar expf per candidate (1.3 ms per 152k here);
//   a vectorized exp is the next step if batches make that matter.
// - sample() and accept() allocate nothing (except accept() when
//   penalty_last_n == -1, whose history grows): the candidate scratch
//   ([n_vocab] x 8 bytes, 1.2 MB at 152k) is allocated once, in the
//   constructor. Rejected: a scratch shared by all samplers of the engine (saves
//   1.2 MB per live sequence) — worth it once batches run to hundreds of
//   sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace pagoda {

struct SamplingParams {
  // seed value that asks the Sampler to draw a seed from std::random_device.
  static constexpr uint64_t kRandomSeed = ~uint64_t{0};

  float temperature = 0.8f;          // >= 0; 0 means greedy
  int32_t top_k = 40;                // >= -1; 0 or -1 disables (vLLM uses -1)
  float top_p = 0.95f;               // (0, 1]; 1 disables
  float min_p = 0.05f;               // [0, 1]; 0 disables
  float repetition_penalty = 1.0f;   // > 0; 1 disables; CTRL / llama.cpp style
  float presence_penalty = 0.0f;     // finite; OpenAI style
  float frequency_penalty = 0.0f;    // finite; OpenAI style
  int32_t penalty_last_n = 64;       // >= -1; tokens counted by penalties; 0 off, -1 all
  uint64_t seed = kRandomSeed;
  // (token id, added to the logit). A bias of -infinity bans the token.
  // Requires (checked by validate(n_vocab)): ids in [0, n_vocab), bias not NaN
  // and not +infinity (two +inf tokens would make the softmax NaN).
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Returns nullopt when the params are usable, else one line naming the field
  // and what is wrong (the server answers it as HTTP 400). n_vocab < 0 skips the
  // range check of logit_bias ids (for callers that do not know the model yet).
  std::optional<std::string> validate(int32_t n_vocab = -1) const;
};

struct TokenLogprob {
  int32_t token_id;
  float logprob;  // natural log of the probability
};

class Sampler {
 public:
  // Requires: n_vocab >= 1 and params.validate(n_vocab) == nullopt (checked;
  // a bad request must be rejected with validate() before it gets here).
  Sampler(SamplingParams params, int32_t n_vocab);
  Sampler(const Sampler&) = delete;  // holds [n_vocab] scratch
  Sampler& operator=(const Sampler&) = delete;
  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;

  // Picks the next token from `logits` [n_vocab] f32 (the model's raw output for
  // this sequence's last position). On return `logits` holds the logits after
  // logit bias and penalties (before top-k / temperature): the input that
  // top_logprobs() and token_logprob() expect for OpenAI logprobs. NaN logits are
  // treated as -infinity. If every logit is -infinity the lowest id is returned.
  // Requires: no logit is +infinity (validate() keeps logit_bias from adding one).
  // Does not record the token: call accept() with the token actually used.
  // Requires: logits.size() == n_vocab.
  int32_t sample(std::span<float> logits);

  // Records `token_id` as generated (or as prompt, if the caller wants prompt
  // tokens penalized) for the penalties.
  // Requires: 0 <= token_id < n_vocab.
  void accept(int32_t token_id);

  // Forgets the accepted tokens and re-seeds the RNG with seed(): the state
  // right after construction.
  void reset();

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }
  // The seed in use: params.seed, or the one drawn when that was kRandomSeed.
  uint64_t seed() const { return seed_; }

  // The token ids that survived top-k / top-p / min-p in the last non-greedy
  // sample(), in no particular order (empty after a greedy one). For tests and
  // diagnostics; copies, so it allocates.
  std::vector<int32_t> last_candidate_ids() const;

  // Invariants:
  // 1. candidates_.size() == n_vocab (scratch allocated once, never resized).
  // 2. num_candidates_ <= n_vocab.
  // 3. With a bounded window, history_.size() <= penalty_last_n and
  //    history_head_ < max(1, history_.size()); with penalties off it is empty.
  // 4. Every id in history_ is in [0, n_vocab).
  // Aborts with a message when one is broken.
  void check_invariants() const;

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };

  void apply_bias(std::span<float> logits) const;
  void apply_penalties(std::span<float> logits);
  // Fills candidates_ with the top_k best of `logits` (all when top_k is off)
  // and sets max_logit_ and min_finite_logit_.
  void select_top_k(std::span<const float> logits);
  void apply_top_p();
  void apply_min_p();
  // Softmax at the temperature and one draw; leaves weights in the logit field.
  int32_t draw();

  SamplingParams params_;
  int32_t n_vocab_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  bool penalties_on_;

  // Accepted tokens in the penalty window [<= penalty_last_n]: a ring once full
  // (history_head_ = oldest), or all of them when penalty_last_n == -1.
  std::vector<int32_t> history_;
  size_t history_head_ = 0;
  // Scratch [<= window] for counting repeats: a sorted copy of history_. Sorting
  // 64 ids a token is cheap, and leaves no [n_vocab] count array (600 KB at
  // 152k) to keep in sync with the ring.
  std::vector<int32_t> penalty_scratch_;

  // [n_vocab] scratch; the first num_candidates_ are live, in no set order.
  std::vector<Candidate> candidates_;
  size_t num_candidates_ = 0;
  // Of the live candidates after top-k: the max (top-p and min-p keep it, so it
  // stays the max) and the lowest finite logit (for top-p's buckets).
  float max_logit_ = 0.0f;
  float min_finite_logit_ = 0.0f;
};

// The n most likely tokens of softmax(logits), most likely first, ties going to
// the lower id, as natural-log probabilities. Pass the span sample() left behind
// to get them after bias and penalties. NaN logits count as -infinity; if every
// logit is -infinity every logprob is too. O(n_vocab log n) time; allocates only
// the result. n larger than the vocab is clamped.
// Requires: n >= 0.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n);

// log softmax(logits)[token_id], for the logprob of the chosen token.
// Requires: 0 <= token_id < logits.size().
float token_logprob(std::span<const float> logits, int32_t token_id);

}  // namespace pagoda
