#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <span>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine_seq.h"
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

namespace {

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

KvConfig resolved(const KvConfig& kv) {
  KvConfig k = kv;
  k.budget_bytes = resolve_kv_budget(kv);
  return k;
}

KvGeometry geometry_of(const ModelConfig& c, const KvLayerGroups& g) {
  return KvGeometry{g.page_layers, c.n_kv_heads, c.head_dim, g.n_groups(), g.slot_shapes};
}

std::unique_ptr<DiskTier> open_disk_tier(const EngineConfig& c, const KvLayerGroups& groups) {
  if (c.disk.dir.empty()) return nullptr;
  if (!c.cache.enabled) throw Error("--prompt-cache-dir needs the prefix cache on (--prompt-cache on)");
  // Windowed models keep local layers' blocks as companions of group-0 blocks; the disk
  // tier stores group-0 slabs only, so their hits would be cut to nothing by the window
  // check. Refused rather than silently useless.
  if (groups.windowed())
    throw Error("--prompt-cache-dir: not supported for models whose sliding-window layers are paged apart (" +
                groups.describe() + "); add --kv-swa-full to keep every layer's blocks in one group");
  return std::make_unique<DiskTier>(c.disk);
}

// A model's K/V bytes per token in a pool of `kv`'s types and block size (a probe pool:
// it commits nothing until blocks are taken).
double kv_bytes_per_token(const Model& m, const KvConfig& kv) {
  const KvLayerGroups groups = KvLayerGroups::for_layers(m.config().kv_layer_shapes(), kv.swa_full);
  KvConfig probe = kv;
  probe.budget_bytes = 1ull << 34;
  return PagedKvPool(geometry_of(m.config(), groups), probe).bytes_per_token();
}

EngineConfig checked(EngineConfig c, const Model& m) {
  if (c.parallel < 1) throw Error("--parallel must be >= 1 (got " + std::to_string(c.parallel) + ")");
  if (c.max_queue < 0) throw Error("--max-queue must be >= 0 (got " + std::to_string(c.max_queue) + ")");
  if (c.max_batch_tokens < c.parallel)
    throw Error("--max-batch-tokens (" + std::to_string(c.max_batch_tokens) +
                ") must be at least --parallel (" + std::to_string(c.parallel) + ")");
  if (c.threads < 1) throw Error("--threads must be >= 1");
  if (c.ctx_size <= 0) c.ctx_size = m.config().ctx_len;
  if (c.ctx_size < 2) throw Error("--ctx-size must be >= 2 (got " + std::to_string(c.ctx_size) + ")");
  if (c.state_snapshot_interval < -1)
    throw Error("--state-snapshot-interval must be >= 0 or auto (got " + std::to_string(c.state_snapshot_interval) +
                ")");
  // Hybrid models (qwen35): the budget books the running sequences' recurrent states and
  // the snapshots that make their prefix cache work (a cached K/V prefix is useless
  // without the state at the same position); the pool gets what is left.
  if (m.config().hybrid()) {
    c.kv.budget_bytes = resolve_kv_budget(c.kv);
    // A snapshot goes to disk through the I/O thread's queue in one piece.
    c.disk.write_queue_bytes = std::max<uint64_t>(c.disk.write_queue_bytes, 2 * recurrent_state_bytes(m.config()));
    const uint64_t budget = c.kv.budget_bytes;
    const uint64_t running = static_cast<uint64_t>(c.parallel) * recurrent_state_bytes(m.config());
    if (!c.cache.enabled) c.state_snapshot_bytes = 0;
    else if (c.state_snapshot_bytes == 0) c.state_snapshot_bytes = budget / 4;
    if (running + c.state_snapshot_bytes >= budget)
      throw Error("the KV budget (" + format_bytes(budget) + ") is too small for " + m.config().arch_name + ": " +
                  std::to_string(c.parallel) + " running recurrent states take " + format_bytes(running) +
                  " and state snapshots " + format_bytes(c.state_snapshot_bytes) +
                  "; raise --kv-cache-bytes, lower --parallel or --state-snapshot-bytes");
    c.kv.budget_bytes = budget - running - c.state_snapshot_bytes;
  } else {
    c.state_snapshot_bytes = 0;
  }
  if (c.spec.draft) {
    if (!c.draft_model) throw Error("--spec-type draft needs a draft model (-md FILE)");
    const ModelConfig& d = c.draft_model->config();
    if (d.hybrid()) throw Error("the draft model (" + d.arch_name + ") is hybrid: its recurrent state cannot be cut back");
    if (d.n_vocab != m.config().n_vocab)
      throw Error("the draft model's vocabulary (" + std::to_string(d.n_vocab) + " tokens) is not the model's (" +
                  std::to_string(m.config().n_vocab) + ")");
    if (!m.config().hybrid()) {
      // Both pools hold the same number of tokens: the budget split by K/V bytes per token.
      c.kv.budget_bytes = resolve_kv_budget(c.kv);
      const double main = kv_bytes_per_token(m, c.kv), draft = kv_bytes_per_token(*c.draft_model, c.kv);
      c.draft_kv_budget_bytes = static_cast<uint64_t>(static_cast<double>(c.kv.budget_bytes) * draft / (main + draft));
      c.kv.budget_bytes -= c.draft_kv_budget_bytes;
    }
  } else {
    c.draft_model = nullptr;
  }
  return c;
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineConfig& config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(checked(config, model)),
      n_vocab_(static_cast<int32_t>(model.config().n_vocab)),
      threads_(config_.threads),
      kv_groups_(KvLayerGroups::for_layers(model.config().kv_layer_shapes(), config_.kv.swa_full)),
      pool_(geometry_of(model.config(), kv_groups_), resolved(config_.kv)),
      store_(pool_, kv_groups_),
      disk_(open_disk_tier(config_, kv_groups_)),
      cache_(pool_, config_.model_id, config_.cache, {}, kv_groups_),
      snapshots_(config_.state_snapshot_bytes > 0
                     ? std::make_unique<StateSnapshots>(config_.state_snapshot_bytes,
                                                        recurrent_state_bytes(model.config()), pool_.block_size())
                     : nullptr),
      scheduler_(SchedulerConfig{config_.parallel, config_.max_batch_tokens, config_.state_snapshot_interval}, store_,
                 cache_, snapshots_.get()) {
  configure_recurrent_states(model.config(), store_.recurrent_states());
  if (config_.state_snapshot_interval < 0) {  // auto (engine.h): as many K/V bytes as a snapshot's
    const int64_t block = pool_.block_size();
    const double tokens = snapshots_ ? static_cast<double>(snapshots_->state_bytes()) / pool_.bytes_per_token() : 0.0;
    config_.state_snapshot_interval =
        snapshots_ ? std::max<int64_t>(block, static_cast<int64_t>(std::llround(tokens / static_cast<double>(block))) * block)
                   : 0;
    scheduler_.set_state_snapshot_interval(config_.state_snapshot_interval);
  }
  cache_.set_disk_tier(disk_.get());
  if (disk_) {
    disk_io_ = std::make_unique<DiskIo>(*disk_, [this] {
      {
        std::lock_guard<std::mutex> lk(mu_);
        io_ready_ = true;
      }
      cv_.notify_all();
    });
    cache_.set_disk_io(disk_io_.get());
  }
  if (snapshots_) snapshots_->set_disk(disk_.get(), disk_io_.get(), config_.disk.policy == DiskTierConfig::Policy::All);
  // LongRoPE models pick their factors by the context size (model.h).
  model_.set_context_size(config_.ctx_size);
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
  if (speculating() && config_.spec.suffix) suffix_ = std::make_unique<spec::SuffixIndex>(config_.spec.suffix_bytes);
  if (config_.spec.fixed_cost_ratio > 0) {  // a line through (1, 1) with that slope ratio
    fixed_cost_.emplace();
    fixed_cost_->observe(1, 1.0);
    fixed_cost_->observe(100, 1.0 + 99 * config_.spec.fixed_cost_ratio);
  }
  if (speculating() && config_.draft_model) {
    Model& d = *config_.draft_model;
    KvConfig dk = config_.kv;
    dk.budget_bytes = config_.draft_kv_budget_bytes;
    const KvLayerGroups groups = KvLayerGroups::for_layers(d.config().kv_layer_shapes(), dk.swa_full);
    draft_pool_ = std::make_unique<PagedKvPool>(geometry_of(d.config(), groups), dk);
    draft_store_ = std::make_unique<PagedKvStore>(*draft_pool_, groups);
    d.set_context_size(config_.ctx_size);
  }
  counters_.resident_weight_bytes = static_cast<int64_t>(model.resident_weight_bytes());
  counters_.file_tensor_bytes = static_cast<int64_t>(model.file_tensor_bytes());
  publish_stats();
}

Engine::~Engine() {
  stop();
  // A disk I/O thread stuck in the kernel (a hung mount) is left behind rather than
  // joined forever; the call it is stuck in may still return into the tier, so the tier
  // is leaked with it (disk_io.h, Lifetime). Its lock file stays held until exit.
  if (disk_io_ && !disk_io_->stop()) {
    logger().write(LogLevel::Warn, "pagoda: the prompt-cache disk tier (" + config_.disk.dir +
                                       ") is stuck; leaving its I/O thread behind");
    (void)disk_.release();
  }
}

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
    flush_to_disk();
    publish_stats();
  }
}

std::optional<Engine::Invalid> Engine::validate(const Request& r) const {
  // The one place a request is checked against the model and the engine (the server
  // checks only the protocol and the model name): these messages reach clients as 400s.
  auto bad = [](std::string field, std::string message) { return Invalid{std::move(field), std::move(message)}; };
  if (r.prompt.empty()) return bad("prompt", "the prompt is empty");
  if (auto msg = validate_images(r)) return bad("messages", *msg);
  for (size_t i = 0, img = 0; i < r.prompt.size(); ++i) {
    while (img < r.images.size() && static_cast<int64_t>(i) >= r.images[img].offset + r.images[img].n_tokens) ++img;
    const bool in_image = img < r.images.size() && static_cast<int64_t>(i) >= r.images[img].offset;
    const int32_t t = r.prompt[i];
    if (in_image ? t >= 0 : (t < 0 || t >= n_vocab_))
      return bad("prompt", in_image ? "an image's placeholder id " + std::to_string(t) + " is not negative"
                                    : "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                          std::to_string(n_vocab_) + ")");
  }
  if (r.pooling) {  // nothing is generated: the prompt may fill the context
    if (*r.pooling == Pooling::None || *r.pooling == Pooling::Unspecified)
      return bad("", std::string("pooling '") + pooling_name(*r.pooling) + "' gives no single vector per input");
    if (*r.pooling == Pooling::Rank && model_.n_cls_out() == 0) {
      if (r.rank_tokens.empty())
        return bad("", "the model has no classification head (cls.output.weight): it cannot rank");
      for (int32_t t : r.rank_tokens)
        if (t < 0 || t >= n_vocab_) return bad("", "rank token id " + std::to_string(t) + " is outside the vocabulary");
    }
    if (static_cast<int64_t>(r.prompt.size()) > config_.ctx_size)
      return bad("prompt", "the input has " + std::to_string(r.prompt.size()) + " tokens but the context is " +
                               std::to_string(config_.ctx_size) + " tokens");
    if (auto msg = store_.never_fits(static_cast<int64_t>(r.prompt.size()))) return bad("prompt", *msg);
    return std::nullopt;
  }
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
  if (auto msg = store_.never_fits(static_cast<int64_t>(r.prompt.size()) + 1)) return bad("prompt", *msg);
  return std::nullopt;
}

SubmitResult Engine::submit(Request request, std::shared_ptr<RequestSink> sink) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  return accept(std::move(one), std::move(sink), /*grouped=*/false);
}

SubmitResult Engine::submit_group(std::vector<Request> requests, std::shared_ptr<RequestSink> sink) {
  PAGODA_CHECK(!requests.empty(), "Engine::submit_group needs at least one request");
  return accept(std::move(requests), std::move(sink), /*grouped=*/true);
}

SubmitResult Engine::accept(std::vector<Request> requests, std::shared_ptr<RequestSink> sink, bool grouped) {
  PAGODA_CHECK(sink != nullptr, "Engine::submit needs a sink");
  SubmitResult res;
  // validate() reads only config_, n_vocab_ and pool_'s geometry (constant): no lock needed.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (auto invalid = validate(requests[i])) {
      res.status = SubmitResult::Status::Invalid;
      res.field = std::move(invalid->field);
      res.message = grouped ? "input " + std::to_string(i) + ": " + invalid->message : std::move(invalid->message);
      return res;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) {
    res.status = SubmitResult::Status::Busy;
    res.message = "engine is shutting down";
    return res;
  }
  const size_t cap = static_cast<size_t>(config_.parallel) + static_cast<size_t>(config_.max_queue);
  if (live_units_ >= cap) {
    ++refused_busy_;
    res.status = SubmitResult::Status::Busy;
    res.message = "busy: " + std::to_string(live_units_) + " requests in flight (--parallel " +
                  std::to_string(config_.parallel) + " + --max-queue " + std::to_string(config_.max_queue) + ")";
    return res;
  }
  const uint64_t first = next_request_id_;
  const auto now = Clock::now();
  for (Request& r : requests) {
    const uint64_t id = next_request_id_++;
    auto seq = std::make_unique<Seq>(id, std::move(r), sink, n_vocab_, tokenizer_);
    seq->submitted = now;
    seq->group = grouped ? first : 0;
    inbox_.push_back(std::move(seq));
    live_ids_.insert(id);
  }
  ++live_units_;
  if (grouped) group_left_[first] = requests.size();
  res.request_id = first;
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

void Engine::reset_prefix_cache_async(std::function<void(const PrefixCacheReset&)> done, CacheTier tier) {
  PAGODA_CHECK(done != nullptr, "Engine::reset_prefix_cache_async needs a callback");
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_) {  // the thread's last drain may have run already: nothing is reset
    const PrefixCacheReset none{snapshot_, snapshot_};
    lk.unlock();
    done(none);
    return;
  }
  reset_callbacks_.push_back(std::move(done));
  reset_ram_ |= tier != CacheTier::Disk;
  reset_disk_ |= tier != CacheTier::Ram;
  cv_.notify_all();
}

Engine::PrefixCacheReset Engine::reset_prefix_cache(CacheTier tier) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    PAGODA_CHECK(thread_started_ || stopping_, "Engine::reset_prefix_cache before start would wait forever");
  }
  std::promise<PrefixCacheReset> promise;
  std::future<PrefixCacheReset> result = promise.get_future();
  reset_prefix_cache_async([&promise](const PrefixCacheReset& r) { promise.set_value(r); }, tier);
  return result.get();
}

// ---- engine thread -------------------------------------------------------------------------

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Idle, or nothing to compute until a disk restore finishes (its callback wakes us).
      const bool idle = scheduler_.running().empty() && (scheduler_.waiting().empty() || stalled_);
      if (idle) {
        cv_.wait_for(lk, std::chrono::seconds(1), [&] {
          return stopping_ || !inbox_.empty() || !cancels_.empty() || !reset_callbacks_.empty() || io_ready_;
        });
      }
      io_ready_ = false;
      if (stopping_) break;
    }
    drain_inbox();
    expire_deadlines();
    if (scheduler_.running().empty() && scheduler_.waiting().empty()) cache_.enforce_limits();  // TTL without traffic
    step();
    if (config_.check_invariants || kDebugBuild) check_invariants();
    publish_stats();
  }
  drain_inbox();
  while (!owned_.empty()) finish(owned_.back().get(), FinishReason::Cancelled);
  flush_to_disk();  // a clean shutdown keeps the RAM tier's blocks for the next run
  publish_stats();
}

void Engine::flush_to_disk() {
  if (snapshots_) snapshots_->flush_to_disk();  // queued first: the K/V flush drains the queue
  cache_.flush_to_disk();
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<Seq>> fresh;
  std::vector<uint64_t> cancels;
  std::vector<std::function<void(const PrefixCacheReset&)>> resets;
  bool reset_ram = false, reset_disk = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fresh.swap(inbox_);
    cancels.swap(cancels_);
    resets.swap(reset_callbacks_);
    std::swap(reset_ram, reset_ram_);
    std::swap(reset_disk, reset_disk_);
  }
  for (auto& s : fresh) {
    // Mean and Cls pool every position's hidden state: a borrowed prefix has none.
    const bool pools_all = s->req.pooling && (*s->req.pooling == Pooling::Mean || *s->req.pooling == Pooling::Cls);
    s->key = cache_.key(s->req.cache_key, s->req.use_cache && config_.cache.enabled && !pools_all);
    if (s->req.grammar) s->matcher.emplace(s->req.grammar, grammar_vocab());
    scheduler_.add(s.get());
    owned_.push_back(std::move(s));
  }
  for (uint64_t id : cancels) {
    auto it = std::find_if(owned_.begin(), owned_.end(), [&](const auto& p) { return p->id == id; });
    if (it != owned_.end()) finish(it->get(), FinishReason::Cancelled);
  }
  if (!resets.empty()) {  // resets asked for since the last step share one
    publish_stats();
    const EngineStats before = stats();
    cache_.reset(reset_ram && reset_disk ? CacheTier::All : reset_ram ? CacheTier::Ram : CacheTier::Disk);
    if (snapshots_ && reset_ram) snapshots_->clear();
    if (suffix_ && reset_ram) suffix_->clear();
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

void Engine::step() {
  propose_drafts();
  const SchedulerOutput& plan = scheduler_.schedule();
  counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
  for (SchedSeq* p : plan.preempted) drop_draft_kv(static_cast<Seq*>(p));  // recomputed when readmitted
  for (SchedSeq* p : plan.admitted) {
    Seq* s = static_cast<Seq*>(p);
    if (s->admissions == 1) {
      s->result.cached_tokens = s->first_cached_tokens;
      s->result.timings.queue_ms = ms_between(s->submitted, Clock::now());
    }
    // A preempted embedding request is recomputed from its first token: pool afresh.
    s->pool_sum.clear();
    s->pooled.clear();
  }
  // The scheduler has taken these out already; the clients hear of it before the forward.
  for (SchedSeq* p : plan.ended_length) finish(static_cast<Seq*>(p), FinishReason::Length);
  for (const auto& [p, message] : plan.refused) fail(static_cast<Seq*>(p), message);

  batch_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    const Seq* s = static_cast<const Seq*>(c.seq);
    if (c.decode) {  // the sampled token, then the tokens proposed after it: a row each
      batch_.add(s->tokens.back(), s->n_computed, s->seq_id, true);
      for (size_t j = 0; j < s->draft.size(); ++j)
        batch_.add(s->draft[j], s->n_computed + 1 + static_cast<int64_t>(j), s->seq_id, true);
      continue;
    }
    const std::vector<ImageSpan>& images = s->req.images;
    size_t img = 0;
    for (int64_t i = 0; i < c.n_tokens; ++i) {
      const int64_t pos = s->n_computed + i;
      const bool last = c.logits && i + 1 == c.n_tokens;  // the prompt's end or a checkpoint
      while (img < images.size() && pos >= images[img].offset + images[img].n_tokens) ++img;
      if (img < images.size() && pos >= images[img].offset) {  // an image's row
        const ImageSpan& im = images[img];
        const float* row = im.embeddings->data() + static_cast<size_t>(pos - im.offset) * model_.config().dim;
        batch_.add_embedded(s->tokens[static_cast<size_t>(pos)], row, pos, s->seq_id,
                            im.bidirectional ? im.offset + im.n_tokens : 0, last);
      } else if (s->req.pooling && !ranks_by_logits(*s)) {
        // The pooled rows, and a checkpoint's row (it vouches for the K/V; pool_chunk).
        const bool pooled = pools_row(*s->req.pooling, pos, last && c.ends_prompt());
        batch_.add(s->tokens[static_cast<size_t>(pos)], pos, s->seq_id, false, pooled || (last && c.checkpoint));
      } else {
        batch_.add(s->tokens[static_cast<size_t>(pos)], pos, s->seq_id, last);
      }
    }
  }
  set_mrope_positions(plan);
  stalled_ = batch_.size() == 0 && cache_.restores_in_flight() > 0;
  if (batch_.size() == 0) return;

  // Forward, sample, stream.
  const auto forward_start = Clock::now();
  try {
    model_.forward(batch_, store_, threads_, logits_, &hidden_);
  } catch (const std::exception& e) {
    for (const ScheduledChunk& c : plan.chunks) fail(static_cast<Seq*>(c.seq), e.what());
    return;
  }
  step_cost_.observe(static_cast<int64_t>(batch_.size()),
                     std::chrono::duration<double>(Clock::now() - forward_start).count());
  ++counters_.steps;
  counters_.max_step_tokens = std::max<int64_t>(counters_.max_step_tokens, static_cast<int64_t>(batch_.size()));
  int64_t row = 0;
  int64_t hidden_row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Seq* s = static_cast<Seq*>(c.seq);
    if (!c.decode) counters_.tokens_prefilled += c.n_tokens;
    if (s->req.pooling) {
      pool_chunk(s, c, hidden_row, row);
      continue;
    }
    if (!c.logits) {
      scheduler_.computed(s, c.n_tokens, /*checked=*/false);
      continue;
    }
    if (c.decode && c.n_tokens > 1) {
      verify_drafts(s, c, row);
      row += c.n_tokens;
      continue;
    }
    std::span<float> lg(&logits_[static_cast<size_t>(row * n_vocab_)], static_cast<size_t>(n_vocab_));
    ++row;
    const bool finite = all_finite(lg);
    scheduler_.computed(s, c.n_tokens, finite);
    if (!finite) {
      fail(s, "the model produced non-finite logits (NaN/inf): its weights are corrupt or overflow "
              "at this precision");
      continue;
    }
    if (c.checkpoint) continue;  // the row only vouched for the K/V the scheduler indexed
    // A draft model's proposals the scheduler cut (no room): its K/V past them goes.
    if (sample_and_stream(s, lg)) trim_draft_kv(s);
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

bool Engine::sample_and_stream(Seq* s, std::span<float> logits) {
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
    return false;
  }
  s->sampler.accept(tok);
  s->tokens.push_back(tok);
  s->result.tokens.push_back(tok);
  ++counters_.tokens_generated;
  if (s->spec_expect >= 0 && tok == s->spec_expect) {  // a proposed token, accepted
    ++s->result.accepted_tokens;
    ++counters_.spec.accepted_tokens;
  }
  s->spec_expect = -1;

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
    return false;
  }
  if ((s->req.max_tokens > 0 && s->generated() >= s->req.max_tokens) ||
      static_cast<int64_t>(s->tokens.size()) >= config_.ctx_size) {
    finish(s, FinishReason::Length);
    return false;
  }
  return true;
}

std::unique_ptr<Engine::Seq> Engine::retire(Seq* s) {
  // What it read and wrote, for the suffix proposer (not an embedding's input: nothing
  // is decoded after it). A failed request's tokens are not kept (fail() retires too,
  // but after the error there is nothing to trust).
  // Not a prompt with images: its placeholder ids are no tokens to propose.
  if (suffix_ && !s->req.pooling && s->req.images.empty() && s->generated() > 0 &&
      s->result.finish != FinishReason::Error)
    suffix_->add(spec_tenant(s->key), s->tokens);
  drop_draft_kv(s);
  scheduler_.remove(s);
  auto it = std::find_if(owned_.begin(), owned_.end(), [&](const auto& p) { return p.get() == s; });
  PAGODA_CHECK(it != owned_.end(), "Engine::retire of an unknown sequence");
  std::unique_ptr<Seq> owned = std::move(*it);
  owned_.erase(it);
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_ids_.erase(s->id);
    if (s->group == 0) {
      --live_units_;
    } else if (auto g = group_left_.find(s->group); g != group_left_.end() && --g->second == 0) {
      group_left_.erase(g);
      --live_units_;
    }
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
  r.preemptions = s->preemptions;
  r.timings.total_ms = ms_between(s->submitted, Clock::now());
  ++counters_.finished;
  if (reason == FinishReason::Cancelled) ++counters_.cancelled;
  const std::unique_ptr<Seq> owned = retire(s);
  s->sink->on_finish(r);
}

void Engine::fail(Seq* s, const std::string& message) {
  ++counters_.errors;
  s->result.finish = FinishReason::Error;
  const std::unique_ptr<Seq> owned = retire(s);
  s->sink->on_error(s->id, message);
}

void Engine::check_invariants() const {
  const auto& running = scheduler_.running();
  const auto& waiting = scheduler_.waiting();
  PAGODA_CHECK(owned_.size() == running.size() + waiting.size(), "engine: owned != running + waiting");
  auto common = [&](const SchedSeq* s) {
    PAGODA_CHECK(std::any_of(owned_.begin(), owned_.end(), [&](const auto& p) { return p.get() == s; }),
                 "engine: scheduled sequence not owned");
    PAGODA_CHECK(s->n_prompt > 0 && s->n_prompt <= static_cast<int64_t>(s->tokens.size()) &&
                     static_cast<int64_t>(s->tokens.size()) <= config_.ctx_size,
                 "engine: token counts out of range");
    PAGODA_CHECK(s->n_computed < static_cast<int64_t>(s->tokens.size()), "engine: n_computed past the pending token");
  };
  for (const SchedSeq* s : running) common(s);
  for (const SchedSeq* s : waiting) common(s);
  scheduler_.check_invariants();
  cache_.check_invariants();  // includes the pool's
  if (draft_store_) {  // the draft model's K/V: running sequences' only, never past their tokens
    PAGODA_CHECK(draft_store_->num_sequences() <= running.size(), "engine: draft K/V of a sequence not running");
    for (const SchedSeq* p : running) {
      const Seq* s = static_cast<const Seq*>(p);
      if (s->draft_sid < 0) continue;
      PAGODA_CHECK(s->draft_sid == s->seq_id && draft_store_->contains(s->draft_sid) &&
                       s->draft_computed <= static_cast<int64_t>(s->tokens.size()),
                   "engine: draft K/V out of step with its sequence");
      draft_store_->check_tables(s->draft_sid);
    }
  }
  if (snapshots_) snapshots_->check_invariants();
}

void Engine::publish_stats() {
  EngineStats st = counters_;
  st.running = static_cast<int64_t>(scheduler_.running().size());
  st.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  st.restoring = scheduler_.restoring();
  st.blocks_held = scheduler_.blocks_held();
  st.pool = pool_.stats();
  st.recurrent_state_bytes = store_.recurrent_states().bytes();
  st.cache = cache_.stats();
  if (snapshots_) st.cache.state_snapshots = snapshots_->stats();
  st.spec.types = speculating() ? spec::spec_types_name(config_.spec) : "none";
  if (suffix_) st.spec.suffix = suffix_->stats();
  if (draft_pool_) {
    const PoolStats dp = draft_pool_->stats();
    st.spec.draft_kv_bytes_in_use = dp.bytes_in_use;
    st.spec.draft_kv_bytes_budget = dp.bytes_budget;
  }
  st.spec.step_fixed_ms = step_cost_.observations() > 0 ? step_cost_.fixed() * 1e3 : 0;
  st.spec.step_per_token_ms = step_cost_.observations() > 0 ? step_cost_.per_token() * 1e3 : 0;
  std::lock_guard<std::mutex> lk(mu_);
  st.in_flight = static_cast<int64_t>(live_ids_.size());
  st.refused_busy = refused_busy_;
  snapshot_ = st;
}

}  // namespace pagoda
