// PrefixIndex — the content-addressed tree of cached KV blocks (data only: no pool, no
// policy; PrefixCache drives it).
//
// Contract:
// - Nodes: one *root* per namespace (no block), and one node per cached block, keyed by
//   the block's id. A *full* node holds block_size tokens and is found by its chained
//   hash (block_hash.h); a *partial* node holds the first 1..block_size-1 tokens of a
//   sequence's last block and is found only through its parent (partial nodes are kept
//   for token-exact reuse of a finished sequence's tail). The path root → node spells
//   the cached token prefix that ends with that node's tokens.
// - Memory: node metadata for [num_blocks + num_blocks] nodes (blocks, then roots: a
//   root has at least one child, so there are never more roots than blocks) and
//   block_size token ids per block, all allocated at construction; children are
//   index-linked sibling lists. Only the two hash maps allocate (one node per insert).
// - Threads: the owner (engine) thread only. Not copyable.
//
// Invariants (check_invariants()):
//  1. Every block node's parent is a root or a full node; partial nodes have no
//     children; a root has at least one child.
//  2. Child lists are consistent (links both ways, num_children equals the list length);
//     every block node is on its parent's list exactly once.
//  3. A full node's hash == block_hash(parent hash, its tokens) (recomputed), it is in
//     the full-hash map under that hash, and so is every root under its namespace hash;
//     the maps hold nothing else.
//  4. num_blocks / num_leaves / num_roots equal recounts; a leaf is a block node with no
//     children.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "kv/block_table.h"

namespace pagoda {

class PrefixIndex {
 public:
  enum class Kind : uint8_t { None, Root, Full, Partial };
  static constexpr int32_t kNone = -1;

  // num_blocks: the pool's blocks_budget; block_size: tokens per block.
  PrefixIndex(int64_t num_blocks, int64_t block_size);
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  int64_t block_size() const { return block_size_; }

  // ---- roots (node ids >= num_blocks) ----------------------------------------------------
  int32_t find_root(const BlockHash& ns) const;
  // The root of `ns`, created when absent. A root nobody adds a child to is removed by
  // the next remove_block() of that namespace or by prune_root().
  int32_t root(const BlockHash& ns);
  // Removes `root` if it has no children.
  void prune_root(int32_t root);

  // ---- lookups -----------------------------------------------------------------------------
  // The full node whose chained hash is h, or kNone.
  int32_t find_full(const BlockHash& h) const;
  struct ChildMatch {
    int32_t node = kNone;
    int64_t n_tokens = 0;  // tokens of the child equal to the start of `tokens`
  };
  // Among node's children, one sharing the longest common prefix with `tokens` (the most
  // recently added among equals); {kNone, 0} when none shares a token. O(children × bs).
  ChildMatch best_child(int32_t node, std::span<const int32_t> tokens) const;
  // A child whose tokens begin with all of `tokens`, or kNone.
  int32_t covering_child(int32_t node, std::span<const int32_t> tokens) const;

  // ---- changes -------------------------------------------------------------------------------
  // Adds block b under `parent` (a root or a full node) as a full node with hash h
  // (tokens.size() == block_size) or a partial node (1 <= tokens.size() < block_size;
  // h unused). Requires: b not in the index, no full node with hash h.
  void add_block(int32_t parent, BlockId b, const BlockHash& h, std::span<const int32_t> tokens);
  // Removes block node b. Requires: b in the index, no children. Its root goes too when
  // b was the root's last child.
  void remove_block(BlockId b);
  // Drops every node.
  void clear();

  // ---- reading -------------------------------------------------------------------------------
  bool contains(BlockId b) const { return at(idx(b)).kind != Kind::None; }
  Kind kind(int32_t node) const { return at(node).kind; }
  bool is_block(int32_t node) const { return node >= 0 && node < num_block_nodes_; }
  int32_t parent(int32_t node) const { return at(node).parent; }
  int32_t num_children(int32_t node) const { return at(node).num_children; }
  int32_t first_child(int32_t node) const { return at(node).first_child; }
  int32_t next_sibling(int32_t node) const { return at(node).next_sibling; }
  const BlockHash& hash(int32_t node) const { return at(node).hash; }
  // The node's cached tokens (empty for a root).
  std::span<const int32_t> tokens(int32_t node) const;
  int64_t num_blocks() const { return num_blocks_; }  // block nodes
  int64_t num_leaves() const { return num_leaves_; }
  int64_t num_roots() const { return num_roots_; }
  // Every cached path as (root, tokens root → leaf), for tests and the reference model.
  struct Path {
    int32_t root;
    std::vector<int32_t> tokens;
  };
  std::vector<Path> leaf_paths() const;

  void check_invariants() const;

 private:
  struct Node {
    BlockHash hash;  // full: chained hash; root: namespace hash; partial: zero
    int32_t parent = kNone;
    int32_t first_child = kNone, next_sibling = kNone, prev_sibling = kNone;
    int32_t num_children = 0;
    int32_t n_tokens = 0;
    Kind kind = Kind::None;
  };
  // Node i (a block id or a root id). Block nodes never written read as unused; writing
  // one grows the block storage to cover it.
  Node& at(int32_t i);
  const Node& at(int32_t i) const;
  void link_child(int32_t parent, int32_t child);
  void unlink_child(int32_t child);

  int64_t block_size_;
  int32_t num_block_nodes_;            // == num_blocks at construction; root ids start here
  // Grown with use, not allocated for the whole budget (a 1 MB model's default budget is
  // 600k blocks: ~150 MiB of nodes and tokens no request would touch).
  std::vector<Node> block_nodes_;      // [highest block id used + 1, doubling]
  std::vector<int32_t> tokens_;        // [block_nodes_.size() × block_size] token ids by block
  std::vector<Node> root_nodes_;       // root id num_blocks + k is root_nodes_[k]
  std::vector<int32_t> free_roots_;    // released root ids (a stack)
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> full_by_hash_, root_by_ns_;
  int64_t num_blocks_ = 0, num_leaves_ = 0, num_roots_ = 0;
};

}  // namespace pagoda
