// `pagoda bench-engine`: aggregate generation throughput of the Engine for N
// concurrent streams (continuous batching: one forward per step for all of
// them), and time to first token under that load.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "common/text_file.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace pagoda::cli {

namespace {

// Collects results from the engine thread; the bench thread waits for all.
class CollectSink final : public RequestSink {
 public:
  void on_token(const TokenEvent&) override {}
  void on_finish(const RequestResult& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(r);
    cv_.notify_all();
  }
  void on_error(uint64_t, const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    errors_.push_back(message);
    cv_.notify_all();
  }
  void wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return results_.size() + errors_.size() >= n; });
  }
  std::vector<RequestResult> results_;
  std::vector<std::string> errors_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace

Runner add_bench_engine(CLI::App& app) {
  struct Opts {
    std::string quantize;
    std::string model;
    std::vector<int> streams = {1, 2, 4, 8, 16};
    int n_prompt = 64, n_gen = 64, threads = 0;
    int64_t max_batch_tokens = 512;
    bool json = false;
    std::string json_schema_file;
    KvOptions kv;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model file, Hugging Face model directory or hf://OWNER/REPO[:QUANT]")->required();
  app.add_option("--streams", o->streams, "Concurrent stream counts to measure")->delimiter(',')->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens per stream")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("-n,--n-gen", o->n_gen, "Generated tokens per stream")->capture_default_str()->check(CLI::Range(2, 1 << 16));
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("--max-batch-tokens", o->max_batch_tokens, "Tokens per forward step")->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--json", o->json, "Print one JSON object");
  app.add_option("--json-schema", o->json_schema_file,
                 "Also run every stream count with each stream's output constrained to this JSON schema "
                 "(alternating with unconstrained runs; needs a GGUF with a vocabulary)");
  add_quantize_option(app, o->quantize);
  o->kv.add_to(app);
  return [o] {
    o->kv.resolve();  // bad KV flags fail before the model loads
    LoadedModel lm = load_model(o->model, LoadOptions{false, parse_quantize(o->quantize)});
    const KvConfig kc = o->kv.resolve_for(*lm.model);
    const ModelConfig& c = lm.model->config();
    const int threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    // With a schema both modes run with the tokenizer (streamed text is decoded in
    // both), so the ratio isolates the grammar's cost: masks and matcher steps.
    std::unique_ptr<Tokenizer> tokenizer;
    std::shared_ptr<const grammar::Grammar> schema_grammar;
    if (!o->json_schema_file.empty()) {
      if (!lm.file || !lm.file->has("tokenizer.ggml.model"))
        throw Error("--json-schema needs a GGUF model with a vocabulary (pagoda synth --vocab-from ...)");
      tokenizer = Tokenizer::from_gguf(*lm.file);
      const nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(read_text_file(o->json_schema_file), nullptr, false);
      if (schema.is_discarded()) throw Error("--json-schema " + o->json_schema_file + ": not valid JSON");
      try {
        schema_grammar = grammar::Grammar::from_gbnf(grammar::json_schema_output_gbnf(schema));
      } catch (const std::exception& e) {
        throw Error("--json-schema " + o->json_schema_file + ": " + e.what());
      }
    }
    nlohmann::json rows = nlohmann::json::array();
    if (!o->json)
      std::printf("model: %s\n  %s, %d threads, prompt %d + generate %d tokens per stream, prefix cache off\n"
                  "  %7s %7s %14s %16s %14s %12s %10s\n",
                  o->model.c_str(), c.summary().c_str(), threads, o->n_prompt, o->n_gen, "streams", "output",
                  "agg decode t/s", "per-stream t/s", "e2e agg t/s", "mean TTFT ms", "generated");
    for (int n : o->streams) for (int constrained = 0; constrained <= (schema_grammar ? 1 : 0); ++constrained) {
      EngineConfig ec;
      ec.kv = kc;
      ec.threads = threads;
      ec.parallel = n;
      ec.max_queue = n;
      ec.max_batch_tokens = o->max_batch_tokens;
      ec.ctx_size = std::min<int64_t>(c.ctx_len, o->n_prompt + o->n_gen + 1);
      ec.model_id = o->model;
      Engine engine(*lm.model, tokenizer.get(), ec);
      engine.start();
      auto sink = std::make_shared<CollectSink>();
      const double t0 = now_seconds();
      for (int s = 0; s < n; ++s) {
        Request req;
        for (int i = 0; i < o->n_prompt; ++i)
          req.prompt.push_back(static_cast<int32_t>((static_cast<int64_t>(s) * 104729 + i * 7919 + 13) % c.n_vocab));
        req.sampling.temperature = 0;
        req.max_tokens = o->n_gen;
        req.ignore_eos = true;
        req.use_cache = false;
        if (constrained) req.grammar = schema_grammar;
        SubmitResult sub = engine.submit(std::move(req), sink);
        if (!sub.ok()) throw Error(sub.message);
      }
      sink->wait_for(static_cast<size_t>(n));
      const double wall = now_seconds() - t0;
      engine.stop();
      if (!sink->errors_.empty()) throw Error(sink->errors_.front());
      double ttft = 0, per_stream = 0;
      int64_t generated = 0;
      for (const RequestResult& r : sink->results_) {
        ttft += r.timings.ttft_ms / n;
        double ms = 0;
        for (double d : r.timings.token_intervals_ms) ms += d;
        per_stream += (r.timings.token_intervals_ms.size() / std::max(ms / 1000.0, 1e-9)) / n;
        generated += r.generated_tokens;
      }
      const double aggregate = per_stream * n;
      const double e2e = generated / wall;
      const char* output = constrained ? "schema" : "free";
      rows.push_back({{"streams", n}, {"output", output}, {"aggregate_decode_tokens_per_s", aggregate},
                      {"per_stream_tokens_per_s", per_stream}, {"e2e_tokens_per_s", e2e},
                      {"mean_ttft_ms", ttft}, {"wall_s", wall}, {"generated_tokens", generated}});
      if (!o->json)
        std::printf("  %7d %7s %14.1f %16.1f %14.1f %12.0f %10lld\n", n, output, aggregate, per_stream, e2e, ttft,
                    static_cast<long long>(generated));
      std::fflush(stdout);
    }
    if (o->json) {
      nlohmann::json j = {{"model", o->model}, {"threads", threads}, {"n_prompt", o->n_prompt},
                          {"n_gen", o->n_gen}, {"runs", rows}};
      std::printf("%s\n", j.dump(2).c_str());
    }
    return 0;
  };
}

}  // namespace pagoda::cli
