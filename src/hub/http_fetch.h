// A small blocking HTTP/1.1 + HTTPS client for the Hub (Boost.Beast over Asio, OpenSSL for TLS).
//
// Contract:
// - One request per call and per connection ("Connection: close"): a pull makes a handful of
//   requests (one listing, one HEAD and one GET per file), so keep-alive would save ~1 RTT
//   per file out of seconds-to-minutes of transfer; independent calls also make every call
//   thread-safe (each owns its io_context, socket and TLS context).
// - Redirects are NOT followed here: the Hub layer needs the headers of the first response
//   (X-Repo-Commit, X-Linked-Etag sit on the 302 of /resolve/) and decides where to go next.
// - Timeouts are per operation (connect, TLS handshake, send, each read of the head or of a
//   body piece), not for the whole exchange: a 5 GB download must not be cut by a deadline,
//   but a stalled peer is given up on after `timeout`.
// - TLS: the peer certificate is verified (chain against `ca_bundle_file` when non-empty, else
//   OpenSSL's default store, which honours SSL_CERT_FILE / SSL_CERT_DIR) and the host name or
//   IP address of the URL must match the certificate (SAN). SNI is sent for names.
// - Transport failures (resolve, connect, TLS, reset, timeout) throw TransportError, whose
//   message never contains request headers (the Authorization header holds a token). HTTP
//   error statuses are NOT thrown: the status is returned for the caller to interpret.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace pagoda::hub {

// A network-level failure (retryable); distinct from an HTTP error status.
class TransportError : public Error {
 public:
  explicit TransportError(const std::string& msg) : Error(msg) {}
};

struct ParsedUrl {
  bool https = false;
  std::string host;    // no brackets, no port
  std::string port;    // "80" / "443" by default
  std::string target;  // path + query, starts with '/'
  // scheme://host[:port] as given (default ports omitted).
  std::string origin() const;
};

// Parses "http(s)://host[:port][/path][?query]". Throws Error for anything else.
ParsedUrl parse_url(std::string_view url);

// The scheme of a URI reference, lower-cased ("https" of "HTTPS://x", "file" of
// "file:///etc/passwd"); "" when it has none (RFC 3986 4.2: a relative reference's first
// segment holds no ':' before a '/', '?' or '#').
std::string uri_scheme(std::string_view reference);

// Resolves `location` (absolute URL, "//host/path", "/absolute-path" or a relative path)
// against `base`. Throws Error for a location with another scheme than http or https
// (file:, ftp:, data:, ...): a redirect is never a way off HTTP, and read as a relative path
// "file:///etc/passwd" would be requested from the same server again and again.
std::string resolve_location(const ParsedUrl& base, std::string_view location);

// A byte count from a header (X-Linked-Size, Content-Length): one or more ASCII digits and
// nothing else (no sign, space or suffix), at most 2^64 - 1; nullopt otherwise. std::stoull
// is not used: it reads "12abc" as 12, skips leading spaces and wraps "-1" to 2^64 - 1.
std::optional<uint64_t> parse_byte_count(std::string_view text);

struct HttpRequest {
  std::string method = "GET";  // "GET" or "HEAD"
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{10000};
  // When set, no operation waits past it either: a bound on the whole exchange (an image
  // fetched for a request), where `timeout` alone bounds each operation.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::string ca_bundle_file;  // PEM bundle replacing the default store; "" = default store
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased; last value wins
  std::string body;                            // only when no body sink was given (capped)
  bool body_complete = false;                  // the body ended as framed (length / chunks)
  uint64_t body_bytes = 0;                     // bytes delivered (to the sink or `body`)

  // The header's value, or "" when absent. `name` is lower case.
  std::string header(const std::string& name) const;
};

// Called with each piece of a 2xx body as it arrives; return false to stop reading.
using BodySink = std::function<bool(std::string_view)>;
// Called once with the status and headers of a 2xx response before its body; return false to
// stop without reading the body.
using HeadCheck = std::function<bool(const HttpResponse&)>;

// Performs one request. With a sink, a 2xx body streams into it and only error bodies land in
// response.body (first 4 KiB); without one the body is collected into response.body (up to
// `max_body_bytes`, beyond which it throws Error). A body cut short by the peer returns
// normally with body_complete == false (the caller decides whether to resume).
// Throws TransportError for network trouble before the response head arrives and for timeouts.
HttpResponse http_fetch(const HttpRequest& request, const BodySink* sink = nullptr,
                        uint64_t max_body_bytes = 64u << 20, const HeadCheck* on_head = nullptr);

}  // namespace pagoda::hub
