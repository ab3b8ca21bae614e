// ResponsesStore: LRU order, max entries, TTL and erase, on a store small enough that
// the surviving ids can be worked out by hand; the clock is stepped by the test.
#include <gtest/gtest.h>

#include <malloc.h>

#include "common/process_memory.h"
#include "sanitizer_sampling.h"
#include "server/responses_store.h"

namespace pagoda::server {
namespace {

using Entry = ResponsesStore::Entry;

Entry entry(const std::string& tag) { return Entry{{{"id", tag}}, nlohmann::ordered_json::array({tag})}; }

struct Clocked {
  int64_t now = 1000;
  ResponsesStore::Clock clock() {
    return [this] { return now; };
  }
};

TEST(ResponsesStore, EvictsLeastRecentlyUsedBeyondMaxEntries) {
  Clocked c;
  ResponsesStore s(3, 0, UINT64_MAX, c.clock());
  s.put("a", entry("a"));
  s.put("b", entry("b"));
  s.put("c", entry("c"));
  ASSERT_TRUE(s.get("a"));  // a is now the most recent; b the least
  s.put("d", entry("d"));
  s.check_invariants();
  EXPECT_EQ(s.size(), 3u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("a"));
  EXPECT_TRUE(s.get("c"));
  EXPECT_TRUE(s.get("d"));
  // Order now (most recent first): d c a -> e evicts a.
  s.put("e", entry("e"));
  EXPECT_FALSE(s.get("a"));
  s.check_invariants();
}

TEST(ResponsesStore, GetReturnsWhatWasStored) {
  Clocked c;
  ResponsesStore s(4, 0, UINT64_MAX, c.clock());
  s.put("x", entry("x"));
  std::optional<Entry> e = s.get("x");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->response["id"], "x");
  EXPECT_EQ(e->messages, nlohmann::ordered_json::array({"x"}));
  s.put("x", entry("y"));  // replaces, no second slot
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.get("x")->response["id"], "y");
  s.check_invariants();
}

TEST(ResponsesStore, EntriesExpireTtlAfterTheyWereStored) {
  Clocked c;
  ResponsesStore s(8, 500, UINT64_MAX, c.clock());
  s.put("old", entry("old"));
  c.now += 300;
  s.put("new", entry("new"));
  c.now += 199;  // old is 499 ms old
  EXPECT_TRUE(s.get("old"));
  c.now += 1;  // 500 ms: gone, even though it was just used
  EXPECT_FALSE(s.get("old"));
  EXPECT_TRUE(s.get("new"));
  c.now += 300;
  s.put("third", entry("third"));  // a put drops what expired
  EXPECT_EQ(s.size(), 1u);
  s.check_invariants();
}

TEST(ResponsesStore, EraseRemovesOnlyLiveEntries) {
  Clocked c;
  ResponsesStore s(8, 100, UINT64_MAX, c.clock());
  s.put("a", entry("a"));
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_FALSE(s.get("a"));
  s.put("b", entry("b"));
  c.now += 100;
  EXPECT_FALSE(s.erase("b"));  // expired: as if unknown
  EXPECT_EQ(s.size(), 0u);
  s.check_invariants();
}

// An entry is booked at what it holds: its compact JSON text's buffers, the id (map key
// and list node) and kSlotOverheadBytes.
uint64_t booked(const std::string& id, const Entry& e) {
  std::string r = e.response.dump(), m = e.messages.dump();
  r.shrink_to_fit();
  m.shrink_to_fit();
  return ResponsesStore::booked_bytes(id, r, m);
}

TEST(ResponsesStore, EvictsLeastRecentlyUsedBeyondMaxBytes) {
  Clocked c;
  const uint64_t one = booked("a", entry("a"));
  EXPECT_GE(one, ResponsesStore::kSlotOverheadBytes + 2 + 10 + 5);
  ResponsesStore s(100, 0, 2 * one + one / 2, c.clock());
  s.put("a", entry("a"));
  EXPECT_EQ(s.bytes(), one);
  s.put("b", entry("b"));
  ASSERT_TRUE(s.get("a"));  // b is now the least recently used
  s.put("c", entry("c"));   // 3 entries > 2.5: b goes
  EXPECT_EQ(s.bytes(), 2 * one);
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("a"));
  EXPECT_TRUE(s.get("c"));
  s.check_invariants();
  // An entry bigger than the whole budget is not stored, and evicts nothing.
  s.put("big", Entry{{{"text", std::string(3 * one, 'x')}}, nlohmann::ordered_json::array()});
  EXPECT_FALSE(s.get("big"));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.erase("a"));
  EXPECT_EQ(s.bytes(), one);
  s.check_invariants();
}

// What the store holds in memory stays near its byte cap: 40 conversations of ~700 KB of
// small JSON values (20,000 messages each) under a 16 MiB cap. Held as parsed JSON and
// booked at their text size, the same load took ~15x the cap (221-245 MiB for 40 responses
// with 1 MiB of metadata each).
TEST(ResponsesStore, ResidentMemoryStaysNearTheByteCap) {
  if (test::kUnderSanitizer) GTEST_SKIP() << "RSS means little under a sanitizer's allocator";
  constexpr uint64_t kCap = 16u << 20;
  ResponsesStore s(1024, 0, kCap);
  ::malloc_trim(0);
  const uint64_t before = read_process_memory().rss_bytes;
  for (int i = 0; i < 40; ++i) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (int m = 0; m < 20000; ++m) messages.push_back({{"role", "user"}, {"content", std::to_string(i * 20000 + m)}});
    s.put("resp_" + std::to_string(i), Entry{{{"id", i}}, std::move(messages)});
  }
  ::malloc_trim(0);
  const uint64_t after = read_process_memory().rss_bytes;
  EXPECT_LE(s.bytes(), kCap);
  EXPECT_GE(s.size(), 10u);
  EXPECT_LT(after - std::min(after, before), kCap + kCap / 2) << "RSS grew " << (after - before) / (1 << 20) << " MiB";
  // And what comes back is what went in.
  const auto back = s.get("resp_39");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->messages.size(), 20000u);
  EXPECT_EQ(back->messages[5]["content"], std::to_string(39 * 20000 + 5));
  s.check_invariants();
}

TEST(ResponsesStore, ZeroEntriesStoresNothing) {
  ResponsesStore s(0, 0);
  s.put("a", entry("a"));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_FALSE(s.get("a"));
  s.check_invariants();
}

}  // namespace
}  // namespace pagoda::server
