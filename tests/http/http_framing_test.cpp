// Request framing over raw sockets (harness: http_test_harness.h): what delimits a request
// body (RFC 9112 6 and 7.1). Every request here is either read exactly once, after which
// the same connection serves the next request, or refused with one 400 / 501 error body
// after which the connection closes. A request read as two (a body taken for the next
// request) or framed by a Content-Length its Transfer-Encoding contradicts is how a
// request is smuggled past a proxy that frames it the other way.
#include "http/http_test_harness.h"
#include "http/http_wire.h"

namespace pagoda::http {
namespace {

using namespace http_test;

constexpr double kReadTimeout = 5.0;  // generous: 2 loaded cores

// Every response on `c` until the server closes it (or nothing comes for kReadTimeout).
std::vector<Response> responses_until_close(Client& c) {
  std::vector<Response> out;
  while (auto r = c.read_response(kReadTimeout)) out.push_back(std::move(*r));
  return out;
}

class HttpFramingTest : public HttpServerTest {
 protected:
  // `request` gets exactly one answer, `status` with an error body, and the connection
  // closes after it.
  void expect_refused(const std::string& request, int status, const std::string& why) {
    SCOPED_TRACE(why);
    Client c(port);
    c.send(request);
    const std::vector<Response> rs = responses_until_close(c);
    ASSERT_EQ(rs.size(), 1u) << "answers: " << rs.size() << (rs.size() > 1 ? ", the second " +
                                                             std::to_string(rs[1].status) : "");
    EXPECT_EQ(rs[0].status, status);
    const auto j = nlohmann::json::parse(rs[0].body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << rs[0].body;
    EXPECT_EQ(j["error"]["code"], status);
    EXPECT_EQ(rs[0].header("connection"), "close");
    EXPECT_TRUE(c.wait_closed(kReadTimeout));
  }

  // `request` (to /echo) is answered once with `body`, and the connection then serves
  // the next request: the body was framed exactly.
  void expect_read_once(const std::string& request, const std::string& body, const std::string& why) {
    SCOPED_TRACE(why);
    Client c(port);
    c.send(request);
    auto r = c.read_response(kReadTimeout);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, body);
    c.send(get("/health"));
    r = c.read_response(kReadTimeout);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, R"({"status":"ok"})");
  }

  static std::string head(const std::string& headers, const std::string& version = "HTTP/1.1") {
    return "POST /echo " + version + "\r\nHost: localhost\r\n" + headers + "\r\n";
  }
};

constexpr const char* kChunkedHello = "5\r\nhello\r\n0\r\n\r\n";

TEST_F(HttpFramingTest, TransferEncodingOtherThanAFinalChunkedIsRefused) {
  start();
  // Content-Length next to a Transfer-Encoding that does not end in chunked: before, the
  // Content-Length framed it and it was answered 200.
  expect_refused(head("Transfer-Encoding: chunked, identity\r\nContent-Length: 5\r\n") + "hello", 400,
                 "chunked, identity + Content-Length");
  expect_refused(head("Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n") + "hello", 400,
                 "xchunked + Content-Length");
  expect_refused(head("Transfer-Encoding: identity\r\nContent-Length: 5\r\n") + "hello", 400,
                 "identity + Content-Length");
  expect_refused(head("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") + kChunkedHello, 400,
                 "chunked, then Content-Length");
  expect_refused(head("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + kChunkedHello, 400,
                 "Content-Length, then chunked");
  // Without a Content-Length, a Transfer-Encoding that is not chunked left the body to be
  // read as the next request: one request answered twice (200, then 400).
  expect_refused(head("Transfer-Encoding: chunked, identity\r\n") + kChunkedHello, 400, "chunked, identity");
  expect_refused(head("Transfer-Encoding: xchunked\r\n") + kChunkedHello, 400, "xchunked");
  expect_refused(head("Transfer-Encoding: chunked, chunked\r\n") + kChunkedHello, 400, "chunked twice in one field");
  expect_refused(head("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") + kChunkedHello, 400,
                 "chunked in two fields");
  expect_refused(head("Transfer-Encoding: \r\n") + kChunkedHello, 400, "empty Transfer-Encoding");
  expect_refused(head("Transfer-Encoding: chunked;q=1\r\n") + kChunkedHello, 400, "chunked with a parameter");
  expect_refused(head("Transfer-Encoding: \"chunked\"\r\n") + kChunkedHello, 400, "quoted chunked");
  // HTTP/1.0 has no Transfer-Encoding: its framing is faulty whatever it says (RFC 9112 6.1).
  expect_refused(head("Transfer-Encoding: chunked\r\n", "HTTP/1.0") + kChunkedHello, 400, "HTTP/1.0 chunked");
}

TEST_F(HttpFramingTest, CodingsBeforeChunkedAre501) {
  start();
  // The gzip used to be ignored: the body reached the handler still compressed.
  expect_refused(head("Transfer-Encoding: gzip, chunked\r\n") + kChunkedHello, 501, "gzip, chunked");
  expect_refused(head("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n") + kChunkedHello, 501,
                 "gzip and chunked in two fields");
  expect_refused(head("Transfer-Encoding: identity, chunked\r\n") + kChunkedHello, 501, "identity, chunked");
  expect_refused(head("Transfer-Encoding: x-custom, chunked\r\n") + kChunkedHello, 501, "unknown, chunked");
  std::lock_guard lock(mu);
  for (const std::string& line : completed) EXPECT_NE(line, "POST /echo 200");
}

TEST_F(HttpFramingTest, WellFormedChunkedBodiesAreReadOnce) {
  start();
  expect_read_once(head("Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world",
                   "two chunks");
  expect_read_once(head("Transfer-Encoding: Chunked\r\n") + kChunkedHello, "hello", "case-insensitive coding");
  expect_read_once(head("Transfer-Encoding:  chunked \r\n") + kChunkedHello, "hello", "spaces around the coding");
  expect_read_once(head("Transfer-Encoding: chunked\r\n") + "0\r\n\r\n", "", "empty body");
  expect_read_once(head("Transfer-Encoding: chunked\r\n") + "A\r\n0123456789\r\n0005\r\nabcde\r\n000\r\n\r\n",
                   "0123456789abcde", "upper-case hex and leading zeros");
  expect_read_once(head("Transfer-Encoding: chunked\r\n") +
                       "5;name=value\r\nhello\r\n6 ; a ; b = \"q \\\" s\"\r\n world\r\n0;last\r\n\r\n",
                   "hello world", "chunk extensions (tokens, quoted strings, spaces around ; and =)");
  expect_read_once(head("Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\nX-Trailer: a\r\nContent-Length: 99\r\n\r\n",
                   "hello", "trailers (discarded, even a Content-Length)");
  // A trailer is not a header: the handler sees the head's X-Test only.
  {
    Client c(port);
    c.send(head("Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\nX-Test: smuggled\r\n\r\n");
    auto r = c.read_response(kReadTimeout);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("x-test-seen"), "-");
  }
  // A chunked request and the next one in one write: two answers, in order.
  {
    Client c(port);
    c.send(head("Transfer-Encoding: chunked\r\n") + "3\r\none\r\n0\r\n\r\n" + post("/echo", "two"));
    auto r1 = c.read_response(kReadTimeout);
    auto r2 = c.read_response(kReadTimeout);
    ASSERT_TRUE(r1 && r2);
    EXPECT_EQ(r1->body, "one");
    EXPECT_EQ(r2->body, "two");
  }
  // 100-continue, then the chunked body.
  {
    Client c(port);
    c.send(head("Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n"));
    auto r = c.read_response(kReadTimeout);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 100);
    c.send(kChunkedHello);
    r = c.read_response(kReadTimeout);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello");
  }
}

TEST_F(HttpFramingTest, ChunkedBodyArrivingByteByByteIsReadOnce) {
  start();
  Client c(port);
  c.send(head("Transfer-Encoding: chunked\r\n"));
  const std::string body = "5;e=\"v\"\r\nhello\r\n1\r\n!\r\n0\r\nT: x\r\n\r\n";
  for (char ch : body) {
    c.send(std::string(1, ch));
    std::this_thread::sleep_for(1ms);  // lets most bytes arrive in a read of their own
  }
  auto r = c.read_response(kReadTimeout);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello!");
  c.send(get("/health"));
  r = c.read_response(kReadTimeout);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpFramingTest, MalformedChunkedBodiesAre400AndClose) {
  start();
  const std::string te = head("Transfer-Encoding: chunked\r\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zz\r\nhello\r\n0\r\n\r\n", "size not hex"},
      {"-5\r\nhello\r\n0\r\n\r\n", "negative size"},
      {"0x5\r\nhello\r\n0\r\n\r\n", "0x prefix"},
      {" 5\r\nhello\r\n0\r\n\r\n", "space before the size"},
      {"5 \r\nhello\r\n0\r\n\r\n", "space after the size, no extension"},
      {"\r\nhello\r\n0\r\n\r\n", "empty size"},
      {"10000000000000005\r\nhello\r\n0\r\n\r\n", "size over 64 bits"},
      {"5\nhello\n0\n\n", "LF-only line ends"},
      {"5\r\nhello\n0\r\n\r\n", "LF after the data"},
      {"5\r\nhello\r\n0\n\r\n", "LF after the last chunk"},
      {"5\r\nhello\r\n0\r\n\n", "LF ending the trailers"},
      {"5\rhello\r\n0\r\n\r\n", "CR without LF"},
      {"5\r\nhelloXX\r\n0\r\n\r\n", "data longer than its size"},
      {"5\r\nhell\r\n0\r\n\r\n\r\n", "data shorter than its size"},
      {"5;a=b\nX\r\nhello\r\n0\r\n\r\n", "bare LF in an extension"},
      {"5;a=\"x\r\ny\"\r\nhello\r\n0\r\n\r\n", "CRLF inside a quoted extension"},
      {"5;\r\nhello\r\n0\r\n\r\n", "extension without a name"},
      {"5;a=\r\nhello\r\n0\r\n\r\n", "extension without a value"},
      {"5;a b\r\nhello\r\n0\r\n\r\n", "two names"},
      {"5\r\nhello\r\n0\r\nX-Trailer a\r\n\r\n", "trailer without a colon"},
      {"5\r\nhello\r\n0\r\nX-Trailer: a\nb\r\n\r\n", "bare LF in a trailer"},
      {"5\r\nhello\r\n0\r\n folded\r\n\r\n", "trailer starting with a space"},
      {"5\r\nhello\r\n0\r\nGET /health HTTP/1.1\r\n\r\n", "a request line as a trailer"},
      {"5;" + std::string(8192, 'a') + "\r\nhello\r\n0\r\n\r\n", "chunk line over 4 KiB"},
  };
  for (const auto& [body, why] : cases) expect_refused(te + body, 400, why);
  // Nothing reached the handler.
  std::lock_guard lock(mu);
  for (const std::string& line : completed) EXPECT_EQ(line, "POST /echo 400");
}

TEST_F(HttpFramingTest, ChunkedBodyOverTheLimitIs413) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  start(o);
  const std::string te = head("Transfer-Encoding: chunked\r\n");
  // A size alone over the limit is refused before any data.
  expect_refused(te + "ffffffffffffffff\r\n", 413, "one huge chunk size");
  expect_refused(te + "400\r\n" + std::string(1024, 'a') + "\r\n1\r\nb\r\n0\r\n\r\n", 413, "1025 bytes in two chunks");
  expect_read_once(te + "400\r\n" + std::string(1024, 'a') + "\r\n0\r\n\r\n", std::string(1024, 'a'), "exactly 1024");
}

// The decoder under the connection: however the bytes are split across reads (the
// socket decides), the result is the same as for one read, and a finished body leaves
// the bytes after it unread. 20000 mutations of a body with extensions and trailers.
TEST(ChunkedDecoder, ResultDoesNotDependOnHowTheBytesAreSplit) {
  using wire::ChunkedDecoder;
  std::mt19937_64 rng(11);
  const std::string alphabet = "0123456789abcdefABCDEF;=\" \t\r\n:xX\\,-";
  int done = 0;
  int malformed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string in = "5;a=\"b\"\r\nhello\r\n3\r\nabc\r\n0\r\nT: v\r\n\r\nNEXT";
    for (int e = static_cast<int>(rng() % 4); e > 0; --e) {
      const size_t pos = rng() % (in.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: if (pos < in.size()) in.erase(pos, 1); break;
        case 1: in.insert(pos, 1, c); break;
        default: if (pos < in.size()) in[pos] = c; break;
      }
    }
    ChunkedDecoder whole(1 << 20);
    std::string whole_body;
    const size_t whole_used = whole.feed(in, whole_body);
    ChunkedDecoder split(1 << 20);
    std::string split_body;
    size_t split_used = 0;
    for (size_t at = 0; at < in.size() && split.status() == ChunkedDecoder::Status::kNeedMore;) {
      const size_t n = std::min<size_t>(1 + rng() % 5, in.size() - at);
      const size_t used = split.feed(std::string_view(in).substr(at, n), split_body);
      if (split.status() == ChunkedDecoder::Status::kNeedMore) {
        ASSERT_EQ(used, n) << in;  // a decoder that needs more has used everything
      }
      split_used += used;
      at += n;
    }
    ASSERT_EQ(whole.status(), split.status()) << in;
    ASSERT_EQ(whole_body, split_body) << in;
    if (whole.status() == ChunkedDecoder::Status::kDone) {
      ++done;
      ASSERT_EQ(whole_used, split_used) << in;
      ASSERT_EQ(in.substr(0, whole_used).back(), '\n') << in;
    } else if (whole.status() == ChunkedDecoder::Status::kMalformed) {
      ++malformed;
      EXPECT_FALSE(whole.error().empty());
    }
  }
  EXPECT_GT(done, 1000);  // both outcomes were exercised
  EXPECT_GT(malformed, 1000);
}

}  // namespace
}  // namespace pagoda::http
