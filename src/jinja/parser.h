// jinja::parse — builds the AST of a template from its tokens (jinja2's grammar
// and operator precedence).
//
// Contract:
// - Supports the statements chat templates use: if/elif/else, for (with
//   tuple targets, `if` filter, else, loop.*), break/continue (loopcontrols),
//   set (names, tuples, `ns.attr`, block set with an optional filter), macro,
//   filter blocks. Any other tag (call, block, extends, include, import, raw,
//   generation, ...) is rejected with SyntaxError "unsupported tag 'x'".
// - Every filter and test name is resolved once, here, to its function in the
//   tables of builtins.h (find_filter / find_test); method names are checked
//   against is_method. An unknown one is a SyntaxError ("unsupported filter 'x'") — except directly
//   inside an {% if %} or an inline if, where jinja2 itself only fails when the
//   branch runs: there the node records the error and raises at render time, so
//   templates that guard such a call render as the reference does.
// - Hostile input: nesting deeper than kMaxParseDepth (ast.h: 256) — blocks,
//   parentheses, brackets, or an expression tree grown by operator, filter or
//   postfix chains — is a SyntaxError "template nested deeper than 256 levels",
//   so neither this recursive parser nor the recursive interpreter and
//   destructors can run off the stack. Time is linear in the tokens.
// - Throws SyntaxError with the offending line. Pure; thread-safe.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace pagoda::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace pagoda::jinja
