// Shared by the subcommands: open a GGUF, load its tokenizer and model, with a
// progress line on a terminal.
#pragma once

#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

struct LoadedModel {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;  // loaded only when required
  std::unique_ptr<Model> model;
  double load_seconds = 0;
};

// Throws pagoda::Error. The tokenizer is loaded only when `require_tokenizer`
// (logits and bench-model never need one).
LoadedModel load_model(const std::string& path, bool require_tokenizer);

// Parses "1,2,3" or "1 2 3" into ids; throws pagoda::Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& text);

double now_seconds();

}  // namespace pagoda::cli
