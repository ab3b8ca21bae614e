// Format detection, reasoning extraction and the message assembly shared by the
// one-shot and streaming parsers. Tool-call syntaxes live in tool_call_parsers.cpp,
// harmony (gpt-oss) in harmony_parser.cpp.
#include "chat/chat_format.h"

#include <algorithm>

#include "chat/chat_parse_internal.h"
#include "chat/json_scan.h"

namespace pagoda::chat {

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Generic: return "generic";
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::Qwen3Coder: return "qwen3_coder";
    case ToolCallFormat::DeepSeekV3: return "deepseek_v3";
    case ToolCallFormat::DeepSeekR1: return "deepseek_r1";
    case ToolCallFormat::GptOss: return "gpt_oss";
    case ToolCallFormat::Gemma4: return "gemma4";
  }
  return "unknown";
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::None: return "none";
    case ReasoningFormat::Think: return "think";
    case ReasoningFormat::GptOss: return "gpt_oss";
    case ReasoningFormat::Gemma4: return "gemma4";
  }
  return "unknown";
}

ChatFormat detect_chat_format(std::string_view src, std::string_view architecture) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  ChatFormat f;
  const bool think = has("<think>") || has("</think>");

  if (has("<|channel|>") || architecture == "gpt-oss") {
    f.tools = ToolCallFormat::GptOss;
    f.reasoning = ReasoningFormat::GptOss;
    return f;
  }
  // Gemma 4: its calls' "<|tool_call>call:" (llama.cpp's test) or its turn and channel markers.
  if (has("<|tool_call>call:") || (has("<|turn>") && has("<|channel>")) || architecture == "gemma4") {
    f.tools = ToolCallFormat::Gemma4;
    f.reasoning = ReasoningFormat::Gemma4;
    return f;
  }
  if (think) f.reasoning = ReasoningFormat::Think;

  if (has("DSML")) {
    // DeepSeek V3.2 writes the DSML markup; V3/R1 parsers read it too.
    f.tools = ToolCallFormat::DeepSeekV3;
    f.syntax = ToolCallSyntax::DeepSeekDsml;
  } else if (has("tool\xE2\x96\x81""calls\xE2\x96\x81""begin") || has("tool\xE2\x96\x81""call\xE2\x96\x81""begin")) {
    // R1's template (and its distills') thinks; V3's does not. V3.1 drops "function"
    // and the ```json fence: its template has no fence.
    f.tools = think ? ToolCallFormat::DeepSeekR1 : ToolCallFormat::DeepSeekV3;
    if (!has("```json")) f.syntax = ToolCallSyntax::DeepSeekV31;
  } else if (has("[TOOL_CALLS]")) {
    f.tools = ToolCallFormat::Mistral;
    if (has("[ARGS]")) f.syntax = ToolCallSyntax::MistralNameArgs;
  } else if (has("<tool_call>") && has("<arg_key>")) {
    // GLM 4.x: <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>; no parser
    // for it, so the JSON fallback (which the grammar can force) is the sensible pick.
    f.tools = ToolCallFormat::Generic;
  } else if (has("<function=") && (has("<parameter=") || has("<tool_call>"))) {
    f.tools = ToolCallFormat::Qwen3Coder;  // Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5
  } else if (has("<tool_call>")) {
    f.tools = ToolCallFormat::Hermes;
  } else if (has("<|python_tag|>") || has("<function=")) {
    // Llama 3.1 (and functionary v3.1, whose <function=name>{json}</function> the
    // Qwen3Coder parser reads; its python_tag marks the Llama 3.1 family).
    f.tools = has("<function=") && !has("\"parameters\"") ? ToolCallFormat::Qwen3Coder : ToolCallFormat::Llama3;
  } else if (has("functools[")) {
    f.tools = ToolCallFormat::Llama3;
    f.syntax = ToolCallSyntax::FireFunction;
  } else if (has("<|start_header_id|>") && (has("ipython") || has("\"parameters\""))) {
    f.tools = ToolCallFormat::Llama3;  // Llama 3.2 / 3.3: JSON calls without python_tag
  }
  return f;
}

bool prompt_opens_thinking(const ChatFormat& f, std::string_view prompt) {
  while (!prompt.empty() && detail::is_ws(prompt.back())) prompt.remove_suffix(1);
  if (f.reasoning == ReasoningFormat::Think) return prompt.ends_with("<think>");
  if (f.reasoning == ReasoningFormat::GptOss) return prompt.ends_with("<|channel|>analysis<|message|>");
  if (f.reasoning == ReasoningFormat::Gemma4) return prompt.ends_with("<|channel>thought");
  return false;
}

bool prompt_closes_thinking(const ChatFormat& f, std::string_view prompt) {
  while (!prompt.empty() && detail::is_ws(prompt.back())) prompt.remove_suffix(1);
  return f.reasoning == ReasoningFormat::Gemma4 &&
         (prompt.ends_with("<|channel>thought\n<channel|>") || prompt.ends_with("<|channel>thought<channel|>"));
}

namespace detail {
nlohmann::json gemma4_tool_responses(const nlohmann::json& messages);  // gemma4_parser.cpp
}  // namespace detail

nlohmann::json messages_for_template(const ChatFormat& f, std::string_view src, const nlohmann::json& messages) {
  if (f.tools == ToolCallFormat::Gemma4 && src.find("OpenAI Chat Completions:") == std::string_view::npos)
    return detail::gemma4_tool_responses(messages);
  return messages;
}

namespace detail {

bool starts_with_at(std::string_view t, size_t i, std::string_view lit) {
  return i <= t.size() && t.substr(i).starts_with(lit);
}

size_t marker_prefix_suffix(std::string_view t, std::string_view marker) {
  const size_t max_len = std::min(t.size(), marker.size() - 1);
  for (size_t len = max_len; len > 0; --len)
    if (t.substr(t.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

std::string rtrim_copy(std::string_view s) {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::string_view ltrim_view(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  return s;
}

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

std::string trim_copy(std::string_view s) { return rtrim_copy(ltrim_view(s)); }

// Where the reasoning body starts, npos when the output has no think block, or
// `held` when (partial) the text so far could still turn out to open one.
struct ThinkStart {
  size_t body = std::string_view::npos;
  bool held = false;
};

ThinkStart find_think_start(std::string_view text, const ParseOptions& opts, bool partial) {
  const size_t p = skip_ws(text, 0);
  std::string_view rest = text.substr(p);
  if (rest.starts_with(kThinkOpen)) return {p + kThinkOpen.size(), false};
  // The text so far is "<thi" (or blank): whether a think block opens is not known yet.
  if (partial && kThinkOpen.starts_with(rest)) return {std::string_view::npos, true};
  if (opts.thinking_open_at_start) return {0, false};
  return {};
}

}  // namespace

MessageParts parse_message_parts(const ChatFormat& f, std::string_view text, const ParseOptions& opts,
                                 bool partial) {
  if (f.reasoning == ReasoningFormat::GptOss || f.tools == ToolCallFormat::GptOss)
    return parse_harmony(text, opts, partial);
  if (f.tools == ToolCallFormat::Gemma4) return parse_gemma4(text, opts, partial);

  MessageParts out;
  if (f.reasoning != ReasoningFormat::Think) {
    parse_content_region(f, text, opts, partial, false, out);
    return out;
  }
  const ThinkStart start = find_think_start(text, opts, partial);
  if (start.held) {
    // Blank or "<thi": with extract_reasoning=false it is content either way, but
    // content whitespace is held back anyway, and "<thi" may be a marker prefix.
    return out;
  }
  if (start.body == std::string_view::npos) {
    parse_content_region(f, text, opts, partial, false, out);
    return out;
  }
  const size_t close = text.find(kThinkClose, start.body);
  if (close == std::string_view::npos) {
    // Unclosed at the end: all of it is reasoning (llama-server does the same).
    std::string_view body = text.substr(start.body);
    if (partial) body.remove_suffix(marker_prefix_suffix(body, kThinkClose));
    if (opts.extract_reasoning) {
      out.reasoning = partial ? std::string(ltrim_view(rtrim_copy(body))) : trim_copy(body);
    } else {
      std::string_view raw = text.substr(0, start.body + body.size());
      out.content = partial ? rtrim_copy(raw) : std::string(raw);
    }
    return out;
  }
  std::string_view after = text.substr(close + kThinkClose.size());
  if (opts.extract_reasoning) {
    out.reasoning = trim_copy(text.substr(start.body, close - start.body));
    parse_content_region(f, after, opts, partial, true, out);
  } else {
    std::string raw(text.substr(0, close + kThinkClose.size()));
    MessageParts rest;
    parse_content_region(f, after, opts, partial, false, rest);
    out.content = raw + rest.content;
    out.calls = std::move(rest.calls);
  }
  return out;
}

bool tool_offered(const ParseOptions& opts, std::string_view name) {
  if (!opts.tools.is_array()) return true;
  for (const nlohmann::json& t : opts.tools) {
    const nlohmann::json* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!fn->is_object()) continue;
    const auto n = fn->find("name");
    if (n != fn->end() && n->is_string() && n->get_ref<const std::string&>() == name) return true;
  }
  return false;
}

ParsedMessage to_parsed_message(MessageParts parts, const ParseOptions& opts) {
  ParsedMessage m;
  m.reasoning_content = std::move(parts.reasoning);
  for (size_t i = 0; i < parts.calls.size(); ++i) {
    m.tool_calls.push_back(
        {opts.call_id_prefix + std::to_string(i), std::move(parts.calls[i].name), std::move(parts.calls[i].arguments)});
  }
  if (!(m.tool_calls.size() > 0 && parts.content.empty())) m.content = std::move(parts.content);
  return m;
}

}  // namespace detail

ParsedMessage parse_chat_output(const ChatFormat& f, std::string_view text, const ParseOptions& opts) {
  try {
    return detail::to_parsed_message(detail::parse_message_parts(f, text, opts, false), opts);
  } catch (const std::exception&) {
    // The parsers are written not to throw; should one (allocation), the text survives.
    ParsedMessage m;
    m.content = std::string(text);
    return m;
  }
}

}  // namespace pagoda::chat
