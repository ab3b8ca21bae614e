#include "hub/bounded_get.h"

#include <cstdio>

#include "common/error.h"
#include "hub/http_fetch.h"

namespace pagoda::hub {

std::vector<uint8_t> bounded_get(const std::string& url, uint64_t max_bytes, std::chrono::milliseconds total_timeout) {
  constexpr int kMaxRedirects = 3;
  const auto deadline = std::chrono::steady_clock::now() + total_timeout;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(total_timeout.count()) / 1000);
  const std::string timed_out = std::string("timed out after ") + seconds + " s";
  std::string current = url;
  for (int redirects = 0;; ++redirects) {
    const ParsedUrl parsed = parse_url(current);  // http(s) only, else Error
    HttpRequest request;
    request.url = current;
    request.timeout = total_timeout;
    request.deadline = deadline;
    std::vector<uint8_t> bytes;
    bool too_big = false;
    const HeadCheck on_head = [&](const HttpResponse& r) {
      const auto length = parse_byte_count(r.header("content-length"));
      too_big = length && *length > max_bytes;
      return !too_big;
    };
    const BodySink sink = [&](std::string_view piece) {
      if (bytes.size() + piece.size() > max_bytes) return !(too_big = true);
      bytes.insert(bytes.end(), piece.begin(), piece.end());
      return true;
    };
    HttpResponse r;
    try {
      r = http_fetch(request, &sink, 4096, &on_head);
    } catch (const TransportError& e) {
      if (std::chrono::steady_clock::now() >= deadline) throw Error(timed_out);
      throw;
    }
    if (too_big) throw Error("larger than the limit of " + std::to_string(max_bytes) + " bytes");
    if (r.status >= 300 && r.status < 400 && !r.header("location").empty()) {
      if (redirects >= kMaxRedirects) throw Error("more than " + std::to_string(kMaxRedirects) + " redirects");
      current = resolve_location(parsed, r.header("location"));  // Error for file:, data:, ...
      continue;
    }
    if (r.status < 200 || r.status >= 300) throw Error("HTTP " + std::to_string(r.status));
    if (!r.body_complete) {
      if (std::chrono::steady_clock::now() >= deadline) throw Error(timed_out);
      throw Error("the connection closed before the end of the body");
    }
    return bytes;
  }
}

}  // namespace pagoda::hub
