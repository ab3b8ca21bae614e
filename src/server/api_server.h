// ApiServer — the OpenAI-compatible (and Anthropic Messages) API of `pagoda serve`: binds the HTTP routes to
// the Engine, the tokenizer and the chat template.
//
// Contract:
// - Threads: route handlers run on HttpServer I/O threads; they parse, render the
//   chat template, tokenize and submit to the Engine, then return. The Engine thread
//   answers through a per-request sink (CompletionSink in api_server.cpp) that only
//   formats JSON and queues bytes on the HttpExchange (never blocks). A client that
//   disconnects fires HttpExchange::on_close, which cancels its request
//   (Engine::cancel); the engine releases its KV blocks within one step.
// - Readiness: until attach() is called (the model is loading) every route, /health
//   included, answers llama-server's 503 {"error":{"code":503,"message":"Loading model",
//   "type":"unavailable_error",...}}; then /health answers 200 {"status":"ok"}.
//   begin_draining() makes /health answer 503 while every other route still serves (a
//   load balancer's health check takes the replica out before it stops answering);
//   begin_shutdown() makes new completion requests answer 503 (and /health too).
// - Borrowed: the Engine, Tokenizer and ChatTemplate passed to attach() must outlive the
//   HTTP server's I/O threads (stop the HttpServer before destroying them).
// - Streaming: the SSE headers go out only once the engine has accepted the request, so
//   a refused streaming request gets a real HTTP status (429, 400), not 200 and an error
//   event; events the engine produces before the headers are queued in the sink.
// - Anthropic routes (/v1/messages, /v1/messages/count_tokens) answer every error in
//   Anthropic's shape (anthropic_error_json), a full queue with 529 instead of 429, and
//   while loading 503 overloaded_error; the statuses are otherwise those below.
// - Status codes: 400 for any client error the protocol layer or the engine's
//   validation reports (a prompt longer than the context names both numbers), 404
//   for an unknown model, 429 when the engine's queue is full (Retry-After: 1; 503 with
//   busy_status 503, for load balancers that retry 503 on another replica but not 429),
//   503 while loading or shutting down, 500 only when the engine fails a forward.
// - Responses API (responses_api.h, responses_sink.h): POST /v1/responses takes the
//   chat path (prepare_chat, engine_request, submit) with its own sink; finished
//   responses with `store` go to a ResponsesStore (bounded by the options below) that
//   GET / DELETE /v1/responses/{id} and previous_response_id read (404 when unknown).
// - Pooling routes (--embeddings; embeddings_api.h): POST /v1/embeddings and
//   POST /v1/rerank turn each input / document into an engine request with
//   Request::pooling, submitted together (Engine::submit_group); the answer goes out when
//   the last has finished. Without --embeddings both answer 404.
// - Logging: one line per request through the process's Logger (common/log.h; its tag
//   is the replica id), written by AccessLog (access_log.h): method, path, status,
//   request id, duration, and for a generation its tokens, tok/s and timings; a 4xx /
//   5xx names its reason. The status is the one /metrics counts (on_http_complete feeds
//   both), so a client that hung up is 499 in each.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "http/http_server.h"
#include "server/access_log.h"
#include "server/answer_tokens.h"
#include "server/anthropic_protocol.h"
#include "server/api_error.h"
#include "server/image_inputs.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/responses_store.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

// Which API a route speaks: the shape of its error bodies and of its answers.
enum class WireProtocol { OpenAI, Anthropic };

struct ApiServerOptions {
  std::string model_id = "model";  // reported by /v1/models; requests naming another get 404
  bool log_requests = true;
  int64_t request_timeout_ms = 0;  // > 0: a request still running this long is cancelled
  // --reasoning-format auto: thinking goes to reasoning_content; none: it stays in content.
  bool extract_reasoning = true;
  // The Responses API's store (responses_store.h): at most this many stored responses,
  // each kept this long (--responses-store-entries / --responses-store-ttl).
  size_t responses_store_entries = 1024;
  int64_t responses_store_ttl_ms = 3600 * 1000;
  uint64_t responses_store_bytes = 256ull << 20;  // --responses-store-bytes
  // Compiled grammars kept for reuse, booked at what they hold (structured_output.h).
  uint64_t grammar_cache_bytes = GrammarCache::kDefaultMaxBytes;  // --grammar-cache-bytes
  // The token ids behind recent chat answers, fed back when a conversation re-sends them
  // (answer_tokens.h); 0: off. --answer-tokens-bytes.
  uint64_t answer_tokens_bytes = 32ull << 20;
  // Which replica this is (--replica-id): /v1/cache/stats reports it (and `pagoda serve`
  // tags every log line with it), so the replicas behind a load balancer can be told apart.
  std::string replica_id = "pagoda";
  // A full queue's status (--busy-status): 429 (Anthropic routes: 529), or 503 on every
  // route, which HAProxy before 3.1 can retry on another replica (its retry-on has no 429).
  int busy_status = 429;
  // --embeddings: serve /v1/embeddings and /v1/rerank (404 otherwise).
  bool embeddings = false;
  // --strict-model-names: a request naming another model is a 404. Off: it is served by
  // the loaded model (llama-server does; many clients send a preset name such as gpt-4o),
  // with one log line the first time each name is seen.
  bool strict_model_names = false;
  // -n / --n-predict: max_tokens of a request that gives none (-1: until the context ends).
  int64_t default_max_tokens = -1;
};

// How the pooling routes pool (set_pooling, before attach()).
struct PoolingSetup {
  Pooling pooling = Pooling::Last;  // --pooling, else the model's {arch}.pooling_type, else last
  int64_t n_embd = 0;               // the model's width: the largest `dimensions`
  std::string rerank_template;      // tokenizer.chat_template.rerank ("" none)
  // A reranker without cls.output.weight: these tokens' logits are the head's outputs
  // (Request::rank_tokens; "yes", "no" for a Qwen3-Reranker directory). Empty with a head.
  std::vector<int32_t> rank_tokens;
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions options);
  ~ApiServer();

  // The routes to give the HttpServer; they refer to this object.
  std::vector<http::Route> routes();
  // Called once per HTTP request (HttpServerOptions::on_complete): metrics and the log.
  void on_http_complete(const http::HttpRequest& req, const http::HttpCompletion& done);

  // The model is loaded: from now on requests are served. tokenizer may be null
  // (synthetic models: token-id prompts only, no chat).
  // `defaults` fill the sampling fields a request leaves out (generation_config.json).
  // `architecture` (general.architecture, "" unknown) helps pick the chat format.
  void attach(Engine* engine, const Tokenizer* tokenizer, const chat::ChatTemplate* chat_template,
              SamplingDefaults defaults = {}, const std::string& architecture = "");
  // Requires: no request is being served yet (before HttpServer::start()).
  void set_replica_id(std::string id) { options_.replica_id = std::move(id); }
  // /health answers 503 from now on; requests are still served (see Readiness above).
  void begin_draining();
  // Images in chat (--mmproj): borrowed, outlives the server; call before attach().
  void set_image_inputs(ImageInputs* images) { images_ = images; }
  ImageInputs* image_inputs() const { return images_; }
  // The pooling routes' setup; call before attach() (attach publishes it).
  void set_pooling(PoolingSetup setup);
  void begin_shutdown();  // implies begin_draining()
  bool ready() const { return engine_.load() != nullptr; }

  ServerMetrics& metrics() { return metrics_; }
  const chat::ChatFormat& chat_format() const { return chat_format_; }

 private:
  void handle_chat(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_completion(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  // Anthropic's Messages API (anthropic_protocol.h): POST /v1/messages and
  // /v1/messages/count_tokens, errors in Anthropic's shape.
  void handle_messages(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_count_tokens(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  // The prompt text of a parsed Anthropic request, rendered as /v1/messages renders it.
  std::string render_anthropic(const AnthropicRequest& ar) const;
  void handle_models(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_health(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_tokenize(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_detokenize(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_apply_template(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_cache_stats(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_cache_reset(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_metrics(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  // The Responses API: POST /v1/responses, GET / DELETE /v1/responses/{id}.
  void handle_responses(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_response_get(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_response_delete(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  // The embedding routes (api_server_embeddings.cpp, embeddings_api.h): POST /v1/embeddings
  // and POST /v1/rerank (also /rerank, as llama-server).
  void handle_embeddings(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  void handle_rerank(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex);
  // --embeddings given (404 otherwise); with the model name, not shutting down. Throw
  // ApiError (404, 503).
  void check_pooling_enabled(const char* route) const;
  void check_pooling_request(const std::string& model, const char* route) const;
  // submit_group and the disconnect callback; a refusal is answered here (false).
  bool submit_pooling(const std::shared_ptr<http::HttpExchange>& ex, std::vector<Request> requests,
                      std::shared_ptr<RequestSink> sink, const std::string& input_param);
  // A chat request's prompt tokens (the template applied) and how its output is parsed
  // (nullopt: plain text). Throws ApiError.
  struct PreparedChat {
    std::vector<int32_t> prompt;
    std::optional<chat::ParseOptions> parse;
    std::vector<ImageSpan> images;
  };
  // A rendered chat's ids and images: the text split at kImageMarker, each piece tokenized
  // (remembered answers spliced in), each image as the projector's begin text, its
  // placeholder ids and its end text, tokenized apart as llama.cpp's libmtmd does.
  // Throws ApiError (no projector, too many images, a marker in the text, a bad image).
  struct TokenizedChat {
    std::vector<int32_t> ids;
    std::vector<ImageSpan> images;
  };
  TokenizedChat tokenize_messages(const std::string& rendered, const CompletionRequest& cr);
  PreparedChat prepare_chat(const CompletionRequest& cr);
  // Validates what the protocol layer cannot (model name, shutdown) and builds the
  // engine's Request. Throws ApiError.
  Request engine_request(const CompletionRequest& cr, std::vector<int32_t> prompt,
                         const std::optional<chat::ParseOptions>& parse);
  // Submits and wires the disconnect callback; a refusal (429, 400, 503) is answered
  // here, naming `prompt_param` for a bad prompt, and returns false. `seq`: the
  // request's HttpRequest::seq (its log line waits for the sink's report).
  bool submit(const std::shared_ptr<http::HttpExchange>& ex, uint64_t seq, Request r, std::shared_ptr<RequestSink> sink,
              const std::string& prompt_param, WireProtocol protocol = WireProtocol::OpenAI);
  // Validates what the protocol layer cannot (model name, context length), submits
  // and wires the sink and the disconnect callback. Throws ApiError.
  // `parse`: chat output to parse into tool calls / reasoning (nullopt: plain text).
  void start_generation(const http::HttpRequest& req, const std::shared_ptr<http::HttpExchange>& ex,
                        const CompletionRequest& cr, std::vector<int32_t> prompt,
                        std::optional<chat::ParseOptions> parse = std::nullopt,
                        WireProtocol protocol = WireProtocol::OpenAI, std::vector<ImageSpan> images = {});
  // The compiled grammar the request's output must match, or null. With reasoning
  // extracted (parse), a thinking model may think before it. Throws ApiError.
  std::shared_ptr<const grammar::Grammar> output_grammar(const CompletionRequest& cr,
                                                         const std::optional<chat::ParseOptions>& parse);
  // How a chat's output is parsed: tool calls when tools may be called, reasoning when
  // the format has it and --reasoning-format is auto; nullopt: the text goes out
  // untouched. Call ids are call_id_prefix + a unique stem + "_" + index.
  std::optional<chat::ParseOptions> output_parsing(const CompletionRequest& cr, const std::string& prompt,
                                                   const char* call_id_prefix);
  int32_t n_vocab() const;  // -1 before attach()
  // A request's `model` against the served one (ApiServerOptions::strict_model_names):
  // throws ApiError 404 naming `param` when strict, else logs a name the first time.
  void check_model_name(const std::string& requested, const char* param) const;
  // The chat template applied to a conversation, with the model's BOS / EOS text and
  // string tool-call arguments parsed. Requires: a tokenizer and a template. Throws
  // ApiError 400 when the template raises.
  std::string render_chat(const ordered_json& messages, const ordered_json& tools, bool add_generation_prompt,
                          const ordered_json& extra) const;

  ApiServerOptions options_;
  std::atomic<Engine*> engine_{nullptr};
  const Tokenizer* tokenizer_ = nullptr;        // set before engine_ (release/acquire)
  const chat::ChatTemplate* chat_template_ = nullptr;
  chat::ChatFormat chat_format_;                // detected from the template at attach()
  GrammarCache grammars_;
  AnswerTokens answers_;
  ImageInputs* images_ = nullptr;  // set_image_inputs(); null: images are refused
  SamplingDefaults sampling_defaults_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{1};
  ServerMetrics metrics_;
  AccessLog access_log_;
  ResponsesStore responses_store_;
  PoolingSetup pooling_;  // written before attach(), read-only after
  // Model names already logged as served by the loaded model (at most 64 remembered, so a
  // client cycling names cannot grow it; past that they are served without a line).
  mutable std::mutex other_names_mu_;
  mutable std::vector<std::string> other_names_seen_;
};

}  // namespace pagoda::server
