// Internals shared by json_schema.cpp (schemas), regex_to_gbnf.cpp (regular
// expressions) and json_schema_numbers.cpp (digit-range constructions). Not a public
// header: only those files include it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace pagoda::grammar {

// Rule store behind GbnfBuilder. Rules keep insertion order so the text reads top-down.
struct GbnfBuilder::Impl {
  std::vector<std::pair<std::string, std::string>> rules;  // name, body ("" = reserved)
  std::unordered_map<std::string, size_t> rule_idx;        // name -> index in rules
  std::unordered_map<std::string, std::string> rule_by_body;  // dedupe of helper rules
  std::unordered_map<std::string, int> next_suffix;           // base name -> last suffix
  size_t total_bytes = 0;
  // Shared JSON rules, created on first use (names may carry a suffix when a caller
  // took the plain name first).
  std::unordered_map<std::string, std::string> common;

  // 4 MiB of GBNF: far above any sane schema (a 10k-value enum is ~200 KiB) and below
  // what would make the grammar parser (1 MiB default text limit) the first to complain
  // about something this side could have named.
  static constexpr size_t kMaxTotalBytes = 4u << 20;

  std::string unique_name(std::string_view hint);
  // A rule named after hint with this body; an identical body defined earlier through
  // define() is reused instead.
  std::string define(std::string_view hint, const std::string& body);
  // A name whose body comes later (recursive $ref targets).
  std::string reserve(std::string_view hint);
  void set_body(const std::string& name, const std::string& body);

  // The JSON building blocks (names of rules).
  std::string ws();
  std::string json_char();    // one character inside a JSON string, raw or escaped
  std::string json_string();  // any JSON string
  std::string json_number();
  std::string json_integer();
  std::string json_value();
  std::string json_object();
  std::string json_array();
};

namespace detail {

constexpr int64_t kUnbounded = -1;  // as a repetition maximum: no maximum

// Sorted, disjoint, non-adjacent code point ranges [first, second].
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
CodepointRanges normalize(CodepointRanges r);
// All Unicode scalar values (surrogates excluded) not in r.
CodepointRanges complement(const CodepointRanges& r);

// item{min,max} in GBNF; item must already be one element (a name, literal, class or
// parenthesized group). Counts above 1000 are built from blocks of 32 so the grammar
// compiler's expansion stays small (maxLength 100000 is ~3 rules of 32 + 3 of ~100,
// not 100000 nested options). Throws UnsupportedSchema past 1,000,000.
std::string repeat(GbnfBuilder::Impl& b, const std::string& item, int64_t min, int64_t max,
                   std::string_view keyword, const std::string& path);

// A GBNF char class for the ranges, in the grammar's code-point semantics.
std::string char_class(const CodepointRanges& r);
// One code point of the set written inside a JSON string: raw when JSON allows it,
// the escape JSON requires for '"', '\\' and control characters.
std::string json_string_char_set(GbnfBuilder::Impl& b, const CodepointRanges& r);

// How a regex is placed: over a whole text (guided_regex), or as a JSON Schema
// "pattern" inside a JSON string (content JSON-escaped; unanchored ends may be
// surrounded by any characters, as the pattern is searched, not fully matched), or
// searched in a string written raw (kRawStringSearch: no escapes, the unanchored ends
// surrounded by any characters of the caller's raw_char rule).
enum class RegexMode { kWholeText, kJsonStringSearch, kRawStringSearch };
struct RegexResult {
  std::string expr;             // GBNF expression
  int64_t min_len = 0;          // code points in the (decoded) text
  int64_t max_len = kUnbounded;
};
RegexResult regex_expr(GbnfBuilder::Impl& b, std::string_view pattern, RegexMode mode,
                       std::string_view name_hint, const std::string& path, const std::string& raw_char = {});

// Digit ranges. Magnitudes are capped at kMaxMagnitude (16 digits): integers beyond
// are not generated (doubles stop being exact at 2^53 ~ 9.007e15 anyway).
constexpr int64_t kMaxMagnitude = 9999999999999999;
// Canonical decimal integers in [lo, hi] (no leading zeros; "-" for negatives; no
// "-0"). Requires -kMaxMagnitude <= lo <= hi <= kMaxMagnitude.
std::string integer_range(int64_t lo, int64_t hi);
// Decimal numbers (no exponent) x with lo <(=) x <(=) hi for integer-valued bounds;
// nullopt = no bound. Returns "" when no number fits.
struct NumberBound {
  int64_t value;
  bool exclusive;
};
std::string number_range(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

std::string utf8_encode(uint32_t cp);
// Code points of UTF-8 text (no validation: callers pass text nlohmann produced).
std::vector<uint32_t> decode_utf8(std::string_view s);

// [a-zA-Z0-9-]+ from any hint ("r" when nothing is left).
std::string sanitize_rule_name(std::string_view hint);

// The expression (usually a rule name) for `schema`; rule names start with prefix.
std::string compile_json_schema(GbnfBuilder::Impl& b, const nlohmann::ordered_json& schema,
                                const std::string& prefix);
// The content of a string valid against the string keywords of `schema` (minLength,
// maxLength, pattern, format), written raw: each character one `raw_char`.
std::string compile_string_content(GbnfBuilder::Impl& b, const nlohmann::ordered_json& schema,
                                   const std::string& prefix, const std::string& raw_char);

// json_schema_strings.cpp.
// The content rule of a string format (date, time, date-time, uuid, email); the
// length range of the content (code points) goes to min_len / max_len. Throws
// UnsupportedSchema naming "format" for others.
std::string format_rule(GbnfBuilder::Impl& b, const std::string& format, const std::string& path,
                        int64_t& min_len, int64_t& max_len);
// The sorted, distinct texts[lo, hi) sharing their first `depth` code points, as GBNF.
std::string literal_trie(GbnfBuilder::Impl& b, const std::string& rule_hint,
                         const std::vector<std::u32string>& texts, size_t lo, size_t hi, size_t depth,
                         int level);
// A JSON string (quotes included) whose decoded text is none of `names`.
std::string key_not_in(GbnfBuilder::Impl& b, const std::string& prefix, const std::vector<std::string>& names);

}  // namespace detail
}  // namespace pagoda::grammar
