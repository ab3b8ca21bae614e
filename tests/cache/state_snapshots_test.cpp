// StateSnapshots: a hybrid model's recurrent states kept by token prefix. Checked here
// against the contract directly: find() gives the longest snapshot of the prompt's own
// prefix within the limit and never another prompt's (equal hashes mean equal tokens, but
// the tail is compared too), restore() copies it back byte for byte, and the bytes held
// never pass the cap, the least recently used going first.
#include "cache/state_snapshots.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace pagoda {
namespace {

constexpr int64_t kBlock = 4;
constexpr uint64_t kState = 64;  // bytes per snapshot

BlockHash ns(std::string_view key = "") { return namespace_hash("m", KvType::F16, KvType::F16, kBlock, key); }

std::vector<int32_t> seq(int32_t first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<uint8_t> state(uint8_t fill) { return std::vector<uint8_t>(kState, fill); }

std::span<const int32_t> first(const std::vector<int32_t>& v, int64_t n) {
  return std::span<const int32_t>(v.data(), static_cast<size_t>(n));
}

TEST(StateSnapshots, FindsTheLongestSnapshotWithinTheLimitAndRestoresItExactly) {
  StateSnapshots s(10 * kState, kState, kBlock);
  const std::vector<int32_t> prompt = seq(100, 23);
  // Inside the first block, on a boundary, and mid-block later on.
  ASSERT_TRUE(s.save(ns(), first(prompt, 3), state(3).data()));
  ASSERT_TRUE(s.save(ns(), first(prompt, 8), state(8).data()));
  ASSERT_TRUE(s.save(ns(), first(prompt, 14), state(14).data()));
  s.check_invariants();
  EXPECT_EQ(s.find(ns(), prompt, 22), 14);
  EXPECT_EQ(s.find(ns(), prompt, 14), 14);
  EXPECT_EQ(s.find(ns(), prompt, 13), 8);
  EXPECT_EQ(s.find(ns(), prompt, 7), 3);
  EXPECT_EQ(s.find(ns(), prompt, 2), 0);
  EXPECT_EQ(s.find(ns(), prompt, 0), 0);
  std::vector<uint8_t> out(kState, 0);
  ASSERT_TRUE(s.restore(ns(), prompt, 8, out.data()));
  EXPECT_EQ(out, state(8));
  ASSERT_TRUE(s.restore(ns(), prompt, 14, out.data()));
  EXPECT_EQ(out, state(14));
  EXPECT_FALSE(s.restore(ns(), prompt, 9, out.data())) << "no snapshot at 9";
  EXPECT_FALSE(s.restore(ns(), prompt, 0, out.data()));
  EXPECT_FALSE(s.restore(ns(), prompt, 24, out.data())) << "past the prompt";
  EXPECT_EQ(s.size(), 3) << "a restore consumed its snapshot";
  const SnapshotStats st = s.stats();
  EXPECT_EQ(st.saves, 3);
  EXPECT_EQ(st.restores, 2);
  EXPECT_EQ(st.restored_tokens, 22);
  EXPECT_EQ(st.bytes, 3 * kState);
  EXPECT_EQ(st.capacity_bytes, 10 * kState);
  EXPECT_EQ(st.state_bytes, kState);
}

TEST(StateSnapshots, AnotherPromptOrNamespaceNeverFindsIt) {
  StateSnapshots s(10 * kState, kState, kBlock);
  const std::vector<int32_t> a = seq(100, 12);
  ASSERT_TRUE(s.save(ns(), first(a, 10), state(1).data()));
  std::vector<int32_t> b = a;
  b[9] = 7;  // differs in the tail, after the last full block
  EXPECT_EQ(s.find(ns(), b, 11), 0);
  std::vector<int32_t> c = a;
  c[1] = 7;  // differs in a full block: another hash chain
  EXPECT_EQ(s.find(ns(), c, 11), 0);
  EXPECT_EQ(s.find(ns("tenant"), a, 11), 0) << "a snapshot crossed namespaces";
  EXPECT_EQ(s.find(ns(), first(a, 9), 9), 0) << "a prompt shorter than the snapshot";
  std::vector<uint8_t> out(kState, 0);
  EXPECT_FALSE(s.restore(ns(), b, 10, out.data()));
  EXPECT_EQ(out, std::vector<uint8_t>(kState, 0)) << "a refused restore wrote the state";
  EXPECT_EQ(s.find(ns(), a, 11), 10);
}

TEST(StateSnapshots, TheCapEvictsTheLeastRecentlyUsedFirst) {
  StateSnapshots s(3 * kState, kState, kBlock);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(seq(1000 * (i + 1), 9));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.save(ns(), prompts[static_cast<size_t>(i)], state(static_cast<uint8_t>(i)).data()));
  std::vector<uint8_t> out(kState);
  ASSERT_TRUE(s.restore(ns(), prompts[0], 9, out.data()));  // 0 is now the most recent
  ASSERT_TRUE(s.save(ns(), prompts[3], state(3).data()));   // evicts 1, the oldest
  s.check_invariants();
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.bytes(), 3 * kState);
  EXPECT_EQ(s.find(ns(), prompts[1], 9), 0);
  EXPECT_EQ(s.find(ns(), prompts[0], 9), 9);
  EXPECT_EQ(s.find(ns(), prompts[2], 9), 9);
  EXPECT_EQ(s.find(ns(), prompts[3], 9), 9);
  EXPECT_EQ(s.stats().evictions, 1);
  // Saving a prefix already held refreshes it in place: no eviction, new bytes.
  ASSERT_TRUE(s.save(ns(), prompts[2], state(42).data()));
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.stats().evictions, 1);
  ASSERT_TRUE(s.restore(ns(), prompts[2], 9, out.data()));
  EXPECT_EQ(out, state(42));
  s.clear();
  EXPECT_EQ(s.size(), 0);
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.find(ns(), prompts[2], 9), 0);
  s.check_invariants();
}

TEST(StateSnapshots, NothingIsKeptWhenOneSnapshotIsOverTheCapOrThePrefixEmpty) {
  StateSnapshots small(kState - 1, kState, kBlock);
  const std::vector<int32_t> p = seq(5, 6);
  EXPECT_FALSE(small.save(ns(), p, state(1).data()));
  EXPECT_EQ(small.size(), 0);
  StateSnapshots s(2 * kState, kState, kBlock);
  EXPECT_FALSE(s.save(ns(), first(p, 0), state(1).data()));
  EXPECT_EQ(s.size(), 0);
}

}  // namespace
}  // namespace pagoda
