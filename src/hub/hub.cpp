// pull(): the Hub listing, the file choice, and the downloads of what the cache lacks.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/json_parse.h"
#include "hub/blob_download.h"
#include "hub/cache_layout.h"
#include "hub/file_select.h"
#include "hub/hub.h"

namespace pagoda::hub {

namespace {

// Percent-encodes everything but RFC 3986 unreserved characters (and '/' when keep_slash).
std::string url_quote(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// A repo path as a cache path: relative, no empty / "." / ".." parts (a hostile listing must
// not place links outside the snapshot).
bool safe_repo_path(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find('\\') != std::string::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  for (unsigned char c : path)
    if (c < ' ') return false;
  return true;
}

// An etag as a blob file name: the Hub's are hex; a mirror's opaque ones must still be a
// plain name.
bool safe_etag(const std::string& etag) {
  if (etag.empty() || etag.size() > 128 || etag[0] == '.') return false;
  for (char c : etag)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

// ETag header -> bare value: W/"abc" -> abc.
std::string normalize_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string redact(std::string text, const std::string& token) {
  if (token.empty()) return text;
  for (size_t at; (at = text.find(token)) != std::string::npos;) text.replace(at, token.size(), "***");
  return text;
}

struct Listing {
  std::string commit;
  std::vector<std::string> files;
};

Listing fetch_listing(const HubConfig& config, const ModelRef& ref) {
  std::string url = config.endpoint + "/api/models/" + ref.repo_id;
  if (ref.revision != "main") url += "/revision/" + url_quote(ref.revision, false);
  // An answer of 429 / 5xx is retried with backoff; a connection failure is not (the caller
  // falls back to the cache at once rather than after 31 s of retries).
  HttpResponse response;
  for (int attempt = 0;; ++attempt) {
    response = hub_request(config, "GET", url, {{"Accept", "application/json"}}, nullptr, true);
    if (!(response.status == 429 || response.status >= 500) || attempt >= config.max_retries) break;
    std::this_thread::sleep_for(config.retry_base_delay * (1 << std::min(attempt, 5)));
  }
  if (response.status == 404 && ref.revision != "main")
    throw Error(ref.repo_id + ": no repo with revision '" + ref.revision + "' on " + config.endpoint + " (HTTP 404)");
  if (response.status != 200) throw_http_error(config, response, ref.repo_id);
  nlohmann::json info = parse_json_or_discarded(response.body);
  if (info.is_discarded() || !info.is_object())
    throw Error(ref.repo_id + ": the Hub's repo info is not a JSON object (" + config.endpoint + ")");
  Listing listing;
  if (info.contains("sha") && info["sha"].is_string()) listing.commit = info["sha"].get<std::string>();
  if (!is_hex(listing.commit, 40))
    throw Error(ref.repo_id + ": the Hub's repo info has no commit sha (" + config.endpoint + ")");
  if (info.contains("siblings") && info["siblings"].is_array()) {
    for (const auto& s : info["siblings"]) {
      if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
      const std::string name = s["rfilename"].get<std::string>();
      if (safe_repo_path(name)) listing.files.push_back(name);
    }
  }
  std::sort(listing.files.begin(), listing.files.end());
  return listing;
}

// Adds the shards an index names, read from the snapshot (the index itself must be there).
void add_index_shards(const RepoCache& cache, const std::string& commit, FileSelection& sel) {
  const std::string text = read_text(cache.snapshot_dir(commit) / sel.safetensors_index);
  for (const auto& shard : shards_from_index(text, sel.safetensors_index))
    if (std::find(sel.files.begin(), sel.files.end(), shard) == sel.files.end()) sel.files.push_back(shard);
}

PullResult result_for(const RepoCache& cache, const std::string& repo_id, const std::string& commit,
                      const FileSelection& sel) {
  PullResult r;
  r.repo_id = repo_id;
  r.commit = commit;
  r.snapshot_dir = cache.snapshot_dir(commit);
  r.files = sel.files;
  r.gguf_parts = sel.gguf_parts;
  r.model_path = sel.model_file.empty() ? r.snapshot_dir : r.snapshot_dir / sel.model_file;
  if (!sel.mmproj_file.empty()) r.mmproj_path = r.snapshot_dir / sel.mmproj_file;
  return r;
}

// Adds the model's vision projector to the selection (a GGUF model only).
void add_mmproj(const PullOptions& options, const std::vector<std::string>& repo_files, FileSelection& sel) {
  if (!options.mmproj || sel.gguf_parts == 0) return;
  sel.mmproj_file = select_mmproj(repo_files, sel.model_file);
  if (!sel.mmproj_file.empty() && std::find(sel.files.begin(), sel.files.end(), sel.mmproj_file) == sel.files.end())
    sel.files.push_back(sel.mmproj_file);
}

// The model from the cache alone; throws Error starting with `why` when it is not all there.
PullResult from_cache(const HubConfig& config, const RepoCache& cache, const ModelRef& ref, const PullOptions& options,
                      const std::string& why) {
  const auto commit = cache.resolve_revision(ref.revision);
  if (!commit)
    throw Error(why + ": " + ref.repo_id + (ref.revision == "main" ? "" : "@" + ref.revision) +
                " is not in the cache (" + config.cache_dir.string() + ")");
  FileSelection sel;
  try {
    const std::vector<std::string> files = cache.snapshot_files(*commit);
    sel = select_files(ref.repo_id, files, ref);
    add_mmproj(options, files, sel);  // the cached projector, if one was fetched
  } catch (const Error& e) {  // what the cache lacks, not necessarily the repo
    throw Error(why + ": in the cached snapshot " + commit->substr(0, 12) + ", " + e.what());
  }
  if (!sel.safetensors_index.empty()) add_index_shards(cache, *commit, sel);
  for (const auto& f : sel.files)
    if (!cache.snapshot_has(*commit, f))
      throw Error(why + ": the cached snapshot " + *commit + " of " + ref.repo_id + " lacks " + f);
  PullResult r = result_for(cache, ref.repo_id, *commit, sel);
  r.used_cache_only = true;
  return r;
}

// Makes snapshots/<commit>/<file> present; returns the bytes transferred.
uint64_t fetch_file(const HubConfig& config, const RepoCache& cache, const std::string& repo_id,
                    const std::string& commit, const std::string& file, ProgressMeter& progress) {
  if (cache.snapshot_has(commit, file)) return 0;
  const std::string url = config.endpoint + "/" + repo_id + "/resolve/" + commit + "/" + url_quote(file, true);
  HttpResponse head;
  for (int attempt = 0;; ++attempt) {
    try {
      head = hub_request(config, "HEAD", url, {}, nullptr, false);
      if (!(head.status == 429 || head.status >= 500) || attempt >= config.max_retries) break;
    } catch (const TransportError&) {
      if (attempt >= config.max_retries) throw;
    }
    std::this_thread::sleep_for(config.retry_base_delay * (1 << std::min(attempt, 5)));
  }
  const bool redirect = head.status >= 300 && head.status < 400 && !head.header("location").empty();
  if (head.status != 200 && !redirect) throw_http_error(config, head, repo_id + "/" + file);
  BlobRequest blob;
  blob.file = file;
  blob.etag = normalize_etag(head.header("x-linked-etag"));
  if (blob.etag.empty()) blob.etag = normalize_etag(head.header("etag"));
  if (!safe_etag(blob.etag))
    throw Error(repo_id + "/" + file + ": the Hub sent no usable ETag (got '" + blob.etag.substr(0, 80) + "')");
  // The size bounds what the download writes (blob_download.h), so a value that is not a
  // plain byte count is refused rather than read as its leading digits ("12abc" as 12). The
  // Content-Length of a redirect is the length of the redirect's own body, not the file's:
  // it counts only on a 200.
  const char* size_header = head.headers.count("x-linked-size") ? "x-linked-size"
                            : head.status == 200 && head.headers.count("content-length") ? "content-length"
                                                                                          : nullptr;
  if (size_header) {
    const std::string text = head.header(size_header);
    blob.size = parse_byte_count(text);
    if (!blob.size)
      throw Error(repo_id + "/" + file + ": the Hub's " + (size_header[0] == 'x' ? "X-Linked-Size" : "Content-Length") +
                  " '" + text.substr(0, 80) + "' is not a byte count (digits only, at most 2^64 - 1)");
  }
  blob.url = redirect ? resolve_location(parse_url(url), head.header("location")) : url;
  const uint64_t n = download_blob(config, cache, blob, progress);
  cache.link_snapshot(commit, file, blob.etag);
  return n;
}

// Fetches `files` with up to config.parallel_downloads threads; the first error wins (the
// others finish their current file, so no .incomplete is left half-written).
uint64_t fetch_files(const HubConfig& config, const RepoCache& cache, const std::string& repo_id,
                     const std::string& commit, const std::vector<std::string>& files, ProgressMeter& progress) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr first_error;
  auto worker = [&] {
    for (size_t i; !failed && (i = next++) < files.size();) {
      try {
        bytes += fetch_file(config, cache, repo_id, commit, files[i], progress);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  };
  const size_t n_threads = std::min<size_t>(files.size(), static_cast<size_t>(std::max(1, config.parallel_downloads)));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return bytes;
}

PullResult pull_online(const HubConfig& config, const RepoCache& cache, const ModelRef& ref, const PullOptions& options,
                       ProgressMeter& progress) {
  Listing listing;
  try {
    listing = fetch_listing(config, ref);
  } catch (const TransportError& e) {
    // huggingface_hub's behaviour: an unreachable Hub falls back to a complete cached snapshot.
    try {
      PullResult r = from_cache(config, cache, ref, options, "cannot reach " + config.endpoint);
      progress.message(std::string("warning: ") + e.what() + "; using the cached snapshot " + r.commit);
      return r;
    } catch (const Error&) {
      throw Error(std::string(e.what()) + " (and " + ref.repo_id + " is not in the cache: set HF_ENDPOINT for a mirror)");
    }
  }
  FileSelection sel = select_files(ref.repo_id, listing.files, ref);
  add_mmproj(options, listing.files, sel);
  if (ref.revision != listing.commit) cache.write_ref(ref.revision, listing.commit);
  uint64_t bytes = fetch_files(config, cache, ref.repo_id, listing.commit, sel.files, progress);
  if (!sel.safetensors_index.empty()) {
    FileSelection shards = sel;
    shards.files.clear();
    add_index_shards(cache, listing.commit, shards);
    for (const auto& f : shards.files)
      if (std::find(listing.files.begin(), listing.files.end(), f) == listing.files.end())
        throw Error(ref.repo_id + ": " + sel.safetensors_index + " names " + f + ", which the repo does not have");
    bytes += fetch_files(config, cache, ref.repo_id, listing.commit, shards.files, progress);
    sel.files.insert(sel.files.end(), shards.files.begin(), shards.files.end());
  }
  progress.finish();
  PullResult r = result_for(cache, ref.repo_id, listing.commit, sel);
  r.downloaded_bytes = bytes;
  return r;
}

}  // namespace

PullResult pull(const HubConfig& config, const ModelRef& ref, const PullOptions& options) {
  PAGODA_CHECK(!config.cache_dir.empty(), "pull: HubConfig::cache_dir is empty");
  check_revision(ref.revision);  // it names refs/<revision> in the cache: before any path or request
  RepoCache cache(config.cache_dir, ref.repo_id);
  ProgressMeter progress(config.progress, config.progress_is_terminal);
  try {
    if (config.offline) return from_cache(config, cache, ref, options, "offline (HF_HUB_OFFLINE is set)");
    return pull_online(config, cache, ref, options, progress);
  } catch (const Error& e) {
    progress.finish();
    // Guarantee 3: whatever a message was built from, the token does not leave in it.
    throw Error(redact(e.what(), config.token));
  } catch (const std::filesystem::filesystem_error& e) {
    progress.finish();
    throw Error(std::string("Hub cache: ") + e.what());
  }
}

}  // namespace pagoda::hub
