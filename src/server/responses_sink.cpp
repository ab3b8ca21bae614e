#include "server/responses_sink.h"

#include "common/json_text.h"
#include "server/api_error.h"

namespace pagoda::server {

ResponsesSink::ResponsesSink(Params p, std::shared_ptr<http::HttpExchange> ex)
    : p_(std::move(p)), ex_(std::move(ex)), writer_(p_.meta) {
  if (p_.parse && p_.stream) parser_.emplace(p_.format, *p_.parse);
  if (p_.stream) pending_ = writer_.begin();
}

ResponsesSink::~ResponsesSink() = default;

void ResponsesSink::start_stream() {
  std::lock_guard<std::mutex> lk(mu_);
  ex_->start_stream(200, "text/event-stream");
  ex_->send(std::move(pending_));
  pending_.clear();
  if (pending_finish_) ex_->finish();
  started_ = true;
}

void ResponsesSink::emit(std::string events) {
  if (events.empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (started_) {
    ex_->send(std::move(events));
  } else {
    pending_ += events;
  }
}

void ResponsesSink::end_stream() {
  std::lock_guard<std::mutex> lk(mu_);
  if (started_) {
    ex_->finish();
  } else {
    pending_finish_ = true;
  }
}

void ResponsesSink::push_text(const std::string& text) {
  if (text.empty()) return;
  if (!parser_) {
    chat::ChatDelta d;
    d.text = text;
    return emit(writer_.push(d));
  }
  std::string events;
  for (const chat::ChatDelta& d : parser_->push(text)) events += writer_.push(d);
  emit(std::move(events));
}

void ResponsesSink::on_token(const TokenEvent& ev) {
  if (ev.eog || !p_.stream) return;
  push_text(ev.text);
}

void ResponsesSink::store(const ordered_json& response, const chat::ParsedMessage& message) {
  if (!p_.store) return;
  ordered_json messages = p_.turn_messages;
  messages.push_back(assistant_turn_message(message));
  p_.store->put(p_.meta.id, ResponsesStore::Entry{response, std::move(messages)});
}

void ResponsesSink::on_finish(const RequestResult& r) {
  if (p_.metrics) p_.metrics->record_finished(r);
  // Before the answer: its completion (on_complete) then finds the record and logs.
  if (p_.access_log) p_.access_log->generation_done(p_.seq, generation_record(r, p_.stream, p_.meta.id));
  if (r.finish == FinishReason::Cancelled) {
    const std::string msg = "request cancelled before it finished (client disconnected, timeout or shutdown)";
    if (p_.stream) {
      emit(writer_.fail(503, msg));
      end_stream();
    } else {
      ex_->respond(error_response(503, msg));
    }
  } else {
    const bool incomplete = r.finish == FinishReason::Length;
    chat::ParsedMessage message;
    if (p_.stream) {
      push_text(r.final_text);
      if (parser_) {
        std::string events;
        for (const chat::ChatDelta& d : parser_->finish()) events += writer_.push(d);
        emit(std::move(events));
        message = parser_->message();
      } else {
        message.content = r.text;
      }
    } else if (p_.parse) {
      message = chat::parse_chat_output(p_.format, r.text, *p_.parse);
    } else {
      message.content = r.text;
    }
    // Reasoning tokens: the reasoning text re-tokenized (the engine counts tokens, not
    // which part of the output they fell in); 0 without a tokenizer.
    int64_t reasoning_tokens = 0;
    if (p_.tokenizer && !message.reasoning_content.empty())
      reasoning_tokens = static_cast<int64_t>(p_.tokenizer->encode(message.reasoning_content, false, false).size());
    const ordered_json usage =
        responses_usage_json(Usage{r.prompt_tokens, r.generated_tokens, r.cached_tokens}, reasoning_tokens);
    // Stored before the client hears of it, so a GET or a continuation sent right
    // after the answer finds it.
    ordered_json response;
    if (p_.stream) {
      std::string events = writer_.finish(incomplete, usage, &response);
      store(response, message);
      emit(std::move(events));
      end_stream();
    } else {
      response = response_object(p_.meta, incomplete ? "incomplete" : "completed",
                                 response_output_items(p_.meta.id, message, incomplete), usage);
      store(response, message);
      http::HttpResponse resp;
      resp.body = dump_json(response);
      ex_->respond(std::move(resp));
    }
  }
}

void ResponsesSink::on_error(uint64_t, const std::string& message) {
  if (p_.metrics) p_.metrics->record_error();
  if (p_.access_log) {
    GenerationRecord g;
    g.response_id = p_.meta.id;
    g.finish = "error";
    g.stream = p_.stream;
    g.error = message;
    p_.access_log->generation_done(p_.seq, std::move(g));
  }
  const std::string msg = "generation failed: " + message;
  if (p_.stream) {
    emit(writer_.fail(500, msg));
    end_stream();
  } else {
    ex_->respond(error_response(500, msg));
  }
}

}  // namespace pagoda::server
