// What `pagoda serve` decides and says at start-up (#32): the default KV budget comes from
// the memory the process may still use — a fake /proc/meminfo and cgroup directory
// (PAGODA_MEMINFO, PAGODA_CGROUP_ROOT) stand in for a container — less headroom; a
// budget larger than that is capped with a one-line warning, and its per-block metadata
// is not allocated up front (RSS stays small with a 100 GiB request); the banner gives
// sizes in MiB / GiB; a context past the trained one, a budget that cannot hold one
// context, and a keyless server on a public address are each warned about.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "server_process.h"

namespace {

using pagoda::testing::ServerProcess;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
constexpr uint64_t kGiB = 1ull << 30;

// A container with `limit` bytes, `used` of them in use, on a host with 8 GiB total.
struct FakeContainer {
  std::string dir = "/tmp/pagoda_fake_container_" + std::to_string(::getpid());
  FakeContainer(uint64_t limit, uint64_t used) {
    std::filesystem::create_directories(dir + "/cg");
    std::ofstream(dir + "/meminfo") << "MemTotal:        8388608 kB\nMemAvailable:    6291456 kB\n";
    std::ofstream(dir + "/cg/memory.max") << limit << "\n";
    std::ofstream(dir + "/cg/memory.current") << used << "\n";
  }
  ~FakeContainer() { std::filesystem::remove_all(dir); }
  std::vector<std::string> env() const {
    return {"PAGODA_MEMINFO=" + dir + "/meminfo", "PAGODA_CGROUP_ROOT=" + dir + "/cg"};
  }
};

uint64_t rss_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

TEST(ServeStartup, TheDefaultBudgetIsTheContainersRoomLessHeadroom) {
  const FakeContainer box(2 * kGiB, kGiB / 2);  // 1.5 GiB of room
  ServerProcess s({"-m", kStories, "-t", "1"}, box.env());
  ASSERT_NE(s.start(), 0) << s.log();
  // 1.5 GiB less 512 MiB of headroom (10% of the 2 GiB limit is less) and the few KiB of
  // weights not in anonymous memory, rounded down to whole blocks: just under 1 GiB.
  std::smatch m;
  const std::string log = s.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("KV budget ([0-9.]+) MiB"))) << log;
  EXPECT_GT(std::stod(m[1]), 1020.0) << log;
  EXPECT_LE(std::stod(m[1]), 1024.0) << log;
  EXPECT_EQ(s.log().find("warning"), std::string::npos) << s.log();
}

TEST(ServeStartup, ABudgetOverWhatMemoryAllowsIsCappedWithOneLineAndNoMetadataUpFront) {
  const FakeContainer box(2 * kGiB, kGiB / 2);
  ServerProcess s({"-m", kStories, "-t", "1", "--kv-cache-bytes", "100GiB"}, box.env());
  ASSERT_NE(s.start(), 0) << s.log();
  EXPECT_NE(s.log().find("warning: --kv-cache-bytes 100.00 GiB is more than memory allows; using 1.00 GiB"),
            std::string::npos)
      << s.log();
  // And with the real machine's memory: ~20 GiB of budget for a 1 MB model used to
  // allocate 168 MB of block metadata before the first request (100 GiB: 1.49 GB).
  ServerProcess big({"-m", kStories, "-t", "1", "--kv-cache-bytes", "100GiB"});
  ASSERT_NE(big.start(), 0) << big.log();
  EXPECT_LT(rss_of(big.pid()), 64ull << 20) << big.log();
}

TEST(ServeStartup, ContextBudgetAndHostMistakesAreWarnedAbout) {
  ServerProcess s({"-m", kStories, "-t", "1", "-c", "100000", "--kv-cache-bytes", "1MiB", "--host", "0.0.0.0"});
  ASSERT_NE(s.start(), 0) << s.log();
  const std::string log = s.log();
  EXPECT_NE(log.find("warning: -c 100000 is more than the 2048 tokens the model was trained on"), std::string::npos)
      << log;
  // stories260K: 20 KiB per 32-token block, so 1 MiB is 51 blocks = 1632 tokens.
  EXPECT_NE(log.find("warning: the KV budget (1020.00 KiB) holds 1632 tokens, less than one full context of 100000"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("warning: --host 0.0.0.0 without --api-key"), std::string::npos) << log;
  ServerProcess keyed({"-m", kStories, "-t", "1", "--host", "0.0.0.0", "--api-key", "k"});
  ASSERT_NE(keyed.start(), 0) << keyed.log();
  EXPECT_EQ(keyed.log().find("warning"), std::string::npos) << keyed.log();
}

}  // namespace
