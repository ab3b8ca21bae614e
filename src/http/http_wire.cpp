// Wire helpers of the HTTP transport: response heads, chunk framing, the API key
// compare and the plain error body. See http_wire.h.
#include "http/http_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <boost/beast/http/status.hpp>
#include <cctype>
#include <cstdio>

#include "common/ascii.h"
#include "common/utf8.h"

namespace pagoda::http {
namespace wire {

namespace beast = boost::beast;


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
  const auto reason = beast::http::obsolete_reason(static_cast<beast::http::status>(status));
  out.append(reason.data(), reason.size());
  out.append("\r\n");
}

void append_connection_headers(std::string& out, bool http11, bool keep_alive) {
  if (!keep_alive) {
    out.append("Connection: close\r\n");
  } else if (!http11) {
    out.append("Connection: keep-alive\r\n");
  }
}

namespace {

bool is_wildcard_bind(std::string_view bind_host) {
  return bind_host.empty() || bind_host == "0.0.0.0" || bind_host == "::" || bind_host == "[::]";
}

// `name` without brackets: an IPv4 literal (dotted quad, as a browser writes one) or an
// IPv6 one; sets *loopback.
bool ip_literal(const std::string& name, bool* loopback) {
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    *loopback = (ntohl(v4.s_addr) >> 24) == 127;
    return true;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    *loopback = IN6_IS_ADDR_LOOPBACK(&v6) ||
                (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);  // ::ffff:127.x.y.z
    return true;
  }
  return false;
}

// "Host" or "[v6]" with an optional ":port" -> the name (lower case, brackets and one
// trailing dot removed); nullopt when malformed (a bad port, an unclosed bracket).
std::optional<std::string> host_name(std::string_view value) {
  std::string_view name;
  std::string_view rest;
  if (value.starts_with('[')) {
    const size_t close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = value.substr(1, close - 1);
    rest = value.substr(close + 1);
    if (name.find(':') == std::string_view::npos) return std::nullopt;  // brackets hold IPv6 only
  } else {
    const size_t colon = value.find(':');
    name = value.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : value.substr(colon);
  }
  if (!rest.empty()) {
    if (rest.front() != ':' || rest.size() < 2 || rest.size() > 6) return std::nullopt;
    for (char c : rest.substr(1))
      if (c < '0' || c > '9') return std::nullopt;
  }
  if (name.ends_with('.')) name.remove_suffix(1);
  if (name.empty()) return std::nullopt;
  return ascii_lower(name);
}

}  // namespace

bool host_header_allowed(std::string_view host_header, std::string_view bind_host) {
  const std::optional<std::string> name = host_name(host_header);
  if (!name) return false;
  if (*name == "localhost") return true;
  bool loopback = false;
  const bool literal = ip_literal(*name, &loopback);
  if (literal && loopback) return true;
  if (literal && is_wildcard_bind(bind_host)) return true;
  std::string_view bind = bind_host;
  if (bind.starts_with('[') && bind.ends_with(']')) bind = bind.substr(1, bind.size() - 2);
  if (bind.ends_with('.')) bind.remove_suffix(1);
  return !bind.empty() && !is_wildcard_bind(bind) && *name == ascii_lower(bind);
}

std::vector<std::pair<std::string, std::string>> cors_headers(const std::vector<std::string>& allowed_origins,
                                                              std::string_view origin) {
  std::vector<std::pair<std::string, std::string>> out;
  if (allowed_origins.empty()) return out;
  const bool any = std::find(allowed_origins.begin(), allowed_origins.end(), "*") != allowed_origins.end();
  if (any) {
    out.emplace_back("Access-Control-Allow-Origin", "*");
    out.emplace_back("Access-Control-Expose-Headers", "X-Request-Id");
    return out;
  }
  // The answer depends on the Origin: a cache must not give one origin's answer to another.
  out.emplace_back("Vary", "Origin");
  if (origin.empty()) return out;
  for (const std::string& allowed : allowed_origins) {
    if (iequals(allowed, origin)) {
      out.emplace_back("Access-Control-Allow-Origin", std::string(origin));
      out.emplace_back("Access-Control-Expose-Headers", "X-Request-Id");
      break;
    }
  }
  return out;
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

namespace {

bool is_ows(char c) { return c == ' ' || c == '\t'; }

// tchar (RFC 9110 5.6.2): the bytes of a token.
bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return c < 0x80;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

int hex_digit(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// qdtext (RFC 9110 5.6.4): what a quoted string holds unescaped; no CR, LF or other
// control byte.
bool is_qdtext(unsigned char c) {
  return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5B) || (c >= 0x5D && c <= 0x7E) || c >= 0x80;
}

// What may follow a backslash in a quoted string: HTAB, SP, VCHAR, obs-text.
bool is_quoted_pair_char(unsigned char c) { return c == '\t' || c == ' ' || (c >= 0x21 && c <= 0x7E) || c >= 0x80; }

// A field value's bytes (RFC 9110 5.5): the same set.
bool is_field_value_char(unsigned char c) { return is_quoted_pair_char(c); }

// Client bytes quoted in an error message: at most 64 of them.
std::string quote_client(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  out.append(s.size() > kMax ? "...'" : "'");
  return out;
}

}  // namespace

RequestFraming request_framing(std::optional<std::string_view> transfer_encoding, bool has_content_length,
                               bool http11) {
  RequestFraming f;
  if (!transfer_encoding) return f;  // Content-Length, or no body
  auto refuse = [&f](int status, std::string message) {
    f.kind = RequestFraming::Kind::kRefused;
    f.status = status;
    f.message = std::move(message);
    return f;
  };
  const std::string_view te = *transfer_encoding;
  if (!http11) return refuse(400, "Transfer-Encoding in an HTTP/1.0 request (HTTP/1.0 has no transfer codings)");
  if (has_content_length)
    return refuse(400, "a request with both Transfer-Encoding and Content-Length: its length is ambiguous");
  // The list rule (RFC 9110 5.6.1): elements separated by commas and optional spaces;
  // empty elements are skipped.
  std::vector<std::string_view> codings;
  size_t start = 0;
  while (start <= te.size()) {
    size_t end = te.find(',', start);
    if (end == std::string_view::npos) end = te.size();
    std::string_view c = te.substr(start, end - start);
    while (!c.empty() && is_ows(c.front())) c.remove_prefix(1);
    while (!c.empty() && is_ows(c.back())) c.remove_suffix(1);
    if (!c.empty()) codings.push_back(c);
    start = end + 1;
  }
  if (codings.empty()) return refuse(400, "an empty Transfer-Encoding");
  if (!iequals(codings.back(), "chunked"))
    return refuse(400, "Transfer-Encoding " + quote_client(te) +
                           " does not end in chunked, so the request's length is unknown");
  const auto chunked = std::count_if(codings.begin(), codings.end(), [](std::string_view c) { return iequals(c, "chunked"); });
  if (chunked > 1) return refuse(400, "Transfer-Encoding " + quote_client(te) + " applies chunked more than once");
  if (codings.size() > 1)
    return refuse(501, "transfer coding " + quote_client(codings.front()) + " is not supported (only chunked is)");
  f.kind = RequestFraming::Kind::kChunked;
  return f;
}

void ChunkedDecoder::fail(std::string what) {
  status_ = Status::kMalformed;
  error_ = "malformed chunked body: " + std::move(what);
}

size_t ChunkedDecoder::feed(std::string_view in, std::string& body) {
  size_t i = 0;
  while (i < in.size() && status_ == Status::kNeedMore) {
    if (state_ == State::kData) {  // the bulk of the bytes: copied, not stepped through
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_size_, in.size() - i));
      body.append(in.data() + i, n);
      i += n;
      chunk_size_ -= n;
      if (chunk_size_ == 0) state_ = State::kDataCr;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(in[i++]);
    if (state_ <= State::kSizeLf && ++line_bytes_ > kMaxChunkLineBytes) {
      fail("a chunk line over " + std::to_string(kMaxChunkLineBytes) + " bytes");
      break;
    }
    if (state_ >= State::kTrailerStart && ++trailer_bytes_ > kMaxTrailerBytes) {
      fail("trailer fields over " + std::to_string(kMaxTrailerBytes) + " bytes");
      break;
    }
    // The one way to end a line is CRLF: a bare LF is an error wherever it comes (a
    // proxy that took it for a line end would frame the body differently).
    if (c == '\n' && state_ != State::kSizeLf && state_ != State::kDataLf && state_ != State::kTrailerLf &&
        state_ != State::kEndLf) {
      fail("a bare LF (lines end in CRLF)");
      break;
    }
    switch (state_) {
      case State::kSizeFirst: {
        const int h = hex_digit(c);
        if (h < 0) {
          fail("a chunk size that is not hexadecimal");
          break;
        }
        chunk_size_ = static_cast<uint64_t>(h);
        size_digits_ = h ? 1 : 0;
        state_ = State::kSize;
        break;
      }
      case State::kSize: {
        if (const int h = hex_digit(c); h >= 0) {
          if ((size_digits_ > 0 || h > 0) && ++size_digits_ > 16) {
            fail("a chunk size over 64 bits");
            break;
          }
          chunk_size_ = chunk_size_ * 16 + static_cast<uint64_t>(h);
          break;
        }
        // The size is complete: refuse it before any of its data when it cannot fit.
        if (chunk_size_ > max_body_bytes_ - body_bytes_) {
          status_ = Status::kTooLarge;
          break;
        }
        body_bytes_ += chunk_size_;
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (is_ows(static_cast<char>(c))) {
          state_ = State::kExtBeforeSemi;
        } else {
          fail("a chunk size that is not hexadecimal");
        }
        break;
      }
      // Extensions: *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
      case State::kExtBeforeSemi:
        if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (!is_ows(static_cast<char>(c))) {
          fail("a chunk line with spaces not followed by ';'");
        }
        break;
      case State::kExtNameStart:
        if (is_tchar(c)) {
          state_ = State::kExtName;
        } else if (!is_ows(static_cast<char>(c))) {
          fail("a chunk extension without a name");
        }
        break;
      case State::kExtName:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (c == '=') {
          state_ = State::kExtValueStart;
        } else if (is_ows(static_cast<char>(c))) {
          state_ = State::kExtAfterName;
        } else if (!is_tchar(c)) {
          fail("a byte a chunk extension's name cannot hold");
        }
        break;
      case State::kExtAfterName:
        if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (c == '=') {
          state_ = State::kExtValueStart;
        } else if (!is_ows(static_cast<char>(c))) {
          fail("a chunk extension's name followed by something other than '=' or ';'");
        }
        break;
      case State::kExtValueStart:
        if (c == '"') {
          state_ = State::kExtQuoted;
        } else if (is_tchar(c)) {
          state_ = State::kExtToken;
        } else if (!is_ows(static_cast<char>(c))) {
          fail("a chunk extension without a value after '='");
        }
        break;
      case State::kExtToken:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (is_ows(static_cast<char>(c))) {
          state_ = State::kExtAfterValue;
        } else if (!is_tchar(c)) {
          fail("a byte a chunk extension's value cannot hold");
        }
        break;
      case State::kExtQuoted:
        if (c == '"') {
          state_ = State::kExtAfterQuote;
        } else if (c == '\\') {
          state_ = State::kExtQuotedEscape;
        } else if (!is_qdtext(c)) {
          fail("a control byte in a quoted chunk extension");
        }
        break;
      case State::kExtQuotedEscape:
        if (!is_quoted_pair_char(c)) {
          fail("a control byte in a quoted chunk extension");
          break;
        }
        state_ = State::kExtQuoted;
        break;
      case State::kExtAfterQuote:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (is_ows(static_cast<char>(c))) {
          state_ = State::kExtAfterValue;
        } else {
          fail("a byte after a quoted chunk extension");
        }
        break;
      case State::kExtAfterValue:
        if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (!is_ows(static_cast<char>(c))) {
          fail("a chunk line with spaces not followed by ';'");
        }
        break;
      case State::kSizeLf:
        if (c != '\n') {
          fail("a chunk line's CR without LF");
          break;
        }
        line_bytes_ = 0;
        state_ = chunk_size_ == 0 ? State::kTrailerStart : State::kData;
        break;
      case State::kData:  // handled above
        break;
      case State::kDataCr:
        if (c != '\r') {
          fail("chunk data longer than its size (no CRLF after it)");
          break;
        }
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') {
          fail("CR without LF after chunk data");
          break;
        }
        state_ = State::kSizeFirst;
        break;
      // Trailers: *( name ":" value CRLF ) CRLF; checked, then dropped.
      case State::kTrailerStart:
        if (c == '\r') {
          state_ = State::kEndLf;
        } else if (is_tchar(c)) {
          state_ = State::kTrailerName;
        } else {
          fail("a trailer line that does not start with a field name");
        }
        break;
      case State::kTrailerName:
        if (c == ':') {
          state_ = State::kTrailerValue;
        } else if (!is_tchar(c)) {
          fail("a trailer field without a colon after its name");
        }
        break;
      case State::kTrailerValue:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (!is_field_value_char(c)) {
          fail("a control byte in a trailer field");
        }
        break;
      case State::kTrailerLf:
        if (c != '\n') {
          fail("a trailer line's CR without LF");
          break;
        }
        state_ = State::kTrailerStart;
        break;
      case State::kEndLf:
        if (c != '\n') {
          fail("CR without LF at the end of the body");
          break;
        }
        status_ = Status::kDone;
        break;
    }
  }
  return i;
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

}  // namespace wire

HttpResponse plain_error_response(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  // sanitize_utf8: a message quoting client bytes (a path, a header) may be any bytes.
  r.body = sanitize_utf8(message) + "\n";
  return r;
}

}  // namespace pagoda::http
