// Speculative decoding's configuration and the choice of how many proposed tokens each
// running sequence verifies in a step.
//
// Why a cost model: verifying k proposed tokens adds k rows to the step's forward. With
// one sequence decoding on a CPU the step reads every weight once whatever its rows
// (measured on a TinyLlama-1.1B Q4_0 shape, 2 threads, Xeon: 20.5 ms for 1 row, 21.5 for
// 2, 23.3 for 4, 35.9 for 8, 66.5 for 16, 101 for 32), so a few rows are nearly free and
// long proposals pay when they are accepted; with many sequences, or beside a prefill chunk,
// the step is compute-bound and each row costs its share. The planner therefore
// measures the step time as a line, t(n) = fixed + per_token * n over the step's batch
// tokens n (least squares over recent forwards, exponentially forgotten), and gives
// draft tokens out one at a time, highest expected yield first, while the batch's
// expected tokens per second still rises. The yield of a sequence's j-th proposed
// token is alpha^j: it is emitted only if every earlier proposal was accepted too, and
// alpha is that sequence's running acceptance rate (each verified position counts, up
// to the first rejection). Rejected: a fixed draft length (llama-server's --draft-max
// with --draft-p-min): it slows batches down that are already compute-bound, and
// speeds up too little a request that repeats an earlier answer word for word.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::spec {

struct SpecConfig {
  bool suffix = false;  // proposals from earlier requests' prompts and answers (SuffixIndex)
  bool ngram = false;   // prompt lookup in the request's own tokens
  bool draft = false;   // a draft model's greedy tokens (EngineConfig::draft_model)
  int64_t draft_max = 16;  // --draft-max: proposed tokens verified per sequence and step
  int64_t draft_min = 1;   // --draft-min: shorter proposals are not verified
  uint64_t suffix_bytes = 32ull << 20;  // --spec-suffix-bytes: the SuffixIndex's budget
  // > 0: plan with this fixed per_token / fixed cost ratio instead of the measured line
  // (tests: plans that do not depend on how busy the machine is); a draft model's token
  // then costs as much as a verified row.
  double fixed_cost_ratio = 0;
  bool any() const { return suffix || ngram || draft; }
};

// Parses --spec-type: a comma-separated list of suffix, ngram, draft, mtp, none ("none"
// alone turns speculation off). Throws pagoda::Error naming the flag for an unknown or
// unsupported type (mtp: not built yet; the message says so). draft needs -md.
SpecConfig parse_spec_types(std::string_view text, SpecConfig base = {});
std::string spec_types_name(const SpecConfig& c);  // "suffix,ngram", "none"

class StepCostModel {
 public:
  // Before enough varied observations: per_token = kPriorRatio x fixed, the ratio of
  // the line through the times above (~17 ms + 3 ms a row).
  static constexpr double kPriorRatio = 0.15;
  void observe(int64_t n_tokens, double seconds);
  // The fitted line; fixed > 0, per_token >= 0. Before any observation fixed is 1
  // (relative units: only ratios matter to the planner).
  double fixed() const;
  double per_token() const;
  int64_t observations() const { return n_obs_; }

 private:
  // Exponentially weighted sums (weight decays by kDecay per observation).
  static constexpr double kDecay = 0.995;
  double w_ = 0, wn_ = 0, wnn_ = 0, wt_ = 0, wnt_ = 0;
  int64_t n_obs_ = 0;
};

struct DraftCandidate {
  int64_t available = 0;  // tokens the proposer offers (at most draft_max)
  double alpha = 0.5;     // running acceptance rate of the sequence
  // Seconds each proposed token costs before it is verified, in the cost line's units: a
  // draft model's forward (0 for the model-free proposers, whose lookups are free).
  double extra_cost = 0;
  int64_t chosen = 0;     // out: tokens to verify (0, or >= draft_min)
};

// Chooses each candidate's `chosen` (see the header comment); base_tokens: the step's
// tokens without drafts (decodes and prefill chunks), n_decoding: its decoding sequences
// (each emits at least one token), max_extra: tokens the step's budget has left.
void plan_drafts(std::span<DraftCandidate> cands, int64_t base_tokens, int64_t n_decoding, const StepCostModel& cost,
                 int64_t max_extra, int64_t draft_min);

}  // namespace pagoda::spec
