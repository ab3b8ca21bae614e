// CompletionSink — the engine thread's side of one completion request (OpenAI chat and
// completions, Anthropic messages): formats the answer or its stream events and queues
// them on the HTTP exchange (the helpers it shares with the routes: answer_helpers.h).
// Private to src/server (api_server.cpp is its one user); moved out of api_server.cpp,
// which had grown past 800 lines with the Responses and Anthropic routes.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>

#include "common/json_text.h"
#include "server/access_log.h"
#include "server/answer_helpers.h"
#include "server/anthropic_protocol.h"
#include "server/api_server.h"
#include "server/openai_protocol.h"

namespace pagoda::server::completion_detail {

using json = nlohmann::ordered_json;
using namespace answer_detail;

// The engine thread's side of one completion request: formats JSON and queues it on
// the exchange. Never blocks (HttpExchange::send only queues).
class CompletionSink final : public RequestSink {
 public:
  struct Params {
    ApiKind kind = ApiKind::Chat;
    WireProtocol protocol = WireProtocol::OpenAI;
    int64_t prompt_tokens = 0;  // Anthropic's message_start reports it
    bool stream = false, include_usage = false, logprobs = false;
    std::string id, model;
    AccessLog* access_log = nullptr;  // gets the generation's record (null: none)
    uint64_t seq = 0;                 // the request's HttpRequest::seq
    int64_t created = 0;
    const Tokenizer* tokenizer = nullptr;
    ServerMetrics* metrics = nullptr;
    // Chat output parsed into content / reasoning_content / tool_calls.
    std::optional<chat::ParseOptions> parse;
    chat::ChatFormat format;
    AnswerTokens* answers = nullptr;  // chat: remembers the answer's ids (null: not)
  };
  CompletionSink(Params p, std::shared_ptr<http::HttpExchange> ex) : p_(std::move(p)), ex_(std::move(ex)) {
    if (p_.parse && p_.stream) parser_.emplace(p_.format, *p_.parse);
    if (anthropic() && p_.stream) writer_.emplace(p_.id, p_.model);
  }

  // Streaming: the handler calls this once submit() has accepted the request, so a
  // refused request still gets a plain HTTP error status. What the engine thread
  // produced before that is queued here and sent right after the headers.
  void start_stream() {
    std::lock_guard<std::mutex> lk(mu_);
    ex_->start_stream(200, "text/event-stream");
    if (writer_)
      ex_->send(writer_->start(p_.prompt_tokens));
    else if (p_.kind == ApiKind::Chat)
      ex_->send(sse_event(chat_chunk_role(p_.id, p_.created, p_.model, p_.include_usage)));
    for (std::string& chunk : pending_) ex_->send(std::move(chunk));
    pending_.clear();
    if (pending_finish_) ex_->finish();
    started_ = true;
  }

  void on_token(const TokenEvent& ev) override {
    // The engine decided end-of-generation (tokenizer EOS/EOT and generation_config's
    // extra ids alike): that token is neither reported in logprobs nor streamed.
    if (ev.eog) return;
    if (p_.answers) ids_.push_back(ev.token_id);
    TokenLogprobInfo info;
    const bool with_lp = p_.logprobs;
    if (with_lp) {
      info.token = piece_of(p_.tokenizer, ev.token_id);
      info.logprob = ev.logprob;
      for (const TokenLogprob& t : ev.top_logprobs) info.top.push_back({piece_of(p_.tokenizer, t.token_id), t.logprob});
    }
    if (!p_.stream) {
      if (with_lp) lps_.push_back(std::move(info));
      return;
    }
    if (ev.text.empty() && !with_lp) return;
    json lp = nullptr;
    if (with_lp) {
      std::vector<TokenLogprobInfo> one{std::move(info)};
      lp = p_.kind == ApiKind::Chat ? chat_logprobs_json(one) : completion_logprobs_json(one, text_offset_);
    }
    text_offset_ += ev.text.size();
    if (parser_) {
      emit_deltas(parser_->push(ev.text), std::move(lp));
    } else if (writer_) {
      emit(writer_->delta(content_delta(ev.text)));
    } else if (p_.kind == ApiKind::Chat) {
      emit(sse_event(chat_chunk_content(p_.id, p_.created, p_.model, ev.text, lp, p_.include_usage)));
    } else {
      emit(sse_event(completion_chunk(p_.id, p_.created, p_.model, ev.text, lp, std::nullopt, p_.include_usage)));
    }
  }

  void on_finish(const RequestResult& r) override {
    if (p_.metrics) p_.metrics->record_finished(r);
    // The answer's ids, for the next turn that sends it back: only where the client gets
    // the whole text as the message content (nothing parsed out of it).
    if (p_.answers && p_.tokenizer && r.finish != FinishReason::Cancelled && !r.text.empty()) {
      bool plain = !p_.parse;
      if (!plain) {
        const chat::ParsedMessage m = chat::parse_chat_output(p_.format, r.text, *p_.parse);
        plain = m.tool_calls.empty() && m.reasoning_content.empty() && m.content == r.text;
      }
      if (plain) p_.answers->remember(*p_.tokenizer, r.text, ids_);
    }
    // Before the answer: its completion (on_complete) then finds the record and logs.
    if (p_.access_log) p_.access_log->generation_done(p_.seq, generation_record(r, p_.stream, p_.id));
    Usage usage{r.prompt_tokens, r.generated_tokens, r.cached_tokens};
    if (r.finish == FinishReason::Cancelled) {
      // The client left (or the server is shutting down / the request timed out):
      // tell a client that is still there, in the shape it expects.
      const std::string msg = "request cancelled before it finished (client disconnected, timeout or shutdown)";
      if (writer_) {
        emit(AnthropicStreamWriter::error_event(503, msg));
        end_stream();
      } else if (p_.stream) {
        emit("data: " + error_json(503, msg) + "\n\n");
        emit(std::string(kSseDone));
        end_stream();
      } else {
        ex_->respond(api_error_response(p_.protocol, 503, msg));
      }
    } else if (anthropic()) {
      finish_anthropic(r);
    } else if (p_.stream) {
      std::string reason = finish_reason_text(r.finish);
      if (parser_) {
        std::vector<chat::ChatDelta> deltas = parser_->push(r.final_text);
        for (chat::ChatDelta& d : parser_->finish()) deltas.push_back(std::move(d));
        emit_deltas(std::move(deltas), nullptr);
        reason = chat_finish_reason(r.finish, parser_->message());
        emit(sse_event(chat_chunk_finish(p_.id, p_.created, p_.model, reason, p_.include_usage)));
      } else if (p_.kind == ApiKind::Chat) {
        if (!r.final_text.empty())
          emit(sse_event(chat_chunk_content(p_.id, p_.created, p_.model, r.final_text, nullptr, p_.include_usage)));
        emit(sse_event(chat_chunk_finish(p_.id, p_.created, p_.model, reason, p_.include_usage)));
      } else {
        emit(sse_event(completion_chunk(p_.id, p_.created, p_.model, r.final_text, nullptr, reason, p_.include_usage)));
      }
      if (p_.include_usage) emit(sse_event(usage_chunk(p_.kind, p_.id, p_.created, p_.model, usage)));
      emit(std::string(kSseDone));
      end_stream();
    } else {
      const std::string reason = finish_reason_text(r.finish);
      json lp = nullptr;
      if (p_.logprobs)
        lp = p_.kind == ApiKind::Chat ? chat_logprobs_json(lps_) : completion_logprobs_json(lps_, 0);
      http::HttpResponse resp;
      if (p_.parse) {
        const chat::ParsedMessage m = chat::parse_chat_output(p_.format, r.text, *p_.parse);
        resp.body = chat_message_response_json(p_.id, p_.created, p_.model, m, chat_finish_reason(r.finish, m),
                                               usage, lp);
      } else {
        resp.body = p_.kind == ApiKind::Chat
                        ? chat_response_json(p_.id, p_.created, p_.model, r.text, reason, usage, lp)
                        : completion_response_json(p_.id, p_.created, p_.model, r.text, reason, usage, lp);
      }
      ex_->respond(std::move(resp));
    }
  }

  void on_error(uint64_t, const std::string& message) override {
    if (p_.metrics) p_.metrics->record_error();
    if (p_.access_log) p_.access_log->generation_done(p_.seq, error_record(message));
    const std::string msg = "generation failed: " + message;
    if (writer_) {
      emit(AnthropicStreamWriter::error_event(500, msg));
      end_stream();
    } else if (p_.stream) {
      emit("data: " + error_json(500, msg) + "\n\n");
      emit(std::string(kSseDone));
      end_stream();
    } else {
      ex_->respond(api_error_response(p_.protocol, 500, msg));
    }
  }

 private:
  bool anthropic() const { return p_.protocol == WireProtocol::Anthropic; }
  GenerationRecord error_record(const std::string& message) const {
    GenerationRecord g;
    g.response_id = p_.id;
    g.finish = "error";
    g.prompt_tokens = p_.prompt_tokens;
    g.stream = p_.stream;
    g.error = message;
    return g;
  }

  // The end of an Anthropic message: the closing events of a stream, or the whole body.
  void finish_anthropic(const RequestResult& r) {
    const AnthropicUsage usage{r.prompt_tokens, r.cached_tokens, r.generated_tokens};
    chat::ParsedMessage m;
    if (writer_) {
      if (parser_) {
        std::vector<chat::ChatDelta> deltas = parser_->push(r.final_text);
        for (chat::ChatDelta& d : parser_->finish()) deltas.push_back(std::move(d));
        emit_deltas(std::move(deltas), nullptr);
        m = parser_->message();
      } else if (!r.final_text.empty()) {
        emit(writer_->delta(content_delta(r.final_text)));
      }
    } else {
      m = p_.parse ? chat::parse_chat_output(p_.format, r.text, *p_.parse) : chat::ParsedMessage{r.text, "", {}};
    }
    const std::string reason =
        anthropic_stop_reason(r.finish == FinishReason::Length, !m.tool_calls.empty(), r.stop_matched);
    if (writer_) {
      emit(writer_->finish(reason, r.stop_matched, usage));
      end_stream();
    } else {
      http::HttpResponse resp;
      resp.body = anthropic_message_json(p_.id, p_.model, m, reason, r.stop_matched, usage);
      ex_->respond(std::move(resp));
    }
  }

  Params p_;
  std::shared_ptr<http::HttpExchange> ex_;
  std::optional<AnthropicStreamWriter> writer_;  // Anthropic streaming
  // Engine thread: one SSE event, queued until start_stream() has sent the headers.
  void emit(std::string chunk) {
    if (chunk.empty()) return;  // an empty chunk would end a chunked stream
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) {
      ex_->send(std::move(chunk));
    } else {
      pending_.push_back(std::move(chunk));
    }
  }
  void end_stream() {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) {
      ex_->finish();
    } else {
      pending_finish_ = true;
    }
  }

  // Parsed deltas as chunks; a token's logprobs ride on its first chunk (or on an
  // empty content chunk when the parser held its text back), so none is lost.
  void emit_deltas(std::vector<chat::ChatDelta> deltas, json lp) {
    if (deltas.empty() && !lp.is_null()) deltas.push_back(chat::ChatDelta{});
    for (chat::ChatDelta& d : deltas) {
      if (writer_) {
        emit(writer_->delta(d));
        continue;
      }
      emit(sse_event(chat_chunk_delta(p_.id, p_.created, p_.model, d, lp, p_.include_usage)));
      lp = nullptr;
    }
  }

  std::optional<chat::StreamingChatParser> parser_;  // streaming chat with parsing
  std::vector<TokenLogprobInfo> lps_;  // non-streaming: every token's logprobs
  std::vector<int32_t> ids_;           // with answers: the generated ids (EOG left out)
  std::mutex mu_;                      // started_, pending_, pending_finish_ (handler vs engine thread)
  bool started_ = false;
  bool pending_finish_ = false;
  std::vector<std::string> pending_;
  size_t text_offset_ = 0;
};

}  // namespace pagoda::server::completion_detail
