// ResponsesSink — the engine thread's side of one POST /v1/responses request: turns the
// generated text into Responses output (responses_api.h), answers the exchange, and
// stores the finished response (ResponsesStore) when the request asked for `store`.
//
// Contract: as CompletionSink's (api_server.h): on_token / on_finish / on_error run on
// the engine thread and never block (HttpExchange only queues; the store's mutex is
// held for a map update). Streaming: the handler calls start_stream() once the engine
// accepted the request; events produced before are queued and sent after the headers.
// A cancelled or failed generation is not stored.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/access_log.h"
#include "http/http_server.h"
#include "server/metrics.h"
#include "server/responses_api.h"
#include "server/responses_store.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

class ResponsesSink final : public RequestSink {
 public:
  struct Params {
    bool stream = false;
    ResponseMeta meta;
    AccessLog* access_log = nullptr;       // gets the generation's record (null: none)
    uint64_t seq = 0;                      // the request's HttpRequest::seq
    const Tokenizer* tokenizer = nullptr;  // counts reasoning tokens; may be null
    ServerMetrics* metrics = nullptr;
    std::optional<chat::ParseOptions> parse;  // nullopt: the text is the message
    chat::ChatFormat format;
    ResponsesStore* store = nullptr;          // null: not stored
    ordered_json turn_messages;               // the conversation before this output
  };
  ResponsesSink(Params p, std::shared_ptr<http::HttpExchange> ex);
  ~ResponsesSink() override;

  void start_stream();
  void on_token(const TokenEvent& ev) override;
  void on_finish(const RequestResult& r) override;
  void on_error(uint64_t request_id, const std::string& message) override;

 private:
  void emit(std::string events);
  void end_stream();
  void push_text(const std::string& text);  // streaming: parsed into events
  void store(const ordered_json& response, const chat::ParsedMessage& message);

  Params p_;
  std::shared_ptr<http::HttpExchange> ex_;
  ResponsesStreamWriter writer_;
  std::optional<chat::StreamingChatParser> parser_;
  std::mutex mu_;  // started_, pending_, pending_finish_ (handler vs engine thread)
  bool started_ = false;
  bool pending_finish_ = false;
  std::string pending_;
};

}  // namespace pagoda::server
