// pagoda::hub — get a model from the Hugging Face Hub by name, sharing huggingface_hub's cache.
//
// What it is: `pull(config, ModelRef::parse("OWNER/REPO:Q4_K_M"))` makes the files of a model
// present in the Hub cache and returns where they are. The protocol and the cache are the ones
// the Python huggingface_hub library uses, so a tree fetched by `hf download` is reused without
// a byte downloaded (offline too) and pagoda's downloads are seen by the Python tools:
//
//   <cache>/models--OWNER--REPO/
//     blobs/<etag>                     file contents; etag = sha256 (LFS files) or git blob sha1
//     blobs/<etag>.incomplete          a download in progress (resumed with a Range request)
//     snapshots/<commit>/<path>        RELATIVE symlinks into ../../blobs/<etag>
//     refs/<revision>                  the commit a branch / tag pointed to (no newline)
//   <cache>/.locks/models--OWNER--REPO/<etag>.lock   flock()ed while a blob is written
//
// Protocol: GET {endpoint}/api/models/{repo}[/revision/{rev}] for the commit and `siblings`
// (the file list); HEAD {endpoint}/{repo}/resolve/{commit}/{file} for X-Repo-Commit, ETag /
// X-Linked-Etag, X-Linked-Size and the (CDN) Location; GET of that location, with
// "Range: bytes=N-" to resume. Relative redirects are followed from the Hub itself; an
// absolute one (to a CDN) is followed for the GET, without the Authorization header when the
// host changes (as `requests` does). At most 10 redirects per request.
//
// Guarantees:
// 1. A blob appears under its final name only complete and verified: LFS files (64-hex etag)
//    by SHA-256, git files (40-hex etag) by git's blob SHA-1, all by size when the Hub states
//    one; written to `.incomplete`, fsync'ed, then renamed. A mismatch deletes the partial
//    file and throws.
// 2. Two processes (or threads) pulling one file serialise on the flock; the second finds the
//    blob and downloads nothing.
// 3. The token (HF_TOKEN / HF_TOKEN_PATH / $HF_HOME/token) is sent only as
//    "Authorization: Bearer ..." to the endpoint's host and never appears in a message.
// 4. Transport failures and 5xx / 429 answers are retried `max_retries` times with
//    exponential backoff, resuming from the bytes already on disk.
//
// Threads: every function may be called from any thread; pulls of the same repo in several
// threads or processes are safe (guarantee 2). Errors are pagoda::Error with one line.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::hub {

struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, without a trailing '/'
  std::string token;                                // never printed
  bool offline = false;                             // HF_HUB_OFFLINE=1
  std::filesystem::path cache_dir;                  // HF_HUB_CACHE / $HF_HOME/hub
  // PEM bundle that replaces the default CA store (REQUESTS_CA_BUNDLE, then CURL_CA_BUNDLE, as
  // `requests` reads them); "" = OpenSSL's default store (which honours SSL_CERT_FILE/_DIR).
  std::string ca_bundle_file;
  std::chrono::milliseconds timeout{10000};        // per network operation; HF_HUB_DOWNLOAD_TIMEOUT
  int max_retries = 5;                             // per file, after the first attempt
  std::chrono::milliseconds retry_base_delay{1000};  // doubles per retry, capped at 30 s
  int parallel_downloads = 4;                      // files fetched at once (shards, split parts)
  FILE* progress = stderr;                         // nullptr = silent
  bool progress_is_terminal = false;               // a redrawn bar, else plain lines

  // The environment as huggingface_hub reads it (see the README's "Models from the Hugging
  // Face Hub"): HF_ENDPOINT, HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), HF_TOKEN_PATH,
  // HF_HUB_OFFLINE, HF_HUB_CACHE (or HUGGINGFACE_HUB_CACHE), HF_HOME, XDG_CACHE_HOME,
  // HF_HUB_DOWNLOAD_TIMEOUT, REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE; progress on stderr unless
  // HF_HUB_DISABLE_PROGRESS_BARS is set. Throws Error for a malformed HF_HUB_DOWNLOAD_TIMEOUT.
  static HubConfig from_env();
};

// What to get: "OWNER/REPO", "OWNER/REPO:QUANT" or "OWNER/REPO/PATH/IN/REPO", optionally
// prefixed by "hf://".
struct ModelRef {
  std::string repo_id;   // "OWNER/REPO"
  std::string quant;     // "" or e.g. "Q4_K_M" (matched case-insensitively)
  std::string file;      // "" or a path inside the repo
  std::string revision = "main";  // pull() checks it (check_revision)

  // Throws Error naming the text for anything else (no owner, empty parts, "..", spaces).
  static ModelRef parse(std::string_view text);
  std::string to_string() const;
};

// Throws Error naming `revision` unless it is a 40-hex commit or a branch / tag name git's
// check-ref-format accepts: not empty; no control character, space, '~', '^', ':', '?', '*',
// '[' or backslash; no "..", "//" or "@{"; not "@"; not starting with '/' or '-'; not ending
// with '/' or '.'; no '/'-separated part that starts with '.', ends with ".lock" or is longer
// than 255 bytes (a file name). The revision becomes refs/<revision> in the cache, so these
// are what keep it there: "refs/pr/1" (the Hub's pull-request refs) is stored as the nested
// file refs/refs/pr/1, as huggingface_hub stores it, and "../../x" is refused before any
// request.
void check_revision(std::string_view revision);

// True for "hf://..." (what load_model() resolves through the Hub).
bool is_hub_uri(std::string_view text);

struct PullResult {
  std::string repo_id;
  std::string commit;
  std::filesystem::path snapshot_dir;
  std::vector<std::string> files;      // repo paths now present under snapshot_dir
  // What -m should open: the GGUF file (the first part of a split GGUF) or, for a safetensors
  // repo, the snapshot directory.
  std::filesystem::path model_path;
  int gguf_parts = 0;                  // 0 for safetensors, >1 for a split GGUF
  // The repo's vision projector (file_select.h select_mmproj), present beside the model; ""
  // when the repo has none, the model is not a GGUF, or PullOptions::mmproj is false.
  std::filesystem::path mmproj_path;
  uint64_t downloaded_bytes = 0;       // 0 when everything was cached
  bool used_cache_only = false;        // offline, or the Hub unreachable and the cache complete
};

struct PullOptions {
  // Also the repo's vision projector ("mmproj" GGUF) for a GGUF model, as llama-server's -hf
  // fetches it (its --no-mmproj: false). Offline, the projector is the cached one, if any.
  bool mmproj = true;
};

// Makes the model's files present in the cache (downloading what is missing) and returns
// them. File choice (file_select.h): a GGUF repo gives the file matching the quant tag, the
// default quant when none is given, or `ref.file`, and its vision projector when the repo has
// one (options.mmproj); a safetensors repo gives config.json, generation_config.json, the
// tokenizer files and every shard the index names.
// Offline (config.offline) it uses the cache only; online, when the Hub cannot be reached and
// the cache holds a complete snapshot for the revision, it uses that with a warning.
PullResult pull(const HubConfig& config, const ModelRef& ref, const PullOptions& options = {});

struct CachedRepo {
  std::string repo_id;
  std::filesystem::path dir;
  uint64_t size_bytes = 0;                       // complete blobs
  uint64_t incomplete_bytes = 0;                 // *.incomplete (interrupted downloads)
  std::map<std::string, std::string> refs;       // revision -> commit
  std::vector<std::string> snapshots;            // commits
};

// Every models--* repo in config.cache_dir, sorted by repo id.
std::vector<CachedRepo> list_cached(const HubConfig& config);

// Deletes the repo's cache folder and its lock folder; returns the bytes freed. Throws Error
// when the repo is not in the cache.
uint64_t remove_cached(const HubConfig& config, const std::string& repo_id);

}  // namespace pagoda::hub
