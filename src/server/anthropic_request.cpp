// Anthropic Messages request parsing: the Anthropic body is checked field by field and
// rewritten as the chat-completions body it means, which parse_chat_request_body then
// parses (one definition of sampling limits, stop strings, tools and tool_choice). The
// contract is anthropic_protocol.h's.
#include <set>

#include "server/anthropic_protocol.h"
#include "server/openai_fields.h"

namespace pagoda::server {

using namespace fields;

namespace {

constexpr size_t kMaxStopSequences = 16;  // as the chat path's `stop`

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

const std::string& block_type(const ordered_json& block, const std::string& where) {
  if (!block.is_object()) bad(where, quoted(where) + " must be an object");
  const ordered_json* type = find_field(block, "type");
  if (!type || !type->is_string()) bad(where + ".type", quoted(where + ".type") + " is required");
  return type->get_ref<const std::string&>();
}

std::string text_of(const ordered_json& block, const std::string& where) {
  auto text = opt_string(block, "text");
  if (!text) bad(where + ".text", quoted(where + ".text") + " must be a string");
  return *text;
}

// A string, or an array of text blocks joined (system, tool_result content).
std::string text_content(const ordered_json& v, const std::string& where) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    require_utf8(s, where);
    return s;
  }
  if (!v.is_array()) bad(where, quoted(where) + " must be a string or an array of text blocks");
  std::string joined;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = at(where, i);
    const std::string& type = block_type(v[i], name);
    if (type != "text") bad(name, "only text blocks are supported in " + quoted(where) + " (got " + echo(type) + ")");
    joined += text_of(v[i], name);
  }
  return joined;
}

ordered_json tool_call(const ordered_json& block, const std::string& where) {
  auto id = opt_string(block, "id");
  auto name = opt_string(block, "name");
  if (!id || id->empty()) bad(where + ".id", quoted(where + ".id") + " is required");
  if (!name || name->empty()) bad(where + ".name", quoted(where + ".name") + " is required");
  const ordered_json* input = find_field(block, "input");
  if (!input || !input->is_object()) bad(where + ".input", quoted(where + ".input") + " must be an object");
  ordered_json fn;
  fn["name"] = *name;
  fn["arguments"] = dump_json(*input);
  ordered_json call;
  call["id"] = *id;
  call["type"] = "function";
  call["function"] = std::move(fn);
  return call;
}

ordered_json tool_message(const ordered_json& block, const std::string& where) {
  auto id = opt_string(block, "tool_use_id");
  if (!id || id->empty()) bad(where + ".tool_use_id", quoted(where + ".tool_use_id") + " is required");
  std::string content;
  if (const ordered_json* c = find_field(block, "content")) content = text_content(*c, where + ".content");
  if (auto err = opt_bool(block, "is_error"); err && *err) content = "Error: " + content;
  return {{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(content)}};
}

// An image block's source as a URL: {"type": "base64", "media_type", "data"} becomes a
// data: URL; {"type": "url", "url"} stays as it is (the server decides whether it fetches).
std::string image_block_url(const ordered_json& block, const std::string& where) {
  const ordered_json* src = find_field(block, "source");
  if (!src || !src->is_object()) bad(where + ".source", quoted(where + ".source") + " must be an object");
  auto type = opt_string(*src, "type");
  if (type == "base64") {
    auto mt = opt_string(*src, "media_type");
    auto data = opt_string(*src, "data");
    if (!mt) bad(where + ".source.media_type", quoted(where + ".source.media_type") + " is required");
    if (!data) bad(where + ".source.data", quoted(where + ".source.data") + " is required");
    return "data:" + *mt + ";base64," + *data;
  }
  if (type == "url") {
    auto url = opt_string(*src, "url");
    if (!url) bad(where + ".source.url", quoted(where + ".source.url") + " is required");
    return *url;
  }
  bad(where + ".source.type", quoted(where + ".source.type") + " must be \"base64\" or \"url\"");
}

// One Anthropic message as one or more chat messages appended to `out`.
void convert_message(const ordered_json& m, const std::string& where, ordered_json& out) {
  if (!m.is_object()) bad(where, quoted(where) + " must be an object");
  auto role = opt_string(m, "role");
  if (!role) bad(where + ".role", quoted(where + ".role") + " is required");
  if (*role != "user" && *role != "assistant")
    bad(where + ".role", quoted(where + ".role") + " must be \"user\" or \"assistant\" (got " + echo(*role) +
                             "); a system prompt goes in the top-level 'system'");
  const ordered_json* content = find_field(m, "content");
  if (!content) bad(where + ".content", quoted(where + ".content") + " is required");
  const std::string name = where + ".content";
  if (content->is_string()) {
    std::string s = content->get<std::string>();
    require_utf8(s, name);
    out.push_back({{"role", *role}, {"content", std::move(s)}});
    return;
  }
  if (!content->is_array()) bad(name, quoted(name) + " must be a string or an array of content blocks");

  if (*role == "assistant") {
    std::string text, reasoning;
    ordered_json calls = ordered_json::array();
    for (size_t i = 0; i < content->size(); ++i) {
      const std::string bn = at(name, i);
      const std::string& type = block_type((*content)[i], bn);
      if (type == "text") {
        text += text_of((*content)[i], bn);
      } else if (type == "tool_use") {
        calls.push_back(tool_call((*content)[i], bn));
      } else if (type == "thinking") {
        if (auto t = opt_string((*content)[i], "thinking")) reasoning += *t;
      } else if (type != "redacted_thinking") {
        bad(bn, "unsupported content block type " + echo(type) + " in an assistant message (" + bn + ")");
      }
    }
    ordered_json msg{{"role", "assistant"}};
    msg["content"] = calls.empty() || !text.empty() ? ordered_json(text) : ordered_json(nullptr);
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out.push_back(std::move(msg));
    return;
  }

  // user: runs of text and image blocks become user messages (images as image_url parts),
  // each tool_result a tool message.
  std::optional<ordered_json> parts;
  auto flush = [&] {
    if (parts) out.push_back({{"role", "user"}, {"content", std::move(*parts)}});
    parts.reset();
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bn = at(name, i);
    const std::string& type = block_type((*content)[i], bn);
    if (!parts && (type == "text" || type == "image")) parts = ordered_json::array();
    if (type == "text") {
      parts->push_back({{"type", "text"}, {"text", text_of((*content)[i], bn)}});
    } else if (type == "image") {
      parts->push_back({{"type", "image_url"}, {"image_url", {{"url", image_block_url((*content)[i], bn)}}}});
    } else if (type == "tool_result") {
      flush();
      out.push_back(tool_message((*content)[i], bn));
    } else {
      bad(bn, "unsupported content block type " + echo(type) + " in a user message (" + bn +
                  "): text, image and tool_result are supported");
    }
  }
  flush();
  if (content->empty()) out.push_back({{"role", "user"}, {"content", ""}});
}

ordered_json convert_messages(const ordered_json& body) {
  ordered_json out = ordered_json::array();
  if (const ordered_json* system = find_field(body, "system"))
    out.push_back({{"role", "system"}, {"content", text_content(*system, "system")}});
  const ordered_json* messages = find_field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  if (!messages->is_array()) bad("messages", "'messages' must be an array");
  if (messages->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) convert_message((*messages)[i], at("messages", i), out);
  return out;
}

ordered_json convert_tools(const ordered_json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = at("tools", i);
    const ordered_json& t = tools[i];
    if (!t.is_object()) bad("tools", quoted(where) + " must be an object");
    if (auto type = opt_string(t, "type"); type && *type != "custom")
      bad("tools", quoted(where + ".type") + " " + echo(*type) +
                       " is not supported: only client tools ({name, description, input_schema})");
    auto name = opt_string(t, "name");
    if (!name || name->empty()) bad("tools", quoted(where + ".name") + " is required");
    const ordered_json* schema = find_field(t, "input_schema");
    if (!schema || !schema->is_object()) bad("tools", quoted(where + ".input_schema") + " must be a JSON schema object");
    ordered_json fn{{"name", *name}};
    if (auto d = opt_string(t, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice -> the chat body's tool_choice / parallel_tool_calls.
void convert_tool_choice(const ordered_json& tc, ordered_json& chat) {
  if (!tc.is_object()) bad("tool_choice", "'tool_choice' must be an object {\"type\": auto | any | tool | none}");
  auto type = opt_string(tc, "type");
  if (!type) bad("tool_choice", "'tool_choice.type' is required");
  const bool have_tools = chat.contains("tools") && !chat["tools"].empty();
  if (*type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (*type == "none") {
    chat["tool_choice"] = "none";
  } else if (*type == "any") {
    if (!have_tools) bad("tool_choice", "'tool_choice' is {\"type\": \"any\"} but no 'tools' were given");
    chat["tool_choice"] = "required";
  } else if (*type == "tool") {
    auto name = opt_string(tc, "name");
    if (!name || name->empty()) bad("tool_choice", "'tool_choice.name' is required with {\"type\": \"tool\"}");
    std::set<std::string> names;
    if (have_tools)
      for (const ordered_json& t : chat["tools"]) names.insert(t["function"]["name"].get<std::string>());
    if (!names.count(*name))
      bad("tool_choice", "'tool_choice' names the tool " + echo(*name) + ", which is not in 'tools'");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    bad("tool_choice", "'tool_choice.type' must be auto, any, tool or none (got " + echo(*type) + ")");
  }
  if (auto d = opt_bool(tc, "disable_parallel_tool_use")) chat["parallel_tool_calls"] = !*d;
}

// thinking -> the template variable enable_thinking (null: the template's default).
ordered_json thinking_kwargs(const ordered_json& body) {
  const ordered_json* t = find_field(body, "thinking");
  if (!t) return nullptr;
  if (!t->is_object()) bad("thinking", "'thinking' must be an object {\"type\": \"enabled\", \"budget_tokens\": N}");
  auto type = opt_string(*t, "type");
  if (type == "enabled") {
    auto budget = opt_integer(*t, "budget_tokens");
    if (!budget) bad("thinking.budget_tokens", "'thinking.budget_tokens' is required");
    check_min("thinking.budget_tokens", *budget, 1);
    return {{"enable_thinking", true}};
  }
  if (type == "disabled") return {{"enable_thinking", false}};
  bad("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"");
}

}  // namespace

AnthropicRequest parse_anthropic_request(std::string_view body_text, int32_t n_vocab,
                                         const SamplingDefaults& defaults, bool count_tokens) {
  const ordered_json body = parse_body(body_text);
  ordered_json chat = ordered_json::object();
  if (auto model = opt_string(body, "model")) chat["model"] = *model;
  chat["messages"] = convert_messages(body);
  if (const ordered_json* tools = find_field(body, "tools")) chat["tools"] = convert_tools(*tools);
  if (const ordered_json* tc = find_field(body, "tool_choice")) convert_tool_choice(*tc, chat);

  auto max_tokens = opt_integer(body, "max_tokens");
  if (!count_tokens) {
    if (!max_tokens) bad("max_tokens", "'max_tokens' is required");
    check_min("max_tokens", *max_tokens, 1);
    chat["max_tokens"] = *max_tokens;
  }
  if (const ordered_json* stop = find_field(body, "stop_sequences")) {
    if (!stop->is_array()) bad("stop_sequences", "'stop_sequences' must be an array of strings");
    if (stop->size() > kMaxStopSequences)
      bad("stop_sequences", "'stop_sequences' may hold at most " + std::to_string(kMaxStopSequences) +
                                " strings (got " + std::to_string(stop->size()) + ")");
    for (const ordered_json& s : *stop)
      if (!s.is_string() || s.get_ref<const std::string&>().empty())
        bad("stop_sequences", "'stop_sequences' must hold non-empty strings");
    if (!stop->empty()) chat["stop"] = *stop;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"})
    if (const ordered_json* v = find_field(body, key)) chat[key] = *v;
  if (const ordered_json* md = find_field(body, "metadata"); md && !md->is_object())
    bad("metadata", "'metadata' must be an object");

  AnthropicRequest r;
  ordered_json& messages = chat["messages"];
  const ordered_json& last = messages.back();
  if (last["role"] == "assistant" && !last.contains("tool_calls") && !last.contains("reasoning_content") &&
      messages.size() > 1) {
    r.prefill = last["content"].get<std::string>();
    messages.erase(messages.size() - 1);
  }
  r.template_kwargs = thinking_kwargs(body);
  r.chat = parse_chat_request_body(chat, n_vocab, defaults);
  return r;
}

}  // namespace pagoda::server
