// Reading a Hugging Face tokenizer.json fast enough (internal).
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

}  // namespace pagoda::tokenizer_detail
