// The OpenAI Responses API (POST /v1/responses) mapped onto the chat machinery: a
// request becomes a Chat Completions request (messages, tools, response_format, ...)
// that parse_chat_request validates and the chat template renders; the parsed
// assistant output (content, reasoning, tool calls) becomes Responses output items,
// non-streaming or as Responses SSE events.
//
// Contract:
// - Pure functions and a per-request event writer over JSON: no engine, no sockets,
//   no clock (callers pass `created_at`). Thread-safe (the writer is per request).
// - Request shapes accepted (others are a 400 naming the field, `param` set):
//   * input: a non-empty string (one user message) or a non-empty array of items:
//     messages {type?:"message", role: user|assistant|system|developer, content:
//     string | [{type: input_text|output_text, text}]}, {type:"function_call",
//     call_id, name, arguments}, {type:"function_call_output", call_id, output:
//     string | [{type:input_text,text}]}, {type:"reasoning"} (accepted, dropped: the
//     templates drop past thinking too). Images, files and item references are a 400.
//   * instructions: the system message, first; not carried into a continuation.
//   * tools: [{type:"function", name, description?, parameters?, strict?}] (built-in
//     tools such as web_search are a 400); tool_choice "auto"|"none"|"required"|
//     {type:"function", name}; parallel_tool_calls.
//   * text.format: {type:"text"} | {type:"json_object"} | {type:"json_schema", name,
//     schema, strict} -> the structured-output grammar of response_format.
//   * reasoning.effort -> reasoning_effort; max_output_tokens (>= 1); temperature;
//     top_p; stream; store (default true); previous_response_id; metadata (an object,
//     echoed); and the extensions the chat endpoint takes (top_k, min_p, seed, stop,
//     penalties, prompt_cache_key, cache_salt, user, grammar).
//   * background: true is a 400 (not supported); unknown fields are ignored.
// - previous_response_id: the stored conversation (ResponsesStore::Entry::messages) is
//   put before this request's input, after its instructions; an unknown id is a 404.
// - Output items, in order: a reasoning item when the model reasoned
//   {type:"reasoning", id:"rs_..", summary:[], content:[{type:"reasoning_text",text}]},
//   the message {type:"message", id:"msg_..", status, role:"assistant",
//   content:[{type:"output_text", text, annotations:[], logprobs:[]}]} (left out when
//   the output was only tool calls), then each call {type:"function_call",
//   id:"fc_.._N", call_id, name, arguments, status:"completed"}.
// - status "completed", or "incomplete" with incomplete_details {reason:
//   "max_output_tokens"} when generation hit the token limit.
// - usage: {input_tokens, input_tokens_details:{cached_tokens}, output_tokens,
//   output_tokens_details:{reasoning_tokens}, total_tokens}.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "chat/chat_format.h"
#include "server/openai_protocol.h"

namespace pagoda::server {

struct ResponsesRequest {
  CompletionRequest chat;            // messages = instructions + history + this input
  ordered_json turn_messages;        // history + this input as chat messages (no instructions):
                                     // what a continuation starts from
  std::string previous_response_id;  // "" when none
  bool store = true;
  ordered_json echo = ordered_json::object();  // request fields the response object repeats
};

// `history_of(id)`: the stored conversation of a previous response, nullopt when unknown
// (then a 404). Throws ApiError.
using HistoryLookup = std::function<std::optional<ordered_json>(const std::string& id)>;
ResponsesRequest parse_responses_request(std::string_view body, int32_t n_vocab, const SamplingDefaults& defaults,
                                         const HistoryLookup& history_of);

struct ResponseMeta {
  std::string id;  // "resp_<stem>"; item ids are derived from the stem
  int64_t created_at = 0;
  std::string model;
  ordered_json echo = ordered_json::object();
};

ordered_json responses_usage_json(const Usage& usage, int64_t reasoning_tokens);
// The output items of a parsed assistant message (see the contract); `incomplete`
// marks the message item "incomplete".
ordered_json response_output_items(const std::string& response_id, const chat::ParsedMessage& message,
                                   bool incomplete);
// The response object. status: "in_progress" | "completed" | "incomplete" | "failed";
// usage null while in progress; error null unless failed.
ordered_json response_object(const ResponseMeta& meta, const std::string& status, ordered_json output,
                             ordered_json usage, ordered_json error = nullptr);
// The assistant turn as chat messages (for the store): {role:"assistant", content,
// tool_calls?}.
ordered_json assistant_turn_message(const chat::ParsedMessage& message);
// {"id","object":"response","deleted":true}
ordered_json response_deleted_json(const std::string& id);

// One SSE event: "event: <type>\ndata: <json>\n\n".
std::string responses_sse(const ordered_json& event);

// The Responses event sequence of one streamed response. Every event carries
// sequence_number 0, 1, 2, ... in the order returned. Items open as their first delta
// arrives (an open item is closed before the next opens): output_item.added,
// content_part.added, output_text.delta* (message); output_item.added,
// reasoning_text.delta* (reasoning); output_item.added,
// function_call_arguments.delta* (call); closing: output_text.done,
// content_part.done / reasoning_text.done / function_call_arguments.done, then
// output_item.done.
class ResponsesStreamWriter {
 public:
  explicit ResponsesStreamWriter(ResponseMeta meta);
  // response.created, response.in_progress.
  std::string begin();
  std::string push(const chat::ChatDelta& delta);
  // Closes the open item (an empty message when nothing was output), then
  // response.completed or response.incomplete. *final_response: the response object
  // that event carries.
  std::string finish(bool incomplete, const ordered_json& usage, ordered_json* final_response = nullptr);
  // An `error` event and response.failed, for a generation that failed mid-stream.
  std::string fail(int status, const std::string& message);

 private:
  enum class Open { None, Message, Reasoning, Call };
  ordered_json event(const std::string& type);
  ordered_json item_event(const std::string& type);
  std::string close_open(bool incomplete);
  std::string open_item(ordered_json item);
  std::string open_message();

  ResponseMeta meta_;
  int64_t sequence_ = 0;
  Open open_ = Open::None;
  std::string text_;        // the open item's text / arguments so far
  ordered_json output_ = ordered_json::array();  // items closed so far, then the open one
  int calls_ = 0;
  bool had_message_ = false;
};

}  // namespace pagoda::server
