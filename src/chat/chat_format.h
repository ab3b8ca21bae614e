// Chat formats — what a model family's output looks like around its tool calls and
// its reasoning, recognised from the chat template, parsed back into an OpenAI
// message, and (for tool_choice required / named) turned into a grammar.
//
// Contract:
// - detect_chat_format() reads the template source (and the GGUF general.architecture
//   when known) and picks one ToolCallFormat and one ReasoningFormat, the way
//   llama-server's chat parsers and vLLM's tool parsers are chosen. A template it does
//   not recognise gets ToolCallFormat::Generic (a JSON {"tool_calls":[...]} /
//   {"name","arguments"} object) and ReasoningFormat::None.
// - parse_chat_output() never throws and never loses text: whatever does not parse as
//   a call (malformed JSON, an unknown shape, a call cut off by max_tokens, a call of a
//   function the request did not offer) stays in `content`. Tool calls are looked for
//   only when ParseOptions::parse_tool_calls.
//   Arguments are a JSON object serialized as text; for formats that write JSON the
//   model's own bytes are kept (so streamed fragments concatenate to the same string).
// - StreamingChatParser gives the same message as parse_chat_output() on the whole
//   text, as deltas: content and reasoning text as soon as they cannot be the start of
//   a marker (a held-back tail is at most the longest marker), one ToolCallStart per
//   call (index, id, name) then ToolCallArguments fragments whose concatenation is that
//   call's `arguments`. finish() flushes what was held back.
//   Held back besides marker prefixes: a trailing run of whitespace (it is dropped
//   when a call follows), a whole unfinished call, and for the formats whose calls are
//   the whole output (Generic, a Llama 3 JSON call at the start, <|python_tag|>) the
//   output until it is known not to be (or finish()). Whitespace next to a call and
//   after </think> is not content; reasoning is trimmed.
// - tool_call_grammar() is GBNF for one or more calls in the format's own syntax,
//   each call's arguments valid against that tool's `parameters` schema; throws
//   grammar::UnsupportedSchema for a schema outside the supported subset.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::chat {

enum class ToolCallFormat {
  Generic,     // {"tool_calls":[{"name","arguments"}]} or {"name","arguments"} JSON
  Hermes,      // <tool_call>{"name","arguments"}</tool_call> (Hermes 2 Pro, Qwen2.5, Qwen3)
  Llama3,      // {"name","parameters"} JSON, or <|python_tag|>name.call(...) / JSON
  Mistral,     // [TOOL_CALLS][{"name","arguments","id"}] (and [TOOL_CALLS]name[ARGS]{...})
  Qwen3Coder,  // <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>
  DeepSeekV3,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>
  DeepSeekR1,  // as V3 (R1's template); reasoning in <think>
  GptOss,      // harmony: <|channel|>commentary to=functions.NAME ... <|message|>{..}<|call|>
  Gemma4,      // <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|> (Gemma's value syntax)
};

enum class ReasoningFormat {
  None,   // no reasoning markers
  Think,  // <think>...</think> (Qwen3, DeepSeek-R1 and its distills, QwQ, ...)
  GptOss, // harmony analysis channel
  Gemma4, // <|channel>thought ... <channel|>
};

// Which spelling of its family a template writes. The parsers accept every spelling of
// their family (a model may drift between them); tool_call_grammar() forces this one.
enum class ToolCallSyntax {
  Default,
  MistralNameArgs,  // [TOOL_CALLS]name[ARGS]{...} (Mistral Small 3.2, Devstral, Ministral 3)
  DeepSeekV31,      // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1)
  DeepSeekDsml,     // <｜DSML｜function_calls><｜DSML｜invoke name="..."> (V3.2)
  FireFunction,     // " functools[{"name","arguments"}, ...]" (firefunction-v2, Llama 3 based)
};

struct ChatFormat {
  ToolCallFormat tools = ToolCallFormat::Generic;
  ReasoningFormat reasoning = ReasoningFormat::None;
  ToolCallSyntax syntax = ToolCallSyntax::Default;
};
const char* tool_call_format_name(ToolCallFormat f);
const char* reasoning_format_name(ReasoningFormat f);

ChatFormat detect_chat_format(std::string_view template_source, std::string_view architecture = "");

// `messages` (OpenAI shape, tool-call arguments already objects) as the format's template
// reads them. Gemma 4 templates that predate the official one reading role "tool" (their
// source lacks its "OpenAI Chat Completions:" note; llama.cpp tells them apart the same
// way) take an assistant turn's tool results as its `tool_responses` ([{name, response}],
// a result's JSON text parsed) and the answer after them in the same turn, as llama.cpp's
// convert_tool_responses_gemma4 does. Every other format: unchanged.
nlohmann::json messages_for_template(const ChatFormat& f, std::string_view template_source,
                                     const nlohmann::json& messages);

struct ParseOptions {
  bool parse_tool_calls = false;   // the request has tools and tool_choice != none
  bool extract_reasoning = true;   // --reasoning-format auto; false: thinking stays in content
  // The rendered prompt already opened the thinking block (it ends in "<think>" or
  // "<think>\n": DeepSeek-R1 distills, Qwen3 thinking templates), so the output
  // starts inside it.
  bool thinking_open_at_start = false;
  // The rendered prompt closed an empty thinking block, i.e. thinking is off (Gemma 4's
  // template without enable_thinking ends in "<|channel>thought\n<channel|>"): a constrained
  // output then gets no thinking prefix (a forced call does not wander off into a thought).
  bool thinking_off = false;
  // ids given to calls: prefix + running index (the server passes a unique prefix).
  std::string call_id_prefix = "call_";
  // The request's `tools` (OpenAI shape). A call naming a function not among them is not
  // a call: its text stays in `content` (for gpt-oss, the message's body), the whole region
  // it sits in with it (tool_call_parsers.cpp says why). Formats that write parameter values
  // as text (Qwen3Coder, DeepSeek DSML) use a property's declared "type" to keep a
  // string-typed value as a string (e.g. "42") instead of reading it as JSON. Not an array
  // (the default null): names are not checked, which only callers without a request (tests,
  // tools) should rely on; the server always passes the request's list.
  nlohmann::json tools;
};

// True when the prompt ends with an opened, unclosed thinking block.
bool prompt_opens_thinking(const ChatFormat& f, std::string_view rendered_prompt);
// True when the prompt ends with an empty, closed thinking block that turns thinking off
// (Gemma 4 only: Think formats keep their optional block, as before).
bool prompt_closes_thinking(const ChatFormat& f, std::string_view rendered_prompt);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};

struct ParsedMessage {
  std::optional<std::string> content;  // nullopt when the output was only tool calls
  std::string reasoning_content;       // "" when none
  std::vector<ToolCall> tool_calls;
};

ParsedMessage parse_chat_output(const ChatFormat& f, std::string_view text, const ParseOptions& opts);

struct ChatDelta {
  enum class Kind { Content, Reasoning, ToolCallStart, ToolCallArguments };
  Kind kind = Kind::Content;
  std::string text;     // Content / Reasoning text, or an arguments fragment
  int index = 0;        // tool call index (ToolCallStart / ToolCallArguments)
  std::string id, name; // ToolCallStart
};

class StreamingChatParser {
 public:
  StreamingChatParser(ChatFormat f, ParseOptions opts);
  ~StreamingChatParser();
  StreamingChatParser(StreamingChatParser&&) noexcept;
  StreamingChatParser& operator=(StreamingChatParser&&) noexcept;
  std::vector<ChatDelta> push(std::string_view text);
  std::vector<ChatDelta> finish();
  // The message parsed so far (after finish(): the whole one).
  const ParsedMessage& message() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GBNF for tool calls in format f. tools: the request's `tools` array (OpenAI shape);
// only_name: a named tool_choice; parallel: more than one call allowed.
std::string tool_call_grammar(const ChatFormat& f, const nlohmann::ordered_json& tools,
                              const std::optional<std::string>& only_name, bool parallel);

}  // namespace pagoda::chat

namespace pagoda::chat {

// A constrained output of a thinking model may think first: `body_gbnf` (a whole
// grammar with a `root` rule) extended with rules that allow, before `root`, a thinking
// block: "<think>" (unless the prompt already opened it: `opened`), any text without
// "</think>", "</think>", up to three blanks or newlines. The result's start rule is
// kReasoningRoot. gpt-oss (ReasoningFormat::GptOss, harmony): an analysis message
// "<|channel|>analysis<|message|>" (unless opened), any text without "<|end|>", then
// "<|end|><|start|>assistant", before the body; a body that is not tool calls
// (`tool_calls` false: a schema, regex or choice) is the final channel's message, so it
// gets "<|channel|>final<|message|>" in front (the harmony parser reads it as content).
// Other formats: body_gbnf unchanged and "root" as the start rule.
inline constexpr const char* kReasoningRoot = "pagoda-reasoning-root";
struct ReasoningGrammar {
  std::string gbnf;
  std::string root;
};
ReasoningGrammar with_reasoning_prefix(const ChatFormat& f, const std::string& body_gbnf, bool opened,
                                       bool tool_calls = false);

}  // namespace pagoda::chat
