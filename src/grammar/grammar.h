// Grammar — constrained decoding: a context-free grammar (GBNF, llama.cpp's dialect)
// compiled once, and a per-sequence Matcher that says which tokens may come next.
//
// Contract:
// - Grammar::from_gbnf parses and checks a whole grammar (every rule referenced is
//   defined, no left recursion, a `root` rule). Malformed or over-limit text throws
//   GrammarError with one line that names the line/column or the limit. Parsing is
//   linear in the text and its recursion depth is bounded (GrammarLimits), so
//   hostile input cannot crash or hang the process.
// - A Grammar is immutable once built and may be shared by any number of Matchers on
//   any threads (std::shared_ptr<const Grammar>).
// - TokenVocabulary is what a Matcher needs of the tokenizer: the bytes each token
//   produces, which tokens end generation (EOG) and which may never be produced under
//   a grammar (control tokens). Built once per tokenizer (a byte trie over the
//   pieces); immutable and shareable.
// - Matcher: one per sequence, one thread at a time. Text is matched as bytes, so a
//   token may end inside a UTF-8 character or span several grammar symbols.
//   * fill_next_token_bitmask() sets bit i (word i/32, bit i%32) for every token whose
//     whole piece keeps the text a prefix of some sentence of the grammar; EOG tokens
//     only when the text so far is a complete sentence; never a disallowed token.
//   * accept_token() advances by one token (false and no change when it is not
//     allowed); EOG tokens are accepted only in an accepting state and end the match.
//   * is_terminated(): accepting and no byte can follow (only EOG is allowed), so the
//     caller can end the sequence without sampling.
// - Cost: masks are cached per grammar state inside the Grammar (shared, guarded by a
//   mutex), so a sequence that returns to a state it (or another request with the same
//   grammar) has seen pays a copy, not a walk of the vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::grammar {

class GrammarError : public std::runtime_error {
 public:
  explicit GrammarError(const std::string& msg) : std::runtime_error(msg) {}
};

struct GrammarLimits {
  size_t max_text_bytes = 1 << 20;   // GBNF source
  int max_nesting = 256;             // parentheses / groups in one rule
  size_t max_rules = 65536;          // rules after expansion of repetitions
  size_t max_elements = 1 << 22;     // elements after expansion ({m,n} unrolled)
  size_t max_stacks = 4096;          // live parse stacks in a Matcher (ambiguity bound)
  // Added after the fields above (keep their order: callers use designated inits).
  size_t max_repetition = 100000;    // m and n in x{m,n}
  // Masks cached per grammar state (per vocabulary), in bytes; 0 turns the cache off.
  // 32 MiB: 8k masks of a 32k vocabulary, 1.7k of a 152k one.
  size_t mask_cache_bytes = 32u << 20;
};

class TokenVocabulary;
struct GrammarImpl;

class Grammar {
 public:
  // Throws GrammarError.
  static std::shared_ptr<const Grammar> from_gbnf(std::string_view gbnf, std::string_view root = "root",
                                                  const GrammarLimits& limits = {});
  ~Grammar();
  const GrammarImpl& impl() const { return *impl_; }
  const GrammarLimits& limits() const;
  // The memory it holds now: the compiled rules, elements and character sets, the start
  // state, and its mask cache (which grows with use, up to limits().mask_cache_bytes).
  size_t memory_bytes() const;

 private:
  Grammar();
  std::unique_ptr<GrammarImpl> impl_;
};

class TokenVocabulary {
 public:
  // pieces[i]: the bytes token i produces (empty for tokens that produce none);
  // eog: ids that end generation; disallowed[i] (empty = none): never allowed.
  TokenVocabulary(std::vector<std::string> pieces, std::vector<int32_t> eog,
                  std::vector<bool> disallowed = {});
  ~TokenVocabulary();
  int32_t size() const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  // An independent copy of the current state (same grammar and vocabulary).
  Matcher clone() const;
  const Grammar& grammar() const;
  const TokenVocabulary& vocabulary() const;

  // mask.size() >= (vocab size + 31) / 32.
  void fill_next_token_bitmask(std::span<uint32_t> mask);
  // Sets every disallowed token's logit to -infinity. logits.size() >= vocab size;
  // ids past the vocabulary are set to -infinity too.
  void mask_logits(std::span<float> logits);
  bool accept_token(int32_t id);
  // Bytes not from a token (tests, forced text). False and no change when they leave
  // the grammar.
  bool accept_bytes(std::string_view bytes);
  bool is_accepting() const;
  bool is_terminated() const;
  // Back to the start state.
  void reset();

 private:
  struct State;
  explicit Matcher(std::unique_ptr<State> st);
  std::unique_ptr<State> st_;
};

}  // namespace pagoda::grammar
