// Wire helpers of the HTTP transport (internal to src/server): response heads, chunk
// framing, case-insensitive compares and the constant-time API key compare. Pure
// functions over strings; thread-safe. error_json / error_response (declared in
// http_server.h) live in http_wire.cpp too.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_server.h"

namespace pagoda::server::http_wire {

bool iequals(std::string_view a, std::string_view b);

// Compares a presented key with the configured one in time that depends on neither the
// presented length nor where the first mismatch is.
bool keys_equal(std::string_view presented, std::string_view key);

bool status_has_body(int status);  // not 1xx, 204 or 304

// Appends "Name: value\r\n"; CR / LF in the value become spaces (no header splitting).
void append_header(std::string& out, std::string_view name, std::string_view value);
void append_status_line(std::string& out, int status);
// Connection (close / keep-alive for HTTP/1.0) and the CORS header every response has.
void append_connection_headers(std::string& out, bool http11, bool keep_alive);

// A complete response: status line, headers, Content-Length, body.
std::string serialize_response(const HttpResponse& r, bool http11, bool keep_alive);
// The head of a streamed response: chunked for HTTP/1.1, delimited by the close of the
// connection for HTTP/1.0; SSE gets Cache-Control: no-cache unless the caller set one.
std::string serialize_stream_head(int status, const std::string& content_type,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  bool chunked, bool keep_alive);
// One chunk of chunked transfer coding: hex size, CRLF, data, CRLF.
std::string frame_chunk(const std::string& data);

}  // namespace pagoda::server::http_wire
