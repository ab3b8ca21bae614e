#include "hub/http_fetch.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <algorithm>
#include <limits>

#include "common/ascii.h"

namespace pagoda::hub {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

std::string ParsedUrl::origin() const {
  std::string s = (https ? "https://" : "http://");
  s += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != (https ? "443" : "80")) s += ":" + port;
  return s;
}

ParsedUrl parse_url(std::string_view url) {
  ParsedUrl u;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    u.https = true;
    rest = url.substr(8);
  } else {
    throw Error("bad URL '" + std::string(url) + "': expected http:// or https://");
  }
  size_t path_at = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_at);
  u.target = path_at == std::string_view::npos ? "/" : std::string(rest.substr(path_at));
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos)
    throw Error("bad URL '" + std::string(url) + "': user info in URLs is not supported");
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) throw Error("bad URL '" + std::string(url) + "': unclosed '['");
    u.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') throw Error("bad URL '" + std::string(url) + "'");
      port = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) throw Error("bad URL '" + std::string(url) + "': no host");
  for (char c : port)
    if (c < '0' || c > '9') throw Error("bad URL '" + std::string(url) + "': bad port");
  u.port = port.empty() ? (u.https ? "443" : "80") : std::string(port);
  for (char c : u.target)
    if (static_cast<unsigned char>(c) <= ' ') throw Error("bad URL '" + std::string(url) + "': space in path");
  return u;
}

std::string uri_scheme(std::string_view reference) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (reference.empty() || !alpha(reference[0])) return "";
  for (size_t i = 1; i < reference.size(); ++i) {
    const char c = reference[i];
    if (c == ':') return ascii_lower(reference.substr(0, i));
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') return "";
  }
  return "";
}

std::string resolve_location(const ParsedUrl& base, std::string_view location) {
  const std::string scheme = uri_scheme(location);
  if (!scheme.empty()) {
    if (scheme != "http" && scheme != "https") {
      std::string shown(location.substr(0, 200));
      for (char& c : shown)
        if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) c = '?';
      throw Error(base.origin() + " redirected to '" + shown +
                  "': refused, only http:// and https:// redirects are followed");
    }
    return scheme + std::string(location.substr(scheme.size()));  // "HTTPS://x" as parse_url reads it
  }
  if (location.substr(0, 2) == "//") return (base.https ? "https:" : "http:") + std::string(location);
  if (!location.empty() && location[0] == '/') return base.origin() + std::string(location);
  std::string dir = base.target.substr(0, base.target.find('?'));
  dir = dir.substr(0, dir.rfind('/') + 1);
  return base.origin() + dir + std::string(location);
}

std::optional<uint64_t> parse_byte_count(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;  // past 2^64 - 1
    value = value * 10 + digit;
  }
  return value;
}

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

// The time the next operation may take: `timeout`, cut to what is left before `deadline`
// (rounded up, so an expiry is never before the deadline).
std::chrono::milliseconds op_timeout(const HttpRequest& request) {
  if (!request.deadline) return request.timeout;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*request.deadline - std::chrono::steady_clock::now());
  return std::clamp(left, std::chrono::milliseconds(0), request.timeout);
}

// Runs the one pending async operation on the caller's thread; the tcp_stream's expiry is the
// timeout. Rejected alternative: synchronous Beast calls, which have no timeout at all (Asio's
// blocking reads poll without a limit even with SO_RCVTIMEO set).

void run_one(asio::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

bool is_peer_close(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == ssl::error::stream_truncated;
}

template <class Stream>
HttpResponse exchange(asio::io_context& ioc, Stream& stream, beast::tcp_stream& lowest, const ParsedUrl& url,
                      const HttpRequest& request, const BodySink* sink, uint64_t max_body_bytes,
                      const HeadCheck* on_head) {
  const std::string where = url.origin();
  boost::system::error_code ec;
  const bool head = request.method == "HEAD";
  http::request<http::empty_body> req{head ? http::verb::head : http::verb::get, url.target, 11};
  req.set(http::field::host, url.port == (url.https ? "443" : "80") ? url.host : url.host + ":" + url.port);
  req.set(http::field::user_agent, "pagoda/0.1; hf_hub-compatible");
  req.set(http::field::accept_encoding, "identity");
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : request.headers) req.set(name, value);

  lowest.expires_after(op_timeout(request));
  http::async_write(stream, req, [&](boost::system::error_code e, size_t) { ec = e; });
  run_one(ioc);
  if (ec) throw TransportError(where + ": sending the request failed: " + ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // Not boost::none: Beast 1.74 compares a Content-Length with `len > limit`, true for an
  // empty optional, so every sized body would fail.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head) parser.skip(true);
  lowest.expires_after(op_timeout(request));
  http::async_read_header(stream, buffer, parser, [&](boost::system::error_code e, size_t) { ec = e; });
  run_one(ioc);
  if (ec) {
    if (ec == beast::error::timeout) throw TransportError(where + ": no response within the timeout");
    throw TransportError(where + ": reading the response failed: " + ec.message());
  }
  HttpResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get())
    response.headers[ascii_lower(std::string(field.name_string()))] = std::string(field.value());
  const bool success = response.status >= 200 && response.status < 300;
  const bool to_sink = sink != nullptr && success;
  if (success && on_head && !(*on_head)(response)) return response;

  char chunk[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    lowest.expires_after(op_timeout(request));
    http::async_read_some(stream, buffer, parser, [&](boost::system::error_code e, size_t) { ec = e; });
    run_one(ioc);
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      std::string_view piece(chunk, n);
      response.body_bytes += n;
      if (to_sink) {
        if (!(*sink)(piece)) return response;
      } else if (!success) {
        if (response.body.size() < 4096) response.body.append(piece.substr(0, 4096 - response.body.size()));
      } else {
        if (response.body.size() + n > max_body_bytes)
          throw Error(where + ": response body larger than " + std::to_string(max_body_bytes) + " bytes");
        response.body.append(piece);
      }
    }
    if (ec) {
      if (is_peer_close(ec)) return response;  // cut short: body_complete stays false
      if (ec == beast::error::timeout) {
        if (to_sink) return response;  // a stalled transfer is resumable like a cut one
        throw TransportError(where + ": the transfer stalled (timeout)");
      }
      throw TransportError(where + ": reading the body failed: " + ec.message());
    }
  }
  response.body_complete = true;
  return response;
}

void connect(asio::io_context& ioc, beast::tcp_stream& stream, const ParsedUrl& url,
             std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) throw TransportError("cannot resolve " + url.host + ": " + ec.message());
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](boost::system::error_code e, const tcp::endpoint&) { ec = e; });
  run_one(ioc);
  if (ec == beast::error::timeout) throw TransportError("cannot connect to " + url.origin() + ": timed out");
  if (ec) throw TransportError("cannot connect to " + url.origin() + ": " + ec.message());
}

}  // namespace

HttpResponse http_fetch(const HttpRequest& request, const BodySink* sink, uint64_t max_body_bytes,
                        const HeadCheck* on_head) {
  PAGODA_CHECK(request.method == "GET" || request.method == "HEAD", "http_fetch: GET or HEAD only");
  const ParsedUrl url = parse_url(request.url);
  asio::io_context ioc;
  if (!url.https) {
    beast::tcp_stream stream(ioc);
    connect(ioc, stream, url, op_timeout(request));
    return exchange(ioc, stream, stream, url, request, sink, max_body_bytes, on_head);
  }
  ssl::context ctx(ssl::context::tls_client);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);  // the Hub serves 1.2 and 1.3
  boost::system::error_code ec;
  if (!request.ca_bundle_file.empty()) {
    ctx.load_verify_file(request.ca_bundle_file, ec);
    if (ec) throw Error("cannot read the CA bundle " + request.ca_bundle_file + ": " + ec.message());
  } else {
    ctx.set_default_verify_paths(ec);
    if (ec) throw Error("cannot load the system CA store: " + ec.message());
  }
  ctx.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  SSL* handle = stream.native_handle();
  boost::system::error_code addr_ec;
  asio::ip::make_address(url.host, addr_ec);
  if (!addr_ec) {
    // An IP literal: match the certificate's iPAddress SAN; no SNI (RFC 6066 forbids it).
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), url.host.c_str());
  } else {
    SSL_set_tlsext_host_name(handle, url.host.c_str());
    SSL_set1_host(handle, url.host.c_str());
  }
  connect(ioc, beast::get_lowest_layer(stream), url, op_timeout(request));
  beast::get_lowest_layer(stream).expires_after(op_timeout(request));
  stream.async_handshake(ssl::stream_base::client, [&](boost::system::error_code e) { ec = e; });
  run_one(ioc);
  if (ec) {
    std::string why = ec.message();
    long verify = SSL_get_verify_result(handle);
    if (verify != X509_V_OK) why = std::string("certificate rejected: ") + X509_verify_cert_error_string(verify);
    throw TransportError("TLS handshake with " + url.origin() + " failed: " + why +
                         " (a private CA can be named with REQUESTS_CA_BUNDLE)");
  }
  return exchange(ioc, stream, beast::get_lowest_layer(stream), url, request, sink, max_body_bytes, on_head);
}

}  // namespace pagoda::hub
