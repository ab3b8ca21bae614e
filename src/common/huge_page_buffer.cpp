#include "common/huge_page_buffer.h"

#include <sys/mman.h>

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
  map_bytes_ = size + kHugePage;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error("out of memory mapping " + std::to_string(size) + " bytes");
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(map_);
  data_ = reinterpret_cast<uint8_t*>((base + kHugePage - 1) & ~(kHugePage - 1));
  // Advice only: without THP the buffer is ordinary memory. Anonymous pages read as zero.
  madvise(data_, (size + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);
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
