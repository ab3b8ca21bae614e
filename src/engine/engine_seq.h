// Engine::Seq — one request inside the engine (private to engine*.cpp).
#pragma once

#include <cmath>
#include <cstring>
#include <span>
#include <optional>

#include "engine/engine.h"
#include "engine/stop_strings.h"

namespace pagoda {

// One request from submit to finish. Engine thread only once it left the inbox. Its
// SchedSeq part (tokens, KV progress) is the Scheduler's; the rest (sampling, text,
// result) the Engine's.
struct Engine::Seq : SchedSeq {
  Seq(uint64_t id_, Request r, std::shared_ptr<RequestSink> s, int32_t n_vocab, const Tokenizer* tok)
      : id(id_), req(std::move(r)), sink(std::move(s)), sampler(req.sampling, n_vocab), stops(req.stop) {
    if (tok) {
      StreamDecoderOptions o;
      o.render_special = req.render_special;
      decoder.emplace(*tok, o);
    }
    tokens = req.prompt;
    n_prompt = static_cast<int64_t>(tokens.size());
    for (const ImageSpan& im : req.images)
      if (im.bidirectional) atomic_spans.emplace_back(im.offset, im.offset + im.n_tokens);
  }

  uint64_t id;
  Request req;
  std::shared_ptr<RequestSink> sink;
  Sampler sampler;          // kept across preemptions: RNG draws continue where they stopped
  StopStringMatcher stops;  // likewise: nothing streamed is re-sent
  std::optional<StreamDecoder> decoder;
  std::optional<grammar::Matcher> matcher;  // Request::grammar, made on the engine thread
  RequestResult result;
  uint64_t group = 0;             // submit_group's first id, 0 alone
  std::vector<double> pool_sum;   // Pooling::Mean: [dim] sum of the hidden rows so far
  std::vector<float> pooled;      // Cls: [dim] the first token's hidden row
  Clock::time_point submitted;
  Clock::time_point last_token;
  // Speculative decoding (engine_spec.cpp): the running acceptance rate of this request's
  // proposals, and the proposed token the next sampled one is compared with (-1: none).
  double spec_alpha = 0.5;
  int32_t spec_expect = -1;
  // The draft model's K/V of this request: its sequence id there (the admission's seq_id;
  // -1 none) and how many leading tokens it holds.
  SeqId draft_sid = -1;
  int64_t draft_computed = 0;
};


// Weights are input: a corrupt model file makes activations NaN/inf, and a NaN anywhere
// in the K/V or the residual stream reaches the logits. One pass over the n_vocab floats
// of each sampled row (128k floats: tens of microseconds, next to the n_vocab x dim
// output matmul that produced them) catches it before the sampler sees it.
inline bool all_finite(std::span<const float> xs) {
  bool ok = true;
  for (float x : xs) ok &= std::isfinite(x);  // no early exit: vectorizes
  return ok;
}

// Whether an embedding request pools the hidden state of the token at `pos` (`last`:
// the final prompt token).
inline bool pools_row(Pooling pooling, int64_t pos, bool last) {
  switch (pooling) {
    case Pooling::Mean: return true;
    case Pooling::Cls: return pos == 0;
    case Pooling::Last:
    case Pooling::Rank: return last;
    default: return false;
  }
}

// The suffix index's tenant of a request: its prefix-cache namespace (model, KV types,
// cache_key; a SHA-256), whose first 8 bytes are as good as the whole for a hash key.
inline uint64_t spec_tenant(const CacheKey& key) {
  uint64_t x;
  std::memcpy(&x, key.ns.bytes.data(), sizeof x);
  return x;
}

}  // namespace pagoda
