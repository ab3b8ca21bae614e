#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <span>
#include <utility>

#include "common/error.h"
#include "engine/stop_strings.h"

namespace pagoda {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

// One request from submit to finish. Engine thread only once it left the inbox.
struct Engine::Seq {
  Seq(uint64_t id_, Request r, std::shared_ptr<RequestSink> s, int32_t n_vocab, const Tokenizer* tok)
      : id(id_), req(std::move(r)), sink(std::move(s)), sampler(req.sampling, n_vocab), stops(req.stop) {
    if (tok) {
      StreamDecoderOptions o;
      o.render_special = req.render_special;
      decoder.emplace(*tok, o);
    }
    tokens = req.prompt;
    n_prompt = static_cast<int64_t>(tokens.size());
  }

  uint64_t id;
  Request req;
  std::shared_ptr<RequestSink> sink;
  Sampler sampler;          // kept across preemptions: RNG draws continue where they stopped
  StopStringMatcher stops;  // likewise: nothing streamed is re-sent
  std::optional<StreamDecoder> decoder;
  std::optional<grammar::Matcher> matcher;  // Request::grammar, made on the engine thread
  CacheKey key;
  std::vector<int32_t> tokens;  // prompt + generated: what the KV must hold (last one pending)
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // leading tokens whose K/V is in the store
  // Leading computed tokens a finite logits row vouched for: the row at position p
  // attends to every K/V at positions <= p, so a NaN/inf there would have reached it.
  // Only these are indexed in the prefix cache (a prefill chunk without a logits row,
  // or the step whose logits were non-finite, is vouched for by nothing).
  int64_t n_checked = 0;
  SeqId seq_id = -1;            // while admitted
  bool admitted = false;
  bool ever_admitted = false;
  uint64_t admit_order = 0;
  RequestResult result;
  Clock::time_point submitted;
  Clock::time_point last_token;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  // Everything but the last token is computed and that token is sampled: feed it.
  bool decoding() const { return generated() > 0 && n_computed + 1 == static_cast<int64_t>(tokens.size()); }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

namespace {

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

// Weights are input: a corrupt model file makes activations NaN/inf, and a NaN anywhere
// in the K/V or the residual stream reaches the logits. One pass over the n_vocab floats
// of each sampled row (128k floats: tens of microseconds, next to the n_vocab x dim
// output matmul that produced them) catches it before the sampler sees it.
bool all_finite(std::span<const float> xs) {
  bool ok = true;
  for (float x : xs) ok &= std::isfinite(x);  // no early exit: vectorizes
  return ok;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

KvConfig resolved(const KvConfig& kv) {
  KvConfig k = kv;
  k.budget_bytes = resolve_kv_budget(kv);
  return k;
}

KvGeometry geometry_of(const ModelConfig& c) { return KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim}; }

EngineConfig checked(EngineConfig c, const Model& m) {
  if (c.parallel < 1) throw Error("--parallel must be >= 1 (got " + std::to_string(c.parallel) + ")");
  if (c.max_queue < 0) throw Error("--max-queue must be >= 0 (got " + std::to_string(c.max_queue) + ")");
  if (c.max_batch_tokens < c.parallel)
    throw Error("--max-batch-tokens (" + std::to_string(c.max_batch_tokens) +
                ") must be at least --parallel (" + std::to_string(c.parallel) + ")");
  if (c.threads < 1) throw Error("--threads must be >= 1");
  if (c.ctx_size <= 0) c.ctx_size = m.config().ctx_len;
  if (c.ctx_size < 2) throw Error("--ctx-size must be >= 2 (got " + std::to_string(c.ctx_size) + ")");
  return c;
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineConfig& config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(checked(config, model)),
      n_vocab_(static_cast<int32_t>(model.config().n_vocab)),
      threads_(config_.threads),
      pool_(geometry_of(model.config()), resolved(config_.kv)),
      store_(pool_),
      cache_(pool_, config_.model_id, config_.cache) {
  n_text_vocab_ = n_vocab_;
  if (tokenizer_) {
    const int32_t n = std::min<int32_t>(n_vocab_, tokenizer_->n_vocab());
    for (int32_t id = 0; id < n; ++id)
      if (tokenizer_->is_eog(id)) eog_ids_.push_back(id);
    n_text_vocab_ = n;
  }
  for (int32_t id : config_.extra_eog_ids) {
    if (id < 0 || id >= n_vocab_)
      throw Error("end-of-generation token id " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(n_vocab_) + ")");
    if (std::find(eog_ids_.begin(), eog_ids_.end(), id) == eog_ids_.end()) eog_ids_.push_back(id);
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  publish_stats();
}

Engine::~Engine() { stop(); }

void Engine::start() {
  PAGODA_CHECK(!started_, "Engine::start called twice");
  started_ = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    thread_started_ = true;
  }
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  } else {
    // Never started: this thread is the only one left to finish what was submitted.
    drain_inbox();
    while (!owned_.empty()) finish(owned_.back().get(), FinishReason::Cancelled);
    publish_stats();
  }
}

std::optional<Engine::Invalid> Engine::validate(const Request& r) const {
  // The one place a request is checked against the model and the engine (the server
  // checks only the protocol and the model name): these messages reach clients as 400s.
  auto bad = [](std::string field, std::string message) { return Invalid{std::move(field), std::move(message)}; };
  if (r.prompt.empty()) return bad("prompt", "the prompt is empty");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= n_vocab_)
      return bad("prompt", "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                               std::to_string(n_vocab_) + ")");
  if (static_cast<int64_t>(r.prompt.size()) >= config_.ctx_size)
    return bad("prompt", "the prompt has " + std::to_string(r.prompt.size()) + " tokens but the context is " +
                             std::to_string(config_.ctx_size) + " tokens (at least one must be left to generate)");
  if (auto msg = r.sampling.validate(n_vocab_)) return bad("", *msg);
  if (r.max_tokens == 0 || r.max_tokens < -1) return bad("max_tokens", "max_tokens must be >= 1 or -1");
  if (r.min_tokens < 0) return bad("min_tokens", "min_tokens must be >= 0");
  if (r.top_logprobs < 0 || r.top_logprobs > 20) return bad("top_logprobs", "top_logprobs must be in [0, 20]");
  if (!tokenizer_ && !r.stop.empty()) return bad("stop", "stop strings need a model with a tokenizer");
  if (!tokenizer_ && r.grammar) return bad("", "structured outputs need a model with a tokenizer");
  // +1: the first generated token needs a slot too.
  if (auto msg = pool_.never_fits(static_cast<int64_t>(r.prompt.size()) + 1)) return bad("prompt", *msg);
  return std::nullopt;
}

SubmitResult Engine::submit(Request request, std::shared_ptr<RequestSink> sink) {
  PAGODA_CHECK(sink != nullptr, "Engine::submit needs a sink");
  SubmitResult res;
  // validate() reads only config_, n_vocab_ and pool_'s geometry (constant): no lock needed.
  if (auto invalid = validate(request)) {
    res.status = SubmitResult::Status::Invalid;
    res.field = std::move(invalid->field);
    res.message = std::move(invalid->message);
    return res;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) {
    res.status = SubmitResult::Status::Busy;
    res.message = "engine is shutting down";
    return res;
  }
  const size_t cap = static_cast<size_t>(config_.parallel) + static_cast<size_t>(config_.max_queue);
  if (live_ids_.size() >= cap) {
    ++refused_busy_;
    res.status = SubmitResult::Status::Busy;
    res.message = "busy: " + std::to_string(live_ids_.size()) + " requests in flight (--parallel " +
                  std::to_string(config_.parallel) + " + --max-queue " + std::to_string(config_.max_queue) + ")";
    return res;
  }
  const uint64_t id = next_request_id_++;
  auto seq = std::make_unique<Seq>(id, std::move(request), std::move(sink), n_vocab_, tokenizer_);
  seq->submitted = Clock::now();
  inbox_.push_back(std::move(seq));
  live_ids_.insert(id);
  res.request_id = id;
  cv_.notify_all();
  return res;
}

bool Engine::cancel(uint64_t request_id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!live_ids_.count(request_id)) return false;
  cancels_.push_back(request_id);
  cv_.notify_all();
  return true;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return snapshot_;
}

void Engine::reset_prefix_cache_async(std::function<void(const PrefixCacheReset&)> done) {
  PAGODA_CHECK(done != nullptr, "Engine::reset_prefix_cache_async needs a callback");
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_) {  // the thread's last drain may have run already: nothing is reset
    const PrefixCacheReset none{snapshot_, snapshot_};
    lk.unlock();
    done(none);
    return;
  }
  reset_callbacks_.push_back(std::move(done));
  cv_.notify_all();
}

Engine::PrefixCacheReset Engine::reset_prefix_cache() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    PAGODA_CHECK(thread_started_ || stopping_, "Engine::reset_prefix_cache before start would wait forever");
  }
  std::promise<PrefixCacheReset> promise;
  std::future<PrefixCacheReset> result = promise.get_future();
  reset_prefix_cache_async([&promise](const PrefixCacheReset& r) { promise.set_value(r); });
  return result.get();
}

// ---- engine thread -------------------------------------------------------------------------

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      const bool idle = running_.empty() && waiting_.empty();
      if (idle) {
        cv_.wait_for(lk, std::chrono::seconds(1), [&] {
          return stopping_ || !inbox_.empty() || !cancels_.empty() || !reset_callbacks_.empty();
        });
      }
      if (stopping_) break;
    }
    drain_inbox();
    expire_deadlines();
    if (running_.empty() && waiting_.empty()) cache_.enforce_limits();  // TTL without traffic
    step();
    if (config_.check_invariants || kDebugBuild) check_invariants();
    publish_stats();
  }
  drain_inbox();
  while (!owned_.empty()) finish(owned_.back().get(), FinishReason::Cancelled);
  publish_stats();
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<Seq>> fresh;
  std::vector<uint64_t> cancels;
  std::vector<std::function<void(const PrefixCacheReset&)>> resets;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fresh.swap(inbox_);
    cancels.swap(cancels_);
    resets.swap(reset_callbacks_);
  }
  for (auto& s : fresh) {
    s->key = cache_.key(s->req.cache_key, s->req.use_cache && config_.cache.enabled);
    if (s->req.grammar) s->matcher.emplace(s->req.grammar, grammar_vocab());
    waiting_.push_back(s.get());
    owned_.push_back(std::move(s));
  }
  for (uint64_t id : cancels) {
    auto it = std::find_if(owned_.begin(), owned_.end(), [&](const auto& p) { return p->id == id; });
    if (it != owned_.end()) finish(it->get(), FinishReason::Cancelled);
  }
  if (!resets.empty()) {  // resets asked for since the last step share one
    publish_stats();
    const EngineStats before = stats();
    cache_.reset();
    publish_stats();  // whoever is answered sees the emptied cache in stats()
    const PrefixCacheReset done{before, stats()};
    for (auto& callback : resets) callback(done);
  }
}

void Engine::expire_deadlines() {
  const auto now = Clock::now();
  for (size_t i = 0; i < owned_.size();) {
    Seq* s = owned_[i].get();
    if (s->req.timeout_ms > 0 && now - s->submitted >= std::chrono::milliseconds(s->req.timeout_ms)) {
      finish(s, FinishReason::Cancelled);  // erases owned_[i]
    } else {
      ++i;
    }
  }
}

void Engine::release_kv(Seq* s) {
  if (!s->admitted) return;
  if (s->n_checked > 0)
    cache_.insert(s->key, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_checked)),
                  store_.mutable_table(s->seq_id), /*finished=*/true);
  store_.remove(s->seq_id);
  s->admitted = false;
  s->seq_id = -1;
  s->n_computed = 0;
  s->n_checked = 0;
}

void Engine::remove_from_running(Seq* s) {
  auto it = std::find(running_.begin(), running_.end(), s);
  if (it != running_.end()) running_.erase(it);
}

void Engine::preempt(Seq* s) {
  // The cache keeps its computed prefix (evictable), so recompute is usually a cache hit.
  release_kv(s);
  remove_from_running(s);
  waiting_.push_front(s);
  ++s->result.preemptions;
  ++counters_.preemptions;
}

// Gives a decoding sequence one more slot, preempting the newest running sequences
// while the pool is out of blocks. False when `s` itself was preempted or finished.
bool Engine::reserve_decode(Seq* s) {
  for (;;) {
    const AllocResult r = store_.reserve(s->seq_id, s->n_computed + 1);
    if (r.ok()) return true;
    if (r.status == AllocResult::Status::NeverFits || running_.size() == 1) {
      finish(s, FinishReason::Length);  // it cannot grow even alone
      return false;
    }
    Seq* victim = running_.back();
    preempt(victim);
    if (victim == s) return false;
  }
}

void Engine::step() {
  batch_.clear();
  std::vector<StepOut>& outs = outs_;
  outs.clear();

  // 2. Decode. Iterate over a copy: preemption edits running_ (always its back).
  std::vector<Seq*>& decoding = decode_scratch_;
  decoding.assign(running_.begin(), running_.end());
  for (Seq* s : decoding) {
    if (!s->admitted || !s->decoding()) continue;
    if (!reserve_decode(s)) continue;
  }
  for (Seq* s : running_) {
    if (!s->decoding()) continue;
    batch_.add(s->tokens[static_cast<size_t>(s->n_computed)], s->n_computed, s->seq_id, true);
    outs.push_back({s, 1, true});
  }

  // 3. Prefill chunks: running sequences first, then admissions (FCFS).
  int64_t budget = config_.max_batch_tokens - static_cast<int64_t>(batch_.size());
  auto add_chunk = [&](Seq* s) {
    const int64_t n = std::min(budget, s->pending());
    if (n <= 0) return;
    const bool last = n == s->pending();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = s->n_computed + i;
      batch_.add(s->tokens[static_cast<size_t>(pos)], pos, s->seq_id, last && i + 1 == n);
    }
    outs.push_back({s, n, last});
    budget -= n;
  };
  for (Seq* s : running_)
    if (!s->decoding() && budget > 0) add_chunk(s);
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < config_.parallel) {
    Seq* s = waiting_.front();
    const SeqId sid = next_seq_id_;
    next_seq_id_ = next_seq_id_ == std::numeric_limits<SeqId>::max() ? 0 : next_seq_id_ + 1;
    CacheHit hit = cache_.lookup(s->key, s->tokens);
    store_.adopt(sid, std::move(hit.table));
    const AllocResult r = store_.reserve(sid, static_cast<int64_t>(s->tokens.size()));
    if (!r.ok()) {
      store_.remove(sid);  // gives the borrowed prefix back
      if (r.status == AllocResult::Status::NeverFits || running_.empty()) {
        // Only a sequence that grew (a preempted one) can get here: it no longer fits.
        waiting_.pop_front();
        if (s->generated() > 0) {
          finish(s, FinishReason::Length);
        } else {
          fail(s, r.message.empty() ? "out of KV blocks with nothing running" : r.message);
        }
        continue;
      }
      break;  // head of line waits for running sequences to finish
    }
    waiting_.pop_front();
    s->seq_id = sid;
    s->admitted = true;
    s->n_computed = hit.cached_tokens;
    s->n_checked = hit.cached_tokens;  // whoever indexed them checked them
    s->admit_order = next_admit_++;
    if (!s->ever_admitted) {
      s->ever_admitted = true;
      s->result.cached_tokens = hit.cached_tokens;
      s->result.timings.queue_ms = ms_between(s->submitted, Clock::now());
    }
    running_.push_back(s);
    add_chunk(s);
  }

  if (batch_.size() == 0) return;

  // 4. Forward, sample, stream.
  try {
    model_.forward(batch_, store_, threads_, logits_);
  } catch (const std::exception& e) {
    for (const StepOut& o : outs) fail(o.seq, e.what());
    return;
  }
  ++counters_.steps;
  counters_.max_step_tokens = std::max<int64_t>(counters_.max_step_tokens, static_cast<int64_t>(batch_.size()));
  int64_t row = 0;
  for (const StepOut& o : outs) {
    Seq* s = o.seq;
    const bool was_prefill = !s->decoding();
    s->n_computed += o.n_tokens;
    if (was_prefill) counters_.tokens_prefilled += o.n_tokens;
    if (!o.logits) continue;
    std::span<float> lg(&logits_[static_cast<size_t>(row * n_vocab_)], static_cast<size_t>(n_vocab_));
    ++row;
    if (!all_finite(lg)) {
      fail(s, "the model produced non-finite logits (NaN/inf): its weights are corrupt or overflow "
              "at this precision");
      continue;
    }
    s->n_checked = s->n_computed;
    if (was_prefill && s->generated() == 0)  // the prompt is in: share its full blocks now
      cache_.insert(s->key, std::span<const int32_t>(s->tokens.data(), static_cast<size_t>(s->n_computed)),
                    store_.mutable_table(s->seq_id), /*finished=*/false);
    sample_and_stream(s, lg);
  }
}

const std::shared_ptr<const grammar::TokenVocabulary>& Engine::grammar_vocab() {
  if (grammar_vocab_) return grammar_vocab_;
  // Each token's bytes as the StreamDecoder emits them mid-text (SPM '▁' as a space),
  // so the grammar sees exactly the text the client gets. Control tokens and tokens
  // that produce no bytes are never allowed (an empty token would let a constrained
  // sequence run without progress); EOS/EOT are handled by the Matcher itself.
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab_));
  std::vector<bool> disallowed(static_cast<size_t>(n_vocab_), true);
  for (int32_t id = 0; id < n_text_vocab_; ++id) {
    if (tokenizer_->is_special(id)) continue;
    pieces[static_cast<size_t>(id)] = tokenizer_->token_to_piece(id, /*render_special=*/false);
    disallowed[static_cast<size_t>(id)] = pieces[static_cast<size_t>(id)].empty();
  }
  for (int32_t id : eog_ids_) disallowed[static_cast<size_t>(id)] = false;
  grammar_vocab_ = std::make_shared<const grammar::TokenVocabulary>(std::move(pieces), eog_ids_, std::move(disallowed));
  return grammar_vocab_;
}

void Engine::sample_and_stream(Seq* s, std::span<float> logits) {
  // Under a grammar, EOS/EOT are the Matcher's to allow (only where the text is
  // complete), so min_tokens cannot ban them where nothing else is allowed.
  const bool ban_eog = !s->req.ignore_eos && s->generated() < s->req.min_tokens &&
                       !(s->matcher && s->matcher->is_accepting());
  if (ban_eog)
    for (int32_t id : eog_ids_) logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
  // Rows past the tokenizer's vocabulary are padding (HF vocab_size rounded up): no text.
  if (n_text_vocab_ < n_vocab_)
    std::fill(logits.begin() + n_text_vocab_, logits.end(), -std::numeric_limits<float>::infinity());
  if (s->matcher) s->matcher->mask_logits(logits);
  const int32_t tok = s->sampler.sample(logits);
  // Every logit -inf (logit_bias banned all the grammar allows): the sampler returns
  // the lowest id, which the grammar may refuse; the request ends rather than emit it.
  if (s->matcher && !s->matcher->accept_token(tok)) {
    finish(s, FinishReason::Stop);
    return;
  }
  s->sampler.accept(tok);
  s->tokens.push_back(tok);
  s->result.tokens.push_back(tok);
  ++counters_.tokens_generated;

  const auto now = Clock::now();
  if (s->generated() == 1) {
    s->result.timings.ttft_ms = ms_between(s->submitted, now);
  } else {
    s->result.timings.token_intervals_ms.push_back(ms_between(s->last_token, now));
  }
  s->last_token = now;

  // Under a grammar an EOS/EOT the Matcher accepted ends the text, ignore_eos or not.
  const bool eog = (!s->req.ignore_eos || s->matcher) && std::binary_search(eog_ids_.begin(), eog_ids_.end(), tok);
  TokenEvent ev;
  ev.request_id = s->id;
  ev.token_id = tok;
  ev.step = counters_.steps;
  ev.eog = eog;
  ev.logprob = s->req.logprobs ? token_logprob(logits, tok) : std::numeric_limits<float>::quiet_NaN();
  if (s->req.logprobs && s->req.top_logprobs > 0) ev.top_logprobs = top_logprobs(logits, s->req.top_logprobs);
  bool stopped = false;
  if (s->decoder && !eog) {
    StopStringMatcher::Result r = s->stops.push(s->decoder->push(tok));
    ev.text = std::move(r.emit);
    stopped = r.stopped;
    if (stopped) s->result.stop_matched = r.matched;
  }
  s->result.text += ev.text;
  s->sink->on_token(ev);

  if (eog || stopped || (s->matcher && s->matcher->is_terminated())) {
    finish(s, FinishReason::Stop, s->result.stop_matched);
  } else if ((s->req.max_tokens > 0 && s->generated() >= s->req.max_tokens) ||
             static_cast<int64_t>(s->tokens.size()) >= config_.ctx_size) {
    finish(s, FinishReason::Length);
  }
}

std::unique_ptr<Engine::Seq> Engine::retire(Seq* s) {
  release_kv(s);
  remove_from_running(s);
  auto w = std::find(waiting_.begin(), waiting_.end(), s);
  if (w != waiting_.end()) waiting_.erase(w);
  auto it = std::find_if(owned_.begin(), owned_.end(), [&](const auto& p) { return p.get() == s; });
  PAGODA_CHECK(it != owned_.end(), "Engine::retire of an unknown sequence");
  std::unique_ptr<Seq> owned = std::move(*it);
  owned_.erase(it);
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_ids_.erase(s->id);
  }
  // Before the client hears of it: a stats() read after the response then shows the
  // request's blocks released and its prefix cached.
  publish_stats();
  return owned;
}

void Engine::finish(Seq* s, FinishReason reason, std::string stop_matched) {
  RequestResult& r = s->result;
  r.request_id = s->id;
  r.finish = reason;
  r.stop_matched = std::move(stop_matched);
  if (s->decoder) {  // after a stop string both are empty
    std::string tail = s->stops.push(s->decoder->flush()).emit;
    tail += s->stops.flush();
    r.final_text = tail;
    r.text += tail;
  }
  r.prompt_tokens = s->n_prompt;
  r.generated_tokens = s->generated();
  r.timings.total_ms = ms_between(s->submitted, Clock::now());
  ++counters_.finished;
  if (reason == FinishReason::Cancelled) ++counters_.cancelled;
  const std::unique_ptr<Seq> owned = retire(s);
  s->sink->on_finish(r);
}

void Engine::fail(Seq* s, const std::string& message) {
  ++counters_.errors;
  const std::unique_ptr<Seq> owned = retire(s);
  s->sink->on_error(s->id, message);
}

void Engine::check_invariants() const {
  PAGODA_CHECK(owned_.size() == running_.size() + waiting_.size(), "engine: owned != running + waiting");
  PAGODA_CHECK(static_cast<int>(running_.size()) <= config_.parallel, "engine: more running than --parallel");
  PAGODA_CHECK(store_.num_sequences() == running_.size(), "engine: store tables != running sequences");
  auto common = [&](const Seq* s) {
    PAGODA_CHECK(std::any_of(owned_.begin(), owned_.end(), [&](const auto& p) { return p.get() == s; }),
                 "engine: scheduled sequence not owned");
    PAGODA_CHECK(s->n_prompt > 0 && s->n_prompt <= static_cast<int64_t>(s->tokens.size()) &&
                     static_cast<int64_t>(s->tokens.size()) <= config_.ctx_size,
                 "engine: token counts out of range");
    PAGODA_CHECK(s->n_computed < static_cast<int64_t>(s->tokens.size()), "engine: n_computed past the pending token");
    PAGODA_CHECK(s->n_checked >= 0 && s->n_checked <= s->n_computed, "engine: n_checked past n_computed");
  };
  for (const Seq* s : running_) {
    common(s);
    PAGODA_CHECK(s->admitted && store_.contains(s->seq_id), "engine: running sequence without a table");
    PAGODA_CHECK(store_.capacity(s->seq_id) >= static_cast<int64_t>(s->tokens.size()) ||
                     (s->decoding() && store_.capacity(s->seq_id) >= s->n_computed),
                 "engine: running sequence lacks reserved slots");
    pool_.check_table(store_.table(s->seq_id));
  }
  for (const Seq* s : waiting_) {
    common(s);
    PAGODA_CHECK(!s->admitted && s->n_computed == 0, "engine: waiting sequence holds KV");
    PAGODA_CHECK(std::find(running_.begin(), running_.end(), s) == running_.end(), "engine: both running and waiting");
  }
  cache_.check_invariants();  // includes the pool's
}

void Engine::publish_stats() {
  EngineStats st = counters_;
  st.running = static_cast<int64_t>(running_.size());
  st.waiting = static_cast<int64_t>(waiting_.size());
  for (const Seq* s : running_) st.blocks_held += store_.table(s->seq_id).num_blocks();
  st.pool = pool_.stats();
  st.cache = cache_.stats();
  std::lock_guard<std::mutex> lk(mu_);
  st.in_flight = static_cast<int64_t>(live_ids_.size());
  st.refused_busy = refused_busy_;
  snapshot_ = st;
}

}  // namespace pagoda
