#include "safetensors/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagoda::safetensors {

namespace {

using nlohmann::json;

struct DtypeInfo {
  const char* name;
  size_t size;
};
// The dtypes of the safetensors spec (F8 variants included).
constexpr DtypeInfo kDtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
    {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

std::optional<GgmlType> ggml_type_of(std::string_view dtype) {
  if (dtype == "F32") return GgmlType::F32;
  if (dtype == "F16") return GgmlType::F16;
  if (dtype == "BF16") return GgmlType::BF16;
  return std::nullopt;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

size_t dtype_size(std::string_view dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

const char* dtype_name(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::BF16: return "BF16";
    default: break;
  }
  PAGODA_CHECK(false, std::string("no safetensors dtype for ") + type_name(type));
  return "";
}

int64_t TensorEntry::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorEntry::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile(path);
  f.parse_header(f.file_.data(), f.file_.size());
  return f;
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* bytes, size_t size, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.parse_header(bytes, size);
  return f;
}

void SafetensorsFile::parse_header(const uint8_t* bytes, size_t size) {
  const std::string& p = path_;
  if (size < 8) throw Error(p + ": file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > size - 8)
    throw Error(p + ": header length " + std::to_string(header_len) + " is beyond the end of the file (" +
                std::to_string(size) + " bytes)");
  if (header_len > kMaxHeaderBytes)
    throw Error(p + ": header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  json header = json::parse(hb, hb + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) throw Error(p + ": header is not valid JSON");
  if (!header.is_object()) throw Error(p + ": header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw Error(p + ": __metadata__ is not a JSON object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) throw Error(p + ": __metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = p + ": tensor '" + name + "'";
    if (!e.is_object()) throw Error(where + ": entry is not a JSON object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) throw Error(where + ": missing or non-string dtype");
    if (sh == e.end() || !sh->is_array()) throw Error(where + ": missing or non-array shape");
    if (off == e.end() || !off->is_array() || off->size() != 2)
      throw Error(where + ": data_offsets must be an array [begin, end]");
    TensorEntry t;
    t.name = name;
    t.dtype = dt->get<std::string>();
    const size_t esize = dtype_size(t.dtype);
    if (esize == 0) throw Error(where + ": unknown dtype '" + t.dtype + "'");
    t.type = ggml_type_of(t.dtype);
    uint64_t n_bytes = esize;
    for (const json& d : *sh) {
      if (!d.is_number_integer() || (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0))
        throw Error(where + ": shape " + sh->dump() + " holds a value that is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || (v != 0 && n_bytes > UINT64_MAX / v))
        throw Error(where + ": shape " + sh->dump() + " is too large");
      t.shape.push_back(static_cast<int64_t>(v));
      n_bytes *= v;
    }
    for (const json& o : *off)
      if (!o.is_number_unsigned())
        throw Error(where + ": data_offsets " + off->dump() + " are not non-negative integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end) throw Error(where + ": data_offsets " + off->dump() + " end before they begin");
    if (t.end > data_size)
      throw Error(where + ": data_offsets " + off->dump() + " are out of range (data section holds " +
                  std::to_string(data_size) + " bytes)");
    if (t.end - t.begin != n_bytes)
      throw Error(where + ": data_offsets " + off->dump() + " span " + std::to_string(t.end - t.begin) +
                  " bytes but " + t.dtype + " " + t.shape_string() + " needs " + std::to_string(n_bytes));
    t.data = data + t.begin;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const TensorEntry& a = tensors_[i - 1];
    const TensorEntry& b = tensors_[i];
    // Empty tensors occupy no bytes and may share an offset with anything.
    if (b.begin < a.end && b.n_bytes() > 0)
      throw Error(p + ": tensors '" + a.name + "' [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                  ") and '" + b.name + "' [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                  ") overlap");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- writer ----

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafetensorsWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                            std::vector<uint8_t> bytes) {
  const size_t esize = dtype_size(dtype);
  PAGODA_CHECK(esize > 0, "unknown dtype " + dtype);
  uint64_t n = esize;
  for (int64_t d : shape) {
    PAGODA_CHECK(d >= 0, "negative dimension in " + name);
    n *= static_cast<uint64_t>(d);
  }
  PAGODA_CHECK(n == bytes.size(), "byte size mismatch for tensor " + name);
  for (const Pending& t : tensors_) PAGODA_CHECK(t.name != name, "duplicate tensor " + name);
  tensors_.push_back({name, dtype, shape, std::move(bytes)});
}

void SafetensorsWriter::add_f32(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                                const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * (type == GgmlType::F32 ? 4 : 2));
  if (type == GgmlType::F32) {
    if (n) std::memcpy(bytes.data(), values, bytes.size());
  } else {
    PAGODA_CHECK(type == GgmlType::F16 || type == GgmlType::BF16, "add_f32: type must be F32, F16 or BF16");
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = type == GgmlType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  add(name, dtype_name(type), shape, std::move(bytes));
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  // ordered_json keeps insertion order, so the header lists tensors as added.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t pos = 8 + text.size();
  for (const Pending& t : tensors_) {
    if (!t.bytes.empty()) std::memcpy(out.data() + pos, t.bytes.data(), t.bytes.size());
    pos += t.bytes.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot write: " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int e = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(path.c_str());
    throw Error(path + ": cannot write: " + std::strerror(e));
  }
}

}  // namespace pagoda::safetensors
