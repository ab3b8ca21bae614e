// Writes synthetic Hugging Face model directories (config.json, safetensors
// shards + index, tokenizer files from ../shared/models) for the hf_* tests.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "safetensors/safetensors.h"
#include "tensor/types.h"

namespace pagoda::test {

struct HfSpec {
  std::string model_type = "llama";  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text | qwen3_moe | mixtral | olmoe | smollm3
  int64_t dim = 32, n_layers = 2, n_heads = 4, n_kv_heads = 2, head_dim = 0, ffn = 48;
  int64_t vocab = 0;                 // 0: the tokenizer's size
  GgmlType dtype = GgmlType::F32;    // F32, F16 or BF16
  bool tied = false;
  int n_shards = 2;                  // 1: model.safetensors
  std::string tokenizer = "mistral-7b-v0.1-tokenizer";  // folder under models/
  std::string rope = "none";         // none | llama3 | linear | yarn | longrope (phi3)
  double partial_rotary = 0;         // > 0: config.json partial_rotary_factor (Phi-4-mini: 0.75)
  uint64_t seed = 7;
  int64_t sliding_window = 8;        // gemma only: shorter than the test prompts
  // qwen3_moe / mixtral: experts per layer, used per token, and (qwen3_moe) one
  // expert's width moe_intermediate_size (mixtral's is ffn).
  int64_t n_expert = 4, n_expert_used = 2, moe_ffn = 32;
  bool moe() const { return model_type == "qwen3_moe" || model_type == "mixtral" || model_type == "olmoe"; }
};

inline bool is_gemma(const HfSpec& s) { return s.model_type == "gemma2" || s.model_type == "gemma3_text"; }

inline std::string shared_models() { return std::string(PAGODA_SHARED_DIR) + "/models/"; }

// Tokens in a tokenizer.json (model vocab + added tokens).
inline int64_t tokenizer_size(const std::string& tokenizer_json) {
  std::ifstream in(tokenizer_json);
  nlohmann::json j = nlohmann::json::parse(in);
  int64_t n = 0;
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
    n = std::max<int64_t>(n, it.value().get<int64_t>() + 1);
  for (const auto& a : j["added_tokens"]) n = std::max<int64_t>(n, a["id"].get<int64_t>() + 1);
  return n;
}

// Tensors in HF naming with their row-major shapes and seeded values.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

inline std::vector<HfTensor> hf_tensors(const HfSpec& s, int64_t vocab) {
  uint64_t state = s.seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  };
  const int64_t hd = s.head_dim ? s.head_dim : s.dim / s.n_heads;
  const int64_t q_dim = s.n_heads * hd, kv_dim = s.n_kv_heads * hd;
  std::vector<HfTensor> out;
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols, float stddev) {
    HfTensor t{name, {rows, cols}, std::vector<float>(static_cast<size_t>(rows * cols))};
    for (float& x : t.values) x = uniform() * stddev * 1.7320508f;
    out.push_back(std::move(t));
  };
  const bool gemma = is_gemma(s);
  auto vec = [&](const std::string& name, int64_t n, bool norm) {
    HfTensor t{name, {n}, std::vector<float>(static_cast<size_t>(n))};
    // Gemma stores w of (1 + w) norms: values near 0, as in its checkpoints.
    for (float& x : t.values) x = norm && !gemma ? 1.0f + 0.1f * uniform() : 0.1f * uniform();
    out.push_back(std::move(t));
  };
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(s.dim));
  mat("model.embed_tokens.weight", vocab, s.dim, gemma ? s_dim : 1.0f);
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    vec(p + "input_layernorm.weight", s.dim, true);
    if (s.model_type == "phi3") {
      mat(p + "self_attn.qkv_proj.weight", q_dim + 2 * kv_dim, s.dim, s_dim);
    } else {
      mat(p + "self_attn.q_proj.weight", q_dim, s.dim, s_dim);
      mat(p + "self_attn.k_proj.weight", kv_dim, s.dim, s_dim);
      mat(p + "self_attn.v_proj.weight", kv_dim, s.dim, s_dim);
    }
    if (s.model_type == "qwen2") {
      vec(p + "self_attn.q_proj.bias", q_dim, false);
      vec(p + "self_attn.k_proj.bias", kv_dim, false);
      vec(p + "self_attn.v_proj.bias", kv_dim, false);
    }
    if (s.model_type == "qwen3" || s.model_type == "gemma3_text" || s.model_type == "qwen3_moe") {
      vec(p + "self_attn.q_norm.weight", hd, true);
      vec(p + "self_attn.k_norm.weight", hd, true);
    }
    if (s.model_type == "olmoe") {  // over the whole projection
      vec(p + "self_attn.q_norm.weight", q_dim, true);
      vec(p + "self_attn.k_norm.weight", kv_dim, true);
    }
    mat(p + "self_attn.o_proj.weight", s.dim, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    vec(p + "post_attention_layernorm.weight", s.dim, true);
    if (gemma) vec(p + "pre_feedforward_layernorm.weight", s.dim, true);
    if (s.moe()) {
      // HF names per model: qwen3_moe mlp.gate + mlp.experts.E.{gate,up,down}_proj;
      // mixtral block_sparse_moe.gate + block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down);
      // olmoe as qwen3_moe, its expert width intermediate_size.
      const bool q = s.model_type != "mixtral";
      const int64_t f = s.model_type == "qwen3_moe" ? s.moe_ffn : s.ffn;
      const std::string m = p + (q ? "mlp." : "block_sparse_moe.");
      mat(m + "gate.weight", s.n_expert, s.dim, 2.0f * s_dim);
      for (int64_t e = 0; e < s.n_expert; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        mat(x + (q ? "gate_proj.weight" : "w1.weight"), f, s.dim, s_dim);
        mat(x + (q ? "up_proj.weight" : "w3.weight"), f, s.dim, s_dim);
        mat(x + (q ? "down_proj.weight" : "w2.weight"), s.dim, f, 1.0f / std::sqrt(static_cast<float>(f)));
      }
      continue;
    }
    if (s.model_type == "phi3") {
      mat(p + "mlp.gate_up_proj.weight", 2 * s.ffn, s.dim, s_dim);
    } else {
      mat(p + "mlp.gate_proj.weight", s.ffn, s.dim, s_dim);
      mat(p + "mlp.up_proj.weight", s.ffn, s.dim, s_dim);
    }
    mat(p + "mlp.down_proj.weight", s.dim, s.ffn, 1.0f / std::sqrt(static_cast<float>(s.ffn)));
    if (gemma) vec(p + "post_feedforward_layernorm.weight", s.dim, true);
  }
  vec("model.norm.weight", s.dim, true);
  if (!s.tied && !gemma) mat("lm_head.weight", vocab, s.dim, s_dim);
  return out;
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline nlohmann::json hf_config(const HfSpec& s, int64_t vocab) {
  nlohmann::json c = {{"model_type", s.model_type},
                      {"hidden_size", s.dim},
                      {"intermediate_size", s.ffn},
                      {"num_hidden_layers", s.n_layers},
                      {"num_attention_heads", s.n_heads},
                      {"num_key_value_heads", s.n_kv_heads},
                      {"max_position_embeddings", 4096},
                      {"rms_norm_eps", 1e-6},
                      {"rope_theta", s.rope == "llama3" ? 500000.0 : 10000.0},
                      {"tie_word_embeddings", s.tied},
                      {"vocab_size", vocab},
                      {"bos_token_id", 1},
                      {"eos_token_id", 2},
                      {"torch_dtype", s.dtype == GgmlType::F32 ? "float32" : "bfloat16"}};
  if (s.head_dim) c["head_dim"] = s.head_dim;
  if (is_gemma(s)) {  // the keys of google/gemma-2-2b / gemma-3-1b-it's config.json
    const int64_t hd = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = hd;
    c["sliding_window"] = s.sliding_window;
    c["tie_word_embeddings"] = true;
    if (s.model_type == "gemma2") {
      c["attn_logit_softcapping"] = 50.0;
      c["final_logit_softcapping"] = 30.0;
      c["architectures"] = {"Gemma2ForCausalLM"};
    } else {
      c["attn_logit_softcapping"] = nullptr;
      c["final_logit_softcapping"] = nullptr;
      c["rope_theta"] = 1000000.0;
      c["rope_local_base_freq"] = 10000.0;
      c["sliding_window_pattern"] = 6;
      c["architectures"] = {"Gemma3ForCausalLM"};
      nlohmann::json types = nlohmann::json::array();
      for (int64_t i = 0; i < s.n_layers; ++i) types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
      c["layer_types"] = types;
    }
  }
  if (s.model_type == "qwen3_moe") {
    c["num_experts"] = s.n_expert;
    c["moe_intermediate_size"] = s.moe_ffn;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
  }
  if (s.model_type == "mixtral") c["num_local_experts"] = s.n_expert;
  if (s.model_type == "smollm3") {  // HuggingFaceTB/SmolLM3-3B's keys: RoPE left out of every 4th layer
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t i = 0; i < s.n_layers; ++i) layers.push_back((i + 1) % 4 == 0 ? 0 : 1);
    c["no_rope_layers"] = layers;
    c["no_rope_layer_interval"] = 4;
    c["architectures"] = {"SmolLM3ForCausalLM"};
  }
  if (s.model_type == "olmoe") {
    c["num_experts"] = s.n_expert;
    c["norm_topk_prob"] = false;
  }
  if (s.moe()) c["num_experts_per_tok"] = s.n_expert_used;
  if (s.rope == "llama3")
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}};
  if (s.rope == "linear") c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  if (s.partial_rotary > 0) c["partial_rotary_factor"] = s.partial_rotary;
  if (s.model_type == "phi3") {
    c["original_max_position_embeddings"] = 1024;
    c["sliding_window"] = 2047;  // as Phi-3-mini-4k declares; pagoda (as llama.cpp) ignores it
  }
  if (s.rope == "longrope") {
    // Phi-3.5-like factors: short near 1, long rising to 4 on the slow pairs.
    const int64_t hd = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    const int64_t n_rot = s.partial_rotary > 0 ? static_cast<int64_t>(s.partial_rotary * s.dim) / s.n_heads : hd;
    nlohmann::json sf = nlohmann::json::array(), lf = nlohmann::json::array();
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double x = n_rot > 2 ? static_cast<double>(i) / static_cast<double>(n_rot / 2 - 1) : 0.0;
      sf.push_back(1.0 + 0.1 * x);
      lf.push_back(1.0 + 3.0 * x * x);
    }
    c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", sf}, {"long_factor", lf}};
  }
  if (s.rope == "yarn")
    c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}};
  return c;
}

// Writes the directory; returns the vocabulary size used.
inline int64_t write_hf_dir(const HfSpec& s, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string tok_dir = shared_models() + s.tokenizer + "/";
  fs::copy_file(tok_dir + "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  if (fs::exists(tok_dir + "tokenizer_config.json"))
    fs::copy_file(tok_dir + "tokenizer_config.json", dir / "tokenizer_config.json",
                  fs::copy_options::overwrite_existing);
  const int64_t vocab = s.vocab ? s.vocab : tokenizer_size(tok_dir + "tokenizer.json");
  write_text(dir / "config.json", hf_config(s, vocab).dump(2));
  write_text(dir / "generation_config.json",
             R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "eos_token_id": [2, 7]})");
  const std::vector<HfTensor> ts = hf_tensors(s, vocab);
  if (s.n_shards <= 1) {
    safetensors::SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const HfTensor& t : ts) w.add_f32(t.name, s.dtype, t.shape, t.values.data());
    w.write((dir / "model.safetensors").string());
    return vocab;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (int sh = 0; sh < s.n_shards; ++sh) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", sh + 1, s.n_shards);
    safetensors::SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (size_t i = 0; i < ts.size(); ++i) {
      if (static_cast<int>(i * s.n_shards / ts.size()) != sh) continue;
      w.add_f32(ts[i].name, s.dtype, ts[i].shape, ts[i].values.data());
      weight_map[ts[i].name] = name;
    }
    w.write((dir / name).string());
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_text(dir / "model.safetensors.index.json", index.dump(2));
  return vocab;
}

}  // namespace pagoda::test
