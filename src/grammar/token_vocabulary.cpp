// TokenVocabulary: the pieces as a byte trie in preorder.
//
// Built by sorting the token ids by piece bytes: consecutive pieces share their
// longest common prefix, so node k+1's parent is on the path of node k and the trie
// comes out in preorder with no pointers; subtree_end lets the mask walk skip every
// token under a prefix the grammar rejects. EOG tokens, disallowed tokens and empty
// pieces are left out of the trie (EOG is decided by acceptance alone; an empty
// piece would let a sampler loop without producing text).
#include <algorithm>
#include <atomic>
#include <numeric>

#include "grammar/grammar_impl.h"

namespace pagoda::grammar {
namespace {
std::atomic<uint64_t> g_next_vocab_serial{1};
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> pieces, std::vector<int32_t> eog,
                                 std::vector<bool> disallowed)
    : impl_(std::make_unique<Impl>()) {
  Impl& v = *impl_;
  if (pieces.size() > static_cast<size_t>(INT32_MAX / 2))
    throw std::invalid_argument("TokenVocabulary: too many tokens");
  if (!disallowed.empty() && disallowed.size() != pieces.size())
    throw std::invalid_argument("TokenVocabulary: disallowed has " + std::to_string(disallowed.size()) +
                                " entries for " + std::to_string(pieces.size()) + " tokens");
  v.serial = g_next_vocab_serial.fetch_add(1);
  v.n_tokens = static_cast<int32_t>(pieces.size());
  v.pieces = std::move(pieces);
  v.is_eog.assign(v.n_tokens, 0);
  v.is_disallowed.assign(v.n_tokens, 0);
  for (int32_t i = 0; i < v.n_tokens && !disallowed.empty(); ++i) v.is_disallowed[i] = disallowed[i] ? 1 : 0;
  for (int32_t id : eog) {
    if (id < 0 || id >= v.n_tokens)
      throw std::invalid_argument("TokenVocabulary: EOG id " + std::to_string(id) + " out of range");
    if (v.is_eog[id]) continue;
    v.is_eog[id] = 1;
    if (!v.is_disallowed[id]) v.eog_ids.push_back(id);
  }

  std::vector<int32_t> ids;
  ids.reserve(v.n_tokens);
  for (int32_t i = 0; i < v.n_tokens; ++i)
    if (!v.is_eog[i] && !v.is_disallowed[i] && !v.pieces[i].empty()) ids.push_back(i);
  // std::string compares bytes as unsigned char, which is the trie's byte order.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v.pieces[a] < v.pieces[b]; });
  v.sorted_tokens = ids;

  std::vector<int32_t> path;  // path[d]: the open node at depth d+1
  const std::string* prev = nullptr;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string& s = v.pieces[ids[k]];
    size_t lcp = 0;
    if (prev) {
      size_t m = std::min(prev->size(), s.size());
      while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    // Close the nodes below the shared prefix.
    while (path.size() > lcp) {
      v.nodes[path.back()].subtree_end = static_cast<int32_t>(v.nodes.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(v.nodes.size()));
      v.nodes.push_back(Impl::TrieNode{static_cast<uint32_t>(d + 1), 0, static_cast<int32_t>(k),
                                       static_cast<int32_t>(k), -1, static_cast<uint8_t>(s[d])});
    }
    v.nodes[path.back()].tok_end = static_cast<int32_t>(k + 1);  // a duplicate piece extends the range
    v.max_depth = std::max<uint32_t>(v.max_depth, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    v.nodes[path.back()].subtree_end = static_cast<int32_t>(v.nodes.size());
    path.pop_back();
  }

  // Bytes below each big subtree's root: children fold into parents in reverse
  // preorder (a node's parent is the last earlier node one level up).
  const size_t n = v.nodes.size();
  std::vector<int32_t> parent(n, -1);
  std::vector<int32_t> last_at_depth(v.max_depth + 2, -1);
  for (size_t i = 0; i < n; ++i) {
    uint32_t d = v.nodes[i].depth;
    parent[i] = d > 1 ? last_at_depth[d - 1] : -1;
    last_at_depth[d] = static_cast<int32_t>(i);
  }
  std::vector<Impl::ByteSet> below(n, Impl::ByteSet{});
  for (size_t i = n; i-- > 0;) {
    if (parent[i] < 0) continue;
    Impl::ByteSet& p = below[parent[i]];
    for (int w = 0; w < 4; ++w) p[w] |= below[i][w];
    uint8_t b = v.nodes[i].byte;
    p[b >> 6] |= uint64_t{1} << (b & 63);
  }
  for (size_t i = 0; i < n; ++i) {
    if (v.nodes[i].subtree_end - static_cast<int32_t>(i) < Impl::kBelowMinNodes) continue;
    v.nodes[i].below_idx = static_cast<int32_t>(v.below_bytes.size());
    v.below_bytes.push_back(below[i]);
  }
}

TokenVocabulary::~TokenVocabulary() = default;
int32_t TokenVocabulary::size() const { return impl_->n_tokens; }

}  // namespace pagoda::grammar
