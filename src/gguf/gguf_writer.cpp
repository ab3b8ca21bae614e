// GGUF v3 writer. Layout as described in gguf.cpp; every tensor's data starts
// at a multiple of the alignment and is zero-padded to the next one, the last
// included (as llama.cpp writes them), so the file size is a multiple of the
// alignment.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "gguf/gguf.h"

namespace pagoda::gguf {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

// What emit() needs of a tensor; GgufWriter::PendingTensor is private.
struct TensorRef {
  const std::string* name;
  GgmlType type;
  const std::vector<int64_t>* dims;
  const std::vector<uint8_t>* bytes;
};

uint64_t align_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void put(const void* p, size_t n) = 0;

  template <class T>
  void pod(T x) {
    put(&x, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    put(s.data(), s.size());
  }
  void zeros(size_t n) {
    static const uint8_t kZeros[256] = {};
    while (n > 0) {
      size_t k = std::min(n, sizeof(kZeros));
      put(kZeros, k);
      n -= k;
    }
  }
};

class VectorSink : public ByteSink {
 public:
  explicit VectorSink(std::vector<uint8_t>& out) : out_(out) {}
  void put(const void* p, size_t n) override {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  std::vector<uint8_t>& out_;
};

class FileSink : public ByteSink {
 public:
  FileSink(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void put(const void* p, size_t n) override {
    if (n && std::fwrite(p, 1, n, f_) != n)
      throw Error(path_ + ": cannot write: " + std::strerror(errno));
  }

 private:
  std::FILE* f_;
  const std::string& path_;
};

// The value's payload (no type tag). Requires: the variant matches the type.
void put_payload(ByteSink& out, const Value& v) {
  auto u = [&] {
    const auto* p = std::get_if<uint64_t>(&v.v);
    PAGODA_CHECK(p, std::string(value_type_name(v.type)) + " value does not hold an unsigned integer");
    return *p;
  };
  auto i = [&] {
    const auto* p = std::get_if<int64_t>(&v.v);
    PAGODA_CHECK(p, std::string(value_type_name(v.type)) + " value does not hold a signed integer");
    return *p;
  };
  auto d = [&] {
    const auto* p = std::get_if<double>(&v.v);
    PAGODA_CHECK(p, std::string(value_type_name(v.type)) + " value does not hold a double");
    return *p;
  };
  switch (v.type) {
    case ValueType::UINT8: out.pod(static_cast<uint8_t>(u())); break;
    case ValueType::INT8: out.pod(static_cast<int8_t>(i())); break;
    case ValueType::UINT16: out.pod(static_cast<uint16_t>(u())); break;
    case ValueType::INT16: out.pod(static_cast<int16_t>(i())); break;
    case ValueType::UINT32: out.pod(static_cast<uint32_t>(u())); break;
    case ValueType::INT32: out.pod(static_cast<int32_t>(i())); break;
    case ValueType::UINT64: out.pod(u()); break;
    case ValueType::INT64: out.pod(i()); break;
    case ValueType::FLOAT32: out.pod(static_cast<float>(d())); break;
    case ValueType::FLOAT64: out.pod(d()); break;
    case ValueType::BOOL: out.pod(static_cast<uint8_t>(u() != 0)); break;
    case ValueType::STRING: {
      const std::string* s = v.as_string();
      PAGODA_CHECK(s, "string value does not hold a string");
      out.str(*s);
      break;
    }
    case ValueType::ARRAY: {
      const Array* a = v.as_array();
      PAGODA_CHECK(a, "array value does not hold an array");
      out.pod(static_cast<uint32_t>(a->elem_type));
      out.pod<uint64_t>(a->items.size());
      for (const Value& item : a->items) {
        PAGODA_CHECK(item.type == a->elem_type,
                     std::string("array of ") + value_type_name(a->elem_type) +
                         " holds an item of type " + value_type_name(item.type));
        put_payload(out, item);
      }
      break;
    }
  }
}

uint64_t writer_alignment(const std::vector<std::pair<std::string, Value>>& kv) {
  for (const auto& [key, value] : kv)
    if (key == "general.alignment") return value.as_uint().value_or(kDefaultAlignment);
  return kDefaultAlignment;
}

void emit(ByteSink& out, const std::vector<std::pair<std::string, Value>>& kv,
          const std::vector<TensorRef>& tensors) {
  const uint64_t alignment = writer_alignment(kv);
  uint64_t pos = 0;
  struct Counting : ByteSink {
    ByteSink& inner;
    uint64_t& pos;
    Counting(ByteSink& i, uint64_t& p) : inner(i), pos(p) {}
    void put(const void* p, size_t n) override {
      inner.put(p, n);
      pos += n;
    }
  } counted(out, pos);

  counted.put("GGUF", 4);
  counted.pod(kVersion);
  counted.pod<uint64_t>(tensors.size());
  counted.pod<uint64_t>(kv.size());
  for (const auto& [key, value] : kv) {
    counted.str(key);
    counted.pod(static_cast<uint32_t>(value.type));
    put_payload(counted, value);
  }
  uint64_t data_offset = 0;  // relative to the data section
  for (const TensorRef& t : tensors) {
    counted.str(*t.name);
    counted.pod<uint32_t>(t.dims->size());
    for (int64_t d : *t.dims) counted.pod<uint64_t>(d);
    counted.pod(static_cast<uint32_t>(t.type));
    counted.pod(data_offset);
    data_offset = align_up(data_offset + t.bytes->size(), alignment);
  }
  counted.zeros(align_up(pos, alignment) - pos);
  for (const TensorRef& t : tensors) {
    counted.put(t.bytes->data(), t.bytes->size());
    counted.zeros(align_up(t.bytes->size(), alignment) - t.bytes->size());
  }
}

// Requires-checks shared by add_tensor and add_tensor_f32; returns the row count.
int64_t check_tensor_shape(const std::string& name, GgmlType type,
                           const std::vector<int64_t>& dims) {
  PAGODA_CHECK(!name.empty(), "tensor name is empty");
  PAGODA_CHECK(dims.size() >= 1 && dims.size() <= 4,
               "tensor '" + name + "' has " + std::to_string(dims.size()) + " dims, want 1..4");
  int64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    PAGODA_CHECK(dims[i] >= 1, "tensor '" + name + "' has dimension " + std::to_string(i) + " < 1");
    if (i > 0) rows *= dims[i];
  }
  const TypeTraits& tr = traits(type);
  PAGODA_CHECK(dims[0] % tr.block_size == 0,
               "tensor '" + name + "' row of " + std::to_string(dims[0]) +
                   " is not a whole number of " + tr.name + " blocks");
  return rows;
}

}  // namespace

void GgufWriter::set(const std::string& key, Value value) {
  PAGODA_CHECK(!key.empty(), "metadata key is empty");
  if (key == "general.alignment") {
    auto a = value.as_uint();
    PAGODA_CHECK(value.type == ValueType::UINT32 && a && *a != 0 && (*a & (*a - 1)) == 0,
                 "general.alignment must be a uint32 power of two");
  }
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type,
                            const std::vector<int64_t>& dims, std::vector<uint8_t> bytes) {
  int64_t rows = check_tensor_shape(name, type, dims);
  for (const auto& t : tensors_) PAGODA_CHECK(t.name != name, "duplicate tensor '" + name + "'");
  size_t want = row_bytes(type, dims[0]) * static_cast<size_t>(rows);
  PAGODA_CHECK(bytes.size() == want, "tensor '" + name + "' has " + std::to_string(bytes.size()) +
                                         " bytes, its shape needs " + std::to_string(want));
  tensors_.push_back({name, type, dims, std::move(bytes)});
}

void GgufWriter::add_tensor_f32(const std::string& name, GgmlType type,
                                const std::vector<int64_t>& dims, const float* data) {
  int64_t rows = check_tensor_shape(name, type, dims);
  const int64_t n = dims[0];
  const size_t row_size = row_bytes(type, n);
  std::vector<uint8_t> bytes(row_size * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = data + r * n;
    uint8_t* dst = bytes.data() + static_cast<size_t>(r) * row_size;
    switch (type) {
      case GgmlType::F32:
        std::memcpy(dst, src, row_size);
        break;
      case GgmlType::F16:
        for (int64_t j = 0; j < n; ++j) {
          f16_t h = f32_to_f16(src[j]);
          std::memcpy(dst + 2 * j, &h, 2);
        }
        break;
      case GgmlType::BF16:
        for (int64_t j = 0; j < n; ++j) {
          bf16_t h = f32_to_bf16(src[j]);
          std::memcpy(dst + 2 * j, &h, 2);
        }
        break;
      case GgmlType::F64:
        for (int64_t j = 0; j < n; ++j) {
          double x = src[j];
          std::memcpy(dst + 8 * j, &x, 8);
        }
        break;
      default:
        PAGODA_CHECK(traits(type).is_quantized,
                     std::string("add_tensor_f32 cannot convert to ") + type_name(type));
        quantize_row(type, src, dst, n);
    }
  }
  add_tensor(name, type, dims, std::move(bytes));
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<TensorRef> refs;
  for (const auto& t : tensors_) refs.push_back({&t.name, t.type, &t.dims, &t.bytes});
  std::vector<uint8_t> out;
  VectorSink sink(out);
  emit(sink, kv_, refs);
  return out;
}

void GgufWriter::write(const std::string& path) const {
  std::vector<TensorRef> refs;
  for (const auto& t : tensors_) refs.push_back({&t.name, t.type, &t.dims, &t.bytes});
  // Streamed rather than serialize()d, so a multi-GB synthetic model is not
  // held twice in memory. A failed write removes the partial file.
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  try {
    FileSink sink(f, path);
    emit(sink, kv_, refs);
  } catch (...) {
    std::fclose(f);
    std::remove(path.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    int e = errno;
    std::remove(path.c_str());
    throw Error(path + ": cannot write: " + std::strerror(e));
  }
}

}  // namespace pagoda::gguf
