// A GET of a URL someone else named (serve --allow-image-urls: an image in a chat request),
// with bounds on everything it costs, over the Hub's HTTP(S) client (http_fetch.h). The CLI
// hands it to the server as ImageInputOptions::fetch_url, so the server module does not
// depend on this one.
//
// Contract: only http and https; at most `max_bytes` read (a Content-Length above it stops
// before the body, a body that runs past it stops there: a lying or endless server costs at
// most max_bytes + one 64 KiB piece); the whole exchange, redirects included, within
// `total_timeout`; at most 3 redirects, each to http(s) only (file:, data:, ... refused); a
// 2xx answer only, its body complete (a cut or stalled one is an error). TLS peers are verified against OpenSSL's default store (SSL_CERT_FILE /
// SSL_CERT_DIR). Throws pagoda::Error with the reason (one line); any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::hub {

std::vector<uint8_t> bounded_get(const std::string& url, uint64_t max_bytes,
                                 std::chrono::milliseconds total_timeout = std::chrono::seconds(10));

}  // namespace pagoda::hub
