// A tiny OpenAI-shaped HTTP server for the loadgen tests, made with blocking
// Asio: one thread accepts, one thread per connection. The behaviour of each
// request is chosen by its "model" field (see Behaviour), so one server can
// answer a run with a known mix of successes and failures.
//
// The request index (arrival order, from 0) is passed to the chooser, so
// "mixed" runs have exactly known counts per error class.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::loadgen::testing {

enum class Behaviour {
  kOk,           // chunked SSE: role chunk, max_tokens content chunks, finish, usage, [DONE]
  kOkNoUsage,    // as kOk without the usage chunk
  kOkCloseFramed,// as kOk, body framed by closing the connection (no chunked encoding)
  kHttp500,      // 500 with a JSON error body
  kHttp404,
  kStallHead,    // never answers (reads until the client gives up)
  kStallBody,    // sends the head and one content chunk, then stalls
  kMalformed,    // data: {not json
  kCloseMid,     // two content chunks, then closes inside the chunked body
  kNoDone,       // full stream but closes (cleanly) without data: [DONE]
  kStreamError,  // data: {"error": {...}}
  kNotSse,       // a plain JSON body (non-streaming answer)
};

inline Behaviour behaviour_from_model(const std::string& model, int64_t index) {
  if (model == "ok-no-usage") return Behaviour::kOkNoUsage;
  if (model == "ok-close") return Behaviour::kOkCloseFramed;
  if (model == "500") return Behaviour::kHttp500;
  if (model == "404") return Behaviour::kHttp404;
  if (model == "stall-head") return Behaviour::kStallHead;
  if (model == "stall-body") return Behaviour::kStallBody;
  if (model == "malformed") return Behaviour::kMalformed;
  if (model == "close-mid") return Behaviour::kCloseMid;
  if (model == "no-done") return Behaviour::kNoDone;
  if (model == "stream-error") return Behaviour::kStreamError;
  if (model == "not-sse") return Behaviour::kNotSse;
  if (model == "mixed") {  // 7 classes, round robin by arrival
    static constexpr Behaviour kCycle[] = {Behaviour::kOk,        Behaviour::kHttp500,  Behaviour::kStallHead,
                                           Behaviour::kMalformed, Behaviour::kCloseMid, Behaviour::kNoDone,
                                           Behaviour::kStreamError};
    return kCycle[index % 7];
  }
  return Behaviour::kOk;
}

class StubServer {
 public:
  // The content of every content chunk; the answer is this repeated max_tokens times.
  static constexpr const char* kPiece = "tok ";

  StubServer() : acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~StubServer() {
    stopping_ = true;
    boost::system::error_code ec;
    // Wake the blocking accept() with a throwaway connection, and close the acceptor only
    // after its thread is gone: closing it while accept() runs on another thread is a data
    // race inside Asio (ThreadSanitizer reported it on every test using this stub).
    {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket s(io);
      s.connect({boost::asio::ip::make_address("127.0.0.1"), port_}, ec);
    }
    accept_thread_.join();
    acceptor_.close(ec);
    std::vector<std::thread> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns.swap(conn_threads_);
    }
    for (std::thread& t : conns) t.join();
  }
  StubServer(const StubServer&) = delete;
  StubServer& operator=(const StubServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int64_t num_requests() const { return next_index_.load(); }
  // Bodies as received, in arrival order.
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::string> targets() const {
    std::lock_guard<std::mutex> lock(mu_);
    return targets_;
  }
  std::vector<std::string> auth_headers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return auth_;
  }
  // Per content chunk delay (spreads ITL samples).
  void set_chunk_delay(std::chrono::microseconds d) { chunk_delay_us_ = d.count(); }

  // A port on which nothing listens (bound, then closed).
  static unsigned short closed_port() {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    unsigned short p = a.local_endpoint().port();
    a.close();
    return p;
  }

 private:
  using tcp = boost::asio::ip::tcp;

  void accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      auto sock = std::make_shared<tcp::socket>(io_);
      acceptor_.accept(*sock, ec);
      if (stopping_) return;
      if (ec) continue;
      std::lock_guard<std::mutex> lock(mu_);
      conn_threads_.emplace_back([this, sock] { serve(*sock); });
    }
  }

  static void write(tcp::socket& s, const std::string& data) {
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(data), ec);
  }
  static void write_chunk(tcp::socket& s, const std::string& data) {
    std::ostringstream os;
    os << std::hex << data.size() << "\r\n" << data << "\r\n";
    write(s, os.str());
  }
  static void wait_for_close(tcp::socket& s) {
    char buf[256];
    boost::system::error_code ec;
    while (!ec) s.read_some(boost::asio::buffer(buf), ec);
  }

  static int64_t count_words(const std::string& s) {
    int64_t n = 0;
    bool in = false;
    for (char c : s) {
      bool sp = c == ' ' || c == '\n';
      if (!sp && !in) ++n;
      in = !sp;
    }
    return n;
  }

  void serve(tcp::socket& s) {
    boost::asio::streambuf buf;
    boost::system::error_code ec;
    size_t head_len = boost::asio::read_until(s, buf, "\r\n\r\n", ec);
    if (ec) return;
    std::string all(boost::asio::buffers_begin(buf.data()), boost::asio::buffers_end(buf.data()));
    std::string head = all.substr(0, head_len);
    std::string body = all.substr(head_len);
    size_t content_length = 0;
    std::string auth;
    std::istringstream hs(head);
    std::string line, request_line;
    std::getline(hs, request_line);
    while (std::getline(hs, line)) {
      std::string lower;
      for (char c : line) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      if (lower.rfind("content-length:", 0) == 0) content_length = std::stoul(line.substr(15));
      if (lower.rfind("authorization:", 0) == 0) auth = line.substr(15, line.find('\r') == std::string::npos ? std::string::npos : line.find('\r') - 15);
    }
    while (body.size() < content_length) {
      char tmp[4096];
      size_t n = s.read_some(boost::asio::buffer(tmp), ec);
      if (ec) return;
      body.append(tmp, n);
    }
    std::string target = request_line.substr(request_line.find(' ') + 1);
    target = target.substr(0, target.find(' '));
    nlohmann::json req = nlohmann::json::parse(body, nullptr, false);
    int64_t index = next_index_++;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(req);
      targets_.push_back(target);
      auth_.push_back(auth);
    }
    std::string model = req.is_object() && req.contains("model") && req["model"].is_string() ? req["model"].get<std::string>() : "";
    Behaviour b = behaviour_from_model(model, index);
    int64_t max_tokens = req.is_object() && req.contains("max_tokens") ? req["max_tokens"].get<int64_t>() : 4;
    bool chat = target.find("/chat/") != std::string::npos;

    // Usage as a prefix-caching server would report it: the prompt is the word
    // count of every message; everything before the last user message is cached.
    int64_t prompt_tokens = 0, cached_tokens = 0;
    std::string expected_answer;
    for (int64_t i = 0; i < max_tokens; ++i) expected_answer += kPiece;
    if (chat && req.contains("messages")) {
      const auto& msgs = req["messages"];
      for (size_t i = 0; i < msgs.size(); ++i) {
        int64_t w = count_words(msgs[i]["content"].get<std::string>());
        prompt_tokens += w;
        if (i + 1 < msgs.size()) cached_tokens += w;
        if (msgs[i]["role"] == "assistant" && msgs[i]["content"] != expected_answer) {
          write(s, "HTTP/1.1 400 Bad Request\r\nContent-Length: 29\r\nConnection: close\r\n\r\n"
                   "{\"error\":\"history mismatch\"}\n");
          return;
        }
      }
    } else if (req.contains("prompt")) {
      prompt_tokens = count_words(req["prompt"].get<std::string>());
    }

    auto content_chunk = [&](const std::string& text) {
      nlohmann::json c = chat ? nlohmann::json{{"object", "chat.completion.chunk"},
                                               {"choices", {{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}}}}}
                              : nlohmann::json{{"object", "text_completion"},
                                               {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}}}};
      return "data: " + c.dump() + "\n\n";
    };
    auto usage_chunk = [&] {
      nlohmann::json u = {{"object", "chat.completion.chunk"},
                          {"choices", nlohmann::json::array()},
                          {"usage", {{"prompt_tokens", prompt_tokens},
                                     {"completion_tokens", max_tokens},
                                     {"total_tokens", prompt_tokens + max_tokens},
                                     {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
      return "data: " + u.dump() + "\n\n";
    };
    const std::string sse_head_chunked =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    const std::string sse_head_close = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    auto delay = [&] {
      if (chunk_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(chunk_delay_us_.load()));
    };

    switch (b) {
      case Behaviour::kOk:
      case Behaviour::kOkNoUsage: {
        write(s, sse_head_chunked);
        if (chat) write_chunk(s, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
        for (int64_t i = 0; i < max_tokens; ++i) {
          delay();
          write_chunk(s, content_chunk(kPiece));
        }
        write_chunk(s, ": keep-alive comment\n\n");
        if (b == Behaviour::kOk) write_chunk(s, usage_chunk());
        write_chunk(s, "data: [DONE]\n\n");
        write(s, "0\r\n\r\n");
        break;
      }
      case Behaviour::kOkCloseFramed: {
        write(s, sse_head_close);
        std::string all_events;
        for (int64_t i = 0; i < max_tokens; ++i) all_events += content_chunk(kPiece);  // merged in one write
        write(s, all_events + usage_chunk() + "data: [DONE]\r\n\r\n");
        break;
      }
      case Behaviour::kHttp500:
        write(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 40\r\n"
                 "Connection: close\r\n\r\n{\"error\":{\"message\":\"engine exploded\"}}\n");
        break;
      case Behaviour::kHttp404:
        write(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        break;
      case Behaviour::kStallHead:
        wait_for_close(s);
        break;
      case Behaviour::kStallBody:
        write(s, sse_head_chunked);
        write_chunk(s, content_chunk(kPiece));
        wait_for_close(s);
        break;
      case Behaviour::kMalformed:
        write(s, sse_head_chunked);
        write_chunk(s, content_chunk(kPiece));
        write_chunk(s, "data: {not json\n\n");
        write_chunk(s, "data: [DONE]\n\n");
        write(s, "0\r\n\r\n");
        break;
      case Behaviour::kCloseMid:
        write(s, sse_head_chunked);
        write_chunk(s, content_chunk(kPiece));
        write_chunk(s, content_chunk(kPiece));
        write(s, "40\r\ndata: {\"choi");  // a chunk cut short, then the connection closes
        break;
      case Behaviour::kNoDone:
        write(s, sse_head_chunked);
        write_chunk(s, content_chunk(kPiece));
        write_chunk(s, usage_chunk());
        write(s, "0\r\n\r\n");
        break;
      case Behaviour::kStreamError:
        write(s, sse_head_chunked);
        write_chunk(s, "data: {\"error\":{\"message\":\"out of KV blocks\",\"code\":503}}\n\n");
        write(s, "0\r\n\r\n");
        break;
      case Behaviour::kNotSse:
        write(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\nConnection: close\r\n\r\n"
                 "{\"choices\":[]}");
        break;
    }
    boost::system::error_code ignored;
    s.shutdown(tcp::socket::shutdown_send, ignored);
    if (b != Behaviour::kStallHead && b != Behaviour::kStallBody) wait_for_close(s);
  }

  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::vector<std::thread> conn_threads_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::string> targets_;
  std::vector<std::string> auth_;
  std::atomic<int64_t> next_index_{0};
  std::atomic<int64_t> chunk_delay_us_{0};
};

}  // namespace pagoda::loadgen::testing
