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
#include <functional>
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
  // Says that `t` (one of tensors()) will not be read again for now (its bytes
  // were copied): a source over a read-only file mapping drops the tensor's
  // pages from the resident set (a later read still sees the same bytes,
  // faulted back in); other sources keep them. Returns the bytes dropped.
  virtual size_t drop_resident(const gguf::TensorInfo& t) const {
    (void)t;
    return 0;
  }
  // Says that `t` will never be read through this source again. Requires: the
  // caller holds the only reference to the source (nothing else can read it) and
  // has copied t's bytes. A source that owns t's bytes frees them (t.data becomes
  // nullptr); others drop_resident(t). Returns the bytes freed or dropped.
  virtual size_t release(const gguf::TensorInfo& t) const { return drop_resident(t); }
};

// The tensors of a GGUF file (views into its mapping, which the source keeps alive).
std::shared_ptr<const WeightSource> gguf_weight_source(std::shared_ptr<const gguf::GgufFile> file);

// Mixtral GGUFs written before llama.cpp stacked the experts (mid-2024) hold each expert as
// its own 2-D tensor, `blk.N.ffn_{gate,up,down}.E.weight`. When `src` has those and not the
// 3-D `blk.N.ffn_*_exps.weight`, returns a source where the experts of each layer are
// stacked (expert 0 first) into the 3-D tensors the model reads, the file's pages of the
// copied experts dropped; otherwise `src` itself. Throws pagoda::Error when some experts of
// a layer are missing or differ in type or shape.
std::shared_ptr<const WeightSource> stack_legacy_experts(std::shared_ptr<const WeightSource> src, int64_t n_layers,
                                                         int64_t n_expert);

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
  // `drop`, when given, is what drop_resident() of this tensor runs (e.g. a file
  // mapping's drop_resident for the viewed bytes) and returns the bytes dropped.
  // Requires: a unique name; dims in ggml order, first a multiple of the type's block.
  void add_view(const std::string& name, GgmlType type, std::vector<int64_t> dims, const uint8_t* data,
                std::function<size_t()> drop = {});
  // Adds `t` of `from` as a view under its own name, type and dims; drop_resident()
  // of it is passed on to `from`. Requires: `from` outlives this source
  // (keep_alive it); a unique name.
  void add_view_of(const WeightSource& from, const gguf::TensorInfo& t);
  // Runs the view's `drop` (add_view_of: passed on to its source); owned bytes and
  // views without one stay.
  size_t drop_resident(const gguf::TensorInfo& t) const override;
  // Frees an owned tensor's bytes (requantize()'s copies once Model::load repacked
  // them: else --quantize held the quantized bytes twice); views: drop_resident.
  size_t release(const gguf::TensorInfo& t) const override;
  // Adds a tensor whose bytes the source owns. Requires: as add_view, and
  // bytes.size() == the byte size of dims.
  void add_owned(const std::string& name, GgmlType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
  // Keeps an object (a mapping, another source) alive as long as this source.
  void keep_alive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

 private:
  std::string path_;
  // mutable: release() frees owned bytes and nulls their data (its caller is the only user).
  mutable std::vector<gguf::TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::function<size_t()>, std::less<>> drops_;  // name -> add_view's `drop`
  mutable std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_;  // stable addresses
  std::map<std::string, size_t, std::less<>> owned_index_;               // name -> owned_ index
  std::vector<std::shared_ptr<const void>> owners_;
};

// The weight matrices of `src` (2-D tensors named *.weight, and 3-D stacked
// experts, except the MoE router ffn_gate_inp) re-encoded as `type`; every other tensor is viewed unchanged. A matrix whose
// row length is not a multiple of the type's block keeps F16 (what llama.cpp's
// quantizer falls back to) — or its own type when that is already F32/F16/BF16.
// Single-threaded reference quantizer: ~1-3 s per GB of F32 for q8_0/q4_0.
std::shared_ptr<const WeightSource> requantize(std::shared_ptr<const WeightSource> src, GgmlType type);

// "q8_0" / "q4_0" / "q4_k" / "f32" / ... (every type synth writes) -> type; throws pagoda::Error
// naming `what` (e.g. "--quantize") for anything else.
GgmlType parse_weight_type(const std::string& name, const std::string& what);

}  // namespace pagoda
