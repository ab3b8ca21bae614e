#include "common/system_memory.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace pagoda {

namespace {

// "1073741824", "max" (v2 unlimited); v1 writes a page-rounded 2^63 for unlimited.
bool read_limit_file(const std::string& path, uint64_t& out) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word)) return false;
  if (word == "max") return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  if (end == word.c_str() || *end != '\0') return false;
  if (v >= (1ull << 62)) return false;  // v1's "unlimited"
  out = v;
  return true;
}

uint64_t read_number_file(const std::string& path) {
  std::ifstream f(path);
  unsigned long long v = 0;
  return (f >> v) ? v : 0;
}

// The tighter of what m holds and dir's limit.
void consider(const std::string& dir, bool v2, SystemMemory& m) {
  uint64_t limit = 0;
  if (!read_limit_file(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), limit)) return;
  const uint64_t usage = read_number_file(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  const uint64_t room = limit > usage ? limit - usage : 0;
  const uint64_t old_room = m.cgroup_limit > m.cgroup_usage ? m.cgroup_limit - m.cgroup_usage : 0;
  if (!m.cgroup_limited || room < old_room) {
    m.cgroup_limited = true;
    m.cgroup_limit = limit;
    m.cgroup_usage = usage;
    m.cgroup_path = dir;
  }
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ull << 30));
  return buf;
}

}  // namespace

uint64_t SystemMemory::available() const {
  uint64_t a = mem_available;
  if (cgroup_limited) {
    const uint64_t room = cgroup_limit > cgroup_usage ? cgroup_limit - cgroup_usage : 0;
    if (a == 0 || room < a) a = room;
  }
  return a;
}

uint64_t SystemMemory::limit() const {
  return cgroup_limited && (mem_total == 0 || cgroup_limit < mem_total) ? cgroup_limit : mem_total;
}

std::string SystemMemory::describe() const {
  std::string s = gib(available()) + " available (MemAvailable " + gib(mem_available);
  if (cgroup_limited) s += "; cgroup " + cgroup_path + " limit " + gib(cgroup_limit) + ", " + gib(cgroup_usage) + " used";
  return s + ")";
}

void read_cgroup_dir(const std::string& dir, SystemMemory& m) {
  consider(dir, /*v2=*/true, m);
  consider(dir, /*v2=*/false, m);
}

SystemMemory read_system_memory(const std::string& meminfo, const std::string& self_cgroup, const std::string& cgroup_fs) {
  SystemMemory m;
  std::ifstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kib = 0;
    if (line.rfind("MemTotal:", 0) == 0 && std::sscanf(line.c_str() + 9, "%llu", &kib) == 1) m.mem_total = kib * 1024;
    if (line.rfind("MemAvailable:", 0) == 0 && std::sscanf(line.c_str() + 13, "%llu", &kib) == 1)
      m.mem_available = kib * 1024;
  }
  // /proc/self/cgroup: "0::/path" (v2), "4:memory:/path" or "4:cpu,memory:/path" (v1).
  std::ifstream cg(self_cgroup);
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    bool v2 = controllers.empty();
    bool v1_memory = false;
    for (size_t i = 0; !v2 && i <= controllers.size();) {
      const size_t j = std::min(controllers.find(',', i), controllers.size());
      v1_memory = v1_memory || controllers.substr(i, j - i) == "memory";
      i = j + 1;
    }
    if (!v2 && !v1_memory) continue;
    const std::string base = v2 ? cgroup_fs : cgroup_fs + "/memory";
    // Leaf to root: a parent's limit binds too.
    for (;;) {
      consider(base + (path == "/" ? "" : path), v2, m);
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return m;
}

SystemMemory read_system_memory() {
  const char* meminfo = std::getenv("PAGODA_MEMINFO");
  const char* cgroup_root = std::getenv("PAGODA_CGROUP_ROOT");
  if (cgroup_root && *cgroup_root) {
    SystemMemory m = read_system_memory(meminfo && *meminfo ? meminfo : "/proc/meminfo", "/dev/null", "/nonexistent");
    read_cgroup_dir(cgroup_root, m);
    return m;
  }
  return read_system_memory(meminfo && *meminfo ? meminfo : "/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup");
}

}  // namespace pagoda
