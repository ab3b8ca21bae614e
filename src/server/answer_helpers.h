// The small answer helpers the API routes and CompletionSink share: timestamps, ids,
// JSON and error answers in each API's shape, finish reasons, token pieces. Private to
// src/server.
#pragma once

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>

#include "common/json_text.h"
#include "server/anthropic_protocol.h"
#include "server/api_server.h"
#include "server/openai_protocol.h"

namespace pagoda::server::answer_detail {

using json = nlohmann::ordered_json;

inline int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline http::HttpResponse json_response(int status, const json& body) {
  http::HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

// "chatcmpl-" + 24 hex digits: a per-process random stem and a counter, unique within
// a process and unlikely to repeat across restarts.
inline std::string make_id(const char* prefix, uint64_t n) {
  static const uint64_t stem = std::random_device{}() * 0x9E3779B97F4A7C15ull;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, static_cast<unsigned long long>(stem),
                static_cast<unsigned long long>(n & 0xffffffffu));
  return buf;
}

inline const char* finish_reason_text(FinishReason r) { return r == FinishReason::Length ? "length" : "stop"; }

// OpenAI: "tool_calls" when the model called a tool (and was not cut off).
inline std::string chat_finish_reason(FinishReason r, const chat::ParsedMessage& m) {
  if (r != FinishReason::Length && !m.tool_calls.empty()) return "tool_calls";
  return finish_reason_text(r);
}

// The text a token's logprob entry shows: its piece with special tokens rendered.
inline std::string piece_of(const Tokenizer* tok, int32_t id) {
  return tok ? tok->token_to_piece(id, true) : std::to_string(id);
}

// Plain generated text as a parser delta (Anthropic streams without a parser).
inline chat::ChatDelta content_delta(std::string text) {
  chat::ChatDelta d;  // Kind::Content
  d.text = std::move(text);
  return d;
}

// An error answer in the shape of the route's API: OpenAI's {"error":{...}} or
// Anthropic's {"type":"error","error":{...}}.
inline http::HttpResponse api_error_response(WireProtocol protocol, int status, std::string_view message,
                                std::string_view param = {}) {
  if (protocol == WireProtocol::OpenAI) return error_response(status, message, param);
  http::HttpResponse r;
  r.status = status;
  r.body = anthropic_error_json(status, message);
  return r;
}

}  // namespace pagoda::server::answer_detail
