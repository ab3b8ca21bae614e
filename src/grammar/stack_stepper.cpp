// The parse-stack step: one byte in, the surviving stacks out. Shared by the
// matcher (accepting tokens) and the mask walk (trying every vocabulary byte).
//
// UTF-8: bytes are gathered into a Utf8Partial until a code point is complete. While
// one is partial, a stack survives when its character set meets the code points the
// bytes so far can still become (an interval), so a token ending mid-character is
// allowed exactly when some completion would be. Overlong forms and surrogates are
// rejected by clipping that interval to the valid range of the encoded length (and
// charsets never contain surrogates).
#include "grammar/grammar_impl.h"

namespace pagoda::grammar {
namespace {

// Up to this many heads, duplicates are found by a linear scan (cheaper than hashing
// for the handful of stacks a JSON grammar keeps); past it, a hash set.
constexpr size_t kLinearDedup = 16;

uint64_t head_key(StackHead h) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(h.pos)) << 32) | static_cast<uint32_t>(h.parent);
}
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

bool StackStepper::push_head(std::vector<StackHead>& heads, size_t out_begin, StackHead h) {
  size_t n = heads.size() - out_begin;
  if (n < kLinearDedup) {
    for (size_t i = out_begin; i < heads.size(); ++i)
      if (heads[i] == h) return true;
    if (n + 1 > g_.limits.max_stacks) return false;
    heads.push_back(h);
    if (heads.size() - out_begin == kLinearDedup) {
      // Switch to the hash set: seed it with what is there.
      seen_.assign(64, ~uint64_t{0});
      seen_count_ = 0;
      for (size_t i = out_begin; i < heads.size(); ++i) {
        uint64_t k = head_key(heads[i]);
        size_t mask = seen_.size() - 1;
        size_t j = mix(k) & mask;
        while (seen_[j] != ~uint64_t{0} && seen_[j] != k) j = (j + 1) & mask;
        if (seen_[j] == ~uint64_t{0}) {
          seen_[j] = k;
          ++seen_count_;
        }
      }
    }
    return true;
  }
  if ((seen_count_ + 1) * 2 > seen_.size()) {
    std::vector<uint64_t> old(seen_.size() * 2, ~uint64_t{0});
    old.swap(seen_);
    size_t mask = seen_.size() - 1;
    for (uint64_t k : old) {
      if (k == ~uint64_t{0}) continue;
      size_t j = mix(k) & mask;
      while (seen_[j] != ~uint64_t{0}) j = (j + 1) & mask;
      seen_[j] = k;
    }
  }
  uint64_t k = head_key(h);
  size_t mask = seen_.size() - 1;
  size_t j = mix(k) & mask;
  while (seen_[j] != ~uint64_t{0}) {
    if (seen_[j] == k) return true;
    j = (j + 1) & mask;
  }
  if (n + 1 > g_.limits.max_stacks) return false;
  seen_[j] = k;
  ++seen_count_;
  heads.push_back(h);
  return true;
}

void StackStepper::forget_frames() {
  std::fill(frame_keys_.begin(), frame_keys_.end(), ~uint64_t{0});
  frame_count_ = 0;
}

int32_t StackStepper::frame(std::vector<StackNode>& nodes, int32_t pos, int32_t parent) {
  if ((frame_count_ + 1) * 2 > frame_keys_.size()) {
    // Grow (or start); stale entries are dropped on the way.
    std::vector<uint64_t> old_keys(std::max<size_t>(frame_keys_.size() * 2, 256), ~uint64_t{0});
    std::vector<int32_t> old_ids(old_keys.size(), -1);
    old_keys.swap(frame_keys_);
    old_ids.swap(frame_ids_);
    frame_count_ = 0;
    const size_t mask = frame_keys_.size() - 1;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      const int32_t id = old_ids[i];
      if (old_keys[i] == ~uint64_t{0} || id < 0 || static_cast<size_t>(id) >= nodes.size() ||
          head_key(StackHead{nodes[id].pos, nodes[id].parent}) != old_keys[i])
        continue;
      size_t j = mix(old_keys[i]) & mask;
      while (frame_keys_[j] != ~uint64_t{0}) j = (j + 1) & mask;
      frame_keys_[j] = old_keys[i];
      frame_ids_[j] = id;
      ++frame_count_;
    }
  }
  const uint64_t k = head_key(StackHead{pos, parent});
  const size_t mask = frame_keys_.size() - 1;
  size_t j = mix(k) & mask;
  while (frame_keys_[j] != ~uint64_t{0} && frame_keys_[j] != k) j = (j + 1) & mask;
  if (frame_keys_[j] == k) {
    const int32_t id = frame_ids_[j];
    if (static_cast<size_t>(id) < nodes.size() && nodes[id].pos == pos && nodes[id].parent == parent) return id;
  } else {
    frame_keys_[j] = k;
    ++frame_count_;
  }
  frame_ids_[j] = static_cast<int32_t>(nodes.size());
  nodes.push_back(StackNode{pos, parent});
  return frame_ids_[j];
}

bool StackStepper::expand(std::vector<StackHead>& heads, std::vector<StackNode>& nodes, size_t out_begin,
                          int32_t pos, int32_t parent, bool& accepting) {
  const Elem* elems = g_.elems.data();
  work_.clear();
  work_.push_back(StackHead{pos, parent});
  while (!work_.empty()) {
    StackHead w = work_.back();
    work_.pop_back();
    int32_t p = w.pos, par = w.parent;
    for (;;) {
      // Each iteration either pops a frame, pushes one or ends: without left
      // recursion this terminates, and the budget bounds ambiguous grammars.
      if (work_budget_ == 0) return false;
      --work_budget_;
      const Elem& e = elems[p];
      if (e.kind == ElemKind::kChars) {
        if (!g_.charsets[e.arg].empty() && !push_head(heads, out_begin, StackHead{p, par})) return false;
        break;
      }
      if (e.kind == ElemKind::kEnd) {
        if (par < 0) {
          accepting = true;
          break;
        }
        p = nodes[par].pos;
        par = nodes[par].parent;
        continue;
      }
      // kRule: a frame for what follows, unless nothing does (a tail call keeps
      // right recursion such as x* at constant depth).
      int32_t ret = p + 1;
      int32_t frame = par;
      if (elems[ret].kind != ElemKind::kEnd) frame = this->frame(nodes, ret, par);
      const RuleInfo& r = g_.rules[e.arg];
      for (int32_t a = r.alt_end - 1; a > r.alt_begin; --a) work_.push_back(StackHead{g_.alt_starts[a], frame});
      p = g_.alt_starts[r.alt_begin];
      par = frame;
    }
  }
  return true;
}

bool StackStepper::step(std::vector<StackHead>& heads, std::vector<StackNode>& nodes, size_t in_begin,
                        size_t in_end, Utf8Partial in_partial, uint8_t byte, Utf8Partial& out_partial,
                        bool& out_accepting) {
  Utf8Partial p = in_partial;
  if (p.need == 0) {
    if (byte < 0x80) {
      p.cp = byte;
      p.len = 1;
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      p = Utf8Partial{byte & 0x1Fu, 1, 2};
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      p = Utf8Partial{byte & 0x0Fu, 2, 3};
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      p = Utf8Partial{byte & 0x07u, 3, 4};
    } else {
      return false;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    p.cp = (p.cp << 6) | (byte & 0x3Fu);
    --p.need;
  }
  out_accepting = false;
  size_t out_begin = heads.size();
  if (p.need > 0) {
    auto [lo, hi] = utf8_partial_range(p);
    if (lo > hi) return false;
    for (size_t i = in_begin; i < in_end; ++i) {
      StackHead h = heads[i];
      if (g_.charsets[g_.elems[h.pos].arg].intersects_wide(lo, hi)) heads.push_back(h);
    }
    out_partial = p;
    return heads.size() > out_begin;
  }
  uint32_t cp = p.cp;
  out_partial = Utf8Partial{};
  begin_step();
  for (size_t i = in_begin; i < in_end; ++i) {
    StackHead h = heads[i];
    if (!g_.charsets[g_.elems[h.pos].arg].contains(cp)) continue;
    if (!expand(heads, nodes, out_begin, h.pos + 1, h.parent, out_accepting)) {
      heads.resize(out_begin);
      return false;
    }
  }
  return heads.size() > out_begin || out_accepting;
}

}  // namespace pagoda::grammar
