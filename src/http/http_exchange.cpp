// HttpServer exchanges — the answer side of one request (HttpExchange in http_server.h),
// callable from any thread. The class and its phases are described in
// http_connection_internal.h; the connection it posts its output to is in
// http_connection.cpp, reached only through the connection_* hooks, so this file holds
// no socket and touches no strand itself.

// First: Asio's configuration, the same in every TU of the module.
#include "http/asio_tsan.h"  // IWYU pragma: keep

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "http/http_connection_internal.h"
#include "http/http_wire.h"

namespace pagoda::http::detail {

using namespace wire;

bool Exchange::post_locked(std::string bytes, Output kind, int status, bool keep_alive, std::string error_body) {
  std::shared_ptr<Connection> conn = conn_.lock();
  if (!conn) {
    closed_ = true;
    return false;
  }
  connection_post_output(std::move(conn), this, std::move(bytes), kind, status, keep_alive, std::move(error_body));
  return true;
}

bool Exchange::respond(HttpResponse response) {
  std::function<void()> dropped;  // destroyed after the unlock: it may own anything
  std::lock_guard lock(mu_);
  if (closed_ || phase_ != Phase::kUnanswered) return false;
  phase_ = Phase::kDone;
  release_in_flight_locked();
  dropped = std::move(on_close_);
  const bool keep_alive = keep_alive_ && !shared_->stopping.load();
  response.headers.emplace_back("X-Request-Id", request_id_);
  response.headers.insert(response.headers.end(), cors_.begin(), cors_.end());
  // Only errors' bodies travel to on_complete (their message is the log's reason); a
  // success's body may be megabytes.
  std::string error_body = response.status >= 400 ? response.body : std::string();
  return post_locked(serialize_response(response, http11_, keep_alive), Output::kResponse,
                     response.status, keep_alive, std::move(error_body));
}

bool Exchange::start_stream(int status, std::string content_type,
                            std::vector<std::pair<std::string, std::string>> headers) {
  std::lock_guard lock(mu_);
  if (closed_ || phase_ != Phase::kUnanswered) return false;
  phase_ = Phase::kStreaming;
  chunked_ = http11_;
  stream_keep_alive_ = keep_alive_ && chunked_ && !shared_->stopping.load();
  stream_status_ = status;
  headers.emplace_back("X-Request-Id", request_id_);
  headers.insert(headers.end(), cors_.begin(), cors_.end());
  return post_locked(serialize_stream_head(status, content_type, headers, chunked_, stream_keep_alive_),
                     Output::kStreamHead, status, stream_keep_alive_);
}

bool Exchange::send(std::string chunk) {
  std::lock_guard lock(mu_);
  if (closed_ || phase_ != Phase::kStreaming) return false;
  if (chunk.empty()) return true;  // an empty chunk would end a chunked stream
  std::shared_ptr<Connection> conn = conn_.lock();
  if (!conn) {
    closed_ = true;
    return false;
  }
  std::string bytes = chunked_ ? frame_chunk(chunk) : std::move(chunk);
  // Only this exchange adds to the connection's pending bytes while it streams (under
  // mu_); the strand only subtracts, so the check cannot be raced past the bound.
  if (connection_pending_bytes(*conn) + bytes.size() > shared_->options.max_pending_bytes) {
    closed_ = true;
    connection_post_close(*conn, true);  // fires on_close on the strand
    return false;
  }
  return post_locked(std::move(bytes), Output::kChunk, stream_status_, stream_keep_alive_);
}

void Exchange::finish() {
  std::function<void()> dropped;
  std::lock_guard lock(mu_);
  if (closed_ || phase_ != Phase::kStreaming) return;
  phase_ = Phase::kDone;
  release_in_flight_locked();
  dropped = std::move(on_close_);
  post_locked(chunked_ ? std::string("0\r\n\r\n") : std::string(), Output::kStreamEnd, stream_status_,
              stream_keep_alive_);
}

void Exchange::on_close(std::function<void()> callback) {
  std::function<void()> unused;  // destroyed after the unlock
  {
    std::lock_guard lock(mu_);
    if (!close_notified_) {
      if (phase_ != Phase::kDone) {
        unused = std::move(on_close_);
        on_close_ = std::move(callback);
      } else {
        unused = std::move(callback);  // answered: it can never fire
      }
      return;
    }
    if (!closed_unanswered_) {
      unused = std::move(callback);
      return;
    }
  }
  if (callback) callback();  // the client is already gone: at once, on this thread
}

void Exchange::notify_closed() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    if (close_notified_) return;
    close_notified_ = true;
    if (phase_ == Phase::kDone) return;
    closed_unanswered_ = true;
    release_in_flight_locked();
    callback = std::move(on_close_);
  }
  if (!callback) return;
  try {
    callback();
  } catch (const std::exception& e) {
    log_error(std::string("on_close callback threw: ") + e.what());
  } catch (...) {
    log_error("on_close callback threw");
  }
}

}  // namespace pagoda::http::detail
