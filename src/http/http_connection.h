// The connection side of HttpServer (internal to src/http): what the server and its
// connections share, and the entry points the server's lifecycle (http_server.cpp)
// uses. Connections live in http_connection.cpp, exchanges in http_exchange.cpp (both
// declared, with the routing, in http_connection_internal.h).
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/http_server.h"

namespace pagoda::http::detail {

class Connection;

// Open connections, so that stop() can close them. Guarded by `mu`; `stopping` is set
// under it, so a connection accepted during stop() is either in the snapshot stop()
// takes or refused by add().
struct Registry {
  std::mutex mu;
  bool stopping = false;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> open;
};

struct ServerShared {
  HttpServerOptions options;  // max_connections resolved (> 0)
  std::map<std::string, std::vector<Route>, std::less<>> routes;  // path -> its methods
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> connections{0};
  // Open connections less those claimed by close_idle_connection() whose close has not
  // run yet: what the cap is checked against. One counter, changed by one atomic step
  // at each claim, close and un-claim, so the acceptor reads a value that was true at
  // some instant; open less claimed in two counters, two loads, could read a close half done
  // (one counter already lowered, the other not) and let a connection over the cap.
  std::atomic<int64_t> counted_against_cap{0};
  std::atomic<uint64_t> requests{0};  // HttpRequest::seq of the last one
  std::atomic<bool> stopping{false};
  Registry registry;
};

// Serves one accepted socket until it closes; the connection lives in its own handlers.
// Called on an I/O thread.
void serve_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerShared> shared);

// Serves one accepted socket at the connection cap with none idle: answers 503 (the
// error body, Retry-After: 1) without reading the request, then closes it.
void refuse_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerShared> shared);

// Closes the least recently used idle connection (waiting for a request, nothing of it
// read; never one with a request in flight): claims it at once (it stops counting
// against the cap: counted_against_cap) and posts its close, which keeps it after all if bytes
// of a request have arrived by then. False when none is idle. Any thread; O(open
// connections).
bool close_idle_connection(ServerShared& shared);

// Open connections idle now (as close_idle_connection() reads them). Any thread.
int64_t count_idle_connections(ServerShared& shared);

// Marks the registry stopping (a connection accepted from now on is refused) and closes
// every open connection: posted onto its strand when `posted`, else right here (when no
// I/O thread runs any more). Unanswered exchanges fire on_close.
void close_connections(ServerShared& shared, bool posted);

void log_error(const std::string& what);  // one Error line in the log (common/log.h)

}  // namespace pagoda::http::detail
