// Split GGUF files (gguf-split's layout): opening the first part maps every part and
// presents one file whose tensors point into their own part's bytes; and the ways a split
// can be wrong each give a one-line error naming the file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"

namespace pagoda::gguf {
namespace {

namespace fs = std::filesystem;

class SplitGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_split_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string part_path(int k, int n, const std::string& prefix = "model") const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d.gguf", prefix.c_str(), k, n);
    return (dir_ / buf).string();
  }
  // Part k of n (1-based) holding tensors named t<first>..t<first + count - 1>, each 8 f32
  // values equal to its index.
  void write_part(int k, int n, int first, int count, int total_tensors, int declared_no = -1) {
    GgufWriter w;
    if (k == 1) w.set("general.architecture", Value::str("llama"));
    w.set("split.no", Value::u32(static_cast<uint32_t>(declared_no >= 0 ? declared_no : k - 1)));
    w.set("split.count", Value::u32(static_cast<uint32_t>(n)));
    if (k == 1) w.set("split.tensors.count", Value::i32(total_tensors));
    for (int i = first; i < first + count; ++i) {
      std::vector<float> v(8, static_cast<float>(i));
      w.add_tensor_f32("t" + std::to_string(i), GgmlType::F32, {8}, v.data());
    }
    w.write(part_path(k, n));
  }
  fs::path dir_;
};

TEST_F(SplitGguf, TheFirstPartOpensEveryPartsTensors) {
  write_part(1, 3, 0, 2, 5);
  write_part(2, 3, 2, 2, 5);
  write_part(3, 3, 4, 1, 5);
  const GgufFile g = GgufFile::open(part_path(1, 3));
  EXPECT_EQ(g.n_split_parts(), 3u);
  // Every part, in order (the disk tier's weights fingerprint hashes each).
  EXPECT_EQ(g.part_paths(), (std::vector<std::string>{part_path(1, 3), part_path(2, 3), part_path(3, 3)}));
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  ASSERT_EQ(g.tensors().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const TensorInfo* t = g.find_tensor("t" + std::to_string(i));
    ASSERT_NE(t, nullptr) << i;
    float v[8];
    std::memcpy(v, t->data, sizeof v);
    for (float x : v) EXPECT_EQ(x, static_cast<float>(i)) << "tensor " << i;
  }
  // Moving the file keeps the parts' mappings (the tensors point into them).
  GgufFile moved = std::move(const_cast<GgufFile&>(g));
  float v4;
  std::memcpy(&v4, moved.find_tensor("t4")->data, sizeof v4);
  EXPECT_EQ(v4, 4.0f);
  EXPECT_EQ(moved.drop_resident(*moved.find_tensor("t4")) % 4096, 0u);
}

TEST_F(SplitGguf, EveryBrokenSplitIsAOneLineError) {
  auto error_of = [&](const std::string& path) {
    try {
      (void)GgufFile::open(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(opened)");
  };
  write_part(1, 3, 0, 2, 5);
  write_part(3, 3, 4, 1, 5);
  EXPECT_NE(error_of(part_path(1, 3)).find("part 2 of 3 is missing"), std::string::npos) << error_of(part_path(1, 3));
  write_part(2, 3, 2, 2, 5);
  EXPECT_NE(error_of(part_path(2, 3)).find("open the first part"), std::string::npos) << error_of(part_path(2, 3));
  write_part(2, 3, 1, 2, 5);  // t1 is in parts 1 and 2
  EXPECT_NE(error_of(part_path(1, 3)).find("also in another part"), std::string::npos) << error_of(part_path(1, 3));
  write_part(2, 3, 2, 1, 5);  // 4 tensors, 5 declared
  EXPECT_NE(error_of(part_path(1, 3)).find("split.tensors.count says 5"), std::string::npos)
      << error_of(part_path(1, 3));
  write_part(2, 3, 2, 2, 5, /*declared_no=*/2);  // claims to be part 3
  EXPECT_NE(error_of(part_path(1, 3)).find("not part 2 of the split GGUF"), std::string::npos)
      << error_of(part_path(1, 3));
  // A first part not named by gguf-split's pattern cannot find its siblings.
  fs::copy_file(part_path(1, 3), dir_ / "renamed.gguf");
  EXPECT_NE(error_of((dir_ / "renamed.gguf").string()).find("not named PREFIX-00001-of-00003.gguf"), std::string::npos)
      << error_of((dir_ / "renamed.gguf").string());
}

}  // namespace
}  // namespace pagoda::gguf
