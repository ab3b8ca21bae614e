#include "server/responses_store.h"

#include <chrono>

#include "common/error.h"
#include "common/json_text.h"

namespace pagoda::server {

ResponsesStore::ResponsesStore(size_t max_entries, int64_t ttl_ms, uint64_t max_bytes, Clock clock)
    : max_entries_(max_entries), ttl_ms_(ttl_ms), max_bytes_(max_bytes), clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

// Entries are stored in LRU order, not time order, so expiry walks the whole list; a
// put is rare next to generation (one per response) and the store is a few thousand
// entries at most. Rejected: a second time-ordered list, for no measurable gain.
void ResponsesStore::drop_expired(int64_t now) {
  if (ttl_ms_ <= 0) return;
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto m = map_.find(*it);
    ++it;
    if (expired(m->second, now)) drop(m);
  }
}

void ResponsesStore::drop(std::unordered_map<std::string, Slot>::iterator m) {
  bytes_ -= m->second.bytes;
  lru_.erase(m->second.pos);
  map_.erase(m);
}

uint64_t ResponsesStore::booked_bytes(const std::string& id, const std::string& response_text,
                                      const std::string& messages_text) {
  // The id twice (map key and list node), each buffer at its capacity.
  return 2 * id.capacity() + response_text.capacity() + messages_text.capacity() + kSlotOverheadBytes;
}

void ResponsesStore::put(const std::string& id, Entry entry) {
  const int64_t now = clock_();
  // Serialized outside the lock: dumping a conversation is the slow part. shrink_to_fit:
  // dump() grows its buffer by doubling, and the spare half would be held unbooked.
  std::string response_text = dump_json(entry.response), messages_text = dump_json(entry.messages);
  response_text.shrink_to_fit();
  messages_text.shrink_to_fit();
  entry = Entry{};  // the parsed copy is not kept
  const uint64_t size = booked_bytes(id, response_text, messages_text);
  std::lock_guard<std::mutex> lk(mu_);
  drop_expired(now);
  if (auto m = map_.find(id); m != map_.end()) drop(m);
  if (max_entries_ == 0 || size > max_bytes_) return;
  while (map_.size() >= max_entries_ || bytes_ + size > max_bytes_) drop(map_.find(lru_.back()));
  lru_.push_front(id);
  map_.emplace(id, Slot{std::move(response_text), std::move(messages_text), now, size, lru_.begin()});
  bytes_ += size;
}

std::optional<ResponsesStore::Entry> ResponsesStore::get(const std::string& id) {
  const int64_t now = clock_();
  std::unique_lock<std::mutex> lk(mu_);
  auto m = map_.find(id);
  if (m == map_.end()) return std::nullopt;
  if (expired(m->second, now)) {
    drop(m);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, m->second.pos);
  // Parsed outside the lock (a long conversation takes milliseconds).
  const std::string response_text = m->second.response_text, messages_text = m->second.messages_text;
  lk.unlock();
  // Our own dump of JSON that was parsed with the depth limit: it parses.
  return Entry{nlohmann::ordered_json::parse(response_text), nlohmann::ordered_json::parse(messages_text)};
}

bool ResponsesStore::erase(const std::string& id) {
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lk(mu_);
  auto m = map_.find(id);
  if (m == map_.end()) return false;
  const bool live = !expired(m->second, now);
  drop(m);
  return live;
}

size_t ResponsesStore::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return map_.size();
}

uint64_t ResponsesStore::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}

void ResponsesStore::check_invariants() const {
  std::lock_guard<std::mutex> lk(mu_);
  PAGODA_CHECK(lru_.size() == map_.size(), "ResponsesStore: lru and map sizes differ");
  PAGODA_CHECK(map_.size() <= max_entries_, "ResponsesStore: more entries than max_entries");
  uint64_t total = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    auto m = map_.find(*it);
    PAGODA_CHECK(m != map_.end() && m->second.pos == it, "ResponsesStore: lru entry " + *it + " not mapped");
    total += m->second.bytes;
  }
  PAGODA_CHECK(total == bytes_ && bytes_ <= max_bytes_, "ResponsesStore: byte count is off");
}

}  // namespace pagoda::server
