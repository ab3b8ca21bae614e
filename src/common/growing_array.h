// GrowingArray<T> — a per-id array (ids 0..limit-1) whose storage covers the ids written
// so far, not the whole id range: the per-block tables of the KV pool's users, sized by
// the blocks a server really used instead of its budget (a 1 MB model's default budget is
// 600k blocks). Reads of an id never written return the fill value; a write grows the
// storage to cover it, doubling (amortised O(1)), never past `limit`. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pagoda {

template <class T>
class GrowingArray {
 public:
  GrowingArray(size_t limit, T fill) : limit_(limit), fill_(fill) {}
  // The value at i (the fill value when i was never written).
  T operator[](size_t i) const { return i < v_.size() ? v_[i] : fill_; }
  // A writable slot for i, grown to cover it. Requires i < limit.
  T& at(size_t i) {
    if (i >= v_.size()) v_.resize(std::min(limit_, std::max(i + 1, 2 * v_.size())), fill_);
    return v_[i];
  }
  // Every id reads `value` again (the storage keeps its size).
  void reset() { std::fill(v_.begin(), v_.end(), fill_); }
  size_t storage_size() const { return v_.size(); }

 private:
  size_t limit_;
  T fill_;
  std::vector<T> v_;
};

}  // namespace pagoda
