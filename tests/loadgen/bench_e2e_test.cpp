// `pagoda bench` end to end: the binary against a server, checking its exit
// code, stdout and the results JSON / SVG it writes.
//
// By default the server is the in-process stub (stub_server.h). Hook for a real
// server (issue #7's acceptance test against `pagoda serve`):
//   PAGODA_BENCH_SERVER_CMD   a shell command starting the server, with {port}
//                             replaced by a free port, e.g.
//                             "pagoda serve -m model.gguf --port {port}";
//                             started in its own process group, killed at the end
//   PAGODA_BENCH_SERVER_URL   instead: the URL of a server already running
//   PAGODA_BENCH_EXPECT_CACHE "on": cached tokens > 0 from turn 2 on in
//                             multi-turn; "off": 0 everywhere; unset: not checked
//   PAGODA_BENCH_SERVER_WAIT_S seconds to wait for the server's port (default 120)
// With a real server the error-class tests (which need the stub's behaviours)
// are skipped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "stub_server.h"

namespace pagoda::loadgen {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

class BenchE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(PAGODA_BINARY)) return;
    const char* url = std::getenv("PAGODA_BENCH_SERVER_URL");
    const char* cmd = std::getenv("PAGODA_BENCH_SERVER_CMD");
    if (url && *url) {
      url_ = url;
      real_server_ = true;
    } else if (cmd && *cmd) {
      start_real_server(cmd);
      real_server_ = true;
    } else {
      stub_ = std::make_unique<testing::StubServer>();
      url_ = stub_->url();
    }
  }
  static void TearDownTestSuite() {
    if (server_pid_ > 0) {
      kill(-server_pid_, SIGTERM);
      int status = 0;
      waitpid(server_pid_, &status, 0);
      server_pid_ = -1;
    }
    stub_.reset();
  }

  static void start_real_server(std::string cmd) {
    unsigned short port = testing::StubServer::closed_port();
    for (size_t p = cmd.find("{port}"); p != std::string::npos; p = cmd.find("{port}")) {
      cmd.replace(p, 6, std::to_string(port));
    }
    url_ = "http://127.0.0.1:" + std::to_string(port);
    server_pid_ = fork();
    if (server_pid_ == 0) {
      setpgid(0, 0);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(server_pid_, server_pid_);
    const char* wait_env = std::getenv("PAGODA_BENCH_SERVER_WAIT_S");
    double wait_s = wait_env ? std::atof(wait_env) : 120;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    while (std::chrono::steady_clock::now() < until) {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket s(io);
      boost::system::error_code ec;
      s.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
      if (!ec) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "server did not open port " << port << ": " << cmd;
  }

  void SetUp() override {
    if (!fs::exists(PAGODA_BINARY)) GTEST_SKIP() << "no pagoda binary at " << PAGODA_BINARY;
    dir_ = fs::temp_directory_path() / ("bench_e2e_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  CommandResult bench(const std::string& args) {
    fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    std::string cmd = std::string(PAGODA_BINARY) + " bench " + args + " >" + out.string() + " 2>" + err.string();
    int status = std::system(cmd.c_str());
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    auto slurp = [](const fs::path& p) {
      std::ifstream in(p);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << p;
    return j;
  }

  // The checks every run's JSON must pass.
  static void check_consistent(const nlohmann::json& j) {
    const auto& s = j["summary"];
    EXPECT_EQ(s["requests_ok"].get<int64_t>() + s["requests_failed"].get<int64_t>(), s["requests_sent"].get<int64_t>());
    EXPECT_EQ(s["requests_sent"].get<size_t>(), j["requests"].size());
    int64_t errors = 0;
    for (const auto& [cls, n] : s["errors"].items()) errors += n.get<int64_t>();
    EXPECT_EQ(errors, s["requests_failed"].get<int64_t>());
    for (const char* metric : {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"}) {
      const auto& m = s[metric];
      if (m["count"] == 0) continue;
      EXPECT_LE(m["p50"].get<double>(), m["p90"].get<double>()) << metric;
      EXPECT_LE(m["p90"].get<double>(), m["p99"].get<double>()) << metric;
    }
  }

  static std::string small_args(const std::string& workload) {
    std::string model = real_server_ ? "" : " --model ok";
    return "--url " + url_ + model + " --workload " + workload +
           " --input-len 16 --output-len 8 --prefix-len 64 --turns 3 --conversations 2 --quiet --timeout 60";
  }

  static inline std::unique_ptr<testing::StubServer> stub_;
  static inline std::string url_;
  static inline bool real_server_ = false;
  static inline pid_t server_pid_ = -1;
  fs::path dir_;
};

TEST_F(BenchE2E, RandomWorkloadWritesConsistentJsonAndAPlot) {
  fs::path json = dir_ / "r.json", svg = dir_ / "r.svg";
  CommandResult r = bench(small_args("random") + " --requests 6 --concurrency 3 --out " + json.string() +
                          " --plot " + svg.string() + " --label run-a");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("6 sent, 6 ok, 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("approx"), std::string::npos);
  nlohmann::json j = read_json(json);
  check_consistent(j);
  EXPECT_EQ(j["summary"]["requests_ok"], 6);
  EXPECT_EQ(j["config"]["label"], "run-a");
  EXPECT_EQ(j["config"]["token_counts"], "approx");
  EXPECT_EQ(j["summary"]["output_len_honoured"], 6);
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

TEST_F(BenchE2E, SharedPrefixSendsTheSameSystemPrompt) {
  fs::path json = dir_ / "s.json";
  CommandResult r = bench(small_args("shared-prefix") + " --requests 4 --concurrency 2 --out " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = read_json(json);
  check_consistent(j);
  EXPECT_EQ(j["summary"]["requests_ok"], 4);
}

TEST_F(BenchE2E, MultiTurnReportsCachedTokensPerTurn) {
  fs::path json = dir_ / "m.json", svg = dir_ / "m.svg";
  CommandResult r = bench(small_args("multi-turn") + " --out " + json.string() + " --plot " + svg.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = read_json(json);
  check_consistent(j);
  EXPECT_EQ(j["summary"]["requests_ok"], 6);  // 2 conversations x 3 turns
  const auto& turns = j["summary"]["per_turn"];
  ASSERT_EQ(turns.size(), 3u);
  const char* expect_env = std::getenv("PAGODA_BENCH_EXPECT_CACHE");
  std::string expect = real_server_ ? (expect_env ? expect_env : "") : "on";
  for (const auto& t : turns) {
    int turn = t["turn"];
    if (expect == "on") {
      if (turn == 0) EXPECT_EQ(t["cached_tokens"], 0);  // conversations are distinct
      else EXPECT_GT(t["cached_tokens"].get<int64_t>(), 0) << "turn " << turn;
    } else if (expect == "off") {
      EXPECT_EQ(t["cached_tokens"], 0) << "turn " << turn;
    }
  }
  EXPECT_NE(r.out.find("cached tok"), std::string::npos) << r.out;
}

TEST_F(BenchE2E, CompareShowsBothRunsWithRatios) {
  fs::path a = dir_ / "a.json", b = dir_ / "b.json";
  ASSERT_EQ(bench(small_args("random") + " --requests 3 --label first --out " + a.string()).exit_code, 0);
  ASSERT_EQ(bench(small_args("random") + " --requests 3 --label second --out " + b.string()).exit_code, 0);
  fs::path svg = dir_ / "ab.svg";
  CommandResult r = bench("--compare " + a.string() + " " + b.string() + " --plot " + svg.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(svg));
  EXPECT_NE(r.out.find("first"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("second"), std::string::npos);
  EXPECT_NE(r.out.find("b/a"), std::string::npos);
  EXPECT_NE(r.out.find("TTFT ms p50"), std::string::npos);
}

TEST_F(BenchE2E, FailedRequestsStillExitZeroWithClassesReported) {
  if (real_server_) GTEST_SKIP() << "needs the stub's failure modes";
  fs::path json = dir_ / "f.json";
  CommandResult r = bench("--url " + url_ + " --model mixed --workload random --requests 14 --concurrency 7"
                          " --timeout 0.5 --quiet --out " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = read_json(json);
  check_consistent(j);
  EXPECT_EQ(j["summary"]["requests_ok"], 2);
  EXPECT_EQ(j["summary"]["errors"]["http_500"], 2);
  EXPECT_EQ(j["summary"]["errors"]["timeout"], 2);
  EXPECT_EQ(j["summary"]["errors"]["malformed_sse"], 2);
  EXPECT_EQ(j["summary"]["errors"]["incomplete_stream"], 4);
  EXPECT_EQ(j["summary"]["errors"]["stream_error"], 2);
  EXPECT_NE(r.out.find("http_500"), std::string::npos);
}

// A server that is down: one clear line and a failing status, at once, not a report of
// 100 refused requests.
TEST_F(BenchE2E, ARefusedConnectionStopsTheRunWithOneClearError) {
  std::string url = "http://127.0.0.1:" + std::to_string(testing::StubServer::closed_port());
  CommandResult r = bench("--url " + url + " --workload random --requests 100 --quiet");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("Connection refused (is the server running?)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("requests"), std::string::npos) << "a report was printed:\n" << r.out;
}

TEST_F(BenchE2E, BadArgumentsExitNonZero) {
  EXPECT_NE(bench("--url not-a-url --workload random").exit_code, 0);
  EXPECT_NE(bench("--url " + url_ + " --workload chaos").exit_code, 0);
  EXPECT_NE(bench("--workload random").exit_code, 0);
  EXPECT_NE(bench("--url " + url_ + " --workload random --concurrency 0").exit_code, 0);
  EXPECT_NE(bench("--compare " + (dir_ / "missing.json").string() + " " + (dir_ / "x.json").string()).exit_code, 0);
}

}  // namespace
}  // namespace pagoda::loadgen
