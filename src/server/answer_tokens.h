// AnswerTokens — the token ids behind the chat answers this server gave, so that the next
// turn of a conversation, which sends each answer back as text, is fed the very ids the
// model produced rather than a re-tokenization of their text.
//
// Why: the prefix cache matches token ids. A model's sampled ids are often not what the
// tokenizer makes of their text (BPE merges "the" + "re" into "there"; a random-weight
// model almost never round-trips), so the re-sent history diverges from the cached
// sequence at the first such answer and everything after it is recomputed; with a hybrid
// model (qwen35) the last usable state snapshot is then the previous prompt's end. With
// the ids spliced back, turn n+1's prompt begins with exactly turn n's tokens (prompt and
// answer), as when the history were kept server-side.
//
// Contract:
// - remember(text, ids): kept only when the tokenizer decodes ids to exactly `text` (the
//   content the client saw: no reasoning or tool calls split off, no stop string cut).
//   Bounded by capacity_bytes (text + 4 bytes an id, each entry booked at that), least
//   recently used (remembered or found) evicted first; 0 turns it off.
// - tokenize_chat(): the rendered prompt's ids, where each assistant message whose
//   string content is remembered and found in the rendered text (in message order, after
//   the previous one) is replaced by its ids, provided the text after it starts with a
//   special token or ends the prompt (so the pieces around it tokenize as they would
//   whole: templates close a turn with <|im_end|>, <|eot_id|>, <end_of_turn>, ...).
//   Anything else is tokenized as text, exactly tokenize_prompt()'s result.
// - Thread-safe (one mutex; the engine thread remembers, HTTP threads look up).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace pagoda {

struct AnswerTokensStats {
  int64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  int64_t remembered = 0;  // answers kept
  int64_t spliced = 0;     // answers fed back as their ids
};

class AnswerTokens {
 public:
  explicit AnswerTokens(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  void remember(const Tokenizer& tok, const std::string& text, std::span<const int32_t> ids);
  // The ids of `text` when remembered (marks it used); empty otherwise.
  std::vector<int32_t> find(const std::string& text);
  AnswerTokensStats stats() const;

 private:
  struct Entry {
    std::string text;
    std::vector<int32_t> ids;
    uint64_t bytes() const { return text.size() + ids.size() * sizeof(int32_t); }
  };
  const uint64_t capacity_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: least recently used
  std::unordered_map<std::string_view, std::list<Entry>::iterator> by_text_;
  uint64_t bytes_ = 0;
  int64_t remembered_ = 0, spliced_ = 0;
  friend std::vector<int32_t> tokenize_chat(const Tokenizer&, const std::string&, const nlohmann::ordered_json&,
                                            AnswerTokens*, bool);
};

// The prompt tokens of a rendered chat or completion text: special tokens spelled in the
// text become those tokens, and BOS is added when the model wants one and the text does
// not already start with it (add_bos false: never; a piece after an image).
std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text, bool add_bos = true);

// tokenize_prompt(rendered) with the remembered answers among `messages` spliced in (see
// the contract); answers null: tokenize_prompt.
std::vector<int32_t> tokenize_chat(const Tokenizer& tok, const std::string& rendered,
                                   const nlohmann::ordered_json& messages, AnswerTokens* answers, bool add_bos = true);

}  // namespace pagoda
