#include "cache/state_snapshots.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace pagoda {

StateSnapshots::StateSnapshots(uint64_t capacity_bytes, uint64_t state_bytes, int64_t block_size)
    : capacity_bytes_(capacity_bytes), state_bytes_(state_bytes), block_size_(block_size) {
  PAGODA_CHECK(block_size_ > 0 && state_bytes_ > 0, "StateSnapshots: block size and state size must be positive");
}

StateSnapshots::Lru::iterator StateSnapshots::locate(const BlockHash& anchor, std::span<const int32_t> tail) {
  const auto it = by_anchor_.find(anchor);
  if (it == by_anchor_.end()) return lru_.end();
  for (Lru::iterator s : it->second)
    if (s->tail.size() == tail.size() && std::equal(tail.begin(), tail.end(), s->tail.begin())) return s;
  return lru_.end();
}

BlockHash snapshot_disk_key(const BlockHash& anchor) {
  const int32_t mark[1] = {kDiskMark};
  return block_hash(anchor, mark);
}

BlockHash StateSnapshots::anchor_of(const BlockHash& ns, std::span<const int32_t> tokens) const {
  const size_t bs = static_cast<size_t>(block_size_);
  BlockHash anchor = ns;
  for (size_t b = 0; b + bs <= tokens.size(); b += bs) anchor = block_hash(anchor, tokens.subspan(b, bs));
  return anchor;
}

void StateSnapshots::unlink(Lru::iterator victim) {
  auto& list = by_anchor_.at(victim->anchor);
  list.erase(std::find(list.begin(), list.end(), victim));
  if (list.empty()) by_anchor_.erase(victim->anchor);
  lru_.erase(victim);
}

void StateSnapshots::evict_front() {
  if (!write_through_) write_to_disk(lru_.front(), /*wait=*/false);  // policy evict: RAM's loss is the disk's gain
  unlink(lru_.begin());
  ++counters_.evictions;
}

void StateSnapshots::write_to_disk(const Snapshot& s, bool wait) {
  if (!disk_ || !s.tail.empty()) return;  // mid-block: no K/V on disk would reach it
  const BlockHash key = snapshot_disk_key(s.anchor);
  if (disk_->contains(key) || (io_ && io_->write_queued(key))) return;
  const int32_t mark[1] = {kDiskMark};
  ++counters_.disk_writes;
  if (io_) {
    io_->write(key, mark, s.state, wait ? DiskIo::WhenFull::Wait : DiskIo::WhenFull::Drop);
  } else {
    disk_->put(key, mark, s.state);
  }
}

void StateSnapshots::set_disk(DiskTier* tier, DiskIo* io, bool write_through) {
  disk_ = tier;
  io_ = tier ? io : nullptr;
  write_through_ = tier && write_through;
}

void StateSnapshots::persist(const BlockHash& ns, std::span<const int32_t> tokens) {
  if (!write_through_ || tokens.empty() || tokens.size() % static_cast<size_t>(block_size_) != 0) return;
  const Lru::iterator s = locate(anchor_of(ns, tokens), {});
  if (s != lru_.end()) write_to_disk(*s, /*wait=*/false);
}

void StateSnapshots::flush_to_disk() {
  if (!disk_) return;
  for (const Snapshot& s : lru_) write_to_disk(s, /*wait=*/true);
}

void StateSnapshots::erase(const BlockHash& ns, std::span<const int32_t> tokens) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size_) * static_cast<size_t>(block_size_);
  const Lru::iterator s = locate(anchor_of(ns, tokens), tokens.subspan(full));
  if (s != lru_.end()) unlink(s);
}

int64_t StateSnapshots::restore_longest(const BlockHash& ns, std::span<const int32_t> prompt, int64_t limit,
                                        uint8_t* state) {
  limit = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()));
  if (limit <= 0) return 0;
  // RAM: the best snapshot on the path; disk: block boundaries past it with a record,
  // longest first (one hash per block, as the K/V lookup computes).
  int64_t best = 0;
  Lru::iterator best_it = lru_.end();
  std::vector<std::pair<int64_t, BlockHash>> on_disk;
  BlockHash anchor = ns;
  for (int64_t start = 0; start <= limit; start += block_size_) {
    bool ram_at_start = false;
    if (const auto it = by_anchor_.find(anchor); it != by_anchor_.end())
      for (const Lru::iterator s : it->second) {
        const int64_t p = start + static_cast<int64_t>(s->tail.size());
        if (p <= limit && p > best &&
            std::equal(s->tail.begin(), s->tail.end(), prompt.begin() + static_cast<std::ptrdiff_t>(start))) {
          best = p;
          best_it = s;
        }
        ram_at_start |= s->tail.empty();
      }
    if (disk_ && start > 0 && !ram_at_start) {
      const BlockHash key = snapshot_disk_key(anchor);
      if (disk_->contains(key)) on_disk.emplace_back(start, key);
    }
    if (start + block_size_ > static_cast<int64_t>(prompt.size())) break;
    anchor = block_hash(anchor, prompt.subspan(static_cast<size_t>(start), static_cast<size_t>(block_size_)));
  }
  const int32_t mark[1] = {kDiskMark};
  for (auto d = on_disk.rbegin(); d != on_disk.rend() && d->first > best; ++d) {
    const std::span<uint8_t> out(state, state_bytes_);
    const bool ok = io_ ? io_->read_now(DiskIo::ReadBlock{d->second, {kDiskMark}, state}, state_bytes_)
                        : disk_->get(d->second, mark, out);
    if (!ok) continue;  // torn, another model's size, a stuck disk: the next best
    ++counters_.disk_restores;
    ++counters_.restores;
    counters_.restored_tokens += d->first;
    save(ns, prompt.first(static_cast<size_t>(d->first)), state);  // kept in RAM too (counts a save)
    return d->first;
  }
  if (best == 0) return 0;
  std::memcpy(state, best_it->state.data(), state_bytes_);
  lru_.splice(lru_.end(), lru_, best_it);
  ++counters_.restores;
  counters_.restored_tokens += best;
  return best;
}

bool StateSnapshots::save(const BlockHash& ns, std::span<const int32_t> tokens, const uint8_t* state) {
  if (tokens.empty() || state_bytes_ > capacity_bytes_) return false;
  const size_t full = tokens.size() / static_cast<size_t>(block_size_) * static_cast<size_t>(block_size_);
  const BlockHash anchor = anchor_of(ns, tokens);
  const std::span<const int32_t> tail = tokens.subspan(full);
  ++counters_.saves;
  if (Lru::iterator s = locate(anchor, tail); s != lru_.end()) {  // the same prefix: refresh it
    std::memcpy(s->state.data(), state, state_bytes_);
    lru_.splice(lru_.end(), lru_, s);
    return true;
  }
  while (bytes() + state_bytes_ > capacity_bytes_ && !lru_.empty()) evict_front();
  Snapshot snap;
  snap.anchor = anchor;
  snap.tail.assign(tail.begin(), tail.end());
  snap.p = static_cast<int64_t>(tokens.size());
  snap.state.assign(state, state + state_bytes_);
  lru_.push_back(std::move(snap));
  by_anchor_[anchor].push_back(std::prev(lru_.end()));
  return true;
}

int64_t StateSnapshots::find(const BlockHash& ns, std::span<const int32_t> prompt, int64_t limit) const {
  limit = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()));
  if (limit <= 0 || lru_.empty()) return 0;
  int64_t best = 0;
  BlockHash anchor = ns;
  for (int64_t start = 0; start <= limit; start += block_size_) {
    if (const auto it = by_anchor_.find(anchor); it != by_anchor_.end())
      for (const Lru::iterator s : it->second) {
        const int64_t p = start + static_cast<int64_t>(s->tail.size());
        if (p <= limit && p > best &&
            std::equal(s->tail.begin(), s->tail.end(), prompt.begin() + static_cast<std::ptrdiff_t>(start)))
          best = p;
      }
    if (start + block_size_ > static_cast<int64_t>(prompt.size())) break;
    anchor = block_hash(anchor, prompt.subspan(static_cast<size_t>(start), static_cast<size_t>(block_size_)));
  }
  return best;
}

bool StateSnapshots::restore(const BlockHash& ns, std::span<const int32_t> prompt, int64_t p, uint8_t* state) {
  if (p <= 0 || p > static_cast<int64_t>(prompt.size())) return false;
  const size_t full = static_cast<size_t>(p / block_size_ * block_size_);
  const Lru::iterator s = locate(anchor_of(ns, prompt.first(static_cast<size_t>(p))), prompt.subspan(full, static_cast<size_t>(p) - full));
  if (s == lru_.end()) return false;
  std::memcpy(state, s->state.data(), state_bytes_);
  lru_.splice(lru_.end(), lru_, s);
  ++counters_.restores;
  counters_.restored_tokens += p;
  return true;
}

void StateSnapshots::clear() {
  lru_.clear();
  by_anchor_.clear();
}

SnapshotStats StateSnapshots::stats() const {
  SnapshotStats s = counters_;
  s.snapshots = size();
  s.bytes = bytes();
  s.capacity_bytes = capacity_bytes_;
  s.state_bytes = state_bytes_;
  return s;
}

void StateSnapshots::check_invariants() const {
  size_t mapped = 0;
  for (const auto& [anchor, list] : by_anchor_) {
    PAGODA_CHECK(!list.empty(), "StateSnapshots: an empty anchor list");
    for (const Lru::iterator s : list) {
      PAGODA_CHECK(s->anchor == anchor, "StateSnapshots: a snapshot under another anchor");
      PAGODA_CHECK(s->state.size() == state_bytes_ && static_cast<int64_t>(s->tail.size()) < block_size_,
                   "StateSnapshots: a snapshot of the wrong size");
    }
    mapped += list.size();
  }
  PAGODA_CHECK(mapped == lru_.size(), "StateSnapshots: the LRU list and the anchors disagree");
  PAGODA_CHECK(bytes() <= capacity_bytes_, "StateSnapshots: over the cap");
}

}  // namespace pagoda
