// The HF -> GGUF converter (`pagoda convert`): a Hugging Face model directory
// (model/hf_model.h) written as the GGUF file llama.cpp's convert_hf_to_gguf.py writes
// for it, and the tokenizer half of that for synth --vocab-from (tools/synth.h).
// It lives in tools/, above model/ and tokenizer/: it reads tokenizer.json with the
// tokenizer's own parsers (tokenizer/hf_json.h, the pre-tokenizer table), which model/
// needs for nothing else. Contract: see each function; every failure throws pagoda::Error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gguf/gguf.h"
#include "model/hf_model.h"
#include "tensor/types.h"

namespace pagoda {

// Writes `out_path` as a GGUF v3 file llama.cpp can load: architecture metadata,
// the tokenizer (tokenizer.ggml.*, from tokenizer.json) and chat template, and
// the weights, matrices as `type` (nullopt: as stored, F32 / F16 / BF16) and 1-D
// tensors as F32. Throws pagoda::Error.
void convert_hf_to_gguf(const HfModelDir& dir, const std::string& out_path, std::optional<GgmlType> type);

// The tokenizer.ggml.* keys convert writes for a BPE tokenizer.json (and its
// tokenizer_config.json, "" when absent): at least min_vocab tokens (padding past the
// file's). synth --vocab-from uses it for tokenizers that come without a model (the
// o200k_harmony tokenizer.json of gpt-oss). gemma4: a SentencePiece-style BPE (not a
// byte-level one) is written as llama.cpp's converter writes Gemma 4's, tokenizer.ggml.model
// "gemma4" with its merges, instead of "llama" with scores. Throws pagoda::Error.
void write_hf_tokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                        int64_t min_vocab, gguf::GgufWriter& w, bool gemma4 = false);

}  // namespace pagoda
