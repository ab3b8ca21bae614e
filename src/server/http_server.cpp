// HttpServer — the lifecycle of the Beast HTTP/1.1 transport: bind, accept, I/O threads,
// stop. The contract is in http_server.h; connections and exchanges (the state machine)
// are in http_connection.cpp, the wire helpers in http_wire.cpp.

// ThreadSanitizer does not model std::atomic_thread_fence (-Wtsan warns at every Asio
// handler); Asio's queues are mutex-guarded, so its fences add nothing TSan needs. Both
// Asio TUs of the server (this one and http_server.cpp) set it, so they agree.
#if defined(__SANITIZE_THREAD__) && !defined(BOOST_ASIO_DISABLE_FENCED_BLOCK)
#define BOOST_ASIO_DISABLE_FENCED_BLOCK 1
#endif

#include "server/http_server.h"

#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "server/http_connection.h"

namespace pagoda::server {

using namespace http_detail;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

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

  void on_accept(ErrorCode ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;  // the acceptor was closed
    if (ec) {
      // EMFILE and friends: log and retry shortly instead of spinning on the error.
      log_error("accept: " + ec.message());
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](ErrorCode) { do_accept(); });
      return;
    }
    serve_connection(std::move(socket), shared);
    do_accept();
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
void HttpServer::stop() { impl_->stop(); }

}  // namespace pagoda::server
