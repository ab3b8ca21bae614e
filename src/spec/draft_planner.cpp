#include "spec/draft_planner.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "common/error.h"

namespace pagoda::spec {

SpecConfig parse_spec_types(std::string_view text, SpecConfig base) {
  SpecConfig c = base;
  c.suffix = c.ngram = c.draft = false;
  bool none = false, any = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (item == "suffix") c.suffix = any = true;
    else if (item == "ngram") c.ngram = any = true;
    else if (item == "none") none = true;
    else if (item == "draft") c.draft = any = true;
    else if (item == "mtp")
      throw Error("--spec-type mtp: speculation from a model's MTP layers is not built yet (use suffix, ngram or draft)");
    else
      throw Error("--spec-type: unknown type '" + std::string(item) + "' (suffix, ngram, draft, mtp, none)");
  }
  if (none && any) throw Error("--spec-type: 'none' cannot be combined with other types (got '" + std::string(text) + "')");
  return c;
}

std::string spec_types_name(const SpecConfig& c) {
  if (!c.any()) return "none";
  std::string s;
  if (c.suffix) s += "suffix";
  if (c.ngram) s += s.empty() ? "ngram" : ",ngram";
  if (c.draft) s += s.empty() ? "draft" : ",draft";
  return s;
}

void StepCostModel::observe(int64_t n_tokens, double seconds) {
  if (n_tokens <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  const double n = static_cast<double>(n_tokens);
  w_ = w_ * kDecay + 1;
  wn_ = wn_ * kDecay + n;
  wnn_ = wnn_ * kDecay + n * n;
  wt_ = wt_ * kDecay + seconds;
  wnt_ = wnt_ * kDecay + n * seconds;
  ++n_obs_;
}

namespace {
struct Line {
  double fixed, per_token;
};
}  // namespace

static Line fit(double w, double wn, double wnn, double wt, double wnt) {
  if (w <= 0) return {1.0, StepCostModel::kPriorRatio};
  const double mean_n = wn / w, mean_t = wt / w;
  const double var_n = wnn / w - mean_n * mean_n;
  // A slope needs step sizes that differ (a spread of at least a token or so); before
  // that the prior ratio, scaled to the times seen.
  if (var_n > 1.0) {
    const double slope = (wnt / w - mean_n * mean_t) / var_n;
    const double intercept = mean_t - slope * mean_n;
    if (slope >= 0 && intercept > 0) return {intercept, slope};
    if (slope < 0) return {mean_t, 0.0};  // noise: no measurable per-token cost
  }
  const double fixed = mean_t / (1 + StepCostModel::kPriorRatio * mean_n);
  return {fixed, StepCostModel::kPriorRatio * fixed};
}

double StepCostModel::fixed() const { return fit(w_, wn_, wnn_, wt_, wnt_).fixed; }
double StepCostModel::per_token() const { return fit(w_, wn_, wnn_, wt_, wnt_).per_token; }

void plan_drafts(std::span<DraftCandidate> cands, int64_t base_tokens, int64_t n_decoding, const StepCostModel& cost,
                 int64_t max_extra, int64_t draft_min) {
  for (DraftCandidate& c : cands) c.chosen = 0;
  const double fixed = cost.fixed(), per = cost.per_token();
  double tokens = static_cast<double>(std::max<int64_t>(n_decoding, 1));  // expected tokens this step
  const double n = static_cast<double>(std::max<int64_t>(base_tokens, 1));
  // Max-heap of each candidate's next marginal yield alpha^(chosen + 1).
  // Max-heap of each candidate's next marginal yield per unit of cost:
  // alpha^(chosen + 1) / (per + extra_cost).
  struct Entry {
    double key, gain;
    size_t i;
    bool operator<(const Entry& o) const { return key < o.key; }
  };
  std::priority_queue<Entry> heap;
  for (size_t i = 0; i < cands.size(); ++i) {
    cands[i].alpha = std::clamp(cands[i].alpha, 0.0, 0.999);
    const double a = cands[i].alpha;
    if (cands[i].available > 0) heap.push({a / (per + cands[i].extra_cost + 1e-12), a, i});
  }
  int64_t extra = 0;
  double time = fixed + per * n;
  while (!heap.empty() && extra < max_extra) {
    const Entry e = heap.top();
    heap.pop();
    DraftCandidate& c = cands[e.i];
    const double cost = per + c.extra_cost;
    // Worth it while the step's expected tokens per second rise.
    if ((tokens + e.gain) / (time + cost) <= tokens / time) continue;  // others may be cheaper
    tokens += e.gain;
    time += cost;
    ++extra;
    if (++c.chosen < c.available) heap.push({e.gain * c.alpha / (cost + 1e-12), e.gain * c.alpha, e.i});
  }
  // A proposal shorter than draft_min is not verified (its rows go back to the budget,
  // which is only ever smaller for that: the planner's yields only fall).
  for (DraftCandidate& c : cands)
    if (c.chosen < draft_min) c.chosen = 0;
}

}  // namespace pagoda::spec
