// Server-sent events, client side: a byte-stream parser (SseParser) and the
// interpretation of OpenAI streaming chunks (StreamAccumulator).
//
// Contract:
// - SseParser follows the WHATWG event-stream rules that OpenAI-compatible servers
//   use: lines end in "\n", "\r\n" or "\r"; a blank line ends an event; the
//   `data` lines of one event are joined with "\n"; comment lines (":...") and the
//   fields event/id/retry are ignored. Input may be split anywhere (inside a line,
//   inside a "\r\n") or hold many events per feed() call.
// - Memory is bounded: a line or event longer than kMaxEventBytes makes the
//   parser fail (failed() true, events stop) instead of growing without limit.
// - StreamAccumulator reads each event's data as one OpenAI chunk
//   (chat.completion.chunk or text_completion): "[DONE]" ends the stream; a chunk
//   whose choices[0].delta.content (chat) or choices[0].text (completions) is a
//   non-empty string is a content chunk; a non-null `usage` object is recorded
//   (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens). Data
//   that is not JSON, not an object, or an object with neither choices, usage nor
//   error is malformed; an {"error": ...} object is a server error in the stream.
//   Events after [DONE] are ignored.
// - Not thread-safe; one per response stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::loadgen {

class SseParser {
 public:
  static constexpr size_t kMaxEventBytes = 4 << 20;  // 4 MiB: far above any chunk

  // Appends the data of every event completed by `bytes` to `out_events`.
  void feed(std::string_view bytes, std::vector<std::string>& out_events);
  // True once an event grew past kMaxEventBytes; feed() then does nothing.
  bool failed() const { return failed_; }
  // True when bytes of an unfinished line or event are held (a stream that ends
  // here was cut short).
  bool has_partial() const { return !line_.empty() || have_data_; }

 private:
  void end_line(std::vector<std::string>& out_events);

  std::string line_;
  std::string data_;
  bool have_data_ = false;
  bool last_was_cr_ = false;
  bool failed_ = false;
};

class StreamAccumulator {
 public:
  enum class Status { kContinue, kDone, kMalformed, kServerError };

  // Interprets one event's data. Returns kContinue for chunks (content or not),
  // kDone for [DONE], and kMalformed / kServerError (with detail()) otherwise.
  // `content_chunk` is set true when the chunk carried content.
  Status on_event(std::string_view data, bool* content_chunk);

  const std::string& text() const { return text_; }          // all content, joined
  int64_t num_content_chunks() const { return num_content_chunks_; }
  bool done() const { return done_; }
  bool has_usage() const { return has_usage_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }   // -1: the server did not say
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string text_;
  int64_t num_content_chunks_ = 0;
  bool done_ = false;
  bool has_usage_ = false;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  int64_t cached_tokens_ = -1;
  std::string finish_reason_;
  std::string detail_;
};

}  // namespace pagoda::loadgen
