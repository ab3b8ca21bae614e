// HttpServer — the lifecycle of the Beast HTTP/1.1 transport: bind, accept, I/O threads,
// stop. The contract is in http_server.h; connections (the state machine)
// are in http_connection.cpp, exchanges in http_exchange.cpp, the wire helpers in http_wire.cpp.

// First: Asio's configuration, the same in every TU of the module.
#include "http/asio_tsan.h"  // IWYU pragma: keep

#include "http/http_server.h"

#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "http/http_connection.h"

namespace pagoda::http {

using namespace detail;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

// default_max_connections()'s bound (see http_server.h).
constexpr int64_t kMaxDefaultConnections = 65536;

struct HttpServer::Impl {
  std::shared_ptr<ServerShared> shared = std::make_shared<ServerShared>();
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  // The acceptor is used by the accept handler (an I/O thread) and stop_accepting()
  // (any thread): `accept_mu` serializes them, so stop_accepting() closes it
  // synchronously, from any thread, with any number of I/O threads.
  std::mutex accept_mu;
  tcp::acceptor acceptor{ioc};
  uint16_t port = 0;
  // on_accept()'s (one accept at a time): the cap's log line is out; failed accepts in a
  // row (for the back-off); the last accept error's log line, and failures since.
  bool cap_logged = false;
  int accept_failures = 0;
  std::optional<std::chrono::steady_clock::time_point> accept_logged_at;
  int64_t accept_failures_unlogged = 0;

  std::mutex life_mu;  // start() / stop()
  bool started = false;
  bool stopped = false;
  std::vector<std::thread> threads;
  std::mutex run_mu;
  std::condition_variable run_cv;
  int running = 0;  // I/O threads inside ioc.run()

  void listen() {
    const HttpServerOptions& o = shared->options;
    const std::string where = o.host + ":" + std::to_string(o.port);
    ErrorCode ec;
    tcp::resolver resolver(ioc);
    const auto endpoints = resolver.resolve(o.host, std::to_string(o.port),
                                            tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) throw Error("cannot listen on " + where + ": " + ec.message());
    for (const auto& entry : endpoints) {
      ErrorCode e;
      acceptor.open(entry.endpoint().protocol(), e);
      if (!e) acceptor.set_option(net::socket_base::reuse_address(true), e);
      if (!e) acceptor.bind(entry.endpoint(), e);
      if (!e) acceptor.listen(net::socket_base::max_listen_connections, e);
      if (!e) {
        port = acceptor.local_endpoint().port();
        return;
      }
      ec = e;
      ErrorCode ignored;
      acceptor.close(ignored);
    }
    throw Error("cannot listen on " + where + ": " + (ec ? ec.message() : std::string("no address")));
  }

  void do_accept() {
    std::lock_guard lock(accept_mu);
    if (!acceptor.is_open()) return;
    acceptor.async_accept(net::make_strand(ioc), [this](ErrorCode ec, tcp::socket socket) {
      on_accept(ec, std::move(socket));
    });
  }

  // One accept is outstanding at a time, so on_accept() runs for one connection after
  // another (on any I/O thread): cap_logged and the accept_* members need no lock.
  void on_accept(ErrorCode ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;  // the acceptor was closed
    if (ec) {
      on_accept_error(ec);
      return;
    }
    accept_failures = 0;
    const int64_t cap = shared->options.max_connections;
    const int64_t open = shared->counted_against_cap.load();
    if (open >= cap) {
      const bool made_room = close_idle_connection(*shared);
      if (!cap_logged) {
        cap_logged = true;
        log_error(std::to_string(open) + " connections open, the limit (--max-connections " + std::to_string(cap) +
                  "): closing the least recently used idle one for each new one, refusing new ones with 503 "
                  "while none is idle (logged once until fewer than " + std::to_string(cap_rearm(cap)) +
                  " are open)");
      }
      if (!made_room) {
        refuse_connection(std::move(socket), shared);
        do_accept();
        return;
      }
    } else if (cap_logged && open < cap_rearm(cap)) {
      cap_logged = false;
    }
    serve_connection(std::move(socket), shared);
    do_accept();
  }

  // The cap's log line comes back once the count has fallen this low: a count that
  // hovers at the cap (a flood; every new connection closing an idle one) logs once.
  static int64_t cap_rearm(int64_t cap) { return cap - cap / 4; }

  // accept() failed. Out of descriptors (EMFILE: this process; ENFILE: the system) the
  // listener stays readable, so retrying at once would spin. When a connection is
  // waiting to be accepted, an idle one is closed to free a descriptor and the accept
  // retried once that close has run (10 ms); with none idle (or nobody waiting: Linux
  // reports EMFILE before it looks at the queue), retries back off from 50 ms to 1 s.
  // Other errors retry the same way. Logged at most once a minute, with the count.
  void on_accept_error(ErrorCode ec) {
    const bool out_of_descriptors = ec == net::error::no_descriptors ||
                                    ec == boost::system::errc::too_many_files_open_in_system ||
                                    ec == net::error::no_buffer_space || ec == net::error::no_memory;
    ++accept_failures;
    ++accept_failures_unlogged;
    const auto now = std::chrono::steady_clock::now();
    if (!accept_logged_at || now - *accept_logged_at >= std::chrono::minutes(1)) {
      log_error("accept: " + ec.message() +
                (out_of_descriptors ? "; closing idle connections to free descriptors, retrying" : "; retrying") +
                (accept_failures_unlogged > 1 ? " (" + std::to_string(accept_failures_unlogged) +
                                                    " failures since the last line)"
                                              : std::string()) +
                " (logged at most once a minute)");
      accept_logged_at = now;
      accept_failures_unlogged = 0;
    }
    std::chrono::milliseconds delay(10);
    const bool freeing = out_of_descriptors && connection_waiting() &&
                         (closing_idle() || close_idle_connection(*shared));
    if (!freeing)
      delay = std::chrono::milliseconds(std::min<int64_t>(1000, int64_t{50} << std::min(accept_failures - 1, 5)));
    auto timer = std::make_shared<net::steady_timer>(ioc, delay);
    timer->async_wait([this, timer](ErrorCode) { do_accept(); });
  }

  // Whether a claimed idle connection's close is still to run (a descriptor about to
  // free). Two loads, so a close half done may read either way: it only picks a delay.
  bool closing_idle() const { return shared->connections.load() > shared->counted_against_cap.load(); }

  // Whether a connection waits in the listen queue (a poll, which needs no descriptor).
  bool connection_waiting() {
    std::lock_guard lock(accept_mu);
    if (!acceptor.is_open()) return false;
    pollfd p{acceptor.native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  }

  void stop_accepting() {
    std::lock_guard lock(accept_mu);
    ErrorCode ec;
    acceptor.close(ec);
  }

  void stop() {
    std::lock_guard life(life_mu);
    if (stopped) return;
    stopped = true;
    shared->stopping.store(true);
    stop_accepting();
    close_connections(*shared, /*posted=*/true);
    work.reset();
    if (started) {
      // Closed sockets abort every pending operation, so the I/O threads run out of
      // work within a round trip; the deadline only guards against a callback that
      // blocks (then ioc.stop() leaves its connection to the loop below).
      {
        std::unique_lock lock(run_mu);
        run_cv.wait_for(lock, std::chrono::seconds(2), [&] { return running == 0; });
      }
      ioc.stop();
      for (std::thread& t : threads) t.join();
      threads.clear();
    }
    // No I/O thread runs now: close what is left here (a connection whose posted
    // close never ran, or every one when start() was never called).
    close_connections(*shared, /*posted=*/false);
  }
};

HttpServer::HttpServer(HttpServerOptions options, std::vector<Route> routes) : impl_(std::make_unique<Impl>()) {
  PAGODA_CHECK(options.io_threads >= 1, "HttpServerOptions::io_threads must be >= 1");
  for (Route& route : routes) {
    PAGODA_CHECK(static_cast<bool>(route.handler), "route " + route.method + " " + route.path + " has no handler");
    auto& same_path = impl_->shared->routes[route.path];
    for (const Route& other : same_path) {
      PAGODA_CHECK(other.method != route.method, "route " + route.method + " " + route.path + " given twice");
    }
    same_path.push_back(std::move(route));
  }
  if (options.max_connections <= 0) options.max_connections = default_max_connections();
  if (!options.error_body) options.error_body = plain_error_response;
  impl_->shared->options = std::move(options);
  impl_->listen();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& s = *impl_;
  std::lock_guard life(s.life_mu);
  if (s.started || s.stopped) return;
  s.started = true;
  s.work.emplace(s.ioc.get_executor());
  s.do_accept();
  s.running = s.shared->options.io_threads;
  for (int i = 0; i < s.shared->options.io_threads; ++i) {
    s.threads.emplace_back([&s] {
      for (;;) {
        try {
          s.ioc.run();
          break;
        } catch (const std::exception& e) {  // our handlers catch; this is a last resort
          log_error(std::string("I/O thread: ") + e.what());
        }
      }
      {
        std::lock_guard lock(s.run_mu);
        --s.running;
      }
      s.run_cv.notify_all();
    });
  }
}

uint16_t HttpServer::port() const { return impl_->port; }
void HttpServer::stop_accepting() { impl_->stop_accepting(); }
int64_t HttpServer::in_flight() const { return impl_->shared->in_flight.load(); }
int64_t HttpServer::connections() const { return impl_->shared->connections.load(); }
int64_t HttpServer::idle_connections() const { return detail::count_idle_connections(*impl_->shared); }
int64_t HttpServer::max_connections() const { return impl_->shared->options.max_connections; }
void HttpServer::stop() { impl_->stop(); }

int64_t default_max_connections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMaxDefaultConnections;
  const auto soft = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, rlim_t{1} << 40));
  return std::clamp<int64_t>(soft - soft / 4, 1, kMaxDefaultConnections);
}

}  // namespace pagoda::http
