// Wire helpers of the HTTP transport (internal to src/http): request body framing
// (which framing a head asks for, the chunked decoder), response heads, chunk framing,
// case-insensitive compares and the constant-time API key compare. Pure functions over
// strings and one incremental decoder; thread-safe. plain_error_response (declared in
// http_server.h) lives in http_wire.cpp too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/http_server.h"

namespace pagoda::http::wire {

bool iequals(std::string_view a, std::string_view b);

// Compares a presented key with the configured one in time that depends on neither the
// presented length nor where the first mismatch is.
bool keys_equal(std::string_view presented, std::string_view key);

bool status_has_body(int status);  // not 1xx, 204 or 304

// Appends "Name: value\r\n"; CR / LF in the value become spaces (no header splitting).
void append_header(std::string& out, std::string_view name, std::string_view value);
void append_status_line(std::string& out, int status);
// Connection: close / keep-alive (for HTTP/1.0).
void append_connection_headers(std::string& out, bool http11, bool keep_alive);

// Whether a Host header value (host[:port]) names this server, for a server without an
// API key (DNS rebinding: a page of evil.example whose name is made to resolve to
// 127.0.0.1 reaches a loopback server with the page's own origin, so CORS does not stop
// it; its requests still say Host: evil.example). Allowed: localhost, any 127.0.0.0/8
// address, [::1], the address the server was told to bind (`bind_host`, compared as
// written), each with or without a port, case-insensitive, one trailing dot ignored; and
// when bind_host is a wildcard (0.0.0.0, ::, ""), any IP address literal too: the names
// clients use for such a server are not known, but an IP literal cannot be rebound
// (rebinding needs a name the attacker's DNS answers for).
bool host_header_allowed(std::string_view host_header, std::string_view bind_host);

// The CORS headers for a request with this Origin ("" when it has none), given the
// allowed origins (HttpServerOptions::cors_origins): Access-Control-Allow-Origin: * when
// "*" is listed; else Vary: Origin (the answer depends on the Origin, so a cache must
// not hand one origin's answer to another) and, when the origin is listed (compared
// case-insensitively), Access-Control-Allow-Origin with the origin itself. Beside an
// Access-Control-Allow-Origin, Access-Control-Expose-Headers: X-Request-Id, so the page's
// script can read the request id (a browser hides every other header by default). Empty
// when no origin is allowed.
std::vector<std::pair<std::string, std::string>> cors_headers(const std::vector<std::string>& allowed_origins,
                                                              std::string_view origin);

// A complete response: status line, headers, Content-Length, body.
std::string serialize_response(const HttpResponse& r, bool http11, bool keep_alive);
// The head of a streamed response: chunked for HTTP/1.1, delimited by the close of the
// connection for HTTP/1.0; SSE gets Cache-Control: no-cache unless the caller set one.
std::string serialize_stream_head(int status, const std::string& content_type,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  bool chunked, bool keep_alive);
// One chunk of chunked transfer coding: hex size, CRLF, data, CRLF.
std::string frame_chunk(const std::string& data);

// How a request's body is delimited (RFC 9112 6.3), from its head: the Transfer-Encoding
// field lines' values joined by ", " (nullopt when there is none), whether a
// Content-Length is present and the HTTP version. A Transfer-Encoding is accepted only as exactly
// "chunked" (case-insensitive, spaces around it) in an HTTP/1.1 request without a
// Content-Length. Everything else that names a Transfer-Encoding is refused, and the
// connection must close after the answer, since where this request ends is unknown:
// - 501 when chunked is final but other codings come before it ("gzip, chunked"): the
//   framing is clear but pagoda decodes no other coding, and ignoring one would hand the
//   handler a still-compressed body;
// - 400 otherwise: chunked not final or missing ("chunked, identity", "xchunked"), chunked
//   twice, a Content-Length beside it, or any Transfer-Encoding in HTTP/1.0 (which has
//   none; RFC 9112 6.1 says to treat its framing as faulty).
struct RequestFraming {
  enum class Kind { kLength, kChunked, kRefused };  // kLength: Content-Length, or no body
  Kind kind = Kind::kLength;
  int status = 0;  // kRefused: 400 or 501
  std::string message;
};
RequestFraming request_framing(std::optional<std::string_view> transfer_encoding, bool has_content_length,
                               bool http11);

// Decodes a chunked request body (RFC 9112 7.1) exactly, as it arrives: feed() takes
// any split of the bytes (one at a time too) and stops at the end of the body, so the
// bytes after it stay for the next request. Strict, because a lenient decoder is what
// lets a request be framed one way here and another way by a proxy in front:
// - every line ends in CRLF; a bare LF or CR anywhere is malformed (not a line end);
// - chunk-size is 1*HEXDIG, at most 16 significant digits (leading zeros are fine);
// - chunk extensions follow the grammar (";" name ["=" token / quoted-string], spaces
//   around ";" and "=") and are ignored; a chunk line is at most kMaxChunkLineBytes;
// - trailer fields are checked as field lines (name ":" value, no control bytes) and
//   dropped: none reaches the handler, none can add or change a header; the trailer
//   section is at most kMaxTrailerBytes.
// Decoded bytes beyond max_body_bytes make it kTooLarge (a chunk size alone can).
class ChunkedDecoder {
 public:
  enum class Status { kNeedMore, kDone, kMalformed, kTooLarge };
  // 4 KiB: a size and extensions nobody sends longer (Beast buffered any length, so a
  // client could grow one line without bound); the trailers get the head's 64 KiB.
  static constexpr size_t kMaxChunkLineBytes = 4096;
  static constexpr size_t kMaxTrailerBytes = 64u << 10;

  explicit ChunkedDecoder(uint64_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  // Consumes a prefix of `in`, appending chunk data to `body`; returns the bytes used.
  // Uses none once the status is not kNeedMore.
  size_t feed(std::string_view in, std::string& body);
  Status status() const { return status_; }
  // What was malformed (kMalformed), for the 400's message.
  const std::string& error() const { return error_; }

 private:
  enum class State {
    kSizeFirst, kSize, kExtBeforeSemi, kExtNameStart, kExtName, kExtAfterName, kExtValueStart,
    kExtToken, kExtQuoted, kExtQuotedEscape, kExtAfterQuote, kExtAfterValue, kSizeLf,  // a chunk line
    kData, kDataCr, kDataLf,                                                           // its data
    kTrailerStart, kTrailerName, kTrailerValue, kTrailerLf, kEndLf,                    // the trailers
  };
  void fail(std::string what);  // kMalformed, with the 400's message

  const uint64_t max_body_bytes_;
  Status status_ = Status::kNeedMore;
  State state_ = State::kSizeFirst;
  std::string error_;
  uint64_t chunk_size_ = 0;    // the chunk being read: its size, then what is left of it
  int size_digits_ = 0;        // significant hex digits of chunk_size_
  uint64_t body_bytes_ = 0;    // decoded so far
  size_t line_bytes_ = 0;      // of the current chunk line
  size_t trailer_bytes_ = 0;
};

}  // namespace pagoda::http::wire
