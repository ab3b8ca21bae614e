// JSON Schema, regular expressions and choices -> GBNF for the grammar engine.
//
// Contract:
// - Supported subset (docs/api.md, "Structured outputs", lists it):
//   * type: string, number, integer, boolean, null, object, array, or a list of them.
//     Without "type", the types whose keywords appear are generated (properties ->
//     object, items -> array, ...); with none, any JSON value.
//   * properties / required: properties in the schema's order (use the ordered_json
//     overloads: nlohmann::json sorts keys), optional ones may be left out (O(n) rules).
//     Required names not under properties take the additionalProperties schema.
//   * additionalProperties: false; true or absent = extra keys (any name but the
//     declared ones) with any JSON value, after the declared properties; a schema.
//   * enum / const (any JSON values, written compactly; filtered by "type"; combined
//     with any other constraining keyword -> UnsupportedSchema). Large enums are
//     prefix-shared, so a 20000-value enum is one parse stack.
//   * anyOf / oneOf (oneOf generated as anyOf: exclusivity not enforced); sibling
//     keywords are merged into each branch when they do not interact; allOf of one
//     schema (more -> UnsupportedSchema "allOf").
//   * items (schema or, drafts 4-7, array + additionalItems), prefixItems,
//     minItems / maxItems.
//   * minLength / maxLength (code points of the decoded string; up to 1,000,000).
//   * pattern (regex subset below; searched, i.e. unanchored ends take any text).
//     With minLength/maxLength only when the pattern's own length range fits them.
//   * format: date, time, date-time (RFC 3339, seconds 00-59, calendar-exact dates with
//     leap years), uuid, email (local@dotted.domain, ASCII); others -> UnsupportedSchema
//     "format".
//   * minimum / maximum / exclusiveMinimum / exclusiveMaximum (draft 4 boolean forms
//     too): integers exact; numbers exact for integer-valued bounds (then no exponent
//     is generated); a non-integer bound on a number -> UnsupportedSchema.
//   * $ref to "#", "#/$defs/...", "#/definitions/..." (any JSON pointer into the
//     document), recursive refs allowed (rules); a ref cycle that consumes no input
//     (left recursion) -> UnsupportedSchema "$ref".
//   * annotations are ignored: title, description, default, examples, $schema, $id,
//     $comment, deprecated, readOnly, writeOnly (and $defs / definitions themselves).
// - Any other keyword that constrains (not, if/then/else, patternProperties,
//   dependentRequired/Schemas, dependencies, uniqueItems, contains, min/maxContains,
//   multipleOf, min/maxProperties, propertyNames, unevaluated*, $dynamicRef...) throws
//   UnsupportedSchema naming it (keyword, and path = JSON pointer to it): output is
//   never silently unconstrained. Keywords of no JSON Schema vocabulary are ignored, as
//   the spec says. A schema no value satisfies (false, minimum > maximum, ...) throws
//   UnsupportedSchema; a malformed one (not an object/bool, bad "type", "required" not
//   a list, ...) std::invalid_argument. Nesting is limited to 64 levels; refs are a
//   work list, not recursion.
// - Generated text: numbers have at most 16 integer digits, 16 fraction digits and 3
//   exponent digits; strings never use \u escapes for surrogates except as a valid
//   pair; whitespace between tokens is one blank or one newline plus up to 20 blanks,
//   so no run of whitespace can go on forever.
// - Regex subset (pattern, guided_regex), Python `re` semantics: literals and escapes
//   (\n \t \r \f \v \0 \xHH \uHHHH, escaped punctuation), ., classes with ranges and
//   negation, \d \w \s \D \W \S (ASCII sets; negated ones ASCII-only, see
//   regex_to_gbnf.cpp), groups ((...), (?:...), (?P<name>...)), alternation,
//   * + ? {m} {m,} {,n} {m,n} (lazy forms accepted: same language), ^ / $ only at the
//   ends of top-level alternatives. Anything else (backreferences, lookaround, \b,
//   flags, possessive quantifiers) throws UnsupportedSchema "pattern".
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
  // The characters of a string valid against the string keywords of `schema` (minLength,
  // maxLength, pattern, format), unquoted and unescaped, each character one `raw_char` (a
  // GBNF element matching one code point, e.g. a class): for formats that write strings
  // raw between markers (Gemma 4's <|"|>text<|"|>). A pattern's own characters come from
  // the pattern; raw_char fills its unanchored ends. Throws as add_json_schema does.
  std::string add_raw_string_content(const nlohmann::ordered_json& schema, std::string_view raw_char,
                                     std::string_view name_hint = "");
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
// The same as a model's whole output (response_format): one optional leading space, so
// a SentencePiece model's natural "▁{" token stays allowed (see gbnf_builder.cpp).
std::string json_schema_output_gbnf(const nlohmann::ordered_json& schema);
std::string json_object_output_gbnf();
std::string regex_to_gbnf(std::string_view pattern);
std::string choice_to_gbnf(const std::vector<std::string>& choices);

// GBNF literal for arbitrary bytes: "..." with \", \\, \n, \r, \t and \xNN escapes.
std::string gbnf_quote(std::string_view bytes);

}  // namespace pagoda::grammar
