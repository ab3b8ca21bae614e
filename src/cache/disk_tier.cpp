#include "cache/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <limits>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <tuple>

#include "cache/crc32c.h"
#include "common/error.h"

namespace pagoda {

namespace {

// Record layout (little-endian), DIR/<hash hex>.kvb:
//   [0, 8)    magic "PGKVBLK1"
//   [8, 12)   u32 format version (2: K of the float KV types stored transposed,
//             kv_k_transposed; a version 1 record is read as corrupt and erased)
//   [12, 16)  u32 n_tokens
//   [16, 24)  u64 payload bytes
//   [24, 56)  the block hash
//   [56, 64)  zero
//   [64, 64 + 4 n_tokens)  tokens, i32
//   payload   the pool slab (PagedKvPool::block_bytes)
//   trailer   u32 CRC-32C of everything before it, u32 "PGKE"
constexpr char kMagic[8] = {'P', 'G', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kVersion = 2;
constexpr size_t kHeaderBytes = 64;
constexpr uint32_t kTrailerMagic = 0x454b4750;  // "PGKE"
constexpr std::string_view kSuffix = ".kvb";
constexpr std::string_view kTmpSuffix = ".kvb.tmp";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t disk_bytes_of(const struct stat& st) { return static_cast<uint64_t>(st.st_blocks) * 512; }

uint64_t disk_bytes_at(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? disk_bytes_of(st) : 0;
}

bool parse_hex_hash(std::string_view s, BlockHash& h) {
  if (s.size() != 64) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    h.bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // x86-64: little-endian
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Reads or writes all of iov (regular files: one call unless interrupted or short).
bool full_io(int fd, struct iovec* iov, int n, size_t total, bool write) {
  size_t done = 0;
  while (done < total) {
    const ssize_t r = write ? ::pwritev(fd, iov, n, static_cast<off_t>(done)) : ::preadv(fd, iov, n, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
    size_t skip = static_cast<size_t>(r);
    while (n > 0 && skip >= iov->iov_len) skip -= iov->iov_len, ++iov, --n;
    if (n > 0) iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + skip, iov->iov_len -= skip;
  }
  return true;
}

}  // namespace

DiskTierConfig::Policy parse_disk_policy(std::string_view text, std::string_view flag) {
  if (text == "evict") return DiskTierConfig::Policy::Evict;
  if (text == "all") return DiskTierConfig::Policy::All;
  throw Error(std::string(flag) + ": expected evict or all, got '" + std::string(text) + "'");
}

const char* disk_policy_name(DiskTierConfig::Policy p) { return p == DiskTierConfig::Policy::All ? "all" : "evict"; }

DiskTier::DiskTier(const DiskTierConfig& config) : config_(config) {
  PAGODA_CHECK(!config_.dir.empty(), "DiskTier: no directory");
  const std::string& dir = config_.dir;
  const std::string what = "--prompt-cache-dir " + dir + ": ";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(what + "cannot create it: " + ec.message());
    ::chmod(dir.c_str(), 0700);
  } else if (!S_ISDIR(st.st_mode)) {
    throw Error(what + "exists and is not a directory");
  }
  const std::string lock_path = dir + "/lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (lock_fd_ < 0) throw Error(what + "not writable: " + std::strerror(errno));
  if (struct stat ls {}; ::fstat(lock_fd_, &ls) != 0 || !S_ISREG(ls.st_mode)) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error(what + lock_path + " is not a regular file");
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (e == EWOULDBLOCK) throw Error(what + "in use by another pagoda process (it holds " + lock_path + ")");
    throw Error(what + "cannot lock " + lock_path + ": " + std::strerror(e));
  }
  // Books what a previous run left, oldest first; .tmp files are writes a kill cut short.
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error(what + "cannot list it: " + std::strerror(errno));
  struct Found {
    int64_t mtime_ns;
    std::string name;
    BlockHash h;
    uint64_t bytes;
  };
  std::vector<Found> found;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    const std::string path = dir + "/" + std::string(name);
    if (name.size() > kTmpSuffix.size() && name.ends_with(kTmpSuffix)) {
      ::unlink(path.c_str());
      continue;
    }
    BlockHash h;
    if (!name.ends_with(kSuffix) || !parse_hex_hash(name.substr(0, name.size() - kSuffix.size()), h)) continue;
    struct stat fs {};
    if (::lstat(path.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode)) continue;  // not a symlink, FIFO, device
    found.push_back({static_cast<int64_t>(fs.st_mtim.tv_sec) * 1'000'000'000 + fs.st_mtim.tv_nsec, std::string(name), h,
                     disk_bytes_of(fs)});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return std::tie(a.mtime_ns, a.name) < std::tie(b.mtime_ns, b.name); });
  for (const Found& f : found) {
    lru_.push_back(f.h);
    records_[f.h] = Record{f.bytes, std::prev(lru_.end())};
    record_bytes_ += f.bytes;
    last_stamp_ns_ = std::max(last_stamp_ns_, f.mtime_ns);
  }
  refresh_dir_bytes();
  make_room(0);
}

DiskTier::~DiskTier() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string DiskTier::path_of(const BlockHash& h) const { return config_.dir + "/" + h.hex() + std::string(kSuffix); }

void DiskTier::refresh_dir_bytes() { dir_bytes_ = disk_bytes_at(config_.dir) + disk_bytes_at(config_.dir + "/lock"); }

void DiskTier::erase(const BlockHash& h) {
  auto it = records_.find(h);
  if (it == records_.end()) return;
  ::unlink(path_of(h).c_str());
  record_bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  records_.erase(it);
  refresh_dir_bytes();
}

bool DiskTier::make_room(uint64_t incoming) {
  if (dir_bytes_ + incoming > config_.capacity_bytes && incoming > 0) return false;  // would not fit even alone
  while (!lru_.empty() && record_bytes_ + dir_bytes_ + incoming > config_.capacity_bytes) {
    erase(lru_.front());
    ++counters_.evictions;
  }
  return record_bytes_ + dir_bytes_ + incoming <= config_.capacity_bytes;
}

std::array<struct timespec, 2> DiskTier::next_stamp() {
  // Strictly increasing mtimes (the file system's clock ticks every few ms, and equal
  // stamps would leave the LRU order after a restart to the names).
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  last_stamp_ns_ = std::max(static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec, last_stamp_ns_ + 1);
  const struct timespec t{static_cast<time_t>(last_stamp_ns_ / 1'000'000'000), static_cast<long>(last_stamp_ns_ % 1'000'000'000)};
  return {t, t};
}

void DiskTier::touch(const BlockHash& h, int fd) {
  auto it = records_.find(h);
  if (it == records_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  const auto times = next_stamp();
  if (fd >= 0) {
    ::futimens(fd, times.data());
  } else {
    ::utimensat(AT_FDCWD, path_of(h).c_str(), times.data(), AT_SYMLINK_NOFOLLOW);
  }
}

bool DiskTier::contains(const BlockHash& h) const {
  std::lock_guard<std::mutex> lk(mu_);
  return records_.count(h) != 0;
}

bool DiskTier::put(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t head_bytes = kHeaderBytes + tokens.size_bytes();
  const size_t file_bytes = head_bytes + payload.size() + 8;
  // The file system's rounding: what st_blocks will say for a file this size (4 KiB blocks).
  const uint64_t predicted = (file_bytes + 4095) / 4096 * 4096;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (records_.count(h)) {
      touch(h, -1);
      return true;
    }
    if (!make_room(predicted)) return false;
  }

  // The record is built and written without the lock (see Threads in the header).
  std::vector<uint8_t> header(head_bytes, 0);
  std::memcpy(header.data(), kMagic, 8);
  put_u32(&header[8], kVersion);
  put_u32(&header[12], static_cast<uint32_t>(tokens.size()));
  put_u64(&header[16], payload.size());
  std::memcpy(&header[24], h.bytes.data(), 32);
  std::memcpy(&header[kHeaderBytes], tokens.data(), tokens.size_bytes());
  uint8_t trailer[8];
  put_u32(trailer, crc32c(payload.data(), payload.size(), crc32c(header.data(), header.size())));
  put_u32(trailer + 4, kTrailerMagic);

  if (config_.test_io_hook) config_.test_io_hook(/*write=*/true);
  const std::string path = path_of(h), tmp = path.substr(0, path.size() - kSuffix.size()) + std::string(kTmpSuffix);
  // A fresh file, never one found in its place (a FIFO there would block the open).
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0;
  if (ok) {
    struct iovec iov[3] = {{header.data(), header.size()},
                           {const_cast<uint8_t*>(payload.data()), payload.size()},
                           {trailer, sizeof trailer}};
    ok = full_io(fd, iov, 3, file_bytes, /*write=*/true);
  }
  std::lock_guard<std::mutex> lk(mu_);
  // Stamped, renamed and booked under the lock: the name appears exactly when the ledger
  // has it, and its mtime is the newest (LRU order == mtime order, invariant 3).
  struct stat st {};
  const bool raced = ok && records_.count(h) != 0;  // another put of the same block won
  if (ok && !raced) ok = ::futimens(fd, next_stamp().data()) == 0 && ::fstat(fd, &st) == 0;
  if (fd >= 0) ::close(fd);
  if (ok && !raced) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok || raced) {
    ::unlink(tmp.c_str());
    if (raced) return true;
    ++counters_.write_errors;
    return false;
  }
  lru_.push_back(h);
  records_[h] = Record{disk_bytes_of(st), std::prev(lru_.end())};
  record_bytes_ += disk_bytes_of(st);
  refresh_dir_bytes();
  ++counters_.writes;
  counters_.written_bytes += payload.size();
  counters_.write_seconds += seconds_since(t0);
  // The prediction is the usual size; if the file system booked more, older records go
  // (and the new one, if it alone is over the cap).
  while (record_bytes_ + dir_bytes_ > config_.capacity_bytes && !lru_.empty()) {
    const bool self = lru_.front() == h;
    erase(lru_.front());
    ++counters_.evictions;
    if (self) return false;
  }
  return true;
}

bool DiskTier::get(const BlockHash& h, std::span<const int32_t> tokens, std::span<uint8_t> payload) {
  if (!contains(h)) return false;
  if (config_.read_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(config_.read_delay_ms));
  if (config_.test_io_hook) config_.test_io_hook(/*write=*/false);
  const auto t0 = std::chrono::steady_clock::now();
  // Opened and read without the lock: a record evicted meanwhile is read from the open
  // file (unlink keeps its inode) or missed at open; either way checked below. O_NONBLOCK:
  // a FIFO in the record's place opens at once (and fails the S_ISREG check) instead of
  // waiting for a writer; regular files ignore it.
  const std::string path = path_of(h);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {  // deleted behind our back: forget it
    std::lock_guard<std::mutex> lk(mu_);
    erase(h);
    return false;
  }
  const size_t head_bytes = kHeaderBytes + tokens.size_bytes();
  const size_t file_bytes = head_bytes + payload.size() + 8;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) == file_bytes;
  uint8_t trailer[8];
  std::vector<uint8_t> header(head_bytes);
  if (ok) {
    struct iovec iov[3] = {{header.data(), head_bytes}, {payload.data(), payload.size()}, {trailer, sizeof trailer}};
    ok = full_io(fd, iov, 3, file_bytes, /*write=*/false);
  }
  ok = ok && std::memcmp(header.data(), kMagic, 8) == 0 && get_u32(&header[8]) == kVersion &&
       get_u32(&header[12]) == tokens.size() && get_u64(&header[16]) == payload.size() &&
       std::memcmp(&header[24], h.bytes.data(), 32) == 0 &&
       std::memcmp(&header[kHeaderBytes], tokens.data(), tokens.size_bytes()) == 0 &&
       get_u32(trailer + 4) == kTrailerMagic &&
       get_u32(trailer) == crc32c(payload.data(), payload.size(), crc32c(header.data(), head_bytes));
  std::lock_guard<std::mutex> lk(mu_);
  if (!ok) {
    ::close(fd);
    erase(h);
    ++counters_.corrupt;
    return false;
  }
  touch(h, fd);  // a no-op when it was evicted meanwhile: the bytes read are still its own
  ::close(fd);
  ++counters_.reads;
  counters_.read_bytes += payload.size();
  counters_.read_seconds += seconds_since(t0);
  return true;
}

void DiskTier::count_hit(int64_t tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  ++counters_.hits;
  counters_.hit_tokens += tokens;
}

void DiskTier::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!lru_.empty()) erase(lru_.front());
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  DiskTierStats s = counters_;
  s.enabled = true;
  s.blocks = static_cast<int64_t>(records_.size());
  s.bytes = record_bytes_ + dir_bytes_;
  s.capacity_bytes = config_.capacity_bytes;
  return s;
}

std::vector<BlockHash> DiskTier::lru_order() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {lru_.begin(), lru_.end()};
}

uint64_t DiskTier::recount_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t total = disk_bytes_at(config_.dir) + disk_bytes_at(config_.dir + "/lock");
  for (const auto& [h, r] : records_) total += disk_bytes_at(path_of(h));
  return total;
}

void DiskTier::check_invariants() const {
  std::lock_guard<std::mutex> lk(mu_);
  PAGODA_CHECK(records_.size() == lru_.size(), "DiskTier: records and LRU list differ in size");
  uint64_t sum = 0;
  int64_t prev_ns = std::numeric_limits<int64_t>::min();
  for (const BlockHash& h : lru_) {
    auto it = records_.find(h);
    PAGODA_CHECK(it != records_.end() && *it->second.lru == h, "DiskTier: LRU entry without its record");
    struct stat st {};
    PAGODA_CHECK(::stat(path_of(h).c_str(), &st) == 0, "DiskTier: record file " + path_of(h) + " is missing");
    PAGODA_CHECK(disk_bytes_of(st) == it->second.bytes, "DiskTier: record " + h.hex() + " booked at the wrong size");
    const int64_t ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    PAGODA_CHECK(ns >= prev_ns, "DiskTier: LRU order disagrees with the files' mtimes at " + h.hex());
    prev_ns = ns;
    sum += it->second.bytes;
  }
  PAGODA_CHECK(sum == record_bytes_, "DiskTier: record bytes drifted");
  PAGODA_CHECK(record_bytes_ + dir_bytes_ <= config_.capacity_bytes || records_.empty(),
               "DiskTier: bytes above the capacity");
}

}  // namespace pagoda
