// A stand-in Hugging Face Hub for tests, on 127.0.0.1 only (an ephemeral port), over HTTP or
// HTTPS (a certificate from test_pki.h). It answers what huggingface_hub and pagoda ask:
//
//   GET  /api/models/OWNER/REPO[/revision/REV]   {"id", "sha", "siblings": [{"rfilename"}]}
//   HEAD/GET /OWNER/REPO/resolve/REV/FILE
//        LFS file: 302 to http(s)://localhost:PORT/cdn/<sha256> (another origin than the
//        endpoint's 127.0.0.1, like the Hub's CDN) with X-Repo-Commit, X-Linked-Etag,
//        X-Linked-Size and the pointer file's ETag; git file: 200 with ETag = git blob sha1.
//   GET  /cdn/<sha256>   the bytes, honouring "Range: bytes=N-" (206 + Content-Range)
//
// The Hub's error answers: unknown repo 401 + X-Error-Code RepoNotFound; a gated repo's files
// without the token 401, with a wrong one 403 (X-Error-Code GatedRepo); a missing file 404
// EntryNotFound; unknown revision 404 RevisionNotFound. Faults for tests: cut a CDN body after
// N bytes (the connection closes mid-body), corrupt a body (one byte flipped, length kept),
// answer 503, send slowly, stall mid-body, send CDN bodies without Content-Length (ended by
// the close), point LFS redirects at another Location. Every request is logged (method, target,
// Range, whether an Authorization header came) for tests to assert on; one thread per
// connection.
#pragma once

#include <openssl/evp.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cctype>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::hub::testing {

inline std::string digest_hex(const EVP_MD* md, const std::string& prefix, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  EVP_DigestUpdate(ctx, data.data(), data.size());
  EVP_DigestFinal_ex(ctx, out, &len);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    hex += "0123456789abcdef"[out[i] >> 4];
    hex += "0123456789abcdef"[out[i] & 15];
  }
  return hex;
}
inline std::string sha256_hex(const std::string& data) { return digest_hex(EVP_sha256(), "", data); }
inline std::string git_blob_sha1(const std::string& data) {
  return digest_hex(EVP_sha1(), "blob " + std::to_string(data.size()) + std::string(1, '\0'), data);
}

struct FakeFile {
  std::string content;
  bool lfs = true;  // LFS: served through the CDN redirect, etag = sha256
  const char* linked_size = nullptr;  // non-null: the X-Linked-Size sent instead of the real size ("1000", "12abc")
};

struct FakeRepo {
  std::string commit = "0123456789abcdef0123456789abcdef01234567";
  std::map<std::string, FakeFile> files;
  bool gated = false;
  std::set<std::string> revisions;  // besides "main" and the commit: names the listing answers ("refs/pr/1")
};

// "%2F" -> "/" (the client percent-encodes a revision in the listing's path).
inline std::string percent_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct LoggedRequest {
  std::string method, target, range;
  bool authorization = false;
};

class FakeHub {
 public:
  struct Faults {
    uint64_t cut_after_bytes = 0;  // with cut_times > 0: close the connection after this many body bytes
    int cut_times = 0;
    int corrupt_times = 0;         // flip one byte of this many bodies
    int unavailable_times = 0;     // answer 503 this many times (CDN)
    int api_unavailable_times = 0; // answer 503 to the listing this many times
    int slow_ms_per_64k = 0;       // sleep between 64 KiB pieces (to make transfers overlap)
    bool ignore_range = false;     // answer a Range request with 200 and the whole body
    uint64_t stall_after_bytes = 0;  // with stall_times > 0: send this many body bytes, then
    int stall_times = 0;             // go silent for stall_ms (the connection stays open)
    int stall_ms = 0;
    bool close_delimited = false;  // CDN bodies without Content-Length: the close ends them
  };

  // tls_cert_pem / tls_key_pem non-empty: HTTPS.
  explicit FakeHub(std::string token = "", std::string tls_cert_pem = "", std::string tls_key_pem = "")
      : token_(std::move(token)), tls_(!tls_cert_pem.empty()), ssl_ctx_(boost::asio::ssl::context::tls_server) {
    if (tls_) {
      ssl_ctx_.use_certificate_chain(boost::asio::buffer(tls_cert_pem));
      ssl_ctx_.use_private_key(boost::asio::buffer(tls_key_pem), boost::asio::ssl::context::pem);
    }
    using tcp = boost::asio::ip::tcp;
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));  // loopback only
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~FakeHub() {
    stopping_ = true;
    boost::system::error_code ec;
    {  // wake the blocking accept()
      boost::asio::io_context ioc;
      boost::asio::ip::tcp::socket s(ioc);
      s.connect({boost::asio::ip::make_address("127.0.0.1"), port_}, ec);
    }
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(connections_);
    }
    for (auto& t : threads) t.join();
  }

  std::string endpoint() const { return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_); }
  std::string cdn_origin() const { return std::string(tls_ ? "https" : "http") + "://localhost:" + std::to_string(port_); }

  void add_repo(const std::string& id, FakeRepo repo) {
    std::lock_guard lock(mu_);
    repos_[id] = std::move(repo);
  }
  // Requests for `old_id` answer 307 with a relative Location naming `new_id`, as the Hub
  // does for a renamed or transferred repo.
  void add_rename(const std::string& old_id, const std::string& new_id) {
    std::lock_guard lock(mu_);
    renames_[old_id] = new_id;
  }
  void set_faults(Faults f) {
    std::lock_guard lock(mu_);
    faults_ = f;
  }
  // Non-empty: an LFS file's 302 points here instead of at the CDN (a hostile Location).
  void set_lfs_location(std::string location) {
    std::lock_guard lock(mu_);
    lfs_location_ = std::move(location);
  }
  std::vector<LoggedRequest> log() const {
    std::lock_guard lock(mu_);
    return log_;
  }
  void clear_log() {
    std::lock_guard lock(mu_);
    log_.clear();
  }
  // Requests whose target starts with `prefix` (and whose method is `method`, when given).
  int count(const std::string& prefix, const std::string& method = "") const {
    int n = 0;
    for (const auto& r : log())
      if (r.target.rfind(prefix, 0) == 0 && (method.empty() || r.method == method)) ++n;
    return n;
  }

 private:
  struct Reply {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    uint64_t cut_after = 0;  // 0: send the whole body
    int slow_ms = 0;
    uint64_t stall_after = 0;
    int stall_ms = 0;
    bool close_delimited = false;
  };

  void accept_loop() {
    while (!stopping_) {
      boost::asio::ip::tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_) break;
      if (ec) continue;
      std::lock_guard lock(mu_);
      connections_.emplace_back([this, s = std::move(socket)]() mutable { serve(std::move(s)); });
    }
  }

  void serve(boost::asio::ip::tcp::socket socket) {
    boost::system::error_code ec;
    if (!tls_) {
      handle(socket);
    } else {
      boost::asio::ssl::stream<boost::asio::ip::tcp::socket> stream(std::move(socket), ssl_ctx_);
      stream.handshake(boost::asio::ssl::stream_base::server, ec);
      if (!ec) handle(stream);
      stream.lowest_layer().close(ec);
    }
  }

  template <class Stream>
  void handle(Stream& stream) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> req;
    boost::system::error_code ec;
    http::read(stream, buffer, req, ec);
    if (ec) return;
    const std::string auth(req[http::field::authorization]);
    LoggedRequest entry{std::string(req.method_string()), std::string(req.target()), std::string(req[http::field::range]),
                        !auth.empty()};
    {
      std::lock_guard lock(mu_);
      log_.push_back(entry);
    }
    Reply reply = route(entry, auth);
    const bool head = entry.method == "HEAD";
    std::string text = "HTTP/1.1 " + std::to_string(reply.status) + " X\r\n";
    for (const auto& [k, v] : reply.headers) text += k + ": " + v + "\r\n";
    if (!reply.close_delimited) text += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
    text += "Connection: close\r\n\r\n";
    boost::asio::write(stream, boost::asio::buffer(text), ec);
    if (head || ec) return;
    const size_t limit = reply.cut_after ? std::min<size_t>(reply.cut_after, reply.body.size()) : reply.body.size();
    for (size_t at = 0; at < limit && !ec;) {
      if (reply.slow_ms) std::this_thread::sleep_for(std::chrono::milliseconds(reply.slow_ms));
      size_t n = std::min<size_t>(65536, limit - at);
      if (reply.stall_ms && at < reply.stall_after) n = std::min<size_t>(n, reply.stall_after - at);
      boost::asio::write(stream, boost::asio::buffer(reply.body.data() + at, n), ec);
      at += n;
      if (reply.stall_ms && at == reply.stall_after) std::this_thread::sleep_for(std::chrono::milliseconds(reply.stall_ms));
    }
  }

  static Reply error(int status, const std::string& code, const std::string& message) {
    Reply r;
    r.status = status;
    r.headers = {{"X-Error-Code", code}, {"X-Error-Message", message}, {"Content-Type", "application/json"}};
    r.body = "{\"error\":\"" + message + "\"}";
    return r;
  }

  Reply route(const LoggedRequest& req, const std::string& auth) {
    std::lock_guard lock(mu_);
    const std::string& t = req.target;
    for (const auto& [old_id, new_id] : renames_) {
      for (const std::string& prefix : {"/api/models/" + old_id, "/" + old_id + "/resolve/"}) {
        if (t.rfind(prefix, 0) == 0 && (t.size() == prefix.size() || prefix.back() == '/' || t[prefix.size()] == '/')) {
          Reply r;
          r.status = 307;
          std::string moved = prefix;
          moved.replace(moved.find(old_id), old_id.size(), new_id);
          r.headers = {{"Location", moved + t.substr(prefix.size())}};
          return r;
        }
      }
    }
    if (t.rfind("/api/models/", 0) == 0) {
      std::string rest = t.substr(12), revision = "main";
      const size_t rev_at = rest.find("/revision/");
      if (rev_at != std::string::npos) {
        revision = rest.substr(rev_at + 10);
        rest = rest.substr(0, rev_at);
      }
      if (faults_.api_unavailable_times > 0) {
        --faults_.api_unavailable_times;
        return error(503, "", "try again");
      }
      auto it = repos_.find(rest);
      if (it == repos_.end()) return error(401, "RepoNotFound", "Repository not found");
      revision = percent_decode(revision);
      if (revision != "main" && revision != it->second.commit && !it->second.revisions.count(revision))
        return error(404, "RevisionNotFound", "Invalid rev id");
      std::string siblings;
      for (const auto& [name, f] : it->second.files)
        siblings += (siblings.empty() ? "" : ",") + std::string("{\"rfilename\":\"") + name + "\"}";
      Reply r;
      r.headers = {{"Content-Type", "application/json"}};
      r.body = "{\"id\":\"" + rest + "\",\"sha\":\"" + it->second.commit + "\",\"gated\":" +
               (it->second.gated ? "\"manual\"" : "false") + ",\"siblings\":[" + siblings + "]}";
      return r;
    }
    if (t.rfind("/cdn/", 0) == 0) {
      const std::string sha = t.substr(5, 64);
      const FakeFile* file = nullptr;
      for (const auto& [id, repo] : repos_)
        for (const auto& [name, f] : repo.files)
          if (f.lfs && sha256_hex(f.content) == sha) file = &f;
      if (!file) return error(404, "EntryNotFound", "no such object");
      if (faults_.unavailable_times > 0) {
        --faults_.unavailable_times;
        return error(503, "", "try again");
      }
      Reply r;
      r.headers = {{"ETag", "\"" + sha + "\""}, {"Accept-Ranges", "bytes"}};
      r.body = file->content;
      uint64_t from = 0;
      if (req.range.rfind("bytes=", 0) == 0 && !faults_.ignore_range) {
        from = std::stoull(req.range.substr(6));
        if (from >= r.body.size()) return error(416, "", "range not satisfiable");
        r.status = 206;
        r.headers.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                                    std::to_string(r.body.size() - 1) + "/" +
                                                    std::to_string(r.body.size()));
        r.body = r.body.substr(from);
      }
      if (faults_.corrupt_times > 0 && req.method == "GET") {
        --faults_.corrupt_times;
        r.body[r.body.size() / 2] ^= 0x5a;
      }
      if (faults_.cut_times > 0 && req.method == "GET") {
        --faults_.cut_times;
        r.cut_after = faults_.cut_after_bytes;
      }
      if (faults_.stall_times > 0 && req.method == "GET") {
        --faults_.stall_times;
        r.stall_after = faults_.stall_after_bytes;
        r.stall_ms = faults_.stall_ms;
      }
      r.slow_ms = faults_.slow_ms_per_64k;
      r.close_delimited = faults_.close_delimited;
      return r;
    }
    // /OWNER/REPO/resolve/REV/FILE
    const size_t resolve_at = t.find("/resolve/");
    if (resolve_at == std::string::npos) return error(404, "", "not found");
    const std::string repo_id = t.substr(1, resolve_at - 1);
    std::string rest = t.substr(resolve_at + 9);
    const std::string revision = rest.substr(0, rest.find('/'));
    const std::string path = rest.substr(rest.find('/') + 1);
    auto it = repos_.find(repo_id);
    if (it == repos_.end()) return error(401, "RepoNotFound", "Repository not found");
    const FakeRepo& repo = it->second;
    if (repo.gated && auth != "Bearer " + token_) {
      return auth.empty() ? error(401, "GatedRepo", "Access to model " + repo_id + " is restricted. You must be authenticated.")
                          : error(403, "GatedRepo", "Access to model " + repo_id + " is restricted; your request was rejected.");
    }
    if (revision != "main" && revision != repo.commit) return error(404, "RevisionNotFound", "Invalid rev id");
    auto f = repo.files.find(path);
    if (f == repo.files.end()) return error(404, "EntryNotFound", "Entry not found");
    Reply r;
    r.headers = {{"X-Repo-Commit", repo.commit}};
    if (f->second.lfs) {
      const std::string sha = sha256_hex(f->second.content);
      r.status = 302;
      r.headers.emplace_back("Location", !lfs_location_.empty() ? lfs_location_
                                                                 : cdn_origin() + "/cdn/" + sha + "?X-Amz-Expires=3600");
      r.headers.emplace_back("X-Linked-Etag", "\"" + sha + "\"");
      r.headers.emplace_back("X-Linked-Size", f->second.linked_size ? std::string(f->second.linked_size)
                                                                     : std::to_string(f->second.content.size()));
      r.headers.emplace_back("ETag", "\"" + git_blob_sha1("pointer " + sha) + "\"");  // the pointer file's
      r.body = "Found. Redirecting to " + cdn_origin() + "/cdn/" + sha;
    } else {
      r.headers.emplace_back("ETag", "\"" + git_blob_sha1(f->second.content) + "\"");
      r.body = f->second.content;
    }
    return r;
  }

  std::string token_;
  bool tls_;
  boost::asio::ssl::context ssl_ctx_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::vector<std::thread> connections_;
  std::map<std::string, FakeRepo> repos_;
  std::map<std::string, std::string> renames_;
  Faults faults_;
  std::string lfs_location_;
  std::vector<LoggedRequest> log_;
};

}  // namespace pagoda::hub::testing
