// The prefix cache's disk tier: CRC-32C against its table-driven reference and the
// standard check value; records round-trip, are 0600 in a 0700 directory, and a torn,
// flipped or truncated record is a miss (and deleted); the ledger equals a recount of
// the real bytes on disk and never exceeds the cap; LRU order exact (and across a
// reopen); a bad directory is a one-line error; and through PrefixCache: blocks evicted
// from RAM come back token-exact, a RAM chain continues on disk, another namespace or
// KV type never hits, a restart finds the blocks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "temp_dir.h"
#include "cache/crc32c.h"
#include "cache/disk_tier.h"
#include "cache_harness.h"
#include "common/error.h"

namespace pagoda {
namespace {

using testing::concat;
using testing::Harness;
using testing::Request;
using testing::tokens;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pagoda_disk_tier_test") {}
};

DiskTierConfig config_of(const std::string& dir, uint64_t capacity = 1ull << 30,
                         DiskTierConfig::Policy policy = DiskTierConfig::Policy::Evict) {
  DiskTierConfig c;
  c.dir = dir;
  c.capacity_bytes = capacity;
  c.policy = policy;
  return c;
}

BlockHash hash_of(int i) { return block_hash(BlockHash{}, std::vector<int32_t>{i}); }

std::vector<uint8_t> payload_of(int i, size_t n = 10000) {
  std::vector<uint8_t> p(n);
  std::mt19937 rng(static_cast<uint32_t>(i));
  for (auto& b : p) b = static_cast<uint8_t>(rng());
  return p;
}

const std::vector<int32_t> kToks = {1, 2, 3, 4, 5, 6, 7, 8};

std::string file_of(const DiskTier& d, const BlockHash& h) { return d.config().dir + "/" + h.hex() + ".kvb"; }

// ---- CRC-32C ---------------------------------------------------------------------------------

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_scalar("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, FastPathEqualsTheReferenceForEverySizeAndSplit) {
  std::vector<uint8_t> buf(300);
  std::mt19937 rng(7);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n = 0; n <= buf.size(); n += (n < 40 ? 1 : 13)) {
    const uint32_t ref = crc32c_scalar(buf.data(), n);
    ASSERT_EQ(crc32c(buf.data(), n), ref) << "n=" << n;
    for (size_t cut : {size_t{0}, n / 3, n / 2, n}) {
      ASSERT_EQ(crc32c(buf.data() + cut, n - cut, crc32c(buf.data(), cut)), ref) << "n=" << n << " cut=" << cut;
    }
  }
}

// ---- records ----------------------------------------------------------------------------------

TEST(DiskTier, RecordRoundTripsWithPrivatePermissions) {
  TempDir dir;
  DiskTier d(config_of(dir.path));
  const auto p = payload_of(1);
  ASSERT_TRUE(d.put(hash_of(1), kToks, p));
  std::vector<uint8_t> back(p.size());
  ASSERT_TRUE(d.get(hash_of(1), kToks, back));
  EXPECT_EQ(back, p);
  struct stat st {};
  ASSERT_EQ(::stat(file_of(d, hash_of(1)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(d.get(hash_of(2), kToks, back));  // never written
  const DiskTierStats s = d.stats();
  EXPECT_EQ(s.writes, 1);
  EXPECT_EQ(s.reads, 1);
  EXPECT_EQ(s.read_bytes, p.size());
  d.check_invariants();
}

// A FIFO (or a symlink) put in a record's place — what a hung NFS / FUSE mount does to a
// read, on a local disk — is refused at open, at once, as a corrupt record: never waited on.
TEST(DiskTier, AFifoOrSymlinkInARecordsPlaceIsAMissAtOnceNotAHang) {
  TempDir dir;
  DiskTier d(config_of(dir.path));
  ASSERT_TRUE(d.put(hash_of(1), kToks, payload_of(1)));
  ASSERT_TRUE(d.put(hash_of(2), kToks, payload_of(2)));
  const std::string fifo = file_of(d, hash_of(1)), link = file_of(d, hash_of(2));
  ASSERT_EQ(::unlink(fifo.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string target = dir.path + "/elsewhere";
  { std::ofstream(target) << "x"; }
  ASSERT_EQ(::unlink(link.c_str()), 0);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  std::vector<uint8_t> back(10000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(d.get(hash_of(1), kToks, back));
  EXPECT_FALSE(d.get(hash_of(2), kToks, back));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(d.stats().blocks, 0);
  struct stat st {};
  EXPECT_NE(::lstat(fifo.c_str(), &st), 0) << "the FIFO was left in the directory";
  EXPECT_EQ(::stat(target.c_str(), &st), 0) << "the symlink's target was deleted";
  d.check_invariants();
}

TEST(DiskTier, AFifoOrSymlinkFoundAtStartupIsNotBookedAndAFifoAtTheTmpNameDoesNotBlockAWrite) {
  TempDir dir;
  const BlockHash h1 = hash_of(1), h2 = hash_of(2);
  {
    DiskTier d(config_of(dir.path));
    ASSERT_TRUE(d.put(h1, kToks, payload_of(1)));
  }
  const std::string fifo = dir.path + "/" + h2.hex() + ".kvb";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = dir.path + "/" + hash_of(3).hex() + ".kvb";
  ASSERT_EQ(::symlink((dir.path + "/" + h1.hex() + ".kvb").c_str(), link.c_str()), 0);
  DiskTier d(config_of(dir.path));
  EXPECT_EQ(d.stats().blocks, 1);
  EXPECT_FALSE(d.contains(h2));
  EXPECT_FALSE(d.contains(hash_of(3)));
  // A FIFO at the name a write goes through first: replaced, not opened for writing
  // (which would wait for a reader forever).
  const std::string tmp = dir.path + "/" + hash_of(4).hex() + ".kvb.tmp";
  ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
  EXPECT_TRUE(d.put(hash_of(4), kToks, payload_of(4)));
  std::vector<uint8_t> back(10000);
  EXPECT_TRUE(d.get(hash_of(4), kToks, back));
  EXPECT_EQ(back, payload_of(4));
}

TEST(DiskTier, WrongSizeOrTokensIsAMiss) {
  TempDir dir;
  DiskTier d(config_of(dir.path));
  ASSERT_TRUE(d.put(hash_of(1), kToks, payload_of(1)));
  std::vector<uint8_t> bigger(10001);
  EXPECT_FALSE(d.get(hash_of(1), kToks, bigger));  // another block size / KV type: a miss
  ASSERT_TRUE(d.put(hash_of(2), kToks, payload_of(2)));
  std::vector<uint8_t> back(10000);
  std::vector<int32_t> other = kToks;
  other[3] = 99;
  EXPECT_FALSE(d.get(hash_of(2), other, back));
  EXPECT_EQ(d.stats().corrupt, 2);
  d.check_invariants();
}

TEST(DiskTier, FlippedByteIsAMissAndTheRecordIsDeleted) {
  // A flip in the header, the tokens, the payload and the trailer: each a miss.
  for (off_t at : {off_t{30}, off_t{64 + 5}, off_t{64 + 32 + 5000}, off_t{64 + 32 + 10000 + 1}}) {
    TempDir dir;
    DiskTier d(config_of(dir.path));
    ASSERT_TRUE(d.put(hash_of(1), kToks, payload_of(1)));
    const std::string f = file_of(d, hash_of(1));
    const int fd = ::open(f.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::close(fd);
    std::vector<uint8_t> back(10000);
    EXPECT_FALSE(d.get(hash_of(1), kToks, back)) << "flip at " << at;
    EXPECT_EQ(d.stats().corrupt, 1);
    EXPECT_FALSE(std::filesystem::exists(f));
    EXPECT_FALSE(d.contains(hash_of(1)));
    d.check_invariants();
  }
}

TEST(DiskTier, TornRecordFoundAtOpenIsAMiss) {
  // A record cut short (what a power loss after the rename could leave) in a previous run.
  TempDir dir;
  {
    DiskTier d(config_of(dir.path));
    ASSERT_TRUE(d.put(hash_of(1), kToks, payload_of(1)));
    ASSERT_TRUE(d.put(hash_of(2), kToks, payload_of(2)));
    ASSERT_EQ(::truncate(file_of(d, hash_of(1)).c_str(), 5000), 0);
  }
  DiskTier d(config_of(dir.path));
  EXPECT_EQ(d.stats().blocks, 2);
  std::vector<uint8_t> back(10000);
  EXPECT_FALSE(d.get(hash_of(1), kToks, back));
  EXPECT_TRUE(d.get(hash_of(2), kToks, back));
  EXPECT_EQ(back, payload_of(2));
  EXPECT_EQ(d.stats().corrupt, 1);
  EXPECT_EQ(d.stats().bytes, d.recount_bytes());
  d.check_invariants();
}

TEST(DiskTier, LeftoverTemporaryFilesAreDeletedAtOpen) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  const std::string tmp = dir.path + "/" + hash_of(1).hex() + ".kvb.tmp";
  std::ofstream(tmp) << "half a record";
  const std::string foreign = dir.path + "/notes.txt";
  std::ofstream(foreign) << "not ours";
  DiskTier d(config_of(dir.path));
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_TRUE(std::filesystem::exists(foreign));  // not ours: left alone, not booked
  EXPECT_EQ(d.stats().blocks, 0);
}

TEST(DiskTier, WriterKilledMidWriteLeavesOnlyIntactRecords) {
  // A child process writes records as fast as it can (64 distinct hashes over and over,
  // evicting under a small cap) and is killed with SIGKILL at varied moments; each reopen
  // must find only records that read back byte-exact, and no .tmp leftovers.
  TempDir dir;
  std::mt19937 rng(11);
  int64_t seen = 0;
  for (int round = 0; round < 12; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        DiskTier d(config_of(dir.path, 40 * 12288));
        for (int i = 0;; ++i) d.put(hash_of(i % 64), kToks, payload_of(i % 64));
      } catch (...) {
      }
      ::_exit(3);
    }
    ::usleep(20000 + static_cast<useconds_t>(rng() % 60000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited on its own (status " << status << ")";
    DiskTier d(config_of(dir.path, 40 * 12288));
    int n_tmp = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) n_tmp += e.path().string().ends_with(".tmp");
    EXPECT_EQ(n_tmp, 0);
    std::vector<uint8_t> back(10000);
    for (int i = 0; i < 64; ++i) {
      if (!d.contains(hash_of(i))) continue;
      ASSERT_TRUE(d.get(hash_of(i), kToks, back)) << "round " << round << " record " << i;
      ASSERT_EQ(back, payload_of(i));
      ++seen;
    }
    EXPECT_EQ(d.stats().corrupt, 0);
    EXPECT_EQ(d.stats().bytes, d.recount_bytes());
    d.check_invariants();
  }
  EXPECT_GT(seen, 0);
}

// ---- ledger, cap, LRU ----------------------------------------------------------------------

TEST(DiskTier, LedgerIsTheRealBytesOnDisk) {
  TempDir dir;
  DiskTier d(config_of(dir.path));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(d.put(hash_of(i), kToks, payload_of(i, 1000 + 3000 * static_cast<size_t>(i))));
  EXPECT_EQ(d.stats().bytes, d.recount_bytes());
  uint64_t du = 0;  // an independent recount: every file and the directory
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    struct stat st {};
    ::stat(e.path().c_str(), &st);
    du += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  struct stat st {};
  ::stat(dir.path.c_str(), &st);
  du += static_cast<uint64_t>(st.st_blocks) * 512;
  EXPECT_EQ(d.stats().bytes, du);
  d.check_invariants();
}

TEST(DiskTier, CapIsExactAndEvictsLeastRecentlyUsedFirst) {
  TempDir dir;
  // Measure one record's and the empty tier's real bytes, then cap at exactly 3 records.
  uint64_t empty_bytes, record_bytes;
  {
    TempDir probe;
    DiskTier p(config_of(probe.path));
    empty_bytes = p.stats().bytes;
    ASSERT_TRUE(p.put(hash_of(0), kToks, payload_of(0)));
    record_bytes = p.stats().bytes - empty_bytes;
  }
  DiskTier d(config_of(dir.path, empty_bytes + 3 * record_bytes));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d.put(hash_of(i), kToks, payload_of(i)));
  EXPECT_EQ(d.stats().blocks, 3);
  EXPECT_EQ(d.stats().evictions, 0);
  std::vector<uint8_t> back(10000);
  ASSERT_TRUE(d.get(hash_of(0), kToks, back));  // 0 is now the most recently used
  ASSERT_TRUE(d.put(hash_of(3), kToks, payload_of(3)));
  EXPECT_EQ(d.lru_order(), (std::vector<BlockHash>{hash_of(2), hash_of(0), hash_of(3)}));  // 1 went
  EXPECT_FALSE(d.contains(hash_of(1)));
  ASSERT_TRUE(d.put(hash_of(2), kToks, payload_of(2)));  // already there: only used
  ASSERT_TRUE(d.put(hash_of(4), kToks, payload_of(4)));
  EXPECT_EQ(d.lru_order(), (std::vector<BlockHash>{hash_of(3), hash_of(2), hash_of(4)}));  // 0 went
  const DiskTierStats s = d.stats();
  EXPECT_EQ(s.evictions, 2);
  EXPECT_EQ(s.writes, 5);
  EXPECT_EQ(s.bytes, d.recount_bytes());
  EXPECT_LE(s.bytes, s.capacity_bytes);
  d.check_invariants();
  // A record larger than the whole cap is not kept (and evicts nothing).
  EXPECT_FALSE(d.put(hash_of(9), kToks, payload_of(9, 100000)));
  EXPECT_EQ(d.stats().blocks, 3);
}

TEST(DiskTier, LruOrderAndLedgerSurviveAReopen) {
  TempDir dir;
  {
    DiskTier d(config_of(dir.path));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(d.put(hash_of(i), kToks, payload_of(i)));
    std::vector<uint8_t> back(10000);
    ASSERT_TRUE(d.get(hash_of(1), kToks, back));
    ASSERT_TRUE(d.get(hash_of(0), kToks, back));
  }
  DiskTier d(config_of(dir.path));
  EXPECT_EQ(d.lru_order(), (std::vector<BlockHash>{hash_of(2), hash_of(3), hash_of(1), hash_of(0)}));
  EXPECT_EQ(d.stats().bytes, d.recount_bytes());
  d.check_invariants();
}

TEST(DiskTier, ReopenWithASmallerCapEvictsTheOldest) {
  TempDir dir;
  uint64_t empty_bytes, record_bytes;
  {
    DiskTier d(config_of(dir.path));
    empty_bytes = d.stats().bytes;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(d.put(hash_of(i), kToks, payload_of(i)));
    record_bytes = (d.stats().bytes - empty_bytes) / 4;
  }
  DiskTier d(config_of(dir.path, empty_bytes + 2 * record_bytes));
  EXPECT_EQ(d.lru_order(), (std::vector<BlockHash>{hash_of(2), hash_of(3)}));
  EXPECT_EQ(d.stats().evictions, 2);
  d.check_invariants();
}

TEST(DiskTier, ResetDeletesEveryRecord) {
  TempDir dir;
  DiskTier d(config_of(dir.path));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d.put(hash_of(i), kToks, payload_of(i)));
  d.reset();
  EXPECT_EQ(d.stats().blocks, 0);
  EXPECT_EQ(d.stats().bytes, d.recount_bytes());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(std::filesystem::exists(file_of(d, hash_of(i))));
}

// ---- bad directories ------------------------------------------------------------------------

std::string error_of(const DiskTierConfig& c) {
  try {
    DiskTier d(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DiskTier, BadDirectoryIsAOneLineError) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  const std::string file = dir.path + "/a-file";
  std::ofstream(file) << "x";
  std::string e = error_of(config_of(file));
  EXPECT_NE(e.find("--prompt-cache-dir " + file + ": exists and is not a directory"), std::string::npos) << e;
  e = error_of(config_of(file + "/sub"));
  EXPECT_NE(e.find("cannot create it"), std::string::npos) << e;
  e = error_of(config_of("/proc/pagoda-disk-tier"));  // not writable, even for root
  EXPECT_NE(e.find("--prompt-cache-dir /proc/pagoda-disk-tier: "), std::string::npos) << e;
  e = error_of(config_of("/proc/self"));  // a directory nobody can create files in
  EXPECT_NE(e.find("not writable"), std::string::npos) << e;
  for (const std::string& m : {error_of(config_of(file)), error_of(config_of("/proc/self"))})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(DiskTier, SecondOpenOfOneDirectoryIsRefused) {
  TempDir dir;
  DiskTier first(config_of(dir.path));
  const std::string e = error_of(config_of(dir.path));
  EXPECT_NE(e.find("in use by another pagoda process"), std::string::npos) << e;
}

TEST(DiskTier, ParsesThePolicy) {
  EXPECT_EQ(parse_disk_policy("evict"), DiskTierConfig::Policy::Evict);
  EXPECT_EQ(parse_disk_policy("all"), DiskTierConfig::Policy::All);
  EXPECT_THROW(parse_disk_policy("sometimes"), Error);
}

// ---- through the prefix cache -------------------------------------------------------------

constexpr int kBs = 8;

// A harness whose cache spills to `disk`; capacity_bytes 0 evicts every released block.
struct DiskHarness {
  DiskHarness(const std::string& dir, int64_t n_blocks, uint64_t ram_capacity,
              DiskTierConfig::Policy policy = DiskTierConfig::Policy::Evict)
      : disk(config_of(dir, 1ull << 30, policy)), h(kBs, n_blocks, [&] {
          PrefixCacheConfig c;
          c.capacity_bytes = ram_capacity;
          return c;
        }()) {
    h.cache.set_disk_tier(&disk);
  }
  ~DiskHarness() { h.cache.set_disk_tier(nullptr); }
  void check() {
    h.check();
    disk.check_invariants();
  }
  DiskTier disk;
  Harness h;
};

TEST(PrefixCacheDisk, EvictedBlocksComeBackTokenExact) {
  TempDir dir;
  DiskHarness t(dir.path, 32, /*ram_capacity=*/0);
  Request a = t.h.admit(tokens(44, 100));  // 5 full blocks + 4 tokens
  t.h.finish(a);
  t.check();
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 0);  // nothing kept in RAM...
  EXPECT_EQ(t.disk.stats().blocks, 5);            // ...the full blocks went to disk
  Request b = t.h.admit(concat(tokens(44, 100), tokens(5, 9000)));
  EXPECT_EQ(b.cached_tokens, 40);  // the full blocks; the partial tail has no hash to find
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  const DiskTierStats s = t.disk.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.hit_tokens, 40);
  EXPECT_EQ(s.reads, 5);
  t.check();
  t.h.drop(b);
  t.check();
}

TEST(PrefixCacheDisk, RamChainContinuesOnDisk) {
  TempDir dir;
  DiskHarness t(dir.path, 8, PrefixCacheConfig::kUnlimitedBytes);
  Request a = t.h.admit(tokens(40, 100));  // 5 blocks, cached in RAM
  t.h.finish(a);
  // Pool pressure: 5 blocks for another prompt; 3 come free + 2 evicted, the chain's tail first.
  Request other = t.h.admit(tokens(40, 5000));
  t.h.drop(other);
  EXPECT_EQ(t.disk.stats().writes, 2);
  t.check();
  Request b = t.h.admit(concat(tokens(40, 100), tokens(3, 9000)));
  EXPECT_EQ(b.cached_tokens, 40);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  EXPECT_EQ(t.disk.stats().hit_tokens, 16);  // 3 blocks from RAM, 2 from disk
  t.check();
  t.h.drop(b);
}

TEST(PrefixCacheDisk, WriteThroughStoresEveryFullBlockWhenIndexed) {
  TempDir dir;
  DiskHarness t(dir.path, 32, PrefixCacheConfig::kUnlimitedBytes, DiskTierConfig::Policy::All);
  Request a = t.h.admit(tokens(30, 100));
  t.h.finish(a);
  EXPECT_EQ(t.disk.stats().writes, 3);
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 4);  // and RAM keeps them (3 full + the tail)
  t.h.cache.reset(CacheTier::Ram);
  Request b = t.h.admit(tokens(30, 100));
  EXPECT_EQ(b.cached_tokens, 24);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  t.check();
  t.h.drop(b);
  t.h.cache.reset(CacheTier::Disk);
  EXPECT_EQ(t.disk.stats().blocks, 0);
  EXPECT_EQ(t.h.cache.stats().cached_blocks, 3);  // the disk reset left RAM alone (b's restored blocks)
}

TEST(PrefixCacheDisk, AnotherNamespaceNeverHits) {
  TempDir dir;
  DiskHarness t(dir.path, 32, 0);
  Request a = t.h.admit(tokens(32, 100), t.h.cache.key("tenant-a"));
  t.h.finish(a);
  ASSERT_EQ(t.disk.stats().blocks, 4);
  Request b = t.h.admit(tokens(32, 100), t.h.cache.key("tenant-b"));
  EXPECT_EQ(b.cached_tokens, 0);
  t.h.drop(b);
  // Another model id on the same directory: a miss too.
  t.h.cache.set_disk_tier(nullptr);
  PagedKvPool pool(testing::kTinyGeo, testing::tiny_config(kBs, 32));
  PrefixCache other(pool, "another-model");
  other.set_disk_tier(&t.disk);
  const std::vector<int32_t> p = tokens(32, 100);
  CacheHit hit = other.lookup(other.key("tenant-a"), p);
  EXPECT_EQ(hit.cached_tokens, 0);
  pool.free(hit.table);
  other.set_disk_tier(nullptr);
  EXPECT_EQ(t.disk.stats().reads, 0);
}

TEST(PrefixCacheDisk, AnotherKvTypeNeverHits) {
  TempDir dir;
  DiskTier disk(config_of(dir.path));
  const std::vector<int32_t> p = tokens(17, 100);
  auto run = [&](KvType type) {
    KvConfig c;
    c.block_size = kBs;
    c.k_type = c.v_type = type;
    c.budget_bytes = 1 << 20;
    PagedKvPool pool(testing::kTinyGeo, c);
    PrefixCache cache(pool, "test-model", [] {
      PrefixCacheConfig cc;
      cc.capacity_bytes = 0;
      return cc;
    }());
    cache.set_disk_tier(&disk);
    CacheHit hit = cache.lookup(cache.key(), p);
    const int64_t cached = hit.cached_tokens;
    BlockTable t = std::move(hit.table);
    EXPECT_TRUE(pool.append_tokens(t, static_cast<int64_t>(p.size()) - cached).ok());
    float k[8] = {1}, v[8] = {2};
    for (int64_t pos = cached; pos < static_cast<int64_t>(p.size()); ++pos) pool.write_token(t, 0, pos, k, v);
    cache.insert(cache.key(), p, t, true);
    pool.free(t);
    cache.set_disk_tier(nullptr);
    return cached;
  };
  EXPECT_EQ(run(KvType::F16), 0);
  EXPECT_EQ(disk.stats().blocks, 2);
  EXPECT_EQ(run(KvType::F32), 0);  // same tokens, same model: another KV type misses
  EXPECT_EQ(run(KvType::F16), 16);  // and the first type still hits
}

TEST(PrefixCacheDisk, ARestartFindsTheBlocks) {
  TempDir dir;
  {
    DiskHarness t(dir.path, 32, PrefixCacheConfig::kUnlimitedBytes);
    Request a = t.h.admit(tokens(40, 100));
    t.h.finish(a);
    EXPECT_EQ(t.disk.stats().blocks, 0);  // policy evict: nothing evicted yet
    t.h.cache.flush_to_disk();            // what a clean shutdown does
    EXPECT_EQ(t.disk.stats().blocks, 5);
  }
  DiskHarness t(dir.path, 32, PrefixCacheConfig::kUnlimitedBytes);
  Request b = t.h.admit(tokens(41, 100));
  EXPECT_EQ(b.cached_tokens, 40);
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  t.check();
  t.h.drop(b);
}

TEST(PrefixCacheDisk, CorruptBlockCutsTheHitThere) {
  TempDir dir;
  DiskHarness t(dir.path, 32, 0);
  Request a = t.h.admit(tokens(40, 100));
  t.h.finish(a);
  // Corrupt the third block's record by hand.
  BlockHash h = t.h.cache.key().ns;
  const auto all = tokens(40, 100);
  for (int i = 0; i < 3; ++i) h = block_hash(h, std::span<const int32_t>(all.data() + i * kBs, kBs));
  const std::string f = dir.path + "/" + h.hex() + ".kvb";
  ASSERT_TRUE(std::filesystem::exists(f));
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(200);
    io.put('\x5a');
  }
  Request b = t.h.admit(concat(all, tokens(2, 9000)));
  EXPECT_EQ(b.cached_tokens, 16);  // blocks 0 and 1; block 2 failed its checksum
  EXPECT_TRUE(t.h.holds_its_tokens(b));
  EXPECT_EQ(t.disk.stats().corrupt, 1);
  t.check();
  t.h.drop(b);
}

TEST(PrefixCacheDisk, RestoreUnderPoolPressureKeepsInvariants) {
  // A pool barely larger than the prompt: restoring blocks evicts others (spilled), and
  // the restored chain stays consistent.
  TempDir dir;
  DiskHarness t(dir.path, 7, PrefixCacheConfig::kUnlimitedBytes);
  for (int round = 0; round < 6; ++round) {
    Request a = t.h.admit(tokens(40, 100 + 1000 * (round % 3)));
    EXPECT_TRUE(t.h.holds_its_tokens(a));
    if (round >= 3) {
      EXPECT_EQ(a.cached_tokens, 39) << round;
    }
    t.h.finish(a);
    t.check();
  }
}

}  // namespace
}  // namespace pagoda
