// MappedFile — a read-only memory map of a whole file.
//
// Owns the mapping; non-copyable, movable. The bytes stay valid for the
// lifetime of the object. Opening a missing / unreadable / empty file throws
// pagoda::Error naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pagoda {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws pagoda::Error when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops this process's mapping of the whole pages inside [p, p + n) from its
  // resident set (MADV_DONTNEED): the mapping is private and never written, so
  // a later read faults the same bytes back in from the file (or the page
  // cache): what is read never changes, only what is resident. Pages only
  // partly inside the range (shared with a neighbouring tensor still read) are
  // kept. Returns the bytes dropped. Requires: [p, p + n) inside the mapping.
  size_t drop_resident(const uint8_t* p, size_t n) const;

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pagoda
