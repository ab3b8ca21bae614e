// GGUF v2/v3 reader (over mmap) and writer.
//
// Contract:
// - GgufFile::open() maps the file and validates everything before returning:
//   magic, version (2 or 3), counts and string lengths capped against the file
//   size, metadata value types (nested arrays included), tensor names unique,
//   dims (1..4, each >= 1, element count without overflow, first dim a multiple
//   of the type's block size), tensor types known, data offsets aligned to
//   `general.alignment` (default 32, must be a power of two), every tensor's
//   byte range inside the file and no two ranges overlapping. Any violation
//   throws pagoda::Error with one line naming the file and what is wrong (key,
//   tensor, byte offset). It never allocates more than a small multiple of the
//   file size.
// - A GgufFile owns its mapping; TensorInfo::data points into it and stays
//   valid while the GgufFile lives. Non-copyable, movable. Read-only after
//   open(), so any thread may read it concurrently.
// - Unknown-but-valid tensor types (e.g. IQ formats) are accepted by the
//   reader (type_known=false) so `pagoda inspect` can list them; the model
//   loader rejects them with the list of supported types.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/mapped_file.h"
#include "tensor/types.h"

namespace pagoda::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;
// An array value: its element type and elements (elements are Values of that type;
// nested arrays allowed).
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::UINT8;
  // UINT*/BOOL -> uint64_t; INT* -> int64_t; FLOAT* -> double; STRING -> std::string;
  // ARRAY -> shared_ptr<Array>.
  std::variant<uint64_t, int64_t, double, std::string, std::shared_ptr<Array>> v;

  bool is_integer() const;
  bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  bool is_string() const { return type == ValueType::STRING; }
  bool is_array() const { return type == ValueType::ARRAY; }
  // Conversions; each returns nullopt if the value is not of a compatible kind
  // (integers convert to other integers if in range, and to double).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  std::optional<double> as_double() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const Array* as_array() const;
  // Human-readable, truncated rendering for `pagoda inspect` (arrays show the
  // first few items and the count).
  std::string to_display_string(size_t max_items = 8) const;

  static Value u32(uint32_t x);
  static Value i32(int32_t x);
  static Value u64(uint64_t x);
  static Value f32(float x);
  static Value boolean(bool x);
  static Value str(std::string s);
  static Value array(ValueType elem_type, std::vector<Value> items);
  static Value str_array(const std::vector<std::string>& items);
  static Value f32_array(const std::vector<float>& items);
  static Value i32_array(const std::vector<int32_t>& items);
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  uint32_t type_id = 0;       // raw ggml type id
  bool type_known = false;    // type_traits(type_id) exists
  GgmlType type = GgmlType::F32;  // valid when type_known
  uint64_t offset = 0;        // relative to the data section start
  uint64_t n_bytes = 0;       // 0 when !type_known (size unknown)
  const uint8_t* data = nullptr;  // into the mapping; nullptr when !type_known

  int64_t n_elements() const;
  int64_t n_rows() const { return dims.empty() ? 0 : n_elements() / dims[0]; }
  std::string shape_string() const;  // e.g. "[2048, 32000]"
};

class GgufFile {
 public:
  // Throws pagoda::Error on any problem (see contract above). A split GGUF (gguf-split:
  // `split.count` > 1, parts named PREFIX-0000K-of-0000N.gguf beside each other) is opened
  // by its first part: the other parts are mapped too and their tensors join this file's
  // (metadata comes from the first part, as gguf-split writes it); a missing or foreign
  // part, a later part opened first, a tensor in two parts or a wrong split.tensors.count
  // is an error naming the file.
  static GgufFile open(const std::string& path);
  // The parts of a split GGUF after the first (empty for a single file).
  size_t n_split_parts() const { return parts_.size() + 1; }
  // Every file it maps: path(), then a split GGUF's other parts in order.
  std::vector<std::string> part_paths() const;

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return file_.size(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: nullopt when absent; throw pagoda::Error naming the file and
  // key when present with an incompatible type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Arrays: nullptr when absent; throw if present and not an array.
  const Array* get_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Drops the whole pages of tensor `t` (one of this file's tensors) from the
  // process's resident set; a later read faults them back in unchanged (see
  // MappedFile::drop_resident). For tensors a caller has copied (repacked) and
  // no longer reads. Returns the bytes dropped.
  size_t drop_resident(const TensorInfo& t) const;

 private:
  GgufFile() = default;
  // One file, split keys not followed.
  static GgufFile open_one(const std::string& path);
  void join_split_parts();
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<GgufFile> parts_;  // a split GGUF's parts 2..N, whose mappings its tensors point into
};

// Writes a GGUF v3 file. Metadata keeps insertion order (setting an existing
// key replaces its value in place). Tensor data is copied into the writer.
// `general.alignment` is honoured when set as UINT32.
class GgufWriter {
 public:
  GgufWriter() = default;
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  void set(const std::string& key, Value value);
  // Requires: bytes.size() == row_bytes(type, dims[0]) * (product of the other dims);
  // unique name. dims in ggml order.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                  std::vector<uint8_t> bytes);
  // Convenience: quantizes f32 data [rows of dims[0]] to `type` with quantize_row.
  void add_tensor_f32(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                      const float* data);
  // Throws pagoda::Error when the file cannot be written.
  void write(const std::string& path) const;
  // The serialized bytes (what write() stores).
  std::vector<uint8_t> serialize() const;
  // The keys set so far, in order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace pagoda::gguf
