// Internal to src/chat: the parsers behind parse_chat_output() and
// StreamingChatParser, with a `partial` mode for streaming.
//
// Partial mode answers "what will the parse of ANY continuation of this text start
// with": content / reasoning up to the first place whose meaning depends on text not
// yet seen (a possible marker prefix, an unfinished call, trailing whitespace that may
// be dropped), and only calls that are finished. Each partial result is therefore a
// prefix of the final one, which is what lets the streaming parser emit differences.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"

namespace pagoda::chat::detail {

struct RawCall {
  std::string name;
  std::string arguments;  // JSON object text
};

struct MessageParts {
  std::string content;
  std::string reasoning;
  std::vector<RawCall> calls;
};

// The part of the output outside reasoning: content and tool calls in format f.
// trim_leading: drop whitespace at the start (text right after </think>).
void parse_content_region(const ChatFormat& f, std::string_view text, const ParseOptions& opts, bool partial,
                          bool trim_leading, MessageParts& out);

// gpt-oss harmony: channels, reasoning and calls in one pass.
MessageParts parse_harmony(std::string_view text, const ParseOptions& opts, bool partial);

// GBNF rules for "any text without the marker m, then m" as rule `prefix` (and helpers
// named prefix-t<i>, prefix-e<i>). Requires: m[0] occurs once in m (reasoning_grammar.cpp).
std::string text_until_marker_rules(const std::string& prefix, const std::string& m);

// Gemma 4: thinking channels, content and <|tool_call> calls in one pass (gemma4_parser.cpp).
MessageParts parse_gemma4(std::string_view text, const ParseOptions& opts, bool partial);

MessageParts parse_message_parts(const ChatFormat& f, std::string_view text, const ParseOptions& opts,
                                 bool partial);

ParsedMessage to_parsed_message(MessageParts parts, const ParseOptions& opts);

// True when the request offered a function named `name` (opts.tools, in the OpenAI shape
// {"type":"function","function":{"name"}} or a bare {"name"}), or when opts.tools is not an
// array (no list to check against). A call naming anything else is not a call.
bool tool_offered(const ParseOptions& opts, std::string_view name);

// DeepSeek's full-width markers (U+FF5C '｜', U+2581 '▁'), read by the parsers and
// written by the tool-call grammars.
inline const std::string kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
inline const std::string kDsCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
inline const std::string kDsCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
inline const std::string kDsCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
inline const std::string kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
inline const std::string kDsml = "\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C";

// Helpers shared by the parsers.
bool starts_with_at(std::string_view t, size_t i, std::string_view lit);
// Length of the longest suffix of `t` that is a proper, non-empty prefix of `marker`.
size_t marker_prefix_suffix(std::string_view t, std::string_view marker);
std::string rtrim_copy(std::string_view s);
std::string_view ltrim_view(std::string_view s);

}  // namespace pagoda::chat::detail
