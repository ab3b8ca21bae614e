// URL parsing and redirect resolution of the Hub's HTTP client (hub/http_fetch.h), and its
// transport errors against loopback ports. No network beyond 127.0.0.1.
#include "hub/http_fetch.h"

#include <gtest/gtest.h>

#include "hub/fake_hub.h"

namespace pagoda::hub {
namespace {

TEST(ParseUrl, SplitsSchemeHostPortAndTarget) {
  ParsedUrl u = parse_url("https://huggingface.co/api/models/a/b?x=1");
  EXPECT_TRUE(u.https);
  EXPECT_EQ(u.host, "huggingface.co");
  EXPECT_EQ(u.port, "443");
  EXPECT_EQ(u.target, "/api/models/a/b?x=1");
  EXPECT_EQ(u.origin(), "https://huggingface.co");
  u = parse_url("http://127.0.0.1:8080");
  EXPECT_FALSE(u.https);
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.target, "/");
  EXPECT_EQ(u.origin(), "http://127.0.0.1:8080");
  u = parse_url("http://[::1]:9/x");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.origin(), "http://[::1]:9");
  for (const char* bad : {"ftp://x/", "huggingface.co/x", "http:///x", "http://h:8x/", "http://u:p@h/", "http://h/a b"})
    EXPECT_THROW(parse_url(bad), Error) << bad;
}

TEST(ResolveLocation, AbsoluteRootRelativeAndPathRelative) {
  const ParsedUrl base = parse_url("https://hub.local:8443/o/r/resolve/main/dir/f.gguf?q=1");
  EXPECT_EQ(resolve_location(base, "https://cdn.example/x"), "https://cdn.example/x");
  EXPECT_EQ(resolve_location(base, "//cdn.example/x"), "https://cdn.example/x");
  EXPECT_EQ(resolve_location(base, "/api/x"), "https://hub.local:8443/api/x");
  EXPECT_EQ(resolve_location(base, "g.gguf"), "https://hub.local:8443/o/r/resolve/main/dir/g.gguf");
}

TEST(HttpFetch, RefusedConnectionIsATransportError) {
  HttpRequest req;
  req.url = "http://127.0.0.1:1/";
  req.timeout = std::chrono::milliseconds(2000);
  try {
    http_fetch(req);
    FAIL() << "no error";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to http://127.0.0.1:1"), std::string::npos) << e.what();
  }
}

TEST(HttpFetch, StatusAndHeadersComeBackAndHeadHasNoBody) {
  testing::FakeHub hub;
  testing::FakeRepo repo;
  repo.files["a.txt"] = {"hello", false};
  hub.add_repo("o/r", repo);
  HttpRequest req;
  req.url = hub.endpoint() + "/o/r/resolve/main/a.txt";
  HttpResponse get = http_fetch(req);
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.body, "hello");
  EXPECT_TRUE(get.body_complete);
  EXPECT_EQ(get.header("x-repo-commit"), repo.commit);
  req.method = "HEAD";
  HttpResponse head = http_fetch(req);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(head.header("content-length"), "5");
  req.url = hub.endpoint() + "/o/r/resolve/main/missing.txt";
  EXPECT_EQ(http_fetch(req).status, 404);  // a status, not an exception
}

}  // namespace
}  // namespace pagoda::hub
