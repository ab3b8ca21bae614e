#include "hub/blob_download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"

namespace pagoda::hub {

namespace {

std::string origin_of(const std::string& url) {
  try {
    return parse_url(url).origin();
  } catch (const Error&) {
    return "";
  }
}

// An open file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// SHA-256 for LFS etags, git's blob SHA-1 ("blob <size>\0" + bytes) for 40-hex etags of a
// known size, none otherwise (an opaque etag from a mirror: only the size is checked).
class ContentHasher {
 public:
  ContentHasher(const std::string& etag, std::optional<uint64_t> size) : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (is_hex(etag, 64)) {
      md_ = EVP_sha256();
    } else if (is_hex(etag, 40) && size) {
      md_ = EVP_sha1();
      git_header_ = "blob " + std::to_string(*size) + std::string(1, '\0');
    }
    reset();
  }
  bool active() const { return md_ != nullptr; }
  void reset() {
    if (!md_) return;
    EVP_DigestInit_ex(ctx_.get(), md_, nullptr);
    if (!git_header_.empty()) EVP_DigestUpdate(ctx_.get(), git_header_.data(), git_header_.size());
  }
  void update(const char* data, size_t n) {
    if (md_) EVP_DigestUpdate(ctx_.get(), data, n);
  }
  std::string hex_digest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &len);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += hex[digest[i] >> 4];
      out += hex[digest[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
  const EVP_MD* md_ = nullptr;
  std::string git_header_;
};

void hash_existing(ContentHasher& hasher, int fd, uint64_t length, const std::string& path) {
  std::vector<char> buf(1 << 20);
  uint64_t offset = 0;
  while (offset < length) {
    const ssize_t n = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), length - offset), static_cast<off_t>(offset));
    if (n <= 0) throw Error("cannot read " + path + ": " + std::strerror(errno));
    hasher.update(buf.data(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
}

bool retryable_status(int status) { return status == 408 || status == 429 || status >= 500; }

}  // namespace

HttpResponse hub_request(const HubConfig& config, const std::string& method, std::string url,
                         const std::vector<std::pair<std::string, std::string>>& headers, const BodySink* sink,
                         bool follow_absolute, std::string* final_url, const HeadCheck* on_head) {
  const std::string endpoint_origin = origin_of(config.endpoint);
  for (int hop = 0;; ++hop) {
    HttpRequest req;
    req.method = method;
    req.url = url;
    req.headers = headers;
    req.timeout = config.timeout;
    req.ca_bundle_file = config.ca_bundle_file;
    const ParsedUrl parsed = parse_url(url);
    if (!config.token.empty() && parsed.origin() == endpoint_origin)
      req.headers.emplace_back("Authorization", "Bearer " + config.token);
    HttpResponse response = http_fetch(req, sink, 64u << 20, on_head);
    if (final_url) *final_url = url;
    const bool redirect = response.status == 301 || response.status == 302 || response.status == 303 ||
                          response.status == 307 || response.status == 308;
    const std::string location = response.header("location");
    if (!redirect || location.empty()) return response;
    // huggingface_hub's follow_relative_redirects: a Location without a host (a renamed repo)
    // is followed; one with a host (the CDN) is where the bytes are, left for the GET. Any
    // scheme counts as a host here, so "file:..." reaches resolve_location's refusal either way.
    const bool relative = uri_scheme(location).empty() && location.rfind("//", 0) != 0;
    if (!follow_absolute && !relative) return response;
    const std::string next = resolve_location(parsed, location);
    if (hop >= 10) throw Error(url + ": more than 10 redirects");
    url = next;
  }
}

void throw_http_error(const HubConfig& config, const HttpResponse& response, const std::string& what) {
  const int status = response.status;
  std::string detail = response.header("x-error-message");
  if (!config.token.empty())  // a server echoing the token must not make us print it
    for (size_t at; (at = detail.find(config.token)) != std::string::npos;) detail.replace(at, config.token.size(), "***");
  const std::string suffix = detail.empty() ? "" : " (" + detail + ")";
  // huggingface_hub reads X-Error-Code: the Hub answers 401 for a repo that does not exist (or
  // is private), so as not to reveal which.
  const std::string code = response.header("x-error-code");
  if (code == "RepoNotFound")
    throw Error(what + ": repository not found on " + config.endpoint + " (HTTP " + std::to_string(status) + ")" +
                (config.token.empty() ? "; if it is private, set HF_TOKEN" : ""));
  if (code == "EntryNotFound" || (status == 404 && code.empty()))
    throw Error(what + ": not found on " + config.endpoint + " (HTTP " + std::to_string(status) + ")" + suffix);
  if (code == "RevisionNotFound") throw Error(what + ": revision not found on " + config.endpoint + suffix);
  if (status == 401 || status == 403 || code == "GatedRepo") {
    throw Error(what + ": access denied (HTTP " + std::to_string(status) + "): the repo is gated or private; " +
                (config.token.empty() ? "set HF_TOKEN to a token of an account with access"
                                      : "the token in HF_TOKEN has no access to it (accept the terms on the repo page?)") +
                suffix);
  }
  throw Error(what + ": HTTP " + std::to_string(status) + " from " + config.endpoint + suffix);
}

uint64_t download_blob(const HubConfig& config, const RepoCache& cache, const BlobRequest& blob,
                       ProgressMeter& progress) {
  namespace fs = std::filesystem;
  const fs::path final_path = cache.blob_path(blob.etag);
  const fs::path partial_path = final_path.string() + ".incomplete";
  const fs::path lock_path = cache.lock_path(blob.etag);
  fs::create_directories(final_path.parent_path());
  fs::create_directories(lock_path.parent_path());

  // The lock: a second puller (thread or process; flock locks belong to the open file
  // description, so two open()s in one process exclude each other too) waits here, then finds
  // the blob in place. Python's filelock takes the same flock on the same path.
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) throw Error("cannot open " + lock_path.string() + ": " + std::strerror(errno));
  while (::flock(lock.get(), LOCK_EX) != 0)
    if (errno != EINTR) throw Error("cannot lock " + lock_path.string() + ": " + std::strerror(errno));

  std::error_code ec;
  if (fs::is_regular_file(final_path, ec) && (!blob.size || fs::file_size(final_path, ec) == *blob.size)) return 0;

  Fd out(::open(partial_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (out.get() < 0) throw Error("cannot write " + partial_path.string() + ": " + std::strerror(errno));
  uint64_t have = static_cast<uint64_t>(::lseek(out.get(), 0, SEEK_END));
  if (blob.size && have > *blob.size) {  // longer than the file: not a prefix of it
    if (::ftruncate(out.get(), 0) != 0) throw Error("cannot truncate " + partial_path.string());
    have = 0;
  }

  struct statvfs vfs {};
  if (blob.size && *blob.size > have && ::statvfs(final_path.parent_path().c_str(), &vfs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    const uint64_t need = *blob.size - have;
    if (free_bytes < need)
      throw Error("not enough free space for " + blob.file + ": it needs " + std::to_string(need) + " bytes, " +
                  final_path.parent_path().string() + " has " + std::to_string(free_bytes));
  }

  ContentHasher hasher(blob.etag, blob.size);
  hash_existing(hasher, out.get(), have, partial_path.string());
  const auto t0 = std::chrono::steady_clock::now();
  progress.file_started(blob.file, blob.size.value_or(0), have);
  uint64_t transferred = 0;

  auto restart_from_zero = [&] {
    if (::ftruncate(out.get(), 0) != 0) throw Error("cannot truncate " + partial_path.string());
    ::lseek(out.get(), 0, SEEK_SET);
    progress.bytes(-static_cast<int64_t>(have));
    have = 0;
    hasher.reset();
  };

  std::string last_failure;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (attempt > config.max_retries)
        throw Error("downloading " + blob.file + " failed after " + std::to_string(attempt) + " attempts: " +
                    last_failure + " (run the command again to resume from " + std::to_string(have) + " bytes)");
      auto delay = config.retry_base_delay * (1 << std::min(attempt - 1, 5));
      if (delay > std::chrono::milliseconds(30000)) delay = std::chrono::milliseconds(30000);
      progress.message(blob.file + ": " + last_failure + "; retrying in " +
                       std::to_string(delay.count() / 1000.0).substr(0, 4) + " s");
      std::this_thread::sleep_for(delay);
    }
    if (blob.size && have == *blob.size) break;  // a previous run left it whole, unverified
    std::vector<std::pair<std::string, std::string>> headers;
    if (have > 0) headers.emplace_back("Range", "bytes=" + std::to_string(have) + "-");
    bool write_failed = false;
    bool range_refused = false;
    bool too_long = false;
    // Judged from the head, before a body byte is written: a 200 to a ranged request is the
    // whole file (the server ignored Range), so start over; a 206 must start where we are; a
    // Content-Length past the size the Hub announced is refused here.
    HeadCheck on_head = [&](const HttpResponse& head) {
      if (have > 0 && head.status == 200) {
        restart_from_zero();
      } else if (head.status == 206) {
        const std::string range = head.header("content-range");  // "bytes START-END/TOTAL"
        if (range.rfind("bytes " + std::to_string(have) + "-", 0) != 0) {
          range_refused = true;
          return false;
        }
      }
      const std::optional<uint64_t> length = parse_byte_count(head.header("content-length"));
      if (blob.size && length && *length > *blob.size - have) {
        too_long = true;
        return false;
      }
      return true;
    };
    // Bytes past the announced size are never written, whatever the framing says (a chunked
    // or close-delimited body has no Content-Length to judge from the head).
    BodySink sink = [&](std::string_view piece) {
      if (blob.size && piece.size() > *blob.size - have) {
        too_long = true;
        return false;
      }
      const char* p = piece.data();
      size_t left = piece.size();
      while (left > 0) {
        const ssize_t n = ::write(out.get(), p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          write_failed = true;
          return false;
        }
        p += n;
        left -= static_cast<size_t>(n);
      }
      hasher.update(piece.data(), piece.size());
      have += piece.size();
      transferred += piece.size();
      progress.bytes(static_cast<int64_t>(piece.size()));
      return true;
    };
    HttpResponse response;
    try {
      response = hub_request(config, "GET", blob.url, headers, &sink, true, nullptr, &on_head);
    } catch (const TransportError& e) {
      last_failure = e.what();
      continue;
    }
    if (range_refused) {
      last_failure = "the server answered the Range request with another range";
      restart_from_zero();
      continue;
    }
    if (write_failed) throw Error("cannot write " + partial_path.string() + ": " + std::strerror(errno));
    if (too_long) {
      // Not retried: a server that sends more than the Hub announced is wrong, not flaky, and
      // a second try would write the same bytes again.
      fs::remove(partial_path, ec);
      throw Error(blob.file + ": the server sent more than the " + std::to_string(*blob.size) +
                  " bytes the Hub announced; the partial download was deleted");
    }
    if (response.status == 416 && blob.size && have == *blob.size) break;
    if (response.status < 200 || response.status >= 300) {
      if (retryable_status(response.status)) {
        last_failure = "HTTP " + std::to_string(response.status);
        continue;
      }
      throw_http_error(config, response, blob.file);
    }
    if (!response.body_complete) {
      last_failure = "the connection closed after " + std::to_string(have) + " bytes";
      continue;
    }
    break;
  }

  if (::fsync(out.get()) != 0) throw Error("cannot sync " + partial_path.string() + ": " + std::strerror(errno));
  if (blob.size && have != *blob.size) {
    fs::remove(partial_path, ec);
    throw Error(blob.file + ": downloaded " + std::to_string(have) + " bytes, the Hub said " + std::to_string(*blob.size));
  }
  if (hasher.active()) {
    const std::string digest = hasher.hex_digest();
    if (digest != blob.etag) {
      fs::remove(partial_path, ec);
      throw Error(blob.file + ": checksum mismatch (got " + digest + ", expected " + blob.etag +
                  "); the partial download was deleted");
    }
  }
  fs::rename(partial_path, final_path);
  progress.file_done(blob.file, have,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return transferred;
}

}  // namespace pagoda::hub
