// JSON Schema -> GBNF. One SchemaCompiler per add_json_schema call walks the schema
// and emits rules into the builder's store; shared JSON rules (ws, string, number,
// value) are made once per builder.
//
// Shape of the output, by construct:
// - object: "{" ws B0 "}" where, for the properties p0..pn-1 in schema order (each
//   key-value "kv_i" ends in ws), A_i = the rest after something was written
//   (("," ws kv_i)? for an optional property, "," ws kv_i for a required one,
//   followed by A_i+1) and B_i = nothing written yet (kv_i A_i+1 | B_i+1, the second
//   branch only when p_i is optional). That is one rule per property: optional
//   properties cost O(n), not the 2^n orderings a naive expansion would.
// - extra keys (additionalProperties true/absent/a schema) come after the declared
//   ones and are any string that is not a declared name (a trie complement), so a
//   duplicate key cannot override a declared value.
// - arrays: "[" ws items "]" with the count and prefixItems walked position by
//   position; strings: "\"" char{min,max} "\"".
// - $ref targets become named rules, generated once, so recursive schemas are finite;
//   a $ref cycle that consumes no input (left recursion) is refused.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "common/json_text.h"
#include "grammar/json_schema_internal.h"

namespace pagoda::grammar {

using detail::kUnbounded;
// ordered_json throughout: properties are generated in the order the schema lists them.
using json = nlohmann::ordered_json;

namespace {

std::string pointer_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string where(const std::string& path) { return path.empty() ? "/" : path; }

[[noreturn]] void unsupported(const std::string& keyword, const std::string& path, const std::string& why) {
  throw UnsupportedSchema("JSON Schema keyword '" + keyword + "' at " + where(path) + ": " + why, keyword,
                          path);
}

[[noreturn]] void invalid(const std::string& path, const std::string& why) {
  throw std::invalid_argument("invalid JSON Schema at " + where(path) + ": " + why);
}

}  // namespace

// ---------------------------------------------------------------- schema compiler

namespace {

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

// JSON Schema keywords (any draft) that constrain and that this compiler does not
// implement. Keywords outside every vocabulary are ignored, as the spec says.
const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> k = {
      "not",           "if",           "then",          "else",
      "patternProperties", "dependentRequired", "dependentSchemas", "dependencies",
      "uniqueItems",   "contains",     "minContains",   "maxContains",
      "multipleOf",    "minProperties", "maxProperties", "propertyNames",
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
      "$dynamicAnchor", "$recursiveAnchor", "divisibleBy", "disallow", "extends",
      "contentSchema"};
  return k;
}

const std::vector<std::string> kTypeNames = {"null", "boolean", "object", "array", "number", "integer", "string"};

// Keyword families, used to infer the types of a schema without "type".
const std::set<std::string> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeywords = {"items", "prefixItems", "minItems", "maxItems", "additionalItems"};
const std::set<std::string> kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// Thrown for a (sub)schema that no value satisfies (false, an empty enum, minimum >
// maximum...). Callers that can drop the branch do; otherwise it becomes
// UnsupportedSchema at the top.
struct NeverMatches {
  std::string path;
  std::string why;
};


bool is_constraining(const std::string& key) { return !annotation_keywords().count(key); }

std::string json_type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d) ? "integer" : "number";
    }
    default: return "unknown";
  }
}

class SchemaCompiler {
 public:
  SchemaCompiler(GbnfBuilder::Impl& b, const json& root, std::string prefix)
      : b_(b), root_(root), prefix_(std::move(prefix)) {}

  std::string compile() {
    std::string expr;
    try {
      expr = visit(root_, "", 0);
      while (!pending_refs_.empty()) {
        const std::string ref = pending_refs_.back();
        pending_refs_.pop_back();
        current_ref_ = ref;
        consumed_ = false;
        b_.set_body(ref_rules_.at(ref), visit(resolve(ref, ref_path_.at(ref)), ref.substr(1), 0));
      }
      check_left_recursion();
    } catch (const NeverMatches& e) {
      throw UnsupportedSchema("JSON Schema at " + where(e.path) + " accepts no value: " + e.why, "", e.path);
    }
    return expr;
  }

 private:
  GbnfBuilder::Impl& b_;
  const json& root_;
  std::string prefix_;
  // 64 nested schemas: deeper than any real schema, and bounds this recursion
  // (recursive data goes through $ref rules, which do not nest here).
  static constexpr int kMaxDepth = 64;

  std::map<std::string, std::string> ref_rules_;  // JSON pointer -> rule name
  std::vector<std::string> pending_refs_;         // reserved, body not generated yet
  // Left-recursion check: rule (pointer, "" = root) -> pointers referenced before any
  // input is consumed.
  std::string current_ref_;
  bool consumed_ = false;
  std::map<std::string, std::set<std::string>> direct_refs_;
  std::map<std::string, std::string> ref_path_;   // pointer -> where it was first referenced

  std::string name(std::string_view part) const {
    return prefix_.empty() ? std::string(part) : prefix_ + "-" + std::string(part);
  }

  std::string visit(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth)
      throw UnsupportedSchema("JSON Schema nested deeper than 64 levels at " + where(path), "", path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return b_.json_value();
      throw NeverMatches{path, "the schema is false"};
    }
    if (!s.is_object()) invalid(path, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    for (const auto& [key, value] : s.items()) {
      if (unsupported_keywords().count(key)) unsupported(key, path + "/" + pointer_escape(key), "not supported");
    }
    if (s.contains("$ref")) return visit_ref(s, path, depth);
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array()) invalid(path + "/allOf", "allOf must be an array");
      if (all.size() > 1)
        unsupported("allOf", path + "/allOf", "only an allOf of one schema is supported, not " +
                                                   std::to_string(all.size()));
      json rest = s;
      rest.erase("allOf");
      if (all.empty()) return visit(rest, path, depth + 1);
      return visit(merge(rest, all[0], path + "/allOf/0"), path, depth + 1);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) return visit_any_of(s, path, depth);
    if (s.contains("enum") || s.contains("const")) return visit_enum(s, path);
    return visit_types(s, path, depth);
  }

  // ---- combinators

  // a AND b as one schema, for keywords that are independent. Keywords that read each
  // other (properties/additionalProperties, items/prefixItems) must all come from one
  // side; a clash of values cannot be combined here.
  json merge(json a, const json& b, const std::string& path) {
    if (b.is_boolean()) {
      if (b.get<bool>()) return a;
      throw NeverMatches{path, "the schema is false"};
    }
    if (!b.is_object()) invalid(path, "a schema must be an object or a boolean");
    if (!a.is_object()) return b;
    for (const auto& group : {std::set<std::string>{"properties", "additionalProperties"},
                              std::set<std::string>{"items", "prefixItems", "additionalItems"}}) {
      bool in_a = false, in_b = false;
      for (const auto& k : group) {
        in_a |= a.contains(k);
        in_b |= b.contains(k);
      }
      if (in_a && in_b) {
        for (const auto& k : group)
          if (a.contains(k) && b.contains(k) && a[k] != b[k])
            unsupported(k, path + "/" + k, "cannot combine it with a sibling '" + k + "'");
        for (const auto& k : group)
          if (a.contains(k) != b.contains(k))
            unsupported(k, path + "/" + k, "'properties', 'additionalProperties' and 'items' "
                                           "must come from one schema of a combination");
      }
    }
    for (const auto& [key, value] : b.items()) {
      if (!is_constraining(key) && key != "$defs" && key != "definitions") continue;
      if (!a.contains(key)) {
        a[key] = value;
        continue;
      }
      if (a[key] == value || !is_constraining(key)) continue;
      if (key == "required" && a[key].is_array() && value.is_array()) {
        for (const auto& r : value)
          if (std::find(a[key].begin(), a[key].end(), r) == a[key].end()) a[key].push_back(r);
        continue;
      }
      if (key == "type") {
        std::set<std::string> ta = types_of(a, path), tb = types_of(b, path), both;
        for (const auto& t : ta) {
          if (tb.count(t)) both.insert(t);
          else if (t == "integer" && tb.count("number")) both.insert("integer");
        }
        for (const auto& t : tb)
          if (t == "integer" && ta.count("number")) both.insert("integer");
        if (both.empty()) throw NeverMatches{path, "the combined types have nothing in common"};
        a["type"] = json(std::vector<std::string>(both.begin(), both.end()));
        continue;
      }
      unsupported(key, path + "/" + pointer_escape(key), "cannot combine two different values of it");
    }
    return a;
  }

  std::string visit_any_of(const json& s, const std::string& path, int depth) {
    if (s.contains("anyOf") && s.contains("oneOf"))
      unsupported("oneOf", path + "/oneOf", "anyOf and oneOf in one schema are not supported");
    const std::string key = s.contains("anyOf") ? "anyOf" : "oneOf";
    const json& alts = s[key];
    if (!alts.is_array() || alts.empty()) invalid(path + "/" + key, key + " must be a non-empty array");
    json rest = s;
    rest.erase(key);
    bool has_siblings = false;
    for (const auto& [k, v] : rest.items()) has_siblings |= is_constraining(k);
    std::vector<std::string> exprs;
    std::string last_why;
    for (size_t i = 0; i < alts.size(); ++i) {
      const std::string alt_path = path + "/" + key + "/" + std::to_string(i);
      try {
        std::string e = has_siblings ? visit(merge(rest, alts[i], alt_path), alt_path, depth + 1)
                                     : visit(alts[i], alt_path, depth + 1);
        if (std::find(exprs.begin(), exprs.end(), e) == exprs.end()) exprs.push_back(e);
      } catch (const NeverMatches& e) {
        last_why = e.why;  // a branch no value fits is dropped
      }
    }
    if (exprs.empty()) throw NeverMatches{path, "no alternative of " + key + " accepts a value (" + last_why + ")"};
    if (exprs.size() == 1) return exprs[0];
    std::string body;
    for (size_t i = 0; i < exprs.size(); ++i) body += (i ? " | " : "") + exprs[i];
    return b_.define(name("alt"), body);
  }

  // ---- $ref

  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#')
      unsupported("$ref", path + "/$ref", "only references inside the document (\"#/...\") are supported, not '" +
                                              ref + "'");
    if (ref == "#") return root_;
    if (ref.size() < 2 || ref[1] != '/') unsupported("$ref", path + "/$ref", "anchors are not supported: '" + ref + "'");
    const json* cur = &root_;
    size_t i = 2;
    while (true) {
      size_t j = ref.find('/', i);
      std::string token = ref.substr(i, j == std::string::npos ? std::string::npos : j - i);
      std::string decoded;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() && (token[k + 1] == '0' || token[k + 1] == '1')) {
          decoded += token[k + 1] == '0' ? '~' : '/';
          ++k;
        } else if (token[k] == '%' && k + 2 < token.size() && std::isxdigit(static_cast<unsigned char>(token[k + 1])) &&
                   std::isxdigit(static_cast<unsigned char>(token[k + 2]))) {
          decoded += static_cast<char>(std::stoi(token.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          decoded += token[k];
        }
      }
      if (cur->is_object() && cur->contains(decoded)) {
        cur = &(*cur)[decoded];
      } else if (cur->is_array() && !decoded.empty() &&
                 decoded.find_first_not_of("0123456789") == std::string::npos && decoded.size() < 10 &&
                 std::stoul(decoded) < cur->size()) {
        cur = &(*cur)[std::stoul(decoded)];
      } else {
        invalid(path + "/$ref", "$ref '" + ref + "' points to nothing");
      }
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return *cur;
  }

  std::string visit_ref(const json& s, const std::string& path, int depth) {
    if (!s["$ref"].is_string()) invalid(path + "/$ref", "$ref must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    const json& target = resolve(ref, path);
    json rest = s;
    rest.erase("$ref");
    bool has_siblings = false;
    for (const auto& [k, v] : rest.items()) has_siblings |= is_constraining(k) && k != "$defs" && k != "definitions";
    if (has_siblings) return visit(merge(rest, target, path + "/$ref"), path, depth + 1);
    if (!consumed_) direct_refs_[current_ref_].insert(ref);
    if (!ref_path_.count(ref)) ref_path_[ref] = path;
    if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
    std::string last = ref.substr(ref.rfind('/') + 1);
    const std::string rule = b_.reserve(name(last.empty() || ref == "#" ? "ref" : last));
    ref_rules_[ref] = rule;
    // Generated later by compile(), from a work list: a $ref is a rule boundary, so a
    // chain of refs costs no recursion here.
    pending_refs_.push_back(ref);
    return rule;
  }

  void check_left_recursion() {
    // DFS over "references before consuming input"; a cycle is left recursion.
    std::map<std::string, int> state;  // 1 = on stack, 2 = done
    std::function<void(const std::string&)> dfs = [&](const std::string& r) {
      state[r] = 1;
      for (const std::string& next : direct_refs_[r]) {
        if (state[next] == 1)
          throw UnsupportedSchema("$ref '" + next + "' at " + ref_path_[next] +
                                      "/$ref refers back to itself without consuming input (left recursion)",
                                  "$ref", ref_path_[next] + "/$ref");
        if (state[next] == 0) dfs(next);
      }
      state[r] = 2;
    };
    dfs("");
  }

  // ---- enum / const

  std::string visit_enum(const json& s, const std::string& path) {
    std::vector<json> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) invalid(path + "/enum", "enum must be an array");
      for (const auto& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("const")) {
      if (s.contains("enum")) {
        const bool in = std::find(values.begin(), values.end(), s["const"]) != values.end();
        values.clear();
        if (in) values.push_back(s["const"]);
      } else {
        values.push_back(s["const"]);
      }
    }
    std::set<std::string> types;
    if (s.contains("type")) types = types_of(s, path);
    for (const auto& [key, v] : s.items()) {
      if (key == "enum" || key == "const" || key == "type" || !is_constraining(key)) continue;
      unsupported(key, path + "/" + pointer_escape(key), "combining it with enum/const is not supported");
    }
    std::vector<std::u32string> texts;
    for (const json& v : values) {
      if (!types.empty()) {
        const std::string t = json_type_of(v);
        if (!types.count(t) && !(t == "integer" && types.count("number"))) continue;
      }
      const std::vector<uint32_t> cps = detail::decode_utf8(dump_json(v));
      texts.emplace_back(cps.begin(), cps.end());
    }
    if (texts.empty()) throw NeverMatches{path, "no value of enum/const fits"};
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    const std::string expr = detail::literal_trie(b_, name("enum"), texts, 0, texts.size(), 0, 0);
    if (b_.rule_idx.count(expr) || expr.find(' ') == std::string::npos) return expr;
    return b_.define(name("enum"), expr);
  }

  // ---- types

  std::set<std::string> types_of(const json& s, const std::string& path) {
    std::set<std::string> types;
    if (!s.contains("type")) return types;
    const json& t = s["type"];
    auto add = [&](const json& one) {
      if (!one.is_string() || std::find(kTypeNames.begin(), kTypeNames.end(), one.get<std::string>()) == kTypeNames.end())
        invalid(path + "/type", "unknown type " + one.dump());
      types.insert(one.get<std::string>());
    };
    if (t.is_array()) {
      if (t.empty()) throw NeverMatches{path, "type is an empty list"};
      for (const auto& one : t) add(one);
    } else {
      add(t);
    }
    return types;
  }

  std::string visit_types(const json& s, const std::string& path, int depth) {
    std::set<std::string> types = types_of(s, path);
    if (types.empty()) {
      // No "type": every type is allowed, and each family of keywords constrains only its
      // own. Generating only the families whose keywords appear is a subset of that
      // (any object valid under "properties" is valid), and what a schema without "type"
      // but with "properties" means in practice.
      for (const auto& [key, v] : s.items()) {
        if (kObjectKeywords.count(key)) types.insert("object");
        if (kArrayKeywords.count(key)) types.insert("array");
        if (kStringKeywords.count(key)) types.insert("string");
        if (kNumberKeywords.count(key)) types.insert("number");
      }
      if (types.empty()) return b_.json_value();
    }
    if (types.count("number")) types.erase("integer");
    std::vector<std::string> alts;
    for (const std::string& t : kTypeNames) {
      if (!types.count(t)) continue;
      if (t == "null") alts.push_back("\"null\"");
      if (t == "boolean") alts.push_back("(\"true\" | \"false\")");
      if (t == "string") alts.push_back(visit_string(s, path));
      if (t == "integer") alts.push_back(visit_number(s, path, true));
      if (t == "number") alts.push_back(visit_number(s, path, false));
      if (t == "object") alts.push_back(visit_object(s, path, depth));
      if (t == "array") alts.push_back(visit_array(s, path, depth));
    }
    if (alts.size() == 1) return alts[0];
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return b_.define(name("value"), body);
  }

  int64_t count_keyword(const json& s, const std::string& key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number()) invalid(path + "/" + key, key + " must be a non-negative integer");
    const double d = v.get<double>();
    if (!(d >= 0) || d != std::floor(d)) invalid(path + "/" + key, key + " must be a non-negative integer");
    if (d > 1e12) return 1000000000000;  // rejected by repeat() with the keyword named
    return static_cast<int64_t>(d);
  }

  // ---- strings

  std::string visit_string(const json& s, const std::string& path) {
    const std::string content = string_content(s, path, "");
    if (content.empty()) return b_.json_string();
    return b_.define(name("string"), "\"\\\"\" " + content + " \"\\\"\"");
  }

 public:
  // The characters of a string valid against s's string keywords (minLength, maxLength,
  // pattern, format), without the quotes: JSON-escaped when raw_char is empty, else
  // written raw, each character one raw_char (public for compile_string_content). Any
  // JSON string: "" (the shared string rule serves it).
  std::string string_content(const json& s, const std::string& path, const std::string& raw_char) {
    const bool raw = !raw_char.empty();
    const int64_t min_len = count_keyword(s, "minLength", path, 0);
    const int64_t max_len = count_keyword(s, "maxLength", path, kUnbounded);
    if (max_len != kUnbounded && max_len < min_len) throw NeverMatches{path, "minLength > maxLength"};
    const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
    if (has_pattern && !s["pattern"].is_string()) invalid(path + "/pattern", "pattern must be a string");
    if (has_format && !s["format"].is_string()) invalid(path + "/format", "format must be a string");
    if (has_pattern && has_format)
      unsupported("format", path + "/format", "combining format with pattern is not supported");
    if (has_pattern || has_format) {
      // The content's own length range must already satisfy minLength/maxLength; a
      // pattern cannot be intersected with a length bound in this construction.
      std::string body;
      int64_t lo = 0, hi = kUnbounded;
      if (has_pattern) {
        detail::RegexResult r = detail::regex_expr(
            b_, s["pattern"].get<std::string>(),
            raw ? detail::RegexMode::kRawStringSearch : detail::RegexMode::kJsonStringSearch, name("pattern"),
            path + "/pattern", raw_char);
        body = r.expr;
        lo = r.min_len;
        hi = r.max_len;
      } else {
        // The formats' characters are ASCII that JSON writes unescaped: the same raw.
        body = detail::format_rule(b_, s["format"].get<std::string>(), path, lo, hi);
      }
      const std::string what = has_pattern ? "pattern" : "format";
      if (lo < min_len)
        unsupported("minLength", path + "/minLength",
                    "combining minLength with a " + what + " that allows shorter strings is not supported");
      if (max_len != kUnbounded && (hi == kUnbounded || hi > max_len))
        unsupported("maxLength", path + "/maxLength",
                    "combining maxLength with a " + what + " that allows longer strings is not supported");
      return body;
    }
    if (min_len == 0 && max_len == kUnbounded) return raw ? raw_char + "*" : "";
    return detail::repeat(b_, raw ? raw_char : b_.json_char(), min_len, max_len,
                          min_len > 1000000 ? "minLength" : "maxLength", path);
  }

 private:
  // ---- numbers

  struct RawBound {
    long double value;
    bool exclusive;
  };

  std::optional<RawBound> bound(const json& s, const std::string& plain, const std::string& excl,
                                const std::string& path) {
    std::optional<RawBound> out;
    auto num = [&](const std::string& key) -> long double {
      const json& v = s[key];
      if (!v.is_number()) invalid(path + "/" + key, key + " must be a number");
      if (v.is_number_integer()) return v.is_number_unsigned() ? static_cast<long double>(v.get<uint64_t>())
                                                              : static_cast<long double>(v.get<int64_t>());
      return static_cast<long double>(v.get<double>());
    };
    if (s.contains(plain)) out = RawBound{num(plain), false};
    if (s.contains(excl)) {
      if (s[excl].is_boolean()) {  // draft 4: a flag on minimum/maximum
        if (s[excl].get<bool>() && out) out->exclusive = true;
      } else {
        const long double v = num(excl);
        const bool lower = plain == "minimum";
        // The tighter of the two.
        if (!out || (lower ? v >= out->value : v <= out->value)) out = RawBound{v, true};
      }
    }
    return out;
  }

  std::string visit_number(const json& s, const std::string& path, bool integer) {
    std::optional<RawBound> lo = bound(s, "minimum", "exclusiveMinimum", path);
    std::optional<RawBound> hi = bound(s, "maximum", "exclusiveMaximum", path);
    if (!lo && !hi) return integer ? b_.json_integer() : b_.json_number();
    const long double cap = static_cast<long double>(detail::kMaxMagnitude);
    std::string expr;
    if (integer) {
      int64_t l = -detail::kMaxMagnitude, h = detail::kMaxMagnitude;
      if (lo) {
        const long double v = lo->exclusive ? std::floor(lo->value) + 1 : std::ceil(lo->value);
        if (v > cap) throw NeverMatches{path, "minimum is above the largest generated integer (16 digits)"};
        if (v > -cap) l = static_cast<int64_t>(v);
      }
      if (hi) {
        const long double v = hi->exclusive ? std::ceil(hi->value) - 1 : std::floor(hi->value);
        if (v < -cap) throw NeverMatches{path, "maximum is below the smallest generated integer (16 digits)"};
        if (v < cap) h = static_cast<int64_t>(v);
      }
      if (l > h) throw NeverMatches{path, "no integer between minimum and maximum"};
      expr = detail::integer_range(l, h);
    } else {
      auto convert = [&](const std::optional<RawBound>& r, const char* key,
                         bool lower) -> std::optional<detail::NumberBound> {
        if (!r) return std::nullopt;
        if (r->value != std::floor(r->value))
          unsupported(key, path + "/" + key,
                      "a non-integer bound on a number is not supported (integer-valued bounds are)");
        if (lower ? r->value < -cap : r->value > cap) return std::nullopt;  // beyond every generated number
        if (lower ? r->value > cap : r->value < -cap)
          throw NeverMatches{path, std::string(key) + " is beyond every generated number (16 digits)"};
        return detail::NumberBound{static_cast<int64_t>(r->value), r->exclusive};
      };
      const char* lo_key = lo && lo->exclusive && s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean()
                               ? "exclusiveMinimum" : "minimum";
      const char* hi_key = hi && hi->exclusive && s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean()
                               ? "exclusiveMaximum" : "maximum";
      expr = detail::number_range(convert(lo, lo_key, true), convert(hi, hi_key, false));
    }
    if (expr.empty()) throw NeverMatches{path, "no number between minimum and maximum"};
    return b_.define(name(integer ? "integer" : "number"), expr);
  }

  // ---- objects

  std::string visit_object(const json& s, const std::string& path, int depth) {
    const std::string w = b_.ws();
    struct Prop {
      std::string key;
      std::string kv;  // key ws ":" ws value ws
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) invalid(path + "/required", "required must be an array of strings");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) invalid(path + "/required", "required must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    // Children are inside "{": whatever they reference comes after consumed input.
    const bool saved_consumed = consumed_;
    consumed_ = true;
    auto kv_of = [&](const std::string& key, const std::string& value) {
      return gbnf_quote(dump_json(json(key))) + " " + w + " \":\" " + w + " " + value + " " + w;
    };
    std::vector<std::string> names;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) invalid(path + "/properties", "properties must be an object");
      for (const auto& [key, sub] : s["properties"].items()) {
        names.push_back(key);
        const std::string sub_path = path + "/properties/" + pointer_escape(key);
        try {
          props.push_back({key, kv_of(key, visit(sub, sub_path, depth + 1)), required.count(key) > 0});
        } catch (const NeverMatches& e) {
          if (required.count(key)) throw;  // a required property no value fits
        }
      }
    }
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    std::string extra_value;  // "" = no extra keys
    if (additional.is_boolean()) {
      if (additional.get<bool>()) extra_value = b_.json_value();
    } else {
      try {
        extra_value = visit(additional, path + "/additionalProperties", depth + 1);
      } catch (const NeverMatches&) {
      }
    }
    // Required keys not under "properties" take the additionalProperties schema.
    for (const auto& r : s.contains("required") ? s["required"] : json::array()) {
      const std::string key = r.get<std::string>();
      if (std::find(names.begin(), names.end(), key) != names.end()) continue;
      if (extra_value.empty())
        throw NeverMatches{path, "required property '" + key + "' is not allowed by additionalProperties"};
      names.push_back(key);
      props.push_back({key, kv_of(key, extra_value), true});
    }
    std::string extra_kv;
    if (!extra_value.empty()) extra_kv = detail::key_not_in(b_, prefix_, names) + " " + w + " \":\" " + w + " " + extra_value + " " + w;
    consumed_ = saved_consumed;

    // A_i: what may follow once something is written, from property i on; B_i: the
    // same when nothing is written yet. Only B_0..B_r are needed (r = the first
    // required property: from there on something has been written).
    const size_t n = props.size();
    size_t first_required = n;
    for (size_t i = 0; i < n; ++i)
      if (props[i].required) {
        first_required = i;
        break;
      }
    std::vector<std::string> a_rule(n + 1);  // "" = nothing may follow
    if (!extra_kv.empty()) a_rule[n] = b_.define(name("more"), "(\",\" " + w + " " + extra_kv + ")*");
    for (size_t i = n; i-- > 1;) {
      const std::string after = a_rule[i + 1].empty() ? "" : " " + a_rule[i + 1];
      const std::string item = "\",\" " + w + " " + props[i].kv;
      a_rule[i] = b_.define(name("obj-rest"), props[i].required ? item + after : "(" + item + ")?" + after);
    }
    std::string b_next;  // B_{i+1}; "" = empty
    if (first_required == n && !extra_kv.empty())
      b_next = "(" + extra_kv + (a_rule[n].empty() ? "" : " " + a_rule[n]) + ")?";
    for (size_t i = std::min(first_required + 1, n); i-- > 0;) {
      const std::string after = a_rule[i + 1].empty() ? "" : " " + a_rule[i + 1];
      std::string body = props[i].kv + after;
      if (!props[i].required) body = b_next.empty() ? "(" + body + ")?" : body + " | " + b_next;
      b_next = b_.define(name("obj"), body);
    }
    if (!b_next.empty()) return b_.define(name("object"), "\"{\" " + w + " " + b_next + " \"}\"");
    return b_.define(name("object"), "\"{\" " + w + " \"}\"");
  }

  // ---- arrays

  std::string visit_array(const json& s, const std::string& path, int depth) {
    const std::string w = b_.ws();
    const int64_t min_items = count_keyword(s, "minItems", path, 0);
    const int64_t max_items = count_keyword(s, "maxItems", path, kUnbounded);
    if (max_items != kUnbounded && max_items < min_items) throw NeverMatches{path, "minItems > maxItems"};
    const bool saved_consumed = consumed_;
    consumed_ = true;
    // Positional schemas: prefixItems (2020-12) or an items array (drafts 4-7).
    std::vector<std::optional<std::string>> prefix;  // nullopt = nothing fits there
    json rest_schema = json(true);
    std::string rest_key = "items";
    auto positional = [&](const json& arr, const std::string& key) {
      if (!arr.is_array()) invalid(path + "/" + key, key + " must be an array");
      for (size_t i = 0; i < arr.size(); ++i) {
        try {
          prefix.push_back(visit(arr[i], path + "/" + key + "/" + std::to_string(i), depth + 1));
        } catch (const NeverMatches&) {
          prefix.push_back(std::nullopt);
        }
      }
    };
    if (s.contains("prefixItems")) {
      positional(s["prefixItems"], "prefixItems");
      if (s.contains("items")) rest_schema = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      positional(s["items"], "items");
      if (s.contains("additionalItems")) {
        rest_schema = s["additionalItems"];
        rest_key = "additionalItems";
      }
    } else if (s.contains("items")) {
      rest_schema = s["items"];
    }
    std::string rest_item;  // "" = no items past the prefix
    if (max_items == kUnbounded || max_items > static_cast<int64_t>(prefix.size())) {
      try {
        rest_item = visit(rest_schema, path + "/" + rest_key, depth + 1);
      } catch (const NeverMatches&) {
      }
    }
    consumed_ = saved_consumed;

    // tail(i): what may follow once i >= 1 items are written (each item ends in ws).
    const int64_t k = static_cast<int64_t>(prefix.size());
    auto at_most = [&](int64_t i) { return max_items == kUnbounded || i < max_items; };
    // Tail past the prefix.
    const int64_t tail_from = std::max<int64_t>(k, 1);
    auto tail_after = [&](int64_t written) -> std::optional<std::string> {
      const int64_t need = std::max<int64_t>(min_items - written, 0);
      const int64_t room = max_items == kUnbounded ? kUnbounded : max_items - written;
      if (rest_item.empty()) {
        if (need > 0) return std::nullopt;
        return std::string();
      }
      if (room == 0) {
        if (need > 0) return std::nullopt;
        return std::string();
      }
      const std::string one = b_.define(name("item"), "\",\" " + w + " " + rest_item + " " + w);
      return detail::repeat(b_, one, need, room, need > 0 ? "minItems" : "maxItems", path);
    };
    // Walk the prefix backwards: seq[i] = what may follow after i items (i >= 1).
    std::optional<std::string> after = tail_after(tail_from);
    for (int64_t i = k - 1; i >= 1; --i) {
      // Position i (0-based) written after i items.
      std::optional<std::string> next;
      if (at_most(i) && prefix[i] && after) {
        std::string item = "\",\" " + w + " " + *prefix[i] + " " + w + (after->empty() ? "" : " " + *after);
        next = i >= min_items ? "(" + item + ")?" : item;
      } else if (i >= min_items) {
        next = std::string();
      }
      after = next ? std::optional<std::string>(next->empty() ? "" : b_.define(name("items"), *next)) : std::nullopt;
    }
    // The first item.
    std::optional<std::string> body;
    const std::optional<std::string> first = k > 0 ? prefix[0] : (rest_item.empty() ? std::nullopt
                                                                                    : std::optional(rest_item));
    if (at_most(0) && first && after) body = *first + " " + w + (after->empty() ? "" : " " + *after);
    std::string content;
    if (body) content = min_items > 0 ? *body : "(" + *body + ")?";
    else if (min_items > 0) throw NeverMatches{path, "no array fits minItems and the item schemas"};
    return b_.define(name("array"), "\"[\" " + w + (content.empty() ? "" : " " + content) + " \"]\"");
  }
};

}  // namespace

std::string detail::compile_json_schema(GbnfBuilder::Impl& b, const nlohmann::ordered_json& schema,
                                        const std::string& prefix) {
  SchemaCompiler compiler(b, schema, prefix);
  return compiler.compile();
}

std::string detail::compile_string_content(GbnfBuilder::Impl& b, const nlohmann::ordered_json& schema,
                                           const std::string& prefix, const std::string& raw_char) {
  SchemaCompiler compiler(b, schema, prefix);
  try {
    return compiler.string_content(schema, "", raw_char);
  } catch (const NeverMatches& e) {
    throw UnsupportedSchema("JSON Schema at " + where(e.path) + " accepts no value: " + e.why, "", e.path);
  }
}

}  // namespace pagoda::grammar
