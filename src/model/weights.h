// WeightSource — the named weight tensors a Model is built from, in GGUF naming
// ("blk.0.attn_q.weight") and GGUF layout (ggml dims, rows of row_bytes), whatever
// file format they came from.
//
// Contract:
// - A source owns (or keeps alive) every byte its TensorInfo::data points to: a
//   GGUF mapping, safetensors mappings, or buffers it owns (permuted / quantized
//   copies). Immutable after construction, so any thread may read it; Model
//   keeps it alive through a shared_ptr. Non-copyable.
// - Every tensor it lists has type_known = true and n_bytes matching its dims.
// Rejected alternative: an in-memory gguf::GgufFile over the safetensors
// mappings — GgufFile is a validated view of one mapped file and would need a
// second, unvalidated construction path in the gguf module.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace pagoda {

class WeightSource {
 public:
  WeightSource() = default;
  virtual ~WeightSource() = default;
  WeightSource(const WeightSource&) = delete;
  WeightSource& operator=(const WeightSource&) = delete;

  // Names the source in errors: a GGUF path or a model directory.
  virtual const std::string& path() const = 0;
  virtual const std::vector<gguf::TensorInfo>& tensors() const = 0;
  virtual const gguf::TensorInfo* find_tensor(std::string_view name) const = 0;
};

// The tensors of a GGUF file (views into its mapping, which the source keeps alive).
std::shared_ptr<const WeightSource> gguf_weight_source(std::shared_ptr<const gguf::GgufFile> file);

// A source assembled tensor by tensor: views into storage that `keep_alive`
// objects own, or bytes the source itself owns. Used by the Hugging Face loader
// and by requantize().
class OwnedWeightSource final : public WeightSource {
 public:
  explicit OwnedWeightSource(std::string path) : path_(std::move(path)) {}

  const std::string& path() const override { return path_; }
  const std::vector<gguf::TensorInfo>& tensors() const override { return tensors_; }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override;

  // Adds a view; `data` must stay valid while the source lives (see keep_alive).
  // Requires: a unique name; dims in ggml order, first a multiple of the type's block.
  void add_view(const std::string& name, GgmlType type, std::vector<int64_t> dims, const uint8_t* data);
  // Adds a tensor whose bytes the source owns. Requires: as add_view, and
  // bytes.size() == the byte size of dims.
  void add_owned(const std::string& name, GgmlType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
  // Keeps an object (a mapping, another source) alive as long as this source.
  void keep_alive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

 private:
  std::string path_;
  std::vector<gguf::TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_;  // stable addresses
  std::vector<std::shared_ptr<const void>> owners_;
};

// The weight matrices of `src` (2-D tensors named *.weight, and 3-D stacked
// experts, except the MoE router ffn_gate_inp) re-encoded as `type`; every other tensor is viewed unchanged. A matrix whose
// row length is not a multiple of the type's block keeps F16 (what llama.cpp's
// quantizer falls back to) — or its own type when that is already F32/F16/BF16.
// Single-threaded reference quantizer: ~1-3 s per GB of F32 for q8_0/q4_0.
std::shared_ptr<const WeightSource> requantize(std::shared_ptr<const WeightSource> src, GgmlType type);

// "q8_0" / "q4_0" / "q4_k" / "f32" / "f16" / "bf16" -> type; throws pagoda::Error
// naming `what` (e.g. "--quantize") for anything else.
GgmlType parse_weight_type(const std::string& name, const std::string& what);

}  // namespace pagoda
