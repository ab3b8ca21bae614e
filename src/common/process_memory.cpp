#include "common/process_memory.h"

#include <cstdio>
#include <cstring>

namespace pagoda {

ProcessMemory read_process_memory() {
  ProcessMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  int found = 0;
  while (std::fgets(line, sizeof line, f)) {
    struct Field {
      const char* key;
      uint64_t* out;
    } fields[] = {{"VmRSS:", &m.rss_bytes}, {"RssAnon:", &m.anon_bytes}, {"RssFile:", &m.file_bytes},
                  {"RssShmem:", &m.shmem_bytes}};
    for (const Field& fl : fields) {
      const size_t n = std::strlen(fl.key);
      if (std::strncmp(line, fl.key, n) != 0) continue;
      unsigned long long kib = 0;
      if (std::sscanf(line + n, "%llu", &kib) == 1) {  // "  12345 kB"
        *fl.out = static_cast<uint64_t>(kib) * 1024;
        ++found;
      }
    }
  }
  std::fclose(f);
  m.available = found == 4;
  return m;
}

}  // namespace pagoda
