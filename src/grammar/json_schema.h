// JSON Schema, regular expressions and choices -> GBNF for the grammar engine.
//
// Contract:
// - The supported subset (README "Structured outputs" lists it): type (string,
//   number, integer, boolean, null, object, array, and a list of types), properties /
//   required (properties in the schema's order; optional ones may be left out),
//   additionalProperties (false, true/absent = any extra keys with any JSON, or a
//   schema), enum, const, anyOf / oneOf (oneOf is generated as anyOf: exclusivity is
//   not enforced), allOf of one schema, items / prefixItems, minItems / maxItems,
//   minLength / maxLength, pattern (regex subset below), format for date, time,
//   date-time, uuid, email-like strings, minimum / maximum / exclusiveMinimum /
//   exclusiveMaximum for integers (exact) and numbers (sign / integer-part bounds
//   where exact is not feasible; see json_schema.cpp), $ref to "#/$defs/..." and
//   "#/definitions/..." (recursive refs allowed), and the annotation keywords that do
//   not constrain (title, description, default, examples, $schema, $id, $comment,
//   deprecated, readOnly, writeOnly).
// - Any other keyword that constrains throws UnsupportedSchema naming it (the server
//   answers 400): output is never silently unconstrained.
// - Whitespace between JSON tokens is bounded (no run of whitespace can go on
//   forever) so a model cannot loop in blanks.
// - Regex subset (pattern, guided_regex): literals and escapes, ., character classes
//   with ranges and negation, \d \w \s \D \W \S, groups (capturing, (?:...)),
//   alternation, * + ? {m} {m,} {m,n}, and ^ / $ only at the ends. Anything else
//   (backreferences, lookaround, lazy quantifiers' semantics aside) throws
//   UnsupportedSchema.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::grammar {

class UnsupportedSchema : public std::runtime_error {
 public:
  // keyword: the schema keyword (or "pattern") at fault; path: a JSON pointer to it.
  UnsupportedSchema(const std::string& msg, std::string keyword = {}, std::string path = {})
      : std::runtime_error(msg), keyword(std::move(keyword)), path(std::move(path)) {}
  std::string keyword;
  std::string path;
};

// Builds one GBNF text out of several schemas (tool-call grammars embed one per tool).
class GbnfBuilder {
 public:
  GbnfBuilder();
  // Adds rules matching JSON valid against `schema` and returns the rule name to
  // reference. name_hint becomes the rule-name prefix (sanitized). Throws
  // UnsupportedSchema (or std::invalid_argument for a schema that is not JSON Schema).
  std::string add_json_schema(const nlohmann::json& schema, std::string_view name_hint = "");
  // The same for a schema parsed as ordered_json: properties keep the order of the
  // document. nlohmann::json stores objects sorted by key, so with the overload above
  // properties are generated in alphabetical order (still valid, but not the order the
  // caller wrote); servers should parse request schemas as ordered_json.
  std::string add_json_schema(const nlohmann::ordered_json& schema, std::string_view name_hint = "");
  // Any JSON value / any JSON object.
  std::string add_any_json_value();
  std::string add_any_json_object();
  // A JSON string literal exactly equal to `s` (quoted and escaped).
  std::string add_json_string_literal(std::string_view s);
  // Rules for a regular expression over the whole text; throws UnsupportedSchema.
  std::string add_regex(std::string_view pattern, std::string_view name_hint = "");
  // Adds `name ::= body` verbatim (body in GBNF); returns name.
  std::string add_rule(std::string_view name, std::string_view body);
  // The bounded JSON whitespace rule's name.
  std::string ws();
  // All rules, plus `root ::= <root_rule>`.
  std::string gbnf(std::string_view root_rule) const;

  // Defined in json_schema_internal.h (the regex and number helpers write rules too).
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Convenience: a whole grammar whose root is the schema / any object / the regex / one
// of the strings verbatim.
std::string json_schema_to_gbnf(const nlohmann::json& schema);
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);  // document order
std::string json_object_gbnf();
std::string regex_to_gbnf(std::string_view pattern);
std::string choice_to_gbnf(const std::vector<std::string>& choices);

// GBNF literal for arbitrary bytes: "..." with \", \\, \n, \r, \t and \xNN escapes.
std::string gbnf_quote(std::string_view bytes);

}  // namespace pagoda::grammar
