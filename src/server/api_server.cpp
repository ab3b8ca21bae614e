#include "server/api_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <ctime>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/json_parse.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/process_memory.h"
#include "server/anthropic_protocol.h"
#include "server/completion_sink.h"
#include "server/openai_protocol.h"
#include "server/responses_sink.h"

namespace pagoda::server {

namespace {

using namespace completion_detail;

json pool_stats_json(const PoolStats& p) {
  return json{{"block_size", p.block_size},
              {"blocks_budget", p.blocks_budget},
              {"blocks_committed", p.blocks_committed},
              {"blocks_live", p.blocks_live},
              {"blocks_cached", p.blocks_cached},
              {"blocks_evictable", p.blocks_evictable},
              {"blocks_free", p.blocks_free},
              {"blocks_available", p.blocks_available},
              {"bytes_per_block", p.bytes_per_block},
              {"bytes_budget", p.bytes_budget},
              {"bytes_reserved", p.bytes_reserved},
              {"bytes_in_use", p.bytes_in_use},
              {"tokens_capacity", p.tokens_capacity},
              {"tokens_in_use", p.tokens_in_use},
              // Per layer group (sliding-window models page local layers apart; one
              // entry otherwise): the totals above are the sums.
              {"blocks_live_by_group", p.blocks_live_by_group},
              {"blocks_cached_by_group", p.blocks_cached_by_group},
              {"blocks_evictable_by_group", p.blocks_evictable_by_group}};
}

// The second tier (null when there is none): bytes are real bytes on disk.
json disk_tier_json(const DiskTierStats& d) {
  if (!d.enabled) return nullptr;
  return json{{"blocks", d.blocks},
              {"bytes", d.bytes},
              {"capacity_bytes", d.capacity_bytes},
              {"hits", d.hits},
              {"hit_tokens", d.hit_tokens},
              {"writes", d.writes},
              {"reads", d.reads},
              {"evictions", d.evictions},
              {"corrupt", d.corrupt},
              {"write_errors", d.write_errors},
              {"read_bytes", d.read_bytes},
              {"read_bytes_per_s", d.read_bytes_per_s()},
              // The I/O thread (disk_io.h): spills copied and waiting to be written (their
              // bytes are held in RAM, bounded by write_queue_capacity_bytes), spills dropped
              // because it was full, the times a shutdown flush waited for room, restores
              // whose reads are in flight, and whether one read or write is stuck past the
              // deadline (restores are misses meanwhile; restore_timeouts counts those cut).
              {"queued_writes", d.queued_writes},
              {"queued_write_bytes", d.queued_write_bytes},
              {"write_queue_capacity_bytes", d.write_queue_capacity_bytes},
              {"write_queue_drops", d.write_queue_drops},
              {"write_queue_waits", d.write_queue_waits},
              {"restores_in_flight", d.restores_in_flight},
              {"stalled", d.stalled},
              {"stalled_seconds", d.stalled_seconds},
              {"restore_timeouts", d.restore_timeouts}};
}

// Hybrid models' recurrent-state snapshots (null for other models): bytes are exact,
// snapshots × state_bytes, within capacity_bytes.
json state_snapshots_json(const SnapshotStats& s) {
  if (s.state_bytes == 0) return nullptr;
  return json{{"snapshots", s.snapshots},           {"bytes", s.bytes},
              {"capacity_bytes", s.capacity_bytes}, {"state_bytes", s.state_bytes},
              {"saves", s.saves},                   {"restores", s.restores},
              {"restored_tokens", s.restored_tokens}, {"evictions", s.evictions},
              {"disk_writes", s.disk_writes},       {"disk_restores", s.disk_restores}};
}

// The token ids of recent chat answers (answer_tokens.h).
json answer_tokens_json(const AnswerTokensStats& a) {
  return json{{"entries", a.entries},
              {"bytes", a.bytes},
              {"capacity_bytes", a.capacity_bytes},
              {"remembered", a.remembered},
              {"spliced", a.spliced}};
}

// Speculative decoding (engine_spec.cpp): what was proposed and accepted, the planner's
// measured step cost, and the suffix index, whose bytes are exact (spec/suffix_index.h).
json speculation_json(const EngineStats::Speculation& sp) {
  const double rate = sp.draft_tokens > 0 ? static_cast<double>(sp.accepted_tokens) / static_cast<double>(sp.draft_tokens) : 0.0;
  const double mean = sp.verifications > 0 ? static_cast<double>(sp.accepted_tokens) / static_cast<double>(sp.verifications) : 0.0;
  return json{{"types", sp.types},
              {"draft_tokens", sp.draft_tokens},
              {"accepted_tokens", sp.accepted_tokens},
              {"verifications", sp.verifications},
              {"acceptance_rate", rate},
              {"mean_accepted_length", mean},
              {"step_fixed_ms", sp.step_fixed_ms},
              {"step_per_token_ms", sp.step_per_token_ms},
              {"suffix_index",
               {{"bytes", sp.suffix.bytes},
                {"capacity_bytes", sp.suffix.capacity_bytes},
                {"sequences", sp.suffix.sequences},
                {"tokens", sp.suffix.tokens},
                {"added", sp.suffix.added},
                {"evicted", sp.suffix.evicted},
                {"proposals", sp.suffix.proposals}}}};
}

json cache_stats_json(const CacheStats& c) {
  auto unlimited_bytes = [](uint64_t v) -> json {
    return v == PrefixCacheConfig::kUnlimitedBytes ? json(nullptr) : json(v);
  };
  auto unlimited_entries = [](int64_t v) -> json {
    return v == PrefixCacheConfig::kUnlimitedEntries ? json(nullptr) : json(v);
  };
  return json{{"enabled", c.enabled},
              {"entries", c.entries},
              {"cached_blocks", c.cached_blocks},
              {"cached_bytes", c.cached_bytes},
              {"cached_tokens", (c.cached_blocks - c.companion_blocks) * c.pool.block_size},
              {"companion_blocks", c.companion_blocks},
              {"window_limited_hits", c.window_limited_hits},
              {"evictable_blocks", c.evictable_blocks},
              {"evictable_bytes", c.evictable_bytes},
              {"capacity_bytes", unlimited_bytes(c.capacity_bytes)},
              {"max_entries", unlimited_entries(c.max_entries)},
              {"ttl_ms", c.ttl_ms},
              {"min_prefix_tokens", c.min_prefix_tokens},
              {"lookups", c.lookups},
              {"hits", c.hits},
              {"queried_tokens", c.queried_tokens},
              {"hit_tokens", c.hit_tokens},
              {"hit_rate", c.hit_rate()},
              {"inserts", c.inserts},
              {"inserted_blocks", c.inserted_blocks},
              {"shared_on_insert", c.shared_on_insert},
              {"superseded_blocks", c.superseded_blocks},
              {"evictions_lru", c.evictions_lru},
              {"evictions_capacity", c.evictions_capacity},
              {"evictions_ttl", c.evictions_ttl},
              {"evictions_max_entries", c.evictions_max_entries},
              {"evictions_pool_pressure", c.evictions_pool_pressure},
              {"evicted_blocks", c.evicted_blocks},
              {"resets", c.resets},
              {"disk", disk_tier_json(c.disk)},
              {"state_snapshots", state_snapshots_json(c.state_snapshots)}};
}

// The transport's own errors (401 for a bad key, 405) on the Anthropic routes.
http::HttpResponse anthropic_route_error(int status, std::string_view message) {
  return api_error_response(WireProtocol::Anthropic, status, message);
}

}  // namespace

ApiServer::ApiServer(ApiServerOptions options)
    : options_(std::move(options)),
      grammars_(64, options_.grammar_cache_bytes),
      answers_(options_.answer_tokens_bytes),
      access_log_(logger(), options_.log_requests),
      responses_store_(options_.responses_store_entries, options_.responses_store_ttl_ms,
                       options_.responses_store_bytes) {}
ApiServer::~ApiServer() = default;

std::vector<http::Route> ApiServer::routes() {
  auto bind = [this](void (ApiServer::*fn)(const http::HttpRequest&, std::shared_ptr<http::HttpExchange>)) {
    return [this, fn](const http::HttpRequest& r, std::shared_ptr<http::HttpExchange> ex) {
      (this->*fn)(r, std::move(ex));
    };
  };
  return {
      {"POST", "/v1/chat/completions", true, bind(&ApiServer::handle_chat)},
      {"POST", "/v1/completions", true, bind(&ApiServer::handle_completion)},
      {"POST", "/v1/messages", true, bind(&ApiServer::handle_messages), anthropic_route_error},
      {"POST", "/v1/messages/count_tokens", true, bind(&ApiServer::handle_count_tokens), anthropic_route_error},
      {"GET", "/v1/models", true, bind(&ApiServer::handle_models)},
      {"GET", "/health", false, bind(&ApiServer::handle_health)},
      {"POST", "/tokenize", true, bind(&ApiServer::handle_tokenize)},
      {"POST", "/detokenize", true, bind(&ApiServer::handle_detokenize)},
      {"POST", "/apply-template", true, bind(&ApiServer::handle_apply_template)},
      {"GET", "/v1/cache/stats", true, bind(&ApiServer::handle_cache_stats)},
      {"POST", "/v1/cache/reset", true, bind(&ApiServer::handle_cache_reset)},
      {"GET", "/metrics", true, bind(&ApiServer::handle_metrics)},
      {"POST", "/v1/responses", true, bind(&ApiServer::handle_responses)},
      {"GET", "/v1/responses/*", true, bind(&ApiServer::handle_response_get)},
      {"DELETE", "/v1/responses/*", true, bind(&ApiServer::handle_response_delete)},
      {"POST", "/v1/embeddings", true, bind(&ApiServer::handle_embeddings)},
      {"POST", "/v1/rerank", true, bind(&ApiServer::handle_rerank)},
      {"POST", "/rerank", true, bind(&ApiServer::handle_rerank)},
  };
}

void ApiServer::on_http_complete(const http::HttpRequest& req, const http::HttpCompletion& done) {
  // Both from the one status the transport reports, so the log and /metrics agree.
  metrics_.record_http(done.status);
  access_log_.http_done(req, done);
}

void ApiServer::attach(Engine* engine, const Tokenizer* tokenizer, const chat::ChatTemplate* chat_template,
                       SamplingDefaults defaults, const std::string& architecture) {
  sampling_defaults_ = defaults;
  tokenizer_ = tokenizer;
  chat_template_ = chat_template;
  if (chat_template) chat_format_ = chat::detect_chat_format(chat_template->source(), architecture);
  engine_.store(engine, std::memory_order_release);
}

void ApiServer::begin_draining() { draining_.store(true); }

void ApiServer::begin_shutdown() {
  draining_.store(true);
  shutting_down_.store(true);
}

namespace {
// llama-server's answer while the model loads, on every route (/health too), so clients
// and load balancers that poll llama-server read this one the same way.
http::HttpResponse loading_response() {
  http::HttpResponse r;
  r.status = 503;
  r.body = error_json(503, "Loading model", "unavailable_error");
  return r;
}
// The Anthropic routes answer in Anthropic's shape (503 overloaded_error).
http::HttpResponse anthropic_loading_response() {
  return api_error_response(WireProtocol::Anthropic, 503, "Loading model");
}
}  // namespace

void ApiServer::handle_health(const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  // Draining: the load balancer's health check fails and takes this replica out while
  // the requests it still sends (until its next check) are served.
  if (draining_.load()) {
    http::HttpResponse r;
    r.status = 503;
    r.body = error_json(503, "Draining: the server is shutting down", "unavailable_error");
    return void(ex->respond(std::move(r)));
  }
  // A stuck disk tier (one read or write past its deadline: a hung mount) is reported, but
  // the server still answers everything (restores are misses meanwhile), so the check
  // stays 200 with status "degraded": a balancer that takes it out loses a working
  // replica; monitoring reads the status. Rejected: 503, which would.
  json body{{"status", "ok"}};
  if (Engine* e = engine_.load(std::memory_order_acquire)) {
    const DiskTierStats d = e->stats().cache.disk;
    if (d.enabled && d.stalled) {
      char what[160];
      std::snprintf(what, sizeof what,
                    "prompt-cache disk tier stalled: one read or write has not returned for %.1f s (a hung mount?); "
                    "restores are misses meanwhile",
                    d.stalled_seconds);
      body = json{{"status", "degraded"}, {"problems", json::array({what})}};
    }
  }
  ex->respond(json_response(200, body));
}

void ApiServer::handle_models(const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  static const int64_t created = unix_now();
  json model{{"id", options_.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "pagoda"},
             {"meta", {{"n_ctx", e->config().ctx_size}, {"n_vocab", tokenizer_ ? tokenizer_->n_vocab() : 0}}}};
  ex->respond(json_response(200, json{{"object", "list"}, {"data", json::array({model})}}));
}

namespace {

// OpenAI sends tool_calls[].function.arguments as a JSON string; chat templates
// (Llama 3.1, Hermes, Qwen...) expect the object (they call |tojson or .items() on it).
// As vLLM and llama-server do, an argument string that parses as a JSON object is
// handed to the template as that object; anything else stays a string.
json with_parsed_tool_arguments(const json& messages) {
  json out = messages;
  for (json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (json& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      json& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      json parsed = parse_json_or_discarded(fn["arguments"].get<std::string>());
      if (parsed.is_object()) fn["arguments"] = std::move(parsed);
    }
  }
  return out;
}

// Templates disagree on the shape of an assistant tool-call turn: most call |tojson or
// .items() on the arguments (they want the object) and test content for none, but some
// concatenate the arguments as a string (DeepSeek-R1-Distill-Llama) or content with text
// (Devstral, Ministral 3). So a template that raises on the object shape is rendered
// again with the arguments as sent and null content as "", as the request gave them.
json with_string_tool_turns(const json& messages) {
  json out = messages;
  for (json& m : out)
    if (m.is_object() && m.contains("tool_calls") && m["content"].is_null()) m["content"] = "";
  return out;
}

}  // namespace

std::string ApiServer::render_chat(const ordered_json& messages, const ordered_json& tools,
                                   bool add_generation_prompt, const ordered_json& extra) const {
  chat::ChatTemplate::Inputs in;
  in.messages = chat::messages_for_template(chat_format_, chat_template_->source(), with_parsed_tool_arguments(messages));
  in.tools = tools;
  in.add_generation_prompt = add_generation_prompt;
  if (tokenizer_->bos() >= 0) in.bos_token = tokenizer_->token_text(tokenizer_->bos());
  if (tokenizer_->eos() >= 0) in.eos_token = tokenizer_->token_text(tokenizer_->eos());
  in.extra = extra;
  try {
    return chat_template_->apply(in);
  } catch (const chat::ChatTemplateLimitError& err) {  // a second render would spend its budget again
    throw ApiError(400, std::string("chat template: ") + err.what(), "messages");
  } catch (const Error& err) {
    const bool has_calls = std::any_of(messages.begin(), messages.end(),
                                       [](const json& m) { return m.is_object() && m.contains("tool_calls"); });
    if (has_calls) {
      in.messages = chat::messages_for_template(chat_format_, chat_template_->source(), with_string_tool_turns(messages));
      try {
        return chat_template_->apply(in);
      } catch (const Error&) {
      }
    }
    throw ApiError(400, std::string("chat template: ") + err.what(), "messages");
  }
}

std::optional<chat::ParseOptions> ApiServer::output_parsing(const CompletionRequest& cr, const std::string& prompt,
                                                           const char* call_id_prefix) {
  const bool calls = cr.tool_choice != ToolChoice::None;
  const bool reasoning = options_.extract_reasoning && chat_format_.reasoning != chat::ReasoningFormat::None;
  if (!calls && !reasoning) return std::nullopt;
  chat::ParseOptions po;
  po.parse_tool_calls = calls;
  // Only the offered names are calls, on every route that parses (chat, responses, messages);
  // the list also types Qwen3-Coder / DSML parameter values by their schemas.
  if (calls) po.tools = cr.tools;
  po.extract_reasoning = reasoning;
  po.thinking_open_at_start = reasoning && chat::prompt_opens_thinking(chat_format_, prompt);
  po.thinking_off = chat::prompt_closes_thinking(chat_format_, prompt);
  po.call_id_prefix = make_id(call_id_prefix, next_id_.fetch_add(1)) + "_";
  return po;
}

void ApiServer::handle_chat(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  try {
    CompletionRequest cr = parse_chat_request(req.body, n_vocab(), sampling_defaults_);
    PreparedChat pc = prepare_chat(cr);
    start_generation(req, ex, cr, std::move(pc.prompt), pc.parse, WireProtocol::OpenAI, std::move(pc.images));
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

ApiServer::PreparedChat ApiServer::prepare_chat(const CompletionRequest& cr) {
  if (!tokenizer_ || !chat_template_)
    throw ApiError(400, "this model has no tokenizer: use /v1/completions with token ids");
  // reasoning_effort reaches the template as a variable (gpt-oss reads it), unless
  // chat_template_kwargs sets it itself.
  ordered_json kwargs = cr.chat_template_kwargs;
  if (!cr.reasoning_effort.empty() && !(kwargs.is_object() && kwargs.contains("reasoning_effort")))
    kwargs["reasoning_effort"] = cr.reasoning_effort;
  const std::string prompt = render_chat(cr.messages, cr.tools, true, kwargs);
  TokenizedChat t = tokenize_messages(prompt, cr);
  return PreparedChat{std::move(t.ids), output_parsing(cr, prompt, "call_"), std::move(t.images)};
}

ApiServer::TokenizedChat ApiServer::tokenize_messages(const std::string& rendered, const CompletionRequest& cr) {
  if (cr.image_urls.empty()) return {tokenize_chat(*tokenizer_, rendered, cr.messages, &answers_), {}};
  if (!images_)
    throw ApiError(400, "this model takes no images: serve it with --mmproj FILE (its vision projector)", "messages");
  const size_t max_images = static_cast<size_t>(images_->options().max_images);
  if (cr.image_urls.size() > max_images)
    throw ApiError(400, "a request may hold at most " + std::to_string(max_images) + " images (--max-images); this one holds " +
                            std::to_string(cr.image_urls.size()), "messages");
  std::vector<ImageInputs::Prepared> prepared;
  for (const std::string& url : cr.image_urls) prepared.push_back(images_->prepare(url));
  PromptWithImages p = assemble_prompt(rendered, prepared, images_->encoder(), *tokenizer_,
                                       [&](const std::string& piece, size_t index) {
                                         return tokenize_chat(*tokenizer_, piece, cr.messages, &answers_, index == 0);
                                       });
  return {std::move(p.ids), std::move(p.images)};
}

std::string ApiServer::render_anthropic(const AnthropicRequest& ar) const {
  if (!tokenizer_ || !chat_template_) throw ApiError(400, "this model has no tokenizer or chat template");
  return render_chat(ar.chat.messages, ar.chat.tools, true, ar.template_kwargs) + ar.prefill;
}

void ApiServer::handle_messages(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(anthropic_loading_response()));
  try {
    AnthropicRequest ar = parse_anthropic_request(req.body, n_vocab(), sampling_defaults_);
    const std::string prompt = render_anthropic(ar);
    // Reasoning goes out as thinking blocks, tool calls as tool_use blocks.
    TokenizedChat t = tokenize_messages(prompt, ar.chat);
    start_generation(req, ex, ar.chat, std::move(t.ids), output_parsing(ar.chat, prompt, "toolu_"),
                     WireProtocol::Anthropic, std::move(t.images));
  } catch (const ApiError& err) {
    ex->respond(api_error_response(WireProtocol::Anthropic, err.status, err.what()));
  }
}

void ApiServer::handle_count_tokens(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(anthropic_loading_response()));
  try {
    AnthropicRequest ar = parse_anthropic_request(req.body, n_vocab(), sampling_defaults_, /*count_tokens=*/true);
    check_model_name(ar.chat.model, "model");
    const std::vector<int32_t> ids = tokenize_prompt(*tokenizer_, render_anthropic(ar));
    ex->respond(json_response(200, json{{"input_tokens", ids.size()}}));
  } catch (const ApiError& err) {
    ex->respond(api_error_response(WireProtocol::Anthropic, err.status, err.what()));
  }
}

void ApiServer::handle_completion(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  try {
    CompletionRequest cr = parse_completion_request(req.body, n_vocab(), sampling_defaults_);
    std::vector<int32_t> prompt;
    if (cr.prompt_tokens) {
      prompt = *cr.prompt_tokens;
    } else {
      if (!tokenizer_) throw ApiError(400, "this model has no tokenizer: send the prompt as token ids", "prompt");
      prompt = tokenize_prompt(*tokenizer_, *cr.prompt_text);
    }
    start_generation(req, ex, cr, std::move(prompt));
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

int32_t ApiServer::n_vocab() const {
  Engine* e = engine_.load(std::memory_order_acquire);
  return e ? e->n_vocab() : -1;
}

std::shared_ptr<const grammar::Grammar> ApiServer::output_grammar(const CompletionRequest& cr,
                                                                   const std::optional<chat::ParseOptions>& parse) {
  const std::string gbnf = output_grammar_gbnf(cr, chat_format_);
  if (gbnf.empty()) return nullptr;
  if (!tokenizer_) throw ApiError(400, "structured outputs need a model with a tokenizer", cr.constraint.param);
  const bool tools = cr.tool_choice == ToolChoice::Required || cr.tool_choice == ToolChoice::Named;
  const std::string param = tools ? "tools" : cr.constraint.param;
  // A raw GBNF grammar covers the whole output, thinking included (the client wrote
  // every byte of it); schemas, regexes, choices and tool calls constrain the answer
  // and leave a thinking model its reasoning first, as vLLM's reasoning parsers do.
  const bool raw_gbnf = !tools && cr.constraint.kind == OutputConstraint::Kind::Grammar;
  if (parse && parse->extract_reasoning && !raw_gbnf && !parse->thinking_off) {
    const chat::ReasoningGrammar rg =
        chat::with_reasoning_prefix(chat_format_, gbnf, parse->thinking_open_at_start, tools);
    return grammars_.get(rg.gbnf, param, rg.root);
  }
  return grammars_.get(gbnf, param);
}

void ApiServer::check_model_name(const std::string& requested, const char* param) const {
  if (requested.empty() || requested == options_.model_id) return;
  if (options_.strict_model_names)
    throw ApiError(404, "the model '" + requested + "' does not exist; this server serves '" + options_.model_id + "'",
                   param);
  constexpr size_t kMaxNamesRemembered = 64;
  {
    std::lock_guard<std::mutex> lk(other_names_mu_);
    if (other_names_seen_.size() >= kMaxNamesRemembered ||
        std::find(other_names_seen_.begin(), other_names_seen_.end(), requested) != other_names_seen_.end())
      return;
    other_names_seen_.push_back(requested);
  }
  if (options_.log_requests)
    logger().write(LogLevel::Info, "a request names the model " + dump_json(json(requested)) + ": serving it with '" +
                                       options_.model_id + "' (--strict-model-names refuses other names)");
}

Request ApiServer::engine_request(const CompletionRequest& cr, std::vector<int32_t> prompt,
                                  const std::optional<chat::ParseOptions>& parse) {
  check_model_name(cr.model, "model");
  if (shutting_down_.load()) throw ApiError(503, "the server is shutting down");
  // The prompt (empty, longer than the context, too big for the KV budget) and the
  // sampling limits are the engine's to check: submit() answers Invalid -> 400 below.

  Request r;
  r.prompt = std::move(prompt);
  r.sampling = cr.sampling;
  r.max_tokens = cr.max_tokens >= 0 ? cr.max_tokens : options_.default_max_tokens;
  r.min_tokens = cr.min_tokens;
  r.ignore_eos = cr.ignore_eos;
  r.speculate = cr.speculative;
  r.logprobs = cr.logprobs;
  r.top_logprobs = cr.top_logprobs;
  r.stop = cr.stop;
  r.cache_key = cr.cache_key;
  r.use_cache = cr.cache_prompt;
  r.timeout_ms = options_.request_timeout_ms;
  r.grammar = output_grammar(cr, parse);
  // Markers that are special tokens in their vocabularies ([TOOL_CALLS], <|python_tag|>,
  // harmony's channels) must reach the parser.
  r.render_special = parse.has_value() && chat_format_.tools != chat::ToolCallFormat::Generic;
  return r;
}

bool ApiServer::submit(const std::shared_ptr<http::HttpExchange>& ex, uint64_t seq, Request r,
                       std::shared_ptr<RequestSink> sink, const std::string& prompt_param, WireProtocol protocol) {
  Engine* e = engine_.load(std::memory_order_acquire);
  access_log_.expect_generation(seq);  // before: the engine may finish before submit returns
  SubmitResult sr = e->submit(std::move(r), std::move(sink));
  if (!sr.ok()) {
    access_log_.forget_generation(seq);
    int status = 400;
    // A full queue: OpenAI's 429, Anthropic's 529 overloaded_error (both retried by
    // their SDKs); or 503 (--busy-status 503) for a load balancer to retry elsewhere.
    const int busy = options_.busy_status == 503          ? 503
                     : protocol == WireProtocol::Anthropic ? 529
                                                           : 429;
    const bool shutting_down = shutting_down_.load();
    if (sr.status == SubmitResult::Status::Busy) status = shutting_down ? 503 : busy;
    metrics_.record_refused(sr.status == SubmitResult::Status::Busy ? "busy" : "invalid");
    // A chat request's prompt is what its messages rendered to.
    const std::string param = sr.field == "prompt" ? prompt_param : sr.field;
    http::HttpResponse resp = api_error_response(protocol, status, sr.message, param);
    if (sr.status == SubmitResult::Status::Busy && !shutting_down) resp.headers.emplace_back("Retry-After", "1");
    ex->respond(std::move(resp));
    return false;
  }
  const uint64_t rid = sr.request_id;
  ex->on_close([e, rid] { e->cancel(rid); });
  return true;
}

void ApiServer::start_generation(const http::HttpRequest& req, const std::shared_ptr<http::HttpExchange>& ex,
                                 const CompletionRequest& cr, std::vector<int32_t> prompt,
                                 std::optional<chat::ParseOptions> parse, WireProtocol protocol,
                                 std::vector<ImageSpan> images) {
  Request r = engine_request(cr, std::move(prompt), parse);
  r.images = std::move(images);
  CompletionSink::Params p;
  p.kind = cr.kind;
  p.protocol = protocol;
  p.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  p.stream = cr.stream;
  p.include_usage = cr.include_usage;
  p.logprobs = cr.logprobs;
  p.access_log = &access_log_;
  p.seq = req.seq;
  const char* id_prefix = protocol == WireProtocol::Anthropic ? "msg_" : cr.kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-";
  p.id = make_id(id_prefix, next_id_.fetch_add(1));
  p.model = options_.model_id;
  p.created = unix_now();
  p.tokenizer = tokenizer_;
  p.metrics = &metrics_;
  p.parse = parse;
  p.format = chat_format_;
  if (cr.kind == ApiKind::Chat) p.answers = &answers_;
  const bool stream = cr.stream;

  auto sink = std::make_shared<CompletionSink>(std::move(p), ex);
  if (!submit(ex, req.seq, std::move(r), sink, cr.kind == ApiKind::Chat ? "messages" : "prompt", protocol)) return;
  if (stream) sink->start_stream();
}

// ---- the Responses API (responses_api.h) ----------------------------------------------

void ApiServer::handle_responses(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  try {
    ResponsesRequest rr = parse_responses_request(
        req.body, n_vocab(), sampling_defaults_, [this](const std::string& id) -> std::optional<ordered_json> {
          std::optional<ResponsesStore::Entry> entry = responses_store_.get(id);
          if (!entry) return std::nullopt;
          return std::move(entry->messages);
        });
    PreparedChat pc = prepare_chat(rr.chat);
    Request r = engine_request(rr.chat, std::move(pc.prompt), pc.parse);
    r.images = std::move(pc.images);
    ResponsesSink::Params p;
    p.stream = rr.chat.stream;
    p.access_log = &access_log_;
    p.seq = req.seq;
    p.meta.id = make_id("resp_", next_id_.fetch_add(1));
    p.meta.created_at = unix_now();
    p.meta.model = options_.model_id;
    p.meta.echo = std::move(rr.echo);
    p.tokenizer = tokenizer_;
    p.metrics = &metrics_;
    p.parse = pc.parse;
    p.format = chat_format_;
    p.store = rr.store ? &responses_store_ : nullptr;
    p.turn_messages = std::move(rr.turn_messages);
    auto sink = std::make_shared<ResponsesSink>(std::move(p), ex);
    if (!submit(ex, req.seq, std::move(r), sink, "input")) return;
    if (rr.chat.stream) sink->start_stream();
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

namespace {
std::string response_id_of(const http::HttpRequest& req) { return req.path.substr(req.path.rfind('/') + 1); }
http::HttpResponse response_not_found(const std::string& id) {
  return error_response(404, "no stored response with id " + dump_json(json(sanitize_utf8(id))) +
                                 " (unknown, expired, deleted, or created with store: false)");
}
}  // namespace

void ApiServer::handle_response_get(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  const std::string id = response_id_of(req);
  std::optional<ResponsesStore::Entry> entry = responses_store_.get(id);
  if (!entry) return void(ex->respond(response_not_found(id)));
  ex->respond(json_response(200, entry->response));
}

void ApiServer::handle_response_delete(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  const std::string id = response_id_of(req);
  if (!responses_store_.erase(id)) return void(ex->respond(response_not_found(id)));
  ex->respond(json_response(200, response_deleted_json(id)));
}

void ApiServer::handle_tokenize(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  try {
    if (!tokenizer_) throw ApiError(400, "this model has no tokenizer");
    TokenizeRequest tr = parse_tokenize_request(req.body);
    std::vector<int32_t> ids = tokenizer_->encode(tr.content, tr.add_special, /*parse_special=*/true);
    std::vector<std::string> pieces;
    if (tr.with_pieces)
      for (int32_t id : ids) pieces.push_back(tokenizer_->token_to_piece(id, true));
    http::HttpResponse r;
    r.body = tokenize_response_json(ids, tr.with_pieces ? &pieces : nullptr);
    ex->respond(std::move(r));
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

void ApiServer::handle_detokenize(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  try {
    if (!tokenizer_) throw ApiError(400, "this model has no tokenizer");
    std::vector<int32_t> ids = parse_detokenize_request(req.body, tokenizer_->n_vocab());
    ex->respond(json_response(200, json{{"content", tokenizer_->decode(ids)}}));
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

void ApiServer::handle_apply_template(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading_response()));
  try {
    if (!tokenizer_ || !chat_template_) throw ApiError(400, "this model has no tokenizer or chat template");
    ApplyTemplateRequest ar = parse_apply_template_request(req.body);
    const std::string prompt = render_chat(ar.messages, ar.tools, ar.add_generation_prompt, ar.template_kwargs);
    ex->respond(json_response(200, json{{"prompt", prompt}}));
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

void ApiServer::handle_cache_stats(const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  const EngineStats s = e->stats();
  json body{{"replica_id", options_.replica_id},
            {"pool", pool_stats_json(s.pool)},
            {"prefix_cache", cache_stats_json(s.cache)},
            {"answer_tokens", answer_tokens_json(answers_.stats())},
            {"engine",
             {{"running", s.running},
              {"waiting", s.waiting},
              {"restoring", s.restoring},
              {"in_flight", s.in_flight},
              {"blocks_held", s.blocks_held},
              {"steps", s.steps},
              {"preemptions", s.preemptions},
              {"tokens_generated", s.tokens_generated},
              {"tokens_prefilled", s.tokens_prefilled}}},
            {"speculation", speculation_json(s.spec)}};
  if (images_) {  // --mmproj: the encoder's output cache
    const ImageInputStats is = images_->stats();
    body["images"] = {{"entries", is.entries},   {"bytes", is.bytes},         {"capacity_bytes", is.capacity_bytes},
                      {"hits", is.hits},         {"encoded", is.encoded},     {"encode_ms", is.encode_ms},
                      {"tokens_per_image", images_->encoder().tokens_per_image()}};
  }
  const ProcessMemory mem = read_process_memory();
  body["memory"] = {{"resident_weight_bytes", s.resident_weight_bytes},
                    {"file_tensor_bytes", s.file_tensor_bytes},
                    // Hybrid models: the running sequences' recurrent states, exact (their
                    // share of the KV budget; the snapshots are under prefix_cache).
                    {"recurrent_state_bytes", s.recurrent_state_bytes},
                    {"process_rss_bytes", mem.rss_bytes},
                    {"process_rss_anon_bytes", mem.anon_bytes},
                    {"process_rss_file_bytes", mem.file_bytes}};
  ex->respond(json_response(200, body));
}

void ApiServer::handle_cache_reset(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  // Body: {"tier": "ram" | "disk" | "all"} (default all); an empty body resets all.
  CacheTier tier = CacheTier::All;
  if (req.body.find_first_not_of(" \t\r\n") != std::string::npos) {
    const json body = parse_json_or_discarded(req.body);
    if (body.is_discarded() || !body.is_object())
      return void(ex->respond(error_response(400, "the body must be a JSON object like {\"tier\": \"all\"}")));
    if (body.contains("tier")) {
      const json& t = body["tier"];
      if (t == "ram") tier = CacheTier::Ram;
      else if (t == "disk") tier = CacheTier::Disk;
      else if (t != "all") return void(ex->respond(error_response(400, "tier must be \"ram\", \"disk\" or \"all\"", "tier")));
    }
  }
  // The engine thread resets between steps and answers here (never blocking it:
  // HttpExchange::respond only queues); no I/O thread waits and no thread outlives
  // the Engine.
  e->reset_prefix_cache_async([ex](const Engine::PrefixCacheReset& reset) {
    const EngineStats& before = reset.before;
    const EngineStats& after = reset.after;
    const int64_t freed_blocks = std::max<int64_t>(0, before.pool.blocks_evictable - after.pool.blocks_evictable);
    json body{{"freed_entries", std::max<int64_t>(0, before.cache.entries - after.cache.entries)},
              {"freed_blocks", freed_blocks},
              {"freed_bytes", static_cast<uint64_t>(freed_blocks) * after.pool.bytes_per_block},
              {"uncached_blocks", std::max<int64_t>(0, before.cache.cached_blocks - after.cache.cached_blocks)},
              {"freed_disk_blocks", std::max<int64_t>(0, before.cache.disk.blocks - after.cache.disk.blocks)},
              {"freed_disk_bytes", before.cache.disk.bytes > after.cache.disk.bytes ? before.cache.disk.bytes - after.cache.disk.bytes : 0},
              {"prefix_cache", cache_stats_json(after.cache)}};
    ex->respond(json_response(200, body));
  }, tier);
}

void ApiServer::handle_metrics(const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
  Engine* e = engine_.load(std::memory_order_acquire);
  if (!e) return void(ex->respond(loading_response()));
  http::HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render(e->stats(), grammars_.stats());
  ex->respond(std::move(r));
}

}  // namespace pagoda::server
