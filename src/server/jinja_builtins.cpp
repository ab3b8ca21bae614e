// jinja builtins: filters, tests and lookups (see jinja_builtins.h); the Python
// methods are in jinja_methods.cpp.
#include "server/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "server/jinja_budget.h"
#include "server/jinja_methods.h"

namespace pagoda::server::jinja {

namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount"};
const std::set<std::string, std::less<>> kTests = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number", "string",
    "mapping", "iterable", "sequence", "callable", "sameas", "eq", "equalto", "ne", "lt", "lessthan", "le",
    "gt", "greaterthan", "ge", "in", "odd", "even", "divisibleby", "lower", "upper", "escaped"};
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

// Sort key for sort/unique/dictsort/min/max: strings lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

// select/reject/selectattr/rejectattr.
Value select_impl(RenderState& st, const Value& seq, CallArgs& a, bool by_attr, bool keep) {
  size_t off = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) type_error("selectattr/rejectattr needs an attribute name");
    attr = need_str(a.pos[0], "selectattr");
    off = 1;
  }
  if (!seq.truthy()) return Value::list().as_generator();  // jinja2: `if value:` before iterating
  std::string test;
  if (a.pos.size() > off) test = need_str(a.pos[off], "select test");
  CallArgs targs;
  for (size_t i = off + 1; i < a.pos.size(); ++i) targs.pos.push_back(a.pos[i]);
  List out;
  for (const Value& item : iterate(seq)) {
    Value v = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? v.truthy() : apply_test(st, test, v, targs);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out)).as_generator();
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  if (!width.is_string()) check_string_size(static_cast<size_t>(std::max<int64_t>(0, to_int_arg(width, "indent"))));
  std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, to_int_arg(width, "indent"))), ' ');
  s += "\n";
  List lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv.append("\n").append(ind);
      rv += lines[i].str();
      check_string_size(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0].str();
    for (size_t i = 1; i < lines.size(); ++i) {
      rv.append("\n");
      if (!lines[i].str().empty()) rv.append(ind);
      rv.append(lines[i].str());
      check_string_size(rv.size());
    }
  }
  return first ? ind + rv : rv;
}

Value do_round(const Value& v, int64_t precision, const std::string& method) {
  double x = v.as_double();
  if (method == "common") {
    if (precision == 0) return Value(std::nearbyint(x));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
    return Value(std::stod(buf));
  }
  double f = std::pow(10.0, static_cast<double>(precision));
  return Value((method == "ceil" ? std::ceil(x * f) : std::floor(x * f)) / f);
}

std::optional<Value> parse_number(const std::string& s, bool want_int) {
  std::string t = s;
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  size_t b = t.find_first_not_of(" \t\n\r\v\f"), e = t.find_last_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return std::nullopt;
  t = t.substr(b, e - b + 1);
  try {
    size_t used = 0;
    if (want_int) {
      int64_t i = std::stoll(t, &used, 10);
      if (used == t.size()) return Value(i);
    }
    double d = std::stod(t, &used);
    if (used == t.size()) return want_int ? Value(static_cast<int64_t>(d)) : Value(d);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

bool is_filter(std::string_view name) { return kFilters.count(name) != 0; }
bool is_test(std::string_view name) { return kTests.count(name) != 0; }

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
      for (char32_t c : utf8_decode(v.str())) out.emplace_back(utf8_encode(std::u32string(1, c)));
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
    u = utf8_decode(v.str());
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
    return Value(utf8_encode(out));
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
          std::u32string u = utf8_decode(obj.str());
          int64_t n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
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

Value apply_filter(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  static const Value kNone = Value::none();
  static const Value kFalse = Value(false);
  if (f == "default" || f == "d") {
    bool boolean = arg_or(a, 1, "boolean", kFalse).truthy();
    if (in.is_undefined() || (boolean && !in.truthy())) return arg_or(a, 0, "default_value", Value(""));
    return in;
  }
  if (f == "attr") {  // getattr only: a dict's keys are not attributes
    std::string name = need_str(arg_or(a, 0, "name", Value("")), "attr");
    if (in.is_dict() && !is_dict_method(name) && !is_unsafe_method(name)) return Value::undefined(no_attr_hint(in, name));
    return get_attr(in, name);
  }
  if (f == "safe") return in.is_string() ? Value::markup(in.str()) : in;
  if (f == "string") return Value(in.to_str());
  if (f == "trim") return Value(py_strip(in.to_str(), arg_or(a, 0, "chars", kNone), true, true));
  if (f == "upper") return Value(py_upper(in.to_str()));
  if (f == "lower") return Value(py_lower(in.to_str()));
  if (f == "capitalize") return Value(py_capitalize(in.to_str()));
  if (f == "title") {
    std::string s = in.to_str(), out;
    bool at_start = true;
    for (char c : s) {
      bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '(' ||
                 c == '{' || c == '[' || c == '<';
      if (sep) {
        out += c;
        at_start = true;
      } else {
        out += at_start ? py_upper(std::string(1, c)) : py_lower(std::string(1, c));
        at_start = false;
      }
    }
    return Value(out);
  }
  if (f == "escape" || f == "e") return in.is_markup() ? in : Value::markup(html_escape(in.to_str()));
  if (f == "length" || f == "count") return Value(py_len(in));
  if (f == "tojson") {
    const Value& ind = arg_or(a, 1, "indent", kNone);
    std::optional<std::string> indent;
    if (ind.is_string()) indent = ind.str();
    else if (ind.is_int()) {
      check_string_size(static_cast<size_t>(std::max<int64_t>(0, ind.as_int())));
      indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind.as_int())), ' ');
    }
    std::string item_sep = indent ? "," : ", ", key_sep = ": ";
    const Value& seps = arg_or(a, 2, "separators", kNone);
    if (seps.is_list() && seps.items().size() == 2) {
      item_sep = need_str(seps.items()[0], "tojson separators");
      key_sep = need_str(seps.items()[1], "tojson separators");
    }
    return Value(in.dump_json(indent, item_sep, key_sep, arg_or(a, 3, "sort_keys", kFalse).truthy(),
                              arg_or(a, 0, "ensure_ascii", kFalse).truthy()));
  }
  if (f == "items") {
    if (in.is_undefined()) return Value::list();
    if (!in.is_dict()) type_error("Can only get item pairs from a mapping.");
    CallArgs none;
    return dict_method(in, "items", none);
  }
  if (f == "list") return Value::list(iterate(in));
  if (f == "first" || f == "last") {
    if (f == "last" && in.is_generator()) type_error("'generator' object is not reversible");
    if (in.is_generator()) {  // next(gen): consumes one item
      if (in.items().empty()) return Value::undefined("No first item, sequence was empty.");
      Value v = in.items().front();
      in.items().erase(in.items().begin());
      return v;
    }
    List items = iterate(in);
    if (items.empty()) return Value::undefined("No " + f + " item, sequence was empty.");
    return f == "first" ? items.front() : items.back();
  }
  if (f == "reverse") {
    if (in.is_generator()) type_error("'generator' object is not reversible");
    if (in.is_string()) {
      std::u32string u = utf8_decode(in.str());
      std::reverse(u.begin(), u.end());
      return Value(utf8_encode(u));
    }
    List items = iterate(in);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (f == "join") {
    std::string sep = arg_or(a, 0, "d", Value("")).to_str();
    const Value* attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(in)) {
      if (!first) out += sep;
      first = false;
      out += (attr && !attr->is_none() ? attr_path(v, attr->to_str()) : v).to_str();
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (f == "replace") {
    if (a.pos.size() < 2) type_error("replace filter needs old and new");
    const Value& cnt = arg_or(a, 2, "count", kNone);
    return Value(py_replace(in.to_str(), a.pos[0].to_str(), a.pos[1].to_str(), cnt.is_none() ? -1 : to_int_arg(cnt, "replace")));
  }
  if (f == "indent")
    return Value(do_indent(in.to_str(), arg_or(a, 0, "width", Value(4)), arg_or(a, 1, "first", kFalse).truthy(),
                           arg_or(a, 2, "blank", kFalse).truthy()));
  if (f == "int") {
    const Value& dflt = arg_or(a, 0, "default", Value(0));
    if (in.is_int() || in.is_bool()) return Value(in.as_int());
    if (in.is_float()) return Value(static_cast<int64_t>(in.as_double()));
    if (in.is_string()) {
      if (auto v = parse_number(in.str(), true)) return *v;
    }
    return dflt;
  }
  if (f == "float") {
    const Value& dflt = arg_or(a, 0, "default", Value(0.0));
    if (in.is_number()) return Value(in.as_double());
    if (in.is_string()) {
      if (auto v = parse_number(in.str(), false)) return *v;
    }
    return dflt;
  }
  if (f == "abs") {
    if (in.is_float()) return Value(std::fabs(in.as_double()));
    if (in.is_int() || in.is_bool()) return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
    type_error("bad operand type for abs(): '" + in.type_name() + "'");
  }
  if (f == "round") {
    if (!in.is_number()) type_error("round: expected a number, got " + in.type_name());
    return do_round(in, to_int_arg(arg_or(a, 0, "precision", Value(0)), "round"), arg_or(a, 1, "method", Value("common")).to_str());
  }
  if (f == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char c : in.to_str()) {
      bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (f == "sort" || f == "unique" || f == "min" || f == "max") {
    bool reverse = f == "sort" && arg_or(a, 0, "reverse", kFalse).truthy();
    bool cs = arg_or(a, f == "sort" ? 1 : 0, "case_sensitive", kFalse).truthy();
    const Value& attr = arg_or(a, f == "sort" ? 2 : 1, "attribute", kNone);
    auto key = [&](const Value& v) { return sort_key(attr.is_none() ? v : attr_path(v, attr.to_str()), cs); };
    List items = iterate(in);
    if (f == "unique") {
      List out, seen;
      for (const Value& v : items) {
        Value k = key(v);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
          seen.push_back(k);
          out.push_back(v);
        }
      }
      return Value::list(std::move(out));
    }
    if (f == "min" || f == "max") {
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i) {
        bool better = f == "min" ? less(key(items[i]), key(items[best])) : less(key(items[best]), key(items[i]));
        if (better) best = i;
      }
      return items[best];
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? less(key(y), key(x)) : less(key(x), key(y));
    });
    return Value::list(std::move(items));
  }
  if (f == "dictsort") {
    if (!in.is_dict()) type_error("dictsort: expected a mapping");
    bool cs = arg_or(a, 0, "case_sensitive", kFalse).truthy();
    std::string by = arg_or(a, 1, "by", Value("key")).to_str();
    bool reverse = arg_or(a, 2, "reverse", kFalse).truthy();
    size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
    if (pos == 2) type_error("You can only sort by either \"key\" or \"value\"");
    CallArgs none;
    List items = dict_method(in, "items", none).items();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
      return reverse ? less(ky, kx) : less(kx, ky);
    });
    return Value::list(std::move(items));
  }
  if (f == "sum") {
    const Value& attr = arg_or(a, 0, "attribute", kNone);
    Value acc = arg_or(a, 1, "start", Value(0));
    for (const Value& v : iterate(in)) {
      Value x = attr.is_none() ? v : attr_path(v, attr.to_str());
      if (!x.is_number() || !acc.is_number()) type_error("sum: unsupported operand types");
      acc = acc.is_float() || x.is_float() ? Value(acc.as_double() + x.as_double()) : Value(acc.as_int() + x.as_int());
    }
    return acc;
  }
  if (f == "map") {
    List out;
    if (!in.truthy()) return Value::list().as_generator();
    const Value* attr = nullptr;
    for (const auto& [k, v] : a.kw)
      if (k == "attribute") attr = &v;
    if (attr) {
      const Value* dflt = nullptr;
      for (const auto& [k, v] : a.kw)
        if (k == "default") dflt = &v;
      for (const Value& item : iterate(in)) {
        Value v = attr_path(item, attr->to_str());
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      }
      return Value::list(std::move(out)).as_generator();
    }
    if (a.pos.empty()) type_error("map: needs a filter name or attribute=");
    std::string name = need_str(a.pos[0], "map");
    if (!is_filter(name)) type_error("map: unsupported filter '" + name + "'");
    CallArgs fargs;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    fargs.kw = a.kw;
    for (const Value& item : iterate(in)) out.push_back(apply_filter(st, name, item, fargs));
    return Value::list(std::move(out)).as_generator();
  }
  if (f == "select") return select_impl(st, in, a, false, true);
  if (f == "reject") return select_impl(st, in, a, false, false);
  if (f == "selectattr") return select_impl(st, in, a, true, true);
  if (f == "rejectattr") return select_impl(st, in, a, true, false);
  type_error("unsupported filter '" + f + "'");
}

bool apply_test(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  auto arg0 = [&]() -> const Value& {
    if (a.pos.empty()) type_error("test '" + t + "' needs an argument");
    return a.pos[0];
  };
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "boolean") return v.is_bool();
  if (t == "true") return v.is_bool() && v.as_bool();
  if (t == "false") return v.is_bool() && !v.as_bool();
  if (t == "integer") return v.is_int();
  if (t == "float") return v.is_float();
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "mapping") return v.is_dict();
  if (t == "iterable" || t == "sequence")
    return v.is_undefined() || v.is_string() || (v.is_list() && (t == "iterable" || !v.is_generator())) || v.is_dict();
  if (t == "callable") return v.is_callable();
  if (t == "escaped") return false;
  if (t == "sameas") {
    const Value& o = arg0();
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
      case K::None:
      case K::Undefined: return true;
      case K::Bool: return v.as_bool() == o.as_bool();
      case K::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
      case K::List:
      case K::Tuple: return &v.items() == &o.items();
      case K::Dict:
      case K::Namespace: return &v.dict_ref() == &o.dict_ref();
      default: return false;
    }
  }
  if (t == "eq" || t == "equalto") return equals(v, arg0());
  if (t == "ne") return !equals(v, arg0());
  if (t == "lt" || t == "lessthan") return less(v, arg0());
  if (t == "gt" || t == "greaterthan") return less(arg0(), v);
  if (t == "le") return !less(arg0(), v);
  if (t == "ge") return !less(v, arg0());
  if (t == "in") return contains(arg0(), v);
  if (t == "odd" || t == "even" || t == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) type_error("test '" + t + "' needs an integer, got " + v.type_name());
    int64_t n = v.as_int();
    if (t == "odd") return ((n % 2) + 2) % 2 == 1;
    if (t == "even") return n % 2 == 0;
    int64_t d = to_int_arg(arg0(), "divisibleby");
    if (d == 0) type_error("integer division or modulo by zero");
    return n % d == 0;
  }
  if (t == "lower" || t == "upper") {
    if (!v.is_string()) return false;
    CallArgs none;
    return str_method(v.str(), t == "lower" ? "islower" : "isupper", none).as_bool();
  }
  (void)st;
  type_error("unsupported test '" + t + "'");
}

bool value_in(const Value& item, const Value& container) { return contains(container, item); }

}  // namespace pagoda::server::jinja
