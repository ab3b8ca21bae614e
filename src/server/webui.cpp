#include "server/webui.h"

#include <algorithm>

#include "server/api_error.h"

namespace pagoda::server {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string etag_of(const EmbeddedFile& f) {
  // 128 bits of the SHA-256 are plenty to tell two builds' files apart and keep the header short.
  return "\"" + std::string(f.sha256, 32) + "\"";
}

// If-None-Match is "*" or a comma-separated list of (possibly weak, W/"...") tags.
bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  size_t pos = 0;
  while (pos < if_none_match.size()) {
    size_t comma = if_none_match.find(',', pos);
    if (comma == std::string_view::npos) comma = if_none_match.size();
    std::string_view tag = if_none_match.substr(pos, comma - pos);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
    pos = comma + 1;
  }
  return false;
}

// Only this origin's scripts, styles, fetches and images (and data: images, for the inline
// favicon); no inline script, no plugins, no framing by other sites.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

const EmbeddedFile* find_webui_file(std::string_view name) {
  for (const EmbeddedFile& f : webui_files())
    if (name == f.name) return &f;
  return nullptr;
}

std::string_view content_type_for(std::string_view name) {
  if (ends_with(name, ".html")) return "text/html; charset=utf-8";
  if (ends_with(name, ".js") || ends_with(name, ".mjs")) return "text/javascript; charset=utf-8";
  if (ends_with(name, ".css")) return "text/css; charset=utf-8";
  if (ends_with(name, ".svg")) return "image/svg+xml";
  if (ends_with(name, ".json")) return "application/json";
  return "application/octet-stream";
}

http::HttpResponse webui_response(std::string_view name, std::string_view if_none_match) {
  const EmbeddedFile* f = find_webui_file(name);
  if (!f) return error_response(404, "no web UI file named '" + std::string(name.substr(0, 200)) + "'");
  http::HttpResponse r;
  const std::string etag = etag_of(*f);
  r.headers = {{"ETag", etag}, {"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"}};
  if (ends_with(name, ".html")) {
    r.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
  }
  r.content_type = std::string(content_type_for(name));
  if (etag_matches(if_none_match, etag)) {
    r.status = 304;
    return r;
  }
  r.body.assign(reinterpret_cast<const char*>(f->data), f->size);
  return r;
}

std::vector<http::Route> webui_routes() {
  auto if_none_match = [](const http::HttpRequest& req) -> std::string_view {
    auto it = req.headers.find("if-none-match");
    return it == req.headers.end() ? std::string_view{} : std::string_view{it->second};
  };
  return {
      {"GET", "/", false,
       [if_none_match](const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
         ex->respond(webui_response("index.html", if_none_match(req)));
       }},
      {"GET", "/webui/*", false,
       [if_none_match](const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
         const std::string_view name = std::string_view(req.path).substr(std::string_view("/webui/").size());
         ex->respond(webui_response(name, if_none_match(req)));
       }},
  };
}

}  // namespace pagoda::server
