// URL parsing and error class names.
#include "loadgen/http_client.h"

#include <gtest/gtest.h>

namespace pagoda::loadgen {
namespace {

TEST(BenchParseUrl, AcceptsHostPortAndBasePath) {
  std::string why;
  auto u = parse_url("http://127.0.0.1:8080", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->base_path, "");
  u = parse_url("http://localhost/api/", &why);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->base_path, "/api");
  u = parse_url("http://[::1]:9000/x", &why);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "9000");
}

TEST(BenchParseUrl, RejectsWhatItCannotServe) {
  for (const char* bad : {"", "127.0.0.1:8080", "https://x", "ftp://x", "http://", "http://:80", "http://h:0",
                          "http://h:65536", "http://h:8o", "http://h:80/a b", "http://u@h", "http://h/?q=1",
                          "http://[::1"}) {
    std::string why;
    EXPECT_FALSE(parse_url(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(BenchErrorClassName, IsStable) {
  EXPECT_EQ(error_class_name(ErrorKind::kNone, 0), "ok");
  EXPECT_EQ(error_class_name(ErrorKind::kHttpStatus, 503), "http_503");
  EXPECT_EQ(error_class_name(ErrorKind::kConnectRefused, 0), "connect_refused");
  EXPECT_EQ(error_class_name(ErrorKind::kTimeout, 0), "timeout");
}

}  // namespace
}  // namespace pagoda::loadgen
