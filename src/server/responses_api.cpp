// The Responses API request mapping and response / event JSON. The contract is
// responses_api.h's; validation of everything the chat endpoint also takes is
// parse_chat_request's (openai_parse.cpp, openai_tools.cpp).
#include "server/responses_api.h"

#include <charconv>
#include <utility>

#include "server/openai_fields.h"

namespace pagoda::server {

using namespace fields;

namespace {

// ---- request ------------------------------------------------------------------------

// One content value (a string or parts) as chat content: text, or with input_image parts
// an array of the chat endpoint's text and image_url parts. Parts: input_text / output_text
// (and the chat endpoint's "text"); refusal parts keep their refusal text.
ordered_json content_text(const ordered_json& content, const std::string& name) {
  if (content.is_string()) {
    std::string s = content.get<std::string>();
    require_utf8(s, name);
    return s;
  }
  if (!content.is_array()) bad(name, quoted(name) + " must be a string or an array of content parts");
  std::string joined;
  ordered_json parts = ordered_json::array();
  bool images = false;
  for (size_t p = 0; p < content.size(); ++p) {
    const ordered_json& part = content[p];
    const std::string where = name + "[" + std::to_string(p) + "]";
    if (!part.is_object()) bad(where, quoted(where) + " must be an object");
    const std::string type = opt_string(part, "type").value_or("");
    if (type == "input_image") {
      auto url = opt_string(part, "image_url");
      if (!url) bad(where + ".image_url", quoted(where + ".image_url") + " must be a string (file_id is not supported)");
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
      images = true;
      continue;
    }
    std::string key = "text";
    if (type == "refusal") {
      key = "refusal";
    } else if (type != "input_text" && type != "output_text" && type != "text") {
      bad(where, "only text and image content parts (input_text, output_text, input_image) are supported (" + where +
                     " is " + echo(type) + ")");
    }
    auto text = opt_string(part, key);
    if (!text) bad(where + "." + key, quoted(where + "." + key) + " must be a string");
    joined += *text;
    parts.push_back({{"type", "text"}, {"text", *text}});
  }
  if (images) return parts;
  return joined;
}

std::string required_string(const ordered_json& obj, const std::string& key, const std::string& where) {
  const std::string name = where + "." + key;
  const ordered_json* v = find_field(obj, key);
  if (!v) bad(name, quoted(name) + " is required");
  if (!v->is_string()) bad(name, quoted(name) + " must be a string");
  std::string s = v->get<std::string>();
  require_utf8(s, name);
  return s;
}

// Input items -> chat messages appended to `out`. A function_call joins the assistant
// message before it (an assistant turn that spoke and called), else starts one.
void append_input_items(const ordered_json& input, ordered_json& out) {
  if (input.is_string()) {
    std::string s = input.get<std::string>();
    if (s.empty()) bad("input", "'input' must not be empty");
    require_utf8(s, "input");
    out.push_back({{"role", "user"}, {"content", std::move(s)}});
    return;
  }
  if (!input.is_array()) bad("input", "'input' must be a string or an array of input items");
  if (input.empty()) bad("input", "'input' must not be empty");
  for (size_t i = 0; i < input.size(); ++i) {
    const ordered_json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad(where, quoted(where) + " must be an object");
    std::string type = opt_string(item, "type").value_or("");
    if (type.empty() && item.contains("role")) type = "message";
    if (type == "message") {
      const std::string role = required_string(item, "role", where);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad(where + ".role", quoted(where + ".role") + " must be one of user, assistant, system, developer (got " +
                                 echo(role) + ")");
      const ordered_json* content = find_field(item, "content");
      if (!content) bad(where + ".content", quoted(where + ".content") + " is required");
      out.push_back({{"role", role}, {"content", content_text(*content, where + ".content")}});
    } else if (type == "function_call") {
      const std::string call_id = required_string(item, "call_id", where);
      const std::string name = required_string(item, "name", where);
      const std::string arguments = required_string(item, "arguments", where);
      ordered_json call{{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
      if (!out.empty() && out.back()["role"] == "assistant") {
        ordered_json& prev = out.back();
        if (!prev.contains("tool_calls")) prev["tool_calls"] = ordered_json::array();
        prev["tool_calls"].push_back(std::move(call));
      } else {
        out.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ordered_json::array({call})}});
      }
    } else if (type == "function_call_output") {
      const std::string call_id = required_string(item, "call_id", where);
      const ordered_json* output = find_field(item, "output");
      if (!output) bad(where + ".output", quoted(where + ".output") + " is required");
      out.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*output, where + ".output")}});
    } else if (type == "reasoning") {
      continue;  // past thinking: chat templates drop it from earlier turns as well
    } else {
      bad(where + ".type", quoted(where + ".type") + " must be message, function_call, function_call_output or " +
                               "reasoning (got " + echo(type) + ")");
    }
  }
}

ordered_json chat_tools(const ordered_json& body) {
  const ordered_json* t = find_field(body, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) bad("tools", "'tools' must be an array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < t->size(); ++i) {
    const ordered_json& tool = (*t)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) bad("tools", quoted(where) + " must be an object");
    const std::string type = opt_string(tool, "type").value_or("");
    if (type != "function")
      bad("tools", quoted(where + ".type") + " must be \"function\": built-in tools are not supported (got " +
                       echo(type) + ")");
    ordered_json fn = ordered_json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (const ordered_json* v = find_field(tool, key)) fn[key] = *v;
    if (!fn.contains("name")) bad("tools", quoted(where + ".name") + " is required");
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ordered_json chat_tool_choice(const ordered_json& tc) {
  if (tc.is_string()) return tc;
  if (!tc.is_object()) bad("tool_choice", "'tool_choice' must be a string or an object");
  if (opt_string(tc, "type").value_or("") != "function")
    bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
  auto name = opt_string(tc, "name");
  if (!name) bad("tool_choice", "'tool_choice.name' is required");
  return {{"type", "function"}, {"function", {{"name", *name}}}};
}

ordered_json chat_response_format(const ordered_json& text) {
  if (!text.is_object()) bad("text", "'text' must be an object");
  const ordered_json* f = find_field(text, "format");
  if (!f) return nullptr;
  if (!f->is_object()) bad("text.format", "'text.format' must be an object");
  const std::string type = opt_string(*f, "type").value_or("");
  if (type == "text" || type == "json_object") return {{"type", type}};
  if (type != "json_schema")
    bad("text.format.type", "'text.format.type' must be one of text, json_object, json_schema (got " + echo(type) + ")");
  const ordered_json* schema = find_field(*f, "schema");
  if (!schema) bad("text.format.schema", "'text.format.schema' is required for json_schema");
  ordered_json js{{"schema", *schema}};
  if (const ordered_json* n = find_field(*f, "name")) js["name"] = *n;
  if (const ordered_json* s = find_field(*f, "strict")) js["strict"] = *s;
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

// A float setting as the decimal it was written as (0.6, not 0.6000000238418579).
double float_decimal(float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  double d = v;
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

// parse_chat_request names chat fields; a Responses client knows these names.
void rename_chat_param(ApiError& err) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"messages", "input"},
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format", "text.format"},
      {"reasoning_effort", "reasoning.effort"}};
  for (const auto& [chat_name, name] : kNames)
    if (err.param.rfind(chat_name, 0) == 0) {
      std::string msg = err.what();
      const std::string from = std::string("'") + chat_name, to = std::string("'") + name;
      for (size_t p = msg.find(from); p != std::string::npos; p = msg.find(from, p + to.size()))
        msg.replace(p, from.size(), to);
      err = ApiError(err.status, msg, name);
      return;
    }
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body_text, int32_t n_vocab, const SamplingDefaults& defaults,
                                         const HistoryLookup& history_of) {
  const ordered_json body = parse_body(body_text);
  ResponsesRequest r;
  if (auto bg = opt_bool(body, "background"); bg && *bg) bad("background", "'background' responses are not supported");
  if (auto s = opt_bool(body, "store")) r.store = *s;
  if (auto p = opt_string(body, "previous_response_id")) r.previous_response_id = *p;
  auto instructions = opt_string(body, "instructions");
  const ordered_json* input = find_field(body, "input");
  if (!input) bad("input", "'input' is required");
  check_metadata(body);

  // The chat request this one is.
  ordered_json chat = ordered_json::object();
  if (!r.previous_response_id.empty()) {
    std::optional<ordered_json> history = history_of(r.previous_response_id);
    if (!history)
      throw ApiError(404, "previous response " + echo(r.previous_response_id) + " not found (unknown, expired or deleted)",
                     "previous_response_id");
    r.turn_messages = std::move(*history);
  } else {
    r.turn_messages = ordered_json::array();
  }
  append_input_items(*input, r.turn_messages);
  ordered_json messages = ordered_json::array();
  if (instructions && !instructions->empty()) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const ordered_json& m : r.turn_messages) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (ordered_json tools = chat_tools(body); !tools.is_null()) chat["tools"] = std::move(tools);
  if (const ordered_json* tc = find_field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*tc);
  if (const ordered_json* t = find_field(body, "text"))
    if (ordered_json rf = chat_response_format(*t); !rf.is_null()) chat["response_format"] = std::move(rf);
  if (const ordered_json* reasoning = find_field(body, "reasoning")) {
    if (!reasoning->is_object()) bad("reasoning", "'reasoning' must be an object");
    if (auto effort = opt_string(*reasoning, "effort")) chat["reasoning_effort"] = *effort;
  }
  if (const ordered_json* m = find_field(body, "max_output_tokens")) chat["max_completion_tokens"] = *m;
  for (const char* key : {"temperature", "top_p", "stream", "parallel_tool_calls", "top_k", "min_p", "seed", "stop",
                          "presence_penalty", "frequency_penalty", "repetition_penalty", "prompt_cache_key",
                          "cache_salt", "user", "model", "grammar"})
    if (const ordered_json* v = find_field(body, key)) chat[key] = *v;

  try {
    r.chat = parse_chat_request(dump_json(chat), n_vocab, defaults);
  } catch (ApiError& err) {
    rename_chat_param(err);
    throw;
  }

  // What the response object repeats of the request, in OpenAI's field names.
  ordered_json& e = r.echo;
  e["instructions"] = instructions ? ordered_json(*instructions) : ordered_json(nullptr);
  e["max_output_tokens"] = r.chat.max_tokens > 0 ? ordered_json(r.chat.max_tokens) : ordered_json(nullptr);
  e["parallel_tool_calls"] = r.chat.parallel_tool_calls;
  e["previous_response_id"] = r.previous_response_id.empty() ? ordered_json(nullptr) : ordered_json(r.previous_response_id);
  e["reasoning"] = {{"effort", r.chat.reasoning_effort.empty() ? ordered_json(nullptr) : ordered_json(r.chat.reasoning_effort)},
                    {"summary", nullptr}};
  e["store"] = r.store;
  e["temperature"] = float_decimal(r.chat.sampling.temperature);
  ordered_json format{{"type", "text"}};
  if (const ordered_json* t = find_field(body, "text"); t && find_field(*t, "format")) format = (*t)["format"];
  e["text"] = {{"format", std::move(format)}};
  const ordered_json* tc = find_field(body, "tool_choice");
  e["tool_choice"] = tc ? *tc : ordered_json("auto");
  ordered_json tools = find_field(body, "tools") ? body["tools"] : ordered_json::array();
  e["tools"] = std::move(tools);
  e["top_p"] = float_decimal(r.chat.sampling.top_p);
  e["truncation"] = "disabled";
  const ordered_json* metadata = find_field(body, "metadata");
  e["metadata"] = metadata ? *metadata : ordered_json::object();
  return r;
}

// ---- response -------------------------------------------------------------------------

namespace {

std::string id_stem(const std::string& response_id) {
  return response_id.rfind("resp_", 0) == 0 ? response_id.substr(5) : response_id;
}
std::string message_item_id(const std::string& response_id) { return "msg_" + id_stem(response_id); }
std::string reasoning_item_id(const std::string& response_id) { return "rs_" + id_stem(response_id); }
std::string call_item_id(const std::string& response_id, int n) {
  return "fc_" + id_stem(response_id) + "_" + std::to_string(n);
}

ordered_json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", ordered_json::array()},
          {"logprobs", ordered_json::array()}};
}

ordered_json message_item(const std::string& id, const std::string& status, ordered_json content) {
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

ordered_json reasoning_item(const std::string& id, const std::string& text) {
  ordered_json content = ordered_json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", ordered_json::array()}, {"content", std::move(content)}};
}

ordered_json call_item(const std::string& id, const std::string& call_id, const std::string& name,
                       const std::string& arguments, const std::string& status) {
  return {{"type", "function_call"}, {"id", id},         {"call_id", call_id},
          {"name", name},            {"arguments", arguments}, {"status", status}};
}

}  // namespace

ordered_json responses_usage_json(const Usage& u, int64_t reasoning_tokens) {
  ordered_json j;
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

ordered_json response_output_items(const std::string& response_id, const chat::ParsedMessage& m, bool incomplete) {
  ordered_json out = ordered_json::array();
  if (!m.reasoning_content.empty()) out.push_back(reasoning_item(reasoning_item_id(response_id), m.reasoning_content));
  if (m.content || m.tool_calls.empty())
    out.push_back(message_item(message_item_id(response_id), incomplete ? "incomplete" : "completed",
                               ordered_json::array({output_text_part(m.content.value_or(""))})));
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    const chat::ToolCall& c = m.tool_calls[i];
    out.push_back(call_item(call_item_id(response_id, static_cast<int>(i)), c.id, c.name, c.arguments, "completed"));
  }
  return out;
}

ordered_json response_object(const ResponseMeta& meta, const std::string& status, ordered_json output,
                             ordered_json usage, ordered_json error) {
  ordered_json j;
  j["id"] = meta.id;
  j["object"] = "response";
  j["created_at"] = meta.created_at;
  j["status"] = status;
  j["error"] = std::move(error);
  j["incomplete_details"] =
      status == "incomplete" ? ordered_json{{"reason", "max_output_tokens"}} : ordered_json(nullptr);
  j["model"] = meta.model;
  j["output"] = std::move(output);
  for (const auto& [key, value] : meta.echo.items()) j[key] = value;
  j["usage"] = std::move(usage);
  return j;
}

ordered_json assistant_turn_message(const chat::ParsedMessage& m) {
  ordered_json msg{{"role", "assistant"}, {"content", m.content ? ordered_json(*m.content) : ordered_json(nullptr)}};
  if (!m.content && m.tool_calls.empty()) msg["content"] = "";
  if (!m.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const chat::ToolCall& c : m.tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    msg["tool_calls"] = std::move(calls);
  }
  return msg;
}

ordered_json response_deleted_json(const std::string& id) {
  return {{"id", id}, {"object", "response"}, {"deleted", true}};
}

std::string responses_sse(const ordered_json& event) {
  std::string out = "event: ";
  out += event["type"].get<std::string>();
  out += "\ndata: ";
  out += dump_json(event);
  out += "\n\n";
  return out;
}

// ---- streaming ----------------------------------------------------------------------

ResponsesStreamWriter::ResponsesStreamWriter(ResponseMeta meta) : meta_(std::move(meta)) {}

ordered_json ResponsesStreamWriter::event(const std::string& type) {
  ordered_json e;
  e["type"] = type;
  e["sequence_number"] = sequence_++;
  return e;
}

// An event about the open (last) item: item_id, output_index and, for a message or
// reasoning text, content_index 0 (one part per item).
ordered_json ResponsesStreamWriter::item_event(const std::string& type) {
  ordered_json e = event(type);
  e["item_id"] = output_.back()["id"];
  e["output_index"] = output_.size() - 1;
  if (open_ == Open::Message || open_ == Open::Reasoning) e["content_index"] = 0;
  return e;
}

std::string ResponsesStreamWriter::begin() {
  ordered_json created = event("response.created");
  created["response"] = response_object(meta_, "in_progress", ordered_json::array(), nullptr);
  ordered_json progress = event("response.in_progress");
  progress["response"] = response_object(meta_, "in_progress", ordered_json::array(), nullptr);
  return responses_sse(created) + responses_sse(progress);
}

std::string ResponsesStreamWriter::open_item(ordered_json item) {
  output_.push_back(item);
  ordered_json added = event("response.output_item.added");
  added["output_index"] = output_.size() - 1;
  added["item"] = std::move(item);
  return responses_sse(added);
}

std::string ResponsesStreamWriter::close_open(bool incomplete) {
  if (open_ == Open::None) return {};
  std::string out;
  const size_t index = output_.size() - 1;
  ordered_json& item = output_[index];
  const std::string item_id = item["id"];
  if (open_ == Open::Message) {
    ordered_json done = item_event("response.output_text.done");
    done["text"] = text_;
    done["logprobs"] = ordered_json::array();
    out += responses_sse(done);
    ordered_json part_done = item_event("response.content_part.done");
    part_done["part"] = output_text_part(text_);
    out += responses_sse(part_done);
    item["content"] = ordered_json::array({output_text_part(text_)});
    item["status"] = incomplete ? "incomplete" : "completed";
  } else if (open_ == Open::Reasoning) {
    ordered_json done = item_event("response.reasoning_text.done");
    done["text"] = text_;
    out += responses_sse(done);
    item = reasoning_item(item_id, text_);
  } else {
    ordered_json done = item_event("response.function_call_arguments.done");
    done["arguments"] = text_;
    out += responses_sse(done);
    item["arguments"] = text_;
    item["status"] = "completed";
  }
  ordered_json item_done = event("response.output_item.done");
  item_done["output_index"] = index;
  item_done["item"] = item;
  out += responses_sse(item_done);
  open_ = Open::None;
  text_.clear();
  return out;
}

// Closes the open item, opens a message: output_item.added, content_part.added.
std::string ResponsesStreamWriter::open_message() {
  std::string out = close_open(false);
  // A message interrupted by a tool call and resumed gets a new item.
  const std::string id = message_item_id(meta_.id) + (had_message_ ? "_" + std::to_string(output_.size()) : "");
  out += open_item(message_item(id, "in_progress", ordered_json::array()));
  open_ = Open::Message;
  had_message_ = true;
  ordered_json part = item_event("response.content_part.added");
  part["part"] = output_text_part("");
  out += responses_sse(part);
  return out;
}

std::string ResponsesStreamWriter::push(const chat::ChatDelta& d) {
  using Kind = chat::ChatDelta::Kind;
  std::string out;
  switch (d.kind) {
    case Kind::Content: {
      if (d.text.empty()) return out;
      if (open_ != Open::Message) out += open_message();
      text_ += d.text;
      ordered_json delta = item_event("response.output_text.delta");
      delta["delta"] = d.text;
      delta["logprobs"] = ordered_json::array();
      out += responses_sse(delta);
      break;
    }
    case Kind::Reasoning: {
      if (d.text.empty()) return out;
      if (open_ != Open::Reasoning) {
        out += close_open(false);
        out += open_item(reasoning_item(reasoning_item_id(meta_.id), ""));
        open_ = Open::Reasoning;
      }
      text_ += d.text;
      ordered_json delta = item_event("response.reasoning_text.delta");
      delta["delta"] = d.text;
      out += responses_sse(delta);
      break;
    }
    case Kind::ToolCallStart:
      out += close_open(false);
      out += open_item(call_item(call_item_id(meta_.id, calls_++), d.id, d.name, "", "in_progress"));
      open_ = Open::Call;
      break;
    case Kind::ToolCallArguments: {
      if (open_ != Open::Call || d.text.empty()) return out;
      text_ += d.text;
      ordered_json delta = item_event("response.function_call_arguments.delta");
      delta["delta"] = d.text;
      out += responses_sse(delta);
      break;
    }
  }
  return out;
}

std::string ResponsesStreamWriter::finish(bool incomplete, const ordered_json& usage, ordered_json* final_response) {
  std::string out;
  // Nothing said and nothing called: an empty message, as the non-streaming output has.
  if (!had_message_ && calls_ == 0) out += open_message();
  out += close_open(incomplete);
  const std::string status = incomplete ? "incomplete" : "completed";
  ordered_json done = event(incomplete ? "response.incomplete" : "response.completed");
  done["response"] = response_object(meta_, status, output_, usage);
  if (final_response) *final_response = done["response"];
  out += responses_sse(done);
  return out;
}

std::string ResponsesStreamWriter::fail(int status, const std::string& message) {
  ordered_json err = event("error");
  err["code"] = status >= 500 ? "server_error" : "invalid_request_error";
  err["message"] = message;
  err["param"] = nullptr;
  ordered_json failed = event("response.failed");
  failed["response"] = response_object(meta_, "failed", output_, nullptr,
                                       {{"code", status >= 500 ? "server_error" : "invalid_request_error"},
                                        {"message", message}});
  return responses_sse(err) + responses_sse(failed);
}

}  // namespace pagoda::server
