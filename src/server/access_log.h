// AccessLog — the one log line per HTTP request of `pagoda serve` (written through
// common/log.h), and its meeting with the engine's report for requests that generate.
//
// Contract:
// - One line per request, written once both parts are in: the transport's (status,
//   duration, an error's body: http_done, from HttpServerOptions::on_complete) and, for a
//   request handed to the engine, the engine's (tokens, timings, finish: generation_done,
//   from its sink). Whichever arrives second writes it. So the status in the line is the
//   one on_complete reported, which is the one /metrics counts: a client that hung up
//   mid-generation is 499 in both (rejected: the sink's own idea of the status, which
//   said 503 for a client that was no longer there to get it).
// - expect_generation(seq) is called before Engine::submit (the engine may finish
//   before submit returns) and forget_generation(seq) when submit refused the request;
//   the line of a request never expected is written by http_done alone.
// - Levels: 5xx and a failed generation Error, other 4xx Warn, else Info (499 too: a
//   client that stops a stream chose to). Debug (written only with -v): a /health check
//   that passed (a load balancer polls every second) and quiet reads (the web UI's
//   files and /v1/cache/stats, which every open page polls).
// - Fields, in order (text key=value after "METHOD PATH STATUS"; JSON the same keys):
//   request_id, duration_ms (arrival to last byte queued, or to the close); for a
//   generation: response_id, finish, prompt_tokens, cached_tokens, generated_tokens,
//   prompt_tok_s, gen_tok_s, queue_ms, ttft_ms, stream; with -v: remote, request_bytes
//   and for a generation prefill_ms, decode_ms, engine_ms, preemptions; last, for a
//   4xx / 5xx, a failed or cancelled generation: reason (the error's message, at most
//   kMaxReasonBytes).
// - Rates: prompt_tok_s = uncached prompt tokens / (ttft - queue time); gen_tok_s =
//   (generated - 1) / (total - ttft), the rate after the first token. Null (text "-")
//   when there is nothing to divide (no token yet, a fully cached prompt, one token).
// - Thread-safe: one mutex around the pending map; lines are written outside it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/log.h"
#include "engine/engine.h"
#include "http/http_server.h"

namespace pagoda::server {

// An error message in a log line is cut here: enough for any message pagoda writes (the
// longest name a model, a field and both numbers), while a message that quotes a client's
// megabyte of input stays a line, not a page.
inline constexpr size_t kMaxReasonBytes = 512;

// What the engine's sink reports about one request.
struct GenerationRecord {
  std::string response_id;  // chatcmpl-..., cmpl-..., msg_..., resp_...
  std::string finish;       // finish_reason_name(); "error" when it failed
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0, preemptions = 0;
  int64_t draft_tokens = 0, accepted_tokens = 0;  // speculative decoding
  double queue_ms = 0, ttft_ms = 0, total_ms = 0;
  bool stream = false;
  std::string error;  // on_error's message ("" none)
};
GenerationRecord generation_record(const RequestResult& r, bool stream, std::string response_id);

// The message of an error body: error.message of OpenAI's {"error":{...}} and Anthropic's
// {"type":"error","error":{...}}; else the body itself; cut to kMaxReasonBytes.
std::string error_reason(std::string_view body);

class AccessLog {
 public:
  // enabled false (--no-log-requests): writes nothing, keeps nothing.
  AccessLog(Logger& log, bool enabled) : log_(log), enabled_(enabled) {}

  void expect_generation(uint64_t seq);
  void forget_generation(uint64_t seq);
  // The engine's part (any thread: the engine's).
  void generation_done(uint64_t seq, GenerationRecord record);
  // The transport's part (an I/O thread).
  void http_done(const http::HttpRequest& req, const http::HttpCompletion& done);

 private:
  struct HttpPart {
    std::string method, path, id, remote;
    uint64_t request_bytes = 0;
    int status = 0;
    double seconds = 0;
    bool closed = false;
    std::string reason;  // from the error body
  };
  struct Pending {
    std::optional<GenerationRecord> generation;
    std::optional<HttpPart> http;
  };
  void write(const HttpPart& http, const GenerationRecord* generation);

  Logger& log_;
  const bool enabled_;
  std::mutex mu_;
  std::unordered_map<uint64_t, Pending> pending_;  // by HttpRequest::seq
};

}  // namespace pagoda::server
