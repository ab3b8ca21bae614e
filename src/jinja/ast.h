// jinja AST — the parsed form of a template: expressions (Expr) and statements
// (Stmt), produced by jinja::parse() and walked by the interpreter.
//
// Contract:
// - Owned by jinja::Template through unique_ptrs; immutable after parsing, so any
//   number of renders may walk it concurrently.
// - Every node carries the 1-based template line it starts on, for errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace pagoda::jinja {

// How deep a template may nest: blocks in blocks, and any one expression tree
// (parentheses, brackets, operator and filter chains). Real templates nest < 20;
// 256 keeps the recursive parser, interpreter and destructors far from the
// stack's end (100,000 nested parentheses would overflow it).
inline constexpr int kMaxParseDepth = 256;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // children
    Tuple,     // children
    Dict,      // children: key0, value0, key1, value1, ...
    Getattr,   // children[0] . name
    Getitem,   // children[0] [ children[1] ]
    Slice,     // children[0] [ children[1] : children[2] : children[3] ] (null = absent)
    Call,      // children[0] ( children[1..], kwargs )
    Filter,    // children[0] | name ( children[1..], kwargs ); children[0] null in a filter block
    Test,      // children[0] is [not] name ( children[1..], kwargs )
    Unary,     // name in {not, -, +}, children[0]
    Binary,    // children[0] name children[1]; name is an operator, "and", "or", "in", "not in"
    CondExpr,  // children[0] if children[1] else children[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // Test: `is not`
  FilterFn filter = nullptr;  // Filter: resolved by the parser (null with deferred_error)
  TestFn test = nullptr;      // Test: likewise
  int depth = 1;         // 1 + the deepest child (the parser bounds it: kMaxParseDepth)
  // Filter / Test inside an {% if %} naming an unknown filter/test: jinja2
  // defers that error to run time (its "soft frame"); the message is here.
  std::string deferred_error;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Data,         // text
    Print,        // expr
    If,           // branches (cond, body)...; else_body
    For,          // targets in expr [if cond] body [else else_body]
    Set,          // targets (or ns_attr on targets[0]) = expr
    SetBlock,     // targets[0] = rendered body, through filter (may be null)
    Macro,        // name(params = defaults) body
    FilterBlock,  // filter chain (innermost child null) applied to rendered body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string ns_attr;  // Set: `{% set ns.attr = ... %}`
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per param; null = no default
};

}  // namespace pagoda::jinja
