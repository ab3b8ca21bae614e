// ProcessMemory — this process's resident memory, as the kernel counts it.
//
// Read from /proc/self/status (VmRSS, RssAnon, RssFile, RssShmem; Linux 4.5+).
// Used to report and test what the weights really hold, beside the accounted
// Model::resident_weight_bytes(). read_process_memory() never throws: where the
// file or a field is missing, the field reads 0 and `available` is false.
#pragma once

#include <cstdint>

namespace pagoda {

struct ProcessMemory {
  bool available = false;
  uint64_t rss_bytes = 0;    // VmRSS: everything resident
  uint64_t anon_bytes = 0;   // RssAnon: heap, mmap'd anonymous memory (repacked weights, KV)
  uint64_t file_bytes = 0;   // RssFile: mapped file pages (the model file)
  uint64_t shmem_bytes = 0;  // RssShmem
};

ProcessMemory read_process_memory();

}  // namespace pagoda
