// The web UI as `pagoda serve` serves it (the real binary on stories260K): GET / is the page,
// every file it loads (its <script>/<link> and the modules' imports) is served with its
// content type, unknown files are 404, `--no-webui` (or PAGODA_NO_WEBUI) turns it all off
// while the API stays, the page needs no API key when the API does, and the polled reads
// stay out of the access log. The page itself runs in a browser in tests/webui.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "server_process.h"

namespace {

using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

std::vector<std::string> base_args() { return {"-m", kStories, "-t", "1", "--kv-cache-bytes", "16MiB"}; }

// The relative URLs a file loads: src= / href= of the page (not data: or #), and the
// `from './x.js'` / `import './x.js'` of a module (relative to webui/).
std::set<std::string> references(const std::string& text, bool html) {
  std::set<std::string> out;
  if (html) {
    const std::regex attr(R"re((?:src|href)="([^"#:]+)")re");
    for (std::sregex_iterator it(text.begin(), text.end(), attr), end; it != end; ++it) out.insert((*it)[1]);
  } else {
    const std::regex import(R"re((?:from|import)\s+'\./([^']+)')re");
    for (std::sregex_iterator it(text.begin(), text.end(), import), end; it != end; ++it)
      out.insert("webui/" + (*it)[1].str());
  }
  return out;
}

TEST(WebUiServe, ServesThePageAndEveryFileItLoads) {
  ServerProcess server(base_args());
  const uint16_t port = server.start();
  ASSERT_NE(port, 0) << server.log();
  EXPECT_NE(server.log().find("web UI at /"), std::string::npos) << server.log();

  const HttpResult page = http(port, "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(page.headers.at("content-security-policy").find("script-src 'self'"), std::string::npos);
  EXPECT_NE(page.body.find("<title>pagoda</title>"), std::string::npos);

  // Walk the page's references and the modules' imports: each is served, with its type.
  std::set<std::string> seen;
  std::vector<std::string> todo;
  for (const std::string& r : references(page.body, true)) todo.push_back(r);
  EXPECT_GE(todo.size(), 2u);  // the stylesheet and the entry module
  while (!todo.empty()) {
    const std::string url = todo.back();
    todo.pop_back();
    if (!seen.insert(url).second) continue;
    const HttpResult r = http(port, "GET", "/" + url);
    ASSERT_EQ(r.status, 200) << url;
    const std::string type = r.headers.at("content-type");
    if (url.ends_with(".js")) {
      EXPECT_EQ(type, "text/javascript; charset=utf-8") << url;
      for (const std::string& dep : references(r.body, false)) todo.push_back(dep);
    } else if (url.ends_with(".css")) {
      EXPECT_EQ(type, "text/css; charset=utf-8") << url;
    }
    EXPECT_EQ(r.headers.at("x-content-type-options"), "nosniff") << url;
    EXPECT_FALSE(r.headers.at("etag").empty()) << url;
  }
  // app.js and the modules it imports, the stylesheet.
  EXPECT_GE(seen.size(), 7u);

  const HttpResult unknown = http(port, "GET", "/webui/missing.js");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("not_found_error"), std::string::npos) << unknown.body;
  EXPECT_EQ(http(port, "GET", "/webui/").status, 404);

  // The page polls the cache statistics: a successful poll is not logged, a 404 is.
  EXPECT_EQ(http(port, "GET", "/v1/cache/stats").status, 200);
  const std::string log = server.log();
  EXPECT_EQ(log.find("GET / 200"), std::string::npos) << log;
  EXPECT_EQ(log.find("GET /v1/cache/stats 200"), std::string::npos) << log;
  EXPECT_NE(log.find("GET /webui/missing.js 404"), std::string::npos) << log;
}

TEST(WebUiServe, NoWebuiTurnsThePageOffAndKeepsTheApi) {
  for (const bool by_env : {false, true}) {
    std::vector<std::string> args = base_args();
    if (!by_env) args.push_back("--no-webui");
    ServerProcess server(args, by_env ? std::vector<std::string>{"PAGODA_NO_WEBUI=1"} : std::vector<std::string>{});
    const uint16_t port = server.start();
    ASSERT_NE(port, 0) << server.log();
    EXPECT_EQ(server.log().find("web UI at /"), std::string::npos) << server.log();
    EXPECT_EQ(http(port, "GET", "/").status, 404) << by_env;
    EXPECT_EQ(http(port, "GET", "/webui/app.js").status, 404) << by_env;
    EXPECT_EQ(http(port, "GET", "/health").status, 200);
    EXPECT_EQ(http(port, "GET", "/v1/cache/stats").status, 200);
  }
}

TEST(WebUiServe, PageNeedsNoKeyWhenTheApiDoes) {
  std::vector<std::string> args = base_args();
  args.insert(args.end(), {"--api-key", "secret-1"});
  ServerProcess server(args);
  const uint16_t port = server.start();
  ASSERT_NE(port, 0) << server.log();
  EXPECT_EQ(http(port, "GET", "/").status, 200);
  EXPECT_EQ(http(port, "GET", "/webui/app.js").status, 200);
  EXPECT_EQ(http(port, "GET", "/v1/cache/stats").status, 401);
  EXPECT_EQ(http(port, "GET", "/v1/cache/stats", "", {"Authorization: Bearer secret-1"}).status, 200);
}

}  // namespace
