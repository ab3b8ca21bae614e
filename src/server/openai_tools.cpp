// Request fields for tools and structured outputs (see openai_protocol.h's contract).
//
// Shapes accepted, as OpenAI, llama-server and vLLM take them:
// - tools: [{"type":"function","function":{"name","description"?,"parameters"?,"strict"?}}]
//   (a bare {"name",...} without the wrapper is refused: every client sends the wrapper).
// - tool_choice: "auto" | "none" | "required" | {"type":"function","function":{"name"}}.
//   Default "auto" with tools, "none" without; "required" or a name without tools (or a
//   name not among them) is a 400.
// - response_format: {"type":"text"} | {"type":"json_object"} (llama-server also takes a
//   "schema" member there) | {"type":"json_schema","json_schema":{"name","schema","strict"}}.
// - Extensions: grammar (GBNF text), json_schema (an object, llama-server), guided_json
//   (an object or its JSON text), guided_regex, guided_choice (non-empty array of strings),
//   guided_grammar (GBNF text) (vLLM). Two constraints at once are a 400; so is a
//   constraint together with tool_choice required / named (the call grammar is the
//   constraint then).
#include <set>

#include "common/json_parse.h"
#include "server/openai_fields.h"

namespace pagoda::server {

using namespace fields;

namespace {

constexpr size_t kMaxTools = 128;
constexpr size_t kMaxChoices = 1024;

void set_constraint(CompletionRequest& r, OutputConstraint c) {
  if (r.constraint.kind != OutputConstraint::Kind::None)
    bad(c.param, fields::quoted(c.param) + " cannot be combined with " + fields::quoted(r.constraint.param) +
                     ": give one output constraint");
  r.constraint = std::move(c);
}

ordered_json schema_object(const ordered_json& v, const std::string& name) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    ordered_json parsed = parse_ordered_json_or_discarded(v.get<std::string>());
    if (parsed.is_object() || parsed.is_boolean()) return parsed;
    bad(name, fields::quoted(name) + " must be a JSON schema (an object, or its JSON text)");
  }
  bad(name, fields::quoted(name) + " must be a JSON schema object");
}

void parse_response_format(const ordered_json& body, CompletionRequest& r) {
  const ordered_json* rf = find_field(body, "response_format");
  if (!rf) return;
  if (!rf->is_object()) bad("response_format", "'response_format' must be an object");
  const auto type = opt_string(*rf, "type");
  if (!type) bad("response_format.type", "'response_format.type' is required");
  OutputConstraint c;
  c.param = "response_format";
  if (*type == "text") return;
  if (*type == "json_object") {
    if (const ordered_json* s = find_field(*rf, "schema")) {
      c.kind = OutputConstraint::Kind::JsonSchema;
      c.schema = schema_object(*s, "response_format.schema");
    } else {
      c.kind = OutputConstraint::Kind::JsonObject;
    }
  } else if (*type == "json_schema") {
    const ordered_json* js = find_field(*rf, "json_schema");
    if (!js || !js->is_object())
      bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
    if (auto name = opt_string(*js, "name"); name && name->size() > 64)
      bad("response_format.json_schema.name", "'response_format.json_schema.name' is longer than 64 characters");
    opt_bool(*js, "strict");  // type-checked; the schema is always enforced
    const ordered_json* s = find_field(*js, "schema");
    c.kind = OutputConstraint::Kind::JsonSchema;
    // OpenAI makes the schema optional (no schema: any JSON object).
    if (s) {
      c.schema = schema_object(*s, "response_format.json_schema.schema");
    } else {
      c.kind = OutputConstraint::Kind::JsonObject;
    }
  } else {
    bad("response_format.type", "'response_format.type' must be one of text, json_object, json_schema (got " +
                                    echo(*type) + ")");
  }
  set_constraint(r, std::move(c));
}

void parse_extension_constraints(const ordered_json& body, CompletionRequest& r) {
  for (const char* key : {"grammar", "guided_grammar"}) {
    if (auto g = opt_string(body, key)) {
      if (g->empty()) continue;  // llama-server sends "" for "no grammar"
      OutputConstraint c;
      c.kind = OutputConstraint::Kind::Grammar;
      c.text = *g;
      c.param = key;
      set_constraint(r, std::move(c));
    }
  }
  for (const char* key : {"json_schema", "guided_json"}) {
    if (const ordered_json* s = find_field(body, key)) {
      if (s->is_object() && s->empty() && std::string(key) == "json_schema") continue;  // llama-server's {}
      OutputConstraint c;
      c.kind = OutputConstraint::Kind::JsonSchema;
      c.schema = schema_object(*s, key);
      c.param = key;
      set_constraint(r, std::move(c));
    }
  }
  if (auto re = opt_string(body, "guided_regex")) {
    if (re->empty()) bad("guided_regex", "'guided_regex' must not be empty");
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::Regex;
    c.text = *re;
    c.param = "guided_regex";
    set_constraint(r, std::move(c));
  }
  if (const ordered_json* ch = find_field(body, "guided_choice")) {
    if (!ch->is_array() || ch->empty()) bad("guided_choice", "'guided_choice' must be a non-empty array of strings");
    if (ch->size() > kMaxChoices)
      bad("guided_choice", "'guided_choice' has more than " + std::to_string(kMaxChoices) + " entries");
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::Choice;
    c.param = "guided_choice";
    for (size_t i = 0; i < ch->size(); ++i) {
      const std::string name = "guided_choice[" + std::to_string(i) + "]";
      if (!(*ch)[i].is_string()) bad("guided_choice", fields::quoted(name) + " must be a string");
      std::string s = (*ch)[i].get<std::string>();
      require_utf8(s, name);
      if (s.empty()) bad("guided_choice", fields::quoted(name) + " must not be empty");
      c.choices.push_back(std::move(s));
    }
    set_constraint(r, std::move(c));
  }
}

std::set<std::string> tool_names(const ordered_json& tools) {
  std::set<std::string> names;
  if (tools.is_array())
    for (const ordered_json& t : tools) names.insert(t["function"]["name"].get<std::string>());
  return names;
}

void parse_tool_choice(const ordered_json& body, CompletionRequest& r) {
  const bool have_tools = r.tools.is_array() && !r.tools.empty();
  r.tool_choice = have_tools ? ToolChoice::Auto : ToolChoice::None;
  const ordered_json* tc = find_field(body, "tool_choice");
  if (tc) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") {
        r.tool_choice = have_tools ? ToolChoice::Auto : ToolChoice::None;
      } else if (s == "none") {
        r.tool_choice = ToolChoice::None;
      } else if (s == "required") {
        if (!have_tools) bad("tool_choice", "'tool_choice' is \"required\" but no 'tools' were given");
        r.tool_choice = ToolChoice::Required;
      } else {
        bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a function (got " + echo(s) + ")");
      }
    } else if (tc->is_object()) {
      const ordered_json* fn = find_field(*tc, "function");
      auto type = opt_string(*tc, "type");
      if ((type && *type != "function") || !fn || !fn->is_object())
        bad("tool_choice", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      auto name = opt_string(*fn, "name");
      if (!name || name->empty()) bad("tool_choice", "'tool_choice.function.name' is required");
      if (!tool_names(r.tools).count(*name))
        bad("tool_choice", "'tool_choice' names the function " + echo(*name) + ", which is not in 'tools'");
      r.tool_choice = ToolChoice::Named;
      r.tool_choice_name = *name;
    } else {
      bad("tool_choice", "'tool_choice' must be a string or an object");
    }
  }
  if (auto p = opt_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *p;
}

}  // namespace

ordered_json parse_tools(const ordered_json& body) {
  const ordered_json* t = find_field(body, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) bad("tools", "'tools' must be an array");
  if (t->size() > kMaxTools) bad("tools", "'tools' has more than " + std::to_string(kMaxTools) + " entries");
  std::set<std::string> seen;
  for (size_t i = 0; i < t->size(); ++i) {
    const ordered_json& tool = (*t)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) bad("tools", fields::quoted(where) + " must be an object");
    auto type = opt_string(tool, "type");
    if (type && *type != "function")
      bad("tools", fields::quoted(where + ".type") + " must be \"function\" (got " + echo(*type) + ")");
    const ordered_json* fn = find_field(tool, "function");
    if (!fn || !fn->is_object()) bad("tools", fields::quoted(where + ".function") + " must be an object");
    auto name = opt_string(*fn, "name");
    if (!name || name->empty()) bad("tools", fields::quoted(where + ".function.name") + " is required");
    if (name->size() > 64) bad("tools", fields::quoted(where + ".function.name") + " is longer than 64 characters");
    if (!seen.insert(*name).second) bad("tools", "two tools are named " + echo(*name));
    opt_string(*fn, "description");
    if (const ordered_json* p = find_field(*fn, "parameters"); p && !p->is_object())
      bad("tools", fields::quoted(where + ".function.parameters") + " must be a JSON schema object");
  }
  return *t;
}

void parse_tool_and_output_fields(const ordered_json& body, ApiKind kind, CompletionRequest& r) {
  parse_response_format(body, r);
  parse_extension_constraints(body, r);
  if (kind != ApiKind::Chat) return;
  parse_tool_choice(body, r);
  if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) &&
      r.constraint.kind != OutputConstraint::Kind::None)
    bad(r.constraint.param, fields::quoted(r.constraint.param) + " cannot be combined with a required or named " +
                                "'tool_choice' (the tool call is the output's shape)");
  if (auto effort = opt_string(body, "reasoning_effort")) {
    if (*effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
      bad("reasoning_effort", "'reasoning_effort' must be minimal, low, medium or high (got " + echo(*effort) + ")");
    r.reasoning_effort = *effort;
  }
}

}  // namespace pagoda::server

// ---- responses ---------------------------------------------------------------------

namespace pagoda::server {

using namespace fields;

namespace {

ordered_json tool_call_json(const chat::ToolCall& c) {
  ordered_json fn;
  fn["name"] = c.name;
  fn["arguments"] = c.arguments;
  ordered_json j;
  j["id"] = c.id;
  j["type"] = "function";
  j["function"] = std::move(fn);
  return j;
}

}  // namespace

std::string chat_message_response_json(const std::string& id, int64_t created, const std::string& model,
                                       const chat::ParsedMessage& message, const std::string& finish_reason,
                                       const Usage& usage, const ordered_json& logprobs) {
  ordered_json msg;
  msg["role"] = "assistant";
  msg["content"] = message.content ? ordered_json(*message.content) : ordered_json(nullptr);
  if (!message.reasoning_content.empty()) msg["reasoning_content"] = message.reasoning_content;
  if (!message.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const chat::ToolCall& c : message.tool_calls) calls.push_back(tool_call_json(c));
    msg["tool_calls"] = std::move(calls);
  }
  ordered_json choice;
  choice["index"] = 0;
  choice["message"] = std::move(msg);
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  ordered_json j = chunk_head("chat.completion", id, created, model);
  j["choices"] = ordered_json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump_json(j);
}

ordered_json chat_chunk_delta(const std::string& id, int64_t created, const std::string& model,
                              const chat::ChatDelta& d, const ordered_json& logprobs, bool include_usage) {
  using Kind = chat::ChatDelta::Kind;
  ordered_json delta;
  switch (d.kind) {
    case Kind::Content:
      delta["content"] = d.text;
      break;
    case Kind::Reasoning:
      delta["reasoning_content"] = d.text;
      break;
    case Kind::ToolCallStart: {
      ordered_json call;
      call["index"] = d.index;
      call["id"] = d.id;
      call["type"] = "function";
      call["function"] = {{"name", d.name}, {"arguments", ""}};
      delta["tool_calls"] = ordered_json::array({std::move(call)});
      break;
    }
    case Kind::ToolCallArguments: {
      ordered_json call;
      call["index"] = d.index;
      call["function"] = {{"arguments", d.text}};
      delta["tool_calls"] = ordered_json::array({std::move(call)});
      break;
    }
  }
  ordered_json j = chunk_head("chat.completion.chunk", id, created, model);
  j["choices"] = ordered_json::array({chat_choice_chunk(std::move(delta), logprobs, nullptr)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace pagoda::server
