// MappedFile::drop_resident: whole pages inside the range leave the resident set,
// the bytes read back unchanged afterwards, edge pages shared with a neighbour stay.
#include "common/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/process_memory.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

class MappedFileDrop : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("pagoda_mapped_" + std::to_string(::getpid()) + ".bin")).string();
    bytes_.resize(kSize);
    for (size_t i = 0; i < kSize; ++i) bytes_[i] = static_cast<char>(i * 131 + i / 4096);
    std::ofstream(path_, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(kSize));
  }
  void TearDown() override { fs::remove(path_); }

  static uint64_t sum(const MappedFile& f) {
    uint64_t s = 0;
    for (size_t i = 0; i < f.size(); i += 64) s += f.data()[i];
    return s;
  }

  static constexpr size_t kSize = 16 << 20;
  std::string path_;
  std::vector<char> bytes_;
};

TEST_F(MappedFileDrop, DroppedPagesLeaveRssAndReadBackUnchanged) {
  MappedFile f(path_);
  const uint64_t s0 = sum(f);  // every page resident
  const ProcessMemory before = read_process_memory();
  if (!before.available) GTEST_SKIP() << "no /proc/self/status";
  // Page-unaligned range: the partial first and last pages stay.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t dropped = f.drop_resident(f.data() + 100, kSize - 200);
  EXPECT_EQ(dropped, kSize - 2 * page);
  const ProcessMemory after = read_process_memory();
  const double fell = static_cast<double>(before.file_bytes) - static_cast<double>(after.file_bytes);
  EXPECT_GE(fell, static_cast<double>(kSize) - 64.0 * page) << "RssFile fell by " << fell;
  // The bytes are the file's, faulted back in.
  EXPECT_EQ(sum(f), s0);
  EXPECT_EQ(0, std::memcmp(f.data(), bytes_.data(), kSize));
}

TEST_F(MappedFileDrop, RangeInsideOnePageDropsNothing) {
  MappedFile f(path_);
  EXPECT_EQ(f.drop_resident(f.data() + 10, 1000), 0u);
  EXPECT_EQ(f.drop_resident(f.data(), 0), 0u);
}

}  // namespace
}  // namespace pagoda
