// Flat hash tables for the two lookups on the tokenizer's hot paths (internal).
//
// Why not std::unordered_map: loading Llama 3's tokenizer.json does ~1.2M
// lookups/inserts (128k texts, 280k merges x 3 texts + 1 pair); with
// node-based maps that was 0.4 s of a 0.55 s load (a 64-bit modulo and a
// pointer chase per probe, one allocation per entry). Open addressing with a
// power-of-two table and linear probing brings it under 0.1 s, and makes the
// per-pair lookup in BPE merging a couple of cache lines.
//
// Both tables are built once at load and then only read (thread-safe reads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace pagoda::tokenizer_detail {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline size_t table_capacity(size_t n) {  // power of two, load factor <= 0.5
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

// uint64 key -> V. The key ~0 is reserved as "empty".
template <class V>
class FlatMap64 {
 public:
  void reserve(size_t n) {
    if (table_capacity(n) > slots_.size()) rehash(table_capacity(n));
  }
  // Inserts or keeps the existing value; returns false when the key was present.
  bool emplace(uint64_t key, V value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(table_capacity(size_ + 1));
    Slot& s = probe(key);
    if (s.key == key) return false;
    s = {key, value};
    ++size_;
    return true;
  }
  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = const_cast<FlatMap64*>(this)->probe(key);
    return s.key == key ? &s.value : nullptr;
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  Slot& probe(uint64_t key) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
    }
  }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    for (const Slot& s : old) {
      if (s.key != kEmpty) probe(s.key) = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// string -> token id, where the strings live elsewhere (the token table):
// slots hold only (hash, id), and `text_of(id)` gives the string back.
class TextIndex {
 public:
  template <class TextOf>
  void build(int32_t n, TextOf&& text_of) {
    slots_.assign(table_capacity(static_cast<size_t>(n)), Slot{});
    size_ = 0;
    for (int32_t id = 0; id < n; ++id) {
      const std::string_view text = text_of(id);
      if (!text.empty()) insert_or_assign(text, id, text_of);
    }
  }
  // Adds `id` under `text` unless the text is already present.
  template <class TextOf>
  void insert_if_absent(std::string_view text, int32_t id, TextOf&& text_of) {
    if (find(text, text_of)) return;
    insert_or_assign(text, id, text_of);
  }
  template <class TextOf>
  std::optional<int32_t> find(std::string_view text, TextOf&& text_of) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = hash(text);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id < 0) return std::nullopt;
      if (s.hash == static_cast<uint32_t>(h >> 32) && text_of(s.id) == text) return s.id;
    }
  }
  bool empty() const { return size_ == 0; }

 private:
  struct Slot {
    uint32_t hash = 0;  // high half of the 64-bit hash, to skip most string compares
    int32_t id = -1;    // -1: empty
  };
  static uint64_t hash(std::string_view s) { return mix64(std::hash<std::string_view>{}(s)); }
  template <class TextOf>
  void insert_or_assign(std::string_view text, int32_t id, TextOf&& text_of) {
    if (2 * (size_ + 1) > slots_.size()) grow(text_of);
    const uint64_t h = hash(text);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {static_cast<uint32_t>(h >> 32), id};
        ++size_;
        return;
      }
      if (s.hash == static_cast<uint32_t>(h >> 32) && text_of(s.id) == text) {
        s.id = id;  // duplicate text: the later id wins, as in llama.cpp
        return;
      }
    }
  }
  template <class TextOf>
  void grow(TextOf&& text_of) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(16, old.size() * 2), Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.id >= 0) insert_or_assign(text_of(s.id), s.id, text_of);
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace pagoda::tokenizer_detail
