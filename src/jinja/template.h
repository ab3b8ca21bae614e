// jinja::Template — a parsed Jinja template (the chat-template dialect of
// Hugging Face transformers: jinja2 with trim_blocks, lstrip_blocks,
// loopcontrols, in an immutable sandbox), rendered many times.
//
// Contract:
// - The constructor tokenizes and parses the whole template; it throws
//   SyntaxError (message + line) on a syntax error or on a tag, filter, test or
//   method the engine does not implement (see parser.h for the one
//   jinja2-compatible exception inside {% if %}).
// - render() is const and thread-safe: the AST is immutable and each call owns
//   its scopes, values and output. Variables come in as (name, Value) pairs;
//   they are visible to the whole template, and callables among them (globals
//   such as raise_exception) are called with the render's state.
// - Rendering is bounded by Limits (budget.h); exceeding one throws
//   BudgetError naming it. A
//   runtime failure throws RuntimeError with the template line, or RaisedError
//   when a global raised it on the template's behalf.
// - Undefined values follow jinja2's default Undefined: they print as "", are
//   falsy, iterate as empty, compare unequal to everything but undefined, and
//   raise on attribute access, subscripting, calling and arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/value.h"

namespace pagoda::jinja {

// Per-render state shared by the interpreter and the builtins.
struct RenderState {
  explicit RenderState(const Limits& l) : limits(&l), budget(l) {}
  const Limits* limits;
  Budget budget;               // steps, string and list sizes (budget.h)
  std::string* out = nullptr;  // where output goes now (a macro or block set renders into its own)
  size_t total_bytes = 0;      // all bytes written to any buffer in this render
  int64_t iterations = 0;
  int depth = 0;    // macro calls
  int nesting = 0;  // statements and expressions being evaluated, one inside another
  uintptr_t stack_floor = 0;  // nesting stops before the stack pointer goes below this
  enum class Flow { Normal, Break, Continue } flow = Flow::Normal;
  // Every namespace() of the render: emptied when it ends, since a namespace may
  // hold itself (`ns.me = ns`) and reference counting alone would leak it.
  std::vector<Value> namespaces;
};

class Template {
 public:
  explicit Template(const std::string& source, Limits limits = {});
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  std::string render(const std::vector<std::pair<std::string, Value>>& vars) const;

 private:
  Body body_;
  Limits limits_;
};

}  // namespace pagoda::jinja
