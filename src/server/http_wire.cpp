// Wire helpers of the HTTP transport: response heads, chunk framing, the API key
// compare and the OpenAI error body. See http_wire.h.
#include "server/http_wire.h"

#include <boost/beast/http/status.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/ascii.h"
#include "common/json_text.h"

namespace pagoda::server {
namespace http_wire {

namespace http = boost::beast::http;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ascii_lower(a) == ascii_lower(b);
}

// Compares a presented key with the configured one. The loop runs over the configured
// key's length whatever was presented (reading the presented key cyclically), with no
// early exit, so its time depends on neither the presented length nor where the first
// mismatch is. Rejected: hashing both with SHA-256 first (same property, but needs
// OpenSSL in this module for no gain).
bool keys_equal(std::string_view presented, std::string_view key) {
  unsigned diff = presented.size() == key.size() ? 0u : 1u;
  const size_t n = presented.size();
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char p = n ? static_cast<unsigned char>(presented[i % n]) : 0;
    diff |= p ^ static_cast<unsigned char>(key[i]);
  }
  return diff == 0;
}

bool status_has_body(int status) { return !(status < 200 || status == 204 || status == 304); }

// Header values come from handlers; a CR or LF in one would split the response.
void append_header(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  for (char c : value) out.push_back(c == '\r' || c == '\n' ? ' ' : c);
  out.append("\r\n");
}

void append_status_line(std::string& out, int status) {
  // "HTTP/1.1" also to HTTP/1.0 clients: a server sends its own version (RFC 9110 6.2).
  out.append("HTTP/1.1 ");
  out.append(std::to_string(status));
  out.push_back(' ');
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  out.append(reason.data(), reason.size());
  out.append("\r\n");
}

void append_connection_headers(std::string& out, bool http11, bool keep_alive) {
  if (!keep_alive) {
    out.append("Connection: close\r\n");
  } else if (!http11) {
    out.append("Connection: keep-alive\r\n");
  }
  out.append("Access-Control-Allow-Origin: *\r\n");
}

std::string serialize_response(const HttpResponse& r, bool http11, bool keep_alive) {
  const bool has_body = status_has_body(r.status);
  std::string out;
  out.reserve(256 + r.body.size());
  append_status_line(out, r.status);
  if (has_body) {
    if (!r.content_type.empty()) append_header(out, "Content-Type", r.content_type);
    append_header(out, "Content-Length", std::to_string(r.body.size()));
  }
  append_connection_headers(out, http11, keep_alive);
  for (const auto& [name, value] : r.headers) append_header(out, name, value);
  out.append("\r\n");
  if (has_body) out.append(r.body);
  return out;
}

// The head of a streamed response: chunked for HTTP/1.1, delimited by the close of
// the connection for HTTP/1.0 (which has no chunked coding).
std::string serialize_stream_head(int status, const std::string& content_type,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  bool chunked, bool keep_alive) {
  std::string out;
  append_status_line(out, status);
  if (!content_type.empty()) append_header(out, "Content-Type", content_type);
  if (chunked) out.append("Transfer-Encoding: chunked\r\n");
  bool has_cache_control = false;
  for (const auto& [name, value] : headers) has_cache_control |= iequals(name, "cache-control");
  if (content_type.starts_with("text/event-stream") && !has_cache_control) {
    out.append("Cache-Control: no-cache\r\n");
    out.append("X-Accel-Buffering: no\r\n");  // tells nginx-style proxies not to buffer SSE
  }
  append_connection_headers(out, chunked, keep_alive);
  for (const auto& [name, value] : headers) append_header(out, name, value);
  out.append("\r\n");
  return out;
}

std::string frame_chunk(const std::string& data) {
  char size[24];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string out;
  out.reserve(static_cast<size_t>(n) + data.size() + 2);
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
  return out;
}

}  // namespace http_wire

std::string error_json(int status, std::string_view message, std::string_view type,
                       std::string_view param) {
  std::string_view t = type;
  if (t.empty()) {
    switch (status) {
      case 401: t = "authentication_error"; break;
      case 403: t = "permission_error"; break;
      case 404: t = "not_found_error"; break;
      case 429: t = "rate_limit_error"; break;
      default: t = status >= 500 ? "server_error" : "invalid_request_error"; break;
    }
  }
  nlohmann::json body = {{"error",
                          {{"message", std::string(message)},
                           {"type", std::string(t)},
                           {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param))},
                           {"code", status}}}};
  // dump_json replaces invalid UTF-8: a message quoting client bytes (a path, a
  // header) may be any bytes.
  return dump_json(body);
}

HttpResponse error_response(int status, std::string_view message, std::string_view param) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = error_json(status, message, {}, param);
  return r;
}

}  // namespace pagoda::server
