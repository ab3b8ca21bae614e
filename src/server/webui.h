// The built-in web UI of `pagoda serve` (webui/ in the repository): a single-page chat with a
// live view of the KV cache, embedded in the binary at build time (cmake/embed_files.cmake
// writes the files as byte arrays into a generated source), so nothing is fetched at run time
// and the page works offline.
//
// Contract:
// - Routes (webui_routes()): GET / answers webui/index.html; GET /webui/NAME answers the file
//   NAME of webui/ (one path segment), or 404 in OpenAI's error shape. Neither needs the API
//   key (a browser cannot send one on navigation; the page asks for it when the API answers
//   401) and both answer while the model loads. `pagoda serve --no-webui` leaves them out,
//   so / is then the transport's 404.
// - Headers: Content-Type from the file's extension (content_type_for); ETag is the
//   file's SHA-256 (quoted, 32 hex digits), Cache-Control: no-cache (the browser revalidates
//   every load: a new binary's page is never stale), an If-None-Match that names the ETag gets
//   304 without a body; X-Content-Type-Options: nosniff; the HTML carries a
//   Content-Security-Policy that allows only this origin's scripts, styles and fetches (model
//   output is untrusted: an injection that slipped past the Markdown renderer's escaping still
//   could not load or run script). No gzip: the files total ~60 KB.
// - Threads: everything here is immutable after static initialization; the handlers may run
//   on any I/O thread.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_server.h"

namespace pagoda::server {

// One embedded file; defined by the generated source (static storage, never freed).
struct EmbeddedFile {
  const char* name;            // path relative to webui/, e.g. "app.js"
  const unsigned char* data;   // [size] bytes
  size_t size;
  const char* sha256;          // 64 lower-case hex digits
};

// Every embedded file, sorted by name.
std::span<const EmbeddedFile> webui_files();

// The file named `name` ("index.html"), or null.
const EmbeddedFile* find_webui_file(std::string_view name);

// "text/html; charset=utf-8" for .html, "text/javascript; charset=utf-8" for .js / .mjs,
// "text/css; charset=utf-8", "image/svg+xml", "application/json"; anything else
// "application/octet-stream".
std::string_view content_type_for(std::string_view name);

// The answer to a GET of `name` (a file under webui/), given the request's If-None-Match
// header ("" when absent): 200 with the file, 304, or 404.
http::HttpResponse webui_response(std::string_view name, std::string_view if_none_match);

// GET / and GET /webui/* (see the contract above).
std::vector<http::Route> webui_routes();

}  // namespace pagoda::server
