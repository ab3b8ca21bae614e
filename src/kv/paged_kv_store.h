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
// Not copyable (it holds block references).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_store.h"
#include "kv/paged_kv_pool.h"

namespace pagoda {

class PagedKvStore final : public KvStore {
 public:
  // The pool must outlive the store.
  explicit PagedKvStore(PagedKvPool& pool);
  ~PagedKvStore() override;
  PagedKvStore(const PagedKvStore&) = delete;
  PagedKvStore& operator=(const PagedKvStore&) = delete;

  PagedKvPool& pool() { return pool_; }
  const PagedKvPool& pool() const { return pool_; }

  // ---- sequences -----------------------------------------------------------------------
  // Grows `seq` (creating it when absent) to hold n_tokens positions; never shrinks.
  // On failure nothing changes (a sequence created by this call is dropped again).
  AllocResult reserve(SeqId seq, int64_t n_tokens);
  // Takes over `table` (e.g. blocks borrowed from a prefix cache) as `seq`'s table.
  // Requires: seq absent.
  void adopt(SeqId seq, BlockTable&& table);
  // `dst` shares every block of `src` (same tokens); writes to either copy the shared
  // tail first. Requires: src present, dst absent.
  void fork(SeqId src, SeqId dst);
  // Requires: seq present, n_tokens <= its length.
  void truncate(SeqId seq, int64_t n_tokens);
  // Releases seq's blocks (no-op when absent).
  void remove(SeqId seq);
  bool contains(SeqId seq) const { return tables_.count(seq) != 0; }
  // Requires: seq present.
  const BlockTable& table(SeqId seq) const;
  // The same table for PagedKvPool / PrefixCache calls that change it (BlockTable has no
  // public mutators). Requires: seq present.
  BlockTable& mutable_table(SeqId seq);
  size_t num_sequences() const { return tables_.size(); }

  // Minimum positions per part when attend_batch splits a long context (tests, bench).
  void set_split_min_tokens(int64_t n) { split_min_tokens_ = n; }

  // ---- KvStore -------------------------------------------------------------------------
  // Requires: pos < capacity(seq) (checked).
  void store(int layer, SeqId seq, int64_t pos, const float* k, const float* v) override;
  void attend(int layer, SeqId seq, int64_t pos, int kv_head, const float* q, int n_q_heads,
              float scale, float* out, int64_t window = 0, float softcap = 0.0f) const override;
  int64_t capacity(SeqId seq) const override;
  void attend_batch(int layer, const AttnBatch& batch, ThreadPool& pool) override;

 private:
  const BlockTable& table_checked(SeqId seq, const char* what) const;

  PagedKvPool& pool_;
  std::unordered_map<SeqId, BlockTable> tables_;
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
