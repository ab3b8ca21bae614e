// Tokenizer::from_hf_json — a Hugging Face tokenizer.json (+ tokenizer_config.json).
//
// Supported (anything else throws pagoda::Error naming the component):
//   model         BPE: vocab, merges ("a b" or ["a", "b"]), byte_fallback,
//                 ignore_merges, fuse_unk, unk_token (dropout is ignored).
//   normalizer    null, Sequence, Prepend, Replace (String or Regex), NFC (as
//                 identity: the caller must pass NFC text — all the test inputs
//                 are; a real NFC pass would need the Unicode composition tables).
//   pre_tokenizer null, Sequence, Split, ByteLevel, Metaspace, Digits,
//                 Whitespace, WhitespaceSplit, Punctuation.
//   decoder       null, Sequence, ByteLevel, Replace (String), ByteFallback, Fuse,
//                 Strip (leading ' ' only), Metaspace. Decoders are applied per
//                 token at load time to get each token's piece; Strip and
//                 Metaspace's prefix removal become the leading-space rule.
//   post_processor TemplateProcessing (also inside Sequence) gives BOS/EOS and
//                 whether to add them, unless tokenizer_config.json says.
#include <algorithm>
#include <memory>
#include <optional>

#include "common/error.h"
#include "common/mapped_file.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda {

namespace {

using json = nlohmann::json;
using tokenizer_detail::AddedToken;
using tokenizer_detail::NormalizerStep;
using tokenizer_detail::PreTokenizerStep;
using tokenizer_detail::PrependScheme;
using tokenizer_detail::Regex;
using tokenizer_detail::SplitBehavior;
using tokenizer_detail::TokenKind;
using tokenizer_detail::Vocab;

// Ids above this are certainly a corrupt file (the largest real vocabularies
// have ~260k tokens); it also bounds the token table we allocate.
constexpr int64_t kMaxVocabId = 1 << 24;

// Typed access to a JSON object member that reports errors as one line:
// "<path>: <where>.<key> must be a <type>".
class Fields {
 public:
  Fields(const std::string& path, std::string where, const json& obj)
      : path_(path), where_(std::move(where)), obj_(obj) {}

  const json* get(const char* key) const {
    if (!obj_.is_object()) return nullptr;
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> opt_bool(const char* key) const {
    const json* j = get(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_boolean()) fail(key, "a boolean");
    return j->get<bool>();
  }
  std::optional<std::string> opt_string(const char* key) const {
    const json* j = get(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_string()) fail(key, "a string");
    return j->get<std::string>();
  }
  std::string str(const char* key) const {
    auto s = opt_string(key);
    if (!s) fail(key, "a string");
    return *s;
  }
  std::optional<int64_t> opt_int(const char* key) const {
    const json* j = get(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_number_integer()) fail(key, "an integer");
    return j->get<int64_t>();
  }
  const json& array(const char* key) const {
    const json* j = get(key);
    if (j == nullptr || !j->is_array()) fail(key, "an array");
    return *j;
  }
  [[noreturn]] void fail(const char* key, const char* what) const {
    throw Error(path_ + ": " + where_ + "." + key + " must be " + what);
  }
  [[noreturn]] void unsupported(const std::string& type) const {
    throw Error(path_ + ": unsupported " + where_ + " type '" + type + "'");
  }
  std::string type() const { return opt_string("type").value_or(""); }

 private:
  const std::string& path_;
  std::string where_;
  const json& obj_;
};

// A pattern object {"String": s} or {"Regex": r}, as a regex.
std::shared_ptr<const Regex> pattern_regex(const Fields& f) {
  const json* p = f.get("pattern");
  if (p != nullptr && p->is_object()) {
    if (auto it = p->find("Regex"); it != p->end() && it->is_string()) {
      return std::make_shared<Regex>(it->get<std::string>());
    }
    if (auto it = p->find("String"); it != p->end() && it->is_string()) {
      return std::make_shared<Regex>(Regex::escape(it->get<std::string>()));
    }
  }
  f.fail("pattern", "{\"String\": ...} or {\"Regex\": ...}");
}

void parse_normalizer(const std::string& path, const json& j, std::vector<NormalizerStep>& steps) {
  if (j.is_null()) return;
  Fields f(path, "normalizer", j);
  const std::string type = f.type();
  if (type == "Sequence") {
    for (const json& sub : f.array("normalizers")) parse_normalizer(path, sub, steps);
  } else if (type == "Prepend") {
    steps.push_back({NormalizerStep::Kind::prepend, "", nullptr, f.str("prepend")});
  } else if (type == "Replace") {
    NormalizerStep step{NormalizerStep::Kind::replace, "", nullptr, f.str("content")};
    const json* p = f.get("pattern");
    if (p != nullptr && p->is_object() && p->contains("String") && (*p)["String"].is_string()) {
      step.pattern = (*p)["String"].get<std::string>();
    } else {
      step.regex = pattern_regex(f);
    }
    steps.push_back(std::move(step));
  } else if (type == "NFC") {
    // Identity: see the file comment.
  } else {
    f.unsupported(type);
  }
}

SplitBehavior parse_behavior(const Fields& f, SplitBehavior fallback) {
  auto b = f.opt_string("behavior");
  if (!b) return fallback;
  if (*b == "Removed") return SplitBehavior::removed;
  if (*b == "Isolated") return SplitBehavior::isolated;
  if (*b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (*b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (*b == "Contiguous") return SplitBehavior::contiguous;
  f.fail("behavior", "one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

PrependScheme parse_prepend_scheme(const Fields& f) {
  if (auto s = f.opt_string("prepend_scheme")) {
    if (*s == "always") return PrependScheme::always;
    if (*s == "first") return PrependScheme::first;
    if (*s == "never") return PrependScheme::never;
    f.fail("prepend_scheme", "one of always, first, never");
  }
  return f.opt_bool("add_prefix_space").value_or(true) ? PrependScheme::always : PrependScheme::never;
}

void parse_pre_tokenizer(const std::string& path, const json& j, std::vector<PreTokenizerStep>& steps,
                         bool& byte_level) {
  if (j.is_null()) return;
  Fields f(path, "pre_tokenizer", j);
  const std::string type = f.type();
  PreTokenizerStep step;
  auto split = [&](const char* pattern, SplitBehavior behavior, bool invert) {
    step.kind = PreTokenizerStep::Kind::split;
    step.regex = std::make_shared<Regex>(pattern);
    step.behavior = behavior;
    step.invert = invert;
  };
  if (type == "Sequence") {
    for (const json& sub : f.array("pretokenizers")) parse_pre_tokenizer(path, sub, steps, byte_level);
    return;
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::split;
    step.regex = pattern_regex(f);
    step.behavior = parse_behavior(f, SplitBehavior::isolated);
    step.invert = f.opt_bool("invert").value_or(false);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::byte_level;
    step.add_prefix_space = f.opt_bool("add_prefix_space").value_or(true);
    step.use_regex = f.opt_bool("use_regex").value_or(true);
    if (step.use_regex) step.regex = std::make_shared<Regex>(tokenizer_detail::kGpt2Regex);
    byte_level = true;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::metaspace;
    step.replacement = f.opt_string("replacement").value_or("\xE2\x96\x81");
    if (step.replacement.empty()) f.fail("replacement", "a non-empty string");
    step.prepend_scheme = parse_prepend_scheme(f);
    step.split = f.opt_bool("split").value_or(true);
  } else if (type == "Digits") {
    split(R"(\p{N})",
          f.opt_bool("individual_digits").value_or(false) ? SplitBehavior::isolated
                                                          : SplitBehavior::contiguous,
          false);
  } else if (type == "Whitespace") {
    split(R"(\w+|[^\w\s]+)", SplitBehavior::removed, true);
  } else if (type == "WhitespaceSplit") {
    split(R"(\s+)", SplitBehavior::removed, false);
  } else if (type == "Punctuation") {
    split(R"(\p{P}|[!-/:-@\[-`{-~])", SplitBehavior::isolated, false);
    step.behavior = parse_behavior(f, SplitBehavior::isolated);
  } else {
    f.unsupported(type);
  }
  steps.push_back(std::move(step));
}

// How a token's vocabulary text becomes its piece, in decoder order.
struct DecodeStep {
  enum class Kind { replace, byte_fallback, byte_level };
  Kind kind;
  std::string from, to;
};

struct DecoderPlan {
  std::vector<DecodeStep> steps;
  bool strip_leading_space = false;
  bool byte_level = false;
  bool byte_fallback = false;
};

void parse_decoder(const std::string& path, const json& j, DecoderPlan& plan) {
  if (j.is_null()) return;
  Fields f(path, "decoder", j);
  const std::string type = f.type();
  if (type == "Sequence") {
    for (const json& sub : f.array("decoders")) parse_decoder(path, sub, plan);
  } else if (type == "Replace") {
    const json* p = f.get("pattern");
    if (p == nullptr || !p->is_object() || !p->contains("String") || !(*p)["String"].is_string()) {
      f.fail("pattern", "{\"String\": ...} (Regex is not supported in decoders)");
    }
    plan.steps.push_back({DecodeStep::Kind::replace, (*p)["String"].get<std::string>(), f.str("content")});
  } else if (type == "ByteFallback") {
    plan.steps.push_back({DecodeStep::Kind::byte_fallback, "", ""});
    plan.byte_fallback = true;
  } else if (type == "Fuse") {
    // Concatenation is what decode does anyway.
  } else if (type == "Strip") {
    // After Fuse this strips the start of the whole text: the SPM prefix space.
    if (f.str("content") != " " || f.opt_int("stop").value_or(0) != 0) {
      f.fail("content", "\" \" with stop 0 (only the leading-space Strip is supported)");
    }
    if (f.opt_int("start").value_or(0) > 0) plan.strip_leading_space = true;
  } else if (type == "ByteLevel") {
    plan.steps.push_back({DecodeStep::Kind::byte_level, "", ""});
    plan.byte_level = true;
  } else if (type == "Metaspace") {
    plan.steps.push_back({DecodeStep::Kind::replace, f.opt_string("replacement").value_or("\xE2\x96\x81"), " "});
    if (parse_prepend_scheme(f) != PrependScheme::never) plan.strip_leading_space = true;
  } else {
    f.unsupported(type);
  }
}

std::string apply_decoder(const DecoderPlan& plan, std::string piece) {
  for (const DecodeStep& step : plan.steps) {
    switch (step.kind) {
      case DecodeStep::Kind::replace:
        piece = tokenizer_detail::replace_all(piece, step.from, step.to);
        break;
      case DecodeStep::Kind::byte_fallback: {
        const int b = tokenizer_detail::parse_byte_token(piece);
        if (b >= 0) piece = std::string(1, static_cast<char>(b));
        break;
      }
      case DecodeStep::Kind::byte_level:
        piece = tokenizer_detail::byte_level_decode(piece);
        break;
    }
  }
  return piece;
}

// BOS/EOS named by a TemplateProcessing post-processor: the special tokens
// around $A in the "single" template.
struct TemplateSpecials {
  std::optional<TokenId> bos, eos;
};

void parse_post_processor(const std::string& path, const json& j, TemplateSpecials& out) {
  if (j.is_null() || !j.is_object()) return;
  Fields f(path, "post_processor", j);
  const std::string type = f.type();
  if (type == "Sequence") {
    for (const json& sub : f.array("processors")) parse_post_processor(path, sub, out);
    return;
  }
  if (type != "TemplateProcessing") return;  // ByteLevel, Roberta, ...: no BOS/EOS here
  const json* specials = f.get("special_tokens");
  auto id_of = [&](const std::string& name) -> std::optional<TokenId> {
    if (specials == nullptr || !specials->is_object()) return std::nullopt;
    auto entry = specials->find(name);
    if (entry == specials->end() || !entry->is_object()) return std::nullopt;
    auto ids = entry->find("ids");
    if (ids == entry->end() || !ids->is_array() || ids->size() != 1 || !(*ids)[0].is_number_integer()) {
      return std::nullopt;
    }
    return (*ids)[0].get<TokenId>();
  };
  bool seen_sequence = false;
  std::vector<TokenId> before, after;
  for (const json& item : f.array("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
               item["SpecialToken"]["id"].is_string()) {
      auto id = id_of(item["SpecialToken"]["id"].get<std::string>());
      if (!id) throw Error(path + ": post_processor.special_tokens lacks a single id for a template token");
      (seen_sequence ? after : before).push_back(*id);
    }
  }
  if (before.size() == 1) out.bos = before[0];
  if (after.size() == 1) out.eos = after[0];
}

// tokenizer_config.json's view of the special tokens.
struct HfConfig {
  std::optional<std::string> bos_token, eos_token, pad_token;
  std::optional<bool> add_bos, add_eos;
};

HfConfig read_config(const std::string& path) {
  HfConfig cfg;
  if (path.empty()) return cfg;
  MappedFile file(path);
  json doc;
  try {
    const auto* begin = reinterpret_cast<const char*>(file.data());
    doc = json::parse(begin, begin + file.size());
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  Fields f(path, "config", doc);
  // A special token is written as "<s>" or as {"content": "<s>", ...}.
  auto token = [&](const char* key) -> std::optional<std::string> {
    const json* j = f.get(key);
    if (j == nullptr) return std::nullopt;
    if (j->is_string()) return j->get<std::string>();
    if (j->is_object() && j->contains("content") && (*j)["content"].is_string()) {
      return (*j)["content"].get<std::string>();
    }
    f.fail(key, "a string or an object with \"content\"");
  };
  cfg.bos_token = token("bos_token");
  cfg.eos_token = token("eos_token");
  cfg.pad_token = token("pad_token");
  cfg.add_bos = f.opt_bool("add_bos_token");
  cfg.add_eos = f.opt_bool("add_eos_token");
  return cfg;
}

}  // namespace

namespace tokenizer_detail {

std::vector<PreTokenizerStep> parse_hf_pre_tokenizer(const std::string& path, const nlohmann::json& pre_tokenizer,
                                                     bool* byte_level) {
  std::vector<PreTokenizerStep> steps;
  bool has_byte_level = false;
  parse_pre_tokenizer(path, pre_tokenizer, steps, has_byte_level);
  if (byte_level != nullptr) *byte_level = has_byte_level;
  return steps;
}

}  // namespace tokenizer_detail

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& json_path,
                                                   const std::string& config_path) {
  tokenizer_detail::TokenizerJson tj = tokenizer_detail::read_tokenizer_json(json_path);
  const std::string& path = json_path;
  if (!tj.doc.is_object()) throw Error(path + ": not a JSON object");
  const json* model_json = nullptr;
  if (auto it = tj.doc.find("model"); it != tj.doc.end() && it->is_object()) model_json = &*it;
  if (model_json == nullptr) throw Error(path + ": no \"model\" object");
  Fields model(path, "model", *model_json);
  const std::string model_type = model.type();
  if (!(model_type == "BPE" || (model_type.empty() && tj.has_merges))) {
    throw Error(path + ": unsupported model type '" + model_type + "' (only BPE)");
  }
  if (!tj.has_vocab) throw Error(path + ": model.vocab is missing");
  if (!tj.has_merges) throw Error(path + ": model.merges is missing");
  if (model.opt_string("continuing_subword_prefix").value_or("") != "" ||
      model.opt_string("end_of_word_suffix").value_or("") != "") {
    throw Error(path + ": model.continuing_subword_prefix / end_of_word_suffix are not supported");
  }

  auto v = std::make_unique<Vocab>();
  v->source = path;
  v->algorithm = tokenizer_detail::Algorithm::bpe_ranks;
  v->byte_fallback = model.opt_bool("byte_fallback").value_or(false);
  v->ignore_merges = model.opt_bool("ignore_merges").value_or(false);
  v->fuse_unk = model.opt_bool("fuse_unk").value_or(false);

  // Token table: the model vocabulary plus added tokens, sized by the largest id.
  Fields top(path, "tokenizer", tj.doc);
  const json* added_json = top.get("added_tokens");
  if (added_json != nullptr && !added_json->is_array()) top.fail("added_tokens", "an array");
  int64_t max_id = -1;
  for (const auto& [text, id] : tj.vocab) {
    if (id < 0 || id > kMaxVocabId) {
      throw Error(path + ": model.vocab: token '" + text + "' has id " + std::to_string(id) +
                  " (must be in [0, " + std::to_string(kMaxVocabId) + "])");
    }
    max_id = std::max(max_id, id);
  }
  std::vector<AddedToken> added;
  if (added_json != nullptr) {
    for (size_t i = 0; i < added_json->size(); ++i) {
      Fields a(path, "added_tokens[" + std::to_string(i) + "]", (*added_json)[i]);
      const auto id = a.opt_int("id");
      if (!id || *id < 0 || *id > kMaxVocabId) a.fail("id", "an integer in range");
      AddedToken t;
      t.id = static_cast<TokenId>(*id);
      t.content = a.str("content");
      t.special = a.opt_bool("special").value_or(false);
      t.lstrip = a.opt_bool("lstrip").value_or(false);
      t.rstrip = a.opt_bool("rstrip").value_or(false);
      max_id = std::max(max_id, *id);
      added.push_back(std::move(t));
    }
  }
  if (max_id < 0) throw Error(path + ": model.vocab is empty");

  v->tokens.resize(static_cast<size_t>(max_id) + 1);
  for (auto& t : v->tokens) t.kind = TokenKind::unused;  // ids no entry names
  for (auto& [text, id] : tj.vocab) {
    auto& entry = v->tokens[id];
    if (entry.kind != TokenKind::unused) {
      throw Error(path + ": model.vocab: id " + std::to_string(id) + " is used by both '" + entry.text +
                  "' and '" + text + "'");
    }
    entry.kind = TokenKind::normal;
    entry.text = std::move(text);
  }
  tj.vocab.clear();
  tj.vocab.shrink_to_fit();
  // Added tokens set the kind (and, rarely, the text) of their id; their piece
  // is their content, untouched by the decoder.
  for (const AddedToken& t : added) {
    auto& entry = v->tokens[t.id];
    entry.text = t.content;
    entry.piece = t.content;
    entry.kind = t.special ? TokenKind::control : TokenKind::user_defined;
  }
  v->added_tokens = std::move(added);
  v->build_text_index();

  if (auto unk = model.opt_string("unk_token")) {
    auto id = v->find(*unk);
    if (!id) throw Error(path + ": model.unk_token '" + *unk + "' is not in the vocabulary");
    v->unk = *id;
    v->tokens[*id].kind = TokenKind::unknown;
    v->tokens[*id].piece = v->tokens[*id].text;
  }

  // Decoder first: it decides which texts are byte tokens and how pieces read.
  DecoderPlan plan;
  parse_decoder(path, top.get("decoder") ? *top.get("decoder") : json(), plan);
  v->strip_leading_space = plan.strip_leading_space;
  const bool has_byte_tokens = v->byte_fallback || plan.byte_fallback;
  for (auto& entry : v->tokens) {
    if (entry.kind != TokenKind::normal) continue;
    if (has_byte_tokens && tokenizer_detail::parse_byte_token(entry.text) >= 0) entry.kind = TokenKind::byte;
    entry.piece = apply_decoder(plan, entry.text);
  }

  // Merges: ranks by position; each part and the result must be tokens.
  v->merges.reserve(tj.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < tj.merges.size(); ++rank) {
    const auto& [a, b] = tj.merges[rank];
    joined.assign(a).append(b);
    auto ida = v->find(a), idb = v->find(b), idr = v->find(joined);
    if (!ida || !idb || !idr) {
      const std::string& missing = !ida ? a : !idb ? b : joined;
      throw Error(path + ": model.merges[" + std::to_string(rank) + "] '" + a + " " + b + "': '" +
                  missing + "' is not in the vocabulary");
    }
    v->merges.emplace(tokenizer_detail::merge_key(*ida, *idb),
                      tokenizer_detail::MergeRule{static_cast<int32_t>(rank), *idr});
  }
  tj.merges.clear();
  tj.merges.shrink_to_fit();

  parse_normalizer(path, top.get("normalizer") ? *top.get("normalizer") : json(), v->normalizers);
  bool byte_level = plan.byte_level;
  parse_pre_tokenizer(path, top.get("pre_tokenizer") ? *top.get("pre_tokenizer") : json(),
                      v->pre_tokenizers, byte_level);
  v->model_name = byte_level ? "gpt2" : "llama";

  TemplateSpecials tmpl;
  parse_post_processor(path, top.get("post_processor") ? *top.get("post_processor") : json(), tmpl);
  const HfConfig cfg = read_config(config_path);
  auto resolve = [&](const std::optional<std::string>& name, const char* what) -> std::optional<TokenId> {
    if (!name) return std::nullopt;
    auto id = v->find(*name);
    if (!id) throw Error(config_path + ": " + what + " '" + *name + "' is not in the vocabulary");
    return id;
  };
  const auto cfg_bos = resolve(cfg.bos_token, "bos_token");
  const auto cfg_eos = resolve(cfg.eos_token, "eos_token");
  const auto cfg_pad = resolve(cfg.pad_token, "pad_token");
  v->bos = cfg_bos ? *cfg_bos : tmpl.bos.value_or(-1);
  v->eos = cfg_eos ? *cfg_eos : tmpl.eos.value_or(-1);
  v->pad = cfg_pad.value_or(-1);
  v->add_bos = cfg.add_bos.value_or(tmpl.bos.has_value());
  v->add_eos = cfg.add_eos.value_or(tmpl.eos.has_value());

  v->finalize();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(v)));
}

}  // namespace pagoda
