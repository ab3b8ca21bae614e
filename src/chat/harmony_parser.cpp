// gpt-oss "harmony" output: a sequence of messages
//   [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY END
// with END one of <|end|>, <|call|>, <|return|> (or the next <|start|>, or the end of
// the text). analysis -> reasoning, final / commentary -> content, a recipient
// "functions.NAME" -> a call of NAME with BODY as its JSON arguments.
#include <nlohmann/json.hpp>

#include "chat/chat_parse_internal.h"
#include "chat/json_scan.h"

namespace pagoda::chat::detail {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kTerminators[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
// A header ("assistant to=functions.x<|channel|>commentary <|constrain|>json") longer
// than this is not a header: the rest of the text is content.
constexpr size_t kMaxHeaderBytes = 512;

std::string_view header_word_after(std::string_view header, std::string_view key) {
  const size_t p = header.find(key);
  if (p == std::string_view::npos) return {};
  size_t b = p + key.size();
  size_t e = b;
  while (e < header.size() && !is_ws(header[e]) && header[e] != '<') ++e;
  return header.substr(b, e - b);
}

}  // namespace

MessageParts parse_harmony(std::string_view text, const ParseOptions& opts, bool partial) {
  MessageParts out;
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const size_t msg_start = pos;
    std::string_view header;
    size_t body_begin = pos;
    if (first && opts.thinking_open_at_start) {
      // The prompt ended in "<|channel|>analysis<|message|>": the output starts in it.
      header = "<|channel|>analysis";
    } else {
      size_t h = pos;
      if (starts_with_at(text, h, kStart)) h += kStart.size();
      const size_t hdr_end = text.find(kMessage, h);
      bool header_ok = hdr_end != std::string_view::npos && hdr_end - h <= kMaxHeaderBytes;
      if (header_ok) {
        header = text.substr(h, hdr_end - h);
        for (std::string_view t : kTerminators)
          if (header.find(t) != std::string_view::npos) header_ok = false;
      }
      if (!header_ok) {
        if (hdr_end == std::string_view::npos && partial && text.size() - h <= kMaxHeaderBytes) return out;
        // Not harmony: the rest is plain content.
        out.content += std::string(text.substr(pos));
        return out;
      }
      body_begin = hdr_end + kMessage.size();
    }
    first = false;
    size_t body_end = std::string_view::npos;
    std::string_view terminator;
    for (std::string_view t : kTerminators) {
      const size_t p = text.find(t, body_begin);
      if (p < body_end) {
        body_end = p;
        terminator = t;
      }
    }
    const bool closed = body_end != std::string_view::npos;
    std::string_view body = text.substr(body_begin, (closed ? body_end : text.size()) - body_begin);
    if (!closed && partial) {
      size_t hold = 0;
      for (std::string_view t : kTerminators) hold = std::max(hold, marker_prefix_suffix(body, t));
      body.remove_suffix(hold);
    }
    const std::string_view channel = header_word_after(header, kChannel);
    const std::string_view recipient = header_word_after(header, "to=");
    const size_t next = closed ? body_end + (terminator == kStart ? 0 : terminator.size()) : text.size();

    if (!recipient.empty()) {
      if (!closed && partial) return out;  // arguments unfinished: held back
      std::string_view args = ltrim_view(body);
      args = args.substr(0, rtrim_copy(args).size());
      ScanResult r = scan_json_value(args, 0);
      std::string name(recipient);
      if (name.starts_with("functions.")) name = name.substr(10);
      // An unoffered name is not a call (tool_call_parsers.cpp says why): its body is content.
      const bool is_call = r.status == ScanStatus::Complete && r.end == args.size() && !args.empty() &&
                           args.front() == '{' && opts.parse_tool_calls && tool_offered(opts, name);
      if (is_call) {
        out.calls.push_back({name, std::string(args)});
      } else {
        out.content += std::string(body);
      }
    } else if (channel == "analysis") {
      if (opts.extract_reasoning) {
        out.reasoning += std::string(body);
      } else {
        const size_t raw_end = closed ? next : body_begin + body.size();
        out.content += std::string(text.substr(msg_start, raw_end - msg_start));
      }
    } else {
      out.content += std::string(body);  // final, commentary preamble, or no channel
    }
    if (!closed) return out;
    // A message ended by <|start|> begins the next one right there (pos only stays
    // put for an empty implicit analysis message, and `first` is false by then).
    pos = next;
  }
  return out;
}

}  // namespace pagoda::chat::detail
