// A fresh directory path under /tmp for one test (prefix, process id and a counter), removed
// before use and at the end.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace pagoda::test {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix) {
    static int n = 0;
    path = "/tmp/" + prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace pagoda::test
