// ApiServer over a real Engine (stories260K) in process: end of generation decided by
// the engine alone (generation_config's extra EOS ids are neither reported in logprobs
// nor streamed as an empty chunk), request validation answered by the engine's
// messages as 400s naming the field, and /v1/cache/reset answered by the engine thread
// (no thread outlives the Engine); a stalled disk tier is reported by /health
// ("degraded"), /metrics and /v1/cache/stats while every request is still answered.
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/api_server.h"
#include "http/http_test_harness.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using namespace http::http_test;
using json = nlohmann::json;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

// The model, an Engine with `extra_eog_ids`, an ApiServer attached to it and an
// HttpServer on a free port; torn down in the order serve does it.
class Stack {
 public:
  explicit Stack(std::vector<int32_t> extra_eog_ids = {}, const std::function<void(EngineConfig&)>& tweak = {}) {
    file_ = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(kStories));
    model_ = Model::load(file_);
    tokenizer_ = Tokenizer::from_gguf(*file_);
    EngineConfig ec;
    ec.parallel = 2;
    ec.ctx_size = 128;
    ec.threads = 1;
    ec.extra_eog_ids = std::move(extra_eog_ids);
    ec.check_invariants = true;
    if (tweak) tweak(ec);
    engine_ = std::make_unique<Engine>(*model_, tokenizer_.get(), ec);
    engine_->start();
    ApiServerOptions ao;
    ao.log_requests = false;
    api_ = std::make_unique<ApiServer>(ao);
    api_->attach(engine_.get(), tokenizer_.get(), nullptr);
    http::HttpServerOptions ho;
    ho.port = 0;
    ho.error_body = transport_error_response;
    http_ = std::make_unique<http::HttpServer>(ho, api_->routes());
    http_->start();
  }
  ~Stack() {
    http_->stop();
    engine_.reset();  // before the ApiServer, as serve does
    api_.reset();
  }
  Response call(const std::string& raw) {
    Client c(http_->port());
    EXPECT_TRUE(c.connected());
    c.send(raw);
    std::optional<Response> r = c.read_response(60.0);
    EXPECT_TRUE(r.has_value());
    return r.value_or(Response{});
  }
  Engine& engine() { return *engine_; }
  const Tokenizer& tokenizer() { return *tokenizer_; }
  http::HttpServer& http() { return *http_; }

 private:
  std::shared_ptr<const gguf::GgufFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<http::HttpServer> http_;
};

const json kRequest = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 1}};

// The token ids a request generates, straight from the Engine.
class IdSink final : public RequestSink {
 public:
  void on_token(const TokenEvent& ev) override { ids.push_back(ev.token_id); }
  void on_finish(const RequestResult&) override { done.set_value(); }
  void on_error(uint64_t, const std::string&) override { done.set_value(); }
  std::vector<int32_t> ids;
  std::promise<void> done;
};

// The SSE events' JSON payloads (without [DONE]).
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string payload = body.substr(at + 6, end - at - 6);
    at = end;
    if (payload != "[DONE]") out.push_back(json::parse(payload));
  }
  return out;
}

TEST(ApiServerEngine, AnExtraEndOfGenerationIdIsNeitherReportedNorStreamed) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  // The free run, from the engine: greedy token ids without the extra id.
  std::vector<int32_t> prompt, free_run;
  std::vector<std::string> pieces;  // as logprobs show them
  {
    Stack s;
    prompt = s.tokenizer().encode("Once upon a time", true, false);
    Request r;
    r.prompt = prompt;
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    auto sink = std::make_shared<IdSink>();
    ASSERT_TRUE(s.engine().submit(r, sink).ok());
    ASSERT_EQ(sink->done.get_future().wait_for(60s), std::future_status::ready);
    free_run = sink->ids;
    ASSERT_EQ(free_run.size(), 12u);
    for (int32_t id : free_run) pieces.push_back(s.tokenizer().token_to_piece(id, true));
  }
  // The 4th token becomes an extra EOS id (as generation_config.json's eos_token_id
  // would make it); generation stops at its first occurrence.
  const int32_t stop_id = free_run[3];
  const size_t n_before =
      static_cast<size_t>(std::find(free_run.begin(), free_run.end(), stop_id) - free_run.begin());
  json request = kRequest;
  request["prompt"] = prompt;

  Stack s({stop_id});
  const Response r = s.call(post("/v1/completions", request.dump()));
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], n_before + 1);  // the stop token is counted
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json(std::vector<std::string>(pieces.begin(), pieces.begin() + n_before)));
  EXPECT_EQ(lp["token_logprobs"].size(), n_before);

  json streamed = request;
  streamed["stream"] = true;
  const Response sr = s.call(post("/v1/completions", streamed.dump()));
  ASSERT_EQ(sr.status, 200) << sr.body;
  const std::vector<json> events = sse_events(sr.body);
  ASSERT_FALSE(events.empty());
  // One event per token before the stop token (each carries its logprob), then the
  // finish event with empty text: no empty chunk for the stop token.
  ASSERT_EQ(events.size(), n_before + 1) << sr.body;
  for (size_t i = 0; i < n_before; ++i) {
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null()) << events[i];
    EXPECT_EQ(events[i]["choices"][0]["logprobs"]["tokens"][0], pieces[i]) << events[i];
  }
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "stop");
}

TEST(ApiServerEngine, TheEnginesValidationAnswers400NamingTheField) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  Stack s;
  std::vector<int> long_prompt(200, 5);  // ctx 128
  const Response r = s.call(post("/v1/completions", json{{"prompt", long_prompt}}.dump()));
  EXPECT_EQ(r.status, 400);
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["message"], "the prompt has 200 tokens but the context is 128 tokens (at least one must be left to generate)");
  EXPECT_EQ(e["param"], "prompt");
}

TEST(ApiServerEngine, CacheResetsAreAnsweredByTheEngineThreadAndNoneOutlivesIt) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  for (int round = 0; round < 3; ++round) {
    Stack s;
    ASSERT_EQ(s.call(post("/v1/completions", kRequest.dump())).status, 200);
    EXPECT_GT(s.engine().stats().cache.cached_blocks, 0);
    const Response r = s.call(post("/v1/cache/reset", "{}"));
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_GT(j["freed_blocks"].get<int64_t>(), 0) << r.body;
    EXPECT_EQ(j["prefix_cache"]["cached_blocks"], 0) << r.body;
    EXPECT_EQ(s.engine().stats().cache.cached_blocks, 0);
    // Resets still in flight when everything is torn down: the Stack's destructor
    // must neither hang nor touch a destroyed Engine (ASan / TSan builds check).
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 8; ++i) {
      clients.push_back(std::make_unique<Client>(s.http().port()));
      clients.back()->send(post("/v1/cache/reset", "{}"));
    }
  }
}

// Every disk operation blocks while closed: a hung NFS / FUSE mount, in a test.
struct IoGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  void set(bool o) {
    {
      std::lock_guard<std::mutex> lk(mu);
      open = o;
    }
    cv.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return open; });
  }
};

TEST(ApiServerEngine, AStalledDiskTierIsReportedByHealthAndRequestsAreStillAnswered) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  const std::string dir = "/tmp/pagoda_api_stall_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto gate = std::make_shared<IoGate>();
  {
    Stack s({}, [&](EngineConfig& ec) {
      ec.disk.dir = dir;
      ec.disk.io_deadline_ms = 100;
      ec.disk.test_io_hook = [gate](bool) { gate->pass(); };
      ec.cache.capacity_bytes = 0;  // every finished block spills to disk
    });
    std::string prompt;
    for (int i = 0; i < 6; ++i) prompt += "Once upon a time there was a little girl. ";  // ~70 tokens: two full blocks
    const json req = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
    ASSERT_EQ(s.call(post("/v1/completions", req.dump())).status, 200);
    auto wait_for = [](const std::function<bool()>& done) {
      for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return done();
    };
    ASSERT_TRUE(wait_for([&] { return s.engine().stats().cache.disk.blocks > 0; }));
    EXPECT_EQ(json::parse(s.call(get("/health")).body)["status"], "ok");

    gate->set(false);  // the mount hangs
    const Response again = s.call(post("/v1/completions", req.dump()));
    EXPECT_EQ(again.status, 200) << "the request waited on the stuck disk instead of computing";
    ASSERT_TRUE(wait_for([&] { return s.engine().stats().cache.disk.stalled; }));
    const Response health = s.call(get("/health"));
    EXPECT_EQ(health.status, 200);
    const json h = json::parse(health.body);
    EXPECT_EQ(h["status"], "degraded") << health.body;
    EXPECT_NE(h["problems"][0].get<std::string>().find("disk tier stalled"), std::string::npos) << health.body;
    EXPECT_NE(s.call(get("/metrics")).body.find("pagoda_prefix_cache_disk_stalled 1"), std::string::npos);
    const json stats = json::parse(s.call(get("/v1/cache/stats")).body);
    EXPECT_EQ(stats["prefix_cache"]["disk"]["stalled"], true) << stats.dump();
    EXPECT_EQ(stats["prefix_cache"]["disk"]["restore_timeouts"], 1) << stats.dump();

    gate->set(true);  // the mount comes back
    EXPECT_TRUE(wait_for([&] { return json::parse(s.call(get("/health")).body)["status"] == "ok"; }));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::server
