// End-to-end: the `pagoda` binary against a stand-in Hub on 127.0.0.1 (tests/hub/fake_hub.h),
// configured only through huggingface_hub's environment variables: pull, generate from
// hf:// offline, list, rm, and the one-line errors (gated repo, unknown quant, offline).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "hub/fake_hub.h"

namespace {

namespace fs = std::filesystem;
using pagoda::hub::testing::FakeHub;
using pagoda::hub::testing::FakeRepo;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const char* kToken = "hf_E2eSeCrEt0987654321";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

class HubCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStories)) GTEST_SKIP() << "no " << kStories;
    dir_ = fs::temp_directory_path() / ("pagoda_hub_e2e_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    FakeRepo repo;
    repo.files["stories260K-Q8_0.gguf"] = {slurp(kStories), true};
    repo.files["stories260K-Q4_K_M.gguf"] = {"GGUF not really", true};
    repo.files["README.md"] = {"# stories\n", false};
    hub_.add_repo("ggml-org/stories-GGUF", repo);
    repo.gated = true;
    hub_.add_repo("meta/gated", repo);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs pagoda with only the Hub variables this test sets (the caller's HF_* are dropped).
  RunResult run(const std::string& env, const std::string& args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "env -u HF_TOKEN -u HF_HOME -u HF_HUB_OFFLINE -u HF_TOKEN_PATH -u REQUESTS_CA_BUNDLE "
                            "HF_HUB_CACHE=" + (dir_ / "cache").string() + " HF_ENDPOINT=" + hub_.endpoint() +
                            " HOME=" + dir_.string() + " " + env + " " + PAGODA_BINARY + " " + args + " >" +
                            out.string() + " 2>" + err.string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  fs::path dir_;
  FakeHub hub_{kToken};
};

TEST_F(HubCli, PullThenGenerateOfflineFromHfUriThenListAndRm) {
  RunResult pulled = run("", "pull ggml-org/stories-GGUF:Q8_0");
  ASSERT_EQ(pulled.exit_code, 0) << pulled.err;
  const std::string expected_path = (dir_ / "cache" / "models--ggml-org--stories-GGUF" / "snapshots" /
                                     "0123456789abcdef0123456789abcdef01234567" / "stories260K-Q8_0.gguf").string();
  EXPECT_EQ(pulled.out, expected_path + "\n");
  EXPECT_NE(pulled.err.find("downloaded stories260K-Q8_0.gguf"), std::string::npos) << pulled.err;  // plain lines
  EXPECT_EQ(pulled.err.find('\r'), std::string::npos) << "no redrawn bar when stderr is not a terminal";

  // The same greedy text as from the file itself, with the Hub unreachable and offline set.
  const std::string gen = "generate -p 'Once upon a time' -n 24 --temp 0 -t 1";
  RunResult direct = run("", gen + " -m " + kStories);
  RunResult via_hub = run("HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1", gen + " -m hf://ggml-org/stories-GGUF:Q8_0");
  ASSERT_EQ(via_hub.exit_code, 0) << via_hub.err;
  EXPECT_EQ(via_hub.out, direct.out);
  EXPECT_FALSE(via_hub.out.empty());

  RunResult listed = run("", "list");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("ggml-org/stories-GGUF"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("main=0123456789ab"), std::string::npos) << listed.out;

  RunResult removed = run("", "rm ggml-org/stories-GGUF");
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_FALSE(fs::exists(dir_ / "cache" / "models--ggml-org--stories-GGUF"));
  RunResult offline = run("HF_HUB_OFFLINE=1", "pull ggml-org/stories-GGUF:Q8_0");
  EXPECT_EQ(offline.exit_code, 1);
  EXPECT_EQ(offline.err, "pagoda: error: offline (HF_HUB_OFFLINE is set): ggml-org/stories-GGUF is not in the cache (" +
                             (dir_ / "cache").string() + ")\n");
}

TEST_F(HubCli, GatedRepoErrorsAreOneLineAndNeverShowTheToken) {
  RunResult no_token = run("", "pull meta/gated:Q8_0");
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_NE(no_token.err.find("access denied (HTTP 401)"), std::string::npos) << no_token.err;
  EXPECT_NE(no_token.err.find("set HF_TOKEN"), std::string::npos) << no_token.err;
  EXPECT_EQ(std::count(no_token.err.begin(), no_token.err.end(), '\n'), 1) << no_token.err;

  RunResult wrong = run(std::string("HF_TOKEN=hf_not_") + kToken, "pull meta/gated:Q8_0");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("access denied (HTTP 403)"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("hf_"), std::string::npos) << wrong.err;

  // The token from HF_TOKEN_PATH works, and appears nowhere in the output.
  { std::ofstream(dir_ / "token") << kToken << "\n"; }
  RunResult ok = run("HF_TOKEN_PATH=" + (dir_ / "token").string(), "pull hf://meta/gated:Q8_0");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ((ok.out + ok.err).find("hf_"), std::string::npos) << ok.out << ok.err;
}

TEST_F(HubCli, TwoProcessesPullingOneFileMakeOneDownloadAndOneBlob) {
  hub_.set_faults({.slow_ms_per_64k = 10});  // ~170 ms a transfer, so the two overlap
  const fs::path a = dir_ / "a.rc", b = dir_ / "b.rc";
  const std::string pull = "env -u HF_TOKEN -u HF_HUB_OFFLINE HF_HUB_CACHE=" + (dir_ / "cache").string() +
                           " HF_ENDPOINT=" + hub_.endpoint() + " " + PAGODA_BINARY +
                           " pull ggml-org/stories-GGUF:Q8_0 >/dev/null 2>&1";
  const std::string both = "(" + pull + "; echo $? >" + a.string() + ") & (" + pull + "; echo $? >" + b.string() +
                           ") & wait";
  ASSERT_EQ(std::system(both.c_str()), 0);
  EXPECT_EQ(slurp(a), "0\n");
  EXPECT_EQ(slurp(b), "0\n");
  EXPECT_EQ(hub_.count("/cdn/", "GET"), 1);  // the second process waited on the flock, then found the blob
  int blobs = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache" / "models--ggml-org--stories-GGUF" / "blobs")) {
    ++blobs;
    EXPECT_EQ(slurp(e.path()), slurp(kStories));
  }
  EXPECT_EQ(blobs, 1);
}

TEST_F(HubCli, UnknownQuantListsTheQuantsThatExist) {
  RunResult r = run("", "generate -m hf://ggml-org/stories-GGUF:Q5_K_M -p x -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "pagoda: error: ggml-org/stories-GGUF has no GGUF file for quant 'Q5_K_M' (quants: Q4_K_M, Q8_0)\n");
}

}  // namespace
