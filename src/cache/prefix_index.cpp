#include "cache/prefix_index.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "common/error.h"

namespace pagoda {

PrefixIndex::PrefixIndex(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size), num_block_nodes_(static_cast<int32_t>(num_blocks)) {
  PAGODA_CHECK(num_blocks > 0 && num_blocks < (int64_t{1} << 30) && block_size > 0 && block_size <= 256,
               "PrefixIndex: bad geometry");
}

PrefixIndex::Node& PrefixIndex::at(int32_t i) {
  if (i >= num_block_nodes_) return root_nodes_[static_cast<size_t>(i - num_block_nodes_)];
  if (static_cast<size_t>(i) >= block_nodes_.size()) {
    // Grown with the highest block id used (the pool hands ids out from 0 up), doubling.
    const size_t n = std::min<size_t>(static_cast<size_t>(num_block_nodes_),
                                      std::max<size_t>(static_cast<size_t>(i) + 1, 2 * block_nodes_.size()));
    block_nodes_.resize(n);
    tokens_.resize(n * static_cast<size_t>(block_size_));
  }
  return block_nodes_[static_cast<size_t>(i)];
}

const PrefixIndex::Node& PrefixIndex::at(int32_t i) const {
  static const Node kUnused{};
  if (i >= num_block_nodes_) return root_nodes_[static_cast<size_t>(i - num_block_nodes_)];
  return static_cast<size_t>(i) < block_nodes_.size() ? block_nodes_[static_cast<size_t>(i)] : kUnused;
}

std::span<const int32_t> PrefixIndex::tokens(int32_t node) const {
  if (!is_block(node)) return {};
  const Node& n = at(node);
  if (n.n_tokens == 0) return {};  // unused (maybe past the grown storage)
  return {tokens_.data() + static_cast<size_t>(node) * block_size_, static_cast<size_t>(n.n_tokens)};
}

// ---- roots ------------------------------------------------------------------------------

int32_t PrefixIndex::find_root(const BlockHash& ns) const {
  auto it = root_by_ns_.find(ns);
  return it == root_by_ns_.end() ? kNone : it->second;
}

int32_t PrefixIndex::root(const BlockHash& ns) {
  if (int32_t r = find_root(ns); r != kNone) return r;
  int32_t r;
  if (!free_roots_.empty()) {
    r = free_roots_.back();
    free_roots_.pop_back();
  } else {
    // Every root has a block under it but for a moment, so there are never more roots
    // than blocks.
    PAGODA_CHECK(static_cast<int64_t>(root_nodes_.size()) < num_block_nodes_, "PrefixIndex: out of root nodes");
    r = num_block_nodes_ + static_cast<int32_t>(root_nodes_.size());
    root_nodes_.emplace_back();
  }
  Node& n = at(r);
  n = Node{};
  n.kind = Kind::Root;
  n.hash = ns;
  root_by_ns_.emplace(ns, r);
  ++num_roots_;
  return r;
}

void PrefixIndex::prune_root(int32_t r) {
  Node& n = at(r);
  assert(n.kind == Kind::Root);
  if (n.num_children > 0) return;
  root_by_ns_.erase(n.hash);
  n = Node{};
  free_roots_.push_back(r);
  --num_roots_;
}

// ---- lookups ------------------------------------------------------------------------------

int32_t PrefixIndex::find_full(const BlockHash& h) const {
  auto it = full_by_hash_.find(h);
  return it == full_by_hash_.end() ? kNone : it->second;
}

PrefixIndex::ChildMatch PrefixIndex::best_child(int32_t node, std::span<const int32_t> want) const {
  ChildMatch best;
  for (int32_t c = first_child(node); c != kNone; c = next_sibling(c)) {
    const std::span<const int32_t> have = tokens(c);
    const size_t n = std::min(have.size(), want.size());
    size_t k = 0;
    while (k < n && have[k] == want[k]) ++k;
    if (static_cast<int64_t>(k) > best.n_tokens) best = {c, static_cast<int64_t>(k)};
  }
  return best;
}

int32_t PrefixIndex::covering_child(int32_t node, std::span<const int32_t> want) const {
  for (int32_t c = first_child(node); c != kNone; c = next_sibling(c)) {
    const std::span<const int32_t> have = tokens(c);
    if (have.size() >= want.size() && std::equal(want.begin(), want.end(), have.begin())) return c;
  }
  return kNone;
}

// ---- changes ------------------------------------------------------------------------------

void PrefixIndex::link_child(int32_t parent, int32_t child) {
  Node& p = at(parent);
  Node& c = at(child);
  c.parent = parent;
  c.prev_sibling = kNone;
  c.next_sibling = p.first_child;
  if (p.first_child != kNone) at(p.first_child).prev_sibling = child;
  p.first_child = child;
  if (p.num_children++ == 0 && is_block(parent)) --num_leaves_;  // parent stops being a leaf
}

void PrefixIndex::unlink_child(int32_t child) {
  Node& c = at(child);
  Node& p = at(c.parent);
  if (c.prev_sibling != kNone) at(c.prev_sibling).next_sibling = c.next_sibling;
  else p.first_child = c.next_sibling;
  if (c.next_sibling != kNone) at(c.next_sibling).prev_sibling = c.prev_sibling;
  if (--p.num_children == 0 && is_block(c.parent)) ++num_leaves_;  // parent becomes a leaf
  c.parent = c.next_sibling = c.prev_sibling = kNone;
}

void PrefixIndex::add_block(int32_t parent, BlockId b, const BlockHash& h, std::span<const int32_t> toks) {
  const int32_t i = idx(b);
  PAGODA_CHECK(i >= 0 && i < num_block_nodes_ && at(i).kind == Kind::None,
               "PrefixIndex::add_block: block " + std::to_string(i) + " is already indexed or unknown");
  PAGODA_CHECK(!toks.empty() && static_cast<int64_t>(toks.size()) <= block_size_,
               "PrefixIndex::add_block: bad token count");
  const Kind pk = kind(parent);
  PAGODA_CHECK(pk == Kind::Root || pk == Kind::Full, "PrefixIndex::add_block: parent is not a root or full block");
  Node& n = at(i);
  n = Node{};
  n.n_tokens = static_cast<int32_t>(toks.size());
  if (static_cast<int64_t>(toks.size()) == block_size_) {
    n.kind = Kind::Full;
    n.hash = h;
    const bool fresh = full_by_hash_.emplace(h, i).second;
    PAGODA_CHECK(fresh, "PrefixIndex::add_block: a full block with this hash is already indexed");
  } else {
    n.kind = Kind::Partial;
  }
  std::copy(toks.begin(), toks.end(), tokens_.begin() + static_cast<ptrdiff_t>(i * block_size_));
  ++num_blocks_;
  ++num_leaves_;
  link_child(parent, i);
}

void PrefixIndex::remove_block(BlockId b) {
  const int32_t i = idx(b);
  PAGODA_CHECK(i >= 0 && i < num_block_nodes_ && contains(b),
               "PrefixIndex::remove_block: block " + std::to_string(i) + " is not indexed");
  Node& n = at(i);
  PAGODA_CHECK(n.num_children == 0, "PrefixIndex::remove_block: block " + std::to_string(i) + " has children");
  const int32_t parent = n.parent;
  if (n.kind == Kind::Full) full_by_hash_.erase(n.hash);
  unlink_child(i);
  --num_leaves_;
  --num_blocks_;
  n = Node{};
  if (kind(parent) == Kind::Root) prune_root(parent);
}

void PrefixIndex::clear() {
  for (Node& n : block_nodes_) n = Node{};
  root_nodes_.clear();
  free_roots_.clear();
  full_by_hash_.clear();
  root_by_ns_.clear();
  num_blocks_ = num_leaves_ = num_roots_ = 0;
}

// ---- reading ------------------------------------------------------------------------------

std::vector<PrefixIndex::Path> PrefixIndex::leaf_paths() const {
  std::vector<Path> out;
  for (int32_t i = 0; i < static_cast<int32_t>(block_nodes_.size()); ++i) {
    if (at(i).kind == Kind::None || num_children(i) > 0) continue;
    std::vector<int32_t> chain;
    int32_t n = i;
    for (; is_block(n); n = parent(n)) chain.push_back(n);
    Path p;
    p.root = n;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto t = tokens(*it);
      p.tokens.insert(p.tokens.end(), t.begin(), t.end());
    }
    out.push_back(std::move(p));
  }
  return out;
}

void PrefixIndex::check_invariants() const {
  int64_t blocks = 0, leaves = 0, roots = 0, fulls = 0;
  PAGODA_CHECK(tokens_.size() == block_nodes_.size() * static_cast<size_t>(block_size_),
               "PrefixIndex: token storage does not match the block nodes");
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < static_cast<int32_t>(block_nodes_.size()); ++i) ids.push_back(i);
  for (size_t r = 0; r < root_nodes_.size(); ++r) ids.push_back(num_block_nodes_ + static_cast<int32_t>(r));
  for (const int32_t i : ids) {
    const Node& n = at(i);
    const std::string where = "PrefixIndex node " + std::to_string(i) + ": ";
    if (n.kind == Kind::None) continue;
    PAGODA_CHECK(is_block(i) == (n.kind != Kind::Root), where + "root/block id range mismatch");
    int32_t count = 0, prev = kNone;
    for (int32_t c = n.first_child; c != kNone; prev = c, c = at(c).next_sibling) {
      PAGODA_CHECK(is_block(c) && at(c).parent == i, where + "child list broken");
      PAGODA_CHECK(at(c).prev_sibling == prev, where + "sibling back link broken");
      PAGODA_CHECK(++count <= num_block_nodes_, where + "child list cycle");
    }
    PAGODA_CHECK(count == n.num_children, where + "num_children " + std::to_string(n.num_children) + " != " +
                                              std::to_string(count));
    if (n.kind == Kind::Root) {
      ++roots;
      PAGODA_CHECK(n.num_children > 0, where + "root without children");
      auto it = root_by_ns_.find(n.hash);
      PAGODA_CHECK(it != root_by_ns_.end() && it->second == i, where + "root not in the namespace map");
      continue;
    }
    ++blocks;
    if (n.num_children == 0) ++leaves;
    const Kind pk = kind(n.parent);
    PAGODA_CHECK(n.parent != kNone && (pk == Kind::Root || pk == Kind::Full), where + "parent is not a root or full block");
    const auto toks = tokens(i);
    if (n.kind == Kind::Partial) {
      PAGODA_CHECK(n.n_tokens >= 1 && n.n_tokens < block_size_ && n.num_children == 0, where + "bad partial node");
      continue;
    }
    ++fulls;
    PAGODA_CHECK(n.n_tokens == block_size_, where + "full node with " + std::to_string(n.n_tokens) + " tokens");
    PAGODA_CHECK(block_hash(hash(n.parent), toks) == n.hash, where + "hash is not block_hash(parent, tokens)");
    auto it = full_by_hash_.find(n.hash);
    PAGODA_CHECK(it != full_by_hash_.end() && it->second == i, where + "not in the hash map");
  }
  PAGODA_CHECK(blocks == num_blocks_ && leaves == num_leaves_ && roots == num_roots_,
               "PrefixIndex counts: blocks " + std::to_string(num_blocks_) + "/" + std::to_string(blocks) + " leaves " +
                   std::to_string(num_leaves_) + "/" + std::to_string(leaves) + " roots " +
                   std::to_string(num_roots_) + "/" + std::to_string(roots));
  PAGODA_CHECK(static_cast<int64_t>(full_by_hash_.size()) == fulls &&
                   static_cast<int64_t>(root_by_ns_.size()) == roots,
               "PrefixIndex: hash maps hold stale entries");
  PAGODA_CHECK(static_cast<int64_t>(free_roots_.size()) + roots == static_cast<int64_t>(root_nodes_.size()),
               "PrefixIndex: root ids leaked");
}

}  // namespace pagoda
