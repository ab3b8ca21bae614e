// jinja filters: one table of {name, function} (see builtins.h), each function
// jinja2's filter of that name with Python semantics. Names that share one
// implementation (aliases such as d / default, or first / last) pass the name on.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>

#include "jinja/budget.h"
#include "jinja/builtins.h"
#include "jinja/methods.h"

namespace pagoda::jinja {

namespace {

const Value kNone = Value::none();
const Value kFalse = Value(false);

TestFn find_test_or_fail(const std::string& name) {
  TestFn t = find_test(name);
  if (!t) type_error("no test named '" + name + "'");
  return t;
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
    bool ok = test.empty() ? v.truthy() : find_test_or_fail(test)(st, v, targs);
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


Value filter_default(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  bool boolean = arg_or(a, 1, "boolean", kFalse).truthy();
  if (in.is_undefined() || (boolean && !in.truthy())) return arg_or(a, 0, "default_value", Value(""));
  return in;
}

Value filter_attr(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  std::string name = need_str(arg_or(a, 0, "name", Value("")), "attr");
  if (in.is_dict() && !is_dict_method(name) && !is_unsafe_method(name)) return Value::undefined(no_attr_hint(in, name));
  return get_attr(in, name);
}

Value filter_safe(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return in.is_string() ? Value::markup(in.str()) : in;
}

Value filter_string(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(in.to_str());
}

Value filter_trim(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(py_strip(in.to_str(), arg_or(a, 0, "chars", kNone), true, true));
}

Value filter_upper(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(py_upper(in.to_str()));
}

Value filter_lower(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(py_lower(in.to_str()));
}

Value filter_capitalize(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(py_capitalize(in.to_str()));
}

Value filter_title(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_escape(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return in.is_markup() ? in : Value::markup(html_escape(in.to_str()));
}

Value filter_length(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(py_len(in));
}

Value filter_tojson(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_items(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  if (in.is_undefined()) return Value::list();
  if (!in.is_dict()) type_error("Can only get item pairs from a mapping.");
  CallArgs none;
  return dict_method(in, "items", none);
}

Value filter_list(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value::list(iterate(in));
}

Value filter_first(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_reverse(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  if (in.is_generator()) type_error("'generator' object is not reversible");
  if (in.is_string()) {
    std::u32string u = decode_utf8(in.str());
    std::reverse(u.begin(), u.end());
    return Value(encode_utf8(u));
  }
  List items = iterate(in);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filter_join(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_replace(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  if (a.pos.size() < 2) type_error("replace filter needs old and new");
  const Value& cnt = arg_or(a, 2, "count", kNone);
  return Value(py_replace(in.to_str(), a.pos[0].to_str(), a.pos[1].to_str(), cnt.is_none() ? -1 : to_int_arg(cnt, "replace")));
}

Value filter_indent(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return Value(do_indent(in.to_str(), arg_or(a, 0, "width", Value(4)), arg_or(a, 1, "first", kFalse).truthy(),
                         arg_or(a, 2, "blank", kFalse).truthy()));
}

Value filter_int(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  const Value& dflt = arg_or(a, 0, "default", Value(0));
  if (in.is_int() || in.is_bool()) return Value(in.as_int());
  if (in.is_float()) return Value(static_cast<int64_t>(in.as_double()));
  if (in.is_string()) {
    if (auto v = parse_number(in.str(), true)) return *v;
  }
  return dflt;
}

Value filter_float(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  const Value& dflt = arg_or(a, 0, "default", Value(0.0));
  if (in.is_number()) return Value(in.as_double());
  if (in.is_string()) {
    if (auto v = parse_number(in.str(), false)) return *v;
  }
  return dflt;
}

Value filter_abs(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  if (in.is_float()) return Value(std::fabs(in.as_double()));
  if (in.is_int() || in.is_bool()) return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
  type_error("bad operand type for abs(): '" + in.type_name() + "'");
}

Value filter_round(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  if (!in.is_number()) type_error("round: expected a number, got " + in.type_name());
  return do_round(in, to_int_arg(arg_or(a, 0, "precision", Value(0)), "round"), arg_or(a, 1, "method", Value("common")).to_str());
}

Value filter_wordcount(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : in.to_str()) {
    bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value filter_sort(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_dictsort(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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

Value filter_sum(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  const Value& attr = arg_or(a, 0, "attribute", kNone);
  Value acc = arg_or(a, 1, "start", Value(0));
  for (const Value& v : iterate(in)) {
    Value x = attr.is_none() ? v : attr_path(v, attr.to_str());
    if (!x.is_number() || !acc.is_number()) type_error("sum: unsupported operand types");
    acc = acc.is_float() || x.is_float() ? Value(acc.as_double() + x.as_double()) : Value(acc.as_int() + x.as_int());
  }
  return acc;
}

Value filter_map(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
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
  FilterFn filter = find_filter(name);
  if (!filter) type_error("map: unsupported filter '" + name + "'");
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : iterate(in)) out.push_back(filter(st, item, fargs));
  return Value::list(std::move(out)).as_generator();
}

Value filter_select(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return select_impl(st, in, a, false, true);
}

Value filter_reject(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return select_impl(st, in, a, false, false);
}

Value filter_selectattr(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return select_impl(st, in, a, true, true);
}

Value filter_rejectattr(RenderState& st, const std::string& f, const Value& in, CallArgs& a) {
  return select_impl(st, in, a, true, false);
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

// Every filter the engine implements, by name; the parser resolves names here.
const std::array<NamedFilter, 39> kFilters = {{
    {"abs", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_abs(st, "abs", in, a); }},
    {"attr", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_attr(st, "attr", in, a); }},
    {"capitalize", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_capitalize(st, "capitalize", in, a); }},
    {"count", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_length(st, "count", in, a); }},
    {"d", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_default(st, "d", in, a); }},
    {"default", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_default(st, "default", in, a); }},
    {"dictsort", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_dictsort(st, "dictsort", in, a); }},
    {"e", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_escape(st, "e", in, a); }},
    {"escape", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_escape(st, "escape", in, a); }},
    {"first", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_first(st, "first", in, a); }},
    {"float", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_float(st, "float", in, a); }},
    {"indent", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_indent(st, "indent", in, a); }},
    {"int", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_int(st, "int", in, a); }},
    {"items", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_items(st, "items", in, a); }},
    {"join", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_join(st, "join", in, a); }},
    {"last", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_first(st, "last", in, a); }},
    {"length", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_length(st, "length", in, a); }},
    {"list", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_list(st, "list", in, a); }},
    {"lower", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_lower(st, "lower", in, a); }},
    {"map", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_map(st, "map", in, a); }},
    {"max", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_sort(st, "max", in, a); }},
    {"min", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_sort(st, "min", in, a); }},
    {"reject", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_reject(st, "reject", in, a); }},
    {"rejectattr", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_rejectattr(st, "rejectattr", in, a); }},
    {"replace", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_replace(st, "replace", in, a); }},
    {"reverse", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_reverse(st, "reverse", in, a); }},
    {"round", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_round(st, "round", in, a); }},
    {"safe", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_safe(st, "safe", in, a); }},
    {"select", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_select(st, "select", in, a); }},
    {"selectattr", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_selectattr(st, "selectattr", in, a); }},
    {"sort", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_sort(st, "sort", in, a); }},
    {"string", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_string(st, "string", in, a); }},
    {"sum", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_sum(st, "sum", in, a); }},
    {"title", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_title(st, "title", in, a); }},
    {"tojson", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_tojson(st, "tojson", in, a); }},
    {"trim", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_trim(st, "trim", in, a); }},
    {"unique", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_sort(st, "unique", in, a); }},
    {"upper", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_upper(st, "upper", in, a); }},
    {"wordcount", [](RenderState& st, const Value& in, CallArgs& a) -> Value { return filter_wordcount(st, "wordcount", in, a); }},
}};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const NamedFilter& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace pagoda::jinja
