#include "loadgen/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdint>
#include <limits>

namespace pagoda::loadgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Url::to_string() const { return "http://" + host + ":" + port + base_path; }

std::optional<Url> parse_url(std::string_view text, std::string* why) {
  auto fail = [&](const std::string& msg) -> std::optional<Url> {
    if (why) *why = msg;
    return std::nullopt;
  };
  constexpr std::string_view kScheme = "http://";
  if (text.substr(0, 8) == "https://") return fail("https is not supported (plain http:// only)");
  if (text.substr(0, kScheme.size()) != kScheme) return fail("URL must start with http://");
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c))) {
      return fail("URL contains whitespace or control characters");
    }
  }
  std::string_view rest = text.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return fail("user info in URL is not supported");
  Url url;
  if (!authority.empty() && authority[0] == '[') {  // [::1]:8080
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return fail("unterminated IPv6 address");
    url.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority[0] != ':') return fail("junk after IPv6 address");
  } else {
    size_t colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (url.host.empty()) return fail("URL has no host");
  if (!authority.empty()) {  // ":port"
    std::string_view port = authority.substr(1);
    if (port.empty() || port.size() > 5) return fail("bad port");
    int value = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return fail("bad port");
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) return fail("port out of range");
    url.port = std::string(port);
  }
  if (path.find_first_of("?#") != std::string_view::npos) return fail("query or fragment in URL");
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.base_path = std::string(path);
  return url;
}

std::string error_class_name(ErrorKind kind, int http_status) {
  switch (kind) {
    case ErrorKind::kNone: return "ok";
    case ErrorKind::kBadUrl: return "bad_url";
    case ErrorKind::kConnectRefused: return "connect_refused";
    case ErrorKind::kConnectFailed: return "connect_failed";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kHttpStatus: return "http_" + std::to_string(http_status);
    case ErrorKind::kMalformedSse: return "malformed_sse";
    case ErrorKind::kIncompleteStream: return "incomplete_stream";
    case ErrorKind::kStreamError: return "stream_error";
    case ErrorKind::kIoError: return "io_error";
  }
  return "unknown";
}

namespace {

// Runs one async operation to completion on `ioc` (the caller's thread does the
// work: this is blocking I/O with the tcp_stream's deadline as the timeout).
// Rejected alternative: synchronous Beast calls, which have no timeout at all.
void run_one(asio::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

}  // namespace

HttpResult post_stream(const Url& url, std::string_view path, std::string_view body,
                       const std::string& api_key, Clock::time_point deadline,
                       const std::function<bool(std::string_view)>& on_body) {
  HttpResult result;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  boost::system::error_code ec;

  tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) {
    result.error = ErrorKind::kConnectFailed;
    result.detail = "resolve " + url.host + ": " + ec.message();
    return result;
  }
  if (Clock::now() >= deadline) {
    result.error = ErrorKind::kTimeout;
    return result;
  }
  stream.expires_at(deadline);
  stream.async_connect(endpoints, [&](boost::system::error_code e, const tcp::endpoint&) { ec = e; });
  run_one(ioc);
  if (ec) {
    if (ec == beast::error::timeout) {
      result.error = ErrorKind::kTimeout;
    } else if (ec == asio::error::connection_refused) {
      result.error = ErrorKind::kConnectRefused;
    } else {
      result.error = ErrorKind::kConnectFailed;
    }
    result.detail = "connect " + url.host + ":" + url.port + ": " + ec.message();
    return result;
  }

  http::request<http::string_body> req{http::verb::post, url.base_path + std::string(path), 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "pagoda-bench");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.set(http::field::connection, "close");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  req.body() = std::string(body);
  req.prepare_payload();

  auto classify_io = [&](const boost::system::error_code& e, const char* what) {
    result.error = e == beast::error::timeout ? ErrorKind::kTimeout : ErrorKind::kIoError;
    result.detail = std::string(what) + ": " + e.message();
  };

  http::async_write(stream, req, [&](boost::system::error_code e, size_t) { ec = e; });
  run_one(ioc);
  if (ec) {
    classify_io(ec, "send");
    return result;
  }

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // A long stream is fine; the deadline bounds it. Not boost::none: Beast 1.74
  // compares a Content-Length against the optional limit with `len > limit`, which
  // is true for an empty optional, so every sized body would fail.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::async_read_header(stream, buffer, parser, [&](boost::system::error_code e, size_t) { ec = e; });
  run_one(ioc);
  if (ec) {
    classify_io(ec, "read response head");
    return result;
  }
  result.status = static_cast<int>(parser.get().result_int());
  bool success = result.status >= 200 && result.status < 300;
  std::string error_body;

  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    http::async_read_some(stream, buffer, parser, [&](boost::system::error_code e, size_t) { ec = e; });
    run_one(ioc);
    if (ec == http::error::need_buffer) ec = {};
    size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      std::string_view piece(chunk, n);
      if (!success) {
        if (error_body.size() < 512) error_body.append(piece.substr(0, 512 - error_body.size()));
      } else if (!on_body(piece)) {
        result.stopped_by_callback = true;
        break;
      }
    }
    if (ec) {
      if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
          ec == asio::error::eof || ec == asio::error::connection_reset) {
        // The server closed the connection before the framing said the body was
        // complete: the caller sees body_complete == false.
        ec = {};
        break;
      }
      classify_io(ec, "read body");
      if (!success) break;  // a failed error body still counts as the status
      return result;
    }
  }
  result.body_complete = parser.is_done();
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  if (!success) {
    result.error = ErrorKind::kHttpStatus;
    for (char& c : error_body) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    result.detail = "HTTP " + std::to_string(result.status) + ": " + error_body;
  }
  return result;
}

}  // namespace pagoda::loadgen
