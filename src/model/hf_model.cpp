// HfModelDir::open and load_hf_weights (see hf_model.h). The name map and the
// Q/K permutation follow llama.cpp's convert_hf_to_gguf.py so that a directory
// and the GGUF converted from it give identical tensors.
#include "model/hf_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "kernels/ops.h"
#include "safetensors/safetensors.h"
#include "common/text_file.h"

namespace pagoda {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const std::string& path) {
  const std::string text = read_text_file(path);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": is not valid JSON");
  if (!j.is_object()) throw Error(path + ": is not a JSON object");
  return j;
}

// Typed lookups in config.json: nullopt when absent or null.
class JsonConfig {
 public:
  JsonConfig(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  std::optional<int64_t> opt_int(const json& obj, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) throw Error(path_ + ": key '" + key + "' is not an integer");
    return it->get<int64_t>();
  }
  std::optional<double> opt_float(const json& obj, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) throw Error(path_ + ": key '" + key + "' is not a number");
    return it->get<double>();
  }
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    auto v = opt_int(j_, key);
    if (!v && !fallback) throw Error(path_ + ": key '" + std::string(key) + "' is missing");
    const int64_t x = v ? *v : *fallback;
    if (x <= 0 || x > (int64_t{1} << 32))
      throw Error(path_ + ": key '" + std::string(key) + "' has invalid value " + std::to_string(x));
    return x;
  }
  // int or list of ints -> ids.
  std::vector<int32_t> ids(const json& obj, const char* key) const {
    std::vector<int32_t> out;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return out;
    auto one = [&](const json& v) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        throw Error(path_ + ": key '" + std::string(key) + "' holds something other than a token id");
      out.push_back(static_cast<int32_t>(v.get<int64_t>()));
    };
    if (it->is_array()) {
      for (const json& v : *it) one(v);
    } else {
      one(*it);
    }
    return out;
  }
  const json& root() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string path_;
};

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Into `c`, the config being built (not yet d.config, which parse_config's result replaces).
void parse_rope_scaling(const JsonConfig& cfg, const json& rs, HfModelDir& d, ModelConfig& c) {
  std::string type;
  if (auto it = rs.find("rope_type"); it != rs.end() && it->is_string()) type = it->get<std::string>();
  else if (auto it2 = rs.find("type"); it2 != rs.end() && it2->is_string()) type = it2->get<std::string>();
  const double factor = cfg.opt_float(rs, "factor").value_or(1.0);
  if (type.empty() || type == "default") return;
  if (!(factor > 0.0)) throw Error(cfg.path() + ": rope_scaling.factor must be > 0");
  const ArchInfo& row = c.info();
  const bool accepted = type == "llama3"                     ? row.has(Role::RopeFreqs)
                        : type == "linear"                   ? row.supports(RopeScalingType::Linear)
                        : type == "yarn"                     ? row.supports(RopeScalingType::Yarn)
                        : type == "longrope" || type == "su" ? row.supports(RopeScalingType::LongRope)
                                                             : false;
  if (!accepted) {
    std::string supported = "default";
    if (row.has(Role::RopeFreqs)) supported += ", llama3";
    for (RopeScalingType t : row.rope_scalings) supported += std::string(", ") + rope_scaling_name(t);
    throw Error(cfg.path() + ": unsupported rope_scaling type '" + type + "' for " + d.model_type +
                " (supported: " + supported + ")");
  }
  if (type == "llama3") {
    Llama3RopeScaling l;
    l.factor = static_cast<float>(factor);
    l.low_freq_factor = static_cast<float>(cfg.opt_float(rs, "low_freq_factor").value_or(1.0));
    l.high_freq_factor = static_cast<float>(cfg.opt_float(rs, "high_freq_factor").value_or(4.0));
    l.orig_ctx = cfg.opt_int(rs, "original_max_position_embeddings").value_or(8192);
    if (!(l.high_freq_factor > l.low_freq_factor) || l.orig_ctx <= 0)
      throw Error(cfg.path() + ": rope_scaling (llama3) needs high_freq_factor > low_freq_factor and "
                  "original_max_position_embeddings > 0");
    d.llama3_rope = l;
  } else if (type == "linear") {
    if (factor != 1.0) {
      c.rope_scaling = RopeScalingType::Linear;
      c.rope_scaling_factor = static_cast<float>(factor);
    }
  } else if (type == "longrope" || type == "su") {
    // transformers' _compute_longrope_parameters; the attention factor as llama.cpp's
    // converter computes it (sqrt(1 + ln(scale) / ln(orig)), scale = max_pos / orig)
    // unless config.json gives attention_factor, which transformers prefers.
    auto factors = [&](const char* key) {
      std::vector<float> v;
      auto it = rs.find(key);
      if (it == rs.end() || !it->is_array())
        throw Error(cfg.path() + ": rope_scaling (longrope) needs a '" + key + "' list");
      for (const json& x : *it) {
        if (!x.is_number() || !(x.get<double>() > 0.0))
          throw Error(cfg.path() + ": rope_scaling." + key + " holds something other than a positive number");
        v.push_back(static_cast<float>(x.get<double>()));
      }
      if (static_cast<int64_t>(v.size()) != c.n_rot / 2)
        throw Error(cfg.path() + ": rope_scaling." + key + " has " + std::to_string(v.size()) +
                    " entries, expected " + std::to_string(c.n_rot / 2) + " (rotary dims / 2)");
      return v;
    };
    LongRopeFactors lr;
    lr.short_factors = factors("short_factor");
    lr.long_factors = factors("long_factor");
    d.longrope = std::move(lr);
    c.rope_scaling = RopeScalingType::LongRope;
    if (auto orig = cfg.opt_int(rs, "original_max_position_embeddings")) c.rope_orig_ctx = *orig;
    if (c.rope_orig_ctx <= 0) throw Error(cfg.path() + ": original_max_position_embeddings must be > 0");
    const double scale = static_cast<double>(c.ctx_len) / static_cast<double>(c.rope_orig_ctx);
    double attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(c.rope_orig_ctx)))
                              : 1.0;
    if (auto af = cfg.opt_float(rs, "attention_factor")) attn = *af;
    if (!(attn > 0.0)) throw Error(cfg.path() + ": rope_scaling.attention_factor must be > 0");
    c.rope_attn_factor = static_cast<float>(attn);
  } else if (type == "yarn") {
    if (factor != 1.0) {
      c.rope_scaling = RopeScalingType::Yarn;
      c.rope_scaling_factor = static_cast<float>(factor);
      c.rope_orig_ctx = cfg.opt_int(rs, "original_max_position_embeddings").value_or(c.ctx_len);
      if (c.rope_orig_ctx <= 0) throw Error(cfg.path() + ": rope_scaling.original_max_position_embeddings must be > 0");
      c.rope_attn_factor = static_cast<float>(cfg.opt_float(rs, "attention_factor").value_or(1.0));
    }
  }
}

// Gemma 3 4B / 12B / 27B checkpoints are multimodal (model_type gemma3,
// Gemma3ForConditionalGeneration): the text model's config is `text_config`, which lists
// only what differs from transformers' Gemma3TextConfig defaults (the 4B lists no head
// counts at all), so those defaults fill it in; the vision tower is not read (llama.cpp
// likewise converts it to a separate mmproj file). Other configs pass through unchanged.
json text_model_config(json j, const std::string& path) {
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string() || mt->get<std::string>() != "gemma3") return j;
  auto tc = j.find("text_config");
  if (tc == j.end() || !tc->is_object()) throw Error(path + ": model_type gemma3 without a text_config object");
  json t = *tc;
  const json defaults = {{"vocab_size", 262208},          {"hidden_size", 2304},
                         {"intermediate_size", 9216},     {"num_hidden_layers", 26},
                         {"num_attention_heads", 8},      {"num_key_value_heads", 4},
                         {"head_dim", 256},               {"max_position_embeddings", 131072},
                         {"rms_norm_eps", 1e-6},          {"rope_theta", 1000000.0},
                         {"query_pre_attn_scalar", 256},  {"sliding_window", 4096},
                         {"sliding_window_pattern", 6},   {"rope_local_base_freq", 10000.0},
                         {"hidden_activation", "gelu_pytorch_tanh"}, {"final_logit_softcapping", nullptr},
                         {"attn_logit_softcapping", nullptr}, {"tie_word_embeddings", true}};
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (!t.contains(it.key())) t[it.key()] = it.value();
  for (const char* key : {"bos_token_id", "eos_token_id", "tie_word_embeddings"})
    if (j.contains(key) && !tc->contains(key)) t[key] = j[key];
  t["model_type"] = "gemma3_text";
  t["architectures"] = json::array({"Gemma3ForCausalLM"});
  t["pagoda_multimodal_gemma3"] = true;  // tensor names under the language model (load_hf_weights)
  return t;
}

// Gemma 2 / 3 (text): activation, query scale, soft-caps, the local layers' pattern and RoPE.
void parse_gemma(const JsonConfig& cfg, const ArchInfo& row, ModelConfig& c) {
  const json& j = cfg.root();
  const std::string& path = cfg.path();
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string() || (it->get<std::string>() != "gelu_pytorch_tanh" && it->get<std::string>() != "gelu"))
      throw Error(path + ": " + key + " must be gelu_pytorch_tanh for " + std::string(row.gguf_name));
    break;
  }
  if (auto qs = cfg.opt_float(j, "query_pre_attn_scalar")) {
    if (!(*qs > 0.0)) throw Error(path + ": query_pre_attn_scalar must be > 0");
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(*qs));
  }
  // transformers' Gemma2Config defaults 50 / 30 when absent; null means "none" (Gemma 3).
  auto cap = [&](const char* key, double fallback) {
    auto it = j.find(key);
    if (it == j.end()) return static_cast<float>(fallback);
    const double v = cfg.opt_float(j, key).value_or(0.0);
    if (!(v >= 0.0)) throw Error(path + ": " + key + " must be >= 0");
    return static_cast<float>(v);
  };
  if (row.attn_softcap) c.attn_softcap = cap("attn_logit_softcapping", row.attn_softcap_default);
  else if (cap("attn_logit_softcapping", 0.0) != 0.0f)
    throw Error(path + ": attn_logit_softcapping is not supported for " + std::string(row.gguf_name));
  if (row.final_softcap) c.final_softcap = cap("final_logit_softcapping", row.final_softcap_default);
  if (!j.contains("sliding_window") && row.sliding_window.default_window > 0)
    c.sliding_window = row.sliding_window.default_window;
  // The local/global layout must be the row's (layer i global when (i + 1) % period == 0).
  const int64_t period = row.sliding_window.period;
  if (auto p = cfg.opt_int(j, "sliding_window_pattern"); p && *p != period)
    throw Error(path + ": sliding_window_pattern " + std::to_string(*p) + " is not " + std::string(row.gguf_name) +
                "'s " + std::to_string(period));
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array() && c.sliding_window > 0) {
    if (static_cast<int64_t>(it->size()) != c.n_layers) throw Error(path + ": layer_types has the wrong length");
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const json& t = (*it)[static_cast<size_t>(i)];
      const bool local = t.is_string() && t.get<std::string>() == "sliding_attention";
      if (local != c.layer_is_local(i))
        throw Error(path + ": layer_types[" + std::to_string(i) + "] does not follow " +
                    std::string(row.gguf_name) + "'s pattern of one global layer every " + std::to_string(period));
    }
  }
  if (row.sliding_window.local_rope_theta > 0.0f && c.sliding_window > 0) {
    const double local = cfg.opt_float(j, "rope_local_base_freq").value_or(row.sliding_window.local_rope_theta);
    if (!(local > 1.0)) throw Error(path + ": rope_local_base_freq must be > 1");
    c.rope_theta_local = static_cast<float>(local);
  }
}

// Expert counts of a mixture-of-experts row, and the layouts pagoda (like
// llama.cpp's graphs for these rows) does not run: dense layers among the MoE
// ones, and Qwen3-MoE without renormalised top-k weights.
void parse_experts(const JsonConfig& cfg, const ArchInfo& row, const HfModelDir& d, ModelConfig& c) {
  const json& j = cfg.root();
  const std::string count_key(row.moe.hf_expert_count_key);
  c.n_expert = cfg.positive(count_key.c_str());
  c.n_expert_used = cfg.positive("num_experts_per_tok");
  if (c.n_expert_used > c.n_expert || c.n_expert > 4096)
    throw Error(cfg.path() + ": num_experts_per_tok " + std::to_string(c.n_expert_used) + " must be <= " +
                count_key + " " + std::to_string(c.n_expert) + " (<= 4096)");
  const std::string ffn_key(row.moe.hf_expert_ffn_key);
  c.expert_ffn_dim = ffn_key.empty() ? c.ffn_dim : cfg.positive(ffn_key.c_str());
  if (auto step = cfg.opt_int(j, "decoder_sparse_step"); step && *step != 1)
    throw Error(cfg.path() + ": decoder_sparse_step " + std::to_string(*step) +
                " (dense layers between expert layers) is not supported");
  if (auto it = j.find("mlp_only_layers"); it != j.end() && it->is_array() && !it->empty())
    throw Error(cfg.path() + ": mlp_only_layers (dense layers among expert layers) is not supported");
  // The row fixes renormalisation (as llama.cpp's graphs do); config.json must agree.
  const bool renorm = row.moe.router == RouterKind::SoftmaxTopKRenormalized;
  if (auto it = j.find("norm_topk_prob"); (it != j.end() && it->is_boolean()) || row.arch == Arch::Qwen3Moe) {
    const bool given = it != j.end() && it->is_boolean() && it->get<bool>();
    if (given != renorm)
      throw Error(cfg.path() + ": " + d.model_type + " needs norm_topk_prob = " + (renorm ? "true" : "false") +
                  " (" + (renorm ? "renormalised" : "unrenormalised") + " top-k weights, as its checkpoints and " +
                  "llama.cpp's " + std::string(row.gguf_name) + " graph have it)");
  }
}

ModelConfig parse_config(const json& j, const std::string& path, HfModelDir& d) {
  JsonConfig cfg(j, path);
  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) throw Error(path + ": key 'model_type' is missing");
  d.model_type = mt->get<std::string>();
  std::string hf_arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    hf_arch = (*a)[0].get<std::string>();
  const ArchInfo* row = find_arch_by_hf(d.model_type, hf_arch);
  if (!row)
    throw Error(path + ": unsupported model_type '" + d.model_type + "' (supported: " + supported_hf_model_types() +
                ")");
  c.arch = row->arch;
  c.arch_name = std::string(row->gguf_name);  // e.g. llama.cpp converts mistral to general.architecture = llama
  if (!row->qkv_bias) {
    if (auto it = j.find("attention_bias"); it != j.end() && it->is_boolean() && it->get<bool>())
      throw Error(path + ": attention_bias = true is not supported for " + d.model_type);
  }
  c.name = fs::path(d.dir).filename().string();
  if (c.name.empty()) c.name = fs::path(d.dir).parent_path().filename().string();
  c.dim = cfg.positive("hidden_size");
  c.n_layers = cfg.positive("num_hidden_layers");
  c.ffn_dim = cfg.positive("intermediate_size");
  c.n_heads = cfg.positive("num_attention_heads");
  c.n_kv_heads = cfg.positive("num_key_value_heads", c.n_heads);
  c.ctx_len = cfg.positive("max_position_embeddings", 2048);
  c.n_vocab = cfg.positive("vocab_size");
  if (!cfg.opt_int(j, "head_dim") && c.dim % c.n_heads != 0)
    throw Error(path + ": hidden_size " + std::to_string(c.dim) + " is not divisible by num_attention_heads " +
                std::to_string(c.n_heads));
  c.head_dim = cfg.positive("head_dim", c.dim / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    throw Error(path + ": num_attention_heads " + std::to_string(c.n_heads) +
                " is not a multiple of num_key_value_heads " + std::to_string(c.n_kv_heads));
  if (c.head_dim % 2 != 0) throw Error(path + ": head_dim " + std::to_string(c.head_dim) + " must be even");
  c.n_rot = c.head_dim;
  // Partial rotary embedding (Phi-4-mini: 0.75), as llama.cpp's converter counts it.
  if (auto rot = cfg.opt_float(j, "partial_rotary_factor"); rot && *rot != 1.0) {
    if (!(*rot > 0.0 && *rot <= 1.0)) throw Error(path + ": partial_rotary_factor must be in (0, 1]");
    c.n_rot = static_cast<int64_t>(*rot * static_cast<double>(c.dim)) / c.n_heads;
    if (c.n_rot <= 0 || c.n_rot % 2 != 0 || c.n_rot > c.head_dim)
      throw Error(path + ": partial_rotary_factor gives " + std::to_string(c.n_rot) +
                  " rotary dims; they must be even, > 0 and <= head_dim " + std::to_string(c.head_dim));
  }
  c.rms_eps = static_cast<float>(cfg.opt_float(j, "rms_norm_eps").value_or(1e-6));
  if (!(c.rms_eps > 0.0f)) throw Error(path + ": rms_norm_eps must be > 0");
  // transformers >= 4.56 may nest rope_theta and the scaling in rope_parameters.
  const json* rope_params = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) rope_params = &*it;
  double theta = cfg.opt_float(j, "rope_theta").value_or(0.0);
  if (theta == 0.0 && rope_params) theta = cfg.opt_float(*rope_params, "rope_theta").value_or(0.0);
  c.rope_theta = static_cast<float>(theta == 0.0 ? 10000.0 : theta);
  if (!(c.rope_theta > 1.0f)) throw Error(path + ": rope_theta must be > 1");
  c.rope_orig_ctx = c.ctx_len;
  if (auto orig = cfg.opt_int(j, "original_max_position_embeddings")) {  // phi3 keeps it top-level
    if (*orig <= 0) throw Error(path + ": original_max_position_embeddings must be > 0");
    c.rope_orig_ctx = *orig;
  }
  if (row->sliding_window.pattern != SlidingWindowSpec::Pattern::None) {
    if (auto sw = cfg.opt_int(j, "sliding_window")) {
      if (*sw < 0) throw Error(path + ": sliding_window must be >= 0");
      c.sliding_window = *sw;
    }
  }
  if (row->hf_norm_shift != 0.0f) parse_gemma(cfg, *row, c);
  if (row->nope_interval > 0) {
    // SmolLM3: config.json's no_rope_layers (1: the layer uses RoPE) and
    // no_rope_layer_interval; llama.cpp (and so the GGUF) fixes every fourth layer NoPE, so a
    // checkpoint saying otherwise cannot be converted faithfully: refused, naming the layer.
    const int64_t n = row->nope_interval;
    if (auto iv = cfg.opt_int(j, "no_rope_layer_interval"); iv && *iv != n)
      throw Error(path + ": no_rope_layer_interval " + std::to_string(*iv) + " is not " + std::to_string(n) + " (" +
                  d.model_type + " as llama.cpp reads it)");
    if (auto it = j.find("no_rope_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array() || static_cast<int64_t>(it->size()) != c.n_layers)
        throw Error(path + ": no_rope_layers must list one 0/1 per layer (" + std::to_string(c.n_layers) + ")");
      for (int64_t l = 0; l < c.n_layers; ++l) {
        const json& v = (*it)[static_cast<size_t>(l)];
        if (!v.is_number_integer() && !v.is_boolean())
          throw Error(path + ": no_rope_layers holds something other than 0 / 1");
        const bool rope = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0;
        if (rope != c.layer_uses_rope(l))
          throw Error(path + ": no_rope_layers gives layer " + std::to_string(l) + (rope ? " RoPE" : " no RoPE") +
                      ", but " + d.model_type + " leaves RoPE out on every " + std::to_string(n) +
                      "th layer only (as llama.cpp fixes it)");
      }
    }
  }
  if (row->has_experts()) parse_experts(cfg, *row, d, c);
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw Error(path + ": rope_scaling is not an object");
    parse_rope_scaling(cfg, *it, d, c);
  } else if (rope_params) {
    parse_rope_scaling(cfg, *rope_params, d, c);
  }
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw Error(path + ": tie_word_embeddings is not a boolean");
    d.tie_word_embeddings = it->get<bool>();
  }
  d.multimodal_gemma3 = j.value("pagoda_multimodal_gemma3", false);
  if (auto bos = cfg.ids(j, "bos_token_id"); !bos.empty()) d.bos_token_id = bos[0];
  d.eos_token_ids = cfg.ids(j, "eos_token_id");
  return c;
}

std::string read_chat_template(const std::string& dir, const std::string& tokenizer_config) {
  const std::string jinja = join(dir, "chat_template.jinja");
  if (fs::is_regular_file(jinja)) return read_text_file(jinja);
  if (tokenizer_config.empty()) return "";
  const json j = read_json(tokenizer_config);
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string first;
    for (const json& e : *it) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string())
        throw Error(tokenizer_config + ": chat_template list entries must be {name, template} objects");
      const std::string name = e.value("name", "");
      if (name == "default") return e["template"].get<std::string>();
      if (first.empty()) first = e["template"].get<std::string>();
    }
    return first;
  }
  throw Error(tokenizer_config + ": chat_template is neither a string nor a list");
}

// One expected tensor: HF name, GGUF name, HF (row-major) shape, and for Q/K
// of rows with permute_qk the head count to permute by.
struct Expected {
  std::string hf, gguf;
  std::vector<int64_t> shape;
  int64_t permute_heads = 0;
  float norm_shift = 0.0f;  // added to a norm's values (Gemma: 1)
  // Experts: one HF tensor per expert (shape without the leading n_expert),
  // stacked into the 3-D GGUF tensor; hf is then the first of them.
  std::vector<std::string> hf_experts;
  bool to_f32 = false;  // the router: F32 whatever the stored dtype (as the converter writes it)
};

// The row's stored tensors (those with an HF name), tied output left out.
std::vector<Expected> expected_tensors(const HfModelDir& d) {
  const ModelConfig& c = d.config;
  const ArchInfo& row = c.info();
  std::vector<Expected> e;
  auto add = [&](const TensorSpec& t, int64_t layer) {
    if (t.hf.empty() || t.presence == Presence::Optional) return;
    if (t.presence == Presence::Untied && d.tie_word_embeddings) return;
    int64_t permute = 0;
    if (row.permute_qk && t.permute == Permute::ByHeads) permute = c.n_heads;
    if (row.permute_qk && t.permute == Permute::ByKvHeads) permute = c.n_kv_heads;
    Expected x{hf_tensor_name(t, layer), gguf_tensor_name(t, layer), resolve_shape(t, c), permute, 0.0f, {}, false};
    x.norm_shift = t.kind == TensorKind::Norm ? row.hf_norm_shift : 0.0f;
    if (t.kind == TensorKind::Experts)
      for (int64_t ex = 0; ex < c.n_expert; ++ex) x.hf_experts.push_back(hf_tensor_name(t, layer, ex));
    x.to_f32 = t.kind == TensorKind::Router;
    e.push_back(std::move(x));
  };
  for (const TensorSpec& t : row.tensors)
    if (!t.per_layer) add(t, 0);
  for (int64_t i = 0; i < c.n_layers; ++i)
    for (const TensorSpec& t : row.tensors)
      if (t.per_layer) add(t, i);
  return e;
}

// llama.cpp LlamaModel.permute: rows of each head reordered from [2, head_dim/2]
// (HF rotate_half halves) to [head_dim/2, 2] (GGML's adjacent pairs):
// out row h*hd + 2*i + j = in row h*hd + j*hd/2 + i.
std::vector<uint8_t> permute_rows(const uint8_t* src, int64_t n_rows, size_t row_bytes, int64_t n_heads) {
  std::vector<uint8_t> out(static_cast<size_t>(n_rows) * row_bytes);
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(out.data() + (h * hd + 2 * i + j) * row_bytes, src + (h * hd + j * half + i) * row_bytes,
                    row_bytes);
  return out;
}

using TensorIndex = std::map<std::string, std::pair<const safetensors::SafetensorsFile*,
                                                    const safetensors::TensorEntry*>, std::less<>>;

// The n_expert per-expert HF matrices of x stacked, expert 0 first, into one
// owned 3-D tensor: GGUF's layout, where expert e's matrix is the e-th block of
// rows. A copy of the expert weights (the mapping stays untouched); every
// expert must have the same dtype.
void add_stacked_experts(const Expected& x, const TensorIndex& by_name, const std::string& where,
                         const HfModelDir& d, OwnedWeightSource& out) {
  const std::vector<int64_t> part_shape(x.shape.begin() + 1, x.shape.end());
  std::vector<uint8_t> bytes;
  std::optional<GgmlType> type;
  for (const std::string& name : x.hf_experts) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(d.dir + ": tensor '" + name + "' is missing (not in " + where + ")");
    const safetensors::SafetensorsFile& f = *it->second.first;
    const safetensors::TensorEntry& e = *it->second.second;
    if (!e.type)
      throw Error(f.path() + ": tensor '" + name + "' has dtype " + e.dtype + " (supported: F32, F16, BF16)");
    if (e.shape != part_shape)
      throw Error(f.path() + ": tensor '" + name + "' has shape " + e.shape_string() + ", expected " +
                  shape_string(part_shape) + " from config.json");
    if (type && *e.type != *type)
      throw Error(f.path() + ": tensor '" + name + "' has dtype " + e.dtype + ", unlike expert 0 of its layer");
    type = *e.type;
    const size_t n = row_bytes(*e.type, part_shape[1]) * static_cast<size_t>(part_shape[0]);
    if (bytes.empty()) bytes.reserve(n * x.hf_experts.size());
    bytes.insert(bytes.end(), e.data, e.data + n);
  }
  out.add_owned(x.gguf, *type, std::vector<int64_t>(x.shape.rbegin(), x.shape.rend()), std::move(bytes));
}

}  // namespace

GenerationDefaults read_generation_config(const std::string& path) {
  GenerationDefaults g;
  if (!fs::is_regular_file(path)) return g;
  const json j = read_json(path);
  JsonConfig cfg(j, path);
  if (auto v = cfg.opt_float(j, "temperature")) g.temperature = static_cast<float>(*v);
  if (auto v = cfg.opt_float(j, "top_p")) g.top_p = static_cast<float>(*v);
  if (auto v = cfg.opt_int(j, "top_k")) g.top_k = static_cast<int32_t>(*v);
  if (auto v = cfg.opt_float(j, "repetition_penalty")) g.repetition_penalty = static_cast<float>(*v);
  g.eos_token_ids = cfg.ids(j, "eos_token_id");
  return g;
}

bool is_model_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

HfModelDir HfModelDir::open(const std::string& dir) {
  HfModelDir d;
  d.dir = dir;
  if (!is_model_directory(dir)) throw Error(dir + ": not a directory");
  const std::string config = join(dir, "config.json");
  if (!fs::is_regular_file(config))
    throw Error(dir + ": not a Hugging Face model directory: config.json is missing");
  d.config = parse_config(text_model_config(read_json(config), config), config, d);
  if (const std::string t = join(dir, "tokenizer.json"); fs::is_regular_file(t)) d.tokenizer_json = t;
  if (const std::string t = join(dir, "tokenizer_config.json"); fs::is_regular_file(t)) d.tokenizer_config_json = t;
  d.chat_template = read_chat_template(dir, d.tokenizer_config_json);
  d.generation = read_generation_config(join(dir, "generation_config.json"));
  return d;
}

std::shared_ptr<const WeightSource> load_hf_weights(const HfModelDir& d) {
  using safetensors::SafetensorsFile;
  using safetensors::TensorEntry;
  auto out = std::make_shared<OwnedWeightSource>(d.dir);
  // HF name -> (file, entry).
  TensorIndex by_name;
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> shards;  // file name -> file
  auto open_shard = [&](const std::string& name) -> const SafetensorsFile* {
    auto it = shards.find(name);
    if (it != shards.end()) return it->second.get();
    auto f = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(join(d.dir, name)));
    out->keep_alive(f);
    return shards.emplace(name, f).first->second.get();
  };
  const std::string index = join(d.dir, "model.safetensors.index.json");
  std::string where;  // for "missing" errors
  if (fs::is_regular_file(index)) {
    const json j = read_json(index);
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) throw Error(index + ": weight_map is missing or not an object");
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) throw Error(index + ": weight_map entry '" + it.key() + "' is not a file name");
      const std::string shard = it.value().get<std::string>();
      const fs::path sp(shard);
      if (shard.empty() || sp.is_absolute() || shard.find("..") != std::string::npos)
        throw Error(index + ": weight_map names shard '" + shard + "' outside the directory");
      if (!fs::is_regular_file(join(d.dir, shard)))
        throw Error(index + ": shard '" + shard + "' (holding tensor '" + it.key() + "') is missing");
      const SafetensorsFile* f = open_shard(shard);
      const TensorEntry* e = f->find(it.key());
      if (!e) throw Error(index + ": maps tensor '" + it.key() + "' to shard '" + shard + "', which does not hold it");
      by_name[it.key()] = {f, e};
    }
    where = "model.safetensors.index.json";
  } else {
    const std::string single = "model.safetensors";
    if (!fs::is_regular_file(join(d.dir, single)))
      throw Error(d.dir + ": no model.safetensors or model.safetensors.index.json");
    const SafetensorsFile* f = open_shard(single);
    for (const TensorEntry& e : f->tensors()) by_name[e.name] = {f, &e};
    where = single;
  }

  for (const Expected& x : expected_tensors(d)) {
    if (!x.hf_experts.empty()) {
      add_stacked_experts(x, by_name, where, d, *out);
      continue;
    }
    auto it = by_name.find(x.hf);
    if (it == by_name.end() && d.multimodal_gemma3) {
      // transformers < 4.52 saves the text model as language_model.model.*, later versions
      // as model.language_model.*.
      it = by_name.find("language_model." + x.hf);
      if (it == by_name.end() && x.hf.rfind("model.", 0) == 0) it = by_name.find("model.language_model." + x.hf.substr(6));
    }
    if (it == by_name.end()) throw Error(d.dir + ": tensor '" + x.hf + "' is missing (not in " + where + ")");
    const SafetensorsFile& f = *it->second.first;
    const TensorEntry& e = *it->second.second;
    if (!e.type)
      throw Error(f.path() + ": tensor '" + x.hf + "' has dtype " + e.dtype + " (supported: F32, F16, BF16)");
    if (e.shape != x.shape)
      throw Error(f.path() + ": tensor '" + x.hf + "' has shape " + e.shape_string() + ", expected " +
                  shape_string(x.shape) + " from config.json");
    std::vector<int64_t> dims(x.shape.rbegin(), x.shape.rend());  // ggml order
    if (x.norm_shift != 0.0f) {
      // Gemma's (1 + w) norms, stored as llama.cpp's converter writes them: F32, w + 1
      // (it converts BF16 to F32 before adding; arch_table.h hf_norm_shift).
      const int64_t n = x.shape[0];
      std::vector<float> v(static_cast<size_t>(n));
      dequantize_row(*e.type, e.data, v.data(), n);
      for (float& f : v) f += x.norm_shift;
      std::vector<uint8_t> bytes(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());
      out->add_owned(x.gguf, GgmlType::F32, dims, std::move(bytes));
    } else if (x.to_f32 && *e.type != GgmlType::F32) {
      const int64_t n = x.shape[0] * x.shape[1];
      std::vector<uint8_t> bytes(static_cast<size_t>(n) * sizeof(float));
      dequantize_row(*e.type, e.data, reinterpret_cast<float*>(bytes.data()), n);
      out->add_owned(x.gguf, GgmlType::F32, dims, std::move(bytes));
    } else if (x.permute_heads > 0) {
      const size_t rb = row_bytes(*e.type, x.shape[1]);
      out->add_owned(x.gguf, *e.type, dims, permute_rows(e.data, x.shape[0], rb, x.permute_heads));
      f.drop_resident(e);  // read once for the copy (else resident twice: +9 MiB a layer, TinyLlama BF16)
    } else {
      out->add_view(x.gguf, *e.type, dims, e.data, [&f, &e] { return f.drop_resident(e); });
    }
  }
  if (d.longrope) {
    const ModelConfig& c = d.config;
    auto add = [&](Role role, const std::vector<float>& f) {
      std::vector<uint8_t> bytes(f.size() * sizeof(float));
      std::memcpy(bytes.data(), f.data(), bytes.size());
      out->add_owned(c.info().gguf_tensor(role), GgmlType::F32, {static_cast<int64_t>(f.size())}, std::move(bytes));
    };
    add(Role::RopeFactorsLong, d.longrope->long_factors);
    add(Role::RopeFactorsShort, d.longrope->short_factors);
  }
  if (d.llama3_rope) {
    const ModelConfig& c = d.config;
    const Llama3RopeScaling& l = *d.llama3_rope;
    std::vector<float> ff(static_cast<size_t>(c.n_rot / 2));
    llama3_freq_factors(ff.data(), c.n_rot, c.rope_theta, l.factor, l.low_freq_factor, l.high_freq_factor,
                        l.orig_ctx);
    std::vector<uint8_t> bytes(ff.size() * sizeof(float));
    std::memcpy(bytes.data(), ff.data(), bytes.size());
    out->add_owned(c.info().gguf_tensor(Role::RopeFreqs), GgmlType::F32, {c.n_rot / 2}, std::move(bytes));
  }
  return out;
}

}  // namespace pagoda
