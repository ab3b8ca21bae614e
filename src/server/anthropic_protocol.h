// Anthropic Messages API wire protocol (POST /v1/messages, /v1/messages/count_tokens):
// request parsing into the OpenAI-shaped CompletionRequest the chat path already serves
// (anthropic_request.cpp), and the response, SSE event and error JSON
// (anthropic_response.cpp).
//
// Contract:
// - Pure functions over JSON text (and one small stateful stream writer): no engine, no
//   sockets, no clock. Thread-safe; an AnthropicStreamWriter belongs to one request.
// - Parsing maps the Anthropic request onto the chat path's shapes and then reuses its
//   parser (parse_chat_request_body), so sampling limits, UTF-8 checks and the body's
//   depth limit are the same as /v1/chat/completions:
//   * system (a string or an array of text blocks, joined with no separator as the chat
//     path joins text parts) -> a leading {"role":"system"} message.
//   * messages: roles user / assistant only; content a string or an array of blocks:
//     text; tool_use {id, name, input: object} -> the assistant message's tool_calls
//     ({id, type:"function", function:{name, arguments: input as JSON text}});
//     tool_result {tool_use_id, content: string or text blocks, is_error} -> a
//     {"role":"tool","tool_call_id"} message (is_error prefixes the content "Error: ");
//     thinking / redacted_thinking blocks of an assistant turn -> its reasoning_content
//     (redacted ones dropped). Text blocks around tool_result blocks become user
//     messages in their order. Any other block type (image, document, ...) is a 400.
//     A last assistant message of text only is a prefill (AnthropicRequest::prefill).
//   * tools [{name, description?, input_schema}] -> function tools; a tool with a
//     `type` other than "custom" (Anthropic's server tools: bash_*, web_search_*) is a 400.
//   * tool_choice {type: auto | any | tool (+name) | none, disable_parallel_tool_use?}
//     -> "auto" | "required" | the named function | "none"; parallel_tool_calls =
//     !disable_parallel_tool_use.
//   * max_tokens: required (>= 1), as Anthropic requires it; count_tokens does not read it.
//   * stop_sequences: up to 16 non-empty strings -> stop. temperature [0, 2] (Anthropic
//     allows [0, 1]; the chat path's wider range is kept), top_p, top_k, stream.
//   * thinking {type: "enabled", budget_tokens >= 1} sets the template variable
//     enable_thinking = true, {type: "disabled"} sets it false (Qwen3-style templates
//     read it); the budget is accepted and not enforced. metadata, service_tier and
//     cache_control on blocks are accepted and ignored.
// - Errors are ApiError (400 with `param` naming the Anthropic field); answers use
//   anthropic_error_json's shape {"type":"error","error":{"type","message"}}, type by
//   status: 400 invalid_request_error, 401 authentication_error, 403 permission_error,
//   404 not_found_error, 405 invalid_request_error, 413 request_too_large, 429
//   rate_limit_error, 500 api_error, 503 and 529 overloaded_error.
// - Responses: usage.input_tokens counts the prompt tokens NOT read from the prefix
//   cache, cache_read_input_tokens those that were, cache_creation_input_tokens 0 (as
//   Anthropic: the three add up to the prompt). stop_reason: "max_tokens" when cut off,
//   "tool_use" when the model called a tool, "stop_sequence" (with stop_sequence set)
//   when a stop string ended it, else "end_turn".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "chat/chat_format.h"
#include "server/openai_protocol.h"

namespace pagoda::server {

// A parsed /v1/messages (or count_tokens) request: the chat request it maps to and the
// template variables it sets (enable_thinking; null when none).
struct AnthropicRequest {
  CompletionRequest chat;
  ordered_json template_kwargs;
  // A last assistant message of text only (Anthropic's "prefill") is taken out of
  // chat.messages: the prompt is the rest rendered with the generation prompt, then this
  // text, and the answer continues it (and holds only the continuation).
  std::string prefill;
};

// Throws ApiError. count_tokens: max_tokens is not required (the count endpoint takes
// the same body without it).
AnthropicRequest parse_anthropic_request(std::string_view body, int32_t n_vocab, const SamplingDefaults& defaults,
                                         bool count_tokens = false);

// {"type":"error","error":{"type","message"}}; the type follows the status (contract).
std::string anthropic_error_json(int status, std::string_view message);

struct AnthropicUsage {
  int64_t prompt_tokens = 0;   // the whole prompt
  int64_t cached_tokens = 0;   // of which read from the prefix cache
  int64_t output_tokens = 0;
};
ordered_json anthropic_usage_json(const AnthropicUsage& u);

// "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" (see the contract).
// stop_matched: the stop string that ended generation ("" when none).
std::string anthropic_stop_reason(bool cut_off, bool called_tools, const std::string& stop_matched);

// The non-streaming body: {id, type:"message", role:"assistant", model, content:[thinking
// block?, text block?, tool_use blocks...], stop_reason, stop_sequence, usage}. A text
// block is left out when the text is empty; tool_use input is the arguments parsed as
// a JSON object ({} when they do not parse as one).
std::string anthropic_message_json(const std::string& id, const std::string& model, const chat::ParsedMessage& m,
                                   const std::string& stop_reason, const std::string& stop_matched,
                                   const AnthropicUsage& usage);

// Anthropic's event sequence for one streamed message, as SSE text ("event: NAME\n"
// "data: {...}\n\n"). Deltas open a content block when their kind changes (closing the
// one before): Content -> a text block with text_delta, Reasoning -> a thinking block
// with thinking_delta, ToolCallStart -> a tool_use block {id, name, input:{}} whose
// ToolCallArguments arrive as input_json_delta. Empty text deltas emit nothing.
class AnthropicStreamWriter {
 public:
  AnthropicStreamWriter(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  // message_start (usage: input_tokens = the prompt, output 0) then one ping.
  std::string start(int64_t prompt_tokens) const;
  std::string delta(const chat::ChatDelta& d);
  // Closes the open block, then message_delta {stop_reason, stop_sequence, usage} and
  // message_stop.
  std::string finish(const std::string& stop_reason, const std::string& stop_matched, const AnthropicUsage& usage);
  // An `error` event (mid-stream failures: the status is already 200).
  static std::string error_event(int status, std::string_view message);

 private:
  enum class Block { None, Text, Thinking, ToolUse };
  std::string close_block();
  std::string open_block(Block kind, const ordered_json& content_block);

  std::string id_, model_;
  Block open_ = Block::None;
  int index_ = -1;  // the open (or last) block's index
};

}  // namespace pagoda::server
