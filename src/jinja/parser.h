// jinja::parse — builds the AST of a template from its tokens (jinja2's grammar
// and operator precedence).
//
// Contract:
// - Supports the statements chat templates use: if/elif/else, for (with
//   tuple targets, `if` filter, else, loop.*), break/continue (loopcontrols),
//   set (names, tuples, `ns.attr`, block set with an optional filter), macro,
//   filter blocks. Any other tag (call, block, extends, include, import, raw,
//   generation, ...) is rejected with SyntaxError "unsupported tag 'x'".
// - Every filter, test and method name is checked against builtins.h. An
//   unknown one is a SyntaxError ("unsupported filter 'x'") — except directly
//   inside an {% if %} or an inline if, where jinja2 itself only fails when the
//   branch runs: there the node records the error and raises at render time, so
//   templates that guard such a call render as the reference does.
// - Throws SyntaxError with the offending line. Pure; thread-safe.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace pagoda::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace pagoda::jinja
