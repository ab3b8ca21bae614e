// `pagoda serve`: the OpenAI-compatible HTTP server.
//
// Start-up order: the HTTP listener comes up first (so /health answers 503 while the
// model loads), then the model, the chat template (checked here: a template using an
// unsupported feature stops start-up, not a request), the engine, and readiness.
// Shutdown (SIGINT / SIGTERM): stop accepting, let running requests finish for up to
// --shutdown-timeout seconds, cancel the rest (their clients get an error event),
// flush, close, exit 0. Before that, SIGTERM (what orchestrators send) drains for
// --drain-seconds: /health answers 503 while requests are still served, so a load
// balancer's health check takes the replica out before it stops answering; SIGINT
// (Ctrl-C) and a second signal skip or end the drain.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "cli/chat_template_choice.h"
#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text_file.h"
#include "engine/engine.h"
#include "http/http_server.h"
#include "hub/bounded_get.h"
#include "hub/hub.h"
#include "server/api_server.h"
#include "server/image_inputs.h"
#include "server/webui.h"
#include "vision/vision_encoder.h"

namespace pagoda::cli {

namespace {

// One event of the server's own (start-up, warnings, shutdown) as a log line, printf-style.
[[gnu::format(printf, 2, 3)]] void say(LogLevel level, const char* fmt, ...) {
  char buf[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  logger().write(level, buf);
}

// A file named by a flag; the error names the flag too.
std::string read_flag_file(const std::string& path, const char* flag) {
  try {
    return read_text_file(path);
  } catch (const Error& e) {
    throw Error(std::string(flag) + " " + e.what());
  }
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// What a server would be wrong to start silently with (llama-server warns on the first):
// a context past the one the model was trained on, a KV budget that cannot hold one full
// context (the first long prompt would be a 400), and a keyless server on a public address.
std::vector<std::string> startup_warnings(const ModelConfig& mc, int64_t ctx, const PoolStats& pool,
                                          const std::string& host, bool has_api_key) {
  std::vector<std::string> w;
  if (mc.ctx_len > 0 && ctx > mc.ctx_len)
    w.push_back("-c " + std::to_string(ctx) + " is more than the " + std::to_string(mc.ctx_len) +
                " tokens the model was trained on" +
                (mc.rope_scaling == RopeScalingType::None ? std::string(" and it has no RoPE scaling")
                                                          : std::string(" (even with its RoPE scaling)")) +
                ": expect poor output past " + std::to_string(mc.ctx_len) + " tokens");
  if (pool.tokens_capacity < ctx)
    w.push_back("the KV budget (" + format_bytes(pool.bytes_budget) + ") holds " + std::to_string(pool.tokens_capacity) +
                " tokens, less than one full context of " + std::to_string(ctx) + ": longer prompts are refused; " +
                "raise --kv-cache-bytes or lower -c");
  if (!has_api_key && !is_loopback_host(host))
    w.push_back("--host " + host + " without --api-key: anyone who can reach this address can use the server");
  return w;
}

// The model's name in the API: --alias, else the file (or directory) name.
std::string default_model_id(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// "<host name>:<port>": unique among replicas on one machine and across machines (a
// Kubernetes pod's host name is the pod's name).
std::string default_replica_id(uint16_t port) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "localhost");
  return std::string(host) + ":" + std::to_string(port);
}

// SIGINT / SIGTERM, taken on a thread of their own (blocked in every other thread), with
// what each means in each phase of a server's life:
// - loading: the load stops at once (exit 128 + signal): there is nothing to save, and a
//   big model or a download can take minutes a user should not have to wait out;
// - serving (and draining): handed to wait() / wait_for(), which run the orderly stop;
// - stopping: a second signal exits at once, cutting off the requests still running and
//   the disk tier's flush (a user pressing Ctrl-C twice means it).
class SignalWatch {
 public:
  enum class Phase { Loading, Serving, Stopping };
  explicit SignalWatch(const sigset_t& sigs) : sigs_(sigs), thread_([this] { loop(); }) {}
  ~SignalWatch() {
    stop_ = true;
    thread_.join();
  }
  void set_phase(Phase p) {
    std::lock_guard<std::mutex> lk(mu_);
    phase_ = p;
  }
  // The next signal (blocks).
  int wait() { return wait_for(-1); }
  // The next signal within `seconds` (< 0: forever), or 0.
  int wait_for(double seconds) {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] { return !pending_.empty(); };
    if (seconds < 0) {
      cv_.wait(lk, ready);
    } else if (!cv_.wait_for(lk, std::chrono::duration<double>(seconds), ready)) {
      return 0;
    }
    const int sig = pending_.front();
    pending_.erase(pending_.begin());
    return sig;
  }

 private:
  void loop() {
    while (!stop_) {
      timespec ts{0, 100'000'000};  // 100 ms: how soon the destructor's join returns
      const int sig = sigtimedwait(&sigs_, nullptr, &ts);
      if (sig <= 0) continue;
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      std::lock_guard<std::mutex> lk(mu_);
      if (phase_ == Phase::Loading) {
        say(LogLevel::Info, "pagoda serve: %s while loading the model: stopping", name);
        std::_Exit(128 + sig);
      }
      if (phase_ == Phase::Stopping) {
        say(LogLevel::Info, "pagoda serve: second %s: exiting now (running requests are cut off)", name);
        std::_Exit(128 + sig);
      }
      pending_.push_back(sig);
      cv_.notify_all();
    }
  }

  sigset_t sigs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> pending_;
  Phase phase_ = Phase::Loading;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The value an option got, named as the user gave it: the PAGODA_* variable when that is
// where it came from (CLI11 reads the variable only when the flag is absent), else the flag.
std::string option_source(const CLI::Option& opt, const std::string& value) {
  const char* env = opt.get_envname().empty() ? nullptr : std::getenv(opt.get_envname().c_str());
  return env && value == env ? opt.get_envname() : "--" + opt.get_lnames().front();
}

// The key --api-key / --api-key-file (or PAGODA_API_KEY / PAGODA_API_KEY_FILE) give; "" when
// neither is given, which turns auth off. HttpServer reads "" as "no auth", so a key that is
// given but empty or blank must never reach it: `--api-key "$KEY"` with KEY unset, or
// `PAGODA_API_KEY=` in a compose file, would serve /v1/cache/reset and every other route open
// with "api key off" in the start-up line as the only sign. Such a key stops start-up
// instead. (Rejected: reading it as "no key", which is exactly the silent opening.) CLI11
// skips a variable set to "" as if unset, so that case is looked up here. Surrounding
// whitespace is trimmed, as the file's is: the server trims the header value before comparing,
// so a key ending in a space could never be sent.
std::string resolve_api_key(const std::string& key, const CLI::Option& key_opt, const std::string& key_file,
                            const CLI::Option& file_opt) {
  const std::string unset = ", or leave it unset to serve without auth";
  for (const CLI::Option* opt : {&key_opt, &file_opt})
    if (opt->count() == 0 && !opt->get_envname().empty() && std::getenv(opt->get_envname().c_str()))
      throw Error(opt->get_envname() + " is set but empty: give " +
                  (opt == &key_opt ? "the key" : "the key file's path") + unset);
  if (file_opt.count() > 0) {
    if (trim(key_file).empty())
      throw Error(option_source(file_opt, key_file) + " names no file: give the key file's path" + unset);
    const std::string from_file = trim(read_flag_file(key_file, "--api-key-file"));
    if (from_file.empty())
      throw Error("--api-key-file " + key_file + ": the file is empty or only whitespace: write the key in it" + unset);
    return from_file;
  }
  if (key_opt.count() == 0) return "";
  const std::string trimmed = trim(key);
  if (trimmed.empty())
    throw Error(option_source(key_opt, key) + (key.empty() ? " is empty" : " is only whitespace") + ": give the key" +
                unset);
  return trimmed;
}

// --cors-origin: "*", or an origin as a browser writes it in Origin: scheme "://" host
// [":" port], nothing after it. A trailing slash or a path would never equal any Origin,
// so the flag would silently allow nothing: refused at start-up instead.
std::string check_cors_origin(const std::string& origin) {
  if (origin == "*") return "";
  const std::string form = "must be * or scheme://host[:port] as a browser sends it in Origin (no path, no trailing /)";
  const size_t sep = origin.find("://");
  if (sep == std::string::npos || sep == 0 || !std::isalpha(static_cast<unsigned char>(origin[0]))) return form;
  for (size_t i = 0; i < sep; ++i) {
    const unsigned char c = static_cast<unsigned char>(origin[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return form;
  }
  const std::string authority = origin.substr(sep + 3);
  if (authority.empty()) return form;
  for (unsigned char c : authority)
    if (c <= ' ' || c >= 0x7f || c == '/' || c == '?' || c == '#' || c == ',' || c == '@') return form;
  return "";
}

// Every long option of `app` is also read from PAGODA_<NAME> (dashes as underscores).
void add_env_names(CLI::App& app) {
  for (CLI::Option* opt : app.get_options([](CLI::Option* o) {
         return !o->get_lnames().empty() && o->get_lnames().front().rfind("help", 0) != 0;
       })) {
    std::string env = "PAGODA_";
    for (char c : opt->get_lnames().front()) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    opt->envname(env);
  }
}

}  // namespace

namespace {

struct ServeOpts {
  std::string model, host = "127.0.0.1", api_key, api_key_file, chat_template_file, chat_template, alias, hf_repo;
  int64_t n_predict = -1;
  int port = 8080, threads = 0, parallel = 4, max_queue = 64, io_threads = 2;
  int64_t max_connections = 0;  // 0: http::default_max_connections()
  int64_t ctx_size = 0, max_batch_tokens = 512;
  std::string max_body_bytes = "8MiB", quantize;
  double shutdown_timeout = 10, request_timeout = 0;
  int64_t responses_store_entries = 1024;
  double responses_store_ttl = 3600;
  std::string responses_store_bytes = "256MiB";
  std::string grammar_cache_bytes = "64MiB";
  std::string answer_tokens_bytes = "32MiB";
  bool no_log = false;
  bool verbose = false;
  std::string log_format = "text", log_file;
  bool no_webui = false;
  std::string reasoning_format = "auto";
  bool embeddings = false;
  bool strict_model_names = false;
  std::string pooling;  // "" : the model's
  std::string replica_id;
  double drain_seconds = 0;
  int busy_status = 429;
  std::vector<std::string> cors_origins;
  std::string mmproj;  // --mmproj: the vision projector ("" none)
  bool no_mmproj = false;
  bool allow_image_urls = false;
  std::string image_max_bytes = "20MiB", image_cache_bytes = "256MiB";
  int64_t image_max_pixels = 33'554'432;
  int max_images = 8;
  KvOptions kv;
  PromptCacheOptions cache;
  SpecOptions spec;
};

// The serve flags by concern, each group into its fields of ServeOpts.

// The model, its context and batching, the chat template.
void add_model_options(CLI::App& app, ServeOpts& o) {
  auto* model_opt =
      app.add_option("-m,--model", o.model, "GGUF model file, Hugging Face model directory or hf://OWNER/REPO[:QUANT]");
  app.add_option("--hf-repo", o.hf_repo, "OWNER/REPO[:QUANT] on the Hugging Face Hub (llama-server's -hf): -m hf://...")
      ->excludes(model_opt);
  app.add_option("-a,--alias", o.alias, "Model name in the API (default: the file name)");
  app.add_option("-n,--n-predict", o.n_predict,
                 "Tokens to generate when a request does not say (-1: until the end of the context)")
      ->capture_default_str()->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  app.add_option("-t,--threads", o.threads, "Kernel worker threads (default: all cores)");
  app.add_option("--parallel", o.parallel, "Requests generating at once")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--max-queue", o.max_queue, "Requests waiting beyond --parallel before 429")->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-c,--ctx-size", o.ctx_size, "Tokens per sequence (default: the model's context length)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--max-batch-tokens", o.max_batch_tokens, "Tokens per forward step (decode + chunked prefill)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  auto* template_file_opt =
      app.add_option("--chat-template-file", o.chat_template_file, "Jinja chat template to use instead of the model's");
  app.add_option("--chat-template", o.chat_template,
                 "A built-in chat template (" + chat::ChatTemplate::builtin_names() +
                     ") or a Jinja template file, instead of the model's")
      ->excludes(template_file_opt);
  app.add_option("--reasoning-format", o.reasoning_format,
                 "auto: a thinking model's reasoning goes to reasoning_content; none: it stays in content")
      ->capture_default_str()->check(CLI::IsMember({"auto", "none"}));
  add_quantize_option(app, o.quantize);
}

// The listener: address, API keys (returned: serve_runner resolves them), limits, shutdown.
std::pair<CLI::Option*, CLI::Option*> add_http_options(CLI::App& app, ServeOpts& o) {
  app.add_option("--host", o.host, "Address to bind (loopback unless told otherwise)")->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  auto* key = app.add_option("--api-key", o.api_key,
                             "Require 'Authorization: Bearer KEY' (not on /health); an empty key is refused. Without a "
                             "key, only Host headers naming this server (localhost, 127.0.0.0/8, [::1], --host) are served");
  auto* key_file =
      app.add_option("--api-key-file", o.api_key_file, "Read the API key from a file (first line)")->excludes(key);
  app.add_option("--max-body-bytes", o.max_body_bytes, "Largest request body (413 beyond)")->capture_default_str();
  app.add_option("--shutdown-timeout", o.shutdown_timeout, "Seconds running requests get to finish on SIGINT/SIGTERM")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  app.add_option("--request-timeout", o.request_timeout, "Cancel a request after this many seconds (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e6));
  app.add_option("--io-threads", o.io_threads, "HTTP I/O threads")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--max-connections", o.max_connections,
                 "Open connections at most; at the cap the least recently used idle one is closed for a new "
                 "one (never one with a request in flight), else the new one gets 503. Default (0): 3/4 of the "
                 "open-file limit (RLIMIT_NOFILE), at most 65536")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--cors-origin", o.cors_origins,
                 "Let web pages of this origin (scheme://host[:port], or * for any) read the answers (CORS); "
                 "repeatable. Default: none (the built-in web UI is same-origin and needs none)")
      ->check(check_cors_origin);
  app.add_flag("--no-webui", o.no_webui, "Do not serve the built-in web UI at / (it is then a 404)");
  app.add_option("--replica-id", o.replica_id,
                 "This replica's name in log lines and /v1/cache/stats (default: <host name>:<port>)")
      ->check([](const std::string& id) -> std::string {
        if (id.empty() || id.size() > 64) return "must be 1 to 64 characters";
        for (char c : id)
          if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != ':')
            return "may hold only letters, digits and - _ . :";
        return "";
      });
  app.add_option("--drain-seconds", o.drain_seconds,
                 "On SIGTERM, answer /health with 503 for this long while still serving requests, before "
                 "stopping (behind a load balancer: longer than its health checks take to mark a server down)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  app.add_option("--busy-status", o.busy_status,
                 "Status of a request refused because --parallel + --max-queue are full: 429 (Anthropic routes: "
                 "529), or 503, which load balancers such as HAProxy 2.x retry on another replica")
      ->capture_default_str()->check(CLI::IsMember({429, 503}));
  return {key, key_file};
}

void add_log_options(CLI::App& app, ServeOpts& o) {
  app.add_flag("--no-log-requests", o.no_log, "Do not log one line per request");
  app.add_flag("-v,--verbose", o.verbose,
               "Log more: passing /health checks and the web UI's polls too, and per request the client "
               "address, body size and timing breakdown (prefill, decode, engine, preemptions)");
  app.add_option("--log-format", o.log_format,
                 "text: one line per event for people; json: one JSON object per line (ts, level, replica, "
                 "request_id, method, path, status, duration_ms, tokens, tok/s, reason...)")
      ->capture_default_str()->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-file", o.log_file, "Append the log to this file instead of stderr (created if missing)");
}

// The APIs' own state: stored responses, compiled grammars, answer ids, embeddings.
void add_api_options(CLI::App& app, ServeOpts& o) {
  app.add_option("--responses-store-entries", o.responses_store_entries,
                 "Responses API: most stored responses (store: true) kept for GET and previous_response_id; "
                 "the least recently used goes first (0: store none)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--responses-store-ttl", o.responses_store_ttl,
                 "Responses API: seconds a stored response is kept (0: until evicted)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e9));
  app.add_option("--responses-store-bytes", o.responses_store_bytes,
                 "Responses API: most bytes of memory stored responses and their conversations hold")
      ->capture_default_str();
  app.add_option("--grammar-cache-bytes", o.grammar_cache_bytes,
                 "Most bytes of memory compiled grammars (JSON schemas, GBNF, regexes) kept for reuse hold, "
                 "their token-mask caches included")
      ->capture_default_str();
  app.add_option("--answer-tokens-bytes", o.answer_tokens_bytes,
                 "Most bytes of memory the token ids of recent chat answers hold; a conversation that sends an "
                 "answer back is fed the ids the model produced, so its prefix stays cached (0: off)")
      ->capture_default_str();
  app.add_flag("--embeddings", o.embeddings, "Serve /v1/embeddings and /v1/rerank (reranker models)");
  app.add_flag("--strict-model-names", o.strict_model_names,
               "Answer 404 to a request naming another model (default: serve it with the loaded model and log the name)");
  app.add_option("--pooling", o.pooling,
                 "How /v1/embeddings pools the final hidden states (default: the model's pooling_type "
                 "metadata, else last)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last", "rank"}));
}

// Images in chat (docs/vision.md).
void add_image_options(CLI::App& app, ServeOpts& o) {
  app.add_option("--mmproj", o.mmproj,
                 "Vision projector GGUF (llama.cpp's mmproj file) for images in chat: image_url parts, "
                 "Anthropic image blocks, Responses input_image (gemma3, gemma4v, qwen3vl_merger projectors). -m hf://... uses the repo's "
                 "mmproj file when it has one");
  app.add_flag("--no-mmproj", o.no_mmproj,
               "Serve without images: neither --mmproj nor, for -m hf://, the repo's projector (not downloaded)");
  app.add_flag("--allow-image-urls", o.allow_image_urls,
               "Fetch http(s) image URLs (10 s in all, at most 3 redirects, at most --image-max-bytes); "
               "without it they are a 400");
  app.add_option("--image-max-bytes", o.image_max_bytes, "Largest image (decoded bytes); 400 beyond")
      ->capture_default_str();
  app.add_option("--image-max-pixels", o.image_max_pixels, "Most pixels (width x height) of an image; 400 beyond")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--max-images", o.max_images, "Most images in one request; 400 beyond")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--image-cache-bytes", o.image_cache_bytes,
                 "Most bytes of memory encoded images (the projector's output rows) kept for reuse (0: off)")
      ->capture_default_str();
}

server::ImageInputOptions image_options(const ServeOpts& o, int threads) {
  server::ImageInputOptions io;
  io.max_image_bytes = parse_byte_size(o.image_max_bytes, "--image-max-bytes");
  io.max_image_pixels = o.image_max_pixels;
  io.max_images = o.max_images;
  io.cache_bytes = parse_byte_size(o.image_cache_bytes, "--image-cache-bytes");
  io.threads = threads;
  if (o.allow_image_urls)
    io.fetch_url = [](const std::string& url, uint64_t max_bytes) { return hub::bounded_get(url, max_bytes); };
  return io;
}

server::PoolingSetup resolve_pooling(const ServeOpts& o, const LoadedModel& lm) {
  // Pooling: --pooling, else the file's {arch}.pooling_type, else last: every model
  // pagoda runs is a causal decoder, where only the last token has seen the whole input
  // (mean would weigh the early tokens' states, which saw only a prefix).
  server::PoolingSetup pooling;
  const ModelConfig& mc = lm.model->config();
  pooling.pooling = o.pooling == "none"   ? Pooling::None
                    : o.pooling == "mean" ? Pooling::Mean
                    : o.pooling == "cls"  ? Pooling::Cls
                    : o.pooling == "last" ? Pooling::Last
                    : o.pooling == "rank" ? Pooling::Rank
                    : mc.pooling != Pooling::Unspecified ? mc.pooling
                                                        : Pooling::Last;
  pooling.n_embd = mc.dim;
  if (lm.file) pooling.rerank_template = lm.file->get_string("tokenizer.chat_template.rerank").value_or("");
  if (o.embeddings && pooling.pooling == Pooling::Rank && lm.model->n_cls_out() == 0) {
    // No head (a Qwen3-Reranker Hugging Face directory, whose lm_head llama.cpp's
    // converter would cut down to cls.output.weight): the logits of "yes" and "no" at
    // the last token are the head's two outputs, the same numbers.
    auto single = [&](const char* word) -> int32_t {
      std::vector<int32_t> ids;
      if (lm.tokenizer) ids = lm.tokenizer->encode(word, /*add_special=*/false, /*parse_special=*/false);
      if (ids.size() != 1)
        throw Error(o.model + ": pooling rank needs a classification head (tensor 'cls.output.weight') or a "
                    "vocabulary where \"yes\" and \"no\" are single tokens; this model has neither");
      return ids[0];
    };
    pooling.rank_tokens = {single("yes"), single("no")};
    // Qwen3-Reranker's prompt format (its model card), when the model brings none.
    if (pooling.rerank_template.empty())
      pooling.rerank_template =
          "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
          "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
          "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: "
          "{query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  }
  return pooling;
}

// The projector to serve images with: --mmproj (which must load), else the hf:// repo's
// (one that cannot be used leaves a text server with a warning); `projector` names it.
std::unique_ptr<VisionEncoder> load_serve_projector(const ServeOpts& o, const std::string& repo_mmproj, const Model& model,
                                                    int64_t max_batch_tokens, std::string& projector) {
  std::unique_ptr<VisionEncoder> encoder;
  projector = o.no_mmproj ? "" : o.mmproj;
  if (!projector.empty()) {
    encoder = load_vision_projector(projector, model, max_batch_tokens);  // asked for: must work
  } else if (!repo_mmproj.empty()) {
    // The repo's projector is a bonus: one it cannot use leaves a text model, as llama-server's -hf.
    projector = repo_mmproj;
    try {
      encoder = load_vision_projector(projector, model, max_batch_tokens);
    } catch (const Error& e) {
      say(LogLevel::Warn, "pagoda serve: warning: not using the repo's projector (%s); serving text only "
          "(--no-mmproj skips it)", e.what());
    }
  }
  return encoder;
}

// The engine's settings from the flags (the KV budget is chosen once the model is known).
EngineConfig engine_config_from(ServeOpts& o) {
  EngineConfig ec;
  o.kv.resolve();  // bad KV flags fail before the model loads; the budget is chosen after
  ec.cache = o.cache.resolve();
  ec.disk = o.cache.resolve_disk();
  ec.state_snapshot_bytes = o.cache.resolve_state_snapshot_bytes();
  ec.state_snapshot_interval = o.cache.resolve_state_snapshot_interval();
  ec.spec = o.spec.resolve();
  ec.parallel = o.parallel;
  ec.max_queue = o.max_queue;
  ec.ctx_size = o.ctx_size;
  ec.max_batch_tokens = o.max_batch_tokens;
  ec.threads = o.threads > 0 ? o.threads : ThreadPool::default_num_threads();
  return ec;
}

// The API layer's settings from the flags; `requested_model` is -m as given (an hf://
// name is the model's id unless --alias says otherwise).
server::ApiServerOptions api_options_from(const ServeOpts& o, const std::string& requested_model) {
  server::ApiServerOptions ao;
  ao.model_id = !o.alias.empty()           ? o.alias
                : hub::is_hub_uri(requested_model) ? hub::ModelRef::parse(requested_model).to_string()
                                                   : default_model_id(o.model);
  ao.log_requests = !o.no_log;
  ao.request_timeout_ms = static_cast<int64_t>(o.request_timeout * 1000);
  ao.extract_reasoning = o.reasoning_format == "auto";
  ao.responses_store_entries = static_cast<size_t>(o.responses_store_entries);
  ao.responses_store_ttl_ms = static_cast<int64_t>(o.responses_store_ttl * 1000);
  ao.responses_store_bytes = parse_byte_size(o.responses_store_bytes, "--responses-store-bytes");
  ao.grammar_cache_bytes = parse_byte_size(o.grammar_cache_bytes, "--grammar-cache-bytes");
  ao.answer_tokens_bytes = parse_byte_size(o.answer_tokens_bytes, "--answer-tokens-bytes");
  ao.embeddings = o.embeddings;
  ao.busy_status = o.busy_status;
  ao.strict_model_names = o.strict_model_names;
  ao.default_max_tokens = o.n_predict;
  return ao;
}

// Serves until SIGINT / SIGTERM; on SIGTERM with --drain-seconds, /health says 503 that
// long first; then running requests get --shutdown-timeout to finish before the rest are
// cancelled.
void serve_until_signalled(SignalWatch& signals, const ServeOpts& o, server::ApiServer& api, http::HttpServer& http,
                           Engine& engine) {
  signals.set_phase(SignalWatch::Phase::Serving);
  const int sig = signals.wait();
  if (sig == SIGTERM && o.drain_seconds > 0) {
    say(LogLevel::Info,
        "pagoda serve: SIGTERM: draining for %.1f s (/health answers 503, requests are still served; "
        "a second signal stops at once)",
        o.drain_seconds);
    api.begin_draining();
    if (const int again = signals.wait_for(o.drain_seconds); again != 0)
      say(LogLevel::Info, "pagoda serve: %s during the drain: ending it", again == SIGINT ? "SIGINT" : "SIGTERM");
  }
  say(LogLevel::Info, "pagoda serve: %s: stopping (up to %.1f s for running requests; a second signal exits at once)",
      sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout);
  signals.set_phase(SignalWatch::Phase::Stopping);
  api.begin_shutdown();
  http.stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000));
  while (engine.stats().in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t cancelled = engine.stats().in_flight;
  engine.stop();  // cancels what is left; their sinks queue an error event / 503
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (http.in_flight() > 0 && std::chrono::steady_clock::now() < flush_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http.stop();
  say(LogLevel::Info, "pagoda serve: stopped (%lld request(s) cancelled at shutdown)",
      static_cast<long long>(cancelled));
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  add_model_options(app, *o);
  const std::pair<CLI::Option*, CLI::Option*> keys = add_http_options(app, *o);
  CLI::Option* key = keys.first;
  CLI::Option* key_file = keys.second;
  add_log_options(app, *o);
  add_api_options(app, *o);
  add_image_options(app, *o);
  o->kv.add_to(app);
  o->cache.add_to(app);
  o->spec.add_to(app);
  add_env_names(app);

  auto serve = [o, key, key_file]() -> int {
    // Everything the user can get wrong is checked before anything starts.
    EngineConfig ec = engine_config_from(*o);
    const std::string api_key = resolve_api_key(o->api_key, *key, o->api_key_file, *key_file);
    const uint64_t max_body = parse_byte_size(o->max_body_bytes, "--max-body-bytes");
    if (max_body == 0) throw Error("--max-body-bytes must be greater than 0");
    if (!o->hf_repo.empty()) o->model = "hf://" + o->hf_repo;
    if (o->model.empty()) throw Error("--model is required (a GGUF file, a model directory or hf://OWNER/REPO), or -hf OWNER/REPO");
    const std::string requested_model = o->model;
    // hf://... -> the cached file or directory, and the repo's projector unless --mmproj names
    // one or --no-mmproj refuses images.
    const ResolvedModel resolved = resolve_model(o->model, o->mmproj.empty() && !o->no_mmproj);
    o->model = resolved.path;
    LoadOptions load_options;
    load_options.quantize = parse_quantize(o->quantize);
    // A directory always has a tokenizer.json; a GGUF may be weights only (synthetic).
    load_options.require_tokenizer = std::filesystem::is_directory(o->model);
    std::string template_source = "none";
    std::optional<chat::ChatTemplate> chat_template =
        chat_template_from_flags(o->chat_template_file, o->chat_template, template_source);

    // Signals are taken by sigwait() on this thread: block them before any thread starts
    // so every thread inherits the mask.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    SignalWatch signals(sigs);
    signal(SIGPIPE, SIG_IGN);

    const server::ApiServerOptions ao = api_options_from(*o, requested_model);
    server::ApiServer api(ao);
    http::HttpServerOptions ho;
    ho.host = o->host;
    ho.port = static_cast<uint16_t>(o->port);
    ho.io_threads = o->io_threads;
    ho.api_key = api_key;
    ho.cors_origins = o->cors_origins;
    ho.max_connections = o->max_connections;
    ho.max_body_bytes = max_body;
    ho.error_body = server::transport_error_response;  // OpenAI's error object
    ho.on_complete = [&api](const http::HttpRequest& r, const http::HttpCompletion& done) {
      api.on_http_complete(r, done);
    };
    std::vector<http::Route> routes = api.routes();
    if (!o->no_webui)
      for (http::Route& r : server::webui_routes()) routes.push_back(std::move(r));
    http::HttpServer http(ho, std::move(routes));  // binds; serves from start()
    // The default replica id names the bound port (--port 0 picks one).
    const std::string replica_id = !o->replica_id.empty() ? o->replica_id : default_replica_id(http.port());
    api.set_replica_id(replica_id);
    logger().set_tag("replica", replica_id);
    http.start();
    say(LogLevel::Info, "pagoda serve: listening on http://%s:%u (loading %s)%s", o->host.c_str(), http.port(),
        o->model.c_str(), o->no_webui ? "" : "; web UI at /");

    LoadedModel lm = load_model(o->model, load_options);
    if (lm.file && lm.file->has("tokenizer.ggml.model") && !lm.tokenizer) lm.tokenizer = Tokenizer::from_gguf(*lm.file);
    if (!chat_template) chat_template = model_chat_template(lm, template_source);
    const chat::ChatTemplate* tmpl = chat_template ? &*chat_template : nullptr;
    std::optional<LoadedModel> draft;
    if (ec.spec.draft) {
      draft = load_draft_model(o->spec.model_draft, lm);
      ec.draft_model = draft->model.get();
    }
    ec.kv = o->kv.resolve_for(*lm.model);
    ec.model_id = o->model;
    // Blocks on disk outlive the process: the namespace must tell a rewritten file (or
    // the same file re-encoded by --quantize) from the one that computed them.
    if (!ec.disk.dir.empty())
      ec.model_id += "|quantize=" + o->quantize + "|" +
                     (lm.file ? weights_fingerprint(lm.file->part_paths()) : weights_fingerprint(o->model));
    ec.extra_eog_ids = lm.generation.eos_token_ids;
    server::SamplingDefaults defaults;
    defaults.temperature = lm.generation.temperature;
    defaults.top_p = lm.generation.top_p;
    defaults.top_k = lm.generation.top_k;
    defaults.repetition_penalty = lm.generation.repetition_penalty;
    const ModelConfig& mc = lm.model->config();
    const server::PoolingSetup pooling = resolve_pooling(*o, lm);
    api.set_pooling(pooling);
    std::unique_ptr<server::ImageInputs> images;
    std::string projector;
    std::unique_ptr<VisionEncoder> encoder = load_serve_projector(*o, resolved.mmproj, *lm.model, ec.max_batch_tokens, projector);
    if (encoder) {
      images = std::make_unique<server::ImageInputs>(std::move(encoder), image_options(*o, ec.threads));
      api.set_image_inputs(images.get());
      const VisionConfig& vc = images->encoder().config();
      say(LogLevel::Info, "pagoda serve: images: %s projector %s, %lldpx, up to %lld tokens an image", vc.projector_name.c_str(),
          projector.c_str(), static_cast<long long>(vc.image_size), static_cast<long long>(vc.tokens_per_image()));
    }
    Engine engine(*lm.model, lm.tokenizer.get(), ec);
    engine.start();
    api.attach(&engine, lm.tokenizer.get(), tmpl, defaults, lm.model->config().arch_name);
    const EngineStats st = engine.stats();
    for (const std::string& w : startup_warnings(mc, engine.config().ctx_size, st.pool, o->host, !api_key.empty()))
      say(LogLevel::Warn, "pagoda serve: warning: %s", w.c_str());
    // Three lines (one event each in a JSON log): the model, the memory, the setup.
    say(LogLevel::Info, "pagoda serve: ready: model %s (%s), loaded in %.2f s", ao.model_id.c_str(),
        lm.model->config().summary().c_str(), lm.load_seconds);
    say(LogLevel::Info,
        "pagoda serve: KV budget %s = %lld tokens (block size %lld, K %s, V %s), ctx %lld, parallel %d, threads %d, "
        "io threads %d, max connections %lld",
        format_bytes(st.pool.bytes_budget).c_str(), static_cast<long long>(st.pool.tokens_capacity),
        static_cast<long long>(st.pool.block_size), kv_type_name(ec.kv.k_type), kv_type_name(ec.kv.v_type),
        static_cast<long long>(engine.config().ctx_size), ec.parallel, ec.threads, o->io_threads,
        static_cast<long long>(http.max_connections()));
    say(LogLevel::Info,
        "pagoda serve: prefix cache %s, chat template: %s (tool calls: %s, reasoning: %s), api key %s, replica %s%s, "
        "log %s%s",
        engine.config().cache.enabled ? "on" : "off", template_source.c_str(), chat::tool_call_format_name(api.chat_format().tools),
        chat::reasoning_format_name(api.chat_format().reasoning), api_key.empty() ? "off" : "on", replica_id.c_str(),
        o->embeddings ? (std::string(", embeddings on (pooling ") + pooling_name(pooling.pooling) + ")").c_str() : "",
        o->no_log ? "without requests" : "with requests", o->verbose ? " (verbose)" : "");

    if (st.spec.types == "none")
      say(LogLevel::Info, "pagoda serve: speculative decoding off%s",
          engine.config().spec.any() ? " (hybrid models' recurrent states cannot be cut back to a rejected token)" : "");
    else
      say(LogLevel::Info, "pagoda serve: speculative decoding: %s, up to %lld proposed tokens a step%s",
          st.spec.types.c_str(), static_cast<long long>(engine.config().spec.draft_max),
          engine.config().spec.suffix ? (", suffix index " + format_bytes(engine.config().spec.suffix_bytes)).c_str() : "");
    if (const SnapshotStats& ss = st.cache.state_snapshots; ss.state_bytes > 0)
      say(LogLevel::Info,
          "pagoda serve: recurrent state %s a sequence; snapshots %s (%lld of them), every %lld prompt tokens",
          format_bytes(ss.state_bytes).c_str(), format_bytes(ss.capacity_bytes).c_str(),
          static_cast<long long>(ss.capacity_bytes / ss.state_bytes),
          static_cast<long long>(engine.config().state_snapshot_interval));
    serve_until_signalled(signals, *o, api, http, engine);
    return 0;
  };

  return [o, serve] {
    // The log first, so that everything after it (warnings, the start-up summary, the
    // requests) goes where --log-file / --log-format say, and a bad path fails before
    // anything starts.
    Logger& log = logger();
    log.set_format(o->log_format == "json" ? LogFormat::Json : LogFormat::Text);
    log.set_verbose(o->verbose);
    if (!o->log_file.empty()) log.open_file(o->log_file);
    try {
      return serve();
    } catch (const std::exception& e) {
      // main prints it on stderr; a log kept in a file gets it too, where it is looked for.
      if (!o->log_file.empty()) log.write(LogLevel::Error, std::string("pagoda serve: ") + e.what());
      throw;
    }
  };
}

}  // namespace pagoda::cli
