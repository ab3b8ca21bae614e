// Python methods of str, dict and list for jinja templates (see methods.h).
#include "jinja/methods.h"

#include <algorithm>
#include <clocale>
#include <cwctype>
#include <locale.h>
#include <set>
#include <wctype.h>

#include "jinja/budget.h"
#include "jinja/builtins.h"

namespace pagoda::jinja {

namespace {
const std::set<std::string, std::less<>> kStrMethods = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper", "lower",
    "title", "capitalize", "find", "rfind", "count", "join", "splitlines", "isdigit", "isalpha", "isalnum",
    "isspace", "islower", "isupper"};
const std::set<std::string, std::less<>> kDictMethods = {"items", "keys", "values", "get", "copy"};
const std::set<std::string, std::less<>> kListMethods = {"index", "count", "copy"};
// Methods the ImmutableSandboxedEnvironment refuses (they mutate a list/dict).
const std::set<std::string, std::less<>> kUnsafeMethods = {
    "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "update", "setdefault", "popitem"};

}  // namespace

bool is_str_method(std::string_view name) { return kStrMethods.count(name) != 0; }
bool is_dict_method(std::string_view name) { return kDictMethods.count(name) != 0; }
bool is_list_method(std::string_view name) { return kListMethods.count(name) != 0; }
bool is_unsafe_method(std::string_view name) { return kUnsafeMethods.count(name) != 0; }
bool is_method(std::string_view name) {
  return is_str_method(name) || is_dict_method(name) || is_list_method(name) || is_unsafe_method(name);
}

[[noreturn]] void type_error(const std::string& msg) { throw RuntimeError(msg); }

// Case mapping: ASCII directly; other code points through glibc's C.UTF-8
// simple case mapping (Python uses the full mapping, so 'ß'.upper() is 'SS'
// there and 'ß' here — the only kind of difference left).
static locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}
static std::string map_case(std::string s, bool upper) {
  bool ascii = true;
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
  }
  if (ascii || !utf8_locale()) return s;
  std::u32string u = decode_utf8(s);
  for (char32_t& c : u)
    if (c >= 0x80)
      c = static_cast<char32_t>(upper ? towupper_l(static_cast<wint_t>(c), utf8_locale())
                                      : towlower_l(static_cast<wint_t>(c), utf8_locale()));
  return encode_utf8(u);
}
std::string py_lower(std::string s) { return map_case(std::move(s), false); }
std::string py_upper(std::string s) { return map_case(std::move(s), true); }

Value arg_or(const CallArgs& a, size_t idx, std::string_view name, const Value& dflt) {
  const Value* v = a.get(idx, name);
  return v ? *v : dflt;
}

int64_t to_int_arg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  type_error(std::string(what) + ": an integer is required, got " + v.type_name());
}

std::string need_str(const Value& v, const char* what) {
  if (!v.is_string()) type_error(std::string(what) + ": expected str, got " + v.type_name());
  return v.str();
}

// ---- Python str methods --------------------------------------------------------

static std::u32string strip_set(const Value& chars) {
  if (chars.is_none() || chars.is_undefined()) return {};
  return decode_utf8(need_str(chars, "strip"));
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = decode_utf8(s);
  std::u32string set = strip_set(chars);
  bool ws = chars.is_none() || chars.is_undefined();
  auto strip_it = [&](char32_t c) { return ws ? is_py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

static List py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string u = decode_utf8(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && is_py_space(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t e = u.size();
          while (e > i && is_py_space(u[e - 1])) --e;
          words.push_back(u.substr(i, e - i));
          check_list_size(words.size());
          break;
        }
        size_t b = i;
        while (i < u.size() && !is_py_space(u[i])) ++i;
        words.push_back(u.substr(b, i - b));
        check_list_size(words.size());
      }
    } else {
      size_t i = u.size();
      while (i > 0) {
        while (i > 0 && is_py_space(u[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && is_py_space(u[b])) ++b;
          words.push_back(u.substr(b, i - b));
          check_list_size(words.size());
          break;
        }
        size_t e = i;
        while (i > 0 && !is_py_space(u[i - 1])) --i;
        words.push_back(u.substr(i, e - i));
        check_list_size(words.size());
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto& w : words) out.emplace_back(encode_utf8(w));
    return out;
  }
  std::string d = need_str(sep, "split");
  if (d.empty()) type_error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t b = 0;
    while (true) {
      size_t p = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos : s.find(d, b);
      if (p == std::string::npos) {
        parts.push_back(s.substr(b));
        check_list_size(parts.size());
        break;
      }
      parts.push_back(s.substr(b, p - b));
      check_list_size(parts.size());
      b = p + d.size();
    }
  } else {
    size_t e = s.size();
    while (true) {
      size_t p = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) || e < d.size()
                     ? std::string::npos
                     : s.rfind(d, e - d.size());
      if (p == std::string::npos) {
        parts.push_back(s.substr(0, e));
        check_list_size(parts.size());
        break;
      }
      parts.push_back(s.substr(p + d.size(), e - p - d.size()));
      check_list_size(parts.size());
      e = p;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = decode_utf8(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        check_string_size(out.size());
        ++n;
      }
      if (i < u.size()) out += encode_utf8(std::u32string(1, u[i]));
    }
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  while (true) {
    size_t p = (count >= 0 && n >= count) ? std::string::npos : s.find(old, b);
    if (p == std::string::npos) break;
    out += s.substr(b, p - b);
    out += repl;
    check_string_size(out.size());
    b = p + old.size();
    ++n;
  }
  return out + s.substr(b);
}

std::string py_capitalize(const std::string& s) {
  std::string l = py_lower(s);
  if (!l.empty() && l[0] >= 'a' && l[0] <= 'z') l[0] = static_cast<char>(l[0] - 'a' + 'A');
  return l;
}

static bool is_alpha_ascii(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha_ascii(c)) {
      c = prev_cased ? py_lower(std::string(1, c))[0] : py_upper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

// Python str.splitlines() (no keepends).
List py_splitlines(const std::string& s) {
  std::u32string u = decode_utf8(s);
  List out;
  size_t b = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.emplace_back(encode_utf8(u.substr(b, i - b)));
    check_list_size(out.size());
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    b = i + 1;
  }
  if (b < u.size()) out.emplace_back(encode_utf8(u.substr(b)));
  return out;
}

static bool affix_match(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const Value& a) {
    std::string x = need_str(a, start ? "startswith" : "endswith");
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list() && affix.kind() == Value::Kind::Tuple) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value str_method(const std::string& s, const std::string& m, CallArgs& a) {
  static const Value kNone = Value::none();
  if (m == "startswith" || m == "endswith") {
    const Value* x = a.get(0, "prefix");
    if (!x) type_error(m + "() takes at least 1 argument");
    return Value(affix_match(s, *x, m == "startswith"));
  }
  if (m == "split" || m == "rsplit")
    return Value::list(py_split(s, arg_or(a, 0, "sep", kNone), to_int_arg(arg_or(a, 1, "maxsplit", Value(-1)), m.c_str()),
                                m == "rsplit"));
  if (m == "strip") return Value(py_strip(s, arg_or(a, 0, "chars", kNone), true, true));
  if (m == "lstrip") return Value(py_strip(s, arg_or(a, 0, "chars", kNone), true, false));
  if (m == "rstrip") return Value(py_strip(s, arg_or(a, 0, "chars", kNone), false, true));
  if (m == "replace") {
    if (a.pos.size() < 2) type_error("replace() takes at least 2 arguments");
    return Value(py_replace(s, need_str(a.pos[0], "replace"), need_str(a.pos[1], "replace"),
                            to_int_arg(arg_or(a, 2, "count", Value(-1)), "replace")));
  }
  if (m == "upper") return Value(py_upper(s));
  if (m == "lower") return Value(py_lower(s));
  if (m == "title") return Value(py_title(s));
  if (m == "capitalize") return Value(py_capitalize(s));
  if (m == "find" || m == "rfind" || m == "count") {
    if (a.pos.empty()) type_error(m + "() takes at least 1 argument");
    std::string sub = need_str(a.pos[0], m.c_str());
    if (m == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t p = m == "find" ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) return Value(int64_t{-1});
    return Value(static_cast<int64_t>(utf8_length(s.substr(0, p))));
  }
  if (m == "join") {
    if (a.pos.empty()) type_error("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.pos[0])) {
      if (!first) out += s;
      first = false;
      out += need_str(v, "join");
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (m == "splitlines") return Value::list(py_splitlines(s));
  std::u32string u = decode_utf8(s);
  if (u.empty()) return Value(false);
  auto all = [&](auto pred) { return Value(std::all_of(u.begin(), u.end(), pred)); };
  if (m == "isdigit") return all([](char32_t c) { return c >= '0' && c <= '9'; });
  if (m == "isalpha") return all([](char32_t c) { return c < 0x80 ? is_alpha_ascii(static_cast<char>(c)) : true; });
  if (m == "isalnum")
    return all([](char32_t c) { return c < 0x80 ? is_alpha_ascii(static_cast<char>(c)) || (c >= '0' && c <= '9') : true; });
  if (m == "isspace") return all(is_py_space);
  if (m == "islower" || m == "isupper") {
    bool cased = false;
    for (char32_t c : u) {
      if (c >= 'a' && c <= 'z') {
        if (m == "isupper") return Value(false);
        cased = true;
      } else if (c >= 'A' && c <= 'Z') {
        if (m == "islower") return Value(false);
        cased = true;
      }
    }
    return Value(cased);
  }
  type_error("'str' object has no attribute '" + m + "'");
}

Value dict_method(const Value& d, const std::string& m, CallArgs& a) {
  const Dict& dict = d.dict_ref();
  if (m == "items") {
    List out;
    for (const auto& [k, v] : dict.entries) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
  }
  if (m == "keys" || m == "values") {
    List out;
    for (const auto& [k, v] : dict.entries) out.push_back(m == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (m == "get") {
    if (a.pos.empty()) type_error("get expected at least 1 argument");
    const Value* v = dict.find(a.pos[0]);
    if (v) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  }
  if (m == "copy") {
    Value c = Value::dict();
    c.dict_ref().entries = dict.entries;
    c.dict_ref().depth = dict.depth;
    return c;
  }
  type_error("'dict' object has no attribute '" + m + "'");
}

static Value list_method(const Value& l, const std::string& m, CallArgs& a) {
  const List& items = l.items();
  if (m == "copy") return Value::list(items);
  if (a.pos.empty()) type_error(m + "() takes exactly one argument");
  if (m == "count") {
    int64_t n = 0;
    for (const Value& v : items) n += equals(v, a.pos[0]);
    return Value(n);
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], a.pos[0])) return Value(static_cast<int64_t>(i));
  type_error("list.index(x): x not in list");
}

Value bound(const Value& obj, const std::string& m) {
  if (kUnsafeMethods.count(m) && !(obj.is_string())) {
    std::string msg = "access to attribute '" + m + "' of '" + obj.type_name() + "' object is unsafe.";
    return Value::callable(m, [msg](RenderState&, CallArgs&) -> Value { throw RuntimeError(msg); });
  }
  return Value::callable(m, [obj, m](RenderState&, CallArgs& a) -> Value {
    if (obj.is_string()) return str_method(obj.str(), m, a);
    if (obj.is_dict()) return dict_method(obj, m, a);
    return list_method(obj, m, a);
  });
}


}  // namespace pagoda::jinja
