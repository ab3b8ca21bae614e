// ApiServer's embedding routes: POST /v1/embeddings and POST /v1/rerank (embeddings_api.h
// is their wire protocol). Each input (or document) becomes one engine request; the
// requests of one HTTP request go in together (Engine::submit_group: one unit towards
// the queue limit) and a PoolingSink answers once the last one has finished.
#include <algorithm>
#include <mutex>

#include "server/api_server.h"
#include "server/answer_helpers.h"
#include "server/embeddings_api.h"

namespace pagoda::server {

namespace {

using namespace answer_detail;

// The engine thread's side of one embeddings / rerank HTTP request: collects the
// results of its requests (in any order) and answers once, when the last has finished,
// with `answer` applied to them in submission order; or at the first failure with 500
// (a forward failed) / 503 (cancelled: shutdown or --request-timeout). The mutex
// guards against the I/O thread still inside submit_group while the engine thread
// already finishes the first requests (their ids are known only once it returns, so
// results are ordered by id at the end).
class PoolingSink : public RequestSink {
 public:
  using Answer = std::function<http::HttpResponse(const std::vector<RequestResult>&)>;
  PoolingSink(std::shared_ptr<http::HttpExchange> ex, size_t n, Answer answer)
      : ex_(std::move(ex)), n_(n), answer_(std::move(answer)) {}

  void on_token(const TokenEvent&) override {}  // pooling requests stream nothing

  void on_finish(const RequestResult& result) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (answered_) return;
    if (result.finish == FinishReason::Cancelled) {
      answered_ = true;
      lk.unlock();
      ex_->respond(error_response(503, "the request was cancelled (server shutting down or request timeout)"));
      return;
    }
    results_.push_back(result);
    if (results_.size() < n_) return;
    answered_ = true;
    std::sort(results_.begin(), results_.end(),
              [](const RequestResult& a, const RequestResult& b) { return a.request_id < b.request_id; });
    std::vector<RequestResult> done = std::move(results_);
    lk.unlock();
    ex_->respond(answer_(done));
  }

  void on_error(uint64_t, const std::string& message) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (answered_) return;
      answered_ = true;
    }
    ex_->respond(error_response(500, message));
  }

 private:
  std::shared_ptr<http::HttpExchange> ex_;
  size_t n_;
  Answer answer_;
  std::mutex mu_;
  std::vector<RequestResult> results_;
  bool answered_ = false;
};

http::HttpResponse loading() {
  http::HttpResponse r;
  r.status = 503;
  r.body = error_json(503, "Loading model", "unavailable_error");
  return r;
}

int64_t prompt_tokens_of(const std::vector<RequestResult>& results) {
  int64_t n = 0;
  for (const RequestResult& r : results) n += r.prompt_tokens;
  return n;
}

}  // namespace

void ApiServer::set_pooling(PoolingSetup setup) { pooling_ = std::move(setup); }

void ApiServer::check_pooling_enabled(const char* route) const {
  if (!options_.embeddings)
    throw ApiError(404, std::string(route) + " is not enabled on this server: start pagoda serve with --embeddings");
}

void ApiServer::check_pooling_request(const std::string& model, const char* route) const {
  check_pooling_enabled(route);
  check_model_name(model, "model");
  if (shutting_down_.load()) throw ApiError(503, "the server is shutting down");
}

bool ApiServer::submit_pooling(const std::shared_ptr<http::HttpExchange>& ex, std::vector<Request> requests,
                               std::shared_ptr<RequestSink> sink, const std::string& input_param) {
  Engine* e = engine_.load(std::memory_order_acquire);
  const size_t n = requests.size();
  SubmitResult sr = e->submit_group(std::move(requests), std::move(sink));
  if (!sr.ok()) {
    const bool busy = sr.status == SubmitResult::Status::Busy;
    const bool shutting_down = shutting_down_.load();
    // As submit(): 429, or 503 with --busy-status 503; 503 while shutting down.
    const int status = !busy ? 400 : shutting_down ? 503 : options_.busy_status == 503 ? 503 : 429;
    metrics_.record_refused(busy ? "busy" : "invalid");
    http::HttpResponse resp = error_response(status, sr.message, sr.field == "prompt" ? input_param : sr.field);
    if (busy && !shutting_down) resp.headers.emplace_back("Retry-After", "1");
    ex->respond(std::move(resp));
    return false;
  }
  const uint64_t first = sr.request_id;
  ex->on_close([e, first, n] {
    for (uint64_t id = first; id < first + n; ++id) e->cancel(id);
  });
  return true;
}

void ApiServer::handle_embeddings(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading()));
  try {
    check_pooling_enabled("/v1/embeddings");  // before the body: a 404 whatever it holds
    EmbeddingsRequest er = parse_embeddings_request(req.body, n_vocab());
    check_pooling_request(er.model, "/v1/embeddings");
    if (pooling_.pooling == Pooling::None)
      throw ApiError(400, "pooling 'none' gives one vector per token, which /v1/embeddings cannot return: start "
                          "pagoda serve with --pooling mean, cls or last");
    if (pooling_.pooling == Pooling::Rank)
      throw ApiError(400, "this model is a reranker (pooling rank): use /v1/rerank");
    const std::optional<int64_t> dims = er.dimensions;
    if (dims && pooling_.n_embd > 0 && *dims > pooling_.n_embd)
      throw ApiError(400, "'dimensions' is " + std::to_string(*dims) + " but the model's embeddings have " +
                              std::to_string(pooling_.n_embd) + " dimensions",
                     "dimensions");
    std::vector<Request> requests;
    requests.reserve(er.inputs.size());
    for (EmbeddingInput& in : er.inputs) {
      Request r;
      if (in.text) {
        if (!tokenizer_) throw ApiError(400, "this model has no tokenizer: send the input as token ids", "input");
        // As llama-server: BOS / EOS as the tokenizer adds them (Qwen3-Embedding's
        // GGUF asks for the final <|endoftext|> its last-token pooling reads).
        r.prompt = tokenizer_->encode(*in.text, /*add_special=*/true, /*parse_special=*/true);
      } else {
        r.prompt = std::move(in.tokens);
      }
      r.pooling = pooling_.pooling;
      r.timeout_ms = options_.request_timeout_ms;
      requests.push_back(std::move(r));
    }
    const bool base64 = er.base64;
    const std::string model = options_.model_id;
    auto sink = std::make_shared<PoolingSink>(
        ex, requests.size(), [base64, dims, model](const std::vector<RequestResult>& results) {
          std::vector<std::vector<float>> embeddings;
          embeddings.reserve(results.size());
          for (const RequestResult& r : results) {
            const int64_t width = static_cast<int64_t>(r.embedding.size());  // the model's n_embd
            embeddings.push_back(normalized_embedding(r.embedding, std::min(dims.value_or(width), width)));
          }
          http::HttpResponse resp;
          resp.body = embeddings_response_json(model, embeddings, base64, prompt_tokens_of(results));
          return resp;
        });
    submit_pooling(ex, std::move(requests), std::move(sink), "input");
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

void ApiServer::handle_rerank(const http::HttpRequest& req, std::shared_ptr<http::HttpExchange> ex) {
  if (!ready()) return void(ex->respond(loading()));
  try {
    check_pooling_enabled("/v1/rerank");
    RerankRequest rr = parse_rerank_request(req.body);
    check_pooling_request(rr.model, "/v1/rerank");
    if (pooling_.pooling != Pooling::Rank)
      throw ApiError(400, std::string("this model is not a reranker (pooling ") + pooling_name(pooling_.pooling) +
                              "): /v1/rerank needs a model with pooling rank (its pooling_type or --pooling "
                              "rank)");
    if (!tokenizer_) throw ApiError(400, "this model has no tokenizer: it cannot rerank text");
    std::vector<Request> requests;
    requests.reserve(rr.documents.size());
    for (const std::string& doc : rr.documents) {
      Request r;
      const std::string text = rerank_prompt(pooling_.rerank_template, rr.query, doc);
      r.prompt = tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/true);
      if (tokenizer_->add_bos() && tokenizer_->bos() >= 0 && (r.prompt.empty() || r.prompt.front() != tokenizer_->bos()))
        r.prompt.insert(r.prompt.begin(), tokenizer_->bos());
      r.pooling = Pooling::Rank;
      r.rank_tokens = pooling_.rank_tokens;
      r.timeout_ms = options_.request_timeout_ms;
      requests.push_back(std::move(r));
    }
    const std::string model = options_.model_id;
    auto sink = std::make_shared<PoolingSink>(
        ex, requests.size(), [rr = std::move(rr), model](const std::vector<RequestResult>& results) {
          std::vector<float> scores;
          scores.reserve(results.size());
          for (const RequestResult& r : results) scores.push_back(rerank_score(r.embedding));
          http::HttpResponse resp;
          resp.body = rerank_response_json(model, scores, rr, prompt_tokens_of(results));
          return resp;
        });
    submit_pooling(ex, std::move(requests), std::move(sink), "documents");
  } catch (const ApiError& err) {
    ex->respond(error_response(err.status, err.what(), err.param));
  }
}

}  // namespace pagoda::server
