// A minimal HTTP/1.1 client for the benchmark: one POST per connection, the
// response body handed to a callback as bytes arrive (for SSE), under a hard
// deadline.
//
// Contract:
// - Plain http:// only (no TLS); the tool only ever connects to the host and
//   port of the URL it is given.
// - post_stream() never throws for network or protocol trouble: every failure is
//   classified in HttpResult (refused connection, other connect failure,
//   deadline passed, non-2xx status, transport error). It opens a fresh
//   connection per call ("Connection: close"): on loopback that costs ~0.1 ms,
//   negligible next to a TTFT, and keeps requests independent (no head-of-line
//   effects from a shared keep-alive connection).
// - The deadline bounds the whole exchange (connect, send, every read). Name
//   resolution is synchronous and outside the deadline; for numeric hosts and
//   "localhost" it does not touch the network.
// - Thread-safe: each call owns its own io_context and socket, so any number of
//   threads may call it concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::loadgen {

struct Url {
  std::string host;
  std::string port = "80";
  std::string base_path;  // without a trailing '/', "" for the root ("/v1" stays "/v1")
  std::string to_string() const;
};

// Parses "http://host[:port][/path]". Returns nullopt and sets *why for anything
// else (https, missing host, bad port, spaces).
std::optional<Url> parse_url(std::string_view text, std::string* why);

enum class ErrorKind {
  kNone,
  kBadUrl,
  kConnectRefused,
  kConnectFailed,    // unreachable, resolution failure, reset while connecting
  kTimeout,          // the per-request deadline passed
  kHttpStatus,       // a non-2xx status (the code is in HttpResult::status)
  kMalformedSse,     // set by the caller: a body that is not valid OpenAI SSE
  kIncompleteStream, // set by the caller: the body ended before [DONE]
  kStreamError,      // set by the caller: an {"error":...} event in the stream
  kIoError,          // any other transport error after connecting
};

// The stable name used in reports and JSON: "ok", "bad_url", "connect_refused",
// "connect_failed", "timeout", "http_<status>", "malformed_sse",
// "incomplete_stream", "stream_error", "io_error".
std::string error_class_name(ErrorKind kind, int http_status);

struct HttpResult {
  ErrorKind error = ErrorKind::kNone;
  int status = 0;                  // HTTP status, 0 when no response head arrived
  bool body_complete = false;      // the body ended as framed (length / last chunk / close)
  bool stopped_by_callback = false;
  std::string detail;              // one line for failures (error body prefix, errno text)
};

using Clock = std::chrono::steady_clock;

// POSTs `body` (application/json) to url.base_path + path and, for a 2xx
// response, calls on_body with each piece of body bytes as it is read; on_body
// returns false to stop reading (the connection is then closed). For a non-2xx
// response the first 512 bytes of the body go to `detail` and on_body is not
// called. `api_key` non-empty adds "Authorization: Bearer <key>".
HttpResult post_stream(const Url& url, std::string_view path, std::string_view body,
                       const std::string& api_key, Clock::time_point deadline,
                       const std::function<bool(std::string_view)>& on_body);

}  // namespace pagoda::loadgen
