// OpenAI wire protocol: request parsing/validation (openai_parse.cpp, openai_tools.cpp)
// and response / SSE chunk JSON (openai_render.cpp).
//
// Contract:
// - Pure functions over JSON text: no engine, no sockets, no clock (callers pass
//   `created`). Thread-safe.
// - Parsing validates every field it reads, in OpenAI's shapes, and throws ApiError
//   (status 400, a one-line message naming the field, `param` set to the field name)
//   for invalid JSON, a body that is not an object, wrong types, out-of-range values,
//   `n` > 1, and invalid UTF-8 in any string it keeps (prompts, messages, stop
//   strings). Unknown fields are ignored. Missing fields take the defaults below.
// - Defaults (OpenAI's / vLLM's): temperature 1, top_p 1, top_k off (-1 or 0), min_p 0,
//   penalties off, seed random, max_tokens unlimited (-1: until the context is
//   full), stream false, include_usage false, cache_prompt true.
// - Field aliases: max_completion_tokens == max_tokens (if both, max_completion_tokens
//   wins); chat `logprobs: bool` + `top_logprobs: 0..20`; completions `logprobs: int
//   0..5` means logprobs on with that many top alternatives.
// - prompt_cache_key and cache_salt both isolate tenants: cache_key is
//   "k:" + prompt_cache_key + "\x1f" + "s:" + cache_salt (empty parts omitted; "" when
//   neither is given), so the same salt with different keys never shares.
// - Response JSON follows OpenAI field names and shapes exactly; `usage` is always
//   present (with prompt_tokens_details.cached_tokens) in non-streaming responses
//   and in the final usage chunk when include_usage.
// - Details the rules above leave open, as implemented:
//   * JSON null in any field means "not given" (OpenAI clients send null).
//   * Integer fields take an integral number too (40.0); token ids (prompt, tokens)
//     must be JSON integers.
//   * A body nested deeper than 64 levels is a 400 (every consumer after the parser
//     recurses); a number beyond double's range (1e999) is a 400 "invalid JSON".
//   * Range checks: temperature [0, 2], top_p (0, 1], top_k >= -1, min_p [0, 1],
//     presence/frequency_penalty [-2, 2], repetition_penalty > 0, max_tokens and
//     max_completion_tokens >= 1 (both validated when both are sent), min_tokens >= 0
//     and <= max_tokens when that is set, logit_bias values [-100, 100] with canonical
//     decimal keys ("5", not "05"), then SamplingParams::validate(n_vocab).
//   * seed: any int64, reinterpreted as uint64; so -1 is kRandomSeed (random).
//   * penalty_last_n is -1: OpenAI's penalties count every generated token.
//   * stop: an empty string, alone or in the array, is a 400 (it would match at once).
//   * prompt_cache_key / cache_salt containing U+001F are a 400, so no key can spell
//     another tenant's "<key>\x1fs:<salt>".
//   * Chat content null (or absent) only on an assistant message with tool_calls (or
//     function_call); it is then set to null in `messages`.
//   * Completions: best_of other than 1 and a non-empty suffix are 400 (unsupported).
//   * user (an end-user id for the provider's abuse monitoring): accepted when a string
//     or null, since OpenAI clients send it, and otherwise ignored (nothing here
//     monitors users).
//   * completion_logprobs_json: text_offset counts bytes (OpenAI counts characters);
//     two top alternatives with the same text keep the first (better) one.
//   * Logprobs that are -inf/NaN are written as -9999.0 (JSON has no infinity), others
//     as the float's shortest decimal.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "common/json_text.h"
#include "common/utf8.h"
#include "engine/sampler.h"

namespace pagoda::server {

using ordered_json = nlohmann::ordered_json;

// A client error the server answers with `status` (400 unless said otherwise).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {})
      : std::runtime_error(message), status(status), param(std::move(param)) {}
  int status;
  std::string param;
};

enum class ApiKind { Chat, Completion };

// What the output must match (structured outputs), from response_format or one of the
// extension fields; at most one per request (two are a 400).
struct OutputConstraint {
  enum class Kind { None, JsonObject, JsonSchema, Grammar, Regex, Choice };
  Kind kind = Kind::None;
  ordered_json schema;               // JsonSchema
  std::string text;                  // Grammar (GBNF) / Regex
  std::vector<std::string> choices;  // Choice
  std::string param;                 // the request field it came from (for errors)
};

// tool_choice: Auto (default with tools), None (default without), Required (one or more
// calls, constrained), Named (a call of tool_choice_name, constrained).
enum class ToolChoice { Auto, None, Required, Named };

// What an image part becomes in a message's text until the template has rendered (the
// marker llama-server uses; text holding it literally is refused when images are sent).
inline constexpr const char* kImageMarker = "<__media__>";

struct CompletionRequest {
  ApiKind kind = ApiKind::Chat;
  std::string model;                 // "" when absent
  // Chat: the messages as sent, with every `content` that is an array of parts
  // ({"type":"text","text":...}) joined into one string (parts concatenated with no
  // separator; a non-text part is a 400), and null content kept as null. Roles
  // system/user/assistant/tool/developer; tool_calls and tool_call_id kept as sent.
  ordered_json messages = ordered_json::array();
  // Images (image_url parts; Anthropic image blocks and Responses input_image parts arrive
  // as such parts): each became kImageMarker in its message's text; their URLs, in order.
  std::vector<std::string> image_urls;
  ordered_json tools;                // null, or the request's `tools` array (each checked:
                                     // {"type":"function","function":{"name",...}})
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_choice_name;      // Named
  bool parallel_tool_calls = true;
  OutputConstraint constraint;       // response_format / grammar / json_schema / guided_*
  std::string reasoning_effort;      // "" or low / medium / high (reaches the template)
  ordered_json chat_template_kwargs; // null, or an object (extension, as vLLM)
  // Completion: exactly one of these is set. Token ids must be in [0, n_vocab).
  std::optional<std::string> prompt_text;
  std::optional<std::vector<int32_t>> prompt_tokens;

  SamplingParams sampling;           // temperature, top_p, top_k, min_p, penalties,
                                     // seed, logit_bias (ids checked against n_vocab)
  int64_t max_tokens = -1;
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  bool speculative = true;           // extension: false turns speculative decoding off for it
  std::vector<std::string> stop;     // string or list of up to 16 non-empty strings
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  bool echo = false;                 // completions: rejected with 400 when true (unsupported)
  std::string cache_key;             // see the contract
  bool cache_prompt = true;
};

// Server-side defaults for the sampling fields a request leaves out (a model's
// generation_config.json); unset ones keep OpenAI's defaults.
struct SamplingDefaults {
  std::optional<float> temperature, top_p, repetition_penalty;
  std::optional<int32_t> top_k;
};

// Throws ApiError. n_vocab bounds token ids (prompt and logit_bias keys, which OpenAI
// sends as strings: {"50256": -100}).
CompletionRequest parse_chat_request(std::string_view body, int32_t n_vocab, const SamplingDefaults& defaults = {});
// The same over a parsed body (the Anthropic parser hands over the chat-shaped body it
// built from a /v1/messages request).
CompletionRequest parse_chat_request_body(const ordered_json& body, int32_t n_vocab,
                                          const SamplingDefaults& defaults = {});
CompletionRequest parse_completion_request(std::string_view body, int32_t n_vocab,
                                           const SamplingDefaults& defaults = {});

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
ordered_json usage_json(const Usage& u);  // with total_tokens and prompt_tokens_details

struct TopLogprob {
  std::string token;  // the token's text (decoded piece)
  float logprob = 0;
};
struct TokenLogprobInfo {
  std::string token;
  float logprob = 0;
  std::vector<TopLogprob> top;  // best first
};

// Chat: {"content":[{"token","logprob","bytes":[...],"top_logprobs":[{"token","logprob","bytes"}]}]}
ordered_json chat_logprobs_json(const std::vector<TokenLogprobInfo>& tokens);
// Completions: {"tokens":[...],"token_logprobs":[...],"top_logprobs":[{tok:lp}...],"text_offset":[...]}
ordered_json completion_logprobs_json(const std::vector<TokenLogprobInfo>& tokens,
                                      size_t text_offset_base);

// Non-streaming response bodies. finish_reason: "stop" or "length" (engine reasons
// are mapped by the caller). logprobs: null when not asked for.
std::string chat_response_json(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason,
                               const Usage& usage, const ordered_json& logprobs);
// The same with a parsed assistant message (openai_tools.cpp): content (null when only
// tool calls), reasoning_content when there was any, tool_calls [{id, type:"function",
// function:{name, arguments}}] when any.
std::string chat_message_response_json(const std::string& id, int64_t created, const std::string& model,
                                       const chat::ParsedMessage& message, const std::string& finish_reason,
                                       const Usage& usage, const ordered_json& logprobs);
// A streaming chunk for one parsed delta (openai_tools.cpp): delta.content,
// delta.reasoning_content, or delta.tool_calls[{index, id, type, function:{name,
// arguments:""}}] for a call's start and [{index, function:{arguments}}] for a fragment.
ordered_json chat_chunk_delta(const std::string& id, int64_t created, const std::string& model,
                              const chat::ChatDelta& delta, const ordered_json& logprobs, bool include_usage);
std::string completion_response_json(const std::string& id, int64_t created,
                                     const std::string& model, const std::string& text,
                                     const std::string& finish_reason, const Usage& usage,
                                     const ordered_json& logprobs);

// One SSE event line: "data: " + json + "\n\n".
std::string sse_event(const ordered_json& chunk);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Streaming chunks ("chat.completion.chunk" / "text_completion"). The first chat chunk
// carries delta {"role":"assistant","content":""}; content chunks delta {"content"};
// the last one delta {} with finish_reason. When include_usage, every chunk has
// "usage": null and a final chunk has "choices": [] and the usage.
ordered_json chat_chunk_role(const std::string& id, int64_t created, const std::string& model,
                             bool include_usage = false);
ordered_json chat_chunk_content(const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const ordered_json& logprobs,
                                bool include_usage);
ordered_json chat_chunk_finish(const std::string& id, int64_t created, const std::string& model,
                               const std::string& finish_reason, bool include_usage);
ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                              const std::string& text, const ordered_json& logprobs,
                              const std::optional<std::string>& finish_reason, bool include_usage);
ordered_json usage_chunk(ApiKind kind, const std::string& id, int64_t created,
                         const std::string& model, const Usage& usage);

// llama-server's utility endpoints. Throw ApiError on bad shapes.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
// {"tokens":[...]} or, with pieces, {"tokens":[{"id":1,"piece":"..."}]} (a piece that
// is not valid UTF-8 is given as an array of byte values, as llama-server does).
std::string tokenize_response_json(const std::vector<int32_t>& ids,
                                   const std::vector<std::string>* pieces);
std::vector<int32_t> parse_detokenize_request(std::string_view body, int32_t n_vocab);
// {"messages":[...]} (+ optional "tools", "add_generation_prompt" default true).
struct ApplyTemplateRequest {
  ordered_json messages;
  ordered_json tools;
  bool add_generation_prompt = true;
  // chat_template_kwargs, with reasoning_effort added as /v1/chat/completions adds it.
  ordered_json template_kwargs;
};
ApplyTemplateRequest parse_apply_template_request(std::string_view body);

}  // namespace pagoda::server
