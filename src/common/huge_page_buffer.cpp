#include "common/huge_page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "common/error.h"

namespace pagoda {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

HugePageBuffer::HugePageBuffer(size_t size) : size_(size) {
  if (size == 0) return;
  if (size < kHugePage) {
    data_ = static_cast<uint8_t*>(std::calloc(size, 1));
    if (!data_) throw Error("out of memory allocating " + std::to_string(size) + " bytes");
    return;
  }
  // Over-map by one huge page so a 2 MiB-aligned start fits; nothing is touched yet.
  const size_t over = size + kHugePage;
  void* map = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw Error("out of memory mapping " + std::to_string(size) + " bytes");
  const uintptr_t base = reinterpret_cast<uintptr_t>(map);
  const uintptr_t start = (base + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = (start + size + page - 1) & ~(page - 1);
  // Keep only [start, end): the slack before and after is unmapped, and only the
  // whole huge pages are advised. Advising (or, in THP `always` mode, merely
  // mapping) the partial last huge page made the kernel back it with a full
  // 2 MiB on first touch: a 6.2 MiB matrix took 8 MiB, and TinyLlama Q4_0's
  // 556 MiB of repacked matrices took 740 MiB (+33%). The tail (< 2 MiB per
  // buffer, ~4% of TinyLlama's weight bytes) is in 4 KiB pages instead.
  if (start > base) munmap(map, start - base);
  if (base + over > end) munmap(reinterpret_cast<void*>(end), base + over - end);
  data_ = reinterpret_cast<uint8_t*>(start);
  map_ = data_;
  map_bytes_ = end - start;
  // Advice only: without THP the buffer is ordinary memory. Anonymous pages read as zero.
  madvise(data_, size & ~(kHugePage - 1), MADV_HUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() { release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
  }
  return *this;
}

void HugePageBuffer::release() {
  if (map_) munmap(map_, map_bytes_);
  else std::free(data_);
  data_ = nullptr;
  map_ = nullptr;
  size_ = map_bytes_ = 0;
}

}  // namespace pagoda
