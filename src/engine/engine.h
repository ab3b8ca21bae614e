// Engine — continuous batching over one model: many requests, one forward per step.
//
// Contract:
// - Ownership: the engine thread (started by start(), joined by stop() / the destructor)
//   owns the model's forward, the PagedKvPool, the PagedKvStore, the PrefixCache, every
//   Sampler / StopStringMatcher / StreamDecoder and the scheduler state. Nothing of it
//   is touched by another thread. The Model and the Tokenizer are borrowed and must
//   outlive the Engine; the engine's ThreadPool (config.threads workers) is its own.
// - Other threads call submit(), cancel(), stats() and reset_prefix_cache[_async](). They meet
//   the engine thread in two places, both guarded by `mu_`:
//     * the inbox: submitted requests, cancel ids and prefix-cache reset callbacks,
//       drained at the top of every step;
//     * the stats snapshot: a copy the engine thread publishes after every step.
//   The engine thread never holds `mu_` while running a forward or calling a sink.
// - Sinks (RequestSink) are called on the engine thread, in order, without locks held:
//   zero or more on_token, then exactly one of on_finish / on_error. They must not
//   block (copy the event into the consumer's own queue), must not throw, and must not
//   call back into the engine except cancel() / stats() (which only take `mu_` briefly).
// - Hot path: a warmed-up step allocates nothing in the scheduler (batch, logits and
//   per-step lists are reused members); streamed text and results do allocate.
// - submit() is refused at once (never queued) for a bad request (Invalid: sampling
//   params, empty prompt, prompt not shorter than ctx_size, a prompt that could not fit
//   in the whole KV budget, stop strings without a tokenizer) or when parallel +
//   max_queue requests are already accepted and unfinished (Busy: the server answers
//   503/429; a submit_group() counts as one). An accepted request always ends with
//   on_finish or on_error.
// - Embedding and reranking requests (Request::pooling) share the scheduler, the
//   batches and the KV pool with generation: their prompts are prefill chunks like any
//   other (each takes a running slot of --parallel while computed), the forward returns
//   the final hidden states of the rows they pool, and they end in the step that
//   computes their last prompt token.
//
// Scheduling: the policy -- decode and preemption, chunked prefill, FCFS admission, requests
// deferred behind a running prefill they share, requests waiting for a disk restore -- is
// stated once, in engine/scheduler.h (Scheduler::schedule() decides each step's batch from
// its waiting and running lists and the pool). Each step, in this order:
//  1. Drain the inbox: cancelled requests (and those past their deadline) are finished
//     (reason Cancelled) and their blocks released (their computed prefix stays in the
//     prefix cache, evictable) before anything else is scheduled -- within one step (one
//     waiting for a disk restore too: scheduler.h says what becomes of its restore).
//  2. Speculative decoding (EngineConfig::spec, engine_spec.cpp): proposals for the
//     decoding sequences (SchedSeq::draft); then Scheduler::schedule(), which decides which
//     of them ride in the step. Around it the engine keeps each request's own state: a
//     preempted request keeps its Sampler (RNG and penalty history), grammar Matcher, stop
//     matcher and decoder, so when it is recomputed from prompt + generated tokens streaming
//     continues exactly where it stopped and nothing is re-sent. A sequence the scheduler
//     ends for lack of KV finishes with reason Length; a prompt it refuses gets on_error.
//  3. One Model::forward over the whole batch; sample each sequence that got logits
//     with its own Sampler (its proposed tokens verified row by row: engine_spec.cpp);
//     stream; apply stop conditions; finish.
// Disk tier (EngineConfig::disk, cache/disk_tier.h): blocks are written and read back on
// the disk tier's own I/O thread (cache/disk_io.h), not the engine thread, while every
// running request keeps stepping. Spills are copied into a bounded queue
// (DiskTierConfig::write_queue_bytes); when evictions outrun the disk a spill is dropped
// (counted, recomputed if asked for again), never waited for: disk_io.h says why. The
// engine thread pays a 704 KiB memcpy per TinyLlama block spilled and none per block
// restored. At stop() restores in flight finish, then every cached block the disk lacks is
// queued and the queue drained (unless the tier is stalled), so a clean restart finds the
// RAM tier too. Refused for models whose sliding-window layers are paged apart (their
// blocks' companions are not written).
// Prefix cache: what is indexed when (a completed prompt, a checkpoint, a sequence that
// finishes, is preempted or is cancelled; only K/V a finite logits row vouched for) is
// the scheduler's, in scheduler.h.
// Grammars (Request::grammar): the mask is applied before the sampler's chain, so
// penalties, top-k/p and temperature act on the allowed tokens only; the Matcher lives
// with the Seq, like the Sampler, so a preempted request resumes in the same state.
// Sampling: penalties count generated tokens only (prompt tokens are not accept()ed,
// as vLLM does); EOS/EOT get logit -inf while generated < min_tokens.
// Invariants (check_invariants(), engine thread, after every step when configured):
//  1. owned_ is the disjoint union of the scheduler's running and waiting lists (every
//     unfinished request that left the inbox is in exactly one); running <= parallel.
//  2. A running sequence is admitted and the store holds its table: while prefilling
//     with capacity >= tokens.size() (the whole remaining prompt is reserved at
//     admission), while decoding >= n_computed (the slot of the token to feed is
//     reserved at the start of the step that feeds it). A waiting one is not admitted
//     and has n_computed == 0. The store holds exactly the running tables.
//  3. 0 < n_prompt <= tokens.size() < ctx_size + 1, n_computed < tokens.size() (the last
//     token's K/V is computed when it is fed, after which a new token is sampled).
//  4. The pool's and the prefix cache's own invariants hold.
// Finish reasons: Stop (EOS/EOT unless ignore_eos, or a stop string; the EOS token is in
// RequestResult::tokens and streamed with empty text), Length
// (max_tokens, context full at ctx_size, or the KV budget cannot hold the sequence),
// Cancelled, Error (the forward threw: every sequence of that batch gets on_error; or
// the model produced non-finite logits for this sequence: its weights are input, so
// that is this request's error, and none of the K/V it computed since its last finite
// logits row is indexed for reuse).
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/disk_io.h"
#include "cache/prefix_cache.h"
#include "cache/prefix_cache_config.h"
#include "cache/state_snapshots.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "grammar/grammar.h"
#include "kv/kv_config.h"
#include "kv/paged_kv_pool.h"
#include "kv/paged_kv_store.h"
#include "model/model.h"
#include "spec/draft_planner.h"
#include "spec/suffix_index.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct EngineConfig {
  int parallel = 4;                // --parallel: running sequences at most
  int max_queue = 64;              // --max-queue: accepted requests beyond `parallel`
  int64_t max_batch_tokens = 512;  // --max-batch-tokens: tokens per forward (decode + prefill)
  int64_t ctx_size = 0;            // --ctx-size: tokens per sequence; 0: the model's ctx_len
  int threads = 1;                 // --threads: kernel workers
  KvConfig kv;                     // budget_bytes 0: resolve_kv_budget's default
  PrefixCacheConfig cache;
  DiskTierConfig disk;             // --prompt-cache-dir (empty: no disk tier)
  std::string model_id = "model";  // prefix-cache namespace (what identifies the weights)
  std::vector<int32_t> extra_eog_ids;  // also end generation (generation_config.json eos_token_id)
  // Hybrid models (qwen35): the KV budget also books `parallel` running recurrent states
  // and this many bytes of state snapshots, the prefix cache's other half (0: a quarter of
  // the budget; state_snapshots.h); the pool gets the rest. A prefill snapshots the state
  // every state_snapshot_interval tokens (0: only at prompt and sequence ends; -1, auto:
  // the tokens whose K/V takes as many bytes as one snapshot, a block multiple, so the
  // snapshots of a long prompt at most double its memory: ~1.6k tokens for Qwen 3.5 4B).
  uint64_t state_snapshot_bytes = 0;       // --state-snapshot-bytes
  int64_t state_snapshot_interval = -1;    // --state-snapshot-interval (auto)
  // Speculative decoding (spec/draft_planner.h): proposers on, draft lengths, the suffix
  // index's byte budget. Off here (the CLI turns the model-free proposers on by default).
  spec::SpecConfig spec;
  // The draft model of spec.draft (borrowed; outlives the Engine): the same vocabulary
  // size, not hybrid. Its K/V has a pool of its own inside the same budget: the budget is
  // split by the two models' K/V bytes per token, so both hold the same number of tokens.
  Model* draft_model = nullptr;
  uint64_t draft_kv_budget_bytes = 0;  // resolved by the Engine: the draft pool's share
  bool check_invariants = false;   // tests: check_invariants() (and the pool's and cache's)
                                   // after every step; always on in debug builds
};

// An image in a prompt: the vision projector's rows for prompt positions [offset, offset +
// n_tokens). The prompt's ids there are placeholders the caller derives from the image's
// content (negative: outside every vocabulary), so the prefix cache keys the image's K/V by
// what the image is: a conversation resending it hits the cache past it, a different image
// shares nothing past its start.
struct ImageSpan {
  int64_t offset = 0;
  int64_t n_tokens = 0;
  std::shared_ptr<const std::vector<float>> embeddings;  // [n_tokens, model dim] f32
  // The image's tokens see each other both ways (Gemma 3): a prefill chunk never ends
  // inside the image (Scheduler: SchedSeq::atomic_spans).
  bool bidirectional = true;
  // M-RoPE (Qwen 3.5's projector; grid_x * grid_y == n_tokens, 0 otherwise): token i of the
  // image sits at (row i / grid_x, column i % grid_x). The image starts at temporal position
  // t (its offset less what the images before it saved), its tokens rotate by (t, t + row,
  // t + column), and it advances the temporal position by max(grid_x, grid_y), not
  // n_tokens: every later token's is its index less the sum of n_tokens - max(grid_x,
  // grid_y) over the images before it (llama.cpp's mtmd positions).
  int64_t grid_x = 0, grid_y = 0;
};

// The M-RoPE positions (temporal, height, width) of prompt position `pos` of a prompt with
// these images (ImageSpan::grid_x's rule): inside an image with a grid (t, t + row, t +
// column), elsewhere pos less what the images before it saved, three times.
std::array<int64_t, 3> mrope_position(const std::vector<ImageSpan>& images, int64_t pos);

struct Request {
  std::vector<int32_t> prompt;  // token ids, non-empty
  SamplingParams sampling;
  int64_t max_tokens = -1;      // generated tokens at most; -1: until the context is full
  int64_t min_tokens = 0;       // EOS/EOT are banned (logit -inf) before this many
  bool ignore_eos = false;
  bool logprobs = false;        // fill TokenEvent::logprob (one log-softmax per token)
  int top_logprobs = 0;         // with logprobs: also the n most likely alternatives
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  std::string cache_key;          // prefix-cache namespace salt ("" shared)
  bool use_cache = true;
  int64_t timeout_ms = 0;         // > 0: a deadline this long after submit; past it the
                                  // request ends with Cancelled (checked every step)
  // Structured outputs / tool calls: every sampled token keeps the text a prefix of a
  // sentence of this grammar (the others' logits are -inf before sampling); EOS/EOT
  // only where the text is complete, and the request ends (Stop) once nothing but EOS
  // could follow. Needs a tokenizer. Control tokens are never produced under a grammar.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Stream the text of special tokens (not EOS/EOT) too: tool-call and channel markers
  // (<|python_tag|>, [TOOL_CALLS], harmony's <|channel|>) are special in their vocabularies.
  bool render_special = false;
  // Set: an embedding (Mean / Cls / Last) or reranking (Rank) request, not generation.
  // The prompt is computed like any prefill (chunked, batched with other sequences,
  // preemptible) and its final hidden states pooled; nothing is sampled and no token
  // streams: the request ends with on_finish(Stop) carrying RequestResult::embedding.
  // The prompt may fill the whole context (ctx_size tokens). Mean and Cls read every
  // position's state, so they never borrow from (or add to) the prefix cache; Last and
  // Rank need only the last token, whose state is the same over cached K/V.
  // Sampling fields, max_tokens, stop and grammar are ignored. None is Invalid; Rank
  // needs a model with a classification head (Model::n_cls_out) or rank_tokens.
  std::optional<Pooling> pooling;
  // Rank on a model without a head: the outputs are these tokens' logits at the last
  // position (a Qwen3-Reranker Hugging Face directory: "yes", "no" from its lm_head, the
  // rows llama.cpp's converter copies into cls.output.weight). Ignored with a head.
  std::vector<int32_t> rank_tokens;
  // false: no speculative decoding for this request (EngineConfig::spec decides otherwise).
  bool speculate = true;
  // Images, in prompt order, not overlapping; their prompt ids are negative placeholders
  // and every other id is a token. A request with images does not speculate (the
  // proposers would offer placeholders as tokens).
  std::vector<ImageSpan> images;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t token_id = 0;
  // The token ended generation as end-of-generation (an EOS/EOT of the tokenizer or of
  // EngineConfig::extra_eog_ids, not ignored; or one a grammar accepted): its text is
  // empty and the request finishes with Stop right after. The engine decides this once;
  // a sink must not work it out again (e.g. to leave the token out of logprobs).
  bool eog = false;
  std::string text;      // safe-to-show text this token completed (may be empty)
  float logprob = 0.0f;  // natural log; NaN unless Request::logprobs
  std::vector<TokenLogprob> top_logprobs;  // Request::top_logprobs best, most likely first
  int64_t step = 0;      // engine step that produced it (tests: gap bounds)
};

struct RequestTimings {
  double queue_ms = 0;                    // submit -> first admission
  double ttft_ms = 0;                     // submit -> first token (0: none)
  std::vector<double> token_intervals_ms; // [generated - 1] between consecutive tokens
  double total_ms = 0;                    // submit -> finish
};

struct RequestResult {
  uint64_t request_id = 0;
  FinishReason finish = FinishReason::Stop;
  std::string stop_matched;       // the stop string, when one ended it
  std::vector<int32_t> tokens;    // every generated token (incl. a final EOS)
  std::string text;               // all streamed text plus final_text
  std::string final_text;         // text held back and flushed at the end (not streamed)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens reused from the prefix cache (1st admission)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;        // times this request was preempted
  int64_t draft_tokens = 0;       // speculative decoding: proposed tokens verified
  int64_t accepted_tokens = 0;    // ... of which accepted (emitted without a step of their own)
  RequestTimings timings;
  // Request::pooling set: Mean / Cls / Last the pooled final hidden state [dim] (not
  // normalised); Rank the classification head's raw outputs [n_cls_out]. Else empty.
  std::vector<float> embedding;
};

// Called on the engine thread; must not block (see the contract).
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_token(const TokenEvent& ev) = 0;
  virtual void on_finish(const RequestResult& result) = 0;
  virtual void on_error(uint64_t request_id, const std::string& message) = 0;
};

struct SubmitResult {
  enum class Status { Ok, Busy, Invalid };
  Status status = Status::Ok;
  uint64_t request_id = 0;  // valid when Ok
  std::string message;      // one line when not Ok
  std::string field;        // Invalid: the Request field at fault ("prompt", "max_tokens",
                            // "min_tokens", "top_logprobs", "stop"), "" when none is
  bool ok() const { return status == Status::Ok; }
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;          // queued (incl. preempted, not yet re-admitted, and restoring)
  int64_t restoring = 0;        // of those, waiting for a disk restore (scheduler.h)
  int64_t in_flight = 0;        // accepted and not finished
  int64_t steps = 0;            // forwards run
  int64_t preemptions = 0;
  int64_t tokens_generated = 0;
  int64_t tokens_prefilled = 0;
  int64_t max_step_tokens = 0;  // largest batch so far
  int64_t blocks_held = 0;      // sum of running sequences' table blocks (a block shared by
                                // two sequences counts twice): with the cache's evictable
                                // blocks, what pool.blocks_live + blocks_evictable accounts for
  int64_t finished = 0;         // ended with on_finish, any reason (incl. cancelled)
  int64_t cancelled = 0, errors = 0, refused_busy = 0;
  // The model's weights (constant): Model::resident_weight_bytes() and file_tensor_bytes().
  int64_t resident_weight_bytes = 0;
  int64_t file_tensor_bytes = 0;
  uint64_t recurrent_state_bytes = 0;  // hybrid models: running sequences' states (RecurrentStates::bytes)
  PoolStats pool;
  CacheStats cache;
  // Speculative decoding (engine_spec.cpp): proposals verified and accepted; the suffix
  // index's bytes are the cache's other consumer of memory besides the pool.
  struct Speculation {
    std::string types = "none";     // spec_types_name
    int64_t draft_tokens = 0;       // proposed tokens verified
    int64_t accepted_tokens = 0;    // of which accepted
    int64_t verifications = 0;      // decode chunks that carried proposed tokens
    double step_fixed_ms = 0;       // the planner's step-cost line (spec/draft_planner.h)
    double step_per_token_ms = 0;
    spec::SuffixIndexStats suffix;  // zero without the suffix proposer
    int64_t draft_forwards = 0;     // the draft model's forwards
    uint64_t draft_kv_bytes_in_use = 0;  // its K/V pool (zero without a draft model)
    uint64_t draft_kv_bytes_budget = 0;
  } spec;
};

class Engine {
 public:
  // Builds the pool (config.kv, budget resolved), the store and the prefix cache.
  // tokenizer may be null (synthetic models): no text, no EOS, no stop strings.
  // Throws pagoda::Error for a bad config. Does not start the thread.
  Engine(Model& model, const Tokenizer* tokenizer, const EngineConfig& config);
  // stop()s.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // start() and stop() are for the thread that owns the Engine object (not concurrent
  // with each other or the destructor).
  // Starts the engine thread. Requests submitted before start() wait for it (tests use
  // this to make a set of requests arrive in the same step). Requires: not started.
  void start();
  // Finishes every unfinished request with Cancelled and joins the thread. Idempotent.
  void stop();

  // Any thread. See the contract for refusals.
  SubmitResult submit(Request request, std::shared_ptr<RequestSink> sink);
  // Any thread: several requests that make one client request (an embeddings call's
  // inputs, a rerank's documents), all accepted or none. They share `sink` and get the
  // consecutive ids request_id, request_id + 1, ... in order; each ends on its own
  // (on_finish / on_error with its id) and is scheduled like any other request, FCFS.
  // Towards the Busy limit the group counts as one request, however many it holds (a
  // 2048-input embeddings call is not refused for having more inputs than --max-queue).
  // Invalid names the first bad request's index in `message` ("input 3: ...").
  // Requires: requests non-empty.
  SubmitResult submit_group(std::vector<Request> requests, std::shared_ptr<RequestSink> sink);
  // Any thread. The request ends with Cancelled within one step (true), or it is
  // unknown / already finished (false).
  bool cancel(uint64_t request_id);
  // Any thread: the snapshot published after the last step.
  EngineStats stats() const;
  // The engine's stats just before and just after a prefix-cache reset, both taken on
  // the engine thread around it (a stats() snapshot read by the caller first could
  // predate the last finished request's cache insert).
  struct PrefixCacheReset {
    EngineStats before, after;
  };
  // Any thread, never blocks: the engine thread drops every cached block (blocks running
  // sequences hold stay with them) at the top of its next step (before start(): of its
  // first) and calls `done` there, on the engine thread, with no lock held (like a
  // sink: it must not block or call back into the engine but for stats()). After stop()
  // has begun, `done` runs at once on the caller's thread with before == after.
  // `tier`: Ram drops the pool's cached blocks, Disk the disk tier's records, All both.
  void reset_prefix_cache_async(std::function<void(const PrefixCacheReset&)> done, CacheTier tier = CacheTier::All);
  // reset_prefix_cache_async, waiting for it. Requires: started, or stop() begun.
  PrefixCacheReset reset_prefix_cache(CacheTier tier = CacheTier::All);

  const EngineConfig& config() const { return config_; }  // ctx_size resolved
  int32_t n_vocab() const { return n_vocab_; }

 private:
  struct Seq;
  using Clock = std::chrono::steady_clock;

  void loop();
  void drain_inbox();
  // A clean shutdown: the RAM tier's blocks and state snapshots to the disk tier.
  void flush_to_disk();
  void expire_deadlines();
  void step();
  // False when the token ended the request (s is gone then).
  bool sample_and_stream(Seq* s, std::span<float> logits);
  // Speculative decoding (engine_spec.cpp): proposals for the decoding sequences before
  // the scheduler runs (SchedSeq::draft), and their verification from the chunk's rows.
  void propose_drafts();
  void verify_drafts(Seq* s, const ScheduledChunk& c, int64_t row);
  // The draft model's greedy proposals for draft_seqs_[i] with draft_lens_[i] tokens each.
  void generate_drafts();
  void drop_draft_kv(Seq* s);
  void trim_draft_kv(Seq* s);
  double draft_token_cost() const;  // a proposed token's draft forward, in step_cost_'s units
  bool speculating() const;
  // Embedding requests: adds the chunk's hidden rows (from hidden_[row...]) to the
  // sequence's pool; at the prompt's end ends the request with its embedding.
  // Rank through Request::rank_tokens (the model has no head): a logits row, no hidden rows.
  bool ranks_by_logits(const Seq& s) const;
  // `logits_row`: the next logits row (Rank through rank_tokens reads one).
  void pool_chunk(Seq* s, const ScheduledChunk& c, int64_t& row, int64_t& logits_row);
  // The grammar view of the vocabulary, built on first use (engine thread).
  const std::shared_ptr<const grammar::TokenVocabulary>& grammar_vocab();
  // Ends a request: finish() with on_finish, fail() with on_error (counted in errors);
  // both retire() it first: KV released (its checked prefix indexed), out of the
  // scheduler's lists, id no longer live, stats published.
  void finish(Seq* s, FinishReason reason, std::string stop_matched = {});
  void fail(Seq* s, const std::string& message);
  std::unique_ptr<Seq> retire(Seq* s);
  void publish_stats();
  void check_invariants() const;
  struct Invalid {
    std::string field, message;  // see SubmitResult
  };
  std::optional<Invalid> validate(const Request& r) const;
  std::optional<std::string> validate_images(const Request& r) const;  // Request::images' rules
  void set_mrope_positions(const SchedulerOutput& plan);  // batch_.mrope (ImageSpan::grid_x)
  // submit() (grouped false: one request) and submit_group().
  SubmitResult accept(std::vector<Request> requests, std::shared_ptr<RequestSink> sink, bool grouped);

  Model& model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  int32_t n_vocab_ = 0;
  std::vector<int32_t> eog_ids_;  // sorted: tokens that end generation (tokenizer + extra_eog_ids)
  int32_t n_text_vocab_ = 0;      // ids the tokenizer knows (<= n_vocab_; all without a tokenizer)

  // ---- engine thread only ----
  ThreadPool threads_;
  KvLayerGroups kv_groups_;  // sliding-window layers paged apart (kv_layer_groups.h)
  PagedKvPool pool_;
  PagedKvStore store_;
  std::unique_ptr<DiskTier> disk_;  // the prefix cache's second tier (null: none); outlives cache_
  PrefixCache cache_;
  std::unique_ptr<StateSnapshots> snapshots_;  // hybrid models with the cache on; else null
  std::vector<std::unique_ptr<Seq>> owned_;  // every unfinished request
  Batch batch_;
  Scheduler scheduler_;        // the waiting and running lists; decides each step
  std::vector<float> logits_;  // [n_out, n_vocab]
  std::vector<float> hidden_;  // [n_hidden, dim] rows embedding requests pool
  std::vector<float> cls_scratch_;  // [n_cls_out] a reranker head's outputs
  EngineStats counters_;       // counters the snapshot copies
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab_;  // see grammar_vocab()
  bool stalled_ = false;       // the last step ran no forward while disk restores were in flight
  std::unique_ptr<spec::SuffixIndex> suffix_;  // the suffix proposer's index (null: off)
  spec::StepCostModel step_cost_;              // the forward's time by batch tokens
  spec::StepCostModel draft_cost_;             // the draft model's, likewise
  std::vector<spec::DraftCandidate> draft_cands_;
  spec::Proposal suffix_proposal_, ngram_proposal_;  // per-step scratch (propose_drafts)
  std::vector<int32_t> verify_draft_;                // the proposals a verification reads
  // SpecConfig::fixed_cost_ratio > 0 (tests): the line the planner uses instead of step_cost_.
  std::optional<spec::StepCostModel> fixed_cost_;
  std::vector<Seq*> draft_seqs_;
  std::vector<Seq*> model_seqs_;        // this step's sequences the draft model proposes for
  std::vector<int64_t> model_lens_;
  std::unique_ptr<PagedKvPool> draft_pool_;  // the draft model's K/V (null: no draft model)
  std::unique_ptr<PagedKvStore> draft_store_;
  Batch draft_batch_;
  std::vector<float> draft_logits_;

  // ---- guarded by mu_ ----
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the engine thread
  std::vector<std::unique_ptr<Seq>> inbox_;
  std::vector<uint64_t> cancels_;
  std::unordered_set<uint64_t> live_ids_;  // accepted, not finished
  // Accepted client requests not finished (a group counts once): the Busy limit.
  size_t live_units_ = 0;
  std::unordered_map<uint64_t, size_t> group_left_;  // group id -> its unfinished requests
  uint64_t next_request_id_ = 1;
  int64_t refused_busy_ = 0;
  bool stopping_ = false;
  std::vector<std::function<void(const PrefixCacheReset&)>> reset_callbacks_;  // asked for, not yet run
  bool reset_ram_ = false, reset_disk_ = false;  // the tiers those resets asked for
  bool thread_started_ = false;  // started_, readable by other threads
  bool io_ready_ = false;        // the disk I/O thread finished a restore since the loop looked
  EngineStats snapshot_;

  std::thread thread_;
  bool started_ = false;
  // The disk tier's I/O thread (null: no disk tier). Last: destroyed (joined) first,
  // before the pool its reads write into, the tier and mu_ its callback takes.
  std::unique_ptr<DiskIo> disk_io_;
};

}  // namespace pagoda
