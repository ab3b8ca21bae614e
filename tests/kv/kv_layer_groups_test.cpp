// KvLayerGroups (which page and slot hold each layer) and the pool's side of sliding
// windows: tables that release their leading blocks, per-group block counts, and the
// misuse a window makes possible (rewinding into released blocks, mixing groups).
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "kv/kv_layer_groups.h"
#include "kv/paged_kv_pool.h"
#include "kv/paged_kv_store.h"

namespace pagoda {
namespace {

// Gemma 3's pattern: every sixth layer global.
std::vector<int64_t> every_sixth_global(int64_t n_layers, int64_t window) {
  std::vector<int64_t> w(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) w[static_cast<size_t>(l)] = (l + 1) % 6 == 0 ? 0 : window;
  return w;
}

TEST(KvLayerGroups, Gemma3FourBPagesFiveGlobalLayersAndSixLocalGroupsWithOnePaddingSlot) {
  const KvLayerGroups g = KvLayerGroups::for_windows(every_sixth_global(34, 1024));
  EXPECT_EQ(g.page_layers, 5);
  ASSERT_EQ(g.n_groups(), 7);
  EXPECT_EQ(g.window, (std::vector<int64_t>{0, 1024, 1024, 1024, 1024, 1024, 1024}));
  EXPECT_EQ(g.used_slots, (std::vector<int32_t>{5, 5, 5, 5, 5, 5, 4}));
  // Global layers 5, 11, 17, 23, 29 fill group 0's slots in order.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g.group[static_cast<size_t>(6 * i + 5)], 0);
    EXPECT_EQ(g.slot[static_cast<size_t>(6 * i + 5)], i);
  }
  // Local layers in order: layer 0 is (1, 0), layer 6 (the 6th local) is (2, 0).
  EXPECT_EQ(g.group[0], 1);
  EXPECT_EQ(g.slot[4], 4);
  EXPECT_EQ(g.group[6], 2);
  EXPECT_EQ(g.slot[6], 0);
  EXPECT_EQ(g.describe(), "34 layers: 1 global group of 5, 6 local groups of 5 (window 1024), 1 padding slot");
}

TEST(KvLayerGroups, LayoutsThatCannotBePagedKeepOneGroup) {
  EXPECT_EQ(KvLayerGroups::for_windows(std::vector<int64_t>(4, 0)).n_groups(), 1);         // no local layer
  EXPECT_EQ(KvLayerGroups::for_windows(std::vector<int64_t>(4, 128)).n_groups(), 1);       // no global layer
  EXPECT_EQ(KvLayerGroups::for_windows(std::vector<int64_t>{0, 128, 256}).n_groups(), 1);  // two windows
  EXPECT_EQ(KvLayerGroups::for_windows(every_sixth_global(12, 64), /*swa_full=*/true).n_groups(), 1);
  const KvLayerGroups u = KvLayerGroups::uniform(3);
  EXPECT_EQ(u.page_layers, 3);
  EXPECT_EQ(u.slot, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(u.describe(), "3 layers: 1 group (every layer keeps the whole context)");
  // Gemma 2 alternates: 13 local and 13 global layers, one local group.
  std::vector<int64_t> alt(26);
  for (size_t l = 0; l < alt.size(); ++l) alt[l] = l % 2 == 0 ? 4096 : 0;
  EXPECT_EQ(KvLayerGroups::for_windows(alt).n_groups(), 2);
}

KvConfig config(int block_size) {
  KvConfig c;
  c.block_size = block_size;
  c.budget_bytes = 1 << 20;
  c.k_type = c.v_type = KvType::F32;
  return c;
}

TEST(KvWindowPool, ReleaseBeforeDropsWholeBlocksOldestFirstAndNeverTheLast) {
  PagedKvPool pool(KvGeometry{1, 1, 8, 2}, config(8));
  BlockTable t(1);
  ASSERT_TRUE(pool.append_tokens(t, 50).ok());  // 7 blocks
  const std::vector<BlockId> before(t.blocks().begin(), t.blocks().end());
  EXPECT_EQ(pool.release_before(t, 7), 0);   // no block lies wholly before position 7
  EXPECT_EQ(pool.release_before(t, 24), 3);  // blocks 0-2 hold positions 0-23
  EXPECT_EQ(t.first_held_block(), 3);
  EXPECT_EQ(t.num_held_blocks(), 4);
  EXPECT_EQ(t.num_blocks(), 7);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(t.block(j), kNoBlock);
  // Released oldest first: the free list's order.
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{before[0], before[1], before[2]}));
  EXPECT_EQ(pool.release_before(t, 1000), 3);  // everything but the last
  EXPECT_EQ(t.num_held_blocks(), 1);
  pool.check_table(t);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.blocks_live_by_group, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.blocks_live, 1);
  // Rewinding into released entries is refused; truncating to 0 frees all.
  EXPECT_DEATH(pool.truncate(t, 20), "released by the sliding window");
  ASSERT_TRUE(pool.append_tokens(t, 10).ok());
  pool.check_table(t);
  pool.free(t);
  EXPECT_EQ(t.first_held_block(), 0);
  pool.check_invariants();
  EXPECT_EQ(pool.stats().blocks_live, 0);
}

TEST(KvWindowPool, ForkAndBorrowShareOnlyHeldBlocksOfTheirGroup) {
  PagedKvPool pool(KvGeometry{1, 1, 8, 2}, config(8));
  BlockTable t(1);
  ASSERT_TRUE(pool.append_tokens(t, 40).ok());
  pool.release_before(t, 16);
  BlockTable f = pool.fork(t);
  EXPECT_EQ(f.first_held_block(), 2);
  EXPECT_EQ(f.group(), 1);
  for (int64_t j = 2; j < 5; ++j) EXPECT_EQ(pool.refcount(t.block(j)), 2);
  std::vector<BlockId> entries(t.blocks().begin(), t.blocks().end());
  BlockTable b = pool.borrow_table(entries, 40, 1);
  EXPECT_EQ(b.first_held_block(), 2);
  EXPECT_DEATH((void)pool.borrow_table(entries, 40, 0), "belongs to layer group 1");
  pool.free(b);
  pool.free(f);
  pool.free(t);
  pool.check_invariants();
}

TEST(KvWindowStore, ReserveIsAllGroupsOrNoneAndCountsEveryGroup) {
  const KvLayerGroups g = KvLayerGroups::for_windows(std::vector<int64_t>{16, 0});  // 1 local, 1 global
  KvConfig c = config(8);
  PagedKvPool probe(KvGeometry{1, 1, 8, 2}, c);
  c.budget_bytes = 10 * probe.bytes_per_block();
  PagedKvPool pool(KvGeometry{1, 1, 8, 2}, c);
  PagedKvStore store(pool, g);
  EXPECT_FALSE(store.never_fits(40));           // 2 groups x 5 blocks
  ASSERT_TRUE(store.never_fits(41).has_value());  // 2 x 6 > 10
  EXPECT_NE(store.never_fits(41)->find("2 layer groups"), std::string::npos);
  ASSERT_TRUE(store.reserve(0, 24).ok());  // 3 + 3
  const AllocResult r = store.reserve(1, 24);
  EXPECT_EQ(r.status, AllocResult::Status::OutOfBlocks);
  EXPECT_EQ(r.blocks_needed, 6);
  EXPECT_EQ(r.blocks_available, 4);
  EXPECT_FALSE(store.contains(1));
  EXPECT_EQ(pool.stats().blocks_live, 6);  // nothing half-reserved
  // Grown to 40 tokens the pool is full; once the window moves on, the local group gives
  // back what lies before 40 - 16 + 1 - 8 = 17 (the window and one block more): blocks 0-1.
  ASSERT_TRUE(store.reserve(0, 40).ok());
  EXPECT_EQ(pool.stats().blocks_available, 0);
  EXPECT_EQ(store.release_out_of_window(0, 40), 2);
  EXPECT_EQ(store.blocks_held(0), 8);
  ASSERT_TRUE(store.reserve(1, 8).ok());
  store.check_tables(0);
  store.check_tables(1);
  // Attending from a position whose window reaches a released block is refused.
  std::vector<float> q(8, 0.0f), out(8);
  EXPECT_DEATH(store.attend(0, 0, 20, 0, q.data(), 1, 1.0f, out.data(), 16), "window already released");
  store.attend(0, 0, 39, 0, q.data(), 1, 1.0f, out.data(), 16);  // reads 24..39: held
  EXPECT_THROW(store.truncate(0, 20), Error);
  pool.check_invariants();
}

// With windows, a sequence alone can grow past budget / n_groups blocks: what its local
// table released does not count against it (only the global table grows with it).
TEST(KvWindowStore, ALongDecodeOutgrowsTheFullSizeLimitOnceItsWindowIsReleased) {
  const KvLayerGroups g = KvLayerGroups::for_windows(std::vector<int64_t>{16, 0});
  KvConfig c = config(8);
  PagedKvPool probe(KvGeometry{1, 1, 8, 2}, c);
  c.budget_bytes = 14 * probe.bytes_per_block();
  PagedKvPool pool(KvGeometry{1, 1, 8, 2}, c);
  PagedKvStore store(pool, g);
  // Full-size windows would stop at 7 blocks (56 tokens) per group; windowed, the local
  // table holds at most the window (16), one margin block and the partial block: 4.
  for (int64_t n = 1; n <= 72; ++n) {
    const AllocResult r = store.reserve(0, n);
    ASSERT_TRUE(r.ok()) << "at " << n << ": " << r.message;
    store.release_out_of_window(0, n);
    store.check_tables(0);
  }
  EXPECT_EQ(store.tables(0).main.num_held_blocks(), 9);
  EXPECT_LE(store.tables(0).local[0].num_held_blocks(), 4);
  // The global table alone cannot pass the budget.
  const AllocResult r = store.reserve(0, 14 * 8 + 1);
  EXPECT_EQ(r.status, AllocResult::Status::NeverFits);
  pool.check_invariants();
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// Gemma 4 E4B's layers with their own K/V (24 of 42: the last 18 share): every sixth
// global with 2 KV heads of 512, the rest local with 2 KV heads of 256, window 512.
std::vector<KvLayerShape> e4b_kv_layers() {
  std::vector<KvLayerShape> v;
  for (int64_t l = 0; l < 24; ++l)
    v.push_back((l + 1) % 6 == 0 ? KvLayerShape{0, {2, 512}} : KvLayerShape{512, {2, 256}});
  return v;
}

TEST(KvLayerGroups, MixedHeadShapesFillALocalPageWithAsManyLocalSlotsAsTheGlobalPageHolds) {
  const KvLayerGroups g = KvLayerGroups::for_layers(e4b_kv_layers());
  // Group 0: 4 global slots of 2 x 512; local pages: 8 slots of 2 x 256 (the same 4096
  // values a token), 20 local layers in 3 groups, the last with 4 padding slots.
  EXPECT_EQ(g.page_layers, 8);
  ASSERT_EQ(g.n_groups(), 4);
  EXPECT_EQ(g.used_slots, (std::vector<int32_t>{4, 8, 8, 4}));
  ASSERT_EQ(g.slot_shapes.size(), 4u);
  EXPECT_EQ(g.slot_shapes[0], (std::vector<KvSlotShape>(4, KvSlotShape{2, 512})));
  for (int k = 1; k < 4; ++k) EXPECT_EQ(g.slot_shapes[static_cast<size_t>(k)], (std::vector<KvSlotShape>(8, KvSlotShape{2, 256})));
  EXPECT_EQ(g.group[5], 0);
  EXPECT_EQ(g.slot[23], 3);
  EXPECT_EQ(g.group[0], 1);
  EXPECT_EQ(g.group[9], 2);   // the 9th local layer
  EXPECT_EQ(g.slot[9], 0);
  EXPECT_EQ(g.describe(), "24 layers: 1 global group of 4, 3 local groups of 8 (window 512), 4 padding slots");
  // One shape everywhere gives exactly for_windows' layout, no per-slot shapes.
  std::vector<KvLayerShape> same = e4b_kv_layers();
  for (KvLayerShape& l : same) l.shape = {2, 256};
  const KvLayerGroups u = KvLayerGroups::for_layers(same);
  EXPECT_TRUE(u.slot_shapes.empty());
  EXPECT_EQ(u.page_layers, 4);
}

TEST(KvLayerGroups, MixedHeadShapesWithoutWindowsKeepEachLayersShapeInOnePage) {
  const KvLayerGroups g = KvLayerGroups::for_layers(e4b_kv_layers(), /*swa_full=*/true);
  ASSERT_EQ(g.n_groups(), 1);
  EXPECT_EQ(g.page_layers, 24);
  ASSERT_EQ(g.slot_shapes.size(), 1u);
  EXPECT_EQ(g.slot_shapes[0][5], (KvSlotShape{2, 512}));
  EXPECT_EQ(g.slot_shapes[0][6], (KvSlotShape{2, 256}));
  EXPECT_EQ(g.describe(), "24 layers: 1 group (every layer keeps the whole context), head shapes differ by layer");
}

TEST(KvWindowPool, PerSlotShapesGiveEachSlotItsOwnRowsAndPagesOneSize) {
  KvConfig c;
  c.block_size = 16;
  c.budget_bytes = 64 << 20;
  c.k_type = c.v_type = KvType::F16;
  const KvLayerGroups g = KvLayerGroups::for_layers(e4b_kv_layers());
  PagedKvPool pool(KvGeometry{g.page_layers, 2, 512, g.n_groups(), g.slot_shapes}, c);
  // f16: 16 tokens x 2 heads x (512 + 512) x 2 B per global slot; the local pages equal it.
  EXPECT_EQ(pool.real_block_bytes(0, 0), 16u * 2 * 1024 * 2);
  EXPECT_EQ(pool.real_block_bytes(0, 1), 16u * 2 * 512 * 2);
  EXPECT_EQ(pool.bytes_per_block(), 4 * pool.real_block_bytes(0, 0));
  EXPECT_EQ(pool.bytes_per_block(), 8 * pool.real_block_bytes(7, 3));
  // A token written in a local slot reads back from that slot only, in its own shape.
  PagedKvStore store(pool, g);
  ASSERT_TRUE(store.reserve(0, 3).ok());
  std::vector<float> k(2 * 256), v(2 * 256), kg(2 * 512), vg(2 * 512), out(512);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 7), v[i] = -static_cast<float>(i % 5);
  for (size_t i = 0; i < kg.size(); ++i) kg[i] = 0.5f * static_cast<float>(i % 3), vg[i] = 1.0f;
  store.store(9, 0, 2, k.data(), v.data());     // local layer 9: group 2, slot 0
  store.store(11, 0, 2, kg.data(), vg.data());  // global layer 11: group 0, slot 1
  pool.read_row(store.tables(0).group(2), 0, 2, 1, false, out.data());
  for (int i = 0; i < 256; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], k[static_cast<size_t>(256 + i)]) << i;
  pool.read_row(store.tables(0).group(0), 1, 2, 1, true, out.data());
  for (int i = 0; i < 512; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], 1.0f) << i;
  store.remove(0);
  pool.check_invariants();
}

}  // namespace
}  // namespace pagoda
