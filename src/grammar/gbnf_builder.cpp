// GbnfBuilder: the rule store (names, dedupe, size limit), the shared JSON rules
// (bounded whitespace, strings, numbers, any value) and the public entry points.
#include <set>
#include <string>

#include "common/json_text.h"
#include "common/utf8.h"
#include "grammar/json_schema_internal.h"

namespace pagoda::grammar {

using json = nlohmann::ordered_json;

std::string gbnf_quote(std::string_view bytes) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7F) {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      continue;
    }
    // A well-formed UTF-8 sequence is copied as is (a reader decoding the grammar as
    // UTF-8 and one reading bytes agree on it); a stray byte becomes \xNN.
    const Utf8Char u = decode_utf8_char(bytes, i);
    if (u.valid) {
      out.append(bytes.substr(i, u.len));
      i += u.len - 1;
    } else {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    }
  }
  return out + "\"";
}

std::string detail::sanitize_rule_name(std::string_view hint) {
  std::string out;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 48) out.resize(48);  // names stay readable; uniqueness comes from suffixes
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "r" : out;
}

std::string GbnfBuilder::Impl::unique_name(std::string_view hint) {
  const std::string base = detail::sanitize_rule_name(hint);
  std::string name = base;
  // Suffixes continue from the last one handed out for this base, so 2000 "item" rules
  // cost 2000 probes, not 2000^2 / 2.
  int& next = next_suffix[base];
  while (name == "root" || rule_idx.count(name)) name = base + "-" + std::to_string(++next);
  return name;
}

std::string GbnfBuilder::Impl::reserve(std::string_view hint) {
  std::string name = unique_name(hint);
  rule_idx[name] = rules.size();
  rules.emplace_back(name, "");
  return name;
}

void GbnfBuilder::Impl::set_body(const std::string& name, const std::string& body) {
  total_bytes += name.size() + body.size() + 6;
  if (total_bytes > kMaxTotalBytes)
    throw UnsupportedSchema("schema too large: the grammar would exceed 4 MiB", "", "");
  rules[rule_idx.at(name)].second = body;
}

std::string GbnfBuilder::Impl::define(std::string_view hint, const std::string& body) {
  if (auto it = rule_by_body.find(body); it != rule_by_body.end()) return it->second;
  std::string name = reserve(hint);
  set_body(name, body);
  rule_by_body[body] = name;
  return name;
}

std::string GbnfBuilder::Impl::ws() {
  auto it = common.find("ws");
  if (it != common.end()) return it->second;
  // One blank, or one newline and up to 20 blanks of indentation (10 levels of 2-space
  // pretty printing), as llama.cpp's JSON grammars bound it: at most 21 bytes between two
  // tokens, so a weak model cannot spend its budget on indentation (with 32 blanks a run
  // of 33 was seen). Every rule puts one ws between two tokens, never two in a row.
  // Rejected: [ \t\n]* (a model can loop in it forever).
  return common["ws"] = define("ws", "([ \\t] | \"\\n\" [ \\t]{0,20})?");
}

std::string GbnfBuilder::Impl::json_char() {
  auto it = common.find("char");
  if (it != common.end()) return it->second;
  // \u escapes of surrogates only as a high-low pair, so every char is one code point
  // of the decoded string (minLength / maxLength count these).
  const std::string hex = define("hex", "[0-9a-fA-F]");
  const std::string non_surrogate = "([0-9a-cA-Ce-fE-F] " + hex + "{3} | [dD] [0-7] " + hex + "{2})";
  const std::string pair = "[dD] [89abAB] " + hex + "{2} \"\\\\u\" [dD] [c-fC-F] " + hex + "{2}";
  return common["char"] = define(
             "char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" (" + non_surrogate + " | " + pair + "))");
}

std::string GbnfBuilder::Impl::json_string() {
  auto it = common.find("string");
  if (it != common.end()) return it->second;
  return common["string"] = define("string", "\"\\\"\" " + json_char() + "* \"\\\"\"");
}

std::string GbnfBuilder::Impl::json_integer() {
  auto it = common.find("integer");
  if (it != common.end()) return it->second;
  // 16 digits at most: every double-exact integer (2^53 ~ 9.007e15), and bounded.
  return common["integer"] = define("integer", "\"-\"? (\"0\" | [1-9] [0-9]{0,15})");
}

std::string GbnfBuilder::Impl::json_number() {
  auto it = common.find("number");
  if (it != common.end()) return it->second;
  return common["number"] =
             define("number", json_integer() + " (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?");
}

std::string GbnfBuilder::Impl::json_value() {
  auto it = common.find("value");
  if (it != common.end()) return it->second;
  const std::string value = reserve("value");
  common["value"] = value;
  const std::string w = ws();
  const std::string object = define("object", "\"{\" " + w + " (" + json_string() + " " + w + " \":\" " + w + " " +
                                                   value + " " + w + " (\",\" " + w + " " + json_string() + " " + w +
                                                   " \":\" " + w + " " + value + " " + w + ")*)? \"}\"");
  const std::string array =
      define("array", "\"[\" " + w + " (" + value + " " + w + " (\",\" " + w + " " + value + " " + w + ")*)? \"]\"");
  common["object"] = object;
  common["array"] = array;
  set_body(value, object + " | " + array + " | " + json_string() + " | " + json_number() +
                      " | \"true\" | \"false\" | \"null\"");
  return value;
}

std::string GbnfBuilder::Impl::json_object() {
  json_value();
  return common["object"];
}

std::string GbnfBuilder::Impl::json_array() {
  json_value();
  return common["array"];
}


GbnfBuilder::GbnfBuilder() : impl_(std::make_shared<Impl>()) {}

std::string GbnfBuilder::add_json_schema(const nlohmann::json& schema, std::string_view name_hint) {
  return add_json_schema(json(schema), name_hint);
}

std::string GbnfBuilder::add_json_schema(const nlohmann::ordered_json& schema, std::string_view name_hint) {
  if (!schema.is_object() && !schema.is_boolean())
    throw std::invalid_argument(std::string("a JSON Schema must be an object or a boolean, not ") + schema.type_name());
  std::string expr =
      detail::compile_json_schema(*impl_, schema, name_hint.empty() ? "" : detail::sanitize_rule_name(name_hint));
  // A rule of its own unless the expression is already a bare rule name.
  if (!impl_->rule_idx.count(expr)) return impl_->define(name_hint.empty() ? "schema" : name_hint, expr);
  return expr;
}

std::string GbnfBuilder::add_raw_string_content(const nlohmann::ordered_json& schema, std::string_view raw_char,
                                                std::string_view name_hint) {
  if (!schema.is_object()) throw std::invalid_argument("a string schema must be an object");
  if (raw_char.empty()) throw std::invalid_argument("add_raw_string_content: no character rule");
  const std::string expr = detail::compile_string_content(
      *impl_, schema, name_hint.empty() ? "" : detail::sanitize_rule_name(name_hint), std::string(raw_char));
  return impl_->define(name_hint.empty() ? "raw-string" : name_hint, expr);
}

std::string GbnfBuilder::add_any_json_value() { return impl_->json_value(); }
std::string GbnfBuilder::add_any_json_object() { return impl_->json_object(); }

std::string GbnfBuilder::add_json_string_literal(std::string_view s) {
  return impl_->define("lit", gbnf_quote(dump_json(json(std::string(s)))));
}

std::string GbnfBuilder::add_regex(std::string_view pattern, std::string_view name_hint) {
  detail::RegexResult r =
      detail::regex_expr(*impl_, pattern, detail::RegexMode::kWholeText, name_hint.empty() ? "regex" : name_hint, "");
  if (!impl_->rule_idx.count(r.expr)) return impl_->define(name_hint.empty() ? "regex" : name_hint, r.expr);
  return r.expr;
}

std::string GbnfBuilder::add_rule(std::string_view name, std::string_view body) {
  const std::string n(name);
  if (n.empty() || n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
                       std::string::npos)
    throw std::invalid_argument("GBNF rule name '" + n + "' must be [a-zA-Z0-9-]+");
  if (auto it = impl_->rule_idx.find(n); it != impl_->rule_idx.end()) {
    if (impl_->rules[it->second].second == body) return n;
    throw std::invalid_argument("GBNF rule '" + n + "' is already defined with another body");
  }
  impl_->rule_idx[n] = impl_->rules.size();
  impl_->rules.emplace_back(n, "");
  impl_->set_body(n, std::string(body));
  return n;
}

std::string GbnfBuilder::ws() { return impl_->ws(); }

std::string GbnfBuilder::gbnf(std::string_view root_rule) const {
  // A caller may name its own top rule "root" (add_rule) and pass it here.
  const bool has_root = impl_->rule_idx.count("root") > 0;
  if (has_root && root_rule != "root")
    throw std::invalid_argument("GBNF: a rule named 'root' exists but the root asked for is '" +
                                std::string(root_rule) + "'");
  std::string out = has_root ? "" : "root ::= " + std::string(root_rule) + "\n";
  for (const auto& [name, body] : impl_->rules) out += name + " ::= " + body + "\n";
  return out;
}

std::string json_schema_to_gbnf(const nlohmann::json& schema) { return json_schema_to_gbnf(json(schema)); }

// A whole output may open with one space: SentencePiece vocabularies spell a value at
// the start of an answer as "▁{" (" {" mid-text), the token a model trained on them
// prefers; refusing it leaves only the rarer bare "{" and skews the output. JSON parsers
// skip leading whitespace, so the document is the same. Rejected: a general leading ws
// run (a model could stall in blanks before the value).
static std::string whole_output(GbnfBuilder& b, const std::string& value_rule) {
  return b.gbnf(b.add_rule("output", "\" \"? " + value_rule));
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  GbnfBuilder b;
  return b.gbnf(b.add_json_schema(schema));
}

std::string json_object_gbnf() {
  GbnfBuilder b;
  return b.gbnf(b.add_any_json_object());
}

std::string json_schema_output_gbnf(const nlohmann::ordered_json& schema) {
  GbnfBuilder b;
  const std::string value = b.add_json_schema(schema);
  return whole_output(b, value);
}

std::string json_object_output_gbnf() {
  GbnfBuilder b;
  const std::string value = b.add_any_json_object();
  return whole_output(b, value);
}

std::string regex_to_gbnf(std::string_view pattern) {
  GbnfBuilder b;
  return b.gbnf(b.add_regex(pattern));
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw std::invalid_argument("choice: the list of choices is empty");
  std::string body;
  std::set<std::string> seen;
  for (const std::string& c : choices) {
    if (c.empty()) throw std::invalid_argument("choice: a choice is the empty string");
    if (!seen.insert(c).second) continue;
    body += (body.empty() ? "" : " | ") + gbnf_quote(c);
  }
  GbnfBuilder b;
  return b.gbnf(b.add_rule("choice", body));
}

}  // namespace pagoda::grammar
