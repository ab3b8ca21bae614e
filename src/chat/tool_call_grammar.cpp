// GBNF forcing tool calls in a format's own syntax (tool_choice "required" or a named
// tool). The grammar is the whole output; markers that are special tokens in the
// model's vocabulary ([TOOL_CALLS], DeepSeek's ｜tool▁...｜) are spelled as their text,
// since the matcher works on the bytes tokens produce.
#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "chat/chat_format.h"
#include "chat/chat_parse_internal.h"
#include "grammar/json_schema.h"

namespace pagoda::chat {
namespace {

using json = nlohmann::ordered_json;  // schema property order is the generation order
using grammar::gbnf_quote;
using grammar::GbnfBuilder;
using namespace detail;  // the DeepSeek markers


struct Tool {
  std::string name;
  const json* parameters = nullptr;  // null: any object
};

std::vector<Tool> selected_tools(const json& tools, const std::optional<std::string>& only_name) {
  if (!tools.is_array() || tools.empty()) throw std::invalid_argument("tool-call grammar: no tools given");
  std::vector<Tool> out;
  for (const json& t : tools) {
    const json& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
      throw std::invalid_argument("tool-call grammar: a tool has no function name");
    Tool tool{fn["name"].get<std::string>(), nullptr};
    if (fn.contains("parameters") && fn["parameters"].is_object()) tool.parameters = &fn["parameters"];
    if (!only_name || *only_name == tool.name) out.push_back(std::move(tool));
  }
  if (out.empty()) throw std::invalid_argument("tool-call grammar: tool_choice names '" + *only_name + "', which is not in tools");
  return out;
}

std::string lit(std::string_view s) { return gbnf_quote(s); }

std::string args_rule(GbnfBuilder& b, const Tool& t, size_t i) {
  if (!t.parameters) return b.add_any_json_object();
  return b.add_json_schema(*t.parameters, "tool" + std::to_string(i) + "-args");
}

// The schema's properties when a per-parameter form can express it: an object schema
// whose properties are self-contained (no $ref into $defs, which a sub-schema would lose).
const json* simple_properties(const Tool& t) {
  if (!t.parameters) return nullptr;
  const json& p = *t.parameters;
  if (p.contains("$defs") || p.contains("definitions") || p.contains("anyOf") || p.contains("oneOf") ||
      p.contains("allOf"))
    return nullptr;
  if (!p.contains("properties") || !p["properties"].is_object() || p["properties"].empty()) return nullptr;
  return &p["properties"];
}

bool is_required(const Tool& t, const std::string& prop) {
  const json& p = *t.parameters;
  if (!p.contains("required") || !p["required"].is_array()) return false;
  for (const json& r : p["required"])
    if (r == prop) return true;
  return false;
}

// Parameter list: required ones in order, optional ones optional.
std::string parameter_list(GbnfBuilder& b, const Tool& t, size_t i, const json& props,
                           const std::function<std::string(const std::string&, const std::string&)>& one) {
  std::string body;
  size_t k = 0;
  for (auto it = props.begin(); it != props.end(); ++it, ++k) {
    const std::string value = b.add_json_schema(it.value(), "tool" + std::to_string(i) + "-p" + std::to_string(k));
    const std::string item = one(it.key(), value);
    body += is_required(t, it.key()) ? " " + item : " (" + item + ")?";
  }
  return body.empty() ? "\"\"" : body;
}

// Gemma 4's arguments for one tool, in Gemma's value syntax: with simple properties, a
// dict of them in sorted order (the template writes past calls with dictsort), required
// ones present, each scalar typed by its schema (string -> <|"|>text<|"|> or an enum's /
// const's values, integer / number / boolean as JSON spells them, with their bounds;
// anything else any value); otherwise any dict. A string's minLength / maxLength /
// pattern / format hold for its raw text; such a text is written without '<' (only the
// pattern's own characters may have one), which keeps the closing <|"|> from being
// spelled inside the counted characters. Commas: `first_k` starts at property k with
// nothing written yet, `then_k` after something was.
std::string gemma4_value_rule(GbnfBuilder& b, const json& schema, const std::string& name) {
  const std::string type = schema.is_object() && schema.contains("type") && schema["type"].is_string()
                               ? schema["type"].get<std::string>()
                               : "";
  // Scalars as Gemma writes them (a dict or list value in JSON's spelling would be text
  // the parser does not read back: those take any value).
  auto literal = [](const json& v) {
    return v.is_string() ? lit("<|\"|>" + v.get<std::string>() + "<|\"|>") : lit(v.dump());
  };
  auto structured = [](const json& v) { return v.is_object() || v.is_array(); };
  if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array() && !schema["enum"].empty()) {
    std::string alts;
    for (const json& v : schema["enum"]) {
      if (structured(v)) return "g4-value";
      if (!alts.empty()) alts += " | ";
      alts += literal(v);
    }
    return b.add_rule(name, alts);
  }
  if (schema.is_object() && schema.contains("const"))
    return structured(schema["const"]) ? "g4-value" : b.add_rule(name, literal(schema["const"]));
  if (type == "string") {
    if (!schema.contains("minLength") && !schema.contains("maxLength") && !schema.contains("pattern") &&
        !schema.contains("format"))
      return "g4-string";
    const std::string content = b.add_raw_string_content(schema, "g4-char", name + "-text");
    return b.add_rule(name, lit("<|\"|>") + " " + content + " " + lit("<|\"|>"));
  }
  if (type == "integer" || type == "number" || type == "boolean") return b.add_json_schema(schema, name);
  return "g4-value";
}

std::string gemma4_args_rule(GbnfBuilder& b, const Tool& t, size_t i) {
  const json* props = simple_properties(t);
  if (!props) return "g4-dict";
  std::vector<std::string> keys;
  for (auto it = props->begin(); it != props->end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  const std::string base = "tool" + std::to_string(i) + "-g4";
  const std::string ws = b.ws();
  std::vector<std::string> items;
  for (size_t k = 0; k < keys.size(); ++k)
    items.push_back(lit(keys[k] + ":") + " " + ws + " " +
                    gemma4_value_rule(b, (*props)[keys[k]], base + "-v" + std::to_string(k)));
  const size_t n = keys.size();
  auto first = [&](size_t k) { return base + "-first" + std::to_string(k); };
  auto then = [&](size_t k) { return base + "-then" + std::to_string(k); };
  b.add_rule(first(n), "\"\"");
  b.add_rule(then(n), "\"\"");
  for (size_t k = n; k-- > 0;) {
    const std::string sep = lit(",") + " " + ws + " ";
    if (is_required(t, keys[k])) {
      b.add_rule(then(k), sep + items[k] + " " + then(k + 1));
      b.add_rule(first(k), items[k] + " " + then(k + 1));
    } else {
      b.add_rule(then(k), "(" + sep + items[k] + ")? " + then(k + 1));
      b.add_rule(first(k), items[k] + " " + then(k + 1) + " | " + first(k + 1));
    }
  }
  return b.add_rule(base, lit("{") + " " + ws + " " + first(0) + " " + ws + " " + lit("}"));
}

std::string call_rule(GbnfBuilder& b, const ChatFormat& f, const Tool& t, size_t i) {
  const std::string name_json = json(t.name).dump();
  const std::string rule = "tool" + std::to_string(i) + "-call";
  switch (f.tools) {
    case ToolCallFormat::Generic:
      return b.add_rule(rule, lit("{\"name\": " + name_json + ", \"arguments\": ") + " " + args_rule(b, t, i) + " " +
                                  lit("}"));
    case ToolCallFormat::Hermes:
      return b.add_rule(rule, lit("<tool_call>\n{\"name\": " + name_json + ", \"arguments\": ") + " " +
                                  args_rule(b, t, i) + " " + lit("}\n</tool_call>"));
    case ToolCallFormat::Llama3: {
      const char* key = f.syntax == ToolCallSyntax::FireFunction ? "arguments" : "parameters";
      return b.add_rule(rule, lit("{\"name\": " + name_json + ", \"" + key + "\": ") + " " + args_rule(b, t, i) +
                                  " " + lit("}"));
    }
    case ToolCallFormat::Mistral:
      if (f.syntax == ToolCallSyntax::MistralNameArgs)
        return b.add_rule(rule, lit("[TOOL_CALLS]" + t.name + "[ARGS]") + " " + args_rule(b, t, i));
      return b.add_rule(rule, lit("{\"name\": " + name_json + ", \"arguments\": ") + " " + args_rule(b, t, i) + " " +
                                  lit("}"));
    case ToolCallFormat::Qwen3Coder: {
      const json* props = simple_properties(t);
      if (!props) {
        // <function=X>{json}</function>, which the parser reads as the whole arguments.
        return b.add_rule(rule, lit("<tool_call>\n<function=" + t.name + ">\n") + " " + args_rule(b, t, i) + " " +
                                    lit("\n</function>\n</tool_call>"));
      }
      const std::string params = parameter_list(b, t, i, *props, [](const std::string& p, const std::string& v) {
        return lit("<parameter=" + p + ">\n") + " " + v + " " + lit("\n</parameter>\n");
      });
      return b.add_rule(rule, lit("<tool_call>\n<function=" + t.name + ">\n") + params + " " +
                                  lit("</function>\n</tool_call>"));
    }
    case ToolCallFormat::DeepSeekV3:
    case ToolCallFormat::DeepSeekR1: {
      const json* props = simple_properties(t);
      if (f.syntax == ToolCallSyntax::DeepSeekDsml && props) {
        // string="false" for every value: the value is JSON (a string as a JSON literal),
        // which keeps the schema's constraints on strings too.
        const std::string params = parameter_list(b, t, i, *props, [](const std::string& p, const std::string& v) {
          return lit("<" + kDsml + "parameter name=\"" + p + "\" string=\"false\">") + " " + v + " " +
                 lit("</" + kDsml + "parameter>\n");
        });
        return b.add_rule(rule, lit("<" + kDsml + "invoke name=\"" + t.name + "\">\n") + params + " " +
                                    lit("</" + kDsml + "invoke>\n"));
      }
      if (f.syntax == ToolCallSyntax::DeepSeekV31 || f.syntax == ToolCallSyntax::DeepSeekDsml)
        return b.add_rule(rule, lit(kDsCallBegin + t.name + kDsSep) + " " + args_rule(b, t, i) + " " + lit(kDsCallEnd));
      return b.add_rule(rule, lit(kDsCallBegin + "function" + kDsSep + t.name + "\n```json\n") + " " +
                                  args_rule(b, t, i) + " " + lit("\n```" + kDsCallEnd));
    }
    case ToolCallFormat::GptOss:
      return b.add_rule(rule, lit("<|channel|>commentary to=functions." + t.name + " <|constrain|>json<|message|>") +
                                  " " + args_rule(b, t, i) + " " + lit("<|call|>"));
    case ToolCallFormat::Gemma4:
      return b.add_rule(rule, lit("<|tool_call>call:" + t.name) + " " + gemma4_args_rule(b, t, i) + " " +
                                  lit("<tool_call|>"));
  }
  throw std::invalid_argument("tool-call grammar: unknown format");
}

}  // namespace

std::string tool_call_grammar(const ChatFormat& format, const json& tools, const std::optional<std::string>& only_name,
                              bool parallel) {
  const std::vector<Tool> selected = selected_tools(tools, only_name);
  ChatFormat f = format;
  if (f.syntax == ToolCallSyntax::DeepSeekDsml) {
    // DSML carries arguments only as per-property values; a tool whose schema has no
    // such form makes the whole grammar use V3.1 calls (the parser reads both).
    for (const Tool& t : selected)
      if (!simple_properties(t)) f.syntax = ToolCallSyntax::DeepSeekV31;
  }
  GbnfBuilder b;
  std::string any_call;
  for (size_t i = 0; i < selected.size(); ++i) {
    if (i) any_call += " | ";
    any_call += call_rule(b, f, selected[i], i);
  }
  const std::string call = b.add_rule("call", any_call);
  // `open rest* close`, or a single call: per-format separators and wrappers.
  auto repeat = [&](std::string_view sep) {
    if (!parallel) return call;
    return sep.empty() ? call + "+" : call + " (" + lit(sep) + " " + call + ")*";
  };
  std::string root;
  switch (f.tools) {
    case ToolCallFormat::Generic: root = lit("{\"tool_calls\": [") + " " + repeat(", ") + " " + lit("]}"); break;
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Qwen3Coder: root = repeat("\n"); break;
    case ToolCallFormat::Llama3:
      root = f.syntax == ToolCallSyntax::FireFunction ? lit(" functools[") + " " + repeat(", ") + " " + lit("]")
                                                       : repeat("; ");
      break;
    case ToolCallFormat::Mistral:
      root = f.syntax == ToolCallSyntax::MistralNameArgs ? repeat("")
                                                          : lit("[TOOL_CALLS][") + " " + repeat(", ") + " " + lit("]");
      break;
    case ToolCallFormat::DeepSeekV3:
    case ToolCallFormat::DeepSeekR1: {
      if (f.syntax == ToolCallSyntax::DeepSeekDsml) {
        root = lit("<" + kDsml + "function_calls>\n") + " " + repeat("") + " " + lit("</" + kDsml + "function_calls>");
        break;
      }
      root = lit(kDsCallsBegin) + " " + repeat("\n") + " " + lit(kDsCallsEnd);
      break;
    }
    case ToolCallFormat::GptOss: root = repeat("<|start|>assistant"); break;
    case ToolCallFormat::Gemma4: root = repeat(""); break;
  }
  b.add_rule("tool-calls", root);
  if (f.tools == ToolCallFormat::Gemma4) {
    // Gemma 4's argument values: <|"|>text<|"|>, JSON numbers / true / false / null,
    // {key:value, ...} with bare keys, [value, ...].
    const std::string ws = b.ws();
    b.add_rule("g4-value", "g4-string | g4-dict | g4-array | g4-number | \"true\" | \"false\" | \"null\"");
    b.add_rule("g4-string", lit("<|\"|>") + " g4-string-rest");
    b.add_rule("g4-char", "[^<]");  // one character of a string with a length, pattern or format
    b.add_rule("g4-key", "[^:}<\" \\t\\n,{] [^:}<\"\\n]*");
    b.add_rule("g4-kv", "g4-key \":\" " + ws + " g4-value");
    b.add_rule("g4-dict", "\"{\" " + ws + " (g4-kv (\",\" " + ws + " g4-kv)*)? " + ws + " \"}\"");
    b.add_rule("g4-array", "\"[\" " + ws + " (g4-value (\",\" " + ws + " g4-value)*)? " + ws + " \"]\"");
    b.add_rule("g4-number", b.add_json_schema(nlohmann::json{{"type", "number"}}, "g4-num"));
    return b.gbnf("tool-calls") + text_until_marker_rules("g4-string-rest", "<|\"|>");
  }
  return b.gbnf("tool-calls");
}

}  // namespace pagoda::chat
