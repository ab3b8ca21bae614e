// Hugging Face model directories: config.json + model.safetensors (or shards
// listed in model.safetensors.index.json) + tokenizer.json, tokenizer_config.json,
// chat_template.jinja and generation_config.json.
//
// Contract:
// - HfModelDir::open() reads the small JSON files only (no weights): the
//   architecture config (a model_type, else architectures[0], with a row in
//   model/arch_table.h: llama / mistral / qwen2 / qwen3) into a
//   ModelConfig equal to what ModelConfig::from_gguf() returns for the GGUF
//   that convert_hf_to_gguf() (tools/hf_convert.h) writes, the chat template and
//   the generation defaults. load_hf_weights() maps the safetensors files and presents their
//   tensors under GGUF names and in GGUF layout: F32 / F16 / BF16 matrices are
//   viewed in the mapping without a copy, except the Q and K projections of
//   rows with permute_qk (llama / mistral), whose rows are permuted into owned
//   buffers exactly as
//   llama.cpp's convert_hf_to_gguf.py does (LlamaModel.permute), because
//   pagoda's llama path applies GGML's interleaved RoPE to the permuted layout
//   (qwen2 / qwen3 use NeoX RoPE on the unpermuted weights, as in GGUF). A
//   llama3 rope_scaling becomes a computed rope_freqs.weight, as the converter
//   writes it.
// - Every problem throws pagoda::Error with one line naming the file and what is
//   wrong (missing file, bad JSON, unsupported model_type / dtype / rope scaling,
//   shape against config.json, tensor missing, index naming a missing shard,
//   and every safetensors header fault: safetensors/safetensors.h).
// - Plain values, read-only after open(); the weight source keeps its mappings alive.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace pagoda {

// Sampling defaults a model directory ships in generation_config.json; unset
// fields are absent from the file. The server uses them where a request leaves
// a parameter out.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> repetition_penalty;
  // eos_token_id (int or list): extra end-of-generation token ids.
  std::vector<int32_t> eos_token_ids;
};

// Parses generation_config.json; nullopt-valued defaults when the file is absent.
// Throws pagoda::Error naming the file when it exists but is malformed.
GenerationDefaults read_generation_config(const std::string& path);

struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t orig_ctx = 8192;
};

// LongRoPE (Phi-3 rope_scaling type longrope / su): per-pair frequency divisors
// [n_rot/2] for contexts up to original_max_position_embeddings (short) and
// beyond (long); load_hf_weights presents them as rope_factors_short/long.weight.
struct LongRopeFactors {
  std::vector<float> short_factors;
  std::vector<float> long_factors;
};

struct HfModelDir {
  std::string dir;
  std::string model_type;  // config.json model_type
  ModelConfig config;
  bool tie_word_embeddings = false;
  bool multimodal_gemma3 = false;  // model_type gemma3: the text model of a Gemma 3 4B+ checkpoint
  std::optional<Llama3RopeScaling> llama3_rope;
  std::optional<LongRopeFactors> longrope;
  std::optional<int32_t> bos_token_id;   // config.json
  std::vector<int32_t> eos_token_ids;    // config.json (int or list)
  std::string tokenizer_json;            // path, "" when absent
  std::string tokenizer_config_json;     // path, "" when absent
  std::string chat_template;             // chat_template.jinja, else tokenizer_config.json; "" if none
  GenerationDefaults generation;

  // Throws pagoda::Error (see contract).
  static HfModelDir open(const std::string& dir);
};

// True when `path` is a directory (the caller then treats it as a HF model directory).
bool is_model_directory(const std::string& path);

// The directory's weights under GGUF names; see the contract. Throws pagoda::Error.
std::shared_ptr<const WeightSource> load_hf_weights(const HfModelDir& dir);

}  // namespace pagoda
