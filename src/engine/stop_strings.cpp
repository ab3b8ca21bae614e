#include "engine/stop_strings.h"

#include <algorithm>

#include "common/error.h"

namespace pagoda {

namespace {

// Length of the UTF-8 sequence a lead byte starts, or 0 for a byte that cannot
// start a multi-byte sequence (ASCII, continuation, or never valid in UTF-8).
size_t utf8_sequence_length(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Bytes at the end of `s` that are a multi-byte UTF-8 sequence still missing
// continuation bytes (0..3).
size_t incomplete_utf8_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto byte = static_cast<unsigned char>(s[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    const size_t need = utf8_sequence_length(byte);
    return need > back ? back : 0;
  }
  return 0;  // no lead byte within 3 bytes: complete, or not UTF-8 at all
}

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;  // would match everywhere and stop before the first byte
    max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
    stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view text) {
  if (stopped_) return {"", true, matched_};
  held_.append(text);

  // held_ had no complete stop before this append, so any match found ends in
  // the new text, and (because the held tail was the longest stop prefix) it
  // starts inside held_, never in text already emitted.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const auto& s : stops_) {
    const size_t pos = held_.find(s);  // first occurrence = earliest end for s
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_start)) {
      best_start = pos;
      best_end = end;
      best = &s;
    }
  }
  if (best != nullptr) {
    Result r{held_.substr(0, best_start), true, *best};
    stopped_ = true;
    matched_ = *best;
    held_.clear();
    return r;
  }

  const size_t emit_bytes = held_.size() - hold_length();
  Result r{held_.substr(0, emit_bytes), false, ""};
  held_.erase(0, emit_bytes);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

size_t StopStringMatcher::hold_length() const {
  const std::string_view h = held_;
  size_t stop_hold = 0;
  // Longest first: the first hit is the answer. Proper prefixes only — a whole
  // stop would have been matched by push().
  const size_t longest = std::min(h.size(), max_stop_bytes_ > 0 ? max_stop_bytes_ - 1 : 0);
  for (size_t k = longest; k >= 1 && stop_hold == 0; --k) {
    const std::string_view tail = h.substr(h.size() - k);
    for (const auto& s : stops_) {
      if (s.size() > k && std::string_view(s).starts_with(tail)) {
        stop_hold = k;
        break;
      }
    }
  }
  return std::max(stop_hold, incomplete_utf8_tail(h));
}

void StopStringMatcher::check_invariants() const {
  size_t longest = 0;
  for (const auto& s : stops_) {
    PAGODA_CHECK(!s.empty(), "empty stop string kept");
    longest = std::max(longest, s.size());
  }
  PAGODA_CHECK(longest == max_stop_bytes_, "max_stop_bytes_ is stale");
  for (const auto& s : stops_)
    PAGODA_CHECK(held_.find(s) == std::string::npos, "held text contains the stop string '" + s + "'");
  const size_t bound = std::max<size_t>(max_stop_bytes_ > 0 ? max_stop_bytes_ - 1 : 0, 3);
  PAGODA_CHECK(held_.size() <= bound,
               "holding " + std::to_string(held_.size()) + " bytes, bound " + std::to_string(bound));
  if (stopped_) PAGODA_CHECK(held_.empty(), "text held after stopping");
}

}  // namespace pagoda
