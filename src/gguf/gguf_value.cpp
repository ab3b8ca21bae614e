// Metadata values: type names, checked conversions, constructors and the
// truncated display form used by `pagoda inspect`.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "gguf/gguf.h"

namespace pagoda::gguf {

namespace {

// Strings longer than this are cut in displays: a chat template is several KB
// and `inspect` shows one line per key.
constexpr size_t kMaxDisplayStringBytes = 64;

template <class T>
std::string shortest(T x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, res.ptr);
}

// Quoted, with control bytes escaped so the display stays on one line; cut at
// a UTF-8 character boundary.
std::string display_string(const std::string& s) {
  size_t n = s.size();
  bool cut = false;
  if (n > kMaxDisplayStringBytes) {
    n = kMaxDisplayStringBytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    cut = true;
  }
  std::string out = "\"";
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (cut) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "invalid";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

std::optional<int64_t> Value::as_int() const {
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  return std::nullopt;
}

std::optional<uint64_t> Value::as_uint() const {
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) return std::nullopt;
    return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<double> Value::as_double() const {
  if (is_float()) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  }
  if (!is_integer()) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}

// Only BOOL converts: an integer flag would be a converter bug worth seeing,
// not something to guess at.
std::optional<bool> Value::as_bool() const {
  if (type != ValueType::BOOL) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u != 0;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  return is_string() ? std::get_if<std::string>(&v) : nullptr;
}

const Array* Value::as_array() const {
  if (!is_array()) return nullptr;
  const auto* p = std::get_if<std::shared_ptr<Array>>(&v);
  return p ? p->get() : nullptr;
}

std::string Value::to_display_string(size_t max_items) const {
  switch (type) {
    case ValueType::BOOL: {
      auto b = as_bool();
      return b ? (*b ? "true" : "false") : "?";
    }
    case ValueType::FLOAT32: {
      auto d = as_double();
      return d ? shortest(static_cast<float>(*d)) : "?";
    }
    case ValueType::FLOAT64: {
      auto d = as_double();
      return d ? shortest(*d) : "?";
    }
    case ValueType::STRING: {
      const std::string* s = as_string();
      return s ? display_string(*s) : "?";
    }
    case ValueType::ARRAY: {
      const Array* a = as_array();
      if (!a) return "?";
      std::string out = std::string("array<") + value_type_name(a->elem_type) + ">[" +
                        std::to_string(a->items.size()) + "] [";
      size_t shown = std::min(max_items, a->items.size());
      for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        out += a->items[i].to_display_string(max_items);
      }
      if (shown < a->items.size()) out += shown ? ", ..." : "...";
      return out + "]";
    }
    default: {
      if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
      if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
      return "?";
    }
  }
}

Value Value::u32(uint32_t x) { return Value{ValueType::UINT32, uint64_t{x}}; }
Value Value::i32(int32_t x) { return Value{ValueType::INT32, int64_t{x}}; }
Value Value::u64(uint64_t x) { return Value{ValueType::UINT64, x}; }
Value Value::f32(float x) { return Value{ValueType::FLOAT32, static_cast<double>(x)}; }
Value Value::boolean(bool x) { return Value{ValueType::BOOL, uint64_t{x ? 1u : 0u}}; }
Value Value::str(std::string s) { return Value{ValueType::STRING, std::move(s)}; }

Value Value::array(ValueType elem_type, std::vector<Value> items) {
  for (const Value& item : items)
    PAGODA_CHECK(item.type == elem_type, std::string("array of ") + value_type_name(elem_type) +
                                             " given an item of type " + value_type_name(item.type));
  auto a = std::make_shared<Array>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  return Value{ValueType::ARRAY, std::move(a)};
}

Value Value::str_array(const std::vector<std::string>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(str(s));
  return array(ValueType::STRING, std::move(v));
}

Value Value::f32_array(const std::vector<float>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (float x : items) v.push_back(f32(x));
  return array(ValueType::FLOAT32, std::move(v));
}

Value Value::i32_array(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(i32(x));
  return array(ValueType::INT32, std::move(v));
}

}  // namespace pagoda::gguf
