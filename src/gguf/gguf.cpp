// GGUF reader. Parses and validates the whole header, metadata and tensor
// directory of a mapped file before a GgufFile is handed out; after that
// nothing is checked again. File layout (all little-endian; spec: ggml
// docs/gguf.md):
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv      x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | n_dims x u64 dim | u32 ggml_type | u64 offset }
//   zero padding up to a multiple of general.alignment   <- data section starts here
//   tensor data at the (aligned) offsets, relative to the data section start
//
//   string = u64 byte length | bytes (no terminator)
//   array  = u32 elem_type | u64 count | count x value (no per-item type)
//
// v2 and v3 share this layout (v3 only added big-endian files, which we
// reject); v1 used u32 counts and lengths and is rejected.
//
// Memory: every count and length is checked against the bytes left in the
// file before anything is reserved, and reservations are capped, so what we
// allocate grows only with what was actually parsed: at most about
// sizeof(Value) = 48 bytes per metadata byte (the worst case, a uint8 array),
// about 4x for a real vocabulary.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <limits>

#include "common/error.h"
#include "gguf/gguf.h"

namespace pagoda::gguf {

static_assert(std::endian::native == std::endian::little,
              "the reader copies little-endian fields straight from the file");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
// Arrays of arrays deeper than this are rejected: real files nest at most one
// level (merges are strings), and the parser recurses once per level.
constexpr int kMaxArrayDepth = 8;
constexpr int kMaxDims = 4;
// Upper bound on one up-front reserve(); beyond it vectors grow as items
// actually parse, so a large claimed count costs nothing until proven.
constexpr uint64_t kMaxReserve = uint64_t{1} << 16;
// Smallest possible encodings, used to cap counts by the bytes left:
// key (u64 length + >= 1 byte) + u32 type + >= 1 byte value;
// name (u64 + >= 1) + u32 n_dims + >= 1 u64 dim + u32 type + u64 offset.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

bool valid_value_type(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::FLOAT64); }

uint64_t min_encoded_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
    case ValueType::STRING:  // the u64 length
      return 8;
    case ValueType::ARRAY:  // u32 elem_type + u64 count
      return 12;
  }
  return 1;
}

// A name from the file, quoted for a one-line message: non-printable bytes
// escaped, long names cut.
std::string quoted(std::string_view s) {
  constexpr size_t kMaxShown = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%s%02x", i ? " " : "", p[i]);
    out += buf;
  }
  return out;
}

// A bounds-checked cursor over the mapping. Every failure names the file, the
// item being parsed (context) and, where given, the byte offset.
class Cursor {
 public:
  explicit Cursor(const MappedFile& file) : file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return file_.size() - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file_.path() + ": " + (context_.empty() ? "" : context_ + ": ") + what);
  }
  [[noreturn]] void fail_at(uint64_t offset, const std::string& what) const {
    fail(what + " (at byte offset " + std::to_string(offset) + ")");
  }

  template <class T>
  T read(const char* what) {
    if (remaining() < sizeof(T))
      fail_at(pos_, std::string("file truncated: ") + what + " needs " + std::to_string(sizeof(T)) +
                        " bytes, " + std::to_string(remaining()) + " left");
    T x;
    std::memcpy(&x, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  std::string read_string(const char* what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail_at(at, std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                      std::to_string(remaining()) + " bytes left in the file");
    std::string s(reinterpret_cast<const char*>(file_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  Value read_value(ValueType type, int depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::UINT8: v.v = uint64_t{read<uint8_t>("uint8 value")}; break;
      case ValueType::INT8: v.v = int64_t{read<int8_t>("int8 value")}; break;
      case ValueType::UINT16: v.v = uint64_t{read<uint16_t>("uint16 value")}; break;
      case ValueType::INT16: v.v = int64_t{read<int16_t>("int16 value")}; break;
      case ValueType::UINT32: v.v = uint64_t{read<uint32_t>("uint32 value")}; break;
      case ValueType::INT32: v.v = int64_t{read<int32_t>("int32 value")}; break;
      case ValueType::UINT64: v.v = read<uint64_t>("uint64 value"); break;
      case ValueType::INT64: v.v = read<int64_t>("int64 value"); break;
      case ValueType::FLOAT32: v.v = double{read<float>("float32 value")}; break;
      case ValueType::FLOAT64: v.v = read<double>("float64 value"); break;
      case ValueType::BOOL: {
        uint64_t at = pos_;
        uint8_t b = read<uint8_t>("bool value");
        // The spec calls anything but 0/1 invalid; a stray byte here means the
        // parse has gone off the rails, better said now than three keys later.
        if (b > 1) fail_at(at, "bool value " + std::to_string(b) + " is not 0 or 1");
        v.v = uint64_t{b};
        break;
      }
      case ValueType::STRING: v.v = read_string("string value"); break;
      case ValueType::ARRAY: v.v = read_array(depth); break;
    }
    return v;
  }

 private:
  std::shared_ptr<Array> read_array(int depth) {
    uint64_t at = pos_;
    if (depth >= kMaxArrayDepth)
      fail_at(at, "arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
    uint32_t elem_type = read<uint32_t>("array element type");
    if (!valid_value_type(elem_type))
      fail_at(at, "invalid array element type " + std::to_string(elem_type));
    auto et = static_cast<ValueType>(elem_type);
    uint64_t count = read<uint64_t>("array length");
    if (count > remaining() / min_encoded_bytes(et))
      fail_at(at + 4, "array length " + std::to_string(count) + " of " + value_type_name(et) +
                          " cannot fit in the " + std::to_string(remaining()) +
                          " bytes left in the file");
    auto array = std::make_shared<Array>();
    array->elem_type = et;
    array->items.reserve(std::min(count, kMaxReserve));
    for (uint64_t i = 0; i < count; ++i) array->items.push_back(read_value(et, depth + 1));
    return array;
  }

  const MappedFile& file_;
  uint64_t pos_ = 0;
  std::string context_;
};

}  // namespace

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return dims.empty() ? 0 : n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g = open_one(path);
  g.join_split_parts();
  return g;
}

size_t GgufFile::drop_resident(const TensorInfo& t) const {
  if (!t.data) return 0;
  auto inside = [&](const MappedFile& f) { return t.data >= f.data() && t.data < f.data() + f.size(); };
  if (inside(file_)) return file_.drop_resident(t.data, static_cast<size_t>(t.n_bytes));
  for (const GgufFile& p : parts_)
    if (inside(p.file_)) return p.file_.drop_resident(t.data, static_cast<size_t>(t.n_bytes));
  return 0;
}

std::vector<std::string> GgufFile::part_paths() const {
  std::vector<std::string> out{path()};
  for (const GgufFile& p : parts_) out.push_back(p.path());
  return out;
}

// gguf-split's layout: every part carries split.no (0-based) and split.count, the first also
// split.tensors.count and the model's metadata; part k is PREFIX-%05d-of-%05d.gguf.
void GgufFile::join_split_parts() {
  const std::optional<uint64_t> count = get_uint("split.count");
  if (!count || *count <= 1) return;
  const std::string& p = path();
  const uint64_t no = get_uint("split.no").value_or(0);
  constexpr uint64_t kMaxParts = 9999;
  if (*count > kMaxParts)
    throw Error(p + ": split.count " + std::to_string(*count) + " is more than " + std::to_string(kMaxParts) + " parts");
  // "...-00001-of-00003.gguf": the suffix is 20 characters.
  auto part_name = [&](uint64_t k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(k),
                  static_cast<unsigned long long>(*count));
    return std::string(buf);
  };
  const std::string own = part_name(no + 1);
  if (p.size() < own.size() || p.compare(p.size() - own.size(), own.size(), own) != 0)
    throw Error(p + ": part " + std::to_string(no + 1) + " of a split GGUF of " + std::to_string(*count) +
                " parts, but not named PREFIX" + own + " (gguf-split's naming), so its other parts cannot be found");
  const std::string prefix = p.substr(0, p.size() - own.size());
  if (no != 0)
    throw Error(p + ": part " + std::to_string(no + 1) + " of a split GGUF of " + std::to_string(*count) +
                " parts; open the first part, " + prefix + part_name(1));
  for (uint64_t k = 2; k <= *count; ++k) {
    const std::string path_k = prefix + part_name(k);
    if (::access(path_k.c_str(), F_OK) != 0)
      throw Error(p + ": split GGUF part " + std::to_string(k) + " of " + std::to_string(*count) + " is missing (" +
                  path_k + ")");
    GgufFile part = open_one(path_k);
    if (part.get_uint("split.count") != count || part.get_uint("split.no") != k - 1)
      throw Error(path_k + ": not part " + std::to_string(k) + " of the split GGUF " + p +
                  " (its split.no / split.count say otherwise)");
    for (TensorInfo& t : part.tensors_) {
      if (tensor_index_.count(t.name))
        throw Error(path_k + ": tensor '" + t.name + "' is also in another part of the split GGUF");
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(t);
    }
    parts_.push_back(std::move(part));
  }
  if (const std::optional<uint64_t> n = get_uint("split.tensors.count"); n && *n != tensors_.size())
    throw Error(p + ": split.tensors.count says " + std::to_string(*n) + " tensors, the " + std::to_string(*count) +
                " parts hold " + std::to_string(tensors_.size()));
}

GgufFile GgufFile::open_one(const std::string& path) {
  GgufFile g;
  g.file_ = MappedFile(path);
  Cursor in(g.file_);

  // ---- header ----
  if (g.file_.size() < 4 || std::memcmp(g.file_.data(), "GGUF", 4) != 0) {
    size_t n = std::min<size_t>(4, g.file_.size());
    in.fail("not a GGUF file: starts with bytes [" + hex_bytes(g.file_.data(), n) +
            "], expected \"GGUF\"");
  }
  in.read<uint32_t>("magic");
  uint32_t version = in.read<uint32_t>("version");
  if (version == 1)
    in.fail_at(4, "GGUF version 1 (32-bit counts) is not supported; re-convert the model "
                  "with a current llama.cpp");
  if (version == 0x02000000u || version == 0x03000000u)
    in.fail_at(4, "big-endian GGUF files are not supported");
  if (version != 2 && version != 3)
    in.fail_at(4, "unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)");
  g.version_ = version;
  uint64_t n_tensors = in.read<uint64_t>("tensor count");
  uint64_t n_kv = in.read<uint64_t>("metadata count");
  if (n_tensors > in.remaining() / kMinTensorInfoBytes)
    in.fail_at(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                      std::to_string(in.remaining()) +
                      " bytes after the header (truncated or corrupt file)");
  if (n_kv > in.remaining() / kMinKvBytes)
    in.fail_at(16, "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                       std::to_string(in.remaining()) +
                       " bytes after the header (truncated or corrupt file)");

  // ---- metadata ----
  g.kv_.reserve(std::min(n_kv, kMaxReserve));
  for (uint64_t i = 0; i < n_kv; ++i) {
    in.set_context("metadata entry " + std::to_string(i));
    uint64_t key_at = in.pos();
    std::string key = in.read_string("key");
    if (key.empty()) in.fail_at(key_at, "empty key");
    in.set_context("metadata key " + quoted(key));
    if (g.kv_index_.count(key)) in.fail_at(key_at, "duplicate key");
    uint64_t type_at = in.pos();
    uint32_t type_id = in.read<uint32_t>("value type");
    if (!valid_value_type(type_id))
      in.fail_at(type_at, "invalid value type " + std::to_string(type_id));
    Value value = in.read_value(static_cast<ValueType>(type_id), 0);
    g.kv_index_.emplace(key, g.kv_.size());
    g.kv_.emplace_back(std::move(key), std::move(value));
  }

  if (const Value* a = g.find("general.alignment")) {
    in.set_context("metadata key 'general.alignment'");
    if (a->type != ValueType::UINT32)
      in.fail(std::string("has type ") + value_type_name(a->type) + ", expected uint32");
    uint64_t alignment = a->as_uint().value_or(0);
    if (!std::has_single_bit(alignment))
      in.fail("alignment " + std::to_string(alignment) + " is not a power of two");
    g.alignment_ = alignment;
  } else {
    g.alignment_ = kDefaultAlignment;
  }

  // ---- tensor directory ----
  g.tensors_.reserve(std::min(n_tensors, kMaxReserve));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    in.set_context("tensor #" + std::to_string(i));
    TensorInfo t;
    uint64_t name_at = in.pos();
    t.name = in.read_string("tensor name");
    if (t.name.empty()) in.fail_at(name_at, "empty tensor name");
    in.set_context("tensor " + quoted(t.name));
    if (g.tensor_index_.count(t.name)) in.fail_at(name_at, "duplicate tensor name");

    uint64_t dims_at = in.pos();
    uint32_t n_dims = in.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      in.fail_at(dims_at, "n_dims " + std::to_string(n_dims) + " is outside 1.." +
                              std::to_string(kMaxDims));
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t at = in.pos();
      uint64_t dim = in.read<uint64_t>("dimension");
      if (dim == 0) in.fail_at(at, "dimension " + std::to_string(d) + " is 0");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements))
        in.fail_at(at, "element count overflows int64 at dimension " + std::to_string(d) +
                           " (" + std::to_string(dim) + ")");
      t.dims.push_back(static_cast<int64_t>(dim));
    }

    uint64_t type_at = in.pos();
    t.type_id = in.read<uint32_t>("tensor type");
    if (auto traits = type_traits(t.type_id)) {
      t.type_known = true;
      t.type = traits->type;
      if (t.dims[0] % traits->block_size != 0)
        in.fail_at(type_at, "first dimension " + std::to_string(t.dims[0]) +
                                " is not a multiple of the " + traits->name + " block size " +
                                std::to_string(traits->block_size));
      uint64_t n_blocks = static_cast<uint64_t>(n_elements / traits->block_size);
      if (__builtin_mul_overflow(n_blocks, uint64_t{traits->type_size}, &t.n_bytes))
        in.fail_at(type_at, "byte size overflows uint64");
    }

    uint64_t offset_at = in.pos();
    t.offset = in.read<uint64_t>("tensor data offset");
    if (t.offset % g.alignment_ != 0)
      in.fail_at(offset_at, "data offset " + std::to_string(t.offset) +
                                " is not a multiple of the alignment " +
                                std::to_string(g.alignment_));
    g.tensor_index_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }
  in.set_context("");

  // ---- data section ----
  // Starts at the first aligned offset after the directory. pos <= file size
  // and alignment <= 2^31, so this cannot overflow. With no tensors the
  // padding may legitimately be absent (vocab-only files).
  g.data_offset_ = (in.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  const uint64_t file_size = g.file_.size();
  const uint64_t data_bytes = file_size > g.data_offset_ ? file_size - g.data_offset_ : 0;

  std::vector<TensorInfo*> placed;  // tensors with a known byte range
  for (TensorInfo& t : g.tensors_) {
    if (!t.type_known) continue;  // size unknown: the model loader rejects these
    if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
      in.set_context("tensor " + quoted(t.name));
      in.fail(std::to_string(t.n_bytes) + " bytes at data offset " + std::to_string(t.offset) +
              " run past the end of the file (data section starts at byte offset " +
              std::to_string(g.data_offset_) + ", file size " + std::to_string(file_size) + ")");
    }
    t.data = g.file_.data() + g.data_offset_ + t.offset;
    placed.push_back(&t);
  }
  std::sort(placed.begin(), placed.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < placed.size(); ++i) {
    const TensorInfo& prev = *placed[i - 1];
    const TensorInfo& cur = *placed[i];
    if (prev.offset + prev.n_bytes > cur.offset) {  // both in range: no overflow
      in.set_context("tensor " + quoted(cur.name));
      in.fail("data [" + std::to_string(cur.offset) + ", " +
              std::to_string(cur.offset + cur.n_bytes) + ") overlaps tensor " + quoted(prev.name) +
              " data [" + std::to_string(prev.offset) + ", " +
              std::to_string(prev.offset + prev.n_bytes) + ") (offsets relative to byte " +
              std::to_string(g.data_offset_) + ")");
    }
  }
  return g;
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void type_mismatch(const std::string& path, std::string_view key, const Value& v,
                                const char* expected) {
  throw Error(path + ": metadata key " + quoted(key) + " has type " + value_type_name(v.type) +
              " (" + v.to_display_string(3) + "), expected " + expected);
}

}  // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (const std::string* s = v->as_string()) return *s;
  type_mismatch(path(), key, *v, "string");
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto x = v->as_int()) return x;
  type_mismatch(path(), key, *v, "an integer that fits int64");
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto x = v->as_uint()) return x;
  type_mismatch(path(), key, *v, "a non-negative integer");
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto x = v->as_double()) return x;
  type_mismatch(path(), key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto x = v->as_bool()) return x;
  type_mismatch(path(), key, *v, "bool");
}

const Array* GgufFile::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (const Array* a = v->as_array()) return a;
  type_mismatch(path(), key, *v, "array");
}

}  // namespace pagoda::gguf
