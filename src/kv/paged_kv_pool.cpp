#include "kv/paged_kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace pagoda {

namespace {

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

}  // namespace

PagedKvPool::PagedKvPool(const KvGeometry& geometry, const KvConfig& config)
    : geo_(geometry), block_size_(config.block_size), k_type_(config.k_type), v_type_(config.v_type) {
  validate_kv_block_size(config.block_size);
  const bool per_slot = !geo_.slot_shapes.empty();
  if (geo_.n_layers < 1 || geo_.n_groups < 1 || (!per_slot && (geo_.n_kv_heads < 1 || geo_.head_dim < 1)) ||
      (per_slot && static_cast<int64_t>(geo_.slot_shapes.size()) != geo_.n_groups))
    throw Error("KV pool: invalid geometry (" + std::to_string(geo_.n_layers) + " layers, " +
                std::to_string(geo_.n_kv_heads) + " KV heads, head_dim " + std::to_string(geo_.head_dim) + ")");
  layout_.resize(static_cast<size_t>(geo_.n_groups));
  bytes_per_block_ = 0;
  for (int32_t g = 0; g < geo_.n_groups; ++g) {
    const int64_t n_slots = per_slot ? static_cast<int64_t>(geo_.slot_shapes[static_cast<size_t>(g)].size()) : geo_.n_layers;
    if (n_slots < 1 || n_slots > geo_.n_layers)
      throw Error("KV pool: layer group " + std::to_string(g) + " has " + std::to_string(n_slots) +
                  " slots (1 to " + std::to_string(geo_.n_layers) + ")");
    size_t offset = 0;
    for (int64_t s = 0; s < n_slots; ++s) {
      const KvSlotShape shape = per_slot ? geo_.slot_shapes[static_cast<size_t>(g)][static_cast<size_t>(s)]
                                         : KvSlotShape{geo_.n_kv_heads, geo_.head_dim};
      if (shape.n_kv_heads < 1 || shape.head_dim < 1)
        throw Error("KV pool: invalid slot shape (" + std::to_string(shape.n_kv_heads) + " KV heads, head_dim " +
                    std::to_string(shape.head_dim) + ")");
      for (KvType t : {k_type_, v_type_})
        if (!kv_type_supports(t, shape.head_dim))
          throw Error(std::string("KV type ") + kv_type_name(t) + " cannot store head_dim " +
                      std::to_string(shape.head_dim) + " (q4 needs a multiple of 8)");
      SlotLayout l;
      l.offset = offset;
      l.n_kv_heads = shape.n_kv_heads;
      l.head_dim = shape.head_dim;
      l.k_row = kv_row_bytes(k_type_, shape.head_dim);
      l.v_row = kv_row_bytes(v_type_, shape.head_dim);
      l.k_side = kv_row_sidecar_bytes(k_type_, shape.head_dim);
      l.v_side = kv_row_sidecar_bytes(v_type_, shape.head_dim);
      l.bytes = static_cast<size_t>(block_size_ * shape.n_kv_heads) * (l.k_row + l.k_side + l.v_row + l.v_side);
      offset += l.bytes;
      layout_[static_cast<size_t>(g)].push_back(l);
    }
    bytes_per_block_ = std::max(bytes_per_block_, offset);
  }
  if (config.budget_bytes == 0) throw Error("KV pool: the budget is not resolved (0 bytes)");
  const uint64_t blocks = config.budget_bytes / bytes_per_block_;
  if (blocks < 1)
    throw Error("--kv-cache-bytes: " + format_bytes(config.budget_bytes) + " is less than one KV block (" +
                format_bytes(bytes_per_block_) + " = " + std::to_string(block_size_) + " tokens)");
  if (blocks > static_cast<uint64_t>(kEvictableSentinel - 1))
    throw Error("--kv-cache-bytes: " + format_bytes(config.budget_bytes) + " makes more than 2^31 blocks");
  blocks_budget_ = static_cast<int64_t>(blocks);

  page_bytes_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  map_bytes_ = round_up(static_cast<uint64_t>(blocks_budget_) * bytes_per_block_, page_bytes_);
  void* p = mmap(nullptr, map_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error("KV pool: cannot reserve " + format_bytes(map_bytes_) + " of address space: " +
                std::strerror(errno));
  base_ = static_cast<uint8_t*>(p);
  // Page-exact accounting: a transparent huge page would commit 2 MiB on one touch.
  madvise(base_, map_bytes_, MADV_NOHUGEPAGE);

  for (auto* v : {&live_by_group_, &cached_by_group_, &evictable_by_group_}) v->assign(static_cast<size_t>(geo_.n_groups), 0);
  for (int32_t s : {free_sentinel(), evictable_sentinel()}) meta(s).prev = meta(s).next = s;
}

PagedKvPool::~PagedKvPool() {
  if (base_) munmap(base_, map_bytes_);
}

const PagedKvPool::SlotLayout& PagedKvPool::slot_layout(int layer, int32_t group) const {
  PAGODA_CHECK(group >= 0 && group < geo_.n_groups, "layer group " + std::to_string(group) + " out of range");
  const std::vector<SlotLayout>& slots = layout_[static_cast<size_t>(group)];
  PAGODA_CHECK(layer >= 0 && static_cast<size_t>(layer) < slots.size(),
               "layer " + std::to_string(layer) + " out of range (" + std::to_string(slots.size()) + " slots)");
  return slots[static_cast<size_t>(layer)];
}

size_t PagedKvPool::real_block_bytes(int layer, int32_t group) const { return slot_layout(layer, group).bytes; }

// ---- free and evictable lists ----------------------------------------------------------

void PagedKvPool::list_push_back(int32_t s, int32_t i) {
  const int32_t last = meta(s).prev;
  meta(i).prev = last;
  meta(i).next = s;
  meta(last).next = i;
  meta(s).prev = i;
}

void PagedKvPool::list_unlink(int32_t i) {
  BlockMeta& m = meta(i);
  meta(m.prev).next = m.next;
  meta(m.next).prev = m.prev;
  m.prev = m.next = -1;
}

std::vector<BlockId> PagedKvPool::list_of(int32_t s) const {
  std::vector<BlockId> out;
  for (int32_t i = meta(s).next; i != s; i = meta(i).next) out.push_back(BlockId{i});
  return out;
}

std::vector<BlockId> PagedKvPool::free_list() const { return list_of(free_sentinel()); }
std::vector<BlockId> PagedKvPool::evictable_list() const { return list_of(evictable_sentinel()); }

void PagedKvPool::to_free_list(int32_t i) {
  assert(meta(i).refcount == 0 && !meta(i).cached);
  tokens_in_use_ -= meta(i).num_tokens;
  meta(i).num_tokens = 0;
  list_push_back(free_sentinel(), i);
}

// ---- memory ------------------------------------------------------------------------------

uint64_t PagedKvPool::committed_bytes_for(int64_t n_blocks) const {
  return std::min<uint64_t>(round_up(static_cast<uint64_t>(n_blocks) * bytes_per_block_, page_bytes_), map_bytes_);
}

void PagedKvPool::commit_blocks(int64_t n_blocks) {
  assert(n_blocks >= blocks_committed_ && n_blocks <= blocks_budget_);
  const uint64_t want = committed_bytes_for(n_blocks);
  if (want > bytes_reserved_) {
    uint8_t* from = base_ + bytes_reserved_;
    const size_t len = want - bytes_reserved_;
    if (mprotect(from, len, PROT_READ | PROT_WRITE) != 0)
      PAGODA_CHECK(false, std::string("KV pool: mprotect failed: ") + std::strerror(errno));
    // Touch every page once so the kernel commits it now, where we count it.
    for (size_t off = 0; off < len; off += page_bytes_) reinterpret_cast<volatile uint8_t*>(from)[off] = 0;
    bytes_reserved_ = want;
  }
  blocks_committed_ = n_blocks;
  // The metadata grows with the committed prefix, not with the budget (a 1 MB model's
  // default budget is 600k blocks: 14 MiB of metadata nobody uses). Amortised doubling.
  if (static_cast<size_t>(n_blocks) > meta_.size()) {
    if (static_cast<size_t>(n_blocks) > meta_.capacity())
      meta_.reserve(std::min<size_t>(static_cast<size_t>(blocks_budget_), std::max<size_t>(64, 2 * meta_.capacity())));
    meta_.resize(static_cast<size_t>(n_blocks));
  }
}

uint64_t PagedKvPool::trim() {
  while (blocks_committed_ > 0 && meta(static_cast<int32_t>(blocks_committed_ - 1)).refcount == 0 &&
         !meta(static_cast<int32_t>(blocks_committed_ - 1)).cached) {
    list_unlink(static_cast<int32_t>(blocks_committed_ - 1));
    --blocks_committed_;
  }
  meta_.resize(static_cast<size_t>(blocks_committed_));  // its capacity stays
  const uint64_t keep = committed_bytes_for(blocks_committed_);
  if (keep >= bytes_reserved_) return 0;
  const uint64_t released = bytes_reserved_ - keep;
  madvise(base_ + keep, released, MADV_DONTNEED);
  mprotect(base_ + keep, released, PROT_NONE);
  bytes_reserved_ = keep;
  return released;
}

const uint8_t* PagedKvPool::block_bytes(BlockId b) const {
  PAGODA_CHECK(idx(b) >= 0 && idx(b) < blocks_committed_, "block " + std::to_string(idx(b)) + " is not committed");
  return slab(b);
}

// ---- single blocks -----------------------------------------------------------------------

void PagedKvPool::check_id(BlockId b, const char* what) const {
  PAGODA_CHECK(idx(b) >= 0 && idx(b) < blocks_budget_,
               std::string(what) + ": unknown block id " + std::to_string(idx(b)) + " (budget " +
                   std::to_string(blocks_budget_) + " blocks)");
}

uint8_t* PagedKvPool::fill_block(BlockId b, int n_tokens) {
  check_id(b, "fill_block");
  const BlockMeta& m = meta(idx(b));
  PAGODA_CHECK(m.refcount == 1 && !m.cached && n_tokens >= 0 && n_tokens <= block_size_,
               "fill_block: block " + std::to_string(idx(b)) + " is shared, cached or free, or " +
                   std::to_string(n_tokens) + " tokens do not fit");
  set_num_tokens(idx(b), n_tokens);
  return slab(b);
}

void PagedKvPool::set_num_tokens(int32_t i, int32_t n) {
  assert(n >= 0 && n <= block_size_ && meta(i).refcount > 0);
  tokens_in_use_ += n - meta(i).num_tokens;
  meta(i).num_tokens = n;
}

std::optional<BlockId> PagedKvPool::acquire(int32_t group) {
  PAGODA_CHECK(group >= 0 && group < geo_.n_groups, "acquire: layer group " + std::to_string(group) + " out of range");
  const int32_t fs = free_sentinel(), es = evictable_sentinel();
  int32_t i;
  if (meta(fs).next != fs) {
    i = meta(fs).next;
    list_unlink(i);
  } else if (blocks_committed_ < blocks_budget_) {
    i = static_cast<int32_t>(blocks_committed_);
    commit_blocks(blocks_committed_ + 1);
  } else if (meta(es).next != es) {
    // Pool pressure: the least recently released cached block gives way.
    i = meta(es).next;
    list_unlink(i);
    meta(i).cached = false;
    --blocks_cached_;
    --blocks_evictable_;
    --cached_by_group_[static_cast<size_t>(meta(i).group)];
    --evictable_by_group_[static_cast<size_t>(meta(i).group)];
    tokens_in_use_ -= meta(i).num_tokens;
    meta(i).num_tokens = 0;
    if (listener_) listener_->on_evicted(BlockId{i});
  } else {
    return std::nullopt;
  }
  assert(meta(i).refcount == 0 && meta(i).num_tokens == 0 && !meta(i).cached);
  meta(i).refcount = 1;
  meta(i).group = group;
  ++blocks_live_;
  ++live_by_group_[static_cast<size_t>(group)];
  return BlockId{i};
}

void PagedKvPool::share(BlockId b) {
  check_id(b, "share");
  PAGODA_CHECK(refcount(b) > 0 || is_cached(b), "share of free block " + std::to_string(idx(b)));
  BlockMeta& m = meta(idx(b));
  if (m.refcount == 0) {  // an evictable block comes back into use
    list_unlink(idx(b));
    --blocks_evictable_;
    ++blocks_live_;
    --evictable_by_group_[static_cast<size_t>(m.group)];
    ++live_by_group_[static_cast<size_t>(m.group)];
  }
  ++m.refcount;
}

void PagedKvPool::release(BlockId b) {
  check_id(b, "release");
  PAGODA_CHECK(refcount(b) > 0, "release of free block " + std::to_string(idx(b)) + " (double release?)");
  BlockMeta& m = meta(idx(b));
  if (--m.refcount > 0) return;
  --blocks_live_;
  --live_by_group_[static_cast<size_t>(m.group)];
  if (!m.cached) {
    to_free_list(idx(b));
    return;
  }
  list_push_back(evictable_sentinel(), idx(b));
  ++blocks_evictable_;
  ++evictable_by_group_[static_cast<size_t>(m.group)];
  if (listener_) listener_->on_evictable(b);
}

int PagedKvPool::refcount(BlockId b) const {
  check_id(b, "refcount");
  return meta(idx(b)).refcount;
}

int PagedKvPool::num_tokens(BlockId b) const {
  check_id(b, "num_tokens");
  return meta(idx(b)).num_tokens;
}

int32_t PagedKvPool::group_of(BlockId b) const {
  check_id(b, "group_of");
  return meta(idx(b)).group;
}

// ---- prefix-cache support -------------------------------------------------------------------

void PagedKvPool::set_cache_listener(BlockCacheListener* listener) {
  PAGODA_CHECK(listener == nullptr || listener_ == nullptr || listener_ == listener,
               "set_cache_listener: the pool already has a cache listener");
  listener_ = listener;
}

void PagedKvPool::mark_cached(BlockId b) {
  check_id(b, "mark_cached");
  BlockMeta& m = meta(idx(b));
  PAGODA_CHECK(m.refcount > 0 && !m.cached,
               "mark_cached: block " + std::to_string(idx(b)) + (m.cached ? " is already cached" : " is free"));
  m.cached = true;
  ++blocks_cached_;
  ++cached_by_group_[static_cast<size_t>(m.group)];
}

void PagedKvPool::uncache(BlockId b) {
  check_id(b, "uncache");
  BlockMeta& m = meta(idx(b));
  PAGODA_CHECK(m.cached, "uncache: block " + std::to_string(idx(b)) + " is not cached");
  m.cached = false;
  --blocks_cached_;
  --cached_by_group_[static_cast<size_t>(m.group)];
  if (m.refcount > 0) return;
  list_unlink(idx(b));
  --blocks_evictable_;
  --evictable_by_group_[static_cast<size_t>(m.group)];
  to_free_list(idx(b));
}

bool PagedKvPool::is_cached(BlockId b) const {
  check_id(b, "is_cached");
  return meta(idx(b)).cached;
}

std::optional<BlockId> PagedKvPool::oldest_evictable() const {
  const int32_t es = evictable_sentinel();
  if (meta(es).next == es) return std::nullopt;
  return BlockId{meta(es).next};
}

BlockTable PagedKvPool::borrow_table(std::span<const BlockId> blocks, int64_t n_tokens, int32_t group) {
  PAGODA_CHECK(n_tokens >= 0 && static_cast<int64_t>(blocks.size()) == blocks_for_tokens(n_tokens),
               "borrow_table: " + std::to_string(blocks.size()) + " blocks for " + std::to_string(n_tokens) +
                   " tokens");
  int64_t first = 0;
  while (first < static_cast<int64_t>(blocks.size()) && blocks[static_cast<size_t>(first)] == kNoBlock) ++first;
  PAGODA_CHECK(blocks.empty() || first < static_cast<int64_t>(blocks.size()),
               "borrow_table: every entry is released (kNoBlock)");
  for (size_t j = static_cast<size_t>(first); j < blocks.size(); ++j) {
    check_id(blocks[j], "borrow_table");
    PAGODA_CHECK(meta(idx(blocks[j])).group == group,
                 "borrow_table: block " + std::to_string(idx(blocks[j])) + " belongs to layer group " +
                     std::to_string(meta(idx(blocks[j])).group) + ", not " + std::to_string(group));
  }
  BlockTable out(group);
  out.blocks_.assign(blocks.begin(), blocks.end());
  out.num_tokens_ = n_tokens;
  out.first_held_ = first;
  for (size_t j = static_cast<size_t>(first); j < blocks.size(); ++j) share(blocks[j]);
  return out;
}

void PagedKvPool::replace_block(BlockTable& table, int64_t block_idx, BlockId with) {
  PAGODA_CHECK(block_idx >= table.first_held_ && (block_idx + 1) * block_size_ <= table.num_tokens_,
               "replace_block: block " + std::to_string(block_idx) + " is not a full, held block of the table");
  check_id(with, "replace_block");
  PAGODA_CHECK(meta(idx(with)).group == table.group_, "replace_block: the block belongs to another layer group");
  BlockId& slot = table.blocks_[static_cast<size_t>(block_idx)];
  if (slot == with) return;
  share(with);
  const BlockId old = slot;
  slot = with;
  release(old);
}

// ---- tables ------------------------------------------------------------------------------

std::optional<std::string> PagedKvPool::never_fits(int64_t n_tokens) const {
  const int64_t need = blocks_for_tokens(n_tokens);
  if (need <= blocks_budget_) return std::nullopt;
  return "a sequence of " + std::to_string(n_tokens) + " tokens needs " + std::to_string(need) +
         " KV blocks (" + std::to_string(block_size_) + " tokens, " + format_bytes(bytes_per_block_) +
         " each) but the whole KV budget is " + std::to_string(blocks_budget_) + " blocks (" +
         std::to_string(blocks_budget_ * block_size_) + " tokens, " +
         format_bytes(static_cast<uint64_t>(blocks_budget_) * bytes_per_block_) +
         "); raise --kv-cache-bytes or shorten the request";
}

int64_t PagedKvPool::blocks_needed(const BlockTable& table, int64_t n_new) const {
  const int64_t old = table.num_tokens_;
  int64_t need = blocks_for_tokens(old + n_new) - table.num_blocks();
  if (n_new > 0 && old % block_size_ != 0) {
    const BlockMeta& tail = meta(idx(table.blocks_.back()));
    if (tail.refcount > 1 || tail.cached) ++need;
  }
  return need;
}

AllocResult PagedKvPool::append_tokens(BlockTable& table, int64_t n_new) {
  PAGODA_CHECK(n_new >= 0, "append_tokens: negative count");
  AllocResult r;
  const int64_t old = table.num_tokens_;
  const int64_t total = old + n_new;
  if (auto msg = never_fits(total)) {
    r.status = AllocResult::Status::NeverFits;
    r.blocks_needed = blocks_for_tokens(total);
    r.blocks_available = blocks_budget_;
    r.message = *msg;
    return r;
  }
  const int64_t need = blocks_needed(table, n_new);
  const int64_t avail = blocks_budget_ - blocks_live_;
  r.blocks_needed = need;
  r.blocks_available = avail;
  if (need > avail) {
    r.status = AllocResult::Status::OutOfBlocks;
    r.message = "out of KV blocks: " + std::to_string(n_new) + " more tokens need " + std::to_string(need) +
                " blocks, " + std::to_string(avail) + " free";
    return r;
  }
  if (n_new == 0) return r;
  // Copy-on-write of a shared or cached, partly filled tail block: the copy takes this
  // table's tokens of that block; the original keeps its other holders and its contents.
  if (old % block_size_ != 0) {
    const BlockId tail = table.blocks_.back();
    if (meta(idx(tail)).refcount > 1 || meta(idx(tail)).cached) {
      const BlockId copy = *acquire(table.group_);
      std::memcpy(slab(copy), slab(tail), bytes_per_block_);
      release(tail);
      table.blocks_.back() = copy;
    }
  }
  while (table.num_blocks() < blocks_for_tokens(total)) table.blocks_.push_back(*acquire(table.group_));
  for (int64_t j = old / block_size_; j < table.num_blocks(); ++j)
    set_num_tokens(idx(table.blocks_[static_cast<size_t>(j)]),
                   static_cast<int32_t>(std::min<int64_t>(block_size_, total - j * block_size_)));
  table.num_tokens_ = total;
  return r;
}

BlockTable PagedKvPool::fork(const BlockTable& table) {
  BlockTable out(table.group_);
  out.blocks_ = table.blocks_;
  out.num_tokens_ = table.num_tokens_;
  out.first_held_ = table.first_held_;
  for (size_t j = static_cast<size_t>(table.first_held_); j < out.blocks_.size(); ++j) share(out.blocks_[j]);
  return out;
}

void PagedKvPool::truncate(BlockTable& table, int64_t n_tokens) {
  PAGODA_CHECK(n_tokens >= 0 && n_tokens <= table.num_tokens_,
               "truncate to " + std::to_string(n_tokens) + " of a table of " + std::to_string(table.num_tokens_) +
                   " tokens");
  const int64_t keep = blocks_for_tokens(n_tokens);
  PAGODA_CHECK(keep == 0 || keep > table.first_held_,
               "truncate to " + std::to_string(n_tokens) + " tokens: block " + std::to_string(keep - 1) +
                   " was released by the sliding window (a table cannot be rewound past its window)");
  while (table.num_blocks() > keep) {
    if (table.num_blocks() > table.first_held_) release(table.blocks_.back());
    table.blocks_.pop_back();
  }
  if (keep == 0) table.first_held_ = 0;
  table.num_tokens_ = n_tokens;
  if (keep > 0) {
    const int32_t tail = idx(table.blocks_.back());
    if (meta(tail).refcount == 1 && !meta(tail).cached)
      set_num_tokens(tail, static_cast<int32_t>(n_tokens - (keep - 1) * block_size_));
  }
}

void PagedKvPool::free(BlockTable& table) { truncate(table, 0); }

int64_t PagedKvPool::release_before(BlockTable& table, int64_t pos) {
  const int64_t end = std::min(pos / block_size_, table.num_blocks() - 1);  // the last entry stays held
  int64_t released = 0;
  for (; table.first_held_ < end; ++table.first_held_, ++released) {
    BlockId& e = table.blocks_[static_cast<size_t>(table.first_held_)];
    release(e);
    e = kNoBlock;
  }
  return released;
}

// ---- data --------------------------------------------------------------------------------

KvLayerView PagedKvPool::layer_view(int layer, int32_t group) const {
  const SlotLayout& sl = slot_layout(layer, group);
  KvLayerView v;
  v.base = base_ + sl.offset;
  v.block_stride = bytes_per_block_;
  v.k_type = k_type_;
  v.v_type = v_type_;
  v.block_size = block_size_;
  v.n_kv_heads = sl.n_kv_heads;
  v.head_dim = sl.head_dim;
  v.k_row_bytes = sl.k_row;
  v.v_row_bytes = sl.v_row;
  v.k_side_row_bytes = sl.k_side;
  v.v_side_row_bytes = sl.v_side;
  const size_t rows = static_cast<size_t>(block_size_ * sl.n_kv_heads);
  v.v_offset = rows * sl.k_row;
  v.k_side_offset = v.v_offset + rows * sl.v_row;
  v.v_side_offset = v.k_side_offset + rows * sl.k_side;
  v.k_transposed = kv_k_transposed(k_type_, sl.head_dim);
  return v;
}

void PagedKvPool::write_token(const BlockTable& table, int layer, int64_t pos, const float* k, const float* v) {
  PAGODA_CHECK(pos >= 0 && pos < table.num_tokens_,
               "write_token: position " + std::to_string(pos) + " outside the table's " +
                   std::to_string(table.num_tokens_) + " slots");
  PAGODA_CHECK(table.holds(pos / block_size_),
               "write_token: position " + std::to_string(pos) + " lies in a block the sliding window released");
  const BlockId b = table.blocks_[static_cast<size_t>(pos / block_size_)];
  PAGODA_CHECK(meta(idx(b)).refcount == 1 && !meta(idx(b)).cached,
               "write_token: block " + std::to_string(idx(b)) + " is shared (refcount " +
                   std::to_string(meta(idx(b)).refcount) + ") or cached; append_tokens makes it private first");
  const KvLayerView lv = layer_view(layer, table.group_);
  uint8_t* lb = const_cast<uint8_t*>(lv.layer(b));
  const int64_t slot = pos % block_size_;
  const int64_t hd = lv.head_dim;
  // A transposed K (kv_k_transposed) is encoded once, then its elements scattered to their
  // columns: head_dim stores of 2-4 bytes, block_size elements apart.
  alignas(64) uint8_t k_row[256 * 4];
  const size_t k_es = lv.k_transposed ? lv.k_row_bytes / static_cast<size_t>(hd) : 0;
  for (int64_t h = 0; h < lv.n_kv_heads; ++h) {
    const int64_t row = h * block_size_ + slot;
    if (lv.k_transposed) {
      kv_quantize_row(k_type_, k + h * hd, hd, k_row, nullptr);
      uint8_t* kt = lb + h * block_size_ * lv.k_row_bytes;
      auto scatter = [&]<size_t ES>() {  // fixed-size copies, not a memcpy call each
        for (int64_t d = 0; d < hd; ++d)
          std::memcpy(kt + static_cast<size_t>(d * block_size_ + slot) * ES, k_row + d * ES, ES);
      };
      if (k_es == 2) scatter.template operator()<2>();
      else scatter.template operator()<4>();
    } else {
      kv_quantize_row(k_type_, k + h * hd, hd, lb + row * lv.k_row_bytes, lb + lv.k_side_offset + row * lv.k_side_row_bytes);
    }
    kv_quantize_row(v_type_, v + h * hd, hd, lb + lv.v_offset + row * lv.v_row_bytes,
                    lb + lv.v_side_offset + row * lv.v_side_row_bytes);
  }
}

void PagedKvPool::read_row(const BlockTable& table, int layer, int64_t pos, int64_t kv_head, bool value,
                           float* out) const {
  const KvLayerView lv = layer_view(layer, table.group_);
  PAGODA_CHECK(pos >= 0 && pos < table.num_tokens_ && kv_head >= 0 && kv_head < lv.n_kv_heads,
               "read_row: out of range");
  PAGODA_CHECK(table.holds(pos / block_size_), "read_row: position " + std::to_string(pos) + " was released");
  const BlockId b = table.blocks_[static_cast<size_t>(pos / block_size_)];
  const int64_t slot = pos % block_size_;
  if (!value)
    kv_read_k_row(lv, b, kv_head, slot, out);
  else
    kv_dequantize_row_ref(v_type_, lv.v_rows(b, kv_head) + slot * lv.v_row_bytes,
                          lv.v_side(b, kv_head) + slot * lv.v_side_row_bytes, lv.head_dim, out);
}

// ---- accounting --------------------------------------------------------------------------

PoolStats PagedKvPool::stats() const {
  PoolStats s;
  s.block_size = block_size_;
  s.blocks_budget = blocks_budget_;
  s.blocks_committed = blocks_committed_;
  s.blocks_live = blocks_live_;
  s.blocks_cached = blocks_cached_;
  s.blocks_evictable = blocks_evictable_;
  s.blocks_free = blocks_budget_ - blocks_live_ - blocks_evictable_;
  s.blocks_available = blocks_budget_ - blocks_live_;
  s.bytes_per_block = bytes_per_block_;
  s.bytes_budget = static_cast<uint64_t>(blocks_budget_) * bytes_per_block_;
  s.bytes_reserved = bytes_reserved_;
  s.bytes_in_use = static_cast<uint64_t>(blocks_live_ + blocks_evictable_) * bytes_per_block_;
  s.tokens_capacity = blocks_budget_ * block_size_;
  s.tokens_in_use = tokens_in_use_;
  s.blocks_live_by_group = live_by_group_;
  s.blocks_cached_by_group = cached_by_group_;
  s.blocks_evictable_by_group = evictable_by_group_;
  return s;
}

void PagedKvPool::check_invariants() const {
  // listed[i]: 0 none, 1 free list, 2 evictable list.
  PAGODA_CHECK(meta_.size() == static_cast<size_t>(blocks_committed_), "metadata does not cover exactly the committed blocks");
  std::vector<uint8_t> listed(static_cast<size_t>(blocks_budget_), 0);
  int64_t list_len[3] = {0, 0, 0};
  for (int kind : {1, 2}) {
    const int32_t s = kind == 1 ? free_sentinel() : evictable_sentinel();
    int32_t prev = s;
    for (int32_t i = meta(s).next; i != s; prev = i, i = meta(i).next) {
      PAGODA_CHECK(i >= 0 && i < static_cast<int32_t>(blocks_budget_), "list holds an invalid index " + std::to_string(i));
      PAGODA_CHECK(meta(i).prev == prev, "list back link broken at " + std::to_string(i));
      PAGODA_CHECK(!listed[i], "block " + std::to_string(i) + " is listed twice (cycle or on both lists)");
      listed[i] = static_cast<uint8_t>(kind);
      PAGODA_CHECK(++list_len[kind] <= blocks_budget_, "list longer than the pool");
    }
    PAGODA_CHECK(meta(s).prev == prev, "list tail link broken");
  }
  int64_t live = 0, cached = 0, tokens = 0;
  const size_t n_groups = static_cast<size_t>(geo_.n_groups);
  std::vector<int64_t> live_g(n_groups, 0), cached_g(n_groups, 0), evictable_g(n_groups, 0);
  for (int32_t i = 0; i < static_cast<int32_t>(blocks_budget_); ++i) {
    const BlockMeta& m = meta(i);
    PAGODA_CHECK(m.refcount >= 0 && m.num_tokens >= 0 && m.num_tokens <= block_size_,
                 "block " + std::to_string(i) + " has refcount/num_tokens out of range");
    if (i >= blocks_committed_) {
      PAGODA_CHECK(m.refcount == 0 && m.num_tokens == 0 && !m.cached && !listed[i],
                   "uncommitted block " + std::to_string(i) + " is in use, cached or listed");
      continue;
    }
    const uint8_t want = m.refcount > 0 ? 0 : (m.cached ? 2 : 1);
    PAGODA_CHECK(listed[i] == want, "block " + std::to_string(i) + ": refcount " + std::to_string(m.refcount) +
                                        (m.cached ? ", cached" : "") + ", but list " + std::to_string(listed[i]));
    PAGODA_CHECK(m.group >= 0 && m.group < geo_.n_groups, "block " + std::to_string(i) + " has no valid group");
    if (m.cached) ++cached, ++cached_g[static_cast<size_t>(m.group)];
    if (m.refcount > 0) ++live, ++live_g[static_cast<size_t>(m.group)];
    if (m.refcount == 0 && m.cached) ++evictable_g[static_cast<size_t>(m.group)];
    if (m.refcount > 0 || m.cached) {
      tokens += m.num_tokens;
    } else {
      PAGODA_CHECK(m.num_tokens == 0, "free block " + std::to_string(i) + " holds tokens");
    }
  }
  PAGODA_CHECK(live == blocks_live_, "blocks_live " + std::to_string(blocks_live_) + " != counted " + std::to_string(live));
  PAGODA_CHECK(cached == blocks_cached_, "blocks_cached " + std::to_string(blocks_cached_) + " != counted " + std::to_string(cached));
  PAGODA_CHECK(list_len[2] == blocks_evictable_, "blocks_evictable does not match the evictable list");
  PAGODA_CHECK(list_len[1] == blocks_committed_ - live - blocks_evictable_,
               "free list length does not match committed - live - evictable");
  PAGODA_CHECK(tokens == tokens_in_use_, "tokens_in_use " + std::to_string(tokens_in_use_) + " != counted " + std::to_string(tokens));
  PAGODA_CHECK(bytes_reserved_ == committed_bytes_for(blocks_committed_), "bytes_reserved does not cover the committed blocks");
  PAGODA_CHECK(live_g == live_by_group_ && cached_g == cached_by_group_ && evictable_g == evictable_by_group_,
               "per-group block counts drifted from a recount");
}

void PagedKvPool::check_table(const BlockTable& table) const {
  PAGODA_CHECK(table.num_blocks() == blocks_for_tokens(table.num_tokens_),
               "table has " + std::to_string(table.num_blocks()) + " blocks for " + std::to_string(table.num_tokens_) +
                   " tokens");
  PAGODA_CHECK(table.first_held_ >= 0 && (table.blocks_.empty() ? table.first_held_ == 0
                                                                   : table.first_held_ < table.num_blocks()),
               "table releases " + std::to_string(table.first_held_) + " of its " +
                   std::to_string(table.num_blocks()) + " entries (the last must stay held)");
  for (int64_t j = 0; j < table.num_blocks(); ++j) {
    const BlockId b = table.blocks_[static_cast<size_t>(j)];
    if (j < table.first_held_) {
      PAGODA_CHECK(b == kNoBlock, "table entry " + std::to_string(j) + " before first_held is not kNoBlock");
      continue;
    }
    check_id(b, "check_table");
    PAGODA_CHECK(meta(idx(b)).refcount > 0, "table lists free block " + std::to_string(idx(b)));
    PAGODA_CHECK(meta(idx(b)).group == table.group_,
                 "table of group " + std::to_string(table.group_) + " lists block " + std::to_string(idx(b)) +
                     " of group " + std::to_string(meta(idx(b)).group));
  }
}

}  // namespace pagoda
