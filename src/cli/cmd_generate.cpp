// `pagoda generate`: stream a continuation of a prompt to stdout (generated
// text only); load time and prompt / generation speed go to stderr. It runs
// the request through the same Engine the server uses: one code path.
#include <cmath>
#include <cstdio>
#include <future>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "common/text_file.h"
#include "engine/engine.h"
#include "server/image_inputs.h"

namespace pagoda::cli {

namespace {

// Writes streamed text to stdout as the engine thread produces it. Terminal or
// pipe writes of a few bytes per token; the engine serves only this request.
class StdoutSink final : public RequestSink {
 public:
  void on_token(const TokenEvent& ev) override {
    if (ev.text.empty()) return;
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
  }
  void on_finish(const RequestResult& result) override { done_.set_value(result); }
  void on_error(uint64_t, const std::string& message) override {
    done_.set_exception(std::make_exception_ptr(Error(message)));
  }
  std::future<RequestResult> result() { return done_.get_future(); }

 private:
  std::promise<RequestResult> done_;
};

}  // namespace

Runner add_generate(CLI::App& app) {
  struct Opts {
    std::string quantize;
    std::string model, prompt;
    int n_predict = 128;
    int threads = 0;
    int64_t ctx_size = 0;
    bool ignore_eos = false;
    std::vector<std::string> stops;
    std::string mmproj;               // --mmproj: the vision projector
    bool no_mmproj = false;           // --no-mmproj: not the hf:// repo's projector either
    std::vector<std::string> images;  // --image FILE, in order
    SamplingParams sp;
    KvOptions kv;
    SpecOptions spec;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model file, Hugging Face model directory or hf://OWNER/REPO[:QUANT]")->required();
  app.add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  app.add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app.add_option("--temp", o->sp.temperature, "Temperature (0 = greedy)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o->sp.top_k, "Top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", o->sp.top_p, "Top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", o->sp.min_p, "Min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", o->sp.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  app.add_option("--repeat-last-n", o->sp.penalty_last_n, "Tokens the penalties look back over")->capture_default_str();
  app.add_option("--presence-penalty", o->sp.presence_penalty, "Presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", o->sp.frequency_penalty, "Frequency penalty")->capture_default_str();
  app.add_option("--seed", o->sp.seed, "RNG seed (default: random)");
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("-c,--ctx-size", o->ctx_size, "Context size (default: the model's)");
  app.add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  app.add_option("--stop", o->stops, "Stop string (repeatable)");
  app.add_option("--mmproj", o->mmproj,
                 "Vision projector GGUF (llama.cpp's mmproj file; gemma3) for --image; -m hf://... uses the repo's "
                 "mmproj file when it has one");
  app.add_flag("--no-mmproj", o->no_mmproj, "Neither download nor use the hf:// repo's projector");
  app.add_option("--image", o->images,
                 "Image file (PNG, JPEG, WebP; repeatable) at each <__media__> in the prompt, or before the prompt "
                 "when it has none; needs --mmproj or an hf:// repo with one");
  add_quantize_option(app, o->quantize);
  o->kv.add_to(app);
  o->spec.add_to(app);
  return [o] {
    if (auto err = o->sp.validate()) throw Error(*err);
    EngineConfig ec;
    o->kv.resolve();  // bad KV flags fail before the model loads
    ec.spec = o->spec.resolve();
    // The hf:// repo's projector only when images need one and none is named.
    const ResolvedModel resolved = resolve_model(o->model, !o->images.empty() && o->mmproj.empty() && !o->no_mmproj);
    LoadedModel lm = load_model(resolved.path, LoadOptions{true, parse_quantize(o->quantize)});
    std::optional<LoadedModel> draft;
    if (ec.spec.draft) {
      draft = load_draft_model(o->spec.model_draft, lm);
      ec.draft_model = draft->model.get();
    }
    ec.kv = o->kv.resolve_for(*lm.model);
    const ModelConfig& c = lm.model->config();
    const Tokenizer& tok = *lm.tokenizer;
    ec.threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    ec.parallel = 1;
    ec.max_queue = 1;
    ec.ctx_size = o->ctx_size > 0 ? o->ctx_size : c.ctx_len;
    ec.model_id = o->model;
    ec.extra_eog_ids = lm.generation.eos_token_ids;
    std::fprintf(stderr, "model: %s (%s), %d threads, %s\n", o->model.c_str(), c.summary().c_str(), ec.threads,
                 cpu_features_string().c_str());
    std::fprintf(stderr, "load time: %.2f s\n", lm.load_seconds);

    Request req;
    if (!o->images.empty()) {
      const std::string projector = o->mmproj.empty() ? resolved.mmproj : o->mmproj;
      if (projector.empty())
        throw Error(std::string("--image needs --mmproj FILE (the model's vision projector)") +
                    (o->no_mmproj ? ", and --no-mmproj refuses the repo's"
                     : resolved.path != o->model ? ": the model's repo has no mmproj file" : ""));
      server::ImageInputOptions io;
      io.threads = ec.threads;
      server::ImageInputs images(load_vision_projector(projector, *lm.model, ec.max_batch_tokens), io);
      if (projector != o->mmproj) std::fprintf(stderr, "projector: %s (the repo's)\n", projector.c_str());
      std::string text = o->prompt;
      if (text.find(server::kImageMarker) == std::string::npos) {
        std::string markers;
        for (size_t i = 0; i < o->images.size(); ++i) markers += server::kImageMarker;
        text = markers + text;
      }
      std::vector<server::ImageInputs::Prepared> prepared;
      try {
        for (const std::string& path : o->images) {
          const std::string bytes = read_text_file(path);
          prepared.push_back(images.prepare_bytes(std::span<const uint8_t>(
              reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())));
        }
        server::PromptWithImages p = server::assemble_prompt(
            text, prepared, images.encoder(), tok,
            [&](const std::string& piece, size_t index) { return tok.encode(piece, index == 0, true); });
        req.prompt = std::move(p.ids);
        req.images = std::move(p.images);
      } catch (const server::ApiError& e) {
        throw Error(e.what());
      }
    } else {
      req.prompt = tok.encode(o->prompt, true, true);
    }
    if (req.prompt.empty()) throw Error("the prompt encodes to no tokens");
    req.sampling = o->sp;
    req.max_tokens = o->n_predict;
    req.ignore_eos = o->ignore_eos;
    req.stop = o->stops;

    Engine engine(*lm.model, &tok, ec);
    engine.start();
    auto sink = std::make_shared<StdoutSink>();
    std::future<RequestResult> done = sink->result();
    SubmitResult sub = engine.submit(std::move(req), sink);
    if (!sub.ok()) throw Error(sub.message);
    RequestResult r = done.get();
    engine.stop();
    std::fwrite(r.final_text.data(), 1, r.final_text.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);

    const double prefill_s = std::max(r.timings.ttft_ms - r.timings.queue_ms, 1e-6) / 1000.0;
    const int64_t computed = r.prompt_tokens - r.cached_tokens;
    double decode_ms = 0;
    for (double ms : r.timings.token_intervals_ms) decode_ms += ms;
    const size_t n_intervals = r.timings.token_intervals_ms.size();
    std::fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tok/s)\n", static_cast<long long>(computed),
                 prefill_s, computed / prefill_s);
    std::fprintf(stderr, "generation: %lld tokens, %.1f tok/s after the first, finished by %s%s%s\n",
                 static_cast<long long>(r.generated_tokens),
                 n_intervals ? n_intervals / std::max(decode_ms / 1000.0, 1e-9) : 0.0,
                 finish_reason_name(r.finish), r.stop_matched.empty() ? "" : " at ",
                 r.stop_matched.c_str());
    if (r.draft_tokens > 0)
      std::fprintf(stderr, "speculation (%s): %lld of %lld proposed tokens accepted (%.0f%%)\n",
                   spec::spec_types_name(ec.spec).c_str(), static_cast<long long>(r.accepted_tokens),
                   static_cast<long long>(r.draft_tokens), 100.0 * r.accepted_tokens / r.draft_tokens);
    return 0;
  };
}

}  // namespace pagoda::cli
