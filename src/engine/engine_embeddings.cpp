// Embedding and reranking requests inside the engine's step: the pooled hidden rows of a
// prefill chunk, and at the prompt's end the request's vector (engine.h, Request::pooling).
#include "engine/engine.h"
#include "engine/engine_seq.h"

namespace pagoda {

bool Engine::ranks_by_logits(const Seq& s) const {
  return *s.req.pooling == Pooling::Rank && model_.n_cls_out() == 0;
}

void Engine::pool_chunk(Seq* s, const ScheduledChunk& c, int64_t& row, int64_t& logits_row) {
  const Pooling pooling = *s->req.pooling;
  const int64_t dim = model_.config().dim;
  // A chunk with a row either ends the prompt or stops at a checkpoint (scheduler.h: a
  // leader's prefill stops where its followers' shared prefix ends, and its row there
  // only vouches for the K/V to be indexed): then the request goes on.
  const bool prompt_end = c.ends_prompt();
  const char* non_finite =
      "the model produced non-finite hidden states (NaN/inf): its weights are corrupt or overflow at this precision";
  if (ranks_by_logits(*s)) {  // the rank tokens' logits at the last position
    if (!c.logits) {
      scheduler_.computed(s, c.n_tokens, /*checked=*/false);
      return;
    }
    const float* lg = &logits_[static_cast<size_t>(logits_row++ * n_vocab_)];
    const bool finite = all_finite(std::span<const float>(lg, static_cast<size_t>(n_vocab_)));
    scheduler_.computed(s, c.n_tokens, finite);
    if (!finite) return fail(s, non_finite);
    if (!prompt_end) return;
    std::vector<float>& out = s->result.embedding;
    out.clear();
    for (int32_t t : s->req.rank_tokens) out.push_back(lg[t]);
    finish(s, FinishReason::Stop);
    return;
  }
  bool vouched = true;  // every row read so far finite
  for (int64_t i = 0; i < c.n_tokens; ++i) {
    const int64_t pos = s->n_computed + i;
    const bool row_end = c.logits && i + 1 == c.n_tokens;
    const bool pooled_row = pools_row(pooling, pos, row_end && prompt_end);
    if (!pooled_row && !(row_end && c.checkpoint)) continue;
    const float* h = &hidden_[static_cast<size_t>(row++ * dim)];
    vouched = vouched && all_finite(std::span<const float>(h, static_cast<size_t>(dim)));
    if (!pooled_row) continue;  // a checkpoint's row: it only vouches
    if (pooling == Pooling::Mean) {
      // Summed in double in position order: the chunking (how many tokens a step
      // gave this sequence) cannot change the result.
      if (s->pool_sum.empty()) s->pool_sum.assign(static_cast<size_t>(dim), 0.0);
      for (int64_t d = 0; d < dim; ++d) s->pool_sum[static_cast<size_t>(d)] += h[d];
    } else {  // Cls: the first token's row; Last, Rank: the final prompt token's
      s->pooled.assign(h, h + dim);
    }
  }
  if (!c.logits) {  // more of the prompt to come
    scheduler_.computed(s, c.n_tokens, /*checked=*/false);
    return;
  }
  if (!prompt_end) {  // a checkpoint
    scheduler_.computed(s, c.n_tokens, vouched);
    if (!vouched) fail(s, non_finite);
    return;
  }
  std::vector<float>& out = s->result.embedding;
  if (pooling == Pooling::Mean) {
    out.resize(static_cast<size_t>(dim));
    for (int64_t d = 0; d < dim; ++d)
      out[static_cast<size_t>(d)] = static_cast<float>(s->pool_sum[static_cast<size_t>(d)] / static_cast<double>(s->n_prompt));
  } else if (pooling == Pooling::Rank) {
    out.resize(static_cast<size_t>(model_.n_cls_out()));
    model_.classify(s->pooled.data(), 1, out.data(), threads_);
  } else {
    out = s->pooled;
  }
  // The last token's row attends to every K/V of the prompt: a finite one vouches for
  // them (Cls alone has no such row, but it never indexes its prompt).
  const bool finite = vouched && all_finite(out) && all_finite(s->pooled);
  scheduler_.computed(s, c.n_tokens, finite && pooling != Pooling::Cls);
  if (!finite) return fail(s, non_finite);
  finish(s, FinishReason::Stop);
}

}  // namespace pagoda
