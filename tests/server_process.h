// Test helpers: run `pagoda serve` as a child process on a free port, and a minimal
// blocking HTTP/1.1 client over POSIX sockets (independent of the server's Beast code).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::testing {

struct HttpResult {
  int status = 0;  // 0: no response (connection failed or closed early)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline std::string build_request(const std::string& method, const std::string& path, const std::string& body,
                                 const std::vector<std::string>& extra_headers = {}) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : extra_headers) req += h + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return req + "\r\n" + body;
}

// Reads until EOF (the request said Connection: close) or timeout.
inline std::string read_all(int fd, double timeout_s = 60) {
  std::string out;
  char buf[16384];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t eol = s.find("\r\n", i);
    if (eol == std::string::npos) break;
    size_t len = std::strtoul(s.substr(i, eol - i).c_str(), nullptr, 16);
    if (len == 0) break;
    out += s.substr(eol + 2, len);
    i = eol + 2 + len + 2;
  }
  return out;
}

inline HttpResult parse_response(const std::string& raw) {
  HttpResult r;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) return r;
  std::istringstream head(raw.substr(0, head_end));
  std::string line;
  std::getline(head, line);
  r.status = std::atoi(line.substr(line.find(' ') + 1).c_str());
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    r.headers[lower(line.substr(0, colon))] = v;
  }
  std::string body = raw.substr(head_end + 4);
  r.body = lower(r.headers["transfer-encoding"]) == "chunked" ? dechunk(body) : body;
  return r;
}

// A request body with 1-4 random edits (delete, insert or replace a byte from
// `alphabet`, splice in a piece of itself), for fuzzing the HTTP API.
inline std::string mutate_body(std::string body, std::mt19937_64& rng, const std::string& alphabet) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !body.empty(); ++e) {
    const size_t pos = rng() % body.size();
    switch (rng() % 4) {
      case 0: body.erase(pos, 1 + rng() % 8); break;
      case 1: body.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
      case 2: body[pos] = alphabet[rng() % alphabet.size()]; break;
      case 3: body.insert(pos, body.substr(rng() % body.size(), 1 + rng() % 16)); break;
    }
  }
  return body;
}

inline HttpResult http(uint16_t port, const std::string& method, const std::string& path,
                       const std::string& body = {}, const std::vector<std::string>& headers = {},
                       double timeout_s = 120) {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, build_request(method, path, body, headers));
  std::string raw = read_all(fd, timeout_s);
  ::close(fd);
  return parse_response(raw);
}

// The `data: ...` payloads of an SSE body, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t i = 0;
  while ((i = body.find("data: ", i)) != std::string::npos) {
    size_t end = body.find("\n\n", i);
    if (end == std::string::npos) break;
    out.push_back(body.substr(i + 6, end - i - 6));
    i = end + 2;
  }
  return out;
}

// `pagoda serve` as a child process. The port is read from its start-up line.
class ServerProcess {
 public:
  // args: everything after `pagoda serve` (a --port is added: 0). env: NAME=VALUE.
  ServerProcess(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    log_path_ = "/tmp/pagoda_serve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".log";
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> all = {PAGODA_BINARY, "serve", "--port", "0"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(PAGODA_BINARY, argv.data());
      ::_exit(127);
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(log_path_.c_str());
  }

  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Waits for the listening line; returns the port (0 on timeout or exit).
  uint16_t wait_listening(double timeout_s = 30) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      std::string l = log();
      size_t p = l.find("listening on http://");
      if (p != std::string::npos) {
        size_t colon = l.find(':', p + 20);
        port_ = static_cast<uint16_t>(std::atoi(l.c_str() + colon + 1));
        return port_;
      }
      if (has_exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  // Waits for "ready" in the log.
  bool wait_ready(double timeout_s = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (log().find("ready:") != std::string::npos) return true;
      if (has_exited()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  uint16_t start(double timeout_s = 60) {
    if (wait_listening(timeout_s) == 0) return 0;
    return wait_ready(timeout_s) ? port_ : 0;
  }
  bool has_exited() {
    if (exited_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = status;
    }
    return exited_;
  }
  // Sends `sig` and waits up to timeout_s for the exit; returns the exit code
  // (-1: still running, -2: killed by a signal).
  int signal_and_wait(int sig, double timeout_s) {
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (has_exited()) return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (has_exited()) return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  // The process's thread count (/proc), 0 when unreadable.
  int threads() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
    return 0;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  bool exited_ = false;
  int exit_status_ = 0;
  std::string log_path_;
};

// A test suite sharing one `pagoda serve`: a derived suite's SetUpTestSuite calls
// start_server(args); every test then finds it on port_ (the suite fails if it did not start).
template <class Suite>
class SuiteServer : public ::testing::Test {
 protected:
  static void start_server(std::vector<std::string> args) {
    server_ = new ServerProcess(std::move(args));
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(port_, 0) << server_->log(); }
  static inline ServerProcess* server_ = nullptr;
  static inline uint16_t port_ = 0;
};

}  // namespace pagoda::testing
