// Safetensors reader (over mmap) and writer — the weight format of Hugging Face
// model directories.
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON (an
// object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus
// an optional "__metadata__" object of strings), then the data section; offsets
// are relative to its start. Shapes are row-major (shape.back() is contiguous),
// i.e. reversed against ggml's dims.
//
// Contract:
// - SafetensorsFile::open() / parse() validate everything before returning: the
//   header length inside the file (and <= 100 MB, the format's cap), the header
//   is a JSON object, every entry has a known dtype, a shape of non-negative
//   integers whose byte size (without overflow) equals end - begin, offsets
//   inside the data section, and no two tensors' byte ranges overlap. Any
//   violation throws pagoda::Error with one line naming the file, the tensor
//   and what is wrong. Malformed input never crashes (tests fuzz the parser).
// - A SafetensorsFile owns its mapping (open) or views caller bytes (parse,
//   which must outlive it); TensorEntry::data points into them. Non-copyable,
//   movable, read-only after construction: any thread may read it.
// - Dtypes F32, F16 and BF16 map to the ggml types pagoda computes with
//   (TensorEntry::type); the other known dtypes load (type = nullopt) so that
//   the model loader can name them in its error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mapped_file.h"
#include "tensor/types.h"

namespace pagoda::safetensors {

// Header cap of the format (the reference implementation rejects larger ones).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct TensorEntry {
  std::string name;
  std::string dtype;               // as written: "F32", "BF16", "I64", ...
  std::optional<GgmlType> type;    // F32 / F16 / BF16; nullopt for other dtypes
  std::vector<int64_t> shape;      // row-major: shape.back() is the contiguous dimension
  uint64_t begin = 0;              // byte range in the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;   // into the mapping

  uint64_t n_bytes() const { return end - begin; }
  int64_t n_elements() const;
  std::string shape_string() const;  // "[4096, 11008]" (row-major, as in the header)
};

// Bytes per element of a dtype name, or 0 when the name is not a safetensors dtype.
size_t dtype_size(std::string_view dtype);
// "F32" / "F16" / "BF16" for those types. Requires: one of them.
const char* dtype_name(GgmlType type);

class SafetensorsFile {
 public:
  // Throws pagoda::Error (see contract).
  static SafetensorsFile open(const std::string& path);
  // Validates `bytes` as a whole safetensors file; `path` only names it in errors.
  // The bytes must outlive the returned object.
  static SafetensorsFile parse(const uint8_t* bytes, size_t size, const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In data-offset order.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Drops the whole pages of `e` (one of tensors()) from the process's resident set;
  // a later read faults them back in unchanged (MappedFile::drop_resident). Nothing
  // for parse()d bytes, which this object does not map. Returns the bytes dropped.
  size_t drop_resident(const TensorEntry& e) const {
    return file_.data() ? file_.drop_resident(e.data, static_cast<size_t>(e.n_bytes())) : 0;
  }

 private:
  SafetensorsFile() = default;
  void parse_header(const uint8_t* bytes, size_t size);

  std::string path_;
  MappedFile file_;  // empty for parse()
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file: tensors in insertion order, header padded with
// spaces to a multiple of 8 bytes (as the reference writer does). Data is
// copied into the writer.
class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void set_metadata(const std::string& key, const std::string& value);
  // Requires: unique name; bytes.size() == product(shape) * dtype_size(dtype), a known dtype.
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           std::vector<uint8_t> bytes);
  // Convenience: f32 values [product(shape)] stored as `type` (F32, F16 or BF16, rounded to nearest even).
  void add_f32(const std::string& name, GgmlType type, const std::vector<int64_t>& shape, const float* values);
  std::vector<uint8_t> serialize() const;
  // Throws pagoda::Error when the file cannot be written.
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, std::string> metadata_;
  std::vector<Pending> tensors_;
};

}  // namespace pagoda::safetensors
