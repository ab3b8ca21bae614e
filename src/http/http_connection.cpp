// HttpServer connections — the Beast HTTP/1.1 state machine. The contract is in
// http_server.h; the server lifecycle (bind, accept, stop) is in http_server.cpp.
//
// The file reads top to bottom: the connection state machine, the hooks its exchanges
// post through, and the entry points the server uses. The state shared by server and
// connections is in http_connection.h; the exchange (the thread-safe answer side) is in
// http_exchange.cpp and the routing of a read request in http_routing.cpp, both declared
// in http_connection_internal.h; the wire helpers (the plain error body, response heads,
// chunk framing, the key compare) are in http_wire.{h,cpp}.
//
// One connection, all on its strand (so no member of Connection needs a lock; only
// `pending_bytes_` is also touched by exchanges, hence atomic):
//
//   wait_request ──readable──> read_header ──headers──> [100 Continue] read_body
//        ^                          (framing checked: request_framing)  │ request
//        │ keep-alive                                                  v
//   after_exchange <──last byte written── exchange (handler called; a background read
//        │ close                             stays posted to notice the client leaving)
//        v
//     linger (shutdown send, discard input <= 1 s) ──> close
//
// Any read/write error, a timeout or a drop ends in close(), which fires the exchange's
// on_close when it was still unanswered or streaming. Timers: `read_timer_` bounds the
// wait for a request (header_timeout for the first request of a connection,
// idle_timeout between keep-alive requests), its headers (header_timeout) and its body
// (header_timeout again, from the end of the headers) and the linger; `write_timer_`
// bounds each batch of writes (write_timeout). A Content-Length body is read by Beast, a
// chunked one by ChunkedDecoder (http_wire.h); any other framing is refused.
//
// Ownership: asio handlers own the Connection (shared_ptr); the Connection owns its
// current Exchange; the Exchange points back weakly, so a connection dies with its
// last handler and a caller holding an exchange after the close only gets no-ops.
// Server, connections and exchanges share one ServerShared (options, routes,
// counters, the registry of open connections), so an exchange that outlives the
// server still has valid counters to touch (it touches none: it is closed by then).

// First: Asio's configuration, the same in every TU of the module.
#include "http/asio_tsan.h"  // IWYU pragma: keep

#include "http/http_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include "common/ascii.h"
#include "common/error.h"
#include "common/log.h"
#include "http/http_connection_internal.h"
#include "http/http_wire.h"
#include "http/request_id.h"

namespace pagoda::http::detail {
namespace {

using namespace wire;

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

// Request headers above 64 KiB are refused with 431: the largest legitimate headers we
// expect (a long bearer token, cookies from a browser UI) are a few KiB; Beast's
// default (8 KiB) is tight for browsers, and more only feeds slowloris-style abuse.
constexpr uint32_t kHeaderLimitBytes = 64u << 10;
// While an exchange is pending, the background read keeps appending what the client
// sends (pipelined requests) to the request buffer; past 64 KiB it stops reading, and
// a close is then noticed only by the next write. Rejected: discarding the bytes
// (that would corrupt a pipelined request) or dropping the client (pipelining is legal).
constexpr size_t kMaxBufferedBytes = 64u << 10;
constexpr size_t kBackgroundReadBytes = 4096;
// A chunked body is read 16 KiB at a time: decoded as it comes, so the buffer never
// holds more than one read of it.
constexpr size_t kChunkedReadBytes = 16u << 10;
// After the last response of a connection that will not be kept alive, we shut down
// our send side and discard input for up to 1 s / 1 MiB before closing: closing with
// unread input makes the kernel send RST, which can destroy the response (e.g. a 413
// whose body the client is still sending) before the client reads it.
constexpr double kLingerSeconds = 1.0;
constexpr size_t kLingerMaxBytes = 1u << 20;

}  // namespace

void log_error(const std::string& what) { logger().write(LogLevel::Error, "pagoda http: " + what); }

namespace {

// Beast 1.74 hands out boost::string_view.
std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

Clock::duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

// ---------------------------------------------------------------------------------
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<ServerShared> shared)
      : socket_(std::move(socket)),
        strand_(socket_.get_executor()),
        shared_(std::move(shared)),
        read_timer_(strand_),
        write_timer_(strand_) {
    ErrorCode ec;
    const auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  // Any thread (the acceptor's). Refuses (closes the socket) when the server stops.
  // With `refusal`, writes it instead of reading a request, then closes (refuse_connection).
  void start(std::string refusal = {}) {
    ErrorCode ec;
    socket_.set_option(tcp::no_delay(true), ec);  // SSE chunks are small: no Nagle delay
    {
      // Once registered, stop() may close it on the strand: no socket call after this.
      std::lock_guard lock(shared_->registry.mu);
      if (shared_->registry.stopping) {
        socket_.close(ec);
        closed_ = true;
        return;
      }
      shared_->registry.open.emplace(this, weak_from_this());
      shared_->connections.fetch_add(1);
      shared_->counted_against_cap.fetch_add(1);
    }
    if (!refusal.empty()) {
      net::post(strand_, [self = shared_from_this(), refusal = std::move(refusal)]() mutable {
        self->send_refusal(std::move(refusal));
      });
      return;
    }
    net::post(strand_, [self = shared_from_this()] { self->wait_request(); });
  }

  // Idle: parked in wait_request() with nothing of a request read (before the first
  // one, or kept alive between two). idle_since_ holds when it became idle (steady
  // clock ticks, > 0), kNotIdle otherwise, kClaimed once close_idle_connection() chose
  // it (its evict() is posted). Read from the acceptor's thread, hence atomic; claimed
  // and left by compare-exchange, so it is claimed only while parked, and a claimed
  // connection reads nothing until evict() has decided on its strand.
  static constexpr int64_t kNotIdle = 0;
  static constexpr int64_t kClaimed = -1;
  int64_t idle_since() const { return idle_since_.load(); }
  bool claim_idle(int64_t since) { return since > 0 && idle_since_.compare_exchange_strong(since, kClaimed); }

  // Any thread: evict() on the strand.
  void post_evict() {
    net::post(strand_, [self = shared_from_this()] { self->evict(); });
  }

  // Any thread.
  void post_close(bool abort) {
    net::post(strand_, [self = shared_from_this(), abort] { self->close(abort); });
  }

  // On the strand (or on any thread once no I/O thread runs): closes the socket, fires
  // the exchange's on_close if it was pending. `abort` resets the connection (RST)
  // instead of a graceful FIN, dropping whatever the kernel still buffers for it.
  void close(bool abort) {
    if (closed_) return;
    closed_ = true;
    ErrorCode ec;
    read_timer_.cancel();
    write_timer_.cancel();
    if (abort) socket_.set_option(net::socket_base::linger(true, 0), ec);
    socket_.close(ec);
    queue_.clear();
    {
      std::lock_guard lock(shared_->registry.mu);
      shared_->registry.open.erase(this);
    }
    if (idle_since_.exchange(kNotIdle) != kClaimed) shared_->counted_against_cap.fetch_sub(1);
    shared_->connections.fetch_sub(1);
    if (auto exchange = std::move(exchange_)) {
      // Its answer is not complete (unanswered, streaming, or answered but not yet
      // queued here): the client never gets it. Reported before on_close cancels the
      // work, so the access log and /metrics see the same status.
      if (!exchange_done_)
        report_complete(shared_->stopping.load() ? 503 : kStatusClientClosedRequest, {}, true);
      exchange->notify_closed();
    }
  }

  // On the strand: an exchange's output (see Exchange::post_locked).
  void output(const Exchange* from, std::string bytes, Output kind, int status, bool keep_alive,
              const std::string& error_body) {
    if (closed_ || exchange_.get() != from) return;
    if (!bytes.empty()) queue_.push_back(std::move(bytes));
    if (kind == Output::kResponse || kind == Output::kStreamEnd) {
      exchange_done_ = true;
      keep_alive_ = keep_alive;
      report_complete(status, error_body, false);
    }
    do_write();
    if (exchange_done_ && !writing_ && queue_.empty()) after_exchange();
  }

  const net::any_io_executor& strand() const { return strand_; }
  // Bytes queued by exchanges (or the server) and not yet written to the socket.
  std::atomic<size_t> pending_bytes_{0};

 private:
  // Claimed by close_idle_connection(): closed, unless bytes of a request arrived since
  // it was chosen (a new connection's first request, a keep-alive client's next one),
  // which makes it busy, not idle: it is then kept and reads its request. The check is
  // here, on the strand, because only the strand may touch the socket. What is left is
  // a request whose first bytes arrive between the check and the close, the race of
  // every idle keep-alive close, which HTTP clients retry (RFC 9112 9.3.1).
  void evict() {
    if (closed_) return;
    ErrorCode ec;
    const size_t waiting = socket_.available(ec);
    if (ec || waiting == 0) {
      close(false);
      return;
    }
    if (idle_since_.exchange(kNotIdle) == kClaimed) shared_->counted_against_cap.fetch_add(1);
    if (!idle_wait_pending_) read_header();  // the wait ended while claimed and left the reading here
  }

  // The 503 of a connection refused at the cap, then linger() and close, as after any
  // answer that does not keep the connection: no request is read, no exchange made.
  void send_refusal(std::string response) {
    if (closed_) return;
    pending_bytes_.fetch_add(response.size());
    queue_.push_back(std::move(response));
    exchange_done_ = true;
    keep_alive_ = false;
    do_write();
  }

  // ---- reading a request -------------------------------------------------------
  void wait_request() {
    if (closed_) return;
    if (buffer_.size() > 0) {  // a pipelined request is already here
      read_header();
      return;
    }
    if (peer_eof_) {  // everything the client sent is answered, and it sends no more
      close(false);
      return;
    }
    int64_t not_idle = kNotIdle;
    const int64_t now = std::max<int64_t>(1, Clock::now().time_since_epoch().count());
    if (!idle_since_.compare_exchange_strong(not_idle, now)) return;  // claimed: evict() decides
    const auto& o = shared_->options;
    arm(read_timer_, first_request_ ? o.header_timeout_s : o.idle_timeout_s, false);
    wait_readable();
  }

  // Idle: waits for the first byte of a request (or EOF, or an error).
  void wait_readable() {
    idle_wait_pending_ = true;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](ErrorCode ec) {
      self->idle_wait_pending_ = false;
      if (self->closed_) return;
      // A readiness edge can reach the wait after the bytes that raised it were read
      // (the previous request's, its epoll event taken late by a busy I/O thread): then
      // nothing is there. Leaving idle on it parked the connection in read_header()
      // (header timeout, not closable at the cap): 1 wait in ~100 under load did.
      if (!ec && !self->readable_now() && self->idle_since_.load() > 0) {
        self->wait_readable();
        return;
      }
      int64_t since = self->idle_since_.load();
      while (since > 0 && !self->idle_since_.compare_exchange_weak(since, kNotIdle)) {
      }
      if (since == kClaimed) return;  // claimed by close_idle_connection(): evict() decides
      if (ec) {
        self->close(false);
        return;
      }
      self->read_header();
    });
  }

  // Whether a read would not block: bytes, EOF or an error are there (a peek).
  bool readable_now() {
    char byte = 0;
    const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimitBytes);
    parser_->body_limit(shared_->options.max_body_bytes);
    arm(read_timer_, shared_->options.header_timeout_s, false);
    beast::http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](ErrorCode ec, size_t) { self->on_header(ec); });
  }

  void on_header(ErrorCode ec) {
    if (closed_) return;
    disarm(read_timer_);
    first_request_ = false;
    arrival_ = Clock::now();
    if (ec == beast::http::error::body_limit) fill_request_head();  // the head is parsed: log it
    if (ec) {
      on_read_error(ec);
      return;
    }
    fill_request_head();
    const auto& msg = parser_->get();
    // The framing is decided here, not by Beast: Beast frames by Content-Length when the
    // Transfer-Encoding does not end in chunked ("chunked, identity", "xchunked"), ignores
    // codings before chunked ("gzip, chunked") and reads no body at all for such a
    // request without a Content-Length, so that its body was parsed as the next request.
    const auto te = request_.headers.find("transfer-encoding");
    const RequestFraming framing = request_framing(
        te == request_.headers.end() ? std::nullopt : std::optional<std::string_view>(te->second),
        request_.headers.count("content-length") > 0, msg.version() >= 11);
    if (framing.kind == RequestFraming::Kind::kRefused) {
      reply_error(framing.status, framing.message);
      return;
    }
    if (framing.kind == RequestFraming::Kind::kLength && parser_->is_done()) {
      dispatch();
      return;
    }
    if (msg.version() >= 11 && iequals(sv(msg[beast::http::field::expect]), "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      pending_bytes_.fetch_add(kContinue.size());
      queue_.emplace_back(kContinue);
      do_write();  // concurrently with the body read below: one read and one write
    }
    arm(read_timer_, shared_->options.header_timeout_s, false);
    if (framing.kind == RequestFraming::Kind::kChunked) {
      chunked_.emplace(shared_->options.max_body_bytes);
      read_chunked_body();
      return;
    }
    beast::http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](ErrorCode ec, size_t) { self->on_body(ec); });
  }

  // A chunked body is decoded by ChunkedDecoder (strict; see http_wire.h), not by Beast,
  // whose decoder takes a bare LF inside a chunk line for part of it (so such a body
  // waited for the header timeout instead of being refused) and buffers a chunk line
  // of any length. Decodes what is buffered, then reads more; the bytes after the body
  // stay in `buffer_` for the next request.
  void read_chunked_body() {
    const auto data = buffer_.data();
    const size_t used = chunked_->feed(std::string_view(static_cast<const char*>(data.data()), data.size()),
                                       request_.body);
    buffer_.consume(used);
    switch (chunked_->status()) {
      case ChunkedDecoder::Status::kNeedMore:
        socket_.async_read_some(buffer_.prepare(kChunkedReadBytes), [self = shared_from_this()](ErrorCode ec, size_t n) {
          self->on_chunked_read(ec, n);
        });
        return;
      case ChunkedDecoder::Status::kDone:
        disarm(read_timer_);
        chunked_.reset();
        dispatch();
        return;
      case ChunkedDecoder::Status::kMalformed:
        disarm(read_timer_);
        reply_error(400, chunked_->error());
        return;
      case ChunkedDecoder::Status::kTooLarge:
        disarm(read_timer_);
        reply_error(413, body_limit_message());
        return;
    }
  }

  void on_chunked_read(ErrorCode ec, size_t n) {
    if (closed_) return;
    buffer_.commit(n);
    if (ec) {
      close(false);  // the client left mid-body (EOF) or a socket error: nobody to answer
      return;
    }
    read_chunked_body();
  }

  void on_body(ErrorCode ec) {
    if (closed_) return;
    disarm(read_timer_);
    if (ec) {
      on_read_error(ec);
      return;
    }
    request_.body = std::move(parser_->get().body());
    dispatch();
  }

  void on_read_error(ErrorCode ec) {
    if (ec == beast::http::error::body_limit) {
      reply_error(413, body_limit_message());
    } else if (ec == beast::http::error::header_limit) {
      reply_error(431, "request headers exceed the limit of " + std::to_string(kHeaderLimitBytes) +
                           " bytes");
    } else if (ec.category() == beast::http::make_error_code(beast::http::error::end_of_stream).category() &&
               ec != beast::http::error::end_of_stream && ec != beast::http::error::partial_message) {
      reply_error(400, "malformed HTTP request: " + ec.message());
    } else {
      close(false);  // the client left (EOF mid-request too), or a socket error
    }
  }

  std::string body_limit_message() const {
    return "request body exceeds the limit of " + std::to_string(shared_->options.max_body_bytes) + " bytes";
  }

  void fill_request_head() {
    const auto& msg = parser_->get();
    request_ = HttpRequest();
    request_.method = std::string(sv(msg.method_string()));
    const std::string_view target = sv(msg.target());
    const size_t q = target.find('?');
    request_.path = std::string(target.substr(0, q));
    request_.query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));
    for (const auto& field : msg) {
      auto [it, inserted] =
          request_.headers.emplace(ascii_lower(sv(field.name_string())), std::string(sv(field.value())));
      if (!inserted) {
        it->second += ", ";
        it->second += sv(field.value());
      }
    }
    request_.remote = remote_;
    if (const auto id = request_.headers.find("x-request-id"); id != request_.headers.end())
      request_.id = request_id_for(id->second);
  }

  // ---- one exchange --------------------------------------------------------------
  std::shared_ptr<Exchange> begin_exchange(bool http11, bool keep_alive, Exchange::Headers cors = {}) {
    if (request_.id.empty()) request_.id = new_request_id();
    request_.seq = shared_->requests.fetch_add(1) + 1;
    exchange_ = std::make_shared<Exchange>(shared_, weak_from_this(), http11, keep_alive, request_.id,
                                           std::move(cors));
    exchange_done_ = false;
    background_read();
    return exchange_;
  }

  // The app's body for an error this transport answers (HttpServerOptions::error_body).
  HttpResponse error_response(int status, std::string_view message) const {
    return shared_->options.error_body(status, message);
  }

  // A request the parser refused: answer and close (what follows it is unknown).
  void reply_error(int status, const std::string& message) {
    request_.remote = remote_;
    if (arrival_ == Clock::time_point{}) arrival_ = Clock::now();
    begin_exchange(true, false)->respond(error_response(status, message));
  }

  void dispatch() {
    const auto& msg = parser_->get();
    const bool http11 = msg.version() >= 11;
    const bool keep_alive = parser_->keep_alive();
    const auto origin = request_.headers.find("origin");
    Exchange::Headers cors =
        cors_headers(shared_->options.cors_origins, origin == request_.headers.end() ? "" : origin->second);
    const bool cors_allowed = std::any_of(cors.begin(), cors.end(), [](const auto& h) {
      return h.first == "Access-Control-Allow-Origin";
    });
    auto exchange = begin_exchange(http11, keep_alive, std::move(cors));
    route_request(*shared_, request_, exchange, http11, msg.count(beast::http::field::host),
                  sv(msg[beast::http::field::host]), cors_allowed);
  }

  void report_complete(int status, std::string_view error_body, bool closed) {
    const auto& cb = shared_->options.on_complete;
    if (!cb) return;
    HttpCompletion done;
    done.status = status;
    done.seconds = std::chrono::duration<double>(Clock::now() - arrival_).count();
    done.error_body = error_body;
    done.closed = closed;
    try {
      cb(request_, done);
    } catch (const std::exception& e) {
      log_error(std::string("on_complete threw: ") + e.what());
    } catch (...) {
      log_error("on_complete threw");
    }
  }

  // The exchange's answer is complete and written: next request or close.
  void after_exchange() {
    exchange_.reset();
    exchange_done_ = false;
    parser_.reset();
    request_ = HttpRequest();
    arrival_ = Clock::time_point{};
    if (keep_alive_ && !shared_->stopping.load()) {
      if (background_read_pending_) {
        // The next request is read with async_read_header, which must not overlap
        // the background read: cancel it; its handler (aborted, or with the bytes it
        // got) continues with wait_request().
        want_next_request_ = true;
        ErrorCode ec;
        socket_.cancel(ec);
      } else {
        wait_request();
      }
    } else {
      linger();
    }
  }

  // A read posted while an exchange is pending (to notice a client that leaves) and
  // while lingering (discarding). Appends to `buffer_`, so pipelined bytes are kept.
  void background_read() {
    if (background_read_pending_ || closed_ || peer_eof_) return;
    if (!lingering_ && buffer_.size() >= kMaxBufferedBytes) return;
    background_read_pending_ = true;
    socket_.async_read_some(buffer_.prepare(kBackgroundReadBytes),
                            [self = shared_from_this()](ErrorCode ec, size_t n) {
                              self->on_background_read(ec, n);
                            });
  }

  void on_background_read(ErrorCode ec, size_t n) {
    background_read_pending_ = false;
    if (closed_) return;
    buffer_.commit(n);
    if (lingering_) {
      linger_bytes_ += buffer_.size();
      buffer_.consume(buffer_.size());
      if (ec || linger_bytes_ > kLingerMaxBytes) {
        close(false);
      } else {
        background_read();
      }
      return;
    }
    // EOF is a half-close, not a hang-up: a client that shut down its send side
    // (shutdown(SHUT_WR)) after its requests waits for their answers, and one that
    // closed its socket reads the same. So the requests already here are answered, and
    // no more is read (nothing more comes). A client that is gone for good is noticed
    // when bytes reach it: its kernel answers them with a reset, which watch_for_reset()
    // sees (a stream: at its next chunk; a non-streaming request: only once its answer
    // is written). Rejected: cancelling at EOF (what this did before), which dropped
    // every half-closed client's answers, 4 requests in 5 and 19 of 20 pipelined ones.
    if (ec == net::error::eof) {
      peer_eof_ = true;
      watch_for_reset();
    }
    if (want_next_request_) {
      want_next_request_ = false;
      if (ec && ec != net::error::operation_aborted && ec != net::error::eof) {
        close(false);
      } else {
        wait_request();
      }
      return;
    }
    if (ec == net::error::eof) return;
    if (ec) {
      close(false);  // a reset or a socket error: the client is gone (fires on_close if pending)
      return;
    }
    if (exchange_) background_read();
  }

  // After EOF no read is posted, so this wait holds the connection (asio handlers own
  // it) while its requests are answered, and ends it when the client resets it: a
  // reset raises EPOLLERR / EPOLLHUP, which completes a wait_error at once, before any
  // later write would fail. It is cancelled by close().
  void watch_for_reset() {
    if (reset_watch_pending_ || closed_) return;
    reset_watch_pending_ = true;
    socket_.async_wait(tcp::socket::wait_error, [self = shared_from_this()](ErrorCode ec) {
      self->reset_watch_pending_ = false;
      if (self->closed_) return;
      if (ec == net::error::operation_aborted) {  // a socket_.cancel(), not a close: keep watching
        self->watch_for_reset();
        return;
      }
      self->close(false);  // the client reset the connection: it is gone (fires on_close if pending)
    });
  }

  void linger() {
    if (peer_eof_) {  // all input is read, so a plain close sends no reset: nothing to discard
      close(false);
      return;
    }
    lingering_ = true;
    ErrorCode ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) {
      close(false);
      return;
    }
    buffer_.consume(buffer_.size());
    arm(read_timer_, kLingerSeconds, false);
    background_read();
  }

  // ---- writing -------------------------------------------------------------------
  void do_write() {
    if (writing_ || queue_.empty() || closed_) return;
    writing_ = true;
    writing_bytes_ = 0;
    write_bufs_.clear();
    // Gather what is queued (many small SSE chunks) into one writev.
    while (!queue_.empty() && in_write_.size() < 64) {
      in_write_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    for (const std::string& s : in_write_) {
      write_bufs_.emplace_back(s.data(), s.size());
      writing_bytes_ += s.size();
    }
    arm(write_timer_, shared_->options.write_timeout_s, true);
    net::async_write(socket_, write_bufs_, [self = shared_from_this()](ErrorCode ec, size_t) {
      self->on_write(ec);
    });
  }

  void on_write(ErrorCode ec) {
    writing_ = false;
    if (closed_) return;
    disarm(write_timer_);
    if (ec) {
      close(true);
      return;
    }
    pending_bytes_.fetch_sub(writing_bytes_);
    in_write_.clear();
    write_bufs_.clear();
    if (!queue_.empty()) {
      do_write();
    } else if (exchange_done_) {
      after_exchange();
    }
  }

  // ---- timers --------------------------------------------------------------------
  // A timer's handler checks that the expiry it waited for is still the timer's (a
  // re-arm or disarm between the expiry and the handler's run leaves it in the
  // future), so a stale expiry never closes a connection that moved on.
  void arm(net::steady_timer& timer, double seconds, bool abort) {
    if (seconds <= 0) {
      disarm(timer);
      return;
    }
    timer.expires_after(seconds_to_duration(seconds));
    timer.async_wait([self = shared_from_this(), &timer, abort](ErrorCode ec) {
      if (ec || self->closed_ || timer.expiry() > Clock::now()) return;
      self->close(abort);
    });
  }
  static void disarm(net::steady_timer& timer) { timer.expires_at(Clock::time_point::max()); }

  std::atomic<int64_t> idle_since_{kNotIdle};
  tcp::socket socket_;
  const net::any_io_executor strand_;
  const std::shared_ptr<ServerShared> shared_;
  std::string remote_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  bool closed_ = false;

  // Reading.
  beast::flat_buffer buffer_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;
  std::optional<ChunkedDecoder> chunked_;  // while a chunked body is read
  bool first_request_ = true;
  bool background_read_pending_ = false;
  bool want_next_request_ = false;
  bool idle_wait_pending_ = false;  // wait_request()'s wait for a request is posted
  bool peer_eof_ = false;  // the client half-closed (EOF read): it sends nothing more
  bool reset_watch_pending_ = false;
  bool lingering_ = false;
  size_t linger_bytes_ = 0;

  // The current exchange: from the request's dispatch until its last byte is written.
  std::shared_ptr<Exchange> exchange_;
  HttpRequest request_;
  Clock::time_point arrival_{};
  bool exchange_done_ = false;  // its answer is complete (all queued)
  bool keep_alive_ = false;     // ... and the connection stays open after it

  // Writing: `queue_` waits, `in_write_` is being written (`write_bufs_` points into it).
  std::deque<std::string> queue_;
  std::vector<std::string> in_write_;
  std::vector<net::const_buffer> write_bufs_;
  size_t writing_bytes_ = 0;
  bool writing_ = false;
};

// ---------------------------------------------------------------------------------
void connection_post_output(std::shared_ptr<Connection> conn, const Exchange* from, std::string bytes,
                            Output kind, int status, bool keep_alive, std::string error_body) {
  conn->pending_bytes_.fetch_add(bytes.size());
  const net::any_io_executor& strand = conn->strand();
  net::post(strand, [conn = std::move(conn), from, bytes = std::move(bytes), kind, status, keep_alive,
                     error_body = std::move(error_body)]() mutable {
    conn->output(from, std::move(bytes), kind, status, keep_alive, error_body);
  });
}

size_t connection_pending_bytes(const Connection& conn) { return conn.pending_bytes_.load(); }

void connection_post_close(Connection& conn, bool abort) { conn.post_close(abort); }

void serve_connection(tcp::socket socket, std::shared_ptr<ServerShared> shared) {
  std::make_shared<Connection>(std::move(socket), std::move(shared))->start();
}

void refuse_connection(tcp::socket socket, std::shared_ptr<ServerShared> shared) {
  HttpResponse r = shared->options.error_body(503, "the server is at its limit of " +
                                                   std::to_string(shared->options.max_connections) +
                                                   " connections (--max-connections) and none is idle; retry later");
  r.headers.emplace_back("Retry-After", "1");
  r.headers.emplace_back("X-Request-Id", new_request_id());  // no request read: a generated id
  std::string bytes = serialize_response(r, /*http11=*/true, /*keep_alive=*/false);
  std::make_shared<Connection>(std::move(socket), std::move(shared))->start(std::move(bytes));
}

bool close_idle_connection(ServerShared& shared) {
  // A claim fails only when that connection's request arrived (or it closed) between
  // the scan and the claim: scan again, a few times at most.
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::shared_ptr<Connection> oldest;
    int64_t oldest_since = 0;
    {
      std::lock_guard lock(shared.registry.mu);
      for (const auto& [ptr, weak] : shared.registry.open) {
        std::shared_ptr<Connection> conn = weak.lock();
        if (!conn) continue;
        const int64_t since = conn->idle_since();
        if (since > 0 && (oldest_since == 0 || since < oldest_since)) {
          oldest_since = since;
          oldest = std::move(conn);
        }
      }
    }
    if (!oldest) return false;
    if (oldest->claim_idle(oldest_since)) {
      // A close() that runs before this line sees the claim and leaves the count to us.
      shared.counted_against_cap.fetch_sub(1);
      oldest->post_evict();
      return true;
    }
  }
  return false;
}

int64_t count_idle_connections(ServerShared& shared) {
  std::lock_guard lock(shared.registry.mu);
  int64_t idle = 0;
  for (const auto& [ptr, weak] : shared.registry.open) {
    if (std::shared_ptr<Connection> conn = weak.lock(); conn && conn->idle_since() > 0) ++idle;
  }
  return idle;
}

void close_connections(ServerShared& shared, bool posted) {
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(shared.registry.mu);
    shared.registry.stopping = true;
    for (auto& [ptr, weak] : shared.registry.open) {
      if (auto conn = weak.lock()) open.push_back(std::move(conn));
    }
  }
  for (const auto& conn : open) {
    if (posted) {
      conn->post_close(false);
    } else {
      conn->close(false);
    }
  }
}

}  // namespace pagoda::http::detail
