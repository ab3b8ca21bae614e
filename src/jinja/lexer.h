// jinja::tokenize — splits a Jinja template into tokens the way jinja2's lexer does
// with trim_blocks=True and lstrip_blocks=True.
//
// Contract:
// - Newlines (\r\n, \r, \n) are normalized to \n and one trailing newline of the
//   source is dropped (jinja2's keep_trailing_newline=False).
// - Whitespace control is applied here, so the parser sees final text: `{%-`,
//   `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` strip
//   all whitespace after it; `%}` and `#}` eat one following newline
//   (trim_blocks); spaces/tabs between a line start and `{%` or `{#` are dropped
//   (lstrip_blocks) unless the tag is `{%+`. Comments produce no token.
// - Throws jinja::SyntaxError (with the line) on an unterminated tag, comment or
//   string, or a character that starts no token.
// - Linear time in the source. Pure function; thread-safe.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::jinja {

struct SyntaxError : std::runtime_error {
  SyntaxError(const std::string& msg, int line) : std::runtime_error(msg), line(line) {}
  int line;
};

struct Token {
  enum class Type { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string value;  // text (Data), decoded string (String), name, operator, number spelling
  int line;
};

std::vector<Token> tokenize(const std::string& source);

}  // namespace pagoda::jinja
