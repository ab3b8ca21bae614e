#include "spec/suffix_index.h"

#include <algorithm>

#include "common/error.h"

namespace pagoda::spec {

namespace {

// splitmix64's finalizer: a cheap, well-mixed 64-bit step for the rolling hashes.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t step(uint64_t h, int32_t token) { return mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ULL)); }

}  // namespace

SuffixIndex::SuffixIndex(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

uint64_t SuffixIndex::key_of(uint64_t tenant, std::span<const int32_t> window) const {
  uint64_t h = mix(tenant + 1);
  for (int32_t t : window) h = step(h, t);
  return h;
}

void SuffixIndex::grow_table(size_t slots) {
  std::vector<Slot> old;
  old.swap(table_);
  bytes_ -= table_bytes(old.size());
  table_.assign(slots, Slot{});
  bytes_ += table_bytes(slots);
  used_slots_ = 0;
  for (const Slot& s : old)
    if (s.seq != 0) {
      const size_t mask = table_.size() - 1;
      size_t i = static_cast<size_t>(s.key) & mask;
      while (table_[i].seq != 0) i = (i + 1) & mask;
      table_[i] = s;
      ++used_slots_;
    }
}

void SuffixIndex::insert_posting(uint64_t key, uint32_t seq, uint32_t end) {
  const size_t mask = table_.size() - 1;
  size_t i = static_cast<size_t>(key) & mask;
  int same = 0;
  for (; table_[i].seq != 0; i = (i + 1) & mask)
    if (table_[i].key == key && ++same >= kMaxPostingsPerKey) return;
  table_[i] = Slot{key, seq, end};
  ++used_slots_;
}

void SuffixIndex::erase_posting(uint64_t key, uint32_t seq, uint32_t end) {
  if (table_.empty()) return;
  const size_t mask = table_.size() - 1;
  size_t i = static_cast<size_t>(key) & mask;
  for (; table_[i].seq != 0; i = (i + 1) & mask)
    if (table_[i].key == key && table_[i].seq == seq && table_[i].end == end) break;
  if (table_[i].seq == 0) return;  // never inserted (its key had kMaxPostingsPerKey already)
  // Backward-shift deletion: later slots of the probe run move into the hole when their
  // home slot does not lie cyclically in (hole, slot].
  size_t hole = i;
  for (size_t j = (i + 1) & mask; table_[j].seq != 0; j = (j + 1) & mask) {
    const size_t home = static_cast<size_t>(table_[j].key) & mask;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    table_[hole] = table_[j];
    hole = j;
  }
  table_[hole] = Slot{};
  --used_slots_;
}

uint64_t SuffixIndex::budget_for(size_t extra_tokens) const {
  // The table at most half full after the sequence's postings (a posting per token).
  size_t slots = std::max<size_t>(table_.size(), 1024);
  while ((used_slots_ + extra_tokens) * 2 > slots) slots *= 2;
  return table_bytes(slots) - table_bytes(table_.size());
}

void SuffixIndex::touch(uint32_t id) {
  Seq& s = seqs_.at(id);
  lru_.splice(lru_.begin(), lru_, s.lru);
}

void SuffixIndex::drop(uint32_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  const auto& t = s.tokens;
  for (size_t end = kKeyTokens; end < t.size(); ++end)
    erase_posting(key_of(s.tenant, std::span<const int32_t>(t.data() + end - kKeyTokens, kKeyTokens)), id,
                  static_cast<uint32_t>(end));
  if (auto f = by_full_hash_.find(s.full_hash); f != by_full_hash_.end() && f->second == id) by_full_hash_.erase(f);
  bytes_ -= t.capacity() * sizeof(int32_t) + kSeqOverheadBytes;
  tokens_ -= static_cast<int64_t>(t.size());
  lru_.erase(s.lru);
  seqs_.erase(it);
}

void SuffixIndex::add(uint64_t tenant, std::span<const int32_t> tokens) {
  if (tokens.size() <= static_cast<size_t>(kKeyTokens) || tokens.size() >= (size_t{1} << 31)) return;
  // An identical sequence is refreshed; one this continues is replaced (the contract).
  uint64_t h = mix(tenant + 7);
  std::vector<uint32_t> continued;
  for (size_t i = 0; i < tokens.size(); ++i) {
    h = step(h, tokens[i]);
    if (auto f = by_full_hash_.find(h); f != by_full_hash_.end()) {
      const Seq& s = seqs_.at(f->second);
      if (s.tenant == tenant && s.tokens.size() == i + 1 &&
          std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin())) {
        if (i + 1 == tokens.size()) {
          touch(f->second);
          ++added_;
          return;
        }
        continued.push_back(f->second);
      }
    }
  }
  for (uint32_t id : continued) drop(id);
  const uint64_t own = tokens.size() * sizeof(int32_t) + kSeqOverheadBytes;
  size_t alone = 1024;  // the table it would need in an empty index
  while (tokens.size() * 2 > alone) alone *= 2;
  if (own + table_bytes(alone) > capacity_) return;  // larger than the whole budget
  // Oldest out until the sequence, and the table growth it may need, fit.
  while (!lru_.empty() && bytes_ + own + budget_for(tokens.size()) > capacity_) {
    drop(lru_.back());
    ++evicted_;
    if (seqs_.empty()) {  // start the table afresh: it may be larger than this one needs
      bytes_ -= table_bytes(table_.size());
      table_.clear();
      table_.shrink_to_fit();
      used_slots_ = 0;
    }
  }
  size_t slots = std::max<size_t>(table_.size(), 1024);
  while ((used_slots_ + tokens.size()) * 2 > slots) slots *= 2;
  if (slots != table_.size()) grow_table(slots);

  const uint32_t id = next_id_;
  next_id_ = next_id_ == UINT32_MAX ? 1 : next_id_ + 1;
  Seq& s = seqs_[id];
  s.tenant = tenant;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.full_hash = h;
  lru_.push_front(id);
  s.lru = lru_.begin();
  by_full_hash_[h] = id;
  bytes_ += s.tokens.capacity() * sizeof(int32_t) + kSeqOverheadBytes;
  tokens_ += static_cast<int64_t>(s.tokens.size());
  ++added_;
  for (size_t end = kKeyTokens; end < s.tokens.size(); ++end)
    insert_posting(key_of(tenant, std::span<const int32_t>(s.tokens.data() + end - kKeyTokens, kKeyTokens)), id,
                   static_cast<uint32_t>(end));
}

void SuffixIndex::propose(uint64_t tenant, std::span<const int32_t> context, int64_t max_tokens, Proposal& best) {
  best.tokens.clear();
  best.match = 0;
  if (max_tokens <= 0 || table_.empty() || context.size() < static_cast<size_t>(kKeyTokens)) return;
  const auto window = context.subspan(context.size() - kKeyTokens);
  const uint64_t key = key_of(tenant, window);
  const size_t mask = table_.size() - 1;
  const Seq* best_seq = nullptr;
  uint32_t best_end = 0, best_id = 0;
  int seen = 0;
  for (size_t i = static_cast<size_t>(key) & mask; table_[i].seq != 0 && seen < kMaxCandidates; i = (i + 1) & mask) {
    const Slot& slot = table_[i];
    if (slot.key != key) continue;
    ++seen;
    const Seq& s = seqs_.at(slot.seq);
    if (s.tenant != tenant || slot.end >= s.tokens.size()) continue;  // no continuation
    // How far back it keeps matching (the key itself is compared too: hashes collide).
    int64_t m = 0;
    while (m < kMaxMatch && m < static_cast<int64_t>(slot.end) && m < static_cast<int64_t>(context.size()) &&
           s.tokens[slot.end - 1 - static_cast<size_t>(m)] == context[context.size() - 1 - static_cast<size_t>(m)])
      ++m;
    if (m < kKeyTokens) continue;
    // Longest match; among equals the most recently used sequence (higher in the LRU is
    // not tracked per slot: the newer id wins, ids grow with insertion).
    if (m > best.match || (m == best.match && slot.seq > best_id)) {
      best.match = m;
      best_seq = &s;
      best_end = slot.end;
      best_id = slot.seq;
    }
  }
  if (!best_seq) return;
  const size_t n = std::min<size_t>(static_cast<size_t>(max_tokens), best_seq->tokens.size() - best_end);
  best.tokens.assign(best_seq->tokens.begin() + best_end, best_seq->tokens.begin() + best_end + static_cast<std::ptrdiff_t>(n));
  touch(best_id);
  ++proposals_;
}

void SuffixIndex::clear() {
  seqs_.clear();
  by_full_hash_.clear();
  lru_.clear();
  table_.clear();
  table_.shrink_to_fit();
  used_slots_ = 0;
  bytes_ = 0;
  tokens_ = 0;
}

SuffixIndexStats SuffixIndex::stats() const {
  SuffixIndexStats st;
  st.bytes = bytes_;
  st.capacity_bytes = capacity_;
  st.sequences = static_cast<int64_t>(seqs_.size());
  st.tokens = tokens_;
  st.added = added_;
  st.evicted = evicted_;
  st.proposals = proposals_;
  return st;
}

void SuffixIndex::check_invariants() const {
  uint64_t bytes = table_bytes(table_.size());
  int64_t tokens = 0;
  for (const auto& [id, s] : seqs_) {
    bytes += s.tokens.capacity() * sizeof(int32_t) + kSeqOverheadBytes;
    tokens += static_cast<int64_t>(s.tokens.size());
  }
  PAGODA_CHECK(bytes == bytes_ && tokens == tokens_, "suffix index: byte or token count drifted");
  PAGODA_CHECK(bytes_ <= capacity_, "suffix index: over its byte budget");
  PAGODA_CHECK(lru_.size() == seqs_.size(), "suffix index: LRU and sequences disagree");
  size_t used = 0;
  for (const Slot& slot : table_) {
    if (slot.seq == 0) continue;
    ++used;
    auto it = seqs_.find(slot.seq);
    PAGODA_CHECK(it != seqs_.end(), "suffix index: a posting of a dropped sequence");
    const auto& t = it->second.tokens;
    PAGODA_CHECK(slot.end >= static_cast<uint32_t>(kKeyTokens) && slot.end < t.size() &&
                     key_of(it->second.tenant,
                            std::span<const int32_t>(t.data() + slot.end - kKeyTokens, kKeyTokens)) == slot.key,
                 "suffix index: a posting that does not match its sequence");
  }
  PAGODA_CHECK(used == used_slots_ && used_slots_ * 2 <= std::max<size_t>(table_.size(), 1),
               "suffix index: table count drifted or over half full");
}

void ngram_lookup(std::span<const int32_t> tokens, int64_t max_tokens, Proposal& p, int min_n, int max_n) {
  p.tokens.clear();
  p.match = 0;
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (int n = max_n; n >= min_n; --n) {
    if (len <= n) continue;
    const auto tail = tokens.subspan(static_cast<size_t>(len - n));
    // The latest earlier occurrence (ending before the tail itself) with a continuation.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (tokens[static_cast<size_t>(start)] != tail[0]) continue;
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t k = std::min<int64_t>(max_tokens, len - from);
      p.tokens.assign(tokens.begin() + from, tokens.begin() + from + k);
      p.match = n;
      return;
    }
  }
}

}  // namespace pagoda::spec
