// Internals of the grammar engine shared by the parser, the matcher and the
// vocabulary (not a public contract: tests and the bench may read it).
//
// A compiled grammar is a flat array of elements. Every alternative of every rule is
// a run of kChars / kRule elements closed by one kEnd; rules list where their
// alternatives start. Repetitions and groups are already expanded into generated
// rules, so the matcher knows only three element kinds.
//
// Parse stacks (the matcher's state) are a graph-structured stack: a Head is the
// top of one stack (a kChars element to match next, plus its parent frame); a
// Node is a return frame (the element to continue at once the called rule ends,
// and its own parent). Frames live in an append-only arena indexed by int32, so
// pushing a frame is one append and many stacks share their common bottoms.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace pagoda::grammar {

enum class ElemKind : uint8_t { kEnd, kChars, kRule };

struct Elem {
  ElemKind kind;
  int32_t arg;  // kChars: charset index; kRule: rule index; kEnd: rule index
};

// A set of Unicode scalar values (code points without the surrogates D800-DFFF,
// which no valid UTF-8 encodes).
struct Charset {
  std::array<uint64_t, 2> ascii{};                   // bit c for c < 128
  std::vector<std::pair<uint32_t, uint32_t>> wide;  // inclusive, sorted, disjoint, all >= 0x80

  // ranges: any inclusive ranges (any order, overlapping); negate: complement.
  static Charset from_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate);
  bool empty() const { return ascii[0] == 0 && ascii[1] == 0 && wide.empty(); }
  bool contains(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    return contains_wide(cp);
  }
  bool contains_wide(uint32_t cp) const;
  // Whether any member lies in [lo, hi]; requires lo >= 0x80 (partial UTF-8).
  bool intersects_wide(uint32_t lo, uint32_t hi) const;
  // Whether every code point in [lo, hi] is a member; requires lo >= 0x80.
  bool contains_wide_range(uint32_t lo, uint32_t hi) const;
};

struct RuleInfo {
  std::string name;
  int32_t alt_begin = 0;  // into GrammarImpl::alt_starts
  int32_t alt_end = 0;
  size_t src_offset = 0;  // where it is defined (generated rules: the group / operator)
  bool generated = false;
};

struct StackNode {
  int32_t pos;     // element to continue at when the called rule ends
  int32_t parent;  // frame below, -1 = bottom
};

struct StackHead {
  int32_t pos;     // a kChars element: the next code point must be in its set
  int32_t parent;  // frame below, -1 = bottom
  bool operator==(const StackHead&) const = default;
};

// A UTF-8 character begun but not finished: the code point's bits so far, how
// many continuation bytes are still needed and the encoded length.
struct Utf8Partial {
  uint32_t cp = 0;
  uint8_t need = 0;
  uint8_t len = 0;
  bool operator==(const Utf8Partial&) const = default;
};

// Masks per (vocabulary, matcher state), bounded in bytes; least recently used
// entries go first. Thread-safe.
class MaskCache {
 public:
  explicit MaskCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}
  bool enabled() const { return capacity_bytes_ > 0; }
  // Copies the mask into out (out.size() >= its size) and returns true on a hit.
  bool get(const std::string& key, std::span<uint32_t> out);
  void put(const std::string& key, std::span<const uint32_t> mask);
  void clear();
  size_t bytes() const;
  size_t entries() const;
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::vector<uint32_t> mask;
    std::list<const std::string*>::iterator lru_it;
  };
  size_t capacity_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;   // guarded by mu_
  std::list<const std::string*> lru_;            // front = most recent; guarded by mu_
  size_t bytes_ = 0;                             // guarded by mu_
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

// The code points a partial character can still become: [lo, hi] (lo > hi: none).
inline std::pair<uint32_t, uint32_t> utf8_partial_range(Utf8Partial p) {
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  static constexpr uint32_t kMax[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  uint32_t shift = 6u * p.need;
  uint32_t lo = std::max(p.cp << shift, kMin[p.len]);
  uint32_t hi = std::min((p.cp << shift) | ((1u << shift) - 1), kMax[p.len]);
  return {lo, hi};
}

struct GrammarImpl {
  std::vector<Elem> elems;
  std::vector<int32_t> alt_starts;  // element index of each alternative's first element
  std::vector<RuleInfo> rules;
  std::vector<Charset> charsets;
  int32_t root_rule = -1;
  GrammarLimits limits;

  // The start state, expanded once at build time (and checked against max_stacks).
  std::vector<StackNode> start_nodes;
  std::vector<StackHead> start_heads;
  bool start_accepting = false;

  mutable MaskCache mask_cache{0};

  explicit GrammarImpl(const GrammarLimits& l) : limits(l), mask_cache(l.mask_cache_bytes) {}
};

// Parses and checks GBNF into g (rules, elements, charsets, root). Throws GrammarError.
void parse_gbnf(std::string_view text, std::string_view root, GrammarImpl& g);

// One step of the parse-stack set over one byte. Reads heads[in_begin, in_end) and
// appends the successors to `heads` (which may reallocate: everything is indices);
// new frames are appended to `nodes`. Returns false when no stack survives or a
// limit (max_stacks, expansion work) is hit.
class StackStepper {
 public:
  explicit StackStepper(const GrammarImpl& g) : g_(g) {}
  bool step(std::vector<StackHead>& heads, std::vector<StackNode>& nodes, size_t in_begin, size_t in_end,
            Utf8Partial in_partial, uint8_t byte, Utf8Partial& out_partial, bool& out_accepting);
  // Resets the expansion work budget (step() does it; callers of expand() once per step).
  // Work per step: enough for max_stacks stacks through a few dozen nullable rules.
  void begin_step() { work_budget_ = g_.limits.max_stacks * 64 + 1024; }
  // Expands `continue at pos with parent` until every stack tops on a kChars element
  // (appended to heads from out_begin on, deduplicated) or ends (accepting = true).
  // False when a limit is hit.
  bool expand(std::vector<StackHead>& heads, std::vector<StackNode>& nodes, size_t out_begin, int32_t pos,
              int32_t parent, bool& accepting);

 // Call when `nodes` was rebuilt or replaced (ids now mean other frames).
  void forget_frames();

 private:
  bool push_head(std::vector<StackHead>& heads, size_t out_begin, StackHead h);
  // The frame (pos, parent), hash-consed: equal frames get one id while they live in
  // the arena, so stacks equal by content are equal by id and deduplicate exactly
  // (an ambiguous grammar then keeps a bounded set instead of doubling per byte).
  // Entries left stale by truncating the arena are detected by comparing contents.
  int32_t frame(std::vector<StackNode>& nodes, int32_t pos, int32_t parent);
  const GrammarImpl& g_;
  std::vector<uint64_t> frame_keys_;  // open addressing, ~0 = empty
  std::vector<int32_t> frame_ids_;
  size_t frame_count_ = 0;
  std::vector<StackHead> work_;
  std::vector<uint64_t> seen_;  // open-addressing set of heads, used past kLinearDedup heads
  size_t seen_count_ = 0;
  size_t work_budget_ = 0;
};

}  // namespace pagoda::grammar

// TokenVocabulary internals: pieces sorted into a byte trie laid out in preorder, so
// a mask is one forward scan over `nodes` that jumps to subtree_end to prune.
namespace pagoda::grammar {
struct TokenVocabulary::Impl {
  struct TrieNode {
    uint32_t depth;        // bytes from the root (1 for a first byte)
    int32_t subtree_end;   // index of the first node after this node's subtree
    // Tokens whose piece ends here: sorted_tokens[tok_begin, tok_end). Tokens are in
    // preorder, so the subtree's tokens are [tok_begin, subtree_tok_end(i)).
    int32_t tok_begin;
    int32_t tok_end;
    int32_t below_idx;     // into below_bytes for subtrees of >= kBelowMinNodes nodes, else -1
    uint8_t byte;
  };
  // Subtrees this big carry the set of bytes below their root, so a walk can accept
  // them whole when its state loops on each of those bytes (inside a JSON string).
  static constexpr int32_t kBelowMinNodes = 16;
  using ByteSet = std::array<uint64_t, 4>;
  int32_t subtree_tok_end(size_t i) const {
    size_t e = static_cast<size_t>(nodes[i].subtree_end);
    return e < nodes.size() ? nodes[e].tok_begin : static_cast<int32_t>(sorted_tokens.size());
  }
  uint64_t serial = 0;  // distinct per vocabulary object: part of mask-cache keys
  int32_t n_tokens = 0;
  std::vector<std::string> pieces;
  std::vector<uint8_t> is_eog;         // [n_tokens]
  std::vector<uint8_t> is_disallowed;  // [n_tokens]; EOG and empty pieces are not in the trie
  std::vector<int32_t> eog_ids;        // allowed EOG ids (not disallowed)
  std::vector<TrieNode> nodes;
  std::vector<ByteSet> below_bytes;
  std::vector<int32_t> sorted_tokens;
  uint32_t max_depth = 0;
  size_t mask_words() const { return (static_cast<size_t>(n_tokens) + 31) / 32; }
};
}  // namespace pagoda::grammar
