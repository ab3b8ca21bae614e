// convert_hf_to_gguf (see hf_convert.h): what llama.cpp's convert_hf_to_gguf.py
// writes for these architectures — metadata keys, the permuted llama Q/K
// (already permuted by load_hf_weights), 1-D tensors as F32, and the vocabulary
// as tokenizer.ggml.* keys.
//
// Tokenizer: byte-level BPE tokenizer.json files (Llama 3, Qwen) become
// `gpt2` with their merges and the named pre-tokenizer (tokenizer/pre_tokenizers.h)
// that cuts text as theirs does (llama-bpe, qwen2, gpt-2, deepseek-llm, ...).
// SentencePiece-converted BPE files (Mistral, Llama 2 HF) become `llama` with scores: a token's score is minus the rank of
// the first merge producing it, so llama.cpp's best-score-first SPM merging
// picks the same pairs as HF's lowest-rank-first BPE (the HF converter built
// those merges from SentencePiece scores in the first place). Rejected:
// llama.cpp's LlamaHfVocab fallback, which writes every score as -1000 and so
// tokenizes differently from tokenizer.json. For a gemma4 file (synth --vocab-from)
// the same SentencePiece-style BPE becomes `gemma4` with its merges instead, the kind
// llama.cpp's converter writes for Gemma 4 and b10587 reads (BPE ranks on raw UTF-8).
#include <filesystem>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text_file.h"
#include "gguf/gguf.h"
#include "tensor/file_type.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"
#include "tools/hf_convert.h"

namespace pagoda {

namespace {

using nlohmann::json;
using gguf::Value;

json read_json_file(const std::string& path) {
  json j = json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": is not a valid JSON object");
  return j;
}

// Every object in a (possibly Sequence-nested) normalizer / pre-tokenizer / decoder.
void collect_steps(const json& j, const char* list_key, std::vector<const json*>& out) {
  if (!j.is_object()) return;
  out.push_back(&j);
  if (auto it = j.find(list_key); it != j.end() && it->is_array())
    for (const json& s : *it) collect_steps(s, list_key, out);
}

bool has_type(const std::vector<const json*>& steps, const char* type) {
  for (const json* s : steps)
    if (s->value("type", "") == type) return true;
  return false;
}

constexpr const char* kSpace = "\xE2\x96\x81";  // '▁'

}  // namespace

void write_hf_tokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                        int64_t min_vocab, gguf::GgufWriter& w, bool gemma4) {
  const std::string& path = tokenizer_json;
  const json j = read_json_file(path);
  const json& model = j.contains("model") ? j["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    throw Error(path + ": only BPE tokenizers can be converted to GGUF");
  const json& vocab = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab.is_object()) throw Error(path + ": model.vocab is not an object");

  // id -> text and type (llama.cpp token types: 1 normal, 2 unknown, 3 control,
  // 4 user-defined, 5 unused, 6 byte).
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      throw Error(path + ": model.vocab['" + it.key() + "'] is not a token id");
    by_id[it.value().get<int64_t>()] = {it.key(), 1};
  }
  if (auto at = j.find("added_tokens"); at != j.end() && at->is_array()) {
    for (const json& a : *at) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        throw Error(path + ": added_tokens entry without id / content");
      by_id[a["id"].get<int64_t>()] = {a["content"].get<std::string>(), a.value("special", false) ? 3 : 4};
    }
  }
  if (by_id.empty()) throw Error(path + ": empty vocabulary");
  const int64_t n_tok = std::max(by_id.rbegin()->first + 1, min_vocab);
  if (n_tok > (int64_t{1} << 24)) throw Error(path + ": vocabulary too large");
  std::vector<std::string> tokens(static_cast<size_t>(n_tok));
  std::vector<int32_t> types(static_cast<size_t>(n_tok), 5);
  for (int64_t i = 0; i < n_tok; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";  // as llama.cpp pads
  for (const auto& [id, tt] : by_id) {
    tokens[id] = tt.first;
    types[id] = tt.second;
  }

  std::vector<const json*> pre, norm, dec;
  if (j.contains("pre_tokenizer")) collect_steps(j["pre_tokenizer"], "pretokenizers", pre);
  if (j.contains("normalizer")) collect_steps(j["normalizer"], "normalizers", norm);
  if (j.contains("decoder")) collect_steps(j["decoder"], "decoders", dec);
  const bool byte_level = has_type(pre, "ByteLevel") || has_type(dec, "ByteLevel");

  // Merges: "a b" strings or [a, b] pairs.
  std::vector<std::pair<std::string, std::string>> merges;
  if (auto m = model.find("merges"); m != model.end() && m->is_array()) {
    for (const json& e : *m) {
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) throw Error(path + ": merge '" + s + "' is not 'left right'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        throw Error(path + ": model.merges holds an entry that is neither 'a b' nor [a, b]");
      }
    }
  }

  // bos / eos / add_bos as the HF tokenizer itself resolves them.
  std::unique_ptr<Tokenizer> hf = Tokenizer::from_hf_json(tokenizer_json, tokenizer_config_json);

  if (byte_level) {
    // Name the pre-tokenizer by what it does: the named GGUF row that cuts the
    // probe texts exactly as this tokenizer.json does (rejected: matching the
    // regex text, which misses every file whose pattern is spelled differently
    // from llama.cpp's, e.g. "(?i:'s|...)" or Digits steps).
    std::vector<tokenizer_detail::PreTokenizerStep> steps = tokenizer_detail::parse_hf_pre_tokenizer(
        path, j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), nullptr);
    if (steps.empty() || steps.back().kind != tokenizer_detail::PreTokenizerStep::Kind::byte_level) {
      // A ByteLevel decoder without a ByteLevel pre-tokenizer: the byte map still applies.
      tokenizer_detail::PreTokenizerStep byte_map;
      byte_map.kind = tokenizer_detail::PreTokenizerStep::Kind::byte_level;
      byte_map.use_regex = false;
      steps.push_back(std::move(byte_map));
    }
    const auto ignore_merges = model.find("ignore_merges");
    const tokenizer_detail::NamedPreTokenizer* named = tokenizer_detail::match_named_pre_tokenizer(
        steps, ignore_merges != model.end() && ignore_merges->is_boolean() && ignore_merges->get<bool>());
    if (named == nullptr) {
      throw Error(path + ": pre-tokenizer is not one pagoda can name in GGUF (known: " +
                  tokenizer_detail::supported_pre_tokenizer_names() + ")");
    }
    const std::string pre_name(named->names.front());
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", Value::str(pre_name));
    w.set("tokenizer.ggml.tokens", Value::str_array(tokens));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    std::vector<std::string> ms;
    ms.reserve(merges.size());
    for (const auto& [a, b] : merges) ms.push_back(a + " " + b);
    w.set("tokenizer.ggml.merges", Value::str_array(ms));
  } else {
    if (!model.value("byte_fallback", false) && !has_type(pre, "Metaspace") && !has_type(norm, "Prepend"))
      throw Error(path + ": BPE tokenizer is neither byte-level nor SentencePiece-style; cannot write GGUF");
    std::map<std::string, int64_t> text_to_id;
    for (int64_t i = 0; i < n_tok; ++i) text_to_id.emplace(tokens[i], i);
    std::vector<float> scores(static_cast<size_t>(n_tok), -1e9f);  // never produced by a merge
    std::vector<uint8_t> scored(static_cast<size_t>(n_tok), 0);
    for (size_t r = 0; r < merges.size(); ++r) {
      auto it = text_to_id.find(merges[r].first + merges[r].second);
      if (it == text_to_id.end() || scored[it->second]) continue;
      scores[it->second] = -static_cast<float>(r);
      scored[it->second] = 1;
    }
    const std::string unk = model.value("unk_token", "");
    for (int64_t i = 0; i < n_tok; ++i) {
      const std::string& t = tokens[i];
      if (types[i] != 1) continue;
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') types[i] = 6;
      else if (!unk.empty() && t == unk) types[i] = 2;
      if (!scored[i] && t.size() <= 4) scores[i] = 0.0f;  // single characters: never merge results
    }
    // HF's unknown token is an added special token in these files: keep it "unknown".
    if (!unk.empty())
      if (auto it = text_to_id.find(unk); it != text_to_id.end()) types[it->second] = 2;
    bool add_space_prefix = false;
    for (const json* s : norm)
      if (s->value("type", "") == "Prepend" && s->value("prepend", "") == kSpace) add_space_prefix = true;
    for (const json* s : pre)
      if (s->value("type", "") == "Metaspace" &&
          (s->value("add_prefix_space", false) || s->value("prepend_scheme", "never") != "never"))
        add_space_prefix = true;
    w.set("tokenizer.ggml.model", Value::str(gemma4 ? "gemma4" : "llama"));
    w.set("tokenizer.ggml.tokens", Value::str_array(tokens));
    w.set("tokenizer.ggml.scores", Value::f32_array(scores));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.add_space_prefix", Value::boolean(gemma4 ? false : add_space_prefix));
    if (gemma4) {  // BPE ranks over raw UTF-8 (spaces as '▁'), as Gemma4Model.set_vocab writes them
      std::vector<std::string> ms;
      ms.reserve(merges.size());
      for (const auto& [a, b] : merges) ms.push_back(a + " " + b);
      w.set("tokenizer.ggml.merges", Value::str_array(ms));
    }
    if (!unk.empty())
      if (auto it = text_to_id.find(unk); it != text_to_id.end())
        w.set("tokenizer.ggml.unknown_token_id", Value::u32(static_cast<uint32_t>(it->second)));
  }
  // 0xFFFFFFFF is how converters say "none" (the GGUF reader maps out-of-range ids to none).
  auto id_or_none = [](TokenId id) { return Value::u32(id >= 0 ? static_cast<uint32_t>(id) : 0xFFFFFFFFu); };
  w.set("tokenizer.ggml.bos_token_id", id_or_none(hf->bos()));
  w.set("tokenizer.ggml.eos_token_id", id_or_none(hf->eos()));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(hf->add_bos()));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(hf->add_eos()));
}

namespace {

void write_tokenizer(const HfModelDir& d, gguf::GgufWriter& w) {
  write_hf_tokenizer(d.tokenizer_json, d.tokenizer_config_json, d.config.n_vocab, w);
}

}  // namespace

void convert_hf_to_gguf(const HfModelDir& d, const std::string& out_path, std::optional<GgmlType> type) {
  std::shared_ptr<const WeightSource> weights = load_hf_weights(d);
  if (type) weights = requantize(weights, *type);
  const ModelConfig& c = d.config;
  gguf::GgufWriter w;
  const std::string a = c.arch_name + ".";
  auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", Value::str(c.arch_name));
  w.set("general.name", Value::str(c.name));
  w.set(a + "context_length", u32(c.ctx_len));
  w.set(a + "embedding_length", u32(c.dim));
  w.set(a + "block_count", u32(c.n_layers));
  w.set(a + "feed_forward_length", u32(c.ffn_dim));
  w.set(a + "attention.head_count", u32(c.n_heads));
  w.set(a + "attention.head_count_kv", u32(c.n_kv_heads));
  if (c.dim % c.n_heads != 0 || c.head_dim != c.dim / c.n_heads) {
    w.set(a + "attention.key_length", u32(c.head_dim));
    w.set(a + "attention.value_length", u32(c.head_dim));
  }
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(c.rms_eps));
  w.set(a + "rope.freq_base", Value::f32(c.rope_theta));
  w.set(a + "rope.dimension_count", u32(c.n_rot));
  w.set(a + "vocab_size", u32(c.n_vocab));
  if (c.rope_scaling == RopeScalingType::LongRope) {
    // As llama.cpp's Phi3 converter: no scaling type (the factor tensors, which
    // load_hf_weights adds, mark LongRoPE), the original context and the attention factor.
    w.set(a + "rope.scaling.original_context_length", u32(c.rope_orig_ctx));
    w.set(a + "rope.scaling.attn_factor", Value::f32(c.rope_attn_factor));
  } else if (c.rope_scaling != RopeScalingType::None) {
    w.set(a + "rope.scaling.type", Value::str(c.rope_scaling == RopeScalingType::Linear ? "linear" : "yarn"));
    w.set(a + "rope.scaling.factor", Value::f32(c.rope_scaling_factor));
    if (c.rope_scaling == RopeScalingType::Yarn) {
      w.set(a + "rope.scaling.original_context_length", u32(c.rope_orig_ctx));
      if (c.rope_attn_factor != 1.0f) w.set(a + "rope.scaling.attn_factor", Value::f32(c.rope_attn_factor));
    }
  }
  // Phi-3 configs carry original_max_position_embeddings even without scaling
  // (llama.cpp's converter always writes it for phi3).
  if (c.rope_scaling == RopeScalingType::None && c.rope_orig_ctx != c.ctx_len)
    w.set(a + "rope.scaling.original_context_length", u32(c.rope_orig_ctx));
  const ArchInfo& arch = c.info();
  if (c.info().has_experts()) {
    w.set(a + "expert_count", u32(c.n_expert));
    w.set(a + "expert_used_count", u32(c.n_expert_used));
    if (c.info().moe.expert_ffn_key) w.set(a + "expert_feed_forward_length", u32(c.expert_ffn_dim));
  }
  if (arch.sliding_window.pattern != SlidingWindowSpec::Pattern::None)  // phi3 writes 0 for "none"
    w.set(a + "attention.sliding_window", u32(c.sliding_window));
  if (c.rope_theta_local > 0.0f && c.rope_theta_local != arch.sliding_window.local_rope_theta)
    w.set(a + "rope.freq_base_swa", Value::f32(c.rope_theta_local));
  if (arch.attn_softcap) w.set(a + "attn_logit_softcapping", Value::f32(c.attn_softcap));
  if (arch.final_softcap && (c.final_softcap > 0.0f || arch.final_softcap_default > 0.0f))
    w.set(a + "final_logit_softcapping", Value::f32(c.final_softcap));
  // No GGUF key carries Gemma's query_pre_attn_scalar: readers derive the scale from the
  // shape (ModelConfig::gguf_attention_scale), so a checkpoint that differs cannot be written.
  if (c.attn_scale > 0.0f && std::fabs(c.attn_scale - c.gguf_attention_scale()) > 1e-6f * c.gguf_attention_scale())
    throw Error(d.dir + ": query_pre_attn_scalar gives attention scale " + std::to_string(c.attn_scale) +
                ", which a GGUF of this shape cannot express (readers use " +
                std::to_string(c.gguf_attention_scale()) + ")");
  GgmlType matrix_type = GgmlType::F32;
  for (const TensorSpec& t : c.info().tensors) {  // the first per-layer matrix, as llama.cpp labels files
    if (!t.per_layer || (t.kind != TensorKind::Matrix && t.kind != TensorKind::Experts)) continue;
    if (const gguf::TensorInfo* m = weights->find_tensor(gguf_tensor_name(t, 0))) matrix_type = m->type;
    break;
  }
  if (auto ft = file_type_of(matrix_type)) w.set("general.file_type", Value::u32(static_cast<uint32_t>(*ft)));
  if (!d.tokenizer_json.empty()) write_tokenizer(d, w);
  if (!d.chat_template.empty()) w.set("tokenizer.chat_template", Value::str(d.chat_template));

  std::vector<float> row;
  for (const gguf::TensorInfo& t : weights->tensors()) {
    if (t.dims.size() == 1 && t.type != GgmlType::F32) {  // norms and biases as F32, as llama.cpp keeps them
      row.resize(static_cast<size_t>(t.dims[0]));
      dequantize_row(t.type, t.data, row.data(), t.dims[0]);
      w.add_tensor_f32(t.name, GgmlType::F32, t.dims, row.data());
    } else {
      w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
  }
  w.write(out_path);
}

}  // namespace pagoda
