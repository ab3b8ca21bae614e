#include "cache/prefix_cache.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "cache/disk_io.h"
#include "common/error.h"

namespace pagoda {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PrefixCache::PrefixCache(PagedKvPool& pool, std::string model_id, const PrefixCacheConfig& config, CacheClock clock,
                         const KvLayerGroups& groups)
    : pool_(pool),
      index_(pool.blocks_budget(), pool.block_size()),
      model_id_(std::move(model_id)),
      config_(config),
      clock_(clock ? std::move(clock) : CacheClock(steady_ms)),
      last_used_(static_cast<size_t>(pool.blocks_budget()), 0),
      companions_(0, -1),
      companion_of_(static_cast<size_t>(pool.blocks_budget()), -1) {
  PAGODA_CHECK(pool_.stats().blocks_cached == 0, "PrefixCache: the pool already has cached blocks");
  pool_.set_cache_listener(this);
  last_ttl_check_ms_ = now();
  if (groups.n_groups() > 1) {
    PAGODA_CHECK(groups.n_groups() == pool.geometry().n_groups, "PrefixCache: layer groups do not match the pool");
    n_local_ = groups.n_groups() - 1;
    window_ = groups.window[1];
    companions_ = GrowingArray<int32_t>(static_cast<size_t>(pool.blocks_budget()) * static_cast<size_t>(n_local_), -1);
  }
}

PrefixCache::~PrefixCache() {
  drop_all();
  pool_.set_cache_listener(nullptr);
}

CacheKey PrefixCache::key(std::string_view cache_key, bool use_cache) const {
  return CacheKey{namespace_hash(model_id_, pool_.k_type(), pool_.v_type(), pool_.block_size(), cache_key), use_cache};
}

uint64_t PrefixCache::evictable_bytes() const {
  return static_cast<uint64_t>(pool_.blocks_evictable()) * pool_.bytes_per_block();  // O(1), no stats copy
}

// ---- lookup -------------------------------------------------------------------------------

CacheHit PrefixCache::lookup(const CacheKey& key, std::span<const int32_t> prompt) {
  CacheHit hit;
  if (!config_.enabled || !key.use_cache) return hit;
  ++counters_.lookups;
  counters_.queried_tokens += static_cast<int64_t>(prompt.size());
  enforce_limits();  // an expired block must not be hit
  const int32_t root = index_.find_root(key.ns);
  const bool sync_disk = disk_ && !io_;  // with an I/O thread, begin_restore() reads the disk
  if ((root == PrefixIndex::kNone && !sync_disk) || prompt.size() < 2) return hit;

  // Full blocks through the hash chain, then the longest token-exact continuation among
  // the last matching block's children (a full block diverging mid-way, or a partial
  // tail). Allocates nothing but the returned table.
  const size_t bs = static_cast<size_t>(pool_.block_size());
  scratch_.clear();
  int32_t node = root;
  BlockHash h = key.ns;
  size_t pos = 0;
  while (root != PrefixIndex::kNone && pos + bs <= prompt.size()) {
    const BlockHash next = block_hash(h, prompt.subspan(pos, bs));
    const int32_t f = index_.find_full(next);
    if (f == PrefixIndex::kNone) break;
    assert(std::ranges::equal(index_.tokens(f), prompt.subspan(pos, bs)));
    scratch_.push_back(BlockId{f});
    h = next;
    node = f;
    pos += bs;
  }
  // The disk tier continues the chain where RAM ends; its blocks come back into fresh
  // pool blocks, indexed and cached as if this process had computed them. The matched
  // RAM blocks are pinned meanwhile: acquiring a block may evict evictable ones.
  const size_t n_ram = scratch_.size();
  size_t n_pinned = 0;
  if (sync_disk && pos + bs <= prompt.size()) {
    for (BlockId b : scratch_) pool_.share(b);
    n_pinned = scratch_.size();
    while (pos + bs <= prompt.size()) {
      const auto blk = prompt.subspan(pos, bs);
      const BlockHash next = block_hash(h, blk);
      if (!disk_->contains(next)) break;
      const std::optional<BlockId> b = pool_.acquire(0);
      if (!b) break;
      uint8_t* slab = pool_.fill_block(*b, static_cast<int>(bs));
      if (!disk_->get(next, blk, std::span<uint8_t>(slab, pool_.bytes_per_block()))) {
        pool_.release(*b);
        break;
      }
      if (node == PrefixIndex::kNone) node = index_.root(key.ns);
      drop_covered_partials(node, blk);
      index_.add_block(node, *b, next, blk);
      pool_.mark_cached(*b);
      last_used_.at(static_cast<size_t>(idx(*b))) = now();
      scratch_.push_back(*b);
      ++n_pinned;
      h = next;
      node = idx(*b);
      pos += bs;
    }
  }
  const size_t n_restored = scratch_.size() - n_ram;
  int64_t matched = static_cast<int64_t>(pos);
  if (node != PrefixIndex::kNone) {
    const PrefixIndex::ChildMatch m = index_.best_child(node, prompt.subspan(pos, std::min(bs, prompt.size() - pos)));
    if (m.node != PrefixIndex::kNone) {
      scratch_.push_back(BlockId{m.node});
      matched += m.n_tokens;
    }
  }
  hit.matched_tokens = matched;
  int64_t cached = std::min(matched, static_cast<int64_t>(prompt.size()) - 1);
  if (n_local_ > 0 && cached > 0) {
    const int64_t covered = window_covered(cached);
    if (covered < cached) ++counters_.window_limited_hits;
    cached = covered;
  }
  if (cached < config_.min_prefix_tokens) cached = 0;
  if (cached > 0) {
    const size_t n_blocks = static_cast<size_t>(pool_.blocks_for_tokens(cached));
    hit.table = pool_.borrow_table(std::span<const BlockId>(scratch_.data(), n_blocks), cached);
    if (n_local_ > 0) {
      const int64_t lo = std::max<int64_t>(0, cached - window_ + 1) / pool_.block_size();
      std::vector<BlockId> entries(n_blocks, kNoBlock);
      for (int32_t g = 1; g <= n_local_; ++g) {
        for (size_t j = static_cast<size_t>(lo); j < n_blocks; ++j) entries[j] = BlockId{companion(idx(scratch_[j]), g)};
        hit.local.push_back(pool_.borrow_table(entries, cached, g));
      }
    }
    hit.cached_tokens = cached;
    ++counters_.hits;
    counters_.hit_tokens += cached;
    // Tokens the disk gave this request: its restored blocks' part of [0, cached).
    const int64_t disk_from = static_cast<int64_t>(n_ram * bs);
    if (n_restored > 0 && cached > disk_from)
      disk_->count_hit(std::min<int64_t>(cached, static_cast<int64_t>((n_ram + n_restored) * bs)) - disk_from);
  }
  // Unpin tail first (a chain's tail becomes evictable before its head: invariant 2).
  for (size_t j = n_pinned; j-- > 0;) pool_.release(scratch_[j]);
  if (root == PrefixIndex::kNone && node != PrefixIndex::kNone) {
    const int32_t r = index_.find_root(key.ns);
    if (r != PrefixIndex::kNone) index_.prune_root(r);
  }
  return hit;
}

void PrefixCache::shorten(CacheHit& hit, int64_t n_tokens) {
  if (n_tokens >= hit.cached_tokens) return;
  if (n_tokens < config_.min_prefix_tokens || !hit.local.empty()) n_tokens = 0;
  counters_.hit_tokens -= hit.cached_tokens - n_tokens;
  if (n_tokens == 0) {
    pool_.free(hit.table);
    for (BlockTable& t : hit.local) pool_.free(t);
    hit.local.clear();
    --counters_.hits;
  } else {
    pool_.truncate(hit.table, n_tokens);
  }
  hit.cached_tokens = n_tokens;
}

// ---- asynchronous restore ------------------------------------------------------------------

uint64_t PrefixCache::begin_restore(const CacheKey& key, std::span<const int32_t> prompt) {
  if (!config_.enabled || !key.use_cache || !disk_ || !io_ || prompt.size() < 2) return 0;
  if (io_->stalled()) return 0;  // a stuck disk is a miss: the request computes instead
  enforce_limits();
  const size_t bs = static_cast<size_t>(pool_.block_size());
  // The RAM chain, as lookup() walks it...
  std::vector<BlockId> ram;
  BlockHash h = key.ns;
  size_t pos = 0;
  if (index_.find_root(key.ns) != PrefixIndex::kNone) {
    while (pos + bs <= prompt.size()) {
      const BlockHash next = block_hash(h, prompt.subspan(pos, bs));
      const int32_t f = index_.find_full(next);
      if (f == PrefixIndex::kNone) break;
      ram.push_back(BlockId{f});
      h = next;
      pos += bs;
    }
  }
  // ... and its continuation on disk, or in the write queue (read after the write: FIFO).
  if (pos + bs <= prompt.size()) {  // another restore in flight reads this block: join it
    const auto it = reading_.find(block_hash(h, prompt.subspan(pos, bs)));
    if (it != reading_.end()) {
      ++restores_.at(it->second).holders;
      return it->second;
    }
  }
  Restore r;
  r.ns = key.ns;
  r.from_tokens = static_cast<int64_t>(pos);
  while (pos + bs <= prompt.size()) {
    const auto blk = prompt.subspan(pos, bs);
    const BlockHash next = block_hash(h, blk);
    if (!disk_->contains(next) && !io_->write_queued(next)) break;
    r.hashes.push_back(next);
    r.tokens.insert(r.tokens.end(), blk.begin(), blk.end());
    h = next;
    pos += bs;
  }
  if (r.hashes.empty()) return 0;
  // Pinned first: acquiring may evict evictable blocks.
  for (BlockId b : ram) pool_.share(b);
  std::vector<DiskIo::ReadBlock> reads;
  for (size_t j = 0; j < r.hashes.size(); ++j) {
    const std::optional<BlockId> b = pool_.acquire(0);
    if (!b) break;
    r.fresh.push_back(*b);
    DiskIo::ReadBlock rb;
    rb.hash = r.hashes[j];
    rb.tokens.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(j * bs),
                     r.tokens.begin() + static_cast<std::ptrdiff_t>((j + 1) * bs));
    rb.dst = pool_.fill_block(*b, static_cast<int>(bs));
    reads.push_back(std::move(rb));
  }
  if (r.fresh.empty()) {
    for (size_t j = ram.size(); j-- > 0;) pool_.release(ram[j]);
    return 0;
  }
  r.hashes.resize(r.fresh.size());
  r.tokens.resize(r.fresh.size() * bs);
  r.ram = std::move(ram);
  const uint64_t ticket = io_->read(std::move(reads), pool_.bytes_per_block());
  for (const BlockHash& bh : r.hashes) reading_.emplace(bh, ticket);
  restores_.emplace(ticket, std::move(r));
  return ticket;
}

bool PrefixCache::restore_pending(uint64_t ticket) const {
  const auto it = restores_.find(ticket);
  return it != restores_.end() && !it->second.done;
}

void PrefixCache::poll_restores() {
  if (!io_ || restores_.empty()) return;
  done_scratch_.clear();
  io_->take_done(done_scratch_);
  for (const auto& [ticket, n_ok] : done_scratch_) {
    const auto it = restores_.find(ticket);
    if (it == restores_.end()) continue;
    publish(ticket, it->second, n_ok);
  }
  // A stalled tier (one read or write past the deadline: a hung mount) is a miss: the
  // restores still waiting keep what was read so far and their requests compute the rest.
  // cancel() fences the thread, so their other blocks go back to the pool at once.
  if (io_->stalled()) {
    for (auto& [ticket, r] : restores_) {
      if (r.done) continue;
      publish(ticket, r, io_->cancel(ticket));
      ++restore_timeouts_;
    }
  }
}

void PrefixCache::publish(uint64_t ticket, Restore& r, int64_t n_ok) {
  for (const BlockHash& bh : r.hashes)
    if (const auto it = reading_.find(bh); it != reading_.end() && it->second == ticket) reading_.erase(it);
  // The chain must still be there (a RAM reset or the cache turned off meanwhile drops it:
  // the pinned blocks stay ours, uncached, and the copies go back).
  bool chain = config_.enabled;
  for (BlockId b : r.ram) chain = chain && index_.contains(b);
  const size_t bs = static_cast<size_t>(pool_.block_size());
  int32_t node = r.ram.empty() ? PrefixIndex::kNone : idx(r.ram.back());
  const int64_t t = now();
  for (size_t j = 0; j < r.fresh.size(); ++j) {
    const BlockId b = r.fresh[j];
    if (!chain || static_cast<int64_t>(j) >= n_ok) {  // a failed read ends the chain
      pool_.release(b);
      continue;
    }
    const int32_t found = index_.find_full(r.hashes[j]);
    if (found != PrefixIndex::kNone) {  // computed (or restored) meanwhile: one copy
      pool_.share(BlockId{found});
      pool_.release(b);
      r.published.push_back(BlockId{found});
      node = found;
      continue;
    }
    const auto blk = std::span<const int32_t>(r.tokens).subspan(j * bs, bs);
    if (node == PrefixIndex::kNone) node = index_.root(r.ns);
    drop_covered_partials(node, blk);
    index_.add_block(node, b, r.hashes[j], blk);
    pool_.mark_cached(b);
    last_used_.at(static_cast<size_t>(idx(b))) = t;
    r.published.push_back(b);
    node = idx(b);
  }
  r.fresh.clear();
  r.done = true;
}

void PrefixCache::unpin(Restore& r) {
  if (!r.pinned) return;
  r.pinned = false;
  // Tail first (a chain's tail becomes evictable before its head: invariant 2).
  for (size_t j = r.published.size(); j-- > 0;) pool_.release(r.published[j]);
  for (size_t j = r.ram.size(); j-- > 0;) pool_.release(r.ram[j]);
}

void PrefixCache::end_restore(uint64_t ticket, int64_t cached_tokens) {
  const auto it = restores_.find(ticket);
  if (it == restores_.end()) return;
  Restore& r = it->second;
  --r.holders;
  if (!r.done) {
    if (r.holders > 0) return;  // in flight for the others
    // Every holder left: what was read is kept (published, then unpinned below), the
    // rest goes back to the pool at once (cancel() fences the thread).
    publish(ticket, r, io_->cancel(ticket));
    unpin(r);
    restores_.erase(it);
    return;
  }
  const int64_t to = r.from_tokens + static_cast<int64_t>(r.published.size()) * pool_.block_size();
  if (cached_tokens > r.from_tokens && !r.published.empty()) disk_->count_hit(std::min(cached_tokens, to) - r.from_tokens);
  if (r.holders > 0) return;  // others still to borrow it
  unpin(r);
  restores_.erase(it);
}

int64_t PrefixCache::restore_blocks() const {
  int64_t n = 0;
  for (const auto& [ticket, r] : restores_)
    n += static_cast<int64_t>(r.fresh.size()) +
         (r.pinned ? static_cast<int64_t>(r.ram.size() + r.published.size()) : 0);
  return n;
}

int64_t PrefixCache::restores_in_flight() const {
  int64_t n = 0;
  for (const auto& [ticket, r] : restores_) n += r.done ? 0 : 1;
  return n;
}

void PrefixCache::wait_restores() {
  if (!io_) return;
  io_->drain();
  poll_restores();
}

bool PrefixCache::unpin_restores() {
  bool any = false;
  for (auto& [ticket, r] : restores_) {
    if (!r.done || !r.pinned) continue;
    unpin(r);
    any = true;
  }
  return any;
}

int64_t PrefixCache::window_covered(int64_t cached) {
  // covered_prefix_[j]: how many of scratch_[0, j) have a companion in every local group.
  const int64_t bs = pool_.block_size();
  const size_t nb = static_cast<size_t>(pool_.blocks_for_tokens(cached));
  covered_prefix_.assign(nb + 1, 0);
  for (size_t j = 0; j < nb; ++j) {
    bool all = true;
    for (int32_t g = 1; g <= n_local_ && all; ++g) all = companion(idx(scratch_[j]), g) >= 0;
    covered_prefix_[j + 1] = covered_prefix_[j] + (all ? 1 : 0);
  }
  // A query at c reads positions [c - W + 1, c): blocks lo..hi, all of which must be covered.
  auto covered = [&](int64_t c) {
    const int64_t lo = std::max<int64_t>(0, c - window_ + 1) / bs, hi = (c - 1) / bs;
    return covered_prefix_[static_cast<size_t>(hi + 1)] - covered_prefix_[static_cast<size_t>(lo)] == hi - lo + 1;
  };
  if (covered(cached)) return cached;
  for (int64_t k = (cached - 1) / bs; k >= 1; --k)
    if (covered(k * bs)) return k * bs;
  return 0;
}

// ---- insert -------------------------------------------------------------------------------

void PrefixCache::insert(const CacheKey& key, std::span<const int32_t> tokens, BlockTable& table, bool finished,
                         std::span<BlockTable> local) {
  if (!config_.enabled || !key.use_cache) return;
  const int64_t n = static_cast<int64_t>(tokens.size());
  PAGODA_CHECK(n <= table.num_tokens(), "PrefixCache::insert: " + std::to_string(n) + " tokens but the table holds " +
                                            std::to_string(table.num_tokens()));
  if (n == 0 || n < config_.min_prefix_tokens) return;
  const int64_t bs = pool_.block_size();
  const int64_t t_now = now();
  const int32_t root = index_.root(key.ns);
  int32_t parent = root;
  BlockHash h = key.ns;
  int64_t added = 0;
  for (int64_t i = 0; (i + 1) * bs <= n; ++i) {
    const auto blk = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    h = block_hash(h, blk);
    const int32_t found = index_.find_full(h);
    if (found != PrefixIndex::kNone) {
      // Already cached (borrowed by this sequence, or computed twice): share one copy.
      if (table.block(i) != BlockId{found}) {
        pool_.replace_block(table, i, BlockId{found});
        ++counters_.shared_on_insert;
      }
      parent = found;
      continue;
    }
    const BlockId b = table.block(i);
    PAGODA_CHECK(!pool_.is_cached(b), "PrefixCache::insert: block " + std::to_string(idx(b)) +
                                          " is cached with other tokens than the ones given for it");
    index_.add_block(parent, b, h, blk);
    pool_.mark_cached(b);
    last_used_.at(static_cast<size_t>(idx(b))) = t_now;
    ++added;
    if (disk_ && disk_->config().policy == DiskTierConfig::Policy::All) spill(idx(b));  // write-through
    drop_covered_partials(parent, blk);  // redundant now
    parent = idx(b);
  }
  const int64_t n_full = n / bs;
  if (finished && n % bs != 0) {
    const auto tail = tokens.subspan(static_cast<size_t>(n_full * bs));
    if (index_.covering_child(parent, tail) == PrefixIndex::kNone) {
      const BlockId b = table.block(n_full);
      PAGODA_CHECK(!pool_.is_cached(b), "PrefixCache::insert: block " + std::to_string(idx(b)) +
                                            " is cached with other tokens than the ones given for it");
      index_.add_block(parent, b, BlockHash{}, tail);
      pool_.mark_cached(b);
      last_used_.at(static_cast<size_t>(idx(b))) = t_now;
      ++added;
      for (int32_t c = index_.first_child(parent), next; c != PrefixIndex::kNone; c = next) {
        next = index_.next_sibling(c);
        if (c == idx(b) || index_.kind(c) != PrefixIndex::Kind::Partial) continue;
        const auto ct = index_.tokens(c);
        if (ct.size() < tail.size() && std::equal(ct.begin(), ct.end(), tail.begin())) {
          drop(BlockId{c});
          ++counters_.superseded_blocks;
        }
      }
    }
  }
  // Window companions: the local groups' held blocks of every indexed block of this table.
  if (n_local_ > 0 && !local.empty()) {
    PAGODA_CHECK(static_cast<int32_t>(local.size()) == n_local_, "PrefixCache::insert: " + std::to_string(local.size()) +
                                                                     " local tables for " + std::to_string(n_local_) +
                                                                     " local layer groups");
    const int64_t n_indexed = n_full + (finished && n % bs != 0 ? 1 : 0);
    for (int32_t g = 1; g <= n_local_; ++g) {
      const BlockTable& lt = local[static_cast<size_t>(g - 1)];
      for (int64_t j = lt.first_held_block(); j < std::min(n_indexed, lt.num_blocks()); ++j) {
        const BlockId owner = table.block(j);
        const BlockId lb = lt.block(j);
        if (!index_.contains(owner) || companion(idx(owner), g) >= 0 || pool_.is_cached(lb)) continue;
        pool_.mark_cached(lb);
        companion(idx(owner), g) = idx(lb);
        companion_of_.at(static_cast<size_t>(idx(lb))) = idx(owner);
        last_used_.at(static_cast<size_t>(idx(lb))) = t_now;
        ++n_companions_;
        ++added;
      }
    }
  }
  if (index_.kind(root) == PrefixIndex::Kind::Root) index_.prune_root(root);  // nothing added under it
  if (added > 0) {
    ++counters_.inserts;
    counters_.inserted_blocks += added;
  }
  enforce_limits();
}

// ---- eviction -----------------------------------------------------------------------------

void PrefixCache::spill(int32_t node, bool wait_for_room) {
  if (!disk_ || index_.kind(node) != PrefixIndex::Kind::Full) return;
  const std::span<const uint8_t> payload(pool_.block_bytes(BlockId{node}), pool_.bytes_per_block());
  if (io_) {
    // Copied: the block may be reused at once.
    io_->write(index_.hash(node), index_.tokens(node), payload,
               wait_for_room ? DiskIo::WhenFull::Wait : DiskIo::WhenFull::Drop);
  } else {
    disk_->put(index_.hash(node), index_.tokens(node), payload);
  }
}

void PrefixCache::drop_covered_partials(int32_t parent, std::span<const int32_t> full) {
  for (int32_t c = index_.first_child(parent), next; c != PrefixIndex::kNone; c = next) {
    next = index_.next_sibling(c);
    if (index_.kind(c) != PrefixIndex::Kind::Partial) continue;
    const auto ct = index_.tokens(c);
    if (std::equal(ct.begin(), ct.end(), full.begin())) {
      drop(BlockId{c});
      ++counters_.superseded_blocks;
    }
  }
}

int64_t PrefixCache::drop(BlockId b) {
  if (is_companion(b)) {
    unlink_companion(b);
    pool_.uncache(b);
    return 1;
  }
  // Every drop but a superseded partial block (never spilled: no hash) is an eviction.
  if (disk_ && disk_->config().policy == DiskTierConfig::Policy::Evict) spill(idx(b));
  const int64_t n = drop_companions(idx(b));
  index_.remove_block(b);
  pool_.uncache(b);
  return n + 1;
}

void PrefixCache::unlink_companion(BlockId b) {
  const int32_t owner = companion_of_[static_cast<size_t>(idx(b))];
  companion(owner, pool_.group_of(b)) = -1;
  companion_of_.at(static_cast<size_t>(idx(b))) = -1;
  --n_companions_;
}

int64_t PrefixCache::drop_companions(int32_t owner) {
  int64_t n = 0;
  for (int32_t g = 1; g <= n_local_; ++g) {
    const int32_t c = companion(owner, g);
    if (c < 0) continue;
    unlink_companion(BlockId{c});
    pool_.uncache(BlockId{c});
    ++n;
  }
  return n;
}

int64_t PrefixCache::drop_descendants(int32_t node) {
  int64_t dropped = 0;
  while (index_.num_children(node) > 0) {
    int32_t n = index_.first_child(node);
    while (index_.num_children(n) > 0) n = index_.first_child(n);
    dropped += drop(BlockId{n});
  }
  return dropped;
}

void PrefixCache::credit(Reason reason, int64_t entries, int64_t blocks) {
  counters_.evicted_blocks += blocks;
  switch (reason) {
    case Reason::Capacity: counters_.evictions_capacity += entries; break;
    case Reason::Ttl: counters_.evictions_ttl += entries; break;
    case Reason::MaxEntries: counters_.evictions_max_entries += entries; break;
    case Reason::PoolPressure: counters_.evictions_pool_pressure += entries; break;
  }
  if (reason != Reason::Ttl) counters_.evictions_lru += entries;
}

void PrefixCache::evict_entry(BlockId b, Reason reason) {
  if (is_companion(b)) {  // a window companion goes alone: later hits get shorter, no entry ends
    credit(reason, 0, drop(b));
    return;
  }
  const int64_t leaves_before = index_.num_leaves();
  int64_t blocks = drop_descendants(idx(b));  // none while invariant 2 holds
  int32_t n = idx(b);
  for (;;) {
    const int32_t parent = index_.parent(n);
    blocks += drop(BlockId{n});
    if (!index_.is_block(parent) || index_.num_children(parent) > 0 || pool_.refcount(BlockId{parent}) > 0) break;
    n = parent;
  }
  credit(reason, std::max<int64_t>(0, leaves_before - index_.num_leaves()), blocks);
}

void PrefixCache::expire_ttl() {
  const int64_t t = now();
  last_ttl_check_ms_ = t;
  if (config_.ttl_ms <= 0) return;
  while (auto head = pool_.oldest_evictable()) {
    if (t - last_used_[static_cast<size_t>(idx(*head))] < config_.ttl_ms) break;
    if (is_companion(*head)) {
      credit(Reason::Ttl, 0, drop(*head));
      continue;
    }
    const int64_t leaves_before = index_.num_leaves();
    int64_t blocks = drop_descendants(idx(*head));
    blocks += drop(*head);
    credit(Reason::Ttl, std::max<int64_t>(0, leaves_before - index_.num_leaves()), blocks);
  }
}

void PrefixCache::enforce_limits() {
  if (enforcing_) return;
  enforcing_ = true;
  expire_ttl();
  while (evictable_bytes() > config_.capacity_bytes) {
    const auto head = pool_.oldest_evictable();
    if (!head) break;
    evict_entry(*head, Reason::Capacity);
  }
  while (index_.num_leaves() > config_.max_entries) {
    const auto head = pool_.oldest_evictable();
    if (!head) break;
    evict_entry(*head, Reason::MaxEntries);
  }
  enforcing_ = false;
}

void PrefixCache::on_evictable(BlockId b) {
  last_used_.at(static_cast<size_t>(idx(b))) = now();
  enforce_limits();
}

void PrefixCache::on_evicted(BlockId b) {
  // The pool already took b (uncached, about to be reused): drop it from the index.
  if (is_companion(b)) {
    unlink_companion(b);
    credit(Reason::PoolPressure, 0, 1);
    return;
  }
  const int64_t leaves_before = index_.num_leaves();
  int64_t blocks = drop_descendants(idx(b)) + 1;
  blocks += drop_companions(idx(b));
  // The pool has not handed b out yet: its slab still holds the block.
  if (disk_ && disk_->config().policy == DiskTierConfig::Policy::Evict) spill(idx(b));
  index_.remove_block(b);
  credit(Reason::PoolPressure, std::max<int64_t>(0, leaves_before - index_.num_leaves()), blocks);
}

// ---- config, reset, stats ------------------------------------------------------------------

void PrefixCache::set_config(const PrefixCacheConfig& config) {
  config_ = config;
  if (!config_.enabled) drop_all();
  enforce_limits();
}

void PrefixCache::drop_all() {
  for (int32_t i = 0; i < static_cast<int32_t>(pool_.blocks_budget()); ++i)
    if (index_.contains(BlockId{i}) || is_companion(BlockId{i})) pool_.uncache(BlockId{i});
  index_.clear();
  companions_.reset();
  companion_of_.reset();
  n_companions_ = 0;
}

void PrefixCache::reset(CacheTier tier) {
  if (tier != CacheTier::Disk) {
    drop_all();
    ++counters_.resets;
  }
  if (tier != CacheTier::Ram && disk_) {
    if (io_) {  // queued spills would land after the reset; reads in flight finish first
      io_->discard_writes();
      io_->drain();
    }
    disk_->reset();
  }
}

void PrefixCache::set_disk_tier(DiskTier* disk) {
  PAGODA_CHECK(!disk || n_local_ == 0, "PrefixCache: no disk tier for sliding-window layer groups");
  disk_ = disk;
}

void PrefixCache::set_disk_io(DiskIo* io) {
  PAGODA_CHECK(!io || disk_, "PrefixCache: a disk I/O thread without a disk tier");
  PAGODA_CHECK(restores_.empty(), "PrefixCache: set_disk_io with restores outstanding");
  io_ = io;
}

void PrefixCache::flush_to_disk() {
  if (!disk_) return;
  if (io_) {  // restores in flight finish first
    io_->drain();
    poll_restores();
  }
  // Least recently used first, so the disk's LRU order continues the RAM's; then the
  // blocks running sequences still hold. Nothing is served meanwhile (shutdown), so a
  // full queue is waited for rather than dropped, unless the tier is stalled.
  for (BlockId b : pool_.evictable_list())
    if (index_.contains(b)) spill(idx(b), /*wait_for_room=*/true);
  for (int32_t i = 0; i < static_cast<int32_t>(pool_.blocks_budget()); ++i)
    if (index_.contains(BlockId{i}) && pool_.refcount(BlockId{i}) > 0) spill(i, /*wait_for_room=*/true);
  if (io_) io_->drain();
}

CacheStats PrefixCache::stats() const {
  CacheStats s = counters_;
  s.pool = pool_.stats();
  s.enabled = config_.enabled;
  s.entries = index_.num_leaves();
  s.cached_blocks = index_.num_blocks() + n_companions_;
  s.companion_blocks = n_companions_;
  s.cached_bytes = static_cast<uint64_t>(s.cached_blocks) * s.pool.bytes_per_block;
  s.evictable_blocks = s.pool.blocks_evictable;
  s.evictable_bytes = static_cast<uint64_t>(s.evictable_blocks) * s.pool.bytes_per_block;
  s.capacity_bytes = config_.capacity_bytes;
  s.max_entries = config_.max_entries;
  s.ttl_ms = config_.ttl_ms;
  s.min_prefix_tokens = config_.min_prefix_tokens;
  if (disk_) s.disk = disk_->stats();
  if (io_) io_->fill_stats(s.disk);
  s.disk.restore_timeouts = restore_timeouts_;
  return s;
}

void PrefixCache::check_invariants() const {
  pool_.check_invariants();
  index_.check_invariants();
  const int32_t n_blocks = static_cast<int32_t>(pool_.blocks_budget());
  int64_t cached = 0, companions = 0;
  for (int32_t i = 0; i < n_blocks; ++i) {
    const BlockId b{i};
    if (is_companion(b)) {
      const int32_t owner = companion_of_[static_cast<size_t>(i)];
      PAGODA_CHECK(!index_.contains(b) && pool_.is_cached(b) && index_.contains(BlockId{owner}) &&
                       pool_.group_of(b) >= 1 && pool_.group_of(b) <= n_local_ &&
                       companion(owner, pool_.group_of(b)) == i,
                   "PrefixCache: companion " + std::to_string(i) + " is not linked to a cached owner");
      ++cached, ++companions;
      continue;
    }
    PAGODA_CHECK(index_.contains(b) == pool_.is_cached(b),
                 "PrefixCache: block " + std::to_string(i) + (index_.contains(b) ? " indexed but not cached in the pool"
                                                                                  : " cached in the pool but not indexed"));
    if (!index_.contains(b)) continue;
    ++cached;
    const int32_t p = index_.parent(i);
    if (pool_.refcount(b) > 0 && index_.is_block(p))
      PAGODA_CHECK(pool_.refcount(BlockId{p}) > 0,
                   "PrefixCache: block " + std::to_string(i) + " is in use but its parent " + std::to_string(p) + " is not");
    if (index_.kind(i) == PrefixIndex::Kind::Partial) {
      const auto mine = index_.tokens(i);
      for (int32_t c = index_.first_child(p); c != PrefixIndex::kNone; c = index_.next_sibling(c)) {
        const auto other = index_.tokens(c);
        PAGODA_CHECK(c == i || other.size() < mine.size() || !std::equal(mine.begin(), mine.end(), other.begin()),
                     "PrefixCache: partial block " + std::to_string(i) + " is covered by sibling " + std::to_string(c));
      }
    }
  }
  // Evictable list: stamps non-decreasing, a child before its parent.
  const std::vector<BlockId> lru = pool_.evictable_list();
  std::vector<int64_t> pos(static_cast<size_t>(n_blocks), -1);
  for (size_t k = 0; k < lru.size(); ++k) {
    pos[static_cast<size_t>(idx(lru[k]))] = static_cast<int64_t>(k);
    if (k > 0)
      PAGODA_CHECK(last_used_[static_cast<size_t>(idx(lru[k - 1]))] <= last_used_[static_cast<size_t>(idx(lru[k]))],
                   "PrefixCache: evictable list out of last-used order at " + std::to_string(k));
  }
  for (BlockId b : lru) {
    if (is_companion(b)) continue;
    const int32_t p = index_.parent(idx(b));
    if (index_.is_block(p) && pos[static_cast<size_t>(p)] >= 0)
      PAGODA_CHECK(pos[static_cast<size_t>(p)] > pos[static_cast<size_t>(idx(b))],
                   "PrefixCache: evictable block " + std::to_string(idx(b)) + " comes after its parent");
  }
  // Limits and ledger.
  const CacheStats s = stats();
  PAGODA_CHECK(s.cached_blocks == cached && s.pool.blocks_cached == cached && s.companion_blocks == companions,
               "PrefixCache: cached block count drifted");
  for (int32_t o = 0; o < n_blocks && n_local_ > 0; ++o)
    for (int32_t g = 1; g <= n_local_; ++g)
      PAGODA_CHECK(companion(o, g) < 0 || companion_of_[static_cast<size_t>(companion(o, g))] == o,
                   "PrefixCache: owner " + std::to_string(o) + " lists a companion that is not its own");
  PAGODA_CHECK(s.evictable_blocks == static_cast<int64_t>(lru.size()), "PrefixCache: evictable count drifted");
  PAGODA_CHECK(s.cached_bytes == static_cast<uint64_t>(cached) * pool_.bytes_per_block() &&
                   s.evictable_bytes == lru.size() * pool_.bytes_per_block(),
               "PrefixCache: byte ledger drifted");
  PAGODA_CHECK(s.evictable_bytes <= config_.capacity_bytes, "PrefixCache: evictable bytes above the cap");
  PAGODA_CHECK(s.entries <= config_.max_entries || lru.empty(), "PrefixCache: too many entries while some are evictable");
  if (config_.ttl_ms > 0 && !lru.empty())
    PAGODA_CHECK(last_ttl_check_ms_ - last_used_[static_cast<size_t>(idx(lru.front()))] < config_.ttl_ms,
                 "PrefixCache: an expired block survived the last TTL check");
  if (!config_.enabled) PAGODA_CHECK(cached == 0, "PrefixCache: disabled but holding blocks");
}

}  // namespace pagoda
