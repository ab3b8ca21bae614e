// SystemMemory — how much memory this process may still use: the kernel's MemAvailable
// and, when the process runs in a memory-limited control group (a container, a systemd
// slice), that group's limit and usage. Used to size the default KV budget and to refuse
// a budget the machine cannot hold (kv/kv_config.h).
//
// Contract:
// - read_system_memory() reads /proc/meminfo, /proc/self/cgroup and the cgroup file system
//   (v2: memory.max / memory.current; v1: memory.limit_in_bytes / memory.usage_in_bytes),
//   walking from the process's group up to the root and keeping the tightest limit. It
//   never throws: what cannot be read is left 0 / unlimited.
// - For tests, PAGODA_MEMINFO names a file read instead of /proc/meminfo, and
//   PAGODA_CGROUP_ROOT a directory read as the process's own memory cgroup (its
//   memory.max and memory.current, or the v1 names) instead of the real one.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

struct SystemMemory {
  uint64_t mem_total = 0;      // MemTotal
  uint64_t mem_available = 0;  // MemAvailable (0: unknown)
  bool cgroup_limited = false;
  uint64_t cgroup_limit = 0;   // the tightest memory limit on the way to the root
  uint64_t cgroup_usage = 0;   // that group's usage
  std::string cgroup_path;     // where the limit was read (for messages)

  // What this process may still take: MemAvailable, or less when the cgroup's room
  // (limit - usage) is smaller. 0 when nothing is known.
  uint64_t available() const;
  // The memory this process may use at most: MemTotal, or the cgroup limit if smaller.
  uint64_t limit() const;
  // "12.3 GiB available (MemAvailable 20.1 GiB; cgroup /sys/fs/cgroup/x limit 16 GiB, 3.7 GiB used)"
  std::string describe() const;
};

SystemMemory read_system_memory();
// The same from explicit paths (tests): meminfo file, /proc/self/cgroup file, and the
// cgroup file system's mount point ("/sys/fs/cgroup").
SystemMemory read_system_memory(const std::string& meminfo, const std::string& self_cgroup, const std::string& cgroup_fs);
// A directory holding one cgroup's memory files (PAGODA_CGROUP_ROOT): its limit and usage.
void read_cgroup_dir(const std::string& dir, SystemMemory& m);

}  // namespace pagoda
