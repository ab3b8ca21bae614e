// Test helpers for the GGUF tests: a little-endian byte builder so each test
// spells out the exact bytes of the (often malformed) file it feeds the
// reader, and a temporary file that removes itself.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda::gguf::testing {

class Bytes {
 public:
  Bytes& u8(uint8_t x) { return pod(x); }
  Bytes& u16(uint16_t x) { return pod(x); }
  Bytes& u32(uint32_t x) { return pod(x); }
  Bytes& u64(uint64_t x) { return pod(x); }
  Bytes& i32(int32_t x) { return pod(x); }
  Bytes& f32(float x) { return pod(x); }
  Bytes& raw(const std::string& s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  // GGUF string: u64 length + bytes.
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // Key + value type; the caller appends the payload.
  Bytes& key(const std::string& k, uint32_t value_type) { return str(k).u32(value_type); }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return key(k, 4).u32(v); }
  Bytes& kv_str(const std::string& k, const std::string& v) { return key(k, 8).str(v); }
  Bytes& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad_to(size_t alignment) {
    while (b_.size() % alignment) b_.push_back(0);
    return *this;
  }
  Bytes& fill(size_t n, uint8_t value) {
    b_.insert(b_.end(), n, value);
    return *this;
  }
  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  template <class T>
  Bytes& pod(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b_.insert(b_.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  std::vector<uint8_t> b_;
};

// A file under the test temp dir, unique per process and instance; removed on
// destruction. The name carries the test name so a failure message shows it.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) : TempFile() { write(bytes); }
  TempFile() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::path(::testing::TempDir()) /
             ("pagoda_gguf_" + std::string(info ? info->name() : "x") + "_" +
              std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".gguf"))
                .string();
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const std::vector<uint8_t>& bytes) const { write(bytes.data(), bytes.size()); }
  void write(const uint8_t* data, size_t n) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path_;
    if (n) {
      ASSERT_EQ(std::fwrite(data, 1, n, f), n);
    }
    ASSERT_EQ(std::fclose(f), 0);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pagoda::gguf::testing
