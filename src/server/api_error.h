// The OpenAI-style error object: the body of every error `pagoda serve` answers, save on
// Anthropic's routes (anthropic_error_json, anthropic_protocol.h). The HTTP transport
// (src/http) knows no API's error shape; the app gives it this one through
// HttpServerOptions::error_body (transport_error_response), so its 404s, 413s and 503s
// read like the API's own errors.
#pragma once

#include <string>
#include <string_view>

#include "http/http_server.h"

namespace pagoda::server {

// {"error":{"message","type","param","code"}}. `type` is derived from the status when
// empty (400 invalid_request_error, 401 authentication_error, 403 permission_error, 404
// not_found_error, 429 rate_limit_error, other 4xx invalid_request_error, 5xx
// server_error); param is JSON null when empty; `code` is the status as a number.
// Invalid UTF-8 in the message (client bytes quoted) is replaced.
std::string error_json(int status, std::string_view message, std::string_view type = {},
                       std::string_view param = {});
// error_json as an application/json response with that status.
http::HttpResponse error_response(int status, std::string_view message, std::string_view param = {});
// error_response without a param: the HttpServerOptions::error_body of `pagoda serve`.
http::HttpResponse transport_error_response(int status, std::string_view message);

}  // namespace pagoda::server
