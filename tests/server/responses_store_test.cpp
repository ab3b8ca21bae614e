// ResponsesStore: LRU order, max entries, TTL and erase, on a store small enough that
// the surviving ids can be worked out by hand; the clock is stepped by the test.
#include <gtest/gtest.h>

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

TEST(ResponsesStore, EvictsLeastRecentlyUsedBeyondMaxBytes) {
  // entry("a") is {"id":"a"} (10 bytes) + ["a"] (5 bytes) + the id (1 byte) = 16 bytes.
  Clocked c;
  ResponsesStore s(100, 0, 40, c.clock());
  s.put("a", entry("a"));
  EXPECT_EQ(s.bytes(), 16u);
  s.put("b", entry("b"));
  ASSERT_TRUE(s.get("a"));  // b is now the least recently used
  s.put("c", entry("c"));   // 48 > 40: b goes
  EXPECT_EQ(s.bytes(), 32u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("a"));
  EXPECT_TRUE(s.get("c"));
  s.check_invariants();
  // An entry bigger than the whole budget is not stored, and evicts nothing.
  s.put("big", Entry{{{"text", std::string(64, 'x')}}, nlohmann::ordered_json::array()});
  EXPECT_FALSE(s.get("big"));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.erase("a"));
  EXPECT_EQ(s.bytes(), 16u);
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
