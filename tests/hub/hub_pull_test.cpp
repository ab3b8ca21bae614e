// pull() against a stand-in Hub on 127.0.0.1 (fake_hub.h): the cache layout huggingface_hub
// writes, resume, checksum, offline use, a hand-laid cache, concurrent pulls, tokens, HTTPS.
// No test contacts any host but loopback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "hub/error_text.h"
#include "hub/fake_hub.h"
#include "hub/hub.h"
#include "hub/test_pki.h"

namespace pagoda::hub {
namespace {

namespace fs = std::filesystem;
using testing::FakeFile;
using testing::FakeHub;
using testing::FakeRepo;
using testing::sha256_hex;

// Compares file contents without dumping megabytes of GGUF into the log on failure.
#define EXPECT_SAME_BYTES(a, b) EXPECT_TRUE((a) == (b)) << "contents differ: " << (a).size() << " vs " << (b).size() << " bytes"

const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "GGUF" and `size` - 4 deterministic pseudo-random bytes.
std::string gguf_like(size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s = "GGUF";
  while (s.size() < size) s += static_cast<char>(rng() & 0xff);
  return s;
}

std::string stories() { return read_file(PAGODA_SHARED_DIR "/models/stories260K/stories260K.gguf"); }

using testing::error_of;

FakeRepo gguf_repo() {
  FakeRepo repo;
  repo.commit = kCommit;
  repo.files["README.md"] = {"# stories\n", false};
  repo.files["stories260K-Q8_0.gguf"] = {stories(), true};
  repo.files["stories260K-Q4_K_M.gguf"] = {gguf_like(300000, 1), true};
  return repo;
}

class HubPullTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(root_); }
  void SetUp() override {
    // The pid keeps a release and a sanitizer run of the same test apart.
    root_ = fs::path(::testing::TempDir()) /
            ("hub_pull_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  HubConfig config_for(const FakeHub& hub) const {
    HubConfig c;
    c.endpoint = hub.endpoint();
    c.cache_dir = root_ / "hub";
    c.progress = nullptr;
    c.timeout = std::chrono::milliseconds(5000);
    c.max_retries = 2;
    c.retry_base_delay = std::chrono::milliseconds(1);
    return c;
  }
  fs::path repo_dir(const std::string& folder) const { return root_ / "hub" / folder; }
  fs::path root_;
};

TEST_F(HubPullTest, PullsTheTaggedGgufIntoHuggingfaceHubsLayout) {
  FakeHub hub("hf_token_for_test");
  hub.add_repo("ggml-org/stories-GGUF", gguf_repo());
  HubConfig config = config_for(hub);
  config.token = "hf_token_for_test";
  const PullResult r = pull(config, ModelRef::parse("hf://ggml-org/stories-GGUF:q8_0"));

  const fs::path dir = repo_dir("models--ggml-org--stories-GGUF");
  const std::string sha = sha256_hex(stories());
  EXPECT_EQ(r.commit, kCommit);
  EXPECT_EQ(r.model_path, dir / "snapshots" / kCommit / "stories260K-Q8_0.gguf");
  EXPECT_EQ(r.gguf_parts, 1);
  EXPECT_EQ(r.downloaded_bytes, stories().size());
  EXPECT_FALSE(r.used_cache_only);
  ASSERT_TRUE(fs::is_symlink(r.model_path));
  EXPECT_EQ(fs::read_symlink(r.model_path), fs::path("../../blobs/" + sha));  // relative, as huggingface_hub makes it
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  EXPECT_EQ(read_file(dir / "refs" / "main"), kCommit);  // no newline
  EXPECT_FALSE(fs::exists(dir / "blobs" / (sha + ".incomplete")));
  EXPECT_TRUE(fs::exists(root_ / "hub" / ".locks" / "models--ggml-org--stories-GGUF" / (sha + ".lock")));
  // Only the chosen file: neither the other quant nor the README.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "snapshots" / kCommit), fs::directory_iterator()), 1);
  // One listing, one HEAD, one CDN GET; the token went to the Hub's origin, not to the CDN's.
  EXPECT_EQ(hub.count("/api/models/ggml-org/stories-GGUF", "GET"), 1);
  EXPECT_EQ(hub.count("/ggml-org/stories-GGUF/resolve/" + std::string(kCommit) + "/stories260K-Q8_0.gguf", "HEAD"), 1);
  EXPECT_EQ(hub.count("/cdn/", "GET"), 1);
  for (const auto& req : hub.log()) EXPECT_EQ(req.authorization, req.target.rfind("/cdn/", 0) != 0) << req.target;
}

TEST_F(HubPullTest, SecondPullOnlyAsksForTheCommit) {
  FakeHub hub;
  hub.add_repo("ggml-org/stories-GGUF", gguf_repo());
  const HubConfig config = config_for(hub);
  pull(config, ModelRef::parse("ggml-org/stories-GGUF:Q8_0"));
  hub.clear_log();
  const PullResult again = pull(config, ModelRef::parse("ggml-org/stories-GGUF:Q8_0"));
  EXPECT_EQ(again.downloaded_bytes, 0u);
  ASSERT_EQ(hub.log().size(), 1u);
  EXPECT_EQ(hub.log()[0].target, "/api/models/ggml-org/stories-GGUF");
}

TEST_F(HubPullTest, NoTagPicksQ4KM) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  const PullResult r = pull(config_for(hub), ModelRef::parse("o/r"));
  EXPECT_EQ(r.model_path.filename(), "stories260K-Q4_K_M.gguf");
  EXPECT_SAME_BYTES(read_file(r.model_path), gguf_like(300000, 1));
}

TEST_F(HubPullTest, TheRepoProjectorComesWithTheModelUnlessItIsNotWanted) {
  FakeHub hub;
  FakeRepo repo = gguf_repo();
  repo.files["mmproj-stories-F16.gguf"] = {gguf_like(5000, 2), true};
  repo.files["mmproj-stories-Q8_0.gguf"] = {gguf_like(4000, 3), true};
  hub.add_repo("o/r", repo);
  const HubConfig config = config_for(hub);
  const fs::path snap = repo_dir("models--o--r") / "snapshots" / kCommit;

  // Without a projector: only the model is asked for.
  PullOptions no_mmproj;
  no_mmproj.mmproj = false;
  const PullResult text_only = pull(config, ModelRef::parse("o/r"), no_mmproj);
  EXPECT_EQ(text_only.model_path, snap / "stories260K-Q4_K_M.gguf");
  EXPECT_TRUE(text_only.mmproj_path.empty());
  EXPECT_EQ(hub.count("/o/r/resolve/" + std::string(kCommit) + "/mmproj", "HEAD"), 0);
  EXPECT_FALSE(fs::exists(snap / "mmproj-stories-F16.gguf"));
  EXPECT_FALSE(fs::exists(snap / "mmproj-stories-Q8_0.gguf"));

  // The Q4_K_M model has no Q4_K_M projector: F16 it is, beside the model.
  const PullResult r = pull(config, ModelRef::parse("o/r"));
  EXPECT_EQ(r.mmproj_path, snap / "mmproj-stories-F16.gguf");
  EXPECT_SAME_BYTES(read_file(r.mmproj_path), gguf_like(5000, 2));
  EXPECT_EQ(r.downloaded_bytes, 5000u);  // the model was cached
  EXPECT_NE(std::find(r.files.begin(), r.files.end(), "mmproj-stories-F16.gguf"), r.files.end());
  EXPECT_FALSE(fs::exists(snap / "mmproj-stories-Q8_0.gguf"));

  // The Q8_0 model takes the Q8_0 projector.
  const PullResult q8 = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_EQ(q8.mmproj_path, snap / "mmproj-stories-Q8_0.gguf");
  EXPECT_SAME_BYTES(read_file(q8.mmproj_path), gguf_like(4000, 3));

  // Offline, the cached projector is found again; without it wanted, none.
  HubConfig offline = config;
  offline.offline = true;
  EXPECT_EQ(pull(offline, ModelRef::parse("o/r")).mmproj_path, snap / "mmproj-stories-F16.gguf");
  EXPECT_TRUE(pull(offline, ModelRef::parse("o/r"), no_mmproj).mmproj_path.empty());
}

TEST_F(HubPullTest, SplitGgufInASubfolderPullsEveryPartWithDeeperLinks) {
  FakeHub hub;
  FakeRepo repo;
  for (int i = 1; i <= 3; ++i)
    repo.files["Q8_0/big-Q8_0-0000" + std::to_string(i) + "-of-00003.gguf"] = {gguf_like(70000 + i, i), true};
  repo.files["big-Q2_K.gguf"] = {gguf_like(1000, 9), true};
  hub.add_repo("o/big", repo);
  HubConfig config = config_for(hub);
  config.parallel_downloads = 3;
  const PullResult r = pull(config, ModelRef::parse("o/big:Q8_0"));
  EXPECT_EQ(r.gguf_parts, 3);
  EXPECT_EQ(r.files.size(), 3u);
  EXPECT_EQ(r.model_path.filename(), "big-Q8_0-00001-of-00003.gguf");
  for (int i = 1; i <= 3; ++i) {
    const fs::path link = r.snapshot_dir / ("Q8_0/big-Q8_0-0000" + std::to_string(i) + "-of-00003.gguf");
    EXPECT_EQ(fs::read_symlink(link), fs::path("../../../blobs/" + sha256_hex(gguf_like(70000 + i, i))));
    EXPECT_SAME_BYTES(read_file(link), gguf_like(70000 + i, i));
  }
}

TEST_F(HubPullTest, SafetensorsRepoGetsConfigTokenizerAndEveryIndexedShard) {
  FakeHub hub;
  FakeRepo repo;
  const std::string index =
      R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  repo.files["config.json"] = {R"({"architectures":["LlamaForCausalLM"]})", false};
  repo.files["generation_config.json"] = {R"({"temperature":0.6})", false};
  repo.files["tokenizer.json"] = {R"({"model":{}})", false};
  repo.files["tokenizer_config.json"] = {"{}", false};
  repo.files["model.safetensors.index.json"] = {index, false};
  repo.files["model-00001-of-00002.safetensors"] = {gguf_like(5000, 3), true};
  repo.files["model-00002-of-00002.safetensors"] = {gguf_like(7000, 4), true};
  repo.files["README.md"] = {"readme", false};
  repo.files["original/consolidated.00.pth"] = {gguf_like(9000, 5), true};
  hub.add_repo("meta/llama", repo);
  const PullResult r = pull(config_for(hub), ModelRef::parse("meta/llama"));
  EXPECT_EQ(r.model_path, r.snapshot_dir);
  EXPECT_EQ(r.gguf_parts, 0);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    EXPECT_EQ(read_file(r.snapshot_dir / f), repo.files[f].content) << f;
  EXPECT_FALSE(fs::exists(r.snapshot_dir / "README.md"));
  EXPECT_FALSE(fs::exists(r.snapshot_dir / "original"));
  // A git (non-LFS) file's blob is named by its git blob sha1, as the Hub's ETag says.
  EXPECT_EQ(fs::read_symlink(r.snapshot_dir / "config.json"),
            fs::path("../../blobs/" + testing::git_blob_sha1(repo.files["config.json"].content)));
}

TEST_F(HubPullTest, ResumesWithARangeRequestAfterTheConnectionDrops) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.cut_after_bytes = 100000, .cut_times = 1});
  const PullResult r = pull(config_for(hub), ModelRef::parse("o/r:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  std::vector<std::string> ranges;
  for (const auto& req : hub.log())
    if (req.target.rfind("/cdn/", 0) == 0) ranges.push_back(req.range);
  EXPECT_EQ(ranges, (std::vector<std::string>{"", "bytes=100000-"}));
  EXPECT_EQ(r.downloaded_bytes, stories().size());
}

TEST_F(HubPullTest, AStalledTransferTimesOutAndResumes) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.stall_after_bytes = 100000, .stall_times = 1, .stall_ms = 1500});
  HubConfig config = config_for(hub);
  config.timeout = std::chrono::milliseconds(300);  // a read may stall this long
  const auto t0 = std::chrono::steady_clock::now();
  const PullResult r = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1400));  // did not wait out the stall
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  std::vector<std::string> ranges;
  for (const auto& req : hub.log())
    if (req.target.rfind("/cdn/", 0) == 0) ranges.push_back(req.range);
  EXPECT_EQ(ranges, (std::vector<std::string>{"", "bytes=100000-"}));
}

TEST_F(HubPullTest, AnInterruptedPullLeavesAnIncompleteFileTheNextPullResumes) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.cut_after_bytes = 200000, .cut_times = 1});
  HubConfig config = config_for(hub);
  config.max_retries = 0;
  const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q8_0")); });
  EXPECT_NE(e.find("run the command again to resume from 200000 bytes"), std::string::npos) << e;
  const fs::path blobs = repo_dir("models--o--r") / "blobs";
  const std::string sha = sha256_hex(stories());
  EXPECT_EQ(fs::file_size(blobs / (sha + ".incomplete")), 200000u);
  EXPECT_FALSE(fs::exists(blobs / sha));
  EXPECT_FALSE(fs::exists(repo_dir("models--o--r") / "snapshots" / kCommit / "stories260K-Q8_0.gguf"));

  hub.clear_log();
  const PullResult r = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  EXPECT_EQ(r.downloaded_bytes, stories().size() - 200000);
  EXPECT_FALSE(fs::exists(blobs / (sha + ".incomplete")));
  ASSERT_EQ(hub.count("/cdn/", "GET"), 1);
  for (const auto& req : hub.log())
    if (req.target.rfind("/cdn/", 0) == 0) {
      EXPECT_EQ(req.range, "bytes=200000-");
    }
}

TEST_F(HubPullTest, AServerIgnoringRangeRestartsTheFileFromZero) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.ignore_range = true});
  // A partial file from an earlier run whose bytes are not even a prefix of the file.
  const fs::path blobs = repo_dir("models--o--r") / "blobs";
  fs::create_directories(blobs);
  { std::ofstream(blobs / (sha256_hex(stories()) + ".incomplete"), std::ios::binary) << std::string(5000, 'x'); }
  const PullResult r = pull(config_for(hub), ModelRef::parse("o/r:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  ASSERT_EQ(hub.count("/cdn/", "GET"), 1);
  EXPECT_EQ(hub.log().back().range, "bytes=5000-");  // asked, got 200 + the whole file, started over
}

TEST_F(HubPullTest, AHostileListingCannotPlaceFilesOutsideTheCache) {
  FakeHub hub;
  FakeRepo repo;
  repo.files["../../../escape-Q4_K_M.gguf"] = {gguf_like(100, 7), true};
  repo.files["/abs-Q4_K_M.gguf"] = {gguf_like(100, 8), true};
  repo.files["ok-Q8_0.gguf"] = {gguf_like(100, 9), true};
  hub.add_repo("o/r", repo);
  const PullResult r = pull(config_for(hub), ModelRef::parse("o/r"));
  EXPECT_EQ(r.model_path.filename(), "ok-Q8_0.gguf");  // the unsafe names were dropped from the listing
  EXPECT_FALSE(fs::exists(root_ / "escape-Q4_K_M.gguf"));
  EXPECT_FALSE(fs::exists(root_ / "hub" / "escape-Q4_K_M.gguf"));
}

TEST_F(HubPullTest, TooLittleFreeSpaceStopsBeforeTheDownload) {
  FakeHub hub;
  FakeRepo repo = gguf_repo();
  repo.files["stories260K-Q8_0.gguf"].linked_size = "1152921504606846976";  // 1 EiB
  hub.add_repo("o/r", repo);
  const std::string e = error_of([&] { pull(config_for(hub), ModelRef::parse("o/r:Q8_0")); });
  EXPECT_NE(e.find("not enough free space for stories260K-Q8_0.gguf: it needs 1152921504606846976 bytes, "),
            std::string::npos) << e;
  EXPECT_EQ(hub.count("/cdn/"), 0);
}

// The size the Hub announces bounds what is written: a body past it stops the download at
// that size, is not retried, and leaves neither the blob nor its partial file. Judged from
// the Content-Length before a byte is written, and byte by byte when there is none (a body
// ended by the close).
TEST_F(HubPullTest, ABodyLongerThanTheHubAnnouncedIsRefusedAndNotKept) {
  const std::string sha = sha256_hex(gguf_like(300000, 1));
  int run = 0;
  for (const bool close_delimited : {false, true}) {
    FakeHub hub;
    FakeRepo repo = gguf_repo();
    repo.files["stories260K-Q4_K_M.gguf"].linked_size = "1000";  // its 300000 bytes are sent
    hub.add_repo("o/r", repo);
    hub.set_faults({.close_delimited = close_delimited});
    HubConfig config = config_for(hub);
    config.cache_dir = root_ / ("run" + std::to_string(run++));
    const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q4_K_M")); });
    EXPECT_EQ(e, "stories260K-Q4_K_M.gguf: the server sent more than the 1000 bytes the Hub announced; the "
                 "partial download was deleted")
        << "close-delimited: " << close_delimited;
    const fs::path dir = config.cache_dir / "models--o--r";
    EXPECT_FALSE(fs::exists(dir / "blobs" / sha));
    EXPECT_FALSE(fs::exists(dir / "blobs" / (sha + ".incomplete")));
    EXPECT_FALSE(fs::exists(dir / "snapshots" / kCommit / "stories260K-Q4_K_M.gguf"));
    EXPECT_EQ(hub.count("/cdn/", "GET"), 1);  // not retried
  }
  // "X-Linked-Size: 0" is an empty file, not "size unknown" (which would lift the bound):
  // nothing is fetched, and the empty content fails the checksum.
  FakeHub hub;
  FakeRepo repo = gguf_repo();
  repo.files["stories260K-Q4_K_M.gguf"].linked_size = "0";
  hub.add_repo("o/r", repo);
  HubConfig config = config_for(hub);
  config.cache_dir = root_ / "zero";
  const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q4_K_M")); });
  EXPECT_NE(e.find("stories260K-Q4_K_M.gguf: checksum mismatch"), std::string::npos) << e;
  EXPECT_EQ(hub.count("/cdn/"), 0);
  EXPECT_FALSE(fs::exists(config.cache_dir / "models--o--r" / "blobs" / sha));
}

// A size header is a plain decimal byte count or the pull stops before any download.
TEST_F(HubPullTest, ASizeHeaderThatIsNotAByteCountIsRefused) {
  int run = 0;
  for (const char* bad : {"12abc", "-1", "+300000", "0x10", "18446744073709551616", "3e5"}) {
    FakeHub hub;
    FakeRepo repo = gguf_repo();
    repo.files["stories260K-Q4_K_M.gguf"].linked_size = bad;
    hub.add_repo("o/r", repo);
    HubConfig config = config_for(hub);
    config.cache_dir = root_ / ("run" + std::to_string(run++));
    EXPECT_EQ(error_of([&] { pull(config, ModelRef::parse("o/r:Q4_K_M")); }),
              "o/r/stories260K-Q4_K_M.gguf: the Hub's X-Linked-Size '" + std::string(bad) +
                  "' is not a byte count (digits only, at most 2^64 - 1)");
    EXPECT_EQ(hub.count("/cdn/"), 0) << bad;
  }
}

// A redirect leaves HTTP never: "file:///etc/passwd" is neither read as a relative path on the
// same server (and followed ten times) nor opened; the error names the server and the Location.
TEST_F(HubPullTest, ARedirectToAnotherSchemeThanHttpIsRefused) {
  int run = 0;
  for (const char* location : {"file:///etc/passwd", "FILE:///etc/passwd", "ftp://127.0.0.1/x", "data:,GGUF"}) {
    FakeHub hub;
    hub.add_repo("o/r", gguf_repo());
    hub.set_lfs_location(location);
    HubConfig config = config_for(hub);
    config.cache_dir = root_ / ("run" + std::to_string(run++));
    EXPECT_EQ(error_of([&] { pull(config, ModelRef::parse("o/r:Q8_0")); }),
              hub.endpoint() + " redirected to '" + std::string(location) +
                  "': refused, only http:// and https:// redirects are followed");
    // The listing and the HEAD that answered with the Location; nothing after.
    ASSERT_EQ(hub.log().size(), 2u) << location;
    EXPECT_EQ(hub.log()[1].method, "HEAD");
  }
}

// A revision names refs/<revision> in the cache: a branch, tag or commit name git accepts
// (with '/' as the Hub's refs/pr/N have), nothing that walks out of refs/.
TEST_F(HubPullTest, ARevisionIsABranchTagOrCommitNameAndStaysInsideTheCache) {
  FakeHub hub;
  FakeRepo repo = gguf_repo();
  repo.revisions = {"refs/pr/1", "v1.0", "../../../escaped"};  // a Hub that answers anything
  hub.add_repo("o/r", repo);
  const HubConfig config = config_for(hub);
  ModelRef ref = ModelRef::parse("o/r:Q8_0");

  ref.revision = "../../../escaped";
  EXPECT_EQ(error_of([&] { pull(config, ref); }),
            "bad revision '../../../escaped': it contains '..' (expected a branch or tag name, or a 40-hex commit)");
  EXPECT_TRUE(hub.log().empty());  // refused before any request
  EXPECT_FALSE(fs::exists(root_ / "escaped"));
  EXPECT_FALSE(fs::exists(root_ / "hub"));
  ref.revision = "x\x01y";
  EXPECT_EQ(error_of([&] { pull(config, ref); }),
            "bad revision 'x?y': it contains a control character (expected a branch or tag name, or a 40-hex commit)");

  // The Hub's pull-request refs are stored nested, as huggingface_hub stores them, and found
  // again by list and by an offline pull.
  ref.revision = "refs/pr/1";
  const PullResult r = pull(config, ref);
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  const fs::path refs = repo_dir("models--o--r") / "refs";
  EXPECT_EQ(read_file(refs / "refs" / "pr" / "1"), kCommit);
  ref.revision = "v1.0";
  pull(config, ref);
  EXPECT_EQ(read_file(refs / "v1.0"), kCommit);
  const auto cached = list_cached(config);
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0].refs, (std::map<std::string, std::string>{{"refs/pr/1", kCommit}, {"v1.0", kCommit}}));
  HubConfig offline = config;
  offline.offline = true;
  ref.revision = "refs/pr/1";
  EXPECT_EQ(pull(offline, ref).commit, kCommit);
  ref.revision = kCommit;  // a commit is its own revision: no ref file
  EXPECT_EQ(pull(config, ref).commit, kCommit);
  EXPECT_FALSE(fs::exists(refs / kCommit));
}

TEST(CheckRevision, GitRefNameRules) {
  for (const char* good : {"main", "v1.0", "refs/pr/1", "refs/convert/parquet", "release-2024_01", "a.b/c-d",
                           "0123456789abcdef0123456789abcdef01234567", "fix@home", "\xC3\xA9t\xC3\xA9"}) {
    EXPECT_NO_THROW(check_revision(good)) << good;
  }
  for (const char* bad : {"", "..", "../x", "a/../b", "a..b", "/abs", "a/", "a//b", "-rf", "a.", "@", "a@{1}",
                          ".hidden", "a/.b", "x.lock", "a/b.lock/c", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[",
                          "a\\b", "a\tb", "a\x7f"}) {
    EXPECT_THROW(check_revision(bad), Error) << bad;
  }
  EXPECT_THROW(check_revision(std::string(256, 'a')), Error);
  EXPECT_NO_THROW(check_revision(std::string(255, 'a') + "/" + std::string(255, 'b')));
}

TEST_F(HubPullTest, ARenamedRepoIsFollowedAndCachedUnderTheNameAskedFor) {
  FakeHub hub;
  hub.add_repo("new-owner/stories", gguf_repo());
  hub.add_rename("old-owner/stories", "new-owner/stories");
  const PullResult r = pull(config_for(hub), ModelRef::parse("old-owner/stories:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  EXPECT_EQ(r.snapshot_dir, repo_dir("models--old-owner--stories") / "snapshots" / kCommit);  // as huggingface_hub
  EXPECT_EQ(hub.count("/old-owner/stories/resolve/", "HEAD"), 1);
  EXPECT_EQ(hub.count("/new-owner/stories/resolve/", "HEAD"), 1);  // the 307 followed on the HEAD
}

TEST_F(HubPullTest, ChecksumMismatchLeavesNoBlobAndNoLink) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.corrupt_times = 1});
  const HubConfig config = config_for(hub);
  const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q8_0")); });
  EXPECT_NE(e.find("stories260K-Q8_0.gguf: checksum mismatch"), std::string::npos) << e;
  const fs::path blobs = repo_dir("models--o--r") / "blobs";
  const std::string sha = sha256_hex(stories());
  EXPECT_FALSE(fs::exists(blobs / sha));
  EXPECT_FALSE(fs::exists(blobs / (sha + ".incomplete")));
  EXPECT_FALSE(fs::exists(repo_dir("models--o--r") / "snapshots" / kCommit / "stories260K-Q8_0.gguf"));
  // The next pull starts over and gets good bytes.
  EXPECT_SAME_BYTES(read_file(pull(config, ModelRef::parse("o/r:Q8_0")).model_path), stories());
}

TEST_F(HubPullTest, ServerErrorsAreRetriedWithinTheBound) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.unavailable_times = 2});
  EXPECT_SAME_BYTES(read_file(pull(config_for(hub), ModelRef::parse("o/r:Q8_0")).model_path), stories());
  EXPECT_EQ(hub.count("/cdn/", "GET"), 3);

  hub.set_faults({.unavailable_times = 0, .api_unavailable_times = 2});
  HubConfig fresh = config_for(hub);
  fresh.cache_dir = root_ / "fresh";
  EXPECT_SAME_BYTES(read_file(pull(fresh, ModelRef::parse("o/r:Q8_0")).model_path), stories());

  hub.set_faults({.unavailable_times = 10});
  HubConfig config = config_for(hub);
  config.cache_dir = root_ / "other";
  const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q8_0")); });
  EXPECT_NE(e.find("failed after 3 attempts: HTTP 503"), std::string::npos) << e;
}

TEST_F(HubPullTest, OfflineUsesTheCacheAndSaysWhenItIsEmpty) {
  HubConfig config;
  {
    FakeHub hub;
    hub.add_repo("o/r", gguf_repo());
    config = config_for(hub);
    pull(config, ModelRef::parse("o/r:Q8_0"));
  }  // the Hub is gone
  config.endpoint = "http://127.0.0.1:1";
  config.offline = true;
  PullResult r = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_TRUE(r.used_cache_only);
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  EXPECT_EQ(error_of([&] { pull(config, ModelRef::parse("o/other")); }),
            "offline (HF_HUB_OFFLINE is set): o/other is not in the cache (" + config.cache_dir.string() + ")");
  EXPECT_EQ(error_of([&] { pull(config, ModelRef::parse("o/r:Q4_K_M")); }),
            "offline (HF_HUB_OFFLINE is set): in the cached snapshot 0123456789ab, o/r has no GGUF file for quant "
            "'Q4_K_M' (quants: Q8_0)");
  // Online with the Hub unreachable: the complete cached snapshot is used (huggingface_hub's
  // fallback); a repo that is not cached names the failure.
  config.offline = false;
  r = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_TRUE(r.used_cache_only);
  const std::string e2 = error_of([&] { pull(config, ModelRef::parse("o/other")); });
  EXPECT_NE(e2.find("cannot connect to http://127.0.0.1:1"), std::string::npos) << e2;
  EXPECT_NE(e2.find("o/other is not in the cache"), std::string::npos) << e2;
}

// The tree `hf download` leaves, written here byte for byte as huggingface_hub lays it out.
void lay_out_like_huggingface_hub(const fs::path& cache, const std::string& repo_folder,
                                  const std::map<std::string, std::string>& files_by_path, bool lfs) {
  const fs::path repo = cache / repo_folder;
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  { std::ofstream(repo / "refs" / "main", std::ios::binary) << kCommit; }
  for (const auto& [path, content] : files_by_path) {
    const std::string etag = lfs ? sha256_hex(content) : testing::git_blob_sha1(content);
    { std::ofstream(repo / "blobs" / etag, std::ios::binary) << content; }
    const fs::path link = repo / "snapshots" / kCommit / path;
    fs::create_directories(link.parent_path());
    fs::create_symlink("../../blobs/" + etag, link);
  }
}

TEST_F(HubPullTest, ReusesACacheTreeLaidOutByHuggingfaceHubWithoutDownloading) {
  lay_out_like_huggingface_hub(root_ / "hub", "models--ggml-org--stories-GGUF",
                               {{"stories260K-Q8_0.gguf", stories()}}, true);
  FakeHub hub;
  hub.add_repo("ggml-org/stories-GGUF", gguf_repo());
  const HubConfig config = config_for(hub);
  const PullResult r = pull(config, ModelRef::parse("ggml-org/stories-GGUF:Q8_0"));
  EXPECT_EQ(r.downloaded_bytes, 0u);
  EXPECT_EQ(r.model_path, repo_dir("models--ggml-org--stories-GGUF") / "snapshots" / kCommit / "stories260K-Q8_0.gguf");
  EXPECT_EQ(hub.count("/cdn/"), 0);
  EXPECT_EQ(hub.count("/ggml-org/"), 0);  // not even a HEAD
  HubConfig offline = config;
  offline.offline = true;
  EXPECT_SAME_BYTES(read_file(pull(offline, ModelRef::parse("hf://ggml-org/stories-GGUF:Q8_0")).model_path), stories());
}

TEST_F(HubPullTest, ConcurrentPullsOfOneFileMakeOneGoodBlob) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  hub.set_faults({.slow_ms_per_64k = 4});  // ~70 ms a transfer, so the pulls overlap
  const HubConfig config = config_for(hub);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  std::vector<fs::path> paths(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      try {
        paths[i] = pull(config, ModelRef::parse("o/r:Q8_0")).model_path;
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(errors[i], "");
    EXPECT_SAME_BYTES(read_file(paths[i]), stories());
  }
  EXPECT_EQ(hub.count("/cdn/", "GET"), 1);  // the others waited on the lock and found the blob
  int blobs = 0;
  for (const auto& e : fs::directory_iterator(repo_dir("models--o--r") / "blobs")) {
    ++blobs;
    EXPECT_EQ(e.path().extension(), "");
  }
  EXPECT_EQ(blobs, 1);
}

TEST_F(HubPullTest, GatedRepoAsksForHfTokenAndTheTokenIsNeverPrinted) {
  const std::string token = "hf_GaTeDsEcReT0123456789";
  FakeHub hub(token);
  FakeRepo repo = gguf_repo();
  repo.gated = true;
  hub.add_repo("meta/gated", repo);
  HubConfig config = config_for(hub);
  FILE* progress = std::tmpfile();
  config.progress = progress;

  const std::string no_token = error_of([&] { pull(config, ModelRef::parse("meta/gated:Q8_0")); });
  EXPECT_NE(no_token.find("access denied (HTTP 401)"), std::string::npos) << no_token;
  EXPECT_NE(no_token.find("set HF_TOKEN"), std::string::npos) << no_token;

  config.token = "hf_wrong_" + token;  // contains the real one too: neither may leak
  const std::string wrong = error_of([&] { pull(config, ModelRef::parse("meta/gated:Q8_0")); });
  EXPECT_NE(wrong.find("access denied (HTTP 403)"), std::string::npos) << wrong;
  EXPECT_EQ(wrong.find("hf_"), std::string::npos) << wrong;

  config.token = token;
  config.progress_is_terminal = true;
  const PullResult r = pull(config, ModelRef::parse("meta/gated:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());
  for (const auto& req : hub.log())
    if (req.target.rfind("/cdn/", 0) == 0) {
      EXPECT_FALSE(req.authorization);
    }
  std::fflush(progress);
  std::rewind(progress);
  std::string printed;
  for (int c; (c = std::fgetc(progress)) != EOF;) printed += static_cast<char>(c);
  std::fclose(progress);
  EXPECT_NE(printed.find("downloading"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("hf_"), std::string::npos) << printed;
}

TEST_F(HubPullTest, UnknownRepoQuantAndRevisionAreOneLineErrors) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  const HubConfig config = config_for(hub);
  const std::string repo = error_of([&] { pull(config, ModelRef::parse("nobody/nothing:Q4_K_M")); });
  EXPECT_EQ(repo, "nobody/nothing: repository not found on " + hub.endpoint() +
                      " (HTTP 401); if it is private, set HF_TOKEN");
  EXPECT_EQ(error_of([&] { pull(config, ModelRef::parse("o/r:IQ1_S")); }),
            "o/r has no GGUF file for quant 'IQ1_S' (quants: Q4_K_M, Q8_0)");
  ModelRef rev = ModelRef::parse("o/r");
  rev.revision = "v9";
  EXPECT_EQ(error_of([&] { pull(config, rev); }), "o/r: no repo with revision 'v9' on " + hub.endpoint() + " (HTTP 404)");
  for (const auto& e : {repo}) EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_FALSE(fs::exists(repo_dir("models--nobody--nothing")));
}

TEST_F(HubPullTest, HttpsVerifiesAgainstTheCaBundleHandedToTheClient) {
  const testing::TestPki pki = testing::make_test_pki();
  const fs::path ca = root_ / "test-ca.pem";
  { std::ofstream(ca) << pki.ca_cert_pem; }
  FakeHub hub("", pki.server_cert_pem, pki.server_key_pem);
  hub.add_repo("o/r", gguf_repo());
  HubConfig config = config_for(hub);
  ASSERT_EQ(config.endpoint.rfind("https://127.0.0.1:", 0), 0u);
  config.ca_bundle_file = ca.string();
  const PullResult r = pull(config, ModelRef::parse("o/r:Q8_0"));
  EXPECT_SAME_BYTES(read_file(r.model_path), stories());  // via https://localhost:PORT/cdn/ too (the DNS SAN)

  // Without the test CA (the system store) the server is not trusted, and nothing is cached.
  config.ca_bundle_file = "";
  config.cache_dir = root_ / "untrusted";
  const std::string e = error_of([&] { pull(config, ModelRef::parse("o/r:Q8_0")); });
  EXPECT_NE(e.find("TLS handshake with " + hub.endpoint() + " failed: certificate rejected"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root_ / "untrusted" / "models--o--r" / "snapshots"));
}

TEST_F(HubPullTest, ListAndRemoveSeeThePulledRepos) {
  FakeHub hub;
  hub.add_repo("o/r", gguf_repo());
  const HubConfig config = config_for(hub);
  pull(config, ModelRef::parse("o/r:Q8_0"));
  auto repos = list_cached(config);
  ASSERT_EQ(repos.size(), 1u);
  EXPECT_EQ(repos[0].repo_id, "o/r");
  EXPECT_EQ(repos[0].size_bytes, stories().size());
  EXPECT_EQ(repos[0].refs.at("main"), kCommit);
  EXPECT_EQ(repos[0].snapshots, std::vector<std::string>{kCommit});
  EXPECT_EQ(remove_cached(config, "o/r"), stories().size());
  EXPECT_TRUE(list_cached(config).empty());
  EXPECT_FALSE(fs::exists(root_ / "hub" / ".locks" / "models--o--r"));
  EXPECT_NE(error_of([&] { remove_cached(config, "o/r"); }).find("o/r is not in the cache"), std::string::npos);
  EXPECT_NE(error_of([&] { remove_cached(config, "../x"); }).find("bad model name"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::hub
