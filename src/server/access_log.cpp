#include "server/access_log.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace pagoda::server {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();  // logged as null / -

// Successful reads logged only with -v: the web UI's files, and /v1/cache/stats, which
// every open web UI page polls once a second (four times while it generates) and which
// would otherwise bury the requests in one log line a second per page.
bool is_quiet_read(const std::string& method, const std::string& path, int status) {
  return method == "GET" && (status == 200 || status == 304) &&
         (path == "/v1/cache/stats" || path == "/" || path.starts_with("/webui/"));
}

LogLevel level_of(int status, const GenerationRecord* g) {
  if (status >= 500 || (g && !g->error.empty())) return LogLevel::Error;
  if (status >= 400 && status != http::kStatusClientClosedRequest) return LogLevel::Warn;
  return LogLevel::Info;
}

}  // namespace

GenerationRecord generation_record(const RequestResult& r, bool stream, std::string response_id) {
  GenerationRecord g;
  g.response_id = std::move(response_id);
  g.finish = finish_reason_name(r.finish);
  g.prompt_tokens = r.prompt_tokens;
  g.cached_tokens = r.cached_tokens;
  g.generated_tokens = r.generated_tokens;
  g.preemptions = r.preemptions;
  g.draft_tokens = r.draft_tokens;
  g.accepted_tokens = r.accepted_tokens;
  g.queue_ms = r.timings.queue_ms;
  g.ttft_ms = r.timings.ttft_ms;
  g.total_ms = r.timings.total_ms;
  g.stream = stream;
  return g;
}

std::string error_reason(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    const auto e = j.find("error");
    if (e != j.end() && e->is_object()) {
      const auto m = e->find("message");
      if (m != e->end() && m->is_string()) return truncate_for_log(m->get_ref<const std::string&>(), kMaxReasonBytes);
    }
  }
  return truncate_for_log(body, kMaxReasonBytes);
}

void AccessLog::expect_generation(uint64_t seq) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  pending_[seq];
}

void AccessLog::forget_generation(uint64_t seq) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  pending_.erase(seq);
}

void AccessLog::generation_done(uint64_t seq, GenerationRecord record) {
  if (!enabled_) return;
  HttpPart http;
  {
    std::lock_guard lock(mu_);
    const auto it = pending_.find(seq);
    if (it == pending_.end()) return;
    if (!it->second.http) {
      it->second.generation = std::move(record);
      return;
    }
    http = std::move(*it->second.http);
    pending_.erase(it);
  }
  write(http, &record);
}

void AccessLog::http_done(const http::HttpRequest& req, const http::HttpCompletion& done) {
  if (!enabled_) return;
  HttpPart http;
  http.method = req.method;
  http.path = req.path;
  http.id = req.id;
  http.remote = req.remote;
  http.request_bytes = req.body.size();
  http.status = done.status;
  http.seconds = done.seconds;
  http.closed = done.closed;
  if (!done.error_body.empty()) http.reason = error_reason(done.error_body);
  std::optional<GenerationRecord> generation;
  {
    std::lock_guard lock(mu_);
    const auto it = pending_.find(req.seq);
    if (it != pending_.end()) {
      if (!it->second.generation) {  // the engine has not finished yet: its sink writes the line
        it->second.http = std::move(http);
        return;
      }
      generation = std::move(it->second.generation);
      pending_.erase(it);
    }
  }
  write(http, generation ? &*generation : nullptr);
}

void AccessLog::write(const HttpPart& http, const GenerationRecord* g) {
  LogLevel level = level_of(http.status, g);
  if (is_quiet_read(http.method, http.path, http.status) || (http.path == "/health" && http.status == 200))
    level = LogLevel::Debug;
  if (!log_.enabled(level)) return;
  const bool verbose = log_.verbose();

  LogLine line(level);
  line.head("method", http.method).head("path", http.path).head("status", int64_t{http.status});
  line.add("request_id", http.id).add("duration_ms", http.seconds * 1e3, 1);
  if (g) {
    const int64_t uncached = g->prompt_tokens - g->cached_tokens;
    const double prefill_ms = g->ttft_ms - g->queue_ms;
    const double decode_ms = g->total_ms - g->ttft_ms;
    const bool first_token = g->ttft_ms > 0;
    const double prompt_tps = first_token && uncached > 0 && prefill_ms > 0 ? uncached / (prefill_ms / 1e3) : kNone;
    const double gen_tps =
        first_token && g->generated_tokens > 1 && decode_ms > 0 ? (g->generated_tokens - 1) / (decode_ms / 1e3) : kNone;
    if (!g->response_id.empty()) line.add("response_id", g->response_id);
    line.add("finish", g->finish)
        .add("prompt_tokens", g->prompt_tokens)
        .add("cached_tokens", g->cached_tokens)
        .add("generated_tokens", g->generated_tokens)
        .add("prompt_tok_s", prompt_tps, 1)
        .add("gen_tok_s", gen_tps, 1)
        .add("draft_tokens", g->draft_tokens)
        .add("accepted_tokens", g->accepted_tokens)
        .add("queue_ms", g->queue_ms, 1)
        .add("ttft_ms", first_token ? g->ttft_ms : kNone, 1)
        .add("stream", g->stream);
  }
  if (verbose) {
    line.add("remote", http.remote).add("request_bytes", static_cast<int64_t>(http.request_bytes));
    if (g) {
      const bool first_token = g->ttft_ms > 0;
      line.add("prefill_ms", first_token ? g->ttft_ms - g->queue_ms : kNone, 1)
          .add("decode_ms", first_token ? g->total_ms - g->ttft_ms : kNone, 1)
          .add("engine_ms", g->total_ms, 1)
          .add("preemptions", g->preemptions);
    }
  }
  std::string reason;
  if (http.closed) {
    reason = http.status == http::kStatusClientClosedRequest
                 ? "the client closed the connection before the answer was complete"
                 : "the server stopped before the answer was complete";
  } else if (http.status >= 400) {
    reason = http.reason;
  } else if (g && !g->error.empty()) {
    reason = truncate_for_log("generation failed: " + g->error, kMaxReasonBytes);
  } else if (g && g->finish == "cancelled") {
    reason = "cancelled before it finished (request timeout or shutdown)";
  }
  if (!reason.empty() || http.status >= 400) line.add("reason", reason);
  log_.write(line);
}

}  // namespace pagoda::server
