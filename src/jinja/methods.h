// jinja methods — Python's str / dict / list methods as templates call them
// (`s.split('</think>')`, `d.get('k', x)`, `d.items()`), bound to their object,
// plus the small argument helpers the filters share.
//
// Contract:
// - Semantics are CPython's (split with and without a separator, strip with a
//   character set, replace with a count, find/count in code points, ...). Case
//   mapping is Unicode simple case mapping (glibc C.UTF-8).
// - Methods that mutate a list or dict (append, pop, update, ...) are refused
//   the way ImmutableSandboxedEnvironment refuses them: calling one throws
//   RuntimeError "access to attribute 'append' of 'list' object is unsafe."
// - Pure functions; thread-safe. Failures throw RuntimeError (one line).
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace pagoda::jinja {

bool is_str_method(std::string_view name);
bool is_dict_method(std::string_view name);
bool is_list_method(std::string_view name);
bool is_unsafe_method(std::string_view name);

// `obj.m` for a method m of obj's type: a callable bound to obj.
// Requires: obj is a str, dict or list/tuple and m one of its methods above.
Value bound(const Value& obj, const std::string& m);

Value str_method(const std::string& s, const std::string& m, CallArgs& a);
Value dict_method(const Value& d, const std::string& m, CallArgs& a);

std::string py_lower(std::string s);
std::string py_upper(std::string s);
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string py_capitalize(const std::string& s);
List py_splitlines(const std::string& s);

[[noreturn]] void type_error(const std::string& msg);
// Keyword `name`, else positional `idx`, else dflt.
Value arg_or(const CallArgs& a, size_t idx, std::string_view name, const Value& dflt);
int64_t to_int_arg(const Value& v, const char* what);
std::string need_str(const Value& v, const char* what);

}  // namespace pagoda::jinja
