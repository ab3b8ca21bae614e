#include "kv/paged_kv_store.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/paged_attention.h"

namespace pagoda {

namespace {

// One group of the pool's slots (their shapes too, when they differ).
KvLayerGroups one_group(const PagedKvPool& pool) {
  KvLayerGroups g = KvLayerGroups::uniform(pool.geometry().n_layers);
  g.slot_shapes = pool.geometry().slot_shapes;
  return g;
}

}  // namespace

PagedKvStore::PagedKvStore(PagedKvPool& pool) : PagedKvStore(pool, one_group(pool)) {}

PagedKvStore::PagedKvStore(PagedKvPool& pool, KvLayerGroups groups) : pool_(pool), groups_(std::move(groups)) {
  PAGODA_CHECK(groups_.page_layers == pool_.geometry().n_layers && groups_.n_groups() == pool_.geometry().n_groups &&
                   groups_.slot_shapes == pool_.geometry().slot_shapes,
               "PagedKvStore: the layer groups (" + std::to_string(groups_.n_groups()) + " of " +
                   std::to_string(groups_.page_layers) + " slots) do not match the pool's geometry");
}

PagedKvStore::~PagedKvStore() {
  for (auto& [seq, t] : tables_) {
    pool_.free(t.main);
    for (BlockTable& l : t.local) pool_.free(l);
  }
}

SeqTables PagedKvStore::empty_tables() const {
  SeqTables t;
  for (int32_t g = 1; g < groups_.n_groups(); ++g) t.local.emplace_back(g);
  return t;
}

const SeqTables& PagedKvStore::tables_checked(SeqId seq, const char* what) const {
  auto it = tables_.find(seq);
  PAGODA_CHECK(it != tables_.end(), std::string(what) + ": unknown sequence " + std::to_string(seq));
  return it->second;
}

const BlockTable& PagedKvStore::table(SeqId seq) const { return tables_checked(seq, "table").main; }

BlockTable& PagedKvStore::mutable_table(SeqId seq) {
  return const_cast<SeqTables&>(tables_checked(seq, "mutable_table")).main;
}

const SeqTables& PagedKvStore::tables(SeqId seq) const { return tables_checked(seq, "tables"); }

SeqTables& PagedKvStore::mutable_tables(SeqId seq) { return const_cast<SeqTables&>(tables_checked(seq, "mutable_tables")); }

const BlockTable& PagedKvStore::layer_table(SeqId seq, int layer, int64_t first_pos, const char* what) const {
  PAGODA_CHECK(layer >= 0 && layer < groups_.n_layers(), std::string(what) + ": layer " + std::to_string(layer) +
                                                             " out of range");
  const int32_t g = groups_.group[static_cast<size_t>(layer)];
  const BlockTable& t = tables_checked(seq, what).group(g);
  const int64_t w = groups_.window[static_cast<size_t>(g)];
  const int64_t begin = w > 0 ? std::max<int64_t>(0, first_pos - w + 1) : 0;
  PAGODA_CHECK(t.num_blocks() == 0 || begin / pool_.block_size() >= t.first_held_block(),
               std::string(what) + ": position " + std::to_string(first_pos) + " of sequence " + std::to_string(seq) +
                   " reads a block its window already released");
  return t;
}

std::optional<std::string> PagedKvStore::never_fits(int64_t n_tokens) const {
  if (!groups_.windowed()) return pool_.never_fits(n_tokens);
  const int64_t need = groups_.n_groups() * pool_.blocks_for_tokens(n_tokens);
  if (need <= pool_.blocks_budget()) return std::nullopt;
  return "a sequence of " + std::to_string(n_tokens) + " tokens needs " + std::to_string(need) + " KV blocks (" +
         std::to_string(groups_.n_groups()) + " layer groups x " + std::to_string(pool_.blocks_for_tokens(n_tokens)) +
         ", " + format_bytes(pool_.bytes_per_block()) + " each) but the whole KV budget is " +
         std::to_string(pool_.blocks_budget()) + " blocks (" +
         format_bytes(static_cast<uint64_t>(pool_.blocks_budget()) * pool_.bytes_per_block()) +
         "); raise --kv-cache-bytes or shorten the request";
}

AllocResult PagedKvStore::reserve(SeqId seq, int64_t n_tokens) {
  auto [it, created] = tables_.try_emplace(seq);
  if (created) it->second = empty_tables();
  SeqTables& t = it->second;
  const int64_t n_new = std::max<int64_t>(0, n_tokens - t.main.num_tokens());
  if (!groups_.windowed()) {
    AllocResult r = pool_.append_tokens(t.main, n_new);
    if (!r.ok() && created) tables_.erase(it);
    return r;
  }
  // All groups or none: count first, then append (each append then succeeds).
  AllocResult r;
  // Never fits: even alone in the pool, the tables would hold more than the budget. A
  // local table holds only from its first held block on (what its window released stays
  // released), so a long decode is not ended for blocks it gave back.
  const int64_t n_total = t.main.num_tokens() + n_new;
  int64_t alone = 0;
  for (int32_t g = 0; g < groups_.n_groups(); ++g)
    alone += pool_.blocks_for_tokens(n_total) - t.group(g).first_held_block();
  if (alone > pool_.blocks_budget()) {
    r.status = AllocResult::Status::NeverFits;
    r.blocks_needed = alone;
    r.blocks_available = pool_.blocks_budget();
    r.message = "a sequence of " + std::to_string(n_total) + " tokens needs " + std::to_string(alone) +
                " KV blocks in " + std::to_string(groups_.n_groups()) + " layer groups but the whole KV budget is " +
                std::to_string(pool_.blocks_budget()) + " blocks; raise --kv-cache-bytes or shorten the request";
  } else {
    for (int32_t g = 0; g < groups_.n_groups(); ++g) r.blocks_needed += pool_.blocks_needed(t.group(g), n_new);
    r.blocks_available = pool_.blocks_available();
    if (r.blocks_needed > r.blocks_available) {
      r.status = AllocResult::Status::OutOfBlocks;
      r.message = "out of KV blocks: " + std::to_string(n_new) + " more tokens need " +
                  std::to_string(r.blocks_needed) + " blocks in " + std::to_string(groups_.n_groups()) +
                  " layer groups, " + std::to_string(r.blocks_available) + " free";
    }
  }
  if (!r.ok()) {
    if (created) tables_.erase(it);
    return r;
  }
  for (int32_t g = 0; g < groups_.n_groups(); ++g) {
    const AllocResult one = pool_.append_tokens(t.group(g), n_new);
    PAGODA_CHECK(one.ok(), "reserve: a counted reservation failed: " + one.message);
  }
  return r;
}

void PagedKvStore::adopt(SeqId seq, BlockTable&& table, std::vector<BlockTable>&& local) {
  PAGODA_CHECK(!contains(seq), "adopt: sequence " + std::to_string(seq) + " already exists");
  SeqTables t = empty_tables();
  if (local.empty()) {
    PAGODA_CHECK(!groups_.windowed() || table.num_tokens() == 0,
                 "adopt: a windowed sequence needs the tables of its local layer groups");
  } else {
    PAGODA_CHECK(static_cast<int32_t>(local.size()) == groups_.n_groups() - 1,
                 "adopt: " + std::to_string(local.size()) + " local tables for " +
                     std::to_string(groups_.n_groups() - 1) + " local layer groups");
    for (BlockTable& l : t.local) pool_.free(l);
    t.local = std::move(local);
  }
  // A hybrid model's K/V is only half of its prefix: the recurrent state at the same
  // position must come with it (a snapshot), or the sequence starts empty.
  PAGODA_CHECK(!recurrent_.enabled() || table.num_tokens() == recurrent_.pos(seq),
               "adopt: " + std::to_string(table.num_tokens()) + " cached positions without the recurrent state at " +
                   "that position");
  t.main = std::move(table);
  tables_.emplace(seq, std::move(t));
  check_tables(seq);
}

void PagedKvStore::check_tables(SeqId seq) const {
  const SeqTables& t = tables_checked(seq, "check_tables");
  for (int32_t g = 0; g < groups_.n_groups(); ++g) {
    const BlockTable& x = t.group(g);
    pool_.check_table(x);
    PAGODA_CHECK(x.group() == g, "check_tables: table of group " + std::to_string(x.group()) + " in slot " +
                                     std::to_string(g));
    PAGODA_CHECK(x.num_tokens() == t.main.num_tokens(),
                 "check_tables: group " + std::to_string(g) + " holds " + std::to_string(x.num_tokens()) +
                     " positions, group 0 " + std::to_string(t.main.num_tokens()));
    if (g == 0) PAGODA_CHECK(x.first_held_block() == 0, "check_tables: group 0 released blocks");
  }
}

void PagedKvStore::fork(SeqId src, SeqId dst) {
  PAGODA_CHECK(!contains(dst), "fork: sequence " + std::to_string(dst) + " already exists");
  const SeqTables& s = tables_checked(src, "fork");
  SeqTables copy;
  copy.main = pool_.fork(s.main);
  for (const BlockTable& l : s.local) copy.local.push_back(pool_.fork(l));
  tables_.emplace(dst, std::move(copy));
  if (recurrent_.enabled() && recurrent_.contains(src)) recurrent_.copy(src, dst);
}

void PagedKvStore::truncate(SeqId seq, int64_t n_tokens) {
  auto it = tables_.find(seq);
  PAGODA_CHECK(it != tables_.end(), "truncate: unknown sequence " + std::to_string(seq));
  SeqTables& t = it->second;
  if (recurrent_.enabled() && recurrent_.pos(seq) > n_tokens)
    throw Error("cannot truncate sequence " + std::to_string(seq) + " to " + std::to_string(n_tokens) +
                " tokens: its recurrent state has absorbed " + std::to_string(recurrent_.pos(seq)) +
                " and cannot be rewound");
  for (int32_t g = 1; g < groups_.n_groups() && n_tokens > 0; ++g) {
    const int64_t w = groups_.window[static_cast<size_t>(g)];
    const int64_t need = std::max<int64_t>(0, n_tokens - w) / pool_.block_size();  // the window at n_tokens
    if (need < t.group(g).first_held_block())
      throw Error("cannot truncate sequence " + std::to_string(seq) + " to " + std::to_string(n_tokens) +
                  " tokens: its sliding-window layers already released the positions that window reads");
  }
  for (int32_t g = 0; g < groups_.n_groups(); ++g) pool_.truncate(t.group(g), n_tokens);
}

int64_t PagedKvStore::release_out_of_window(SeqId seq, int64_t next_pos) {
  if (!groups_.windowed()) return 0;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return 0;
  int64_t released = 0;
  for (int32_t g = 1; g < groups_.n_groups(); ++g) {
    const int64_t keep_from = next_pos - groups_.window[static_cast<size_t>(g)] + 1 - pool_.block_size();
    if (keep_from > 0) released += pool_.release_before(it->second.group(g), keep_from);
  }
  return released;
}

int64_t PagedKvStore::blocks_held(SeqId seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return 0;
  int64_t n = 0;
  for (int32_t g = 0; g < groups_.n_groups(); ++g) n += it->second.group(g).num_held_blocks();
  return n;
}

void PagedKvStore::remove(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  pool_.free(it->second.main);
  for (BlockTable& l : it->second.local) pool_.free(l);
  tables_.erase(it);
  recurrent_.erase(seq);
}

int64_t PagedKvStore::capacity(SeqId seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? 0 : it->second.main.num_tokens();
}

void PagedKvStore::store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) {
  pool_.write_token(layer_table(seq, layer, pos, "store"), groups_.slot[static_cast<size_t>(layer)], pos, k, v);
}

namespace {

// Partial attention of a (token, KV head) row over [p0, p1) with the layer's soft-cap.
void attend_range(const KvLayerView& view, const BlockId* blocks, int64_t p0, int64_t p1, int64_t kv_head,
                  const float* q, int n_q, float scale, float softcap, float* o, float* m, float* l) {
  if (softcap > 0.0f)
    paged_attend_partial_softcap(view, blocks, p0, p1, kv_head, q, n_q, scale, softcap, o, m, l);
  else
    paged_attend_partial(view, blocks, p0, p1, kv_head, q, n_q, scale, o, m, l);
}

// First position a query at `pos` sees with window w (0: the whole prefix).
int64_t window_begin(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

}  // namespace

void PagedKvStore::attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q, int n_q_heads,
                          float scale, float* out, int64_t window, float softcap, const float* sinks) const {
  const BlockTable& t = layer_table(seq, layer, pos, "attend");
  PAGODA_CHECK(pos >= 0 && pos < t.num_tokens(), "attend: position " + std::to_string(pos) + " not reserved");
  const KvLayerView view = pool_.layer_view(groups_.slot[static_cast<size_t>(layer)], groups_.group[static_cast<size_t>(layer)]);
  if (window <= 0 && softcap <= 0.0f && !sinks) {
    paged_attend(view, t.blocks().data(), pos + 1, kv_head, q, n_q_heads, scale, out);
    return;
  }
  constexpr int kGroup = 64;
  float m[kGroup], l[kGroup];
  const int64_t hd = view.head_dim;
  for (int h0 = 0; h0 < n_q_heads; h0 += kGroup) {
    const int g = std::min(kGroup, n_q_heads - h0);
    attend_range(view, t.blocks().data(), window_begin(pos, window), pos + 1, kv_head,
                 q + h0 * hd, g, scale, softcap, out + h0 * hd, m, l);
    for (int h = 0; h < g; ++h) {
      const float inv = 1.0f / attention_denominator(l[h], m[h], sinks ? sinks + h0 + h : nullptr);
      for (int64_t i = 0; i < hd; ++i) out[(h0 + h) * hd + i] *= inv;
    }
  }
}

void PagedKvStore::attend_batch(int layer, const AttnBatch& b, ThreadPool& pool) {
  const int64_t n_kv = b.n_kv_heads, hd = b.head_dim;
  PAGODA_CHECK(layer >= 0 && layer < groups_.n_layers(), "attend_batch: layer " + std::to_string(layer) + " out of range");
  const KvLayerView view = pool_.layer_view(groups_.slot[static_cast<size_t>(layer)], groups_.group[static_cast<size_t>(layer)]);
  PAGODA_CHECK(n_kv == view.n_kv_heads && hd == view.head_dim && b.n_heads % n_kv == 0,
               "attend_batch: head geometry does not match the pool");
  const int64_t hpk = b.n_heads / n_kv;
  const int64_t q_dim = b.n_heads * hd;
  const int64_t n_rows = b.n_tokens * n_kv;
  const int64_t bs = pool_.block_size();
  constexpr int64_t kMaxGroup = 256;
  PAGODA_CHECK(hpk <= kMaxGroup, "attend_batch: more than 256 query heads per KV head");
  const int64_t want_tasks = 4 * static_cast<int64_t>(pool.num_threads());

  // Runs of consecutive positions of one sequence (a prefill or a chunk of one) become
  // tiles of up to kAttnTileRows / hpk tokens, each task one (tile, KV head); tiles shrink
  // (down to 1 token) only when a short run would otherwise leave threads idle.
  // Measured (bench/kv_bench BM_PrefillAttention, 32 heads / 8 KV heads / head_dim 64,
  // one layer, 1 thread, Zen 3 CPU time): per-token path -> tiles, pp512 / pp2048:
  // f32 75 / 1410 -> 34 / 476 ms, f16 68 / 1376 -> 37 / 463 ms, q4 115 / 1941 -> 46 / 646 ms.
  // Whole model (pagoda bench-model, llama3.2-1b shape cut to 4 layers, q4_0, 2 threads,
  // busy machine): pp2048 72 -> 91 tok/s; pp512 unchanged within noise (matmul-bound).
  const int64_t tile_max = std::max<int64_t>(1, kAttnTileRows / hpk);
  rows_.resize(static_cast<size_t>(n_rows));
  tiles_.clear();
  int64_t n_single = 0;
  // A row that sees past its own position (attend_end: an image's tokens) is never in a
  // tile (tiles are causal by construction); it runs alone over [window begin, its end).
  auto beyond = [&](int64_t i) { return b.attend_end != nullptr && b.attend_end[i] > b.positions[i] + 1; };
  for (int64_t t = 0; t < b.n_tokens;) {
    int64_t e = t + 1;
    if (!beyond(t))
      while (e < b.n_tokens && b.seq_ids[e] == b.seq_ids[t] && b.positions[e] == b.positions[e - 1] + 1 && !beyond(e))
        ++e;
    const int64_t len = e - t;
    if (len == 1) {
      ++n_single;
    } else {
      const BlockTable& table = layer_table(b.seq_ids[t], layer, b.positions[t], "attend_batch");
      PAGODA_CHECK(b.positions[t] >= 0 && b.positions[e - 1] < table.num_tokens(),
                   "attend_batch: position " + std::to_string(b.positions[e - 1]) + " not reserved");
      const int64_t tile = std::clamp<int64_t>(len * n_kv / want_tasks, 1, tile_max);
      for (int64_t i = t; i < e; i += tile)
        tiles_.push_back(Tile{table.blocks().data(), i, b.positions[i], static_cast<int32_t>(std::min(tile, e - i))});
    }
    for (int64_t i = t; i < e; ++i)
      for (int64_t g = 0; g < n_kv; ++g) rows_[static_cast<size_t>(i * n_kv + g)].n_parts = len == 1 ? 1 : 0;
    t = e;
  }
  // Heaviest tiles first, so the last tasks claimed are the short ones.
  std::sort(tiles_.begin(), tiles_.end(), [](const Tile& x, const Tile& y) { return x.pos0 + x.n_tok > y.pos0 + y.n_tok; });
  const int64_t n_tile_tasks = static_cast<int64_t>(tiles_.size()) * n_kv;

  // Single tokens: parts per row only when rows alone leave threads idle, and never below
  // split_min_tokens positions per part (merging costs ~3 × head_dim flops per part).
  const int64_t n_units = n_single * n_kv + n_tile_tasks;
  const int64_t want_parts = n_units >= want_tasks ? 1 : (want_tasks + n_units - 1) / std::max<int64_t>(1, n_units);
  // Decode rows of many sequences: one task per token over all its KV heads
  // (paged_attend_heads) once there are two such tasks per thread; fewer tokens keep a task
  // per (token, KV head) so that every thread has work.
  const bool heads_tasks = paged_attend_heads_fits(n_kv, hpk, hd) && n_single >= 2 * pool.num_threads();
  int64_t n_tasks = 0, n_partials = 0;
  for (int64_t t = 0; t < b.n_tokens; ++t) {
    if (rows_[static_cast<size_t>(t * n_kv)].n_parts == 0) continue;  // in a tile
    const BlockTable& table = layer_table(b.seq_ids[t], layer, b.positions[t], "attend_batch");
    const int64_t n_ctx = beyond(t) ? b.attend_end[t] : b.positions[t] + 1;
    PAGODA_CHECK(b.positions[t] >= 0 && n_ctx <= table.num_tokens(),
                 "attend_batch: position " + std::to_string(b.positions[t]) + " not reserved");
    const int64_t p_begin = window_begin(b.positions[t], b.window);
    const int64_t n_vis = n_ctx - p_begin;
    int64_t parts = 1, part_len = n_vis;
    if (want_parts > 1 && n_vis >= 2 * split_min_tokens_) {
      parts = std::min(want_parts, n_vis / split_min_tokens_);
      part_len = ((n_vis + parts - 1) / parts + bs - 1) / bs * bs;
      parts = (n_vis + part_len - 1) / part_len;
    }
    const bool all_heads = heads_tasks && parts == 1;
    for (int64_t g = 0; g < n_kv; ++g) {
      Row& r = rows_[static_cast<size_t>(t * n_kv + g)];
      r.blocks = table.blocks().data();
      r.p_begin = p_begin;
      r.n_ctx = n_ctx;
      r.part_len = part_len;
      r.all_heads = all_heads && g == 0;
      if (all_heads && g > 0) {  // attended by KV head 0's task
        r.n_parts = 0;
        continue;
      }
      r.n_parts = static_cast<int32_t>(parts);
      r.first_task = n_tasks;
      r.partial_offset = parts > 1 ? n_partials : -1;
      n_tasks += parts;
      if (parts > 1) n_partials += parts;
    }
  }
  task_row_.resize(static_cast<size_t>(n_tasks));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < rows_[r].n_parts; ++i) task_row_[rows_[r].first_task + i] = static_cast<int32_t>(r);
  if (n_partials > 0) {
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    grow(part_m_, static_cast<size_t>(n_partials * hpk));
    grow(part_l_, static_cast<size_t>(n_partials * hpk));
    grow(part_o_, static_cast<size_t>(n_partials * hpk * hd));
  }

  // Positions [p0, p1) of single-token task `task` (its row's part).
  auto task_span = [&](int64_t task, int64_t* p0, int64_t* p1) {
    const Row& r = rows_[task_row_[task]];
    *p0 = r.n_parts == 1 ? r.p_begin : r.p_begin + (task - r.first_task) * r.part_len;
    *p1 = r.n_parts == 1 ? r.n_ctx : std::min(r.n_ctx, *p0 + r.part_len);
  };
  // Contiguous task ranges per thread, so a thread's next task is the next index and its
  // first KV blocks are requested while this one computes (paged_attend_prefetch). Eight
  // decoding streams at ~150 positions: each row reads ~5 blocks per KV head, and the
  // first ones were waited for from memory — attention was 16% of a step (perf), ~3x its
  // hot-cache cost (kv_bench BM_DecodeAttention).
  // Normalizes n_rows rows of out from their (m, l), the rows being query heads head0 ..
  // (their sinks).
  auto normalize = [&](float* out, const float* m, const float* l, int64_t n_rows, int64_t head0) {
    for (int64_t h = 0; h < n_rows; ++h) {
      const float inv = 1.0f / attention_denominator(l[h], m[h], b.sinks ? b.sinks + head0 + h : nullptr);
      for (int64_t i = 0; i < hd; ++i) out[h * hd + i] *= inv;
    }
  };
  pool.parallel_for_ranges(n_tile_tasks + n_tasks, [&](int64_t task, int) {
    if (task >= n_tile_tasks && task + 1 < n_tile_tasks + n_tasks) {
      const int64_t next = task + 1 - n_tile_tasks;
      const Row& nr = rows_[task_row_[next]];
      int64_t p0, p1;
      task_span(next, &p0, &p1);
      if (nr.all_heads)
        for (int64_t g = 0; g < n_kv; ++g) paged_attend_prefetch(view, nr.blocks, p0, p1, g);
      else
        paged_attend_prefetch(view, nr.blocks, p0, p1, task_row_[next] % n_kv);
    }
    if (task < n_tile_tasks) {
      const Tile& tl = tiles_[static_cast<size_t>(task / n_kv)];
      const int64_t g = task % n_kv;
      const int64_t off = tl.first_token * q_dim + g * hpk * hd;
      paged_attend_tile(view, tl.blocks, tl.pos0, tl.n_tok, g, b.q + off, q_dim, static_cast<int>(hpk), b.scale,
                        b.out + off, q_dim, b.window, b.softcap, b.sinks ? b.sinks + g * hpk : nullptr);
      return;
    }
    task -= n_tile_tasks;
    const int64_t ri = task_row_[task];
    const Row& r = rows_[ri];
    const int64_t t = ri / n_kv, g = ri % n_kv;
    if (r.all_heads) {
      float* out = b.out + t * q_dim;
      float m[kMaxGroup], l[kMaxGroup];
      paged_attend_heads(view, r.blocks, r.p_begin, r.n_ctx, static_cast<int>(n_kv), b.q + t * q_dim,
                         static_cast<int>(hpk), b.scale, b.softcap, out, m, l);
      normalize(out, m, l, n_kv * hpk, 0);
      return;
    }
    const float* q = b.q + t * q_dim + g * hpk * hd;
    if (r.n_parts == 1) {
      float* out = b.out + t * q_dim + g * hpk * hd;
      float m[kMaxGroup], l[kMaxGroup];
      attend_range(view, r.blocks, r.p_begin, r.n_ctx, g, q, static_cast<int>(hpk), b.scale, b.softcap, out, m, l);
      normalize(out, m, l, hpk, g * hpk);
      return;
    }
    int64_t p0, p1;
    task_span(task, &p0, &p1);
    const int64_t slot = r.partial_offset + (task - r.first_task);
    attend_range(view, r.blocks, p0, p1, g, q, static_cast<int>(hpk), b.scale, b.softcap,
                 &part_o_[slot * hpk * hd], &part_m_[slot * hpk], &part_l_[slot * hpk]);
  });
  if (n_partials == 0) return;
  pool.parallel_for(n_rows, [&](int64_t ri, int) {
    const Row& r = rows_[ri];
    if (r.n_parts <= 1) return;
    const int64_t t = ri / n_kv, g = ri % n_kv;
    merge_attention_partials(r.n_parts, &part_m_[r.partial_offset * hpk], &part_l_[r.partial_offset * hpk],
                             &part_o_[r.partial_offset * hpk * hd], static_cast<int>(hpk), hd,
                             b.out + t * q_dim + g * hpk * hd, b.sinks ? b.sinks + g * hpk : nullptr);
  });
}

}  // namespace pagoda
