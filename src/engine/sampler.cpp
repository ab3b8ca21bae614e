#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>

#include "common/error.h"

namespace pagoda {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNegInf = -kInf;

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

std::string field_error(const char* field, const std::string& want, const std::string& got) {
  return std::string(field) + " must be " + want + " (got " + got + ")";
}

// NaN logits would break the strict weak order nth_element relies on (UB), so
// they are read as -inf everywhere.
float clean(float logit) { return std::isnan(logit) ? kNegInf : logit; }

// max(logits) and log(sum(exp(logits))) with NaN as -inf; lse is -inf when every
// logit is -inf.
struct LogSumExp {
  float max;
  double lse;
};

LogSumExp log_sum_exp(std::span<const float> logits) {
  float max = kNegInf;
  for (float v : logits) max = std::max(max, clean(v));
  if (max == kNegInf) return {max, -std::numeric_limits<double>::infinity()};
  double sum = 0.0;
  for (float v : logits) sum += static_cast<double>(std::exp(clean(v) - max));  // float exp, as sample()
  return {max, max + std::log(sum)};
}

}  // namespace

// ---- SamplingParams ---------------------------------------------------------

std::optional<std::string> SamplingParams::validate(int32_t n_vocab) const {
  if (!(std::isfinite(temperature) && temperature >= 0.0f))
    return field_error("temperature", "a finite number >= 0", fmt_float(temperature));
  if (top_k < -1)
    return field_error("top_k", ">= 1, or 0 / -1 to disable", std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return field_error("top_p", "in (0, 1]", fmt_float(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return field_error("min_p", "in [0, 1]", fmt_float(min_p));
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f))
    return field_error("repetition_penalty", "a finite number > 0", fmt_float(repetition_penalty));
  if (!std::isfinite(presence_penalty))
    return field_error("presence_penalty", "finite", fmt_float(presence_penalty));
  if (!std::isfinite(frequency_penalty))
    return field_error("frequency_penalty", "finite", fmt_float(frequency_penalty));
  if (penalty_last_n < -1)
    return field_error("penalty_last_n", ">= 0, or -1 for all tokens", std::to_string(penalty_last_n));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (n_vocab >= 0 && id >= n_vocab))
      return "logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
             (n_vocab >= 0 ? std::to_string(n_vocab) : std::string("n_vocab")) + ")";
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      return "logit_bias for token " + std::to_string(id) +
             " must be a number or -infinity (got " + fmt_float(bias) + ")";
  }
  return std::nullopt;
}

// ---- Sampler ----------------------------------------------------------------

Sampler::Sampler(SamplingParams params, int32_t n_vocab)
    : params_(std::move(params)), n_vocab_(n_vocab) {
  PAGODA_CHECK(n_vocab >= 1, "Sampler needs n_vocab >= 1, got " + std::to_string(n_vocab));
  auto err = params_.validate(n_vocab);
  PAGODA_CHECK(!err, "Sampler given invalid SamplingParams: " + err.value_or(""));
  seed_ = params_.seed;
  if (seed_ == SamplingParams::kRandomSeed) {
    std::random_device rd;
    seed_ = (uint64_t{rd()} << 32) ^ rd();
  }
  rng_.seed(seed_);
  penalties_on_ = params_.penalty_last_n != 0 &&
                  (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f);
  if (penalties_on_ && params_.penalty_last_n > 0) {
    history_.reserve(static_cast<size_t>(params_.penalty_last_n));
    penalty_scratch_.reserve(static_cast<size_t>(params_.penalty_last_n));
  }
  candidates_.resize(static_cast<size_t>(n_vocab));
}

void Sampler::reset() {
  history_.clear();
  history_head_ = 0;
  num_candidates_ = 0;
  rng_.seed(seed_);
}

void Sampler::accept(int32_t token_id) {
  PAGODA_CHECK(token_id >= 0 && token_id < n_vocab_,
               "accept(" + std::to_string(token_id) + ") outside [0, " + std::to_string(n_vocab_) + ")");
  if (!penalties_on_) return;
  const size_t window = static_cast<size_t>(params_.penalty_last_n);  // huge for -1
  if (params_.penalty_last_n == -1 || history_.size() < window) {
    history_.push_back(token_id);
  } else {
    history_[history_head_] = token_id;  // overwrite the oldest
    history_head_ = (history_head_ + 1) % window;
  }
}

int32_t Sampler::sample(std::span<float> logits) {
  PAGODA_CHECK(logits.size() == static_cast<size_t>(n_vocab_),
               "sample() given " + std::to_string(logits.size()) + " logits, vocab is " +
                   std::to_string(n_vocab_));
  apply_bias(logits);
  apply_penalties(logits);

  num_candidates_ = 0;
  if (params_.temperature <= 0.0f) {
    // Greedy: strict > keeps the first (lowest) id among equal maxima, and a
    // NaN never compares greater, so it never wins.
    int32_t best_id = 0;
    float best = kNegInf;
    for (int32_t i = 0; i < n_vocab_; ++i) {
      if (logits[i] > best) {
        best = logits[i];
        best_id = i;
      }
    }
    return best_id;
  }

  select_top_k(logits);
  if (max_logit_ == kNegInf) {
    // Everything is banned: no distribution to draw from. Top-k kept the lowest
    // ids among equal logits, so the lowest candidate id is the lowest id overall.
    int32_t lowest = n_vocab_;
    for (size_t i = 0; i < num_candidates_; ++i) lowest = std::min(lowest, candidates_[i].id);
    return lowest;
  }
  // Both keep the best candidate, so max_logit_ stays the candidates' max.
  apply_top_p();
  apply_min_p();
  return draw();
}

void Sampler::apply_bias(std::span<float> logits) const {
  for (const auto& [id, bias] : params_.logit_bias) logits[id] += bias;
}

void Sampler::apply_penalties(std::span<float> logits) {
  if (!penalties_on_ || history_.empty()) return;
  // Count each distinct token of the window once: sort a copy, walk the runs.
  penalty_scratch_.assign(history_.begin(), history_.end());
  std::sort(penalty_scratch_.begin(), penalty_scratch_.end());
  const float rep = params_.repetition_penalty;
  const float freq = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  for (size_t i = 0; i < penalty_scratch_.size();) {
    const int32_t id = penalty_scratch_[i];
    size_t j = i;
    while (j < penalty_scratch_.size() && penalty_scratch_[j] == id) ++j;
    const size_t count = j - i;
    float& logit = logits[id];
    // CTRL (Keskar et al. 2019) as llama.cpp applies it: dividing a negative
    // logit would raise it, so negative ones are multiplied instead.
    if (logit <= 0.0f) {
      logit *= rep;
    } else {
      logit /= rep;
    }
    // OpenAI: mu[j] -= c[j] * alpha_frequency + (c[j] > 0) * alpha_presence.
    logit -= static_cast<float>(count) * freq + presence;
    i = j;
  }
}

namespace {

// Descending by logit; ties to the lower id, so the kept set never depends on
// the order a selection happens to leave equal logits in.
bool better(int32_t a_id, float a_logit, int32_t b_id, float b_logit) {
  return a_logit > b_logit || (a_logit == b_logit && a_id < b_id);
}

template <class T>
bool better_than(const T& a, const T& b) {
  return better(a.id, a.logit, b.id, b.logit);
}

// Top-k by a heap of the k best seen so far when k is at most this fraction of
// the vocab, else nth_element. For k = 40 of 152k random logits the heap's top
// is replaced ~k*ln(n/k) = 330 times, so the scan is one compare per logit:
// the whole default chain took 0.2 ms a token here, against 2.4 ms when top-k
// filled the [n_vocab] candidates and ran nth_element over them.
constexpr size_t kHeapTopKMaxFraction = 8;

// Top-p over at most this many candidates sorts them all (k log k is cheap);
// above it, it buckets them by logit instead of sorting.
constexpr size_t kTopPSortAllMax = 2048;

// Buckets for top-p over many candidates: linear in logit between the lowest
// finite logit and the max. 256 buckets of a ~25-nat logit range are 0.1 nat
// wide, and only the one bucket where the mass crosses top_p is sorted.
constexpr int kTopPBuckets = 256;

}  // namespace

void Sampler::select_top_k(std::span<const float> logits) {
  const size_t n = logits.size();
  const size_t k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : n;
  if (k >= n) {
    float max = kNegInf;
    float min = kInf;
    for (size_t i = 0; i < n; ++i) {
      const float v = clean(logits[i]);
      candidates_[i] = {static_cast<int32_t>(i), v};
      max = std::max(max, v);
      min = v == kNegInf ? min : std::min(min, v);
    }
    num_candidates_ = n;
    max_logit_ = max;
    min_finite_logit_ = min;
    return;
  }
  const auto begin = candidates_.begin();
  const auto cmp = better_than<Candidate>;
  if (k * kHeapTopKMaxFraction <= n) {
    // candidates_[0, k) is a heap with the worst of the k best on top.
    for (size_t i = 0; i < k; ++i) candidates_[i] = {static_cast<int32_t>(i), clean(logits[i])};
    std::make_heap(begin, begin + static_cast<ptrdiff_t>(k), cmp);
    // Ids rise along the scan, so an equal logit never beats the top (which has
    // a lower id) and plain > is the whole test; NaN fails it too. One compare
    // and a well-predicted branch per logit.
    float worst_kept = candidates_[0].logit;
    for (size_t i = k; i < n; ++i) {
      const float v = logits[i];
      if (v > worst_kept) {
        std::pop_heap(begin, begin + static_cast<ptrdiff_t>(k), cmp);
        candidates_[k - 1] = {static_cast<int32_t>(i), v};
        std::push_heap(begin, begin + static_cast<ptrdiff_t>(k), cmp);
        worst_kept = candidates_[0].logit;
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) candidates_[i] = {static_cast<int32_t>(i), clean(logits[i])};
    std::nth_element(begin, begin + static_cast<ptrdiff_t>(k - 1), begin + static_cast<ptrdiff_t>(n), cmp);
  }
  num_candidates_ = k;
  float max = kNegInf;
  float min = kInf;
  for (size_t i = 0; i < k; ++i) {
    const float v = candidates_[i].logit;
    max = std::max(max, v);
    min = v == kNegInf ? min : std::min(min, v);
  }
  max_logit_ = max;
  min_finite_logit_ = min;
}

void Sampler::apply_top_p() {
  if (params_.top_p >= 1.0f) return;
  // Keep the shortest run of best tokens whose probability (softmax at
  // temperature 1 over the candidates, as llama.cpp) reaches top_p, including
  // the token that crosses it. Exact, but sorts only the crossing bucket.
  const auto begin = candidates_.begin();
  const auto end = begin + static_cast<ptrdiff_t>(num_candidates_);
  const float max = max_logit_;
  const auto weight = [max](float logit) { return static_cast<double>(std::exp(logit - max)); };

  auto keep_sorted_prefix = [&](auto first, auto last, double cum, double target) {
    std::sort(first, last, better_than<Candidate>);
    for (auto it = first; it != last; ++it) {
      cum += weight(it->logit);
      if (cum >= target) {
        num_candidates_ = static_cast<size_t>(it - begin) + 1;
        return;
      }
    }
    // Rounding left cum a hair under target: keep all of [first, last).
    num_candidates_ = static_cast<size_t>(last - begin);
  };

  if (num_candidates_ <= kTopPSortAllMax) {
    double total = 0.0;
    for (auto it = begin; it != end; ++it) total += weight(it->logit);
    keep_sorted_prefix(begin, end, 0.0, params_.top_p * total);
    return;
  }

  const float lo = min_finite_logit_;
  if (lo == max) {  // every finite logit is equal: one bucket, sort them all
    double total = 0.0;
    for (auto it = begin; it != end; ++it) total += weight(it->logit);
    keep_sorted_prefix(begin, end, 0.0, params_.top_p * total);
    return;
  }
  // Monotone in logit (a larger logit never lands in a lower bucket), so every
  // token of a higher bucket beats every token of a lower one.
  const float scale = static_cast<float>(kTopPBuckets) / (max - lo);
  const auto bucket = [lo, scale](float logit) {
    if (logit <= lo) return 0;  // also -inf, which (logit - lo) * scale cannot cast
    // Clamp before the cast: a tiny max - lo can make scale, and the product, inf.
    return static_cast<int>(std::min(static_cast<float>(kTopPBuckets - 1), (logit - lo) * scale));
  };
  double mass[kTopPBuckets] = {};
  double total = 0.0;
  for (auto it = begin; it != end; ++it) {
    const double w = weight(it->logit);
    mass[bucket(it->logit)] += w;
    total += w;
  }
  const double target = params_.top_p * total;
  double above = 0.0;  // mass of the buckets above the crossing one
  int crossing = -1;
  for (int b = kTopPBuckets - 1; b >= 0; --b) {
    if (above + mass[b] >= target) {
      crossing = b;
      break;
    }
    above += mass[b];
  }
  if (crossing < 0) return;  // rounding: the whole mass fell short; keep all
  // Drop the buckets below the crossing one in one compaction pass (they are
  // out whatever happens; typically all but a few hundred tokens), then split
  // the few survivors into "above" and "crossing".
  size_t kept = 0;
  for (auto it = begin; it != end; ++it)
    if (bucket(it->logit) >= crossing) candidates_[kept++] = *it;
  const auto last = begin + static_cast<ptrdiff_t>(kept);
  const auto mid = std::partition(begin, last, [&](const Candidate& c) { return bucket(c.logit) > crossing; });
  keep_sorted_prefix(mid, last, above, target);
}

void Sampler::apply_min_p() {
  if (params_.min_p <= 0.0f) return;
  // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p), at temperature 1.
  const float threshold = max_logit_ + std::log(params_.min_p);
  size_t kept = 0;
  for (size_t i = 0; i < num_candidates_; ++i)
    if (candidates_[i].logit >= threshold) candidates_[kept++] = candidates_[i];
  num_candidates_ = kept;
}

int32_t Sampler::draw() {
  assert(num_candidates_ >= 1);
  const float max = max_logit_;
  // In double: 1 / a tiny float temperature (1e-45) overflows a float to inf,
  // and 0 * inf would make the best token's weight NaN.
  const double inv_temp = 1.0 / static_cast<double>(params_.temperature);
  // One exp per candidate: the weight replaces the logit in place (the logits
  // are not needed after the draw).
  double sum = 0.0;
  for (size_t i = 0; i < num_candidates_; ++i) {
    const float w = std::exp(static_cast<float>((candidates_[i].logit - max) * inv_temp));
    candidates_[i].logit = w;
    sum += w;
  }
  // Top 53 bits -> [0, 1): the same double on every standard library, unlike
  // std::uniform_real_distribution.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * sum;
  double cum = 0.0;
  int32_t last_positive = candidates_[0].id;
  for (size_t i = 0; i < num_candidates_; ++i) {
    const float w = candidates_[i].logit;
    if (w <= 0.0f) continue;
    last_positive = candidates_[i].id;
    cum += w;
    if (target < cum) return candidates_[i].id;
  }
  return last_positive;  // rounding left target at or past the last sum
}

std::vector<int32_t> Sampler::last_candidate_ids() const {
  std::vector<int32_t> ids;
  ids.reserve(num_candidates_);
  for (size_t i = 0; i < num_candidates_; ++i) ids.push_back(candidates_[i].id);
  return ids;
}

void Sampler::check_invariants() const {
  PAGODA_CHECK(candidates_.size() == static_cast<size_t>(n_vocab_), "candidate scratch was resized");
  PAGODA_CHECK(num_candidates_ <= candidates_.size(),
               std::to_string(num_candidates_) + " live candidates, vocab " + std::to_string(n_vocab_));
  if (!penalties_on_) PAGODA_CHECK(history_.empty(), "history kept with penalties off");
  if (params_.penalty_last_n > 0) {
    PAGODA_CHECK(history_.size() <= static_cast<size_t>(params_.penalty_last_n), "history exceeds window");
    PAGODA_CHECK(history_head_ < std::max<size_t>(1, history_.size()), "ring head out of range");
  }
  for (int32_t id : history_) PAGODA_CHECK(id >= 0 && id < n_vocab_, "history id out of vocab");
}

// ---- logprobs -----------------------------------------------------------------

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n) {
  PAGODA_CHECK(n >= 0, "top_logprobs n must be >= 0, got " + std::to_string(n));
  const size_t keep = std::min(static_cast<size_t>(n), logits.size());
  if (keep == 0) return {};
  const LogSumExp z = log_sum_exp(logits);
  // A min-heap of the best `keep` so far (OpenAI caps n at 20): O(n_vocab log n)
  // and no [n_vocab] scratch.
  std::vector<TokenLogprob> heap;
  heap.reserve(keep);
  auto worse_on_top = [](const TokenLogprob& a, const TokenLogprob& b) {
    return better(a.token_id, a.logprob, b.token_id, b.logprob);
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    TokenLogprob t{static_cast<int32_t>(i), clean(logits[i])};
    if (heap.size() < keep) {
      heap.push_back(t);
      std::push_heap(heap.begin(), heap.end(), worse_on_top);
    } else if (better(t.token_id, t.logprob, heap.front().token_id, heap.front().logprob)) {
      std::pop_heap(heap.begin(), heap.end(), worse_on_top);
      heap.back() = t;
      std::push_heap(heap.begin(), heap.end(), worse_on_top);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), worse_on_top);
  for (auto& t : heap) t.logprob = z.max == kNegInf ? kNegInf : static_cast<float>(t.logprob - z.lse);
  return heap;
}

float token_logprob(std::span<const float> logits, int32_t token_id) {
  PAGODA_CHECK(token_id >= 0 && static_cast<size_t>(token_id) < logits.size(),
               "token_logprob id " + std::to_string(token_id) + " outside [0, " +
                   std::to_string(logits.size()) + ")");
  const LogSumExp z = log_sum_exp(logits);
  if (z.max == kNegInf) return kNegInf;  // all banned; -inf - -inf would be NaN
  return static_cast<float>(clean(logits[token_id]) - z.lse);
}

}  // namespace pagoda
