// Streaming: the accumulated text is re-parsed in partial mode on every push (see
// chat_parse_internal.h) and what grew since the last push is emitted. Re-parsing is
// O(output) per push, so O(n^2) over a message; the scans are find()/memchr-speed and
// a 100 KB output costs well under a second in total, which keeps the parser one
// definition of the format instead of a second, incremental one that could disagree.
// A call is emitted whole (its start, then its arguments as one fragment) once it is
// finished, so nothing emitted is ever retracted when a call turns out malformed.
#include "chat/chat_format.h"
#include "chat/chat_parse_internal.h"

namespace pagoda::chat {

struct StreamingChatParser::Impl {
  ChatFormat format;
  ParseOptions opts;
  std::string text;
  size_t sent_reasoning = 0;
  size_t sent_content = 0;
  size_t sent_calls = 0;
  bool finished = false;
  ParsedMessage message;

  std::vector<ChatDelta> advance(bool final) {
    std::vector<ChatDelta> deltas;
    detail::MessageParts parts;
    try {
      parts = detail::parse_message_parts(format, text, opts, !final);
    } catch (const std::exception&) {
      // Not expected (the parsers do not throw); keep the text rather than lose it.
      parts = {};
      parts.content = text;
    }
    if (parts.reasoning.size() > sent_reasoning) {
      deltas.push_back({ChatDelta::Kind::Reasoning, parts.reasoning.substr(sent_reasoning), 0, {}, {}});
      sent_reasoning = parts.reasoning.size();
    }
    if (parts.content.size() > sent_content) {
      deltas.push_back({ChatDelta::Kind::Content, parts.content.substr(sent_content), 0, {}, {}});
      sent_content = parts.content.size();
    }
    for (size_t i = sent_calls; i < parts.calls.size(); ++i) {
      const int index = static_cast<int>(i);
      deltas.push_back({ChatDelta::Kind::ToolCallStart, {}, index, opts.call_id_prefix + std::to_string(i),
                        parts.calls[i].name});
      deltas.push_back({ChatDelta::Kind::ToolCallArguments, parts.calls[i].arguments, index, {}, {}});
    }
    sent_calls = std::max(sent_calls, parts.calls.size());
    message = detail::to_parsed_message(std::move(parts), opts);
    return deltas;
  }
};

StreamingChatParser::StreamingChatParser(ChatFormat f, ParseOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->format = f;
  impl_->opts = std::move(opts);
}
StreamingChatParser::~StreamingChatParser() = default;
StreamingChatParser::StreamingChatParser(StreamingChatParser&&) noexcept = default;
StreamingChatParser& StreamingChatParser::operator=(StreamingChatParser&&) noexcept = default;

std::vector<ChatDelta> StreamingChatParser::push(std::string_view text) {
  if (impl_->finished || text.empty()) return {};
  impl_->text.append(text);
  return impl_->advance(false);
}

std::vector<ChatDelta> StreamingChatParser::finish() {
  if (impl_->finished) return {};
  impl_->finished = true;
  return impl_->advance(true);
}

const ParsedMessage& StreamingChatParser::message() const { return impl_->message; }

}  // namespace pagoda::chat
