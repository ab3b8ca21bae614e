// Structured outputs and required tool calls -> a compiled grammar for the engine.
//
// Contract:
// - output_grammar_gbnf() is the GBNF a request's output must match: its
//   OutputConstraint (json_object, json_schema, GBNF, regex, choice), or, for
//   tool_choice required / named, the chat format's tool-call syntax with each tool's
//   `parameters` schema. "" when the output is free. Throws ApiError 400 naming the
//   unsupported schema keyword or the grammar error (never unconstrained output for a
//   constraint it cannot honour).
// - GrammarCache compiles GBNF once and hands the same immutable Grammar to every
//   request that asks for the same text, so the Grammar's mask cache is shared across
//   requests too. Bounded: at most `max_entries` grammars and `max_bytes` of them, the
//   least recently used going first. An entry is booked at what it holds: its key text
//   (twice: the map key and the LRU list) plus Grammar::memory_bytes(), whose mask cache
//   grows as requests use it, so the total is recounted and trimmed on every get(). A
//   grammar evicted while requests use it lives until they end (it is shared), unbooked.
//   Rejected: counting entries only, which let 64 one-megabyte grammars hold 300-430 MiB.
//   Thread-safe (handlers on several I/O threads).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "chat/chat_format.h"
#include "grammar/grammar.h"
#include "server/openai_protocol.h"

namespace pagoda::server {

std::string output_grammar_gbnf(const CompletionRequest& r, const chat::ChatFormat& format);

struct GrammarCacheStats {
  int64_t entries = 0;
  uint64_t bytes = 0;           // booked as in the contract
  uint64_t capacity_bytes = 0;  // max_bytes
  uint64_t hits = 0;
  uint64_t evictions = 0;
};

class GrammarCache {
 public:
  // 64 MiB: ~12 of the largest (1 MB) GBNF texts compiled, or hundreds of typical JSON
  // schema grammars (tens of KiB each, masks included). --grammar-cache-bytes.
  static constexpr uint64_t kDefaultMaxBytes = 64ull << 20;
  explicit GrammarCache(size_t max_entries = 64, uint64_t max_bytes = kDefaultMaxBytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}
  // Throws ApiError 400 (param `param`) when the GBNF does not compile. `root`: the
  // start rule.
  std::shared_ptr<const grammar::Grammar> get(const std::string& gbnf, const std::string& param,
                                              const std::string& root = "root");
  size_t size() const;
  uint64_t hits() const;
  GrammarCacheStats stats() const;

 private:
  uint64_t booked_bytes(const std::string& key, const grammar::Grammar& g) const;
  // Recounts the entries and evicts least recently used ones (never `keep`) while over a
  // bound. Requires: mu_ held.
  void trim(const std::string* keep);
  size_t max_entries_;
  uint64_t max_bytes_;
  uint64_t evictions_ = 0;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    std::shared_ptr<const grammar::Grammar> grammar;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> map_;
  uint64_t hits_ = 0;
};

}  // namespace pagoda::server
