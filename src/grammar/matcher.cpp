// Grammar::from_gbnf, the Matcher and the mask cache.
//
// A mask is one forward scan over the vocabulary trie (preorder): each trie node
// steps its parent's stack set by one byte; a node whose step leaves no stack skips
// its whole subtree (every token sharing that prefix), so the cost is the number of
// trie nodes still inside the grammar, not the vocabulary size times token length.
// Stack sets met during a walk are interned by content, so each (state, byte)
// transition is stepped once per walk; frames go to the matcher's arena past its
// live part and are truncated afterwards.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "grammar/grammar_impl.h"

namespace pagoda::grammar {

// ---- MaskCache ----

bool MaskCache::get(const std::string& key, std::span<uint32_t> out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru_it);
  std::memcpy(out.data(), it->second.mask.data(), it->second.mask.size() * sizeof(uint32_t));
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void MaskCache::put(const std::string& key, std::span<const uint32_t> mask) {
  // Per entry: the mask, the key (twice: map and list node) and ~64 bytes of nodes.
  size_t entry_bytes = mask.size() * sizeof(uint32_t) + key.size() + 64;
  if (entry_bytes > capacity_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.count(key)) return;
  while (bytes_ + entry_bytes > capacity_bytes_ && !lru_.empty()) {
    const std::string* victim = lru_.back();
    auto vit = map_.find(*victim);
    bytes_ -= vit->second.mask.size() * sizeof(uint32_t) + vit->first.size() + 64;
    lru_.pop_back();
    map_.erase(vit);
  }
  auto [it, inserted] = map_.emplace(key, Entry{});
  it->second.mask.assign(mask.begin(), mask.end());
  lru_.push_front(&it->first);
  it->second.lru_it = lru_.begin();
  bytes_ += entry_bytes;
}

void MaskCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  lru_.clear();
  bytes_ = 0;
}

size_t MaskCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t MaskCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

// ---- Grammar ----

Grammar::Grammar() = default;
Grammar::~Grammar() = default;
const GrammarLimits& Grammar::limits() const { return impl_->limits; }

size_t Grammar::memory_bytes() const {
  const GrammarImpl& g = *impl_;
  size_t n = sizeof(Grammar) + sizeof(GrammarImpl) + g.elems.capacity() * sizeof(Elem) +
             g.alt_starts.capacity() * sizeof(int32_t) + g.rules.capacity() * sizeof(RuleInfo) +
             g.charsets.capacity() * sizeof(Charset) + g.start_nodes.capacity() * sizeof(StackNode) +
             g.start_heads.capacity() * sizeof(StackHead) + g.mask_cache.bytes();
  for (const RuleInfo& r : g.rules) n += r.name.capacity() > 15 ? r.name.capacity() + 1 : 0;  // past SSO
  for (const Charset& c : g.charsets) n += c.wide.capacity() * sizeof(c.wide[0]);
  return n;
}

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view gbnf, std::string_view root,
                                                  const GrammarLimits& limits) {
  std::shared_ptr<Grammar> g(new Grammar());
  g->impl_ = std::make_unique<GrammarImpl>(limits);
  GrammarImpl& impl = *g->impl_;
  parse_gbnf(gbnf, root, impl);
  StackStepper stepper(impl);
  stepper.begin_step();
  const RuleInfo& r = impl.rules[impl.root_rule];
  for (int32_t a = r.alt_begin; a < r.alt_end; ++a) {
    if (!stepper.expand(impl.start_heads, impl.start_nodes, 0, impl.alt_starts[a], -1, impl.start_accepting))
      throw GrammarError("grammar is too ambiguous: its start needs more than " +
                         std::to_string(limits.max_stacks) + " parse stacks (limit max_stacks)");
  }
  return g;
}

// ---- Matcher ----

struct Matcher::State {
  State(std::shared_ptr<const Grammar> gr, std::shared_ptr<const TokenVocabulary> vo)
      : grammar(std::move(gr)), vocab(std::move(vo)), g(grammar->impl()), v(vocab->impl()), stepper(g) {}
  State(const State& o)
      : grammar(o.grammar), vocab(o.vocab), g(o.g), v(o.v), nodes(o.nodes), heads(o.heads), partial(o.partial),
        accepting(o.accepting), ended(o.ended), stepper(g) {}

  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocabulary> vocab;
  const GrammarImpl& g;
  const TokenVocabulary::Impl& v;

  // The live state: a set of stacks (heads over the frame arena), a partial UTF-8
  // character, whether the text so far is a sentence, whether EOG was accepted.
  std::vector<StackNode> nodes;
  std::vector<StackHead> heads;
  Utf8Partial partial;
  bool accepting = false;
  bool ended = false;
  size_t nodes_after_compact = 0;

  StackStepper stepper;
  // Scratch, kept between calls so hot paths allocate nothing once warm.
  std::vector<StackHead> scratch_heads;
  std::vector<int32_t> remap;
  std::vector<StackNode> new_nodes;
  std::vector<int32_t> chain;
  std::vector<int32_t> key_seq;
  std::vector<std::pair<uint32_t, uint32_t>> key_spans;
  std::string key;        // walk states
  std::string cache_key;  // the matcher's state
  std::vector<uint32_t> mask_scratch;
  // The mask walk (see intern()).
  struct WalkState {
    uint32_t heads_begin, heads_end;  // in walk_heads
    Utf8Partial partial;
    bool accepting;
    TokenVocabulary::Impl::ByteSet loop_known;  // bytes whose transition is known...
    TokenVocabulary::Impl::ByteSet loops;       // ...and of those, the ones leading back here
  };
  static constexpr int32_t kUnknown = -2, kDead = -1;
  // Transition rows are kept for the first 4096 states of a walk (4 MiB): a grammar
  // whose stacks remember the whole prefix (palindromes) makes a state per trie node,
  // and those past the cap are stepped without a memo instead of growing the table.
  static constexpr size_t kMaxMemoStates = 4096;
  std::vector<StackHead> walk_heads;
  std::vector<WalkState> walk_states;
  std::vector<int32_t> walk_trans;  // [walk_states.size() * 256]: next state, kUnknown or kDead
  std::unordered_map<std::string, int32_t> walk_intern;
  std::vector<uint32_t> lvl_state;  // [max_depth + 1]: state after the first d bytes of the current node

  void reset() {
    nodes = g.start_nodes;
    heads = g.start_heads;
    partial = Utf8Partial{};
    accepting = g.start_accepting;
    ended = false;
    nodes_after_compact = nodes.size();
    stepper.forget_frames();
  }

  bool advance_bytes(std::string_view bytes);
  void compact();
  void make_key(const StackHead* hs, size_t n, Utf8Partial p, bool acc, std::string& out);
  int32_t intern(size_t out_begin, size_t node_mark, Utf8Partial p, bool acc);
  int32_t transition(int32_t s, uint8_t byte);
  bool loops_on_all(int32_t s, const TokenVocabulary::Impl::ByteSet& bytes);
  void compute_mask(std::span<uint32_t> mask);
  void fill_mask(std::span<uint32_t> mask);
};

bool Matcher::State::advance_bytes(std::string_view bytes) {
  if (ended) return false;
  if (bytes.empty()) return true;
  size_t node_mark = nodes.size();
  scratch_heads.assign(heads.begin(), heads.end());
  Utf8Partial p = partial;
  bool acc = accepting;
  for (char c : bytes) {
    size_t in_end = scratch_heads.size();
    Utf8Partial p2;
    bool acc2 = false;
    if (in_end == 0 ||
        !stepper.step(scratch_heads, nodes, 0, in_end, p, static_cast<uint8_t>(c), p2, acc2)) {
      nodes.resize(node_mark);
      return false;
    }
    scratch_heads.erase(scratch_heads.begin(), scratch_heads.begin() + static_cast<ptrdiff_t>(in_end));
    p = p2;
    acc = acc2;
  }
  heads.swap(scratch_heads);
  partial = p;
  accepting = acc;
  // Frames are append-only; rebuild the arena from the live stacks once it has
  // doubled, so a long generation keeps memory proportional to its stacks.
  if (nodes.size() > 2 * nodes_after_compact + 256) compact();
  return true;
}

void Matcher::State::compact() {
  remap.assign(nodes.size(), -1);
  new_nodes.clear();
  for (StackHead& h : heads) {
    // Collect the unmapped part of this stack, then map it bottom-up.
    chain.clear();
    int32_t id = h.parent;
    while (id >= 0 && remap[id] < 0) {
      chain.push_back(id);
      id = nodes[id].parent;
    }
    int32_t below = id < 0 ? -1 : remap[id];
    for (size_t k = chain.size(); k-- > 0;) {
      int32_t old = chain[k];
      remap[old] = static_cast<int32_t>(new_nodes.size());
      new_nodes.push_back(StackNode{nodes[old].pos, below});
      below = remap[old];
    }
    h.parent = h.parent < 0 ? -1 : remap[h.parent];
  }
  nodes.swap(new_nodes);
  nodes_after_compact = nodes.size();
  stepper.forget_frames();
}

// A state's key: the vocabulary, the partial character, acceptance and the set of
// stacks by content (each stack as its element positions top to bottom, sorted and
// deduplicated), so equal states reached through different frames share a key.
// A partial character whose every completion is accepted by every stack alike
// ("uniform") keys without its code-point bits: the bits cannot change any outcome.
// The leads E0, ED, F0, F4 keep theirs (they restrict the next byte's range).
void Matcher::State::make_key(const StackHead* hs, size_t n, Utf8Partial p, bool acc, std::string& out) {
  key_seq.clear();
  key_spans.clear();
  bool keep_cp = true;
  if (p.need > 0) {
    const bool special_lead =
        p.need + 1 == p.len && ((p.len == 3 && (p.cp == 0 || p.cp == 0xD)) || (p.len == 4 && (p.cp == 0 || p.cp == 4)));
    auto [lo, hi] = utf8_partial_range(p);
    if (!special_lead && lo <= hi) {
      keep_cp = false;
      for (size_t i = 0; i < n && !keep_cp; ++i)
        if (!g.charsets[g.elems[hs[i].pos].arg].contains_wide_range(lo, hi)) keep_cp = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t start = static_cast<uint32_t>(key_seq.size());
    key_seq.push_back(hs[i].pos);
    for (int32_t id = hs[i].parent; id >= 0; id = nodes[id].parent) key_seq.push_back(nodes[id].pos);
    key_spans.emplace_back(start, static_cast<uint32_t>(key_seq.size()));
  }
  auto less = [&](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
    return std::lexicographical_compare(key_seq.begin() + a.first, key_seq.begin() + a.second,
                                        key_seq.begin() + b.first, key_seq.begin() + b.second);
  };
  auto equal = [&](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
    return std::equal(key_seq.begin() + a.first, key_seq.begin() + a.second, key_seq.begin() + b.first,
                      key_seq.begin() + b.second);
  };
  if (key_spans.size() > 1) {
    std::sort(key_spans.begin(), key_spans.end(), less);
    key_spans.erase(std::unique(key_spans.begin(), key_spans.end(), equal), key_spans.end());
  }
  out.clear();
  auto put32 = [&](uint32_t x) { out.append(reinterpret_cast<const char*>(&x), sizeof x); };
  put32(static_cast<uint32_t>(v.serial));
  put32(static_cast<uint32_t>(v.serial >> 32));
  put32(keep_cp ? p.cp : 0xFFFFFFFFu);
  put32(static_cast<uint32_t>(p.need) | (static_cast<uint32_t>(p.len) << 8) | (static_cast<uint32_t>(acc) << 16));
  for (auto [a, b] : key_spans) {
    put32(b - a);
    for (uint32_t i = a; i < b; ++i) put32(static_cast<uint32_t>(key_seq[i]));
  }
}

// The walk's states: stack sets interned by key, so a (state, byte) transition is
// computed once per walk and every other trie node taking it costs a table lookup
// (inside a JSON string nearly every byte leads back to the same state).
int32_t Matcher::State::intern(size_t out_begin, size_t node_mark, Utf8Partial p, bool acc) {
  make_key(walk_heads.data() + out_begin, walk_heads.size() - out_begin, p, acc, key);
  auto [it, inserted] = walk_intern.try_emplace(key, static_cast<int32_t>(walk_states.size()));
  if (!inserted) {
    walk_heads.resize(out_begin);
    nodes.resize(node_mark);
    return it->second;
  }
  walk_states.push_back(WalkState{static_cast<uint32_t>(out_begin), static_cast<uint32_t>(walk_heads.size()), p, acc,
                                  {}, {}});
  if (walk_states.size() <= kMaxMemoStates) walk_trans.resize(walk_states.size() * 256, kUnknown);
  return it->second;
}

int32_t Matcher::State::transition(int32_t s, uint8_t byte) {
  const WalkState ws = walk_states[s];
  if (ws.heads_begin == ws.heads_end) return kDead;
  const size_t out_begin = walk_heads.size();
  const size_t node_mark = nodes.size();
  Utf8Partial p2;
  bool acc2 = false;
  if (!stepper.step(walk_heads, nodes, ws.heads_begin, ws.heads_end, ws.partial, byte, p2, acc2)) {
    walk_heads.resize(out_begin);
    nodes.resize(node_mark);
    return kDead;
  }
  return intern(out_begin, node_mark, p2, acc2);
}

// Whether state s steps back to itself on every byte of `bytes` (then every path
// below a trie node with those bytes stays in s: the whole subtree is allowed).
bool Matcher::State::loops_on_all(int32_t s, const TokenVocabulary::Impl::ByteSet& bytes) {
  if (static_cast<size_t>(s) >= kMaxMemoStates) return false;
  for (int w = 0; w < 4; ++w)
    if (bytes[w] & walk_states[s].loop_known[w] & ~walk_states[s].loops[w]) return false;
  for (int w = 0; w < 4; ++w) {
    uint64_t todo = bytes[w] & ~walk_states[s].loop_known[w];
    while (todo) {
      const int b = w * 64 + __builtin_ctzll(todo);
      todo &= todo - 1;
      int32_t next = walk_trans[static_cast<size_t>(s) * 256 + b];
      if (next == kUnknown) {
        next = transition(s, static_cast<uint8_t>(b));
        walk_trans[static_cast<size_t>(s) * 256 + b] = next;
      }
      walk_states[s].loop_known[w] |= uint64_t{1} << (b & 63);
      if (next != s) return false;
      walk_states[s].loops[w] |= uint64_t{1} << (b & 63);
    }
  }
  return true;
}

void Matcher::State::compute_mask(std::span<uint32_t> mask) {
  const size_t words = v.mask_words();
  std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(words), 0u);
  if (!heads.empty()) {
    if (lvl_state.size() < v.max_depth + 1) lvl_state.resize(v.max_depth + 1);
    const size_t node_mark = nodes.size();
    walk_heads.assign(heads.begin(), heads.end());
    walk_states.clear();
    walk_trans.clear();
    walk_intern.clear();
    lvl_state[0] = static_cast<uint32_t>(intern(0, node_mark, partial, accepting));
    const auto* tn = v.nodes.data();
    const int32_t* sorted = v.sorted_tokens.data();
    const size_t n = v.nodes.size();
    size_t i = 0;
    while (i < n) {
      const TokenVocabulary::Impl::TrieNode& t = tn[i];
      const int32_t s = static_cast<int32_t>(lvl_state[t.depth - 1]);
      int32_t next;
      if (static_cast<size_t>(s) < kMaxMemoStates) {
        next = walk_trans[static_cast<size_t>(s) * 256 + t.byte];
        if (next == kUnknown) {
          next = transition(s, t.byte);
          walk_trans[static_cast<size_t>(s) * 256 + t.byte] = next;
        }
      } else {
        next = transition(s, t.byte);
      }
      if (next == kDead) {
        i = static_cast<size_t>(t.subtree_end);
        continue;
      }
      lvl_state[t.depth] = static_cast<uint32_t>(next);
      int32_t tok_end = t.tok_end;
      size_t after = i + 1;
      if (t.below_idx >= 0 && loops_on_all(next, v.below_bytes[static_cast<size_t>(t.below_idx)])) {
        tok_end = v.subtree_tok_end(i);
        after = static_cast<size_t>(t.subtree_end);
      }
      for (int32_t k = t.tok_begin; k < tok_end; ++k) {
        uint32_t id = static_cast<uint32_t>(sorted[k]);
        mask[id >> 5] |= 1u << (id & 31);
      }
      i = after;
    }
    nodes.resize(node_mark);
  }
  if (accepting && partial.need == 0) {
    for (int32_t id : v.eog_ids) mask[static_cast<uint32_t>(id) >> 5] |= 1u << (id & 31);
  }
}

void Matcher::State::fill_mask(std::span<uint32_t> mask) {
  const size_t words = v.mask_words();
  if (mask.size() < words)
    throw std::invalid_argument("Matcher: mask has " + std::to_string(mask.size()) + " words, the vocabulary needs " +
                                std::to_string(words));
  std::fill(mask.begin() + static_cast<ptrdiff_t>(words), mask.end(), 0u);
  if (ended) {
    // Only EOG again: the caller should have stopped, and an all-masked row would
    // leave the sampler nothing.
    std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(words), 0u);
    for (int32_t id : v.eog_ids) mask[static_cast<uint32_t>(id) >> 5] |= 1u << (id & 31);
    return;
  }
  MaskCache& cache = g.mask_cache;
  if (!cache.enabled()) {
    compute_mask(mask);
    return;
  }
  make_key(heads.data(), heads.size(), partial, accepting, cache_key);
  if (cache.get(cache_key, mask)) return;
  compute_mask(mask);
  cache.put(cache_key, mask.first(words));
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab) {
  if (!grammar || !vocab) throw std::invalid_argument("Matcher: grammar and vocabulary are required");
  st_ = std::make_unique<State>(std::move(grammar), std::move(vocab));
  st_->reset();
}
Matcher::Matcher(std::unique_ptr<State> st) : st_(std::move(st)) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

Matcher Matcher::clone() const { return Matcher(std::make_unique<State>(*st_)); }
const Grammar& Matcher::grammar() const { return *st_->grammar; }
const TokenVocabulary& Matcher::vocabulary() const { return *st_->vocab; }

void Matcher::fill_next_token_bitmask(std::span<uint32_t> mask) { st_->fill_mask(mask); }

void Matcher::mask_logits(std::span<float> logits) {
  State& s = *st_;
  s.mask_scratch.resize(s.v.mask_words());
  s.fill_mask(s.mask_scratch);
  const size_t n = std::min(logits.size(), static_cast<size_t>(s.v.n_tokens));
  const uint32_t* m = s.mask_scratch.data();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i)
    if (!((m[i >> 5] >> (i & 31)) & 1)) logits[i] = neg_inf;
  for (size_t i = n; i < logits.size(); ++i) logits[i] = neg_inf;
}

bool Matcher::accept_token(int32_t id) {
  State& s = *st_;
  if (id < 0 || id >= s.v.n_tokens || s.ended || s.v.is_disallowed[id]) return false;
  if (s.v.is_eog[id]) {
    if (!s.accepting || s.partial.need != 0) return false;
    s.ended = true;
    return true;
  }
  const std::string& piece = s.v.pieces[id];
  if (piece.empty()) return false;
  return s.advance_bytes(piece);
}

bool Matcher::accept_bytes(std::string_view bytes) { return st_->advance_bytes(bytes); }
bool Matcher::is_accepting() const { return st_->accepting && st_->partial.need == 0; }
bool Matcher::is_terminated() const {
  return st_->ended || (st_->accepting && st_->heads.empty() && st_->partial.need == 0);
}
void Matcher::reset() { st_->reset(); }

}  // namespace pagoda::grammar
