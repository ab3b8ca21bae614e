// The OpenAI-style error object (see api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace pagoda::server {

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

http::HttpResponse error_response(int status, std::string_view message, std::string_view param) {
  http::HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = error_json(status, message, {}, param);
  return r;
}

http::HttpResponse transport_error_response(int status, std::string_view message) {
  return error_response(status, message);
}

}  // namespace pagoda::server
