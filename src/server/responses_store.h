// ResponsesStore — the bounded server-side store behind the OpenAI Responses API's
// `store: true`, `previous_response_id` and GET / DELETE /v1/responses/{id}.
//
// Contract:
// - Holds, per response id, the response object as returned (for GET) and the
//   conversation it ended (the chat messages of every turn so far, its own output
//   last, without `instructions`, which OpenAI does not carry over), so a request with
//   previous_response_id renders a prompt that extends the previous one.
// - Bounds: at most `max_entries` responses and `max_bytes` of them, the least recently
//   used one going first
//   (put and a successful get count as use); an entry over max_bytes alone is not
//   stored. Each expires `ttl_ms` after it was stored (expired entries are dropped when
//   met and on every put). max_entries 0 stores nothing; ttl_ms <= 0 means no expiry.
//   Why bytes too: an entry holds a whole conversation (up to a context of text), so
//   1024 entries of a 128k-token model could hold ~1 GiB; the byte bound caps that.
// - Memory: an entry is held as its compact JSON text (parsed again by get()), and its
//   size is what it really holds: the text buffers' capacity, the id, and a fixed
//   kSlotOverheadBytes for its map node, list node and Slot. Rejected: holding the parsed
//   JSON and counting its text, which under-booked by ~15x (nlohmann keeps a 16-byte
//   value plus an allocation per string, object and array; 40 responses with 1 MiB of
//   small metadata values under a 16 MiB cap took ~230 MiB). A get() costs one parse of
//   the entry (~100 MB/s), once per previous_response_id turn.
// - Thread-safe: one mutex guards everything (handlers on I/O threads get / erase,
//   the engine thread puts when a response finishes); every call is O(1) amortised.
// - The clock is injectable so tests can step time.
//
// Invariants (check_invariants()):
//   1. lru_ and map_ hold the same ids; each map entry's `pos` points at its id in lru_.
//   2. size() <= max_entries; bytes() == the sum of the entries' sizes <= max_bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace pagoda::server {

class ResponsesStore {
 public:
  struct Entry {
    nlohmann::ordered_json response;  // the response object (GET answers it)
    nlohmann::ordered_json messages;  // chat messages of the conversation up to and including it
  };
  using Clock = std::function<int64_t()>;  // milliseconds, monotonic

  ResponsesStore(size_t max_entries, int64_t ttl_ms, uint64_t max_bytes = UINT64_MAX, Clock clock = {});
  ResponsesStore(const ResponsesStore&) = delete;
  ResponsesStore& operator=(const ResponsesStore&) = delete;

  // Stores (or replaces) `id`; evicts the least recently used entry beyond max_entries.
  void put(const std::string& id, Entry entry);
  // The entry, unless unknown or expired; marks it most recently used.
  std::optional<Entry> get(const std::string& id);
  // True when `id` was stored (and not expired).
  bool erase(const std::string& id);
  size_t size() const;
  uint64_t bytes() const;
  size_t max_entries() const { return max_entries_; }
  // What one entry costs beyond its text: an unordered_map node (the id string, Slot, the
  // bucket pointer), a list node with its copy of the id, and allocator headers; measured
  // ~300 bytes on glibc x86-64, booked as 512 for margin.
  static constexpr uint64_t kSlotOverheadBytes = 512;
  // The bytes an entry with this id and these texts is booked at.
  static uint64_t booked_bytes(const std::string& id, const std::string& response_text,
                               const std::string& messages_text);
  int64_t ttl_ms() const { return ttl_ms_; }
  void check_invariants() const;  // aborts via PAGODA_CHECK on a broken invariant

 private:
  struct Slot {
    std::string response_text;  // compact JSON
    std::string messages_text;
    int64_t stored_ms = 0;
    uint64_t bytes = 0;
    std::list<std::string>::iterator pos;
  };
  bool expired(const Slot& s, int64_t now) const { return ttl_ms_ > 0 && now - s.stored_ms >= ttl_ms_; }
  void drop_expired(int64_t now);  // Requires: mu_ held.
  void drop(std::unordered_map<std::string, Slot>::iterator m);  // Requires: mu_ held.

  const size_t max_entries_;
  const int64_t ttl_ms_;
  const uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  Clock clock_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // most recently used first
  std::unordered_map<std::string, Slot> map_;
};

}  // namespace pagoda::server
