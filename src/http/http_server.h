// HttpServer — the HTTP/1.1 transport of `pagoda serve` (Boost.Beast over Asio).
//
// Contract:
// - Threads: `io_threads` threads run one io_context; every connection is an async
//   state machine on its own strand, so hundreds of idle or streaming connections
//   cost buffers, not threads. Handlers are called on an I/O thread and must not
//   block for long (tokenizing a prompt is fine; waiting for generation is not: a
//   handler that needs the engine submits and returns, and the engine thread answers
//   later through the HttpExchange, which is thread-safe).
// - Routing: exact path match after stripping the query string; a route path ending
//   in "/*" matches that prefix plus one non-empty final segment ("/v1/responses/*"
//   matches "/v1/responses/resp_1"), when no exact route does. Unknown path: 404;
//   known path, other method: 405 (with an Allow header). Both with the app's error
//   body (HttpServerOptions::error_body), except that a 405 or 401 on a path whose route
//   has an error_body is answered with that (Anthropic's shape on /v1/messages). `OPTIONS` on
//   any route answers 204 with Allow (and the CORS preflight headers for an allowed
//   origin).
// - Host: an HTTP/1.1 request without a Host header, or any with two, is 400 (RFC 9112
//   3.2). Without an api_key, a Host that does not name this server (localhost,
//   127.0.0.0/8, [::1], `host`; any IP literal when `host` is a wildcard; see
//   wire::host_header_allowed) is 403 on every route: a web page that rebinds its
//   own DNS name to this address cannot use it. With a key, the key protects it.
// - CORS: only for the origins in cors_origins ("*": any); none by default, so a page of
//   another origin can send a simple request but never read the answer. A same-origin
//   page (the built-in web UI) needs none.
// - Auth: when api_key is set, a route with `auth` needs `Authorization: Bearer KEY` or
//   `x-api-key: KEY` (Anthropic's header) (compared in constant time over the whole
//   key); otherwise 401. Routes without
//   `auth` (/health) stay open.
// - Limits: a body over max_body_bytes is answered 413 without reading it all; a
//   request whose headers do not arrive within header_timeout is dropped (so is one
//   whose body does not arrive within header_timeout after its headers); keep-alive
//   connections idle for idle_timeout are closed. A timeout <= 0 disables it.
// - Exchanges: each request gets one HttpExchange. The handler (or any thread, later)
//   answers exactly once, either with respond() or with start_stream() followed by
//   any number of send() and one finish(). A second answer is ignored.
// - Slow clients: bytes queued for a connection but not yet written are bounded by
//   max_pending_bytes; a send() that would exceed it, or a write that does not
//   complete within write_timeout (the client stopped reading), drops the connection.
//   A dropped or disconnected client fires the exchange's on_close callback exactly
//   once (on an I/O thread): the server cancels the request behind it. While a
//   response is pending, the connection keeps a read posted, so a client that resets
//   the connection is noticed within one I/O round trip even when nothing is being sent.
// - Half-close: EOF on read is not a hang-up. A client that shuts down its send side
//   after its requests (shutdown(SHUT_WR)) gets every answer to what it sent before, in
//   order, and then the connection closes. A client's plain close() reads the same as a
//   half-close, so it is noticed when bytes next reach it (its kernel answers them with
//   a reset): a stream at its next chunk, a non-streaming request only once answered.
// - Connections: at most max_connections are open. A connection accepted at the cap
//   first closes the least recently used idle one (waiting for its first request, or
//   kept alive between requests); a connection with a request in flight (being read,
//   handled, answered) is never closed for it. When none is idle, the new connection
//   gets a 503 error body (Retry-After: 1) and is closed. One line is logged when the
//   cap is hit, and again only after the count fell to 3/4 of it. accept() failing for
//   want of descriptors (EMFILE, ENFILE) while a connection waits closes an idle
//   connection to free one and retries; with none idle it retries with back-off (50 ms
//   doubling to 1 s), logging at most a line a minute: it neither spins nor stops the
//   server.
// - Request ids: every request gets HttpRequest::id (the client's X-Request-Id when
//   request_id.h accepts it, else a generated one) and every answer to it, errors and
//   streams included (the framing 400 / 501s, the Host 400 / 403), carries it back as an
//   X-Request-Id header. A connection refused at the cap gets a generated one too,
//   though no request of it is read (nor reported to on_complete).
// - Completion: on_complete is called exactly once per request that got an exchange:
//   when its answer is complete (all queued), or when its connection closes before that
//   (HttpCompletion::closed: status 499, nginx's "client closed request", when the client
//   reset the connection, a write to it failed, or it was dropped as too slow or timed
//   out; 503 when the server is stopping). A half-close is not a close: the answer still
//   goes out and is reported when complete.
// - Error bodies: every error the transport answers itself (the 400 / 501 of the framing,
//   the Host 400 / 403, 401, 404, 405, 413, 431, a handler's throw as 500, the 503 at the
//   cap) has the body HttpServerOptions::error_body makes from its status and message, so
//   the app gives them its own shape (pagoda serve: OpenAI's error object); without one,
//   plain_error_response. The transport knows no API's error shape.
// - Shutdown: stop_accepting() closes the listener (new connections are refused);
//   in_flight() counts exchanges not yet answered/finished; stop() closes every
//   connection (firing on_close for unanswered exchanges) and joins the I/O threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::string query;   // after '?', raw ("" when none)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // "ip:port" of the client
  std::string id;      // the request id (see Request ids above)
  uint64_t seq = 0;    // this server's count of requests at this one (from 1): unique, unlike a client's id
};

// The status logged and counted for a request whose client went away before its answer
// was complete (nginx's 499 "client closed request"); never sent.
inline constexpr int kStatusClientClosedRequest = 499;

// How one request ended, for the access log and metrics (HttpServerOptions::on_complete).
struct HttpCompletion {
  int status = 0;
  double seconds = 0;  // from the request's arrival to its last byte queued (or the close)
  // A complete response with status >= 400: its body (the error body). "" otherwise.
  std::string_view error_body;
  // The connection closed before the answer was complete (status 499, or 503 at stop).
  bool closed = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// The body of an error the transport answers itself, from its status and a message
// saying what was wrong (HttpServerOptions::error_body; see Error bodies above).
using ErrorBody = std::function<HttpResponse(int status, std::string_view message)>;

// The error body of a server given none: text/plain, the message and a newline.
HttpResponse plain_error_response(int status, std::string_view message);

// The answer side of one request. Thread-safe; every method may be called from any
// thread, after the handler has returned too. Holding the shared_ptr keeps it alive
// (not the connection: a closed connection makes every call a no-op).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // Answers with a complete response. Returns false when the client is gone.
  virtual bool respond(HttpResponse response) = 0;
  // Starts a streamed (chunked) response, e.g. text/event-stream for SSE.
  virtual bool start_stream(int status, std::string content_type,
                            std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // Queues one chunk (e.g. "data: {...}\n\n"). False when the client is gone or was
  // dropped for exceeding max_pending_bytes (on_close fires then).
  virtual bool send(std::string chunk) = 0;
  // Ends the stream (terminating chunk); the connection may be kept alive.
  virtual void finish() = 0;
  // Called once if the client disconnects (a reset, a failed write; not a half-close)
  // or is dropped before the exchange was answered or finished. Set it in the handler; if the client is already gone
  // when it is set, it is called at once (on the calling thread).
  virtual void on_close(std::function<void()> callback) = 0;
  // True once the client is gone.
  virtual bool closed() const = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpExchange>)>;

// The body of an error the transport answers on a route's path itself (401, 405), for
// routes whose API has its own error shape (Anthropic's). Null: HttpServerOptions::error_body.
using RouteErrorBody = HttpResponse (*)(int status, std::string_view message);

struct Route {
  std::string method;  // "GET" / "POST"
  std::string path;    // exact, or ending in "/*" (one final segment)
  bool auth = true;    // needs the API key when one is set
  HttpHandler handler;
  RouteErrorBody error_body = nullptr;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: pick a free port (see HttpServer::port())
  int io_threads = 2;
  std::string api_key;   // "" = no auth
  // Origins whose web pages may read the answers: "scheme://host[:port]" exactly as a
  // browser sends it in Origin, or "*" for any. Empty: no CORS headers at all.
  std::vector<std::string> cors_origins;
  size_t max_body_bytes = 8u << 20;
  size_t max_pending_bytes = 1u << 20;
  double write_timeout_s = 30;
  double header_timeout_s = 30;
  double idle_timeout_s = 60;
  // Open connections at most (see Connections above); 0: default_max_connections().
  int64_t max_connections = 0;
  // The body of the errors the transport answers itself (see Error bodies above); empty:
  // plain_error_response.
  ErrorBody error_body;
  // Called once per request (see Completion above), on an I/O thread (or the thread
  // calling stop()), for the access log and metrics.
  std::function<void(const HttpRequest&, const HttpCompletion&)> on_complete;
};

// Three quarters of the soft RLIMIT_NOFILE (768 under the usual 1024, 48 under 64), at
// most 65536: every connection holds a descriptor, and the quarter left is for the rest
// of the process (the model's files, a disk prefix cache's records, the listener, the
// event loop, stdio), so that connections alone never run the process out of
// descriptors. Rejected: a fixed number (too many under a small limit, which is how 60
// idle connections under a 64-descriptor limit locked everyone out, and needlessly few
// under a large one); the whole limit (nothing left for the rest). The 65536 bound is
// for memory (tens of KiB of buffers per busy connection), not descriptors.
int64_t default_max_connections();

class HttpServer {
 public:
  // Binds and listens (throws pagoda::Error naming host:port when it cannot); does
  // not start the I/O threads.
  HttpServer(HttpServerOptions options, std::vector<Route> routes);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();           // starts the I/O threads
  uint16_t port() const;  // the bound port
  void stop_accepting();  // closes the listener
  int64_t in_flight() const;  // exchanges not yet answered / finished
  int64_t connections() const;
  // Open connections parked waiting for a request (the ones the cap may close); O(open
  // connections). What a test waits on before it relies on their least-recently-used
  // order, which the I/O threads stamp when they get to it, not when the client acts.
  int64_t idle_connections() const;
  int64_t max_connections() const;  // the cap in force (the default resolved)
  // Closes everything, joins the threads; idempotent. Requires: not called from an I/O
  // thread (a handler or a callback), which it would join.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::http
