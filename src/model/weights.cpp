#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "common/error.h"

namespace pagoda {

namespace {

class GgufWeightSource final : public WeightSource {
 public:
  explicit GgufWeightSource(std::shared_ptr<const gguf::GgufFile> f) : f_(std::move(f)) {}
  const std::string& path() const override { return f_->path(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return f_->tensors(); }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override { return f_->find_tensor(name); }
  size_t drop_resident(const gguf::TensorInfo& t) const override { return f_->drop_resident(t); }

 private:
  std::shared_ptr<const gguf::GgufFile> f_;
};

uint64_t tensor_bytes(GgmlType type, const std::vector<int64_t>& dims) {
  uint64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= static_cast<uint64_t>(dims[i]);
  return rows * row_bytes(type, dims.empty() ? 0 : dims[0]);
}

}  // namespace

std::shared_ptr<const WeightSource> gguf_weight_source(std::shared_ptr<const gguf::GgufFile> file) {
  return std::make_shared<GgufWeightSource>(std::move(file));
}

const gguf::TensorInfo* OwnedWeightSource::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void OwnedWeightSource::add_view(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                                 const uint8_t* data, std::function<size_t()> drop) {
  PAGODA_CHECK(!index_.count(name), "duplicate tensor " + name);
  PAGODA_CHECK(!dims.empty() && dims[0] % traits(type).block_size == 0, "bad dims for tensor " + name);
  gguf::TensorInfo t;
  t.name = name;
  t.type_id = static_cast<uint32_t>(type);
  t.type_known = true;
  t.type = type;
  t.n_bytes = tensor_bytes(type, dims);
  t.dims = std::move(dims);
  t.data = data;
  index_[name] = tensors_.size();
  tensors_.push_back(std::move(t));
  if (drop) drops_[name] = std::move(drop);
}

void OwnedWeightSource::add_view_of(const WeightSource& from, const gguf::TensorInfo& t) {
  add_view(t.name, t.type, t.dims, t.data, [&from, &t] { return from.drop_resident(t); });
}

size_t OwnedWeightSource::drop_resident(const gguf::TensorInfo& t) const {
  auto it = drops_.find(t.name);
  return it == drops_.end() ? 0 : it->second();
}

void OwnedWeightSource::add_owned(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                                  std::vector<uint8_t> bytes) {
  PAGODA_CHECK(bytes.size() == tensor_bytes(type, dims), "byte size mismatch for tensor " + name);
  owned_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
  add_view(name, type, std::move(dims), owned_.back()->data());
  owned_index_[name] = owned_.size() - 1;
}

size_t OwnedWeightSource::release(const gguf::TensorInfo& t) const {
  auto it = owned_index_.find(t.name);
  if (it == owned_index_.end()) return drop_resident(t);
  std::unique_ptr<std::vector<uint8_t>>& bytes = owned_[it->second];
  if (!bytes) return 0;
  const size_t n = bytes->size();
  bytes.reset();
  tensors_[index_.find(t.name)->second].data = nullptr;
  return n;
}

std::shared_ptr<const WeightSource> requantize(std::shared_ptr<const WeightSource> src, GgmlType type) {
  auto out = std::make_shared<OwnedWeightSource>(src->path());
  const int64_t blk = traits(type).block_size;
  std::vector<float> row;
  for (const gguf::TensorInfo& t : src->tensors()) {
    // Matrices: 2-D weights and the 3-D stacked experts (n_expert matrices of
    // the same rows, quantized row by row alike). The router (ffn_gate_inp)
    // stays as it is, as llama.cpp's quantizer leaves it: a discrete top-k
    // choice that quantization noise would flip.
    const bool weight = t.type_known && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    const bool router = t.name.find("ffn_gate_inp.weight") != std::string::npos;
    const bool matrix = weight && !router && (t.dims.size() == 2 || t.dims.size() == 3);
    GgmlType target = type;
    if (matrix && t.dims[0] % blk != 0) {
      const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
      target = plain ? t.type : GgmlType::F16;
    }
    if (!matrix || target == t.type) {
      out->add_view_of(*src, t);
      continue;
    }
    const int64_t n_cols = t.dims[0], n_rows = t.dims[1] * (t.dims.size() == 3 ? t.dims[2] : 1);
    const size_t in_row = row_bytes(t.type, n_cols), out_row = row_bytes(target, n_cols);
    std::vector<uint8_t> bytes(out_row * static_cast<size_t>(n_rows));
    row.resize(static_cast<size_t>(n_cols));
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(t.type, t.data + in_row * r, row.data(), n_cols);
      quantize_row(target, row.data(), bytes.data() + out_row * r, n_cols);
    }
    out->add_owned(t.name, target, t.dims, std::move(bytes));
    // The source bytes are not read again: a GGUF's pages leave the resident set
    // (else a --quantize of a Q8_0 file kept the whole file resident beside the copy).
    src->drop_resident(t);
  }
  out->keep_alive(std::move(src));
  return out;
}

// Every type pagoda has a quantizer and a matmul kernel for (the same list `synth --type`
// takes); the K-quants and IQ4_XS need rows of 256 values, and a matrix whose rows are not
// a multiple of the type's block keeps its type (or becomes F16, see requantize).
std::shared_ptr<const WeightSource> stack_legacy_experts(std::shared_ptr<const WeightSource> src, int64_t n_layers,
                                                         int64_t n_expert) {
  if (n_expert <= 0 || src->find_tensor("blk.0.ffn_gate_exps.weight") || !src->find_tensor("blk.0.ffn_gate.0.weight"))
    return src;
  auto out = std::make_shared<OwnedWeightSource>(src->path());
  auto is_expert = [](const std::string& name) {
    // blk.N.ffn_{gate,up,down}.E.weight
    for (const char* part : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
      const size_t at = name.find(part);
      if (at == std::string::npos) continue;
      const size_t e = at + std::strlen(part);
      size_t d = e;
      while (d < name.size() && name[d] >= '0' && name[d] <= '9') ++d;
      if (d > e && name.compare(d, std::string::npos, ".weight") == 0) return true;
    }
    return false;
  };
  for (const gguf::TensorInfo& t : src->tensors())
    if (!is_expert(t.name)) out->add_view_of(*src, t);
  for (int64_t i = 0; i < n_layers; ++i)
    for (const char* kind : {"gate", "up", "down"}) {
      const std::string stem = "blk." + std::to_string(i) + ".ffn_" + kind + ".";
      const gguf::TensorInfo* first = src->find_tensor(stem + "0.weight");
      if (!first) throw Error(src->path() + ": " + stem + "0.weight missing (per-expert Mixtral layout)");
      PAGODA_CHECK(first->type_known && first->dims.size() == 2, src->path() + ": " + stem + "0.weight is not a matrix");
      std::vector<uint8_t> bytes;
      bytes.reserve(static_cast<size_t>(first->n_bytes) * static_cast<size_t>(n_expert));
      for (int64_t e = 0; e < n_expert; ++e) {
        const std::string name = stem + std::to_string(e) + ".weight";
        const gguf::TensorInfo* t = src->find_tensor(name);
        if (!t || !t->type_known || t->type != first->type || t->dims != first->dims)
          throw Error(src->path() + ": " + name + (t ? " differs in type or shape from expert 0" : " is missing") +
                      " (per-expert Mixtral layout, " + std::to_string(n_expert) + " experts)");
        bytes.insert(bytes.end(), t->data, t->data + t->n_bytes);
        src->drop_resident(*t);
      }
      out->add_owned("blk." + std::to_string(i) + ".ffn_" + kind + "_exps.weight", first->type,
                     {first->dims[0], first->dims[1], n_expert}, std::move(bytes));
    }
  out->keep_alive(std::move(src));
  return out;
}

GgmlType parse_weight_type(const std::string& name, const std::string& what) {
  static const GgmlType kSupported[] = {
      GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,   GgmlType::Q4_1,
      GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
      GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
  auto t = parse_type_name(name);
  if (t && std::find(std::begin(kSupported), std::end(kSupported), *t) != std::end(kSupported)) return *t;
  std::string list;
  for (GgmlType s : kSupported) list += (list.empty() ? "" : ", ") + std::string(type_name(s));
  throw Error(what + ": unsupported type '" + name + "' (supported: " + list + ")");
}

}  // namespace pagoda
