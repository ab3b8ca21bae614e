// jinja tests (`x is name`): one table of {name, function} (see builtins.h), each
// jinja2's test of that name. Names that share one implementation pass it on.
#include <array>

#include "jinja/builtins.h"
#include "jinja/methods.h"

namespace pagoda::jinja {

namespace {

using K = Value::Kind;

const Value& arg0(const std::string& t, const CallArgs& a) {
  if (a.pos.empty()) type_error("test '" + t + "' needs an argument");
  return a.pos[0];
}

bool test_defined(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return !v.is_undefined();
}

bool test_undefined(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_undefined();
}

bool test_none(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_none();
}

bool test_boolean(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_bool();
}

bool test_true(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_bool() && v.as_bool();
}

bool test_false(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_bool() && !v.as_bool();
}

bool test_integer(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_int();
}

bool test_float(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_float();
}

bool test_number(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_number();
}

bool test_string(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_string();
}

bool test_mapping(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_dict();
}

bool test_iterable(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_undefined() || v.is_string() || (v.is_list() && (t == "iterable" || !v.is_generator())) || v.is_dict();
}

bool test_callable(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return v.is_callable();
}

bool test_escaped(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return false;
}

bool test_sameas(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  const Value& o = arg0(t, a);
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

bool test_eq(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return equals(v, arg0(t, a));
}

bool test_ne(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return !equals(v, arg0(t, a));
}

bool test_lt(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return less(v, arg0(t, a));
}

bool test_gt(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return less(arg0(t, a), v);
}

bool test_le(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return !less(arg0(t, a), v);
}

bool test_ge(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return !less(v, arg0(t, a));
}

bool test_in(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  return value_in(v, arg0(t, a));
}

bool test_odd(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  if (!v.is_int() && !v.is_bool()) type_error("test '" + t + "' needs an integer, got " + v.type_name());
  int64_t n = v.as_int();
  if (t == "odd") return ((n % 2) + 2) % 2 == 1;
  if (t == "even") return n % 2 == 0;
  int64_t d = to_int_arg(arg0(t, a), "divisibleby");
  if (d == 0) type_error("integer division or modulo by zero");
  return n % d == 0;
}

bool test_lower(RenderState& st, const std::string& t, const Value& v, CallArgs& a) {
  if (!v.is_string()) return false;
  CallArgs none;
  return str_method(v.str(), t == "lower" ? "islower" : "isupper", none).as_bool();
}

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

// Every test the engine implements, by name; the parser resolves names here.
const std::array<NamedTest, 31> kTests = {{
    {"boolean", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_boolean(st, "boolean", v, a); }},
    {"callable", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_callable(st, "callable", v, a); }},
    {"defined", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_defined(st, "defined", v, a); }},
    {"divisibleby", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_odd(st, "divisibleby", v, a); }},
    {"eq", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_eq(st, "eq", v, a); }},
    {"equalto", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_eq(st, "equalto", v, a); }},
    {"escaped", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_escaped(st, "escaped", v, a); }},
    {"even", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_odd(st, "even", v, a); }},
    {"false", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_false(st, "false", v, a); }},
    {"float", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_float(st, "float", v, a); }},
    {"ge", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_ge(st, "ge", v, a); }},
    {"greaterthan", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_gt(st, "greaterthan", v, a); }},
    {"gt", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_gt(st, "gt", v, a); }},
    {"in", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_in(st, "in", v, a); }},
    {"integer", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_integer(st, "integer", v, a); }},
    {"iterable", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_iterable(st, "iterable", v, a); }},
    {"le", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_le(st, "le", v, a); }},
    {"lessthan", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_lt(st, "lessthan", v, a); }},
    {"lower", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_lower(st, "lower", v, a); }},
    {"lt", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_lt(st, "lt", v, a); }},
    {"mapping", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_mapping(st, "mapping", v, a); }},
    {"ne", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_ne(st, "ne", v, a); }},
    {"none", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_none(st, "none", v, a); }},
    {"number", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_number(st, "number", v, a); }},
    {"odd", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_odd(st, "odd", v, a); }},
    {"sameas", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_sameas(st, "sameas", v, a); }},
    {"sequence", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_iterable(st, "sequence", v, a); }},
    {"string", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_string(st, "string", v, a); }},
    {"true", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_true(st, "true", v, a); }},
    {"undefined", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_undefined(st, "undefined", v, a); }},
    {"upper", [](RenderState& st, const Value& v, CallArgs& a) -> bool { return test_lower(st, "upper", v, a); }},
}};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const NamedTest& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace pagoda::jinja
