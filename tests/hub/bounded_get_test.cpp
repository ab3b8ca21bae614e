// bounded_get() (hub/bounded_get.h, serve --allow-image-urls) against a stand-in HTTP server
// on 127.0.0.1 that misbehaves on purpose: a body past the limit (declared, or endless without
// a length), redirects to file: and in a loop, a 404, a slow drip and a stall hitting the
// total timeout. Each is one Error line, and no more than the limit is buffered.
#include "hub/bounded_get.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "hub/error_text.h"
#include "hub/stand_in_http.h"

namespace pagoda::hub {
namespace {

using testing::error_of;
using testing::StandInHttp;
using namespace std::chrono_literals;

const std::string kBody = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(5000, 'x');

void handle(const std::string& target, int fd) {
  auto send = [&](const std::string& s) { return StandInHttp::send_all(fd, s); };
  if (target == "/good.png") {
    send(StandInHttp::response(200, "Content-Type: image/png\r\n", kBody));
  } else if (target == "/declared-huge") {  // says 1 GB: refused before the body
    send("HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\nConnection: close\r\n\r\n" + kBody);
  } else if (target == "/endless") {  // no length, never ends: stops at the limit
    if (!send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")) return;
    const std::string piece(65536, 'z');
    for (int i = 0; i < 100000 && send(piece); ++i) {
    }
  } else if (target == "/to-file") {
    send(StandInHttp::response(302, "Location: file:///etc/passwd\r\n", ""));
  } else if (target.rfind("/loop/", 0) == 0) {
    send(StandInHttp::response(302, "Location: /loop/" + std::to_string(std::stoi(target.substr(6)) + 1) + "\r\n", ""));
  } else if (target == "/hop") {
    send(StandInHttp::response(301, "Location: /good.png\r\n", ""));
  } else if (target == "/drip") {  // a byte every 50 ms of a 5008-byte body
    if (!send("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n"))
      return;
    for (char c : kBody) {
      if (!send(std::string(1, c))) return;
      std::this_thread::sleep_for(50ms);
    }
  } else if (target == "/stall") {  // the head, then silence
    send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n");
    std::this_thread::sleep_for(1500ms);
  } else {
    send(StandInHttp::response(404, "", "not here"));
  }
}

TEST(BoundedGet, ReturnsTheBodyAndFollowsARedirect) {
  StandInHttp server(handle);
  const std::vector<uint8_t> got = bounded_get(server.url("/good.png"), 1 << 20);
  EXPECT_EQ(std::string(got.begin(), got.end()), kBody);
  const std::vector<uint8_t> hopped = bounded_get(server.url("/hop"), 1 << 20);
  EXPECT_EQ(hopped.size(), kBody.size());
  // Exactly the limit is fine; one byte less is not.
  EXPECT_EQ(bounded_get(server.url("/good.png"), kBody.size()).size(), kBody.size());
  EXPECT_EQ(error_of([&] { bounded_get(server.url("/good.png"), kBody.size() - 1); }),
            "larger than the limit of 5007 bytes");
}

TEST(BoundedGet, ABodyPastTheLimitStopsThere) {
  StandInHttp server(handle);
  EXPECT_EQ(error_of([&] { bounded_get(server.url("/declared-huge"), 1 << 20); }),
            "larger than the limit of 1048576 bytes");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { bounded_get(server.url("/endless"), 1 << 20); }), "larger than the limit of 1048576 bytes");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(BoundedGet, RedirectsOnlyToHttpAndAtMostThree) {
  StandInHttp server(handle);
  const std::string file = error_of([&] { bounded_get(server.url("/to-file"), 1 << 20); });
  EXPECT_NE(file.find("file:///etc/passwd"), std::string::npos) << file;
  EXPECT_EQ(error_of([&] { bounded_get(server.url("/loop/0"), 1 << 20); }), "more than 3 redirects");
  EXPECT_EQ(server.requests(), 1 + 4);  // the first and three redirects followed
}

TEST(BoundedGet, AnErrorStatusOrAnotherSchemeIsAnError) {
  StandInHttp server(handle);
  EXPECT_EQ(error_of([&] { bounded_get(server.url("/missing.png"), 1 << 20); }), "HTTP 404");
  EXPECT_NE(error_of([&] { bounded_get("ftp://127.0.0.1/x.png", 1 << 20); }).find("expected http:// or https://"),
            std::string::npos);
}

TEST(BoundedGet, TheTimeoutBoundsTheWholeExchange) {
  StandInHttp server(handle);
  for (const char* target : {"/drip", "/stall"}) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(error_of([&] { bounded_get(server.url(target), 1 << 20, 500ms); }), "timed out after 0.5 s") << target;
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, 450ms) << target;
    EXPECT_LT(took, 5000ms) << target;  // the drip lasts 250 s, the stall forever
  }
}

}  // namespace
}  // namespace pagoda::hub
