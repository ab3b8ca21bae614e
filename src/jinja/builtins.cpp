// jinja builtins: lookups, iteration and calls (see builtins.h); the filters are
// in filters.cpp, the tests (`x is name`) in is_tests.cpp, the Python methods in methods.cpp.
#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "jinja/budget.h"
#include "jinja/methods.h"

namespace pagoda::jinja {

std::string no_attr_hint(const Value& obj, const std::string& name) {
  std::string out = "'";
  out.append(obj.type_name()).append(" object' has no attribute '").append(name).append("'");
  return out;
}

// jinja2 make_attrgetter: "a.b.0" -> getitem per part (digits -> int).
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t b = 0;
  while (true) {
    size_t p = path.find('.', b);
    std::string part = path.substr(b, p == std::string::npos ? std::string::npos : p - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (p == std::string::npos) return cur;
    b = p + 1;
  }
}

namespace {

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) type_error("'in <string>' requires string as left operand, not " + item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return container.dict_ref().find(item) != nullptr;
  for (const Value& v : iterate(container))
    if (equals(v, item)) return true;
  return false;
}

}  // namespace


int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (v.is_generator()) type_error("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict_ref().entries.size());
    default: type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (v.is_generator()) {  // one-shot, as a Python generator: a second pass sees nothing
        List out = std::move(v.items());
        v.items().clear();
        return out;
      }
      return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& [k, x] : v.dict_ref().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      check_list_size(utf8_length(v.str()));
      List out;
      for (char32_t c : decode_utf8(v.str())) out.emplace_back(encode_utf8(std::u32string(1, c)));
      return out;
    }
    default: type_error("'" + v.type_name() + "' object is not iterable");
  }
}

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  if (v.is_undefined()) type_error("cannot slice an undefined value");
  auto opt = [](const Value& x) -> std::optional<int64_t> {
    if (x.is_none() || x.is_undefined()) return std::nullopt;
    return to_int_arg(x, "slice indices");
  };
  std::u32string u;
  size_t n;
  if (v.is_string()) {
    u = decode_utf8(v.str());
    n = u.size();
  } else if (v.is_list()) {
    n = v.items().size();
  } else {
    type_error("'" + v.type_name() + "' object is not subscriptable");
  }
  int64_t len = static_cast<int64_t>(n);
  int64_t st = opt(step).value_or(1);
  if (st == 0) type_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t i = *x;
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t b = adjust(opt(start), st < 0 ? len - 1 : 0);
  int64_t e = adjust(opt(stop), st < 0 ? -1 : len);
  std::vector<size_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<size_t>(i));
  if (v.is_string()) {
    std::u32string out;
    for (size_t i : idx) out += u[i];
    return Value(encode_utf8(out));
  }
  List out;
  for (size_t i : idx) out.push_back(v.items()[i]);
  return v.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      throw RuntimeError(obj.str().empty() ? "'" + name + "' of an undefined value" : obj.str() + " (accessing ." + name + ")");
    case Value::Kind::String:
      if (is_str_method(name)) return bound(obj, name);
      break;
    case Value::Kind::Dict:
      if (is_dict_method(name) || is_unsafe_method(name)) return bound(obj, name);
      if (const Value* v = obj.dict_ref().find(std::string_view(name))) return *v;
      break;
    case Value::Kind::Namespace:
      if (const Value* v = obj.dict_ref().find(std::string_view(name))) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (is_list_method(name) || (obj.kind() == Value::Kind::List && is_unsafe_method(name))) return bound(obj, name);
      break;
    default: break;
  }
  return Value::undefined(no_attr_hint(obj, name));
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: throw RuntimeError(obj.str().empty() ? "subscript of an undefined value" : obj.str());
    case Value::Kind::Dict:
      if (const Value* v = obj.dict_ref().find(key)) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::String:
      if (obj.is_generator()) return Value::undefined("'generator' object is not subscriptable");
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          std::u32string u = decode_utf8(obj.str());
          int64_t n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value(encode_utf8(u.substr(static_cast<size_t>(i), 1)));
        } else {
          int64_t n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        }
        return Value::undefined("index " + std::to_string(key.as_int()) + " out of range");
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + key.to_repr());
}

Value call_value(RenderState& st, const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.fn()(st, args);
  if (callee.is_undefined())
    throw RuntimeError(callee.str().empty() ? "call of an undefined value" : callee.str() + " (called)");
  type_error("'" + callee.type_name() + "' object is not callable");
}

bool value_in(const Value& item, const Value& container) { return contains(container, item); }

}  // namespace pagoda::jinja
