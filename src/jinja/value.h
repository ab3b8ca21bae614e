// jinja::Value — the dynamic value model of the Jinja interpreter (chat templates),
// with Python semantics: str()/repr() printing, truthiness, ==, <, and json.dumps.
//
// Contract:
// - A Value is one of: undefined, none, bool, int (int64), float (double),
//   string (UTF-8 bytes; lengths, indices and slices count code points, as Python
//   str does), list / tuple, dict (insertion-ordered, any Value as key, as a
//   Python dict), namespace (a mutable attribute bag, jinja2's namespace()) and
//   callable (globals, macros, bound methods).
// - Lists, dicts and namespaces are shared by reference, as in Python; strings and
//   scalars are values (a string's bytes are shared too, as they never change). Nothing in a Value is shared across renders except what
//   Template::render builds from its own inputs, so concurrent renders of one
//   Template never touch the same mutable object.
// - Python printing: to_str() is str(x) (True, None, 1.0, 1e-05, ['a', 1],
//   {'k': 'v'}), to_repr() is repr(x); dump_json() is json.dumps(x,
//   ensure_ascii=False, indent, separators, sort_keys) byte for byte.
// - Failures: type errors and the like throw jinja::RuntimeError (a one-line
//   message); the interpreter adds the template line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/utf8.h"

namespace pagoda::jinja {

// A runtime failure inside the template (type error, undefined access, limit).
// `line` is 0 until the interpreter attaches the line of the failing statement.
struct RuntimeError : std::runtime_error {
  explicit RuntimeError(const std::string& msg, int line = 0) : std::runtime_error(msg), line(line) {}
  int line;
};

// raise_exception(msg) from the template: the message is the template's.
struct RaisedError : std::runtime_error {
  explicit RaisedError(const std::string& msg) : std::runtime_error(msg) {}
};

class Value;
struct RenderState;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Keyword `name`, else positional `idx`, else nullptr.
  const Value* get(size_t idx, std::string_view name) const;
};

using Function = std::function<Value(RenderState&, CallArgs&)>;
// A filter (`input | name(args)`) and a test (`v is name(args)`), as builtins.h finds them.
using FilterFn = Value (*)(RenderState&, const Value& input, CallArgs& args);
using TestFn = bool (*)(RenderState&, const Value& v, CallArgs& args);

using List = std::vector<Value>;
struct Dict;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value make_namespace();
  static Value callable(std::string name, Function fn);
  static Value from_json(const nlohmann::ordered_json& j);
  // A str marked safe (markupsafe.Markup): `+` with a plain str HTML-escapes the
  // plain one, as jinja2 does after `|safe` / `|escape`.
  static Value markup(std::string s);
  // A list standing for a one-shot generator (what jinja2's map / select /
  // selectattr / reject / rejectattr return): always truthy, no len(), not
  // JSON-serializable, not subscriptable, and iterating it consumes it (a
  // second loop over it sees nothing). Requires: is_list().
  Value as_generator() const;

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_markup() const { return markup_; }
  // Nesting: 0 for scalars, 1 + the deepest item for lists / dicts / namespaces
  // (at most kMaxValueDepth, budget.h: building deeper throws BudgetError).
  int depth() const;
  bool is_generator() const { return gen_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // Requires: Int or Bool
  double as_double() const;                                                   // Requires: is_number()
  // The string; the hint for undefined; the name of a callable.
  const std::string& str() const { return s_ ? *s_ : kEmpty; }
  List& items() const { return *list_; }          // Requires: is_list()
  Dict& dict_ref() const { return *dict_; }       // Requires: is_dict() or is_namespace()
  const Function& fn() const { return *fn_; }     // Requires: is_callable()

  bool truthy() const;
  std::string to_str() const;   // Python str()
  std::string to_repr() const;  // Python repr()
  std::string type_name() const;  // Python type name, for messages

  // json.dumps(x, ensure_ascii=False, indent=indent, separators, sort_keys).
  // indent: nullopt = None, else the indent string (an int n becomes n spaces).
  std::string dump_json(const std::optional<std::string>& indent, const std::string& item_sep,
                        const std::string& key_sep, bool sort_keys, bool ensure_ascii = false) const;

 private:
  void dump_json_to(std::string& out, const std::optional<std::string>& indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys, bool ensure_ascii, int level) const;
  void repr_to(std::string& out) const;

  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  bool gen_ = false;
  bool b_ = false;
  uint16_t depth_ = 0;  // List / Tuple (a Dict keeps its own, as it can grow)
  int64_t i_ = 0;
  double f_ = 0;
  // Shared: strings are immutable, so copying a Value (a name lookup, a list of
  // strings iterated or repeated) never copies the bytes. Null: "".
  std::shared_ptr<const std::string> s_;
  static const std::string kEmpty;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

struct Dict {
  // Add entries through set() / add(), which keep `depth`; direct writes must too.
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;
  void add(Value key, Value v);  // appends without looking for the key (it is new)
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
};

// Python ==.
bool equals(const Value& a, const Value& b);
// Python <, throws RuntimeError on unorderable types.
bool less(const Value& a, const Value& b);

// markupsafe.escape of a plain string (& < > " ').
std::string html_escape(std::string_view s);

// Python float repr (shortest round-trip: 1.0, 0.1, 1e-05, 1e+16, inf, nan).
std::string float_repr(double d);
// Python repr of a str (quote choice and escapes as CPython).
std::string string_repr(std::string_view s);

// Python len() of a str: its code points, as common/utf8.h's decode_utf8 (which,
// with encode_utf8, is the engine's decoder: ill-formed bytes read as U+FFFD)
// counts them.
size_t utf8_length(std::string_view s);
bool is_py_space(char32_t c);

}  // namespace pagoda::jinja
