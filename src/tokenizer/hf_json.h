// Reading a Hugging Face tokenizer.json fast enough, and its pre_tokenizer (internal).
//
// Nine tenths of a tokenizer.json are model.vocab (100k+ entries) and
// model.merges (150k-300k entries). Building nlohmann's DOM for them costs
// ~0.45 s for Qwen3's 11 MB file (std::map nodes per entry); streaming them
// through a SAX handler into flat vectors brings the whole read to ~0.15 s.
// Everything else (normalizer, pre_tokenizer, decoder, added_tokens, ...)
// still becomes an ordinary DOM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/pretokenize.h"

namespace pagoda::tokenizer_detail {

struct TokenizerJson {
  nlohmann::json doc;  // the file without model.vocab and model.merges
  bool has_vocab = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  bool has_merges = false;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Throws pagoda::Error (one line: path and what is wrong) for an unreadable
// file, invalid JSON, a non-integer vocab id or a merge that is neither
// "left right" nor ["left", "right"].
TokenizerJson read_tokenizer_json(const std::string& path);

// The steps of a tokenizer.json "pre_tokenizer" object (null: none), as
// Tokenizer::from_hf_json runs them; *byte_level (when given) says whether a
// ByteLevel step is among them. Throws pagoda::Error naming `path` for an
// unsupported or malformed step.
std::vector<PreTokenizerStep> parse_hf_pre_tokenizer(const std::string& path, const nlohmann::json& pre_tokenizer,
                                                     bool* byte_level = nullptr);

}  // namespace pagoda::tokenizer_detail
