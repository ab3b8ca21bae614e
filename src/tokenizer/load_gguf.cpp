// Tokenizer::from_gguf — the `tokenizer.ggml.*` metadata, read the way
// llama.cpp's llama_vocab::load reads it (defaults included), so GGUF files
// tokenize exactly as in llama.cpp.
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda {

namespace {

using tokenizer_detail::AddedToken;
using tokenizer_detail::NormalizerStep;
using tokenizer_detail::PreTokenizerStep;
using tokenizer_detail::TokenKind;
using tokenizer_detail::Vocab;

TokenKind kind_from_type(int64_t type) {
  switch (type) {
    case 2: return TokenKind::unknown;
    case 3: return TokenKind::control;
    case 4: return TokenKind::user_defined;
    case 5: return TokenKind::unused;
    case 6: return TokenKind::byte;
    default: return TokenKind::normal;  // 1 = normal; 0 = undefined is treated as normal too
  }
}

constexpr std::string_view kSpace = "\xE2\x96\x81";  // '▁'

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& f) {
  const std::string& path = f.path();
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw Error(path + ": no tokenizer metadata (tokenizer.ggml.model is missing)");
  const bool spm = *model == "llama";
  // Gemma 4: BPE merges over raw UTF-8 with spaces written as '▁' and <0xNN> byte fallback
  // (a SentencePiece-style BPE), as llama.cpp b10587 reads its "gemma4" vocabularies.
  const bool gemma4 = *model == "gemma4";
  if (!spm && !gemma4 && *model != "gpt2") {
    throw Error(path + ": unsupported tokenizer.ggml.model '" + *model + "' (supported: llama, gpt2, gemma4)");
  }

  const gguf::Array* tokens = f.get_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->items.empty()) {
    throw Error(path + ": tokenizer.ggml.tokens is missing or empty");
  }
  const size_t n = tokens->items.size();
  if (n > static_cast<size_t>(INT32_MAX)) throw Error(path + ": tokenizer.ggml.tokens has too many entries");
  const gguf::Array* scores = f.get_array("tokenizer.ggml.scores");
  const gguf::Array* types = f.get_array("tokenizer.ggml.token_type");
  auto check_len = [&](const gguf::Array* a, const char* key) {
    if (a != nullptr && a->items.size() != n) {
      throw Error(path + ": " + key + " has " + std::to_string(a->items.size()) + " entries but there are " +
                  std::to_string(n) + " tokens");
    }
  };
  check_len(scores, "tokenizer.ggml.scores");
  check_len(types, "tokenizer.ggml.token_type");

  auto v = std::make_unique<Vocab>();
  v->source = path;
  v->model_name = *model;
  v->tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto& entry = v->tokens[i];
    const std::string* text = tokens->items[i].as_string();
    if (text == nullptr) throw Error(path + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is not a string");
    entry.text = *text;
    if (scores != nullptr) {
      auto s = scores->items[i].as_double();
      if (!s) throw Error(path + ": tokenizer.ggml.scores[" + std::to_string(i) + "] is not a number");
      entry.score = static_cast<float>(*s);
    }
    if (types != nullptr) {
      auto t = types->items[i].as_int();
      if (!t) throw Error(path + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is not an integer");
      entry.kind = kind_from_type(*t);
    } else if ((spm || gemma4) && tokenizer_detail::parse_byte_token(entry.text) >= 0) {
      entry.kind = TokenKind::byte;
    }
  }

  bool default_add_bos = false;
  if (spm) {
    v->algorithm = tokenizer_detail::Algorithm::spm_scores;
    const bool add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    v->normalizers.push_back({NormalizerStep::Kind::replace, " ", nullptr, std::string(kSpace)});
    if (add_space_prefix) {
      v->normalizers.push_back({NormalizerStep::Kind::prepend, "", nullptr, std::string(kSpace)});
    }
    v->strip_leading_space = add_space_prefix;
    default_add_bos = true;
    for (auto& entry : v->tokens) {
      switch (entry.kind) {
        case TokenKind::normal:
        case TokenKind::unused:
          entry.piece = tokenizer_detail::replace_all(entry.text, kSpace, " ");
          break;
        case TokenKind::byte: {
          const int b = tokenizer_detail::parse_byte_token(entry.text);
          entry.piece = b >= 0 ? std::string(1, static_cast<char>(b)) : entry.text;
          break;
        }
        default:
          entry.piece = entry.text;
      }
    }
  } else if (gemma4) {
    // llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4: no space prefix, spaces as '▁', the text cut
    // only into runs of newlines and of everything else, merges on raw UTF-8 (no GPT-2 byte
    // map), byte fallback, a run of newlines that is a token taken whole, BOS always added
    // (llama.cpp overrides add_bos_token false for these files).
    v->algorithm = tokenizer_detail::Algorithm::bpe_ranks;
    v->byte_fallback = true;
    v->newline_words_whole = true;
    v->normalizers.push_back({NormalizerStep::Kind::replace, " ", nullptr, std::string(kSpace)});
    PreTokenizerStep lines;
    lines.kind = PreTokenizerStep::Kind::split;
    lines.regex = std::make_shared<tokenizer_detail::Regex>("[^\n]+|[\n]+");
    lines.behavior = tokenizer_detail::SplitBehavior::isolated;
    v->pre_tokenizers.push_back(std::move(lines));
    default_add_bos = true;
    for (auto& entry : v->tokens) {
      switch (entry.kind) {
        case TokenKind::normal:
        case TokenKind::unused: entry.piece = tokenizer_detail::replace_all(entry.text, kSpace, " "); break;
        case TokenKind::byte: {
          const int b = tokenizer_detail::parse_byte_token(entry.text);
          entry.piece = b >= 0 ? std::string(1, static_cast<char>(b)) : entry.text;
          break;
        }
        default: entry.piece = entry.text;
      }
    }
  } else {
    v->algorithm = tokenizer_detail::Algorithm::bpe_ranks;
    const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
    const tokenizer_detail::NamedPreTokenizer* spec = tokenizer_detail::find_named_pre_tokenizer(pre);
    if (spec == nullptr) {
      throw Error(path + ": unsupported tokenizer.ggml.pre '" + pre +
                  "' (supported: " + tokenizer_detail::supported_pre_tokenizer_names() + " and their aliases)");
    }
    v->pre_tokenizers = tokenizer_detail::pre_tokenizer_steps(*spec);
    v->ignore_merges = spec->ignore_merges;
    default_add_bos = spec->add_bos;
    for (auto& entry : v->tokens) {
      entry.piece = entry.kind == TokenKind::normal ? tokenizer_detail::byte_level_decode(entry.text)
                                                    : entry.text;
    }
  }

  // Special ids. An absent key keeps llama.cpp's SPM defaults (<unk>=0, <s>=1,
  // </s>=2); a present but out-of-range one (converters write 0xFFFFFFFF for
  // "none") means "none".
  auto read_id = [&](const char* key, TokenId fallback) -> TokenId {
    auto id = f.get_int(key);
    if (!id) return fallback < static_cast<TokenId>(n) ? fallback : -1;
    return *id >= 0 && *id < static_cast<int64_t>(n) ? static_cast<TokenId>(*id) : -1;
  };
  v->bos = read_id("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v->eos = read_id("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v->unk = read_id("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v->pad = read_id("tokenizer.ggml.padding_token_id", -1);
  if (TokenId eot = read_id("tokenizer.ggml.eot_token_id", -1); eot >= 0) v->eot = eot;
  if (TokenId eom = read_id("tokenizer.ggml.eom_token_id", -1); eom >= 0) v->eom = eom;
  v->add_bos = gemma4 || f.get_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  v->add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);

  // Control, unknown and user-defined tokens are matched in raw text, as in
  // llama.cpp's tokenizer_st_partition (user-defined ones even without
  // parse_special).
  for (size_t i = 0; i < n; ++i) {
    const auto& entry = v->tokens[i];
    if (entry.text.empty()) continue;
    if (entry.kind == TokenKind::control || entry.kind == TokenKind::unknown ||
        entry.kind == TokenKind::user_defined) {
      AddedToken t;
      t.id = static_cast<TokenId>(i);
      t.content = entry.text;
      t.special = entry.kind != TokenKind::user_defined;
      v->added_tokens.push_back(std::move(t));
    }
  }
  v->finalize();  // also builds text_index, which the merges below need

  if (!spm) {
    const gguf::Array* merges = f.get_array("tokenizer.ggml.merges");
    if (merges == nullptr) throw Error(path + ": tokenizer.ggml.merges is missing (required for " + *model + ")");
    v->merges.reserve(merges->items.size());
    std::string joined;
    for (size_t rank = 0; rank < merges->items.size(); ++rank) {
      const std::string* m = merges->items[rank].as_string();
      // llama.cpp splits at the first space after the first byte, so a left
      // part may itself be a space.
      const size_t sp = m == nullptr || m->empty() ? std::string::npos : m->find(' ', 1);
      if (sp == std::string::npos) {
        throw Error(path + ": tokenizer.ggml.merges[" + std::to_string(rank) + "] is not 'left right'");
      }
      const std::string_view left(m->data(), sp);
      const std::string_view right(m->data() + sp + 1, m->size() - sp - 1);
      joined.assign(left).append(right);
      auto ida = v->find(left), idb = v->find(right), idr = v->find(joined);
      if (!ida || !idb || !idr) {
        throw Error(path + ": tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + *m +
                    "' names a token that is not in the vocabulary");
      }
      v->merges.emplace(tokenizer_detail::merge_key(*ida, *idb),
                        tokenizer_detail::MergeRule{static_cast<int32_t>(rank), *idr});
    }
  }

  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(v)));
}

}  // namespace pagoda
