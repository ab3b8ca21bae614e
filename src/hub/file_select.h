// Which files of a repo make "the model": a pure function of the repo's file list and the
// ModelRef, so the online (Hub listing) and offline (snapshot listing) paths choose alike.
// Internal to src/hub; any thread.
//
// Rules:
// - `ref.file`: exactly that path (error listing the repo's GGUF files when absent).
// - GGUF repo (any *.gguf outside "mmproj" projector files): a file set is one GGUF, or every
//   part of a split GGUF ("NAME-00001-of-00003.gguf", all N parts must be listed).
//   * `ref.quant`: the sets whose path contains the tag case-insensitively, where a set whose
//     tag appears as a whole token (bounded by start/end, '/', '.', '-', or '_' only before)
//     beats a substring match ("Q4_K" picks "Q4_K.gguf" over "Q4_K_M.gguf"); none -> error
//     listing the quants that exist; several -> error listing them.
//   * no tag: Q4_K_M (llama-server's default through the Hub), else the first of Q4_K_S, Q4_0,
//     Q5_K_M, Q8_0, else the first set in name order.
// - safetensors repo (config.json plus model.safetensors or model.safetensors.index.json):
//   config.json, generation_config.json, the tokenizer files and chat template that exist,
//   plus model.safetensors or the index (its shards come from shards_from_index()).
// - The vision projector of a GGUF model (select_mmproj): see there.
#pragma once

#include <string>
#include <vector>

#include "hub/hub.h"

namespace pagoda::hub {

struct FileSelection {
  std::vector<std::string> files;   // to fetch, in order
  std::string model_file;           // GGUF: the (first) file; "" for a safetensors repo
  int gguf_parts = 0;               // 0 for safetensors
  std::string safetensors_index;    // the index whose weight_map names more files, or ""
  std::string mmproj_file;          // the vision projector among `files` (pull() sets it), or ""
};

// Throws Error (one line, naming the repo) when nothing fits.
FileSelection select_files(const std::string& repo_id, const std::vector<std::string>& repo_files,
                           const ModelRef& ref);

// The repo's vision projector for the GGUF `model_file` ("" when there is none): a *.gguf
// whose file name contains "mmproj" (case-insensitively, not a split part), in the model's
// folder or a folder above it, the deepest such folder first (llama.cpp's sibling rule, so a
// repo with one folder per quant pairs each model with its own projector). Among those:
// the one whose name has the model's quant label (quant of `model_file`, e.g. Q4_K_M) as a
// whole token, else F16, else BF16, else F32 (whole tokens), else the first in name order.
std::string select_mmproj(const std::vector<std::string>& repo_files, const std::string& model_file);

// The distinct shard files the index's weight_map names (sorted), as repo paths next to the
// index. Throws Error for malformed JSON or paths escaping the repo.
std::vector<std::string> shards_from_index(const std::string& index_text, const std::string& index_path);

// The quant labels of the GGUF files ("Q4_K_M", "Q8_0", "F16", ...), sorted and distinct;
// a file without a recognisable label contributes its name.
std::vector<std::string> quant_labels(const std::vector<std::string>& repo_files);

}  // namespace pagoda::hub
