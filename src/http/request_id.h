// Request ids — the name an HTTP request goes by in the log and in its X-Request-Id
// response header, so a client's report ("request X failed") finds its log line, and a
// proxy's id (HAProxy unique-id, nginx $request_id, a client's own) carries through.
//
// Contract: a client's X-Request-Id is kept when it is 1 to kMaxRequestIdBytes visible
// ASCII characters (0x21..0x7E: no spaces, no controls, nothing a header or a log line
// would have to escape to stay one line); anything else (empty, too long, a space, UTF-8,
// the header given twice, which arrives as "a, b") gets a generated id instead, and the
// request is served as usual. Generated ids are "req_" + 24 hex digits: a random stem per
// process and a counter, unique within a process and unlikely to repeat across restarts
// and replicas. Thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda::http {

// 128: a UUID (36) or a trace id with a span and a prefix fits many times over; a longer
// "id" is more likely junk (or a log-flooding attempt) than a reference.
inline constexpr size_t kMaxRequestIdBytes = 128;

bool is_acceptable_request_id(std::string_view id);
std::string new_request_id();
// The client's id when acceptable, else a new one.
std::string request_id_for(std::string_view client_id);

}  // namespace pagoda::http
