// HttpServer routing — what the server answers to a request whose head and body are
// read: the Host check, the route table (exact paths and "/*" ones), OPTIONS and CORS
// preflights, 405 with Allow, the API key, then the route's handler. The connection
// (http_connection.cpp) reads the request and begins its exchange, then calls
// route_request(); everything here answers through that exchange.

// First: Asio's configuration, the same in every TU of the module.
#include "http/asio_tsan.h"  // IWYU pragma: keep

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_connection_internal.h"
#include "http/http_wire.h"

namespace pagoda::http::detail {
namespace {

using namespace wire;

// Whether the request carries the API key (always, when none is set): as x-api-key
// or as Authorization: Bearer.
bool authorized(const HttpRequest& request, const std::string& key) {
  if (key.empty()) return true;
  auto trimmed = [](std::string_view v) {
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
    return v;
  };
  // Anthropic's SDKs send the key as x-api-key.
  if (const auto x = request.headers.find("x-api-key"); x != request.headers.end() && keys_equal(trimmed(x->second), key))
    return true;
  const auto it = request.headers.find("authorization");
  if (it == request.headers.end()) return false;
  std::string_view value = it->second;
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() || !iequals(value.substr(0, kScheme.size()), kScheme)) return false;
  return keys_equal(trimmed(value.substr(kScheme.size())), key);
}

}  // namespace

void route_request(const ServerShared& shared, const HttpRequest& request,
                   const std::shared_ptr<Exchange>& exchange, bool http11, size_t hosts,
                   std::string_view host, bool cors_allowed) {
  // The app's body for an error this transport answers (HttpServerOptions::error_body).
  auto error_response = [&shared](int status, std::string_view message) {
    return shared.options.error_body(status, message);
  };
  // Host, before routing: a request whose Host names another server gets nothing of
  // this one, not even a 404 that tells which paths exist.
  if (hosts > 1 || (hosts == 0 && http11)) {
    exchange->respond(error_response(400, hosts > 1 ? "more than one Host header"
                                                    : "an HTTP/1.1 request without a Host header"));
    return;
  }
  if (hosts == 1 && shared.options.api_key.empty() &&
      !host_header_allowed(host, shared.options.host)) {
    exchange->respond(error_response(
        403, "Host " + std::string(host).substr(0, 256) +
                 " does not name this server: without an API key, only localhost, 127.0.0.0/8, [::1] and the "
                 "address it listens on are accepted (this stops web pages that rebind their own DNS name to it); "
                 "set an API key to serve other names"));
    return;
  }
  auto it = shared.routes.find(request.path);
  // "/v1/responses/*" matches "/v1/responses/<one non-empty segment>".
  if (const size_t slash = request.path.rfind('/');
      it == shared.routes.end() && slash != std::string::npos && slash + 1 < request.path.size())
    it = shared.routes.find(request.path.substr(0, slash + 1) + "*");
  if (it == shared.routes.end()) {
    exchange->respond(error_response(404, "no route for " + request.method + " " + request.path));
    return;
  }
  const std::vector<Route>& routes = it->second;
  std::string allow;
  for (const Route& r : routes) allow += r.method + ", ";
  allow += "OPTIONS";
  if (request.method == "OPTIONS") {
    HttpResponse r;
    r.status = 204;
    r.headers = {{"Allow", allow}};
    if (cors_allowed) {  // a preflight from an allowed origin
      r.headers.insert(r.headers.end(),
                       {{"Access-Control-Allow-Methods", allow},
                        {"Access-Control-Allow-Headers",
                         "Authorization, Content-Type, x-api-key, anthropic-version, X-Request-Id"},
                        {"Access-Control-Max-Age", "86400"}});
    }
    exchange->respond(std::move(r));
    return;
  }
  const auto route = std::find_if(routes.begin(), routes.end(),
                                  [&](const Route& r) { return r.method == request.method; });
  if (route == routes.end()) {
    const std::string msg = "method " + request.method + " not allowed on " + request.path;
    HttpResponse r = routes.front().error_body ? routes.front().error_body(405, msg) : error_response(405, msg);
    r.headers.emplace_back("Allow", allow);
    exchange->respond(std::move(r));
    return;
  }
  if (route->auth && !authorized(request, shared.options.api_key)) {
    const std::string msg = "invalid or missing API key (Authorization: Bearer ... or x-api-key)";
    HttpResponse r = route->error_body ? route->error_body(401, msg) : error_response(401, msg);
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    exchange->respond(std::move(r));
    return;
  }
  try {
    route->handler(request, exchange);
  } catch (const std::exception& e) {
    log_error("handler for " + request.method + " " + request.path + " threw: " + e.what());
    exchange->respond(error_response(500, e.what()));
  } catch (...) {
    log_error("handler for " + request.method + " " + request.path + " threw");
    exchange->respond(error_response(500, "internal error"));
  }
}

}  // namespace pagoda::http::detail
