#include "server/structured_output.h"

#include "grammar/json_schema.h"

namespace pagoda::server {

namespace {

ApiError schema_error(const grammar::UnsupportedSchema& e, const std::string& param) {
  return ApiError(400, param + ": " + e.what(), param);
}

std::string constraint_gbnf(const OutputConstraint& c) {
  using Kind = OutputConstraint::Kind;
  try {
    switch (c.kind) {
      case Kind::None:
        return {};
      case Kind::JsonObject:
        return grammar::json_object_output_gbnf();
      case Kind::JsonSchema:
        return grammar::json_schema_output_gbnf(c.schema);
      case Kind::Grammar:
        return c.text;
      case Kind::Regex:
        return grammar::regex_to_gbnf(c.text);
      case Kind::Choice:
        return grammar::choice_to_gbnf(c.choices);
    }
  } catch (const grammar::UnsupportedSchema& e) {
    throw schema_error(e, c.param);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, c.param + ": " + e.what(), c.param);
  }
  return {};
}

}  // namespace

std::string output_grammar_gbnf(const CompletionRequest& r, const chat::ChatFormat& format) {
  if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) {
    std::optional<std::string> only;
    if (r.tool_choice == ToolChoice::Named) only = r.tool_choice_name;
    try {
      return chat::tool_call_grammar(format, r.tools, only, r.parallel_tool_calls);
    } catch (const grammar::UnsupportedSchema& e) {
      throw schema_error(e, "tools");
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, std::string("tools: ") + e.what(), "tools");
    }
  }
  return constraint_gbnf(r.constraint);
}

std::shared_ptr<const grammar::Grammar> GrammarCache::get(const std::string& gbnf, const std::string& param,
                                                          const std::string& root) {
  const std::string key = root + '\n' + gbnf;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      ++hits_;
      std::shared_ptr<const grammar::Grammar> g = it->second.grammar;
      trim(&lru_.front());  // mask caches grew since the last look
      return g;
    }
  }
  // Compiled outside the lock: a large schema must not stall other requests' lookups.
  // Two requests racing on the same new text both compile; the second insert wins.
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::Grammar::from_gbnf(gbnf, root);
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, param + ": " + e.what(), param);
  }
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) return it->second.grammar;
  lru_.push_front(key);
  map_.emplace(key, Entry{g, lru_.begin()});
  trim(&lru_.front());
  return g;
}

uint64_t GrammarCache::booked_bytes(const std::string& key, const grammar::Grammar& g) const {
  // The key twice (map and list) and ~128 bytes of nodes around them.
  return 2 * key.capacity() + 128 + g.memory_bytes();
}

void GrammarCache::trim(const std::string* keep) {
  uint64_t total = 0;
  for (const auto& [key, e] : map_) total += booked_bytes(key, *e.grammar);
  while (!lru_.empty() && (map_.size() > max_entries_ || total > max_bytes_) && &lru_.back() != keep) {
    auto victim = map_.find(lru_.back());
    total -= booked_bytes(victim->first, *victim->second.grammar);
    map_.erase(victim);
    lru_.pop_back();
    ++evictions_;
  }
  // The newest alone over the bound: not kept either (it still serves this request).
  if (total > max_bytes_ && !lru_.empty() && &lru_.back() == keep) {
    total -= booked_bytes(*keep, *map_.at(*keep).grammar);
    map_.erase(*keep);
    lru_.pop_back();
    ++evictions_;
  }
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  GrammarCacheStats s;
  s.entries = static_cast<int64_t>(map_.size());
  for (const auto& [key, e] : map_) s.bytes += booked_bytes(key, *e.grammar);
  s.capacity_bytes = max_bytes_;
  s.hits = hits_;
  s.evictions = evictions_;
  return s;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return map_.size();
}

uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return hits_;
}

}  // namespace pagoda::server
