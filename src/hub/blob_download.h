// Requests to the Hub with its redirect and token rules, and the download of one blob into the
// cache (lock, resume, verify, rename). Internal to src/hub; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hub/cache_layout.h"
#include "hub/http_fetch.h"
#include "hub/hub.h"
#include "hub/progress.h"

namespace pagoda::hub {

// GET or HEAD `url`, following redirects (at most 10): all of them when `follow_absolute`,
// else only those whose Location has no host (huggingface_hub's follow_relative_redirects for
// the metadata HEAD: a renamed repo is followed, the CDN Location stays visible). The bearer token goes only to the
// endpoint's origin. *final_url gets the URL of the last request made.
HttpResponse hub_request(const HubConfig& config, const std::string& method, std::string url,
                         const std::vector<std::pair<std::string, std::string>>& headers, const BodySink* sink,
                         bool follow_absolute, std::string* final_url = nullptr,
                         const HeadCheck* on_head = nullptr);

// Throws the one-line Error for a failed Hub answer: 401/403 (set HF_TOKEN), 404 (what is
// missing), others with the status and X-Error-Message. `what` names the thing asked for.
[[noreturn]] void throw_http_error(const HubConfig& config, const HttpResponse& response, const std::string& what);

struct BlobRequest {
  std::string file;        // repo path, for messages and progress
  std::string etag;        // sha256 (64 hex) of an LFS file, else git blob sha1 (40 hex) or opaque
  // X-Linked-Size / Content-Length; nullopt when the Hub said nothing. The download never
  // writes more: a body longer than this is refused and its partial file deleted. (Not
  // "0 = unknown": an "X-Linked-Size: 0" would then lift the bound instead of setting it.)
  std::optional<uint64_t> size;
  std::string url;         // where the bytes are (the resolve URL or its CDN Location)
};

// Makes blobs/<etag> present and verified (hub.h guarantees 1, 2 and 4); returns the bytes
// transferred (0 when another process or an earlier run already had it).
uint64_t download_blob(const HubConfig& config, const RepoCache& cache, const BlobRequest& blob,
                       ProgressMeter& progress);

}  // namespace pagoda::hub
