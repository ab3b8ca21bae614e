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
//   requests too. Bounded: at most `max_entries` grammars (least recently used goes).
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

class GrammarCache {
 public:
  explicit GrammarCache(size_t max_entries = 64) : max_entries_(max_entries) {}
  // Throws ApiError 400 (param `param`) when the GBNF does not compile. `root`: the
  // start rule.
  std::shared_ptr<const grammar::Grammar> get(const std::string& gbnf, const std::string& param,
                                              const std::string& root = "root");
  size_t size() const;
  uint64_t hits() const;

 private:
  size_t max_entries_;
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
