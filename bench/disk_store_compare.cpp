// disk_store_compare — the measurement behind the prefix cache's disk tier's storage
// choice (docs/cache.md, "The disk tier"): one file per block (write to a
// temporary name, rename) against LMDB (one put per block, one transaction each),
// for blocks of the TinyLlama-1.1B shape (32 tokens × 22 layers × 4 KV heads × 64 × 2
// (K, V) × f16 = 720,896 bytes).
//
//   disk_store_compare DIR [n_blocks=400] [block_bytes=720896]
//
// Prints write and read GB/s (warm: from the page cache; cold: after
// posix_fadvise(DONTNEED) on every file), then kills a writer child with SIGKILL
// mid-way, reopens, and counts records whose bytes are intact, torn or missing.
// Built only where liblmdb is found (bench/CMakeLists.txt); pagoda itself does not link it.
#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void fill(std::vector<uint8_t>& buf, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    std::memcpy(&buf[i], &x, 4);
  }
}

bool intact(const uint8_t* p, size_t n, uint32_t seed, std::vector<uint8_t>& scratch) {
  scratch.resize(n);
  fill(scratch, seed);
  return std::memcmp(p, scratch.data(), n) == 0;
}

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

std::string file_of(const std::string& dir, int i) { return dir + "/b" + std::to_string(i) + ".blk"; }

void files_write(const std::string& dir, int n, size_t bytes, bool forever) {
  std::vector<uint8_t> buf(bytes);
  for (int i = 0; forever || i < n; ++i) {
    fill(buf, static_cast<uint32_t>(i % n));
    const std::string tmp = file_of(dir, i % n) + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("open");
    if (::write(fd, buf.data(), bytes) != static_cast<ssize_t>(bytes)) die("write");
    ::close(fd);
    if (::rename(tmp.c_str(), file_of(dir, i % n).c_str()) != 0) die("rename");
  }
}

double files_read(const std::string& dir, int n, size_t bytes, bool cold, int* bad) {
  std::vector<uint8_t> buf(bytes), scratch;
  if (cold) ::sync();  // DONTNEED drops clean pages only
  if (cold)
    for (int i = 0; i < n; ++i) {
      const int fd = ::open(file_of(dir, i).c_str(), O_RDONLY);
      if (fd >= 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), ::close(fd);
    }
  const double t0 = now_s();
  for (int i = 0; i < n; ++i) {
    const int fd = ::open(file_of(dir, i).c_str(), O_RDONLY);
    if (fd < 0) die("open for read");
    if (::pread(fd, buf.data(), bytes, 0) != static_cast<ssize_t>(bytes)) die("pread");
    ::close(fd);
  }
  const double t = now_s() - t0;
  *bad = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = ::open(file_of(dir, i).c_str(), O_RDONLY);
    if (fd < 0 || ::pread(fd, buf.data(), bytes, 0) != static_cast<ssize_t>(bytes) ||
        !intact(buf.data(), bytes, static_cast<uint32_t>(i), scratch))
      ++*bad;
    if (fd >= 0) ::close(fd);
  }
  return t;
}

struct Lmdb {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  explicit Lmdb(const std::string& dir, size_t map_bytes) {
    if (mdb_env_create(&env) || mdb_env_set_mapsize(env, map_bytes) ||
        mdb_env_open(env, dir.c_str(), MDB_NOSYNC, 0600))
      die("mdb_env_open");
    MDB_txn* txn;
    mdb_txn_begin(env, nullptr, 0, &txn);
    mdb_dbi_open(txn, nullptr, 0, &dbi);
    mdb_txn_commit(txn);
  }
  ~Lmdb() { mdb_env_close(env); }
};

void lmdb_write(const std::string& dir, int n, size_t bytes, bool forever) {
  Lmdb db(dir, static_cast<size_t>(n + 64) * (bytes + 8192) * 2);
  std::vector<uint8_t> buf(bytes);
  for (int i = 0; forever || i < n; ++i) {
    fill(buf, static_cast<uint32_t>(i % n));
    uint32_t k = static_cast<uint32_t>(i % n);
    MDB_val key{sizeof k, &k}, val{bytes, buf.data()};
    MDB_txn* txn;
    if (mdb_txn_begin(db.env, nullptr, 0, &txn) || mdb_put(txn, db.dbi, &key, &val, 0) || mdb_txn_commit(txn))
      die("mdb_put");
  }
}

double lmdb_read(const std::string& dir, int n, size_t bytes, bool cold, int* bad, int* missing) {
  if (cold) {
    ::sync();
    const int fd = ::open((dir + "/data.mdb").c_str(), O_RDONLY);
    if (fd >= 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), ::close(fd);
  }
  Lmdb db(dir, static_cast<size_t>(n + 64) * (bytes + 8192) * 2);
  std::vector<uint8_t> buf(bytes), scratch;
  *bad = *missing = 0;
  const double t0 = now_s();
  MDB_txn* txn;
  mdb_txn_begin(db.env, nullptr, MDB_RDONLY, &txn);
  for (int i = 0; i < n; ++i) {
    uint32_t k = static_cast<uint32_t>(i);
    MDB_val key{sizeof k, &k}, val;
    if (mdb_get(txn, db.dbi, &key, &val) != 0) {
      ++*missing;
      continue;
    }
    if (val.mv_size != bytes) {
      ++*bad;
      continue;
    }
    std::memcpy(buf.data(), val.mv_data, bytes);  // into the pool block, as a restore would
  }
  const double t = now_s() - t0;
  for (int i = 0; i < n; ++i) {
    uint32_t k = static_cast<uint32_t>(i);
    MDB_val key{sizeof k, &k}, val;
    if (mdb_get(txn, db.dbi, &key, &val) == 0 && val.mv_size == bytes &&
        !intact(static_cast<const uint8_t*>(val.mv_data), bytes, static_cast<uint32_t>(i), scratch))
      ++*bad;
  }
  mdb_txn_abort(txn);
  return t;
}

uint64_t du(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: disk_store_compare DIR [n_blocks] [block_bytes]\n");
    return 2;
  }
  const std::string root = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 400;
  const size_t bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 720896;
  const double gb = static_cast<double>(n) * static_cast<double>(bytes) / 1e9;
  for (const char* kind : {"files", "lmdb"}) {
    const std::string dir = root + "/" + kind;
    std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
    const bool files = kind[0] == 'f';
    double t0 = now_s();
    if (files) files_write(dir, n, bytes, false); else lmdb_write(dir, n, bytes, false);
    const double tw = now_s() - t0;
    int bad = 0, missing = 0;
    const double warm = files ? files_read(dir, n, bytes, false, &bad) : lmdb_read(dir, n, bytes, false, &bad, &missing);
    const double cold = files ? files_read(dir, n, bytes, true, &bad) : lmdb_read(dir, n, bytes, true, &bad, &missing);
    uint64_t disk = 0;
    if (files) {
      for (int i = 0; i < n; ++i) disk += du(file_of(dir, i));
      disk += du(dir);
    } else {
      disk = du(dir + "/data.mdb") + du(dir + "/lock.mdb") + du(dir);
    }
    std::printf("%-5s %d blocks of %zu B: write %.2f GB/s, read warm %.2f GB/s, cold %.2f GB/s, "
                "on disk %.4f x payload, bad %d\n",
                kind, n, bytes, gb / tw, gb / warm, gb / cold, static_cast<double>(disk) / (gb * 1e9), bad);
    // Crash: a child rewrites the blocks forever; SIGKILL it after 300 ms, reopen, verify.
    for (int round = 0; round < 5; ++round) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        if (files) files_write(dir, n, bytes, true); else lmdb_write(dir, n, bytes, true);
        _exit(0);
      }
      ::usleep(300000 + 37000 * round);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      bad = missing = 0;
      if (files) files_read(dir, n, bytes, false, &bad); else lmdb_read(dir, n, bytes, false, &bad, &missing);
      std::printf("  kill -9 round %d: %d torn, %d missing of %d\n", round, bad, missing, n);
    }
  }
  return 0;
}
