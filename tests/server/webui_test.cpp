// The web UI's static files (server/webui.h): what the build embedded is byte for byte
// webui/ on disk, content types, ETag / 304, 404 for unknown files, and the routes over a
// real HttpServer (no API key needed for the page, the API still guarded).
#include "server/webui.h"

#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include "http/http_test_harness.h"
#include "server/api_error.h"

namespace pagoda::server {
namespace {

using namespace http::http_test;

std::string read_source_file(const std::string& name) {
  std::ifstream f(std::string(PAGODA_SOURCE_DIR) + "/webui/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// SHA-256 by OpenSSL, independent of the build's CMake file(SHA256).
std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

TEST(WebUiFiles, EmbedsEveryFileOfWebuiByteForByte) {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : webui_files()) names.push_back(f.name);
  for (const char* required : {"index.html", "app.js", "api.js", "attachment_picker.js", "cache_panel.js",
                               "context.js", "highlight.js", "markdown.js", "message_view.js", "store.js",
                               "style.css"})
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const EmbeddedFile& f : webui_files()) {
    const std::string on_disk = read_source_file(f.name);
    ASSERT_FALSE(on_disk.empty()) << f.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data), f.size), on_disk) << f.name;
    EXPECT_EQ(std::string(f.sha256), sha256_hex(on_disk)) << f.name;
    EXPECT_NE(content_type_for(f.name), "application/octet-stream") << f.name;
  }
}

TEST(WebUiFiles, ContentTypeFollowsTheExtension) {
  EXPECT_EQ(content_type_for("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type_for("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("x.mjs"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type_for("logo.svg"), "image/svg+xml");
  EXPECT_EQ(content_type_for("a.json"), "application/json");
  EXPECT_EQ(content_type_for("README"), "application/octet-stream");
  EXPECT_EQ(content_type_for("js"), "application/octet-stream");
}

TEST(WebUiResponse, ServesTheFileWithEtagCacheControlAndNosniff) {
  const http::HttpResponse r = webui_response("app.js", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(r.body, read_source_file("app.js"));
  std::map<std::string, std::string> h(r.headers.begin(), r.headers.end());
  EXPECT_EQ(h["ETag"], "\"" + sha256_hex(r.body).substr(0, 32) + "\"");
  EXPECT_EQ(h["Cache-Control"], "no-cache");
  EXPECT_EQ(h["X-Content-Type-Options"], "nosniff");
  EXPECT_EQ(h.count("Content-Security-Policy"), 0u);  // only the page itself carries it
}

TEST(WebUiResponse, PageCarriesAContentSecurityPolicyWithoutInlineScript) {
  const http::HttpResponse r = webui_response("index.html", "");
  std::map<std::string, std::string> h(r.headers.begin(), r.headers.end());
  const std::string csp = h["Content-Security-Policy"];
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos) << csp;
  // And the page has no inline script for such a policy to block.
  EXPECT_EQ(r.body.find("<script>"), std::string::npos);
}

TEST(WebUiResponse, MatchingIfNoneMatchIs304WithoutBody) {
  const http::HttpResponse full = webui_response("style.css", "");
  std::string etag;
  for (const auto& [k, v] : full.headers)
    if (k == "ETag") etag = v;
  ASSERT_FALSE(etag.empty());
  for (const std::string& inm : {etag, "W/" + etag, "\"old\", " + etag, "\"old\" ,\t" + etag + " ", std::string("*")}) {
    const http::HttpResponse r = webui_response("style.css", inm);
    EXPECT_EQ(r.status, 304) << inm;
    EXPECT_TRUE(r.body.empty()) << inm;
  }
  for (const std::string& inm : {std::string("\"old\""), etag.substr(0, etag.size() - 2) + "\"", std::string(",")}) {
    EXPECT_EQ(webui_response("style.css", inm).status, 200) << inm;
  }
}

TEST(WebUiResponse, UnknownFileIs404InOpenAiShape) {
  for (const char* name : {"nope.js", "", "../CMakeLists.txt", "index.html.bak", "APP.JS"}) {
    const http::HttpResponse r = webui_response(name, "");
    EXPECT_EQ(r.status, 404) << name;
    const auto j = nlohmann::json::parse(r.body);
    EXPECT_EQ(j["error"]["type"], "not_found_error") << name;
  }
}

// Over a real HttpServer with an API key: the page needs none, the API still does.
class WebUiRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    http::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 1;
    o.api_key = "k";
    o.error_body = transport_error_response;  // as serve does
    std::vector<http::Route> routes = webui_routes();
    routes.push_back({"GET", "/v1/models", true, [](const http::HttpRequest&, std::shared_ptr<http::HttpExchange> ex) {
                        ex->respond(http::HttpResponse{200, "application/json", "{}", {}});
                      }});
    server = std::make_unique<http::HttpServer>(o, std::move(routes));
    server->start();
  }
  Response fetch(const std::string& request) {
    Client c(server->port());
    c.send(request);
    auto r = c.read_response();
    EXPECT_TRUE(r.has_value()) << request;
    return r.value_or(Response{});
  }
  std::unique_ptr<http::HttpServer> server;
};

TEST_F(WebUiRoutes, RootServesThePageWithoutTheKey) {
  const Response r = fetch(get("/"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.body, read_source_file("index.html"));
  EXPECT_FALSE(r.header("content-security-policy").empty());
  EXPECT_EQ(fetch(get("/v1/models")).status, 401);
}

TEST_F(WebUiRoutes, AssetsHaveTheirContentTypes) {
  EXPECT_EQ(fetch(get("/webui/app.js")).header("content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(fetch(get("/webui/style.css")).header("content-type"), "text/css; charset=utf-8");
  EXPECT_EQ(fetch(get("/webui/index.html")).header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(fetch(get("/webui/markdown.js?v=1")).status, 200);  // the query string is not the name
}

TEST_F(WebUiRoutes, RevalidationWithTheEtagIs304) {
  const Response first = fetch(get("/"));
  const std::string etag = first.header("etag");
  ASSERT_FALSE(etag.empty());
  const Response again = fetch(get("/", "If-None-Match: " + etag + "\r\n"));
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(again.header("etag"), etag);
}

TEST_F(WebUiRoutes, UnknownAssetsAndOtherMethodsAreRefused) {
  EXPECT_EQ(fetch(get("/webui/nope.js")).status, 404);
  EXPECT_EQ(fetch(get("/webui/")).status, 404);
  EXPECT_EQ(fetch(get("/webui/sub/app.js")).status, 404);
  EXPECT_EQ(fetch(get("/webui/..%2fCMakeLists.txt")).status, 404);
  EXPECT_EQ(fetch(get("/index.html")).status, 404);
  const Response post_root = fetch(post("/", "{}"));
  EXPECT_EQ(post_root.status, 405);
  EXPECT_EQ(post_root.header("allow"), "GET, OPTIONS");
}

}  // namespace
}  // namespace pagoda::server
