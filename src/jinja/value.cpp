// jinja::Value: Python printing, comparison and json.dumps (see value.h).
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/budget.h"

namespace pagoda::jinja {

const Value* CallArgs::get(size_t idx, std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return idx < pos.size() ? &pos[idx] : nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double f) : kind_(Kind::Float), f_(f) {}
const std::string Value::kEmpty;

Value::Value(std::string s) : kind_(Kind::String) {
  if (!s.empty()) s_ = std::make_shared<const std::string>(std::move(s));
}
int Value::depth() const {
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return depth_;
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace) return dict_->depth;
  return 0;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  int d = 0;
  for (const Value& x : items) d = std::max(d, x.depth());
  if (d + 1 > kMaxValueDepth) value_too_deep();
  v.depth_ = static_cast<uint16_t>(d + 1);
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}
Value Value::make_namespace() {
  Value v = dict();
  v.kind_ = Kind::Namespace;
  return v;
}
Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  ValueDepthGuard guard;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict_ref().add(Value(it.key()), from_json(it.value()));
      return d;
    }
    default: return undefined();
  }
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::as_generator() const {
  Value v = list(*list_);
  v.gen_ = true;
  return v;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return f_;
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !str().empty();
    case Kind::List:
    case Kind::Tuple: return gen_ || !list_->empty();
    case Kind::Dict: return !dict_->entries.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp10 = std::stoi(sci.substr(e_pos + 1));
  std::string out = neg ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + eb;
  }
  if (exp10 < 0) return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += decode_utf8_char(s, i).len) ++n;
  return n;
}

bool is_py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad || c == 0x2028 || c == 0x2029) {
      char b[12];
      if (c <= 0xff)
        std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      out += b;
    } else {
      out += encode_utf8(std::u32string(1, c));
    }
  }
  out += q;
  return out;
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return str();
    default: return to_repr();
  }
}

std::string Value::to_repr() const {
  std::string out;
  repr_to(out);
  return out;
}

// Checked as it grows: a list holding one long string many times prints longer
// than any one value it holds.
void Value::repr_to(std::string& out) const {
  switch (kind_) {
    case Kind::Undefined: out += "Undefined"; return;
    case Kind::None: out += "None"; return;
    case Kind::Bool: out += b_ ? "True" : "False"; return;
    case Kind::Int: out += std::to_string(i_); return;
    case Kind::Float: out += float_repr(f_); return;
    case Kind::String:
      check_string_size(out.size() + str().size());
      out += string_repr(str());
      return;
    case Kind::List:
    case Kind::Tuple: {
      if (gen_) {
        out += "<generator object>";
        return;
      }
      ValueDepthGuard guard;
      bool tup = kind_ == Kind::Tuple;
      out += tup ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        (*list_)[i].repr_to(out);
        check_string_size(out.size());
      }
      if (tup && list_->size() == 1) out += ",";
      out += tup ? ")" : "]";
      return;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      ValueDepthGuard guard;
      out += kind_ == Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        k.repr_to(out);
        out += ": ";
        v.repr_to(out);
        check_string_size(out.size());
      }
      out += kind_ == Kind::Namespace ? "}>" : "}";
      return;
    }
    case Kind::Callable: out += "<function " + str() + ">"; return;
  }
}

namespace {
void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  if (ensure_ascii) {
    for (char32_t c : decode_utf8(s)) {
      if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      char b[16];
      switch (c) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
      }
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 | (v >> 10)),
                      static_cast<unsigned>(0xdc00 | (v & 0x3ff)));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      }
      out += b;
    }
    out += '"';
    return;
  }
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", u);
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::None: return "null";
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return float_repr(k.as_double());
    default: throw RuntimeError("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}
}  // namespace

std::string Value::dump_json(const std::optional<std::string>& indent, const std::string& item_sep,
                             const std::string& key_sep, bool sort_keys, bool ensure_ascii) const {
  std::string out;
  dump_json_to(out, indent, item_sep, key_sep, sort_keys, ensure_ascii, 0);
  return out;
}

void Value::dump_json_to(std::string& out, const std::optional<std::string>& indent, const std::string& item_sep,
                         const std::string& key_sep, bool sort_keys, bool ensure_ascii, int level) const {
  ValueDepthGuard guard;
  auto newline = [&](int lvl) {
    check_string_size(out.size() + 1 + static_cast<size_t>(lvl) * indent->size());
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *indent;
  };
  switch (kind_) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += b_ ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(i_); return;
    case Kind::Float:
      if (std::isnan(f_)) out += "NaN";
      else if (std::isinf(f_)) out += f_ > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(f_);
      return;
    case Kind::String:
      check_string_size(out.size() + str().size());
      json_string(out, str(), ensure_ascii);
      return;
    case Kind::List:
    case Kind::Tuple: {
      if (gen_) throw RuntimeError("Object of type generator is not JSON serializable");
      if (list_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(level + 1);
        (*list_)[i].dump_json_to(out, indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        check_string_size(out.size());
      }
      if (indent) newline(level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (dict_->entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> kv;
      for (const auto& [k, v] : dict_->entries) kv.emplace_back(json_key(k), &v);
      if (sort_keys)
        std::stable_sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < kv.size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(level + 1);
        json_string(out, kv[i].first, ensure_ascii);
        out += key_sep;
        kv[i].second->dump_json_to(out, indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        check_string_size(out.size());
      }
      if (indent) newline(level);
      out += '}';
      return;
    }
    default: throw RuntimeError("Object of type " + type_name() + " is not JSON serializable");
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}
const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}
void Dict::set(const Value& key, Value v) {
  int d = std::max(depth, 1 + std::max(key.depth(), v.depth()));
  if (d > kMaxValueDepth) value_too_deep();
  depth = d;
  for (auto& [k, old] : entries)
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  entries.emplace_back(key, std::move(v));
}
void Dict::add(Value key, Value v) {
  int d = std::max(depth, 1 + std::max(key.depth(), v.depth()));
  if (d > kMaxValueDepth) value_too_deep();
  depth = d;
  entries.emplace_back(std::move(key), std::move(v));
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  ValueDepthGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const List &x = a.items(), &y = b.items();
      if (a.is_generator() || b.is_generator()) return &x == &y;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict:
    case K::Namespace: {
      const Dict &x = a.dict_ref(), &y = b.dict_ref();
      if (&x == &y) return true;
      if (a.is_namespace()) return false;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case K::Callable: return &a.fn() == &b.fn();
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  ValueDepthGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.kind() == b.kind() && a.is_list()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) throw RuntimeError("comparison with an undefined value");
  throw RuntimeError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace pagoda::jinja
