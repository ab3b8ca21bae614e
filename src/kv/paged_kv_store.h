// PagedKvStore — the KvStore the model's forward pass uses, over a PagedKvPool: one
// BlockTable per sequence id, attention read through the tables in place.
//
// Contract:
// - The engine makes room before each forward(): reserve(seq, n) gives `seq` slots for
//   positions [0, n) (allocating blocks, copying a shared tail first) and reports
//   running out as a value; forward() then store()s and attends only within reserved
//   slots (capacity(seq) is the reserved count, which Model::forward checks).
// - Sequences: created by reserve() or adopt(), shared by fork() (no copy: blocks are
//   refcounted), shortened by truncate(), dropped by remove(). Dropping the store frees
//   every table it holds.
// - Threads: the owner (engine) thread calls everything except attend(), which kernel
//   workers may call concurrently for different (token, KV head) pairs while the owner
//   is inside attend_batch / forward. attend_batch uses scratch owned by the store.
// - Prefill: attend_batch groups runs of consecutive positions of one sequence into
//   tiles of ~kAttnTileRows / heads_per_kv tokens (paged_attention.h) so each K/V block
//   is read once per tile instead of once per token; single tokens (decode) take the
//   per-(token, KV head) path below.
// - Long contexts: attend_batch splits a (token, KV head) row into parts of at least
//   split_min_tokens positions (block-aligned) when there are fewer rows than
//   4 × threads, runs parts on different threads and merges the partial softmax results
//   (paged_attention.h), so a single decode at 4k context uses every thread.
// - Sliding windows (kv_layer_groups.h): with windowed groups a sequence holds one table
//   per group (SeqTables), all of the same length; store / attend map a model layer to
//   its group's table and its slot in the page. release_out_of_window(seq, next) gives
//   back the local groups' blocks no query from `next` on reads (keeping one block more
//   than the window, so a prefix cache checkpoint a few tokens short of the end still
//   finds its window; see prefix_cache.h). reserve() reserves every group.
// Not copyable (it holds block references).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_layer_groups.h"
#include "kv/kv_store.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {

// One sequence's tables: group 0 (the global layers, or every layer) and the local groups.
struct SeqTables {
  BlockTable main;
  std::vector<BlockTable> local;  // [n_groups - 1], table k is group k + 1
  BlockTable& group(int32_t g) { return g == 0 ? main : local[static_cast<size_t>(g - 1)]; }
  const BlockTable& group(int32_t g) const { return g == 0 ? main : local[static_cast<size_t>(g - 1)]; }
};

class PagedKvStore final : public KvStore {
 public:
  // The pool must outlive the store. Without `groups`, one group of the pool's layers.
  // Requires: groups.page_layers == the pool's n_layers, groups.n_groups() == its n_groups.
  explicit PagedKvStore(PagedKvPool& pool);
  PagedKvStore(PagedKvPool& pool, KvLayerGroups groups);
  ~PagedKvStore() override;
  PagedKvStore(const PagedKvStore&) = delete;
  PagedKvStore& operator=(const PagedKvStore&) = delete;

  PagedKvPool& pool() { return pool_; }
  const PagedKvPool& pool() const { return pool_; }
  const KvLayerGroups& groups() const { return groups_; }

  // ---- sequences -----------------------------------------------------------------------
  // Grows `seq` (creating it when absent) to hold n_tokens positions; never shrinks.
  // On failure nothing changes (a sequence created by this call is dropped again).
  AllocResult reserve(SeqId seq, int64_t n_tokens);
  // Takes over `table` (e.g. blocks borrowed from a prefix cache) as `seq`'s group-0
  // table and `local` as its local groups' tables. Requires: seq absent; `local` holds
  // n_groups - 1 tables of the same length as `table`, or is empty when `table` is.
  void adopt(SeqId seq, BlockTable&& table, std::vector<BlockTable>&& local = {});
  // `dst` shares every block of `src` (same tokens); writes to either copy the shared
  // tail first. Requires: src present, dst absent.
  void fork(SeqId src, SeqId dst);
  // Requires: seq present, n_tokens <= its length. Throws pagoda::Error when a local
  // group already released blocks the window at n_tokens would read.
  void truncate(SeqId seq, int64_t n_tokens);
  // Local groups release the blocks lying wholly before next_pos - window - block_size
  // (see the contract). No-op without windows or for an absent seq. Returns the blocks
  // released.
  int64_t release_out_of_window(SeqId seq, int64_t next_pos);
  // Blocks seq's tables hold (released entries excluded); 0 when absent.
  int64_t blocks_held(SeqId seq) const;
  // nullopt when a sequence of n_tokens fits in an empty pool (every group reserved),
  // else the one-line rejection with both numbers.
  std::optional<std::string> never_fits(int64_t n_tokens) const;
  // Aborts unless seq's tables satisfy the BlockTable invariants and agree in length.
  void check_tables(SeqId seq) const;
  // Releases seq's blocks (no-op when absent).
  void remove(SeqId seq);
  bool contains(SeqId seq) const { return tables_.count(seq) != 0; }
  // Group 0's table (every layer's without windows). Requires: seq present.
  const BlockTable& table(SeqId seq) const;
  // The same table for PagedKvPool / PrefixCache calls that change it (BlockTable has no
  // public mutators). Requires: seq present.
  BlockTable& mutable_table(SeqId seq);
  // Every group's table. Requires: seq present.
  const SeqTables& tables(SeqId seq) const;
  SeqTables& mutable_tables(SeqId seq);
  size_t num_sequences() const { return tables_.size(); }

  // Minimum positions per part when attend_batch splits a long context (tests, bench).
  void set_split_min_tokens(int64_t n) { split_min_tokens_ = n; }

  // ---- KvStore -------------------------------------------------------------------------
  // Requires: pos < capacity(seq) (checked).
  void store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) override;
  void attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q, int n_q_heads,
              float scale, float* out, int64_t window = 0, float softcap = 0.0f,
              const float* sinks = nullptr) const override;
  int64_t capacity(SeqId seq) const override;
  void attend_batch(int layer, const AttnBatch& batch, ThreadPool& pool) override;
  // Hybrid models: the recurrent states of its sequences, configured by the engine. A
  // sequence's state goes with remove(), is copied by fork(), and a truncate() below the
  // state's position is refused (it cannot be rewound: recurrent_states.h).
  RecurrentStates* recurrent() override { return recurrent_.enabled() ? &recurrent_ : nullptr; }
  RecurrentStates& recurrent_states() { return recurrent_; }
  const RecurrentStates& recurrent_states() const { return recurrent_; }

 private:
  const SeqTables& tables_checked(SeqId seq, const char* what) const;
  // The table holding `layer` for seq, checking that positions from first_pos on are held.
  const BlockTable& layer_table(SeqId seq, int layer, int64_t first_pos, const char* what) const;
  SeqTables empty_tables() const;

  PagedKvPool& pool_;
  KvLayerGroups groups_;
  std::unordered_map<SeqId, SeqTables> tables_;
  RecurrentStates recurrent_;
  int64_t split_min_tokens_ = 512;
  // attend_batch scratch, grown to the largest batch seen.
  struct Row {
    const BlockId* blocks;
    int64_t p_begin;  // first visible position (> 0 only on windowed layers)
    int64_t n_ctx;    // one past the last (the query position + 1)
    int64_t part_len;
    int32_t n_parts;
    int64_t first_task;
    int64_t partial_offset;  // index of the row's first part in m_/l_ (units of n_q)
    bool all_heads;          // KV head 0's row: one task attends every KV head of the token
  };
  std::vector<Row> rows_;
  std::vector<int32_t> task_row_;  // [n_tasks] row of each task
  // Prefill tiles: runs of >= 2 consecutive positions of one sequence (attend_batch).
  struct Tile {
    const BlockId* blocks;
    int64_t first_token;  // batch index of the tile's first token
    int64_t pos0;         // its position
    int32_t n_tok;
  };
  std::vector<Tile> tiles_;  // heaviest (latest positions) first
  std::vector<float> part_m_, part_l_, part_o_;
};

}  // namespace pagoda
