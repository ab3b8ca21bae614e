// Anthropic Messages responses: the message body, the SSE event sequence and the error
// shape. The contract is anthropic_protocol.h's.
#include "server/anthropic_protocol.h"

#include "common/json_parse.h"

namespace pagoda::server {

namespace {

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

ordered_json error_object(int status, std::string_view message) {
  return {{"type", "error"}, {"error", {{"type", error_type(status)}, {"message", std::string(message)}}}};
}

std::string event(const char* name, const ordered_json& data) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += dump_json(data);
  out += "\n\n";
  return out;
}

// Tool-call arguments as the block's input object; {} when they are not one (a call the
// model cut short keeps its text in content instead, so this is rare).
ordered_json input_object(const std::string& arguments) {
  ordered_json v = parse_ordered_json_or_discarded(arguments);
  return v.is_object() ? v : ordered_json::object();
}

ordered_json stop_sequence_json(const std::string& stop_reason, const std::string& stop_matched) {
  return stop_reason == "stop_sequence" ? ordered_json(stop_matched) : ordered_json(nullptr);
}

}  // namespace

std::string anthropic_error_json(int status, std::string_view message) { return dump_json(error_object(status, message)); }

ordered_json anthropic_usage_json(const AnthropicUsage& u) {
  ordered_json j;
  j["input_tokens"] = u.prompt_tokens - u.cached_tokens;
  j["cache_creation_input_tokens"] = 0;
  j["cache_read_input_tokens"] = u.cached_tokens;
  j["output_tokens"] = u.output_tokens;
  return j;
}

std::string anthropic_stop_reason(bool cut_off, bool called_tools, const std::string& stop_matched) {
  if (cut_off) return "max_tokens";
  if (called_tools) return "tool_use";
  if (!stop_matched.empty()) return "stop_sequence";
  return "end_turn";
}

std::string anthropic_message_json(const std::string& id, const std::string& model, const chat::ParsedMessage& m,
                                   const std::string& stop_reason, const std::string& stop_matched,
                                   const AnthropicUsage& usage) {
  ordered_json content = ordered_json::array();
  if (!m.reasoning_content.empty())
    content.push_back({{"type", "thinking"}, {"thinking", m.reasoning_content}, {"signature", ""}});
  if (m.content && !m.content->empty()) content.push_back({{"type", "text"}, {"text", *m.content}});
  for (const chat::ToolCall& c : m.tool_calls)
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input_object(c.arguments)}});
  ordered_json j;
  j["id"] = id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = model;
  j["content"] = std::move(content);
  j["stop_reason"] = stop_reason;
  j["stop_sequence"] = stop_sequence_json(stop_reason, stop_matched);
  j["usage"] = anthropic_usage_json(usage);
  return dump_json(j);
}

std::string AnthropicStreamWriter::start(int64_t prompt_tokens) const {
  ordered_json msg;
  msg["id"] = id_;
  msg["type"] = "message";
  msg["role"] = "assistant";
  msg["model"] = model_;
  msg["content"] = ordered_json::array();
  msg["stop_reason"] = nullptr;
  msg["stop_sequence"] = nullptr;
  msg["usage"] = anthropic_usage_json({prompt_tokens, 0, 0});
  return event("message_start", {{"type", "message_start"}, {"message", std::move(msg)}}) +
         event("ping", {{"type", "ping"}});
}

std::string AnthropicStreamWriter::close_block() {
  if (open_ == Block::None) return {};
  open_ = Block::None;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicStreamWriter::open_block(Block kind, const ordered_json& content_block) {
  std::string out = close_block();
  open_ = kind;
  ++index_;
  return out + event("content_block_start",
                     {{"type", "content_block_start"}, {"index", index_}, {"content_block", content_block}});
}

std::string AnthropicStreamWriter::delta(const chat::ChatDelta& d) {
  using Kind = chat::ChatDelta::Kind;
  std::string out;
  ordered_json delta;
  switch (d.kind) {
    case Kind::Content:
      if (d.text.empty()) return {};
      if (open_ != Block::Text) out += open_block(Block::Text, {{"type", "text"}, {"text", ""}});
      delta = {{"type", "text_delta"}, {"text", d.text}};
      break;
    case Kind::Reasoning:
      if (d.text.empty()) return {};
      if (open_ != Block::Thinking)
        out += open_block(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      delta = {{"type", "thinking_delta"}, {"thinking", d.text}};
      break;
    case Kind::ToolCallStart:
      return open_block(Block::ToolUse,
                        {{"type", "tool_use"}, {"id", d.id}, {"name", d.name}, {"input", ordered_json::object()}});
    case Kind::ToolCallArguments:
      if (d.text.empty() || open_ != Block::ToolUse) return {};
      delta = {{"type", "input_json_delta"}, {"partial_json", d.text}};
      break;
  }
  return out + event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
}

std::string AnthropicStreamWriter::finish(const std::string& stop_reason, const std::string& stop_matched,
                                          const AnthropicUsage& usage) {
  std::string out = close_block();
  ordered_json delta{{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence_json(stop_reason, stop_matched)}};
  out += event("message_delta", {{"type", "message_delta"}, {"delta", delta}, {"usage", anthropic_usage_json(usage)}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

std::string AnthropicStreamWriter::error_event(int status, std::string_view message) {
  return event("error", error_object(status, message));
}

}  // namespace pagoda::server
