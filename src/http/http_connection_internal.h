// Internal to src/http: what a connection (http_connection.cpp) shares with the two
// parts it hands off. The Exchange, the thread-safe answer side of one request, has
// its methods in http_exchange.cpp and reaches its connection only through the three
// connection_* hooks below. The routing of a parsed request (Host check, route lookup,
// OPTIONS, 405, the API key, the handler call) is in http_routing.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/http_connection.h"
#include "http/http_server.h"

namespace pagoda::http::detail {

// What an exchange hands to its connection (on the strand).
enum class Output { kResponse, kStreamHead, kChunk, kStreamEnd };

// ---------------------------------------------------------------------------------
// Exchange: the answer side of one request. Every method locks `mu_`; the connection
// is reached only by posting onto its strand (never run inline, so no lock is held
// across user code and the strand never waits for `mu_` while the exchange waits for
// the strand). Phases: unanswered -> (respond) done, or unanswered -> (start_stream)
// streaming -> (finish) done. `closed_` = no call reaches the connection any more.
class Exchange final : public HttpExchange {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // `cors`: the CORS headers every answer to this request carries (wire::cors_headers).
  Exchange(std::shared_ptr<ServerShared> shared, std::weak_ptr<Connection> conn, bool http11,
           bool keep_alive, std::string request_id, Headers cors)
      : shared_(std::move(shared)),
        conn_(std::move(conn)),
        http11_(http11),
        keep_alive_(keep_alive),
        request_id_(std::move(request_id)),
        cors_(std::move(cors)) {
    shared_->in_flight.fetch_add(1);
  }
  ~Exchange() override {
    if (counted_) shared_->in_flight.fetch_sub(1);
  }

  bool respond(HttpResponse response) override;
  bool start_stream(int status, std::string content_type,
                    std::vector<std::pair<std::string, std::string>> headers) override;
  bool send(std::string chunk) override;
  void finish() override;
  void on_close(std::function<void()> callback) override;
  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_;
  }

  // Connection side, on its strand: the connection is closed. Fires on_close once if
  // the exchange was unanswered or streaming.
  void notify_closed();

 private:
  enum class Phase { kUnanswered, kStreaming, kDone };

  void release_in_flight_locked() {
    if (counted_) {
      counted_ = false;
      shared_->in_flight.fetch_sub(1);
    }
  }
  // Posts `bytes` to the connection; false (and closed) when it is gone. `error_body`:
  // an error response's body, for on_complete.
  bool post_locked(std::string bytes, Output kind, int status, bool keep_alive, std::string error_body = {});

  const std::shared_ptr<ServerShared> shared_;
  const std::weak_ptr<Connection> conn_;
  const bool http11_;
  const bool keep_alive_;  // what the request asked for
  const std::string request_id_;  // sent back as X-Request-Id
  const Headers cors_;

  mutable std::mutex mu_;
  Phase phase_ = Phase::kUnanswered;
  bool closed_ = false;
  bool close_notified_ = false;     // the connection reported its close
  bool closed_unanswered_ = false;  // ... while unanswered or streaming
  bool counted_ = true;             // still counted in in_flight
  bool chunked_ = false;            // streaming: chunked framing (HTTP/1.1)
  bool stream_keep_alive_ = false;
  int stream_status_ = 0;
  std::function<void()> on_close_;
};

// ---- the connection side an Exchange reaches (http_connection.cpp; any thread) ------
// Adds `bytes` to the connection's pending bytes and posts Connection::output onto its
// strand. `error_body`: an error response's body, for on_complete.
void connection_post_output(std::shared_ptr<Connection> conn, const Exchange* from, std::string bytes,
                            Output kind, int status, bool keep_alive, std::string error_body);
// Bytes queued on the connection (by exchanges or the server) and not yet written.
size_t connection_pending_bytes(const Connection& conn);
// Posts the connection's close onto its strand; `abort` resets it (RST).
void connection_post_close(Connection& conn, bool abort);

// ---- routing (http_routing.cpp) ----------------------------------------------------
// Answers `request` on `exchange` (just begun, unanswered): the Host check, the route
// for its path, OPTIONS (a CORS preflight when `cors_allowed`), 405, the API key, then
// the route's handler (a throw answers 500). `hosts`: how many Host headers the request
// has, `host`: the value of the first (empty when none). On the connection's strand.
void route_request(const ServerShared& shared, const HttpRequest& request,
                   const std::shared_ptr<Exchange>& exchange, bool http11, size_t hosts,
                   std::string_view host, bool cors_allowed);

}  // namespace pagoda::http::detail
