// jinja builtins — the filters, tests, attribute/item lookup and Python methods
// (str, dict, list) available to chat templates, with jinja2 + Python semantics
// under ImmutableSandboxedEnvironment (methods that mutate a list or dict raise
// "unsafe", as the sandbox does).
//
// Contract:
// - find_filter / find_test are the one table each of what the engine implements
//   (filters.cpp, is_tests.cpp): the parser resolves every name there once, and a
//   name they do not know is unsupported. is_method says which
//   attribute calls the parser accepts; get_attr implements them.
// - Filters and tests are pure functions of their arguments; the only shared
//   state is the RenderState passed in (one per render). Thread-safe.
// - Failures throw RuntimeError (one line).
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace pagoda::jinja {

// The filter / test of that name (jinja2's names, aliases included), or nullptr.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
bool is_method(std::string_view name);

// jinja2 Environment.getattr / getitem: `obj.name` tries the attribute (a bound
// method of a str/dict/list) then the item; `obj[key]` the item then the
// attribute. Missing -> undefined; on an undefined obj -> RuntimeError.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// Calls a callable value; an undefined callee raises (as jinja2's Undefined does).
Value call_value(RenderState& st, const Value& callee, CallArgs& args);

// jinja2 make_attrgetter: "a.b.0" -> getitem per part (digits -> int).
Value attr_path(const Value& item, const std::string& path);
// "'T object' has no attribute 'name'", the hint of an undefined attribute.
std::string no_attr_hint(const Value& obj, const std::string& name);

// Python `item in container` (substring, element, or key).
bool value_in(const Value& item, const Value& container);

// Python len(); RuntimeError for types without one.
int64_t py_len(const Value& v);
// Python iteration: list/tuple items, dict keys, string characters; undefined
// iterates as empty. RuntimeError for the rest.
List iterate(const Value& v);
// Python slicing with Python's index rules.
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

}  // namespace pagoda::jinja
