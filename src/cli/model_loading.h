// Shared by the subcommands: open a model — a GGUF file or a Hugging Face
// directory (config.json + safetensors + tokenizer.json: model/hf_model.h) —
// load its tokenizer and weights, with a progress line on a terminal.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "gguf/gguf.h"
#include "model/hf_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
class VisionEncoder;
}

namespace pagoda::cli {

struct LoadedModel {
  std::shared_ptr<const gguf::GgufFile> file;  // null for a Hugging Face directory
  std::unique_ptr<Tokenizer> tokenizer;  // loaded only when required
  std::unique_ptr<Model> model;
  // tokenizer.chat_template for GGUF; chat_template.jinja or tokenizer_config.json's
  // chat_template for a directory ("" when the model has none).
  std::string chat_template;
  // generation_config.json of a directory (all unset for GGUF). Its eos_token_ids
  // are extra end-of-generation tokens on top of tokenizer->is_eog().
  GenerationDefaults generation;
  double load_seconds = 0;
};

struct LoadOptions {
  bool require_tokenizer = false;
  // Re-encode the weight matrices at load time (q8_0, q4_0, q4_k, f16, ...); nullopt keeps them.
  std::optional<GgmlType> quantize;
};

// "hf://OWNER/REPO[:QUANT | /FILE]" -> the local path of that model in the Hugging Face cache
// (downloaded first when missing, hub/hub.h; environment as huggingface_hub reads it);
// anything else is returned unchanged. Throws pagoda::Error. A split GGUF resolves to its
// first part, which GgufFile::open loads with the others.
std::string resolve_model_path(const std::string& path);

struct ResolvedModel {
  std::string path;    // as resolve_model_path()
  std::string mmproj;  // hf://: the repo's vision projector in the cache; "" none (or not asked for)
};
// resolve_model_path(), and for hf:// with `with_mmproj` the repo's vision projector too
// (hub::PullOptions::mmproj): serve and generate use it unless --mmproj or --no-mmproj.
ResolvedModel resolve_model(const std::string& path, bool with_mmproj);

// Throws pagoda::Error. `path` may be hf://... (resolve_model_path). The tokenizer is loaded only when `require_tokenizer`
// (logits and bench-model never need one).
LoadedModel load_model(const std::string& path, bool require_tokenizer);
LoadedModel load_model(const std::string& path, const LoadOptions& options);
// A speculative-decoding draft model (-md) for `target`: loaded with its tokenizer when it
// has one, and refused (pagoda::Error naming both) unless its vocabulary is the target's:
// the same size and, where both carry a tokenizer, the same text for every token id.
LoadedModel load_draft_model(const std::string& path, const LoadedModel& target);

// --mmproj: the vision projector, checked against the model it feeds (the same embedding
// width, a Gemma 3 model for a gemma3 projector, an image's tokens within one batch of
// max_batch_tokens: they attend both ways). Throws pagoda::Error naming the mismatch.
std::unique_ptr<VisionEncoder> load_vision_projector(const std::string& path, const Model& model,
                                                     int64_t max_batch_tokens);

// Registers `--quantize TYPE` on a command; parse the value with parse_quantize().
void add_quantize_option(CLI::App& app, std::string& value);
// "" -> nullopt; "q8_0" / "q4_0" / "q4_k" (and f32 / f16 / bf16) -> the type;
// anything else throws pagoda::Error naming --quantize.
std::optional<GgmlType> parse_quantize(const std::string& value);

// Parses "1,2,3" or "1 2 3" into ids; throws pagoda::Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& text);

double now_seconds();

// What tells one set of weights from another for the prefix cache's disk tier (its
// blocks outlive the process): for the model file, or each .gguf / .safetensors /
// config.json file of a directory, its name, size, mtime and a SHA-256 of its first and
// last MiB (the GGUF header and tensor directory, and weights). Reads at most 2 MiB
// per file. Rejected: hashing every byte (~1 s per GB at start-up).
std::string weights_fingerprint(const std::string& path);
// The same over these files, in this order: every part of a split GGUF
// (GgufFile::part_paths), so a rewritten later part misses too.
std::string weights_fingerprint(const std::vector<std::string>& files);

}  // namespace pagoda::cli
