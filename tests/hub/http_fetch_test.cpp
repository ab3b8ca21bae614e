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

TEST(ResolveLocation, OnlyHttpAndHttpsSchemesAreFollowed) {
  const ParsedUrl base = parse_url("https://hub.local/o/r/resolve/main/f.gguf");
  EXPECT_EQ(resolve_location(base, "HTTPS://cdn.example/x"), "https://cdn.example/x");
  EXPECT_EQ(resolve_location(base, "Http://cdn.example/x"), "http://cdn.example/x");
  EXPECT_EQ(resolve_location(base, "x/y:z"), "https://hub.local/o/r/resolve/main/x/y:z");  // a path, not a scheme
  for (const char* bad : {"file:///etc/passwd", "FILE:/etc/passwd", "ftp://x/y", "javascript:alert(1)", "data:,x",
                          "g:h", "s3+x://b/k"}) {
    try {
      resolve_location(base, bad);
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "https://hub.local redirected to '" + std::string(bad) +
                                           "': refused, only http:// and https:// redirects are followed");
    }
  }
  EXPECT_EQ(uri_scheme("/x:y"), "");
  EXPECT_EQ(uri_scheme("1a:b"), "");
  EXPECT_EQ(uri_scheme("a/b:c"), "");
  EXPECT_EQ(uri_scheme("S3+X.y-z:q"), "s3+x.y-z");
}

TEST(ParseByteCount, DigitsOnlyAndWithin64Bits) {
  EXPECT_EQ(parse_byte_count("0"), 0u);
  EXPECT_EQ(parse_byte_count("1000"), 1000u);
  EXPECT_EQ(parse_byte_count("007"), 7u);
  EXPECT_EQ(parse_byte_count("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "12abc", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "18446744073709551616",
                          "99999999999999999999999"})
    EXPECT_EQ(parse_byte_count(bad), std::nullopt) << bad;
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
