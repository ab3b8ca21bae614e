// `pagoda generate`: stream a continuation of a prompt to stdout (generated
// text only); load time and prompt / generation speed go to stderr.
#include <cstdio>
#include <span>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"

namespace pagoda::cli {

Runner add_generate(CLI::App& app) {
  struct Opts {
    std::string model, prompt;
    int n_predict = 128;
    int threads = 0;
    int64_t ctx_size = 0;
    bool ignore_eos = false;
    std::vector<std::string> stops;
    SamplingParams sp;
    KvOptions kv;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model")->required();
  app.add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  app.add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 24));
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
  o->kv.add_to(app);
  return [o] {
    if (auto err = o->sp.validate()) throw Error(*err);
    o->kv.resolve();  // bad KV flags fail before the model loads
    LoadedModel lm = load_model(o->model, true);
    const ModelConfig& c = lm.model->config();
    const Tokenizer& tok = *lm.tokenizer;
    const int threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    ThreadPool pool(threads);
    const int64_t ctx = o->ctx_size > 0 ? o->ctx_size : c.ctx_len;
    std::fprintf(stderr, "model: %s (%s), %d threads, %s\n", o->model.c_str(), c.summary().c_str(), threads,
                 cpu_features_string().c_str());
    std::fprintf(stderr, "load time: %.2f s\n", lm.load_seconds);

    std::vector<TokenId> prompt = tok.encode(o->prompt, true, true);
    if (prompt.empty()) throw Error("the prompt encodes to no tokens");
    if (static_cast<int64_t>(prompt.size()) >= ctx)
      throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                  std::to_string(ctx));
    KvCache kv = make_kv_cache(c, o->kv);
    // The whole run must fit: prompt plus every token we may generate.
    if (auto msg = kv.pool->never_fits(std::min<int64_t>(ctx, prompt.size() + o->n_predict))) throw Error(*msg);
    Sampler sampler(o->sp, static_cast<int32_t>(c.n_vocab));
    for (TokenId t : prompt) sampler.accept(t);
    StreamDecoder decoder(tok);
    StopStringMatcher stops(o->stops);

    // Prompt processing in chunks of 512 tokens (bounds activation memory).
    const int64_t chunk = 512;
    std::vector<float> logits;
    Batch batch;
    double t_pp = now_seconds();
    reserve_or_throw(kv, 0, static_cast<int64_t>(prompt.size()));
    for (size_t i = 0; i < prompt.size(); i += chunk) {
      batch.clear();
      size_t end = std::min(prompt.size(), i + chunk);
      for (size_t j = i; j < end; ++j) batch.add(prompt[j], static_cast<int64_t>(j), 0, j + 1 == prompt.size());
      lm.model->forward(batch, *kv.store, pool, logits);
    }
    t_pp = now_seconds() - t_pp;

    double t_gen = now_seconds();
    int n_gen = 0;
    int64_t pos = static_cast<int64_t>(prompt.size());
    bool stopped = false;
    std::string reason = "length";
    while (n_gen < o->n_predict) {
      TokenId next = sampler.sample(std::span<float>(logits.data(), c.n_vocab));
      sampler.accept(next);
      ++n_gen;
      if (tok.is_eog(next) && !o->ignore_eos) {
        reason = "eos";
        break;
      }
      StopStringMatcher::Result r = stops.push(decoder.push(next));
      std::fwrite(r.emit.data(), 1, r.emit.size(), stdout);
      std::fflush(stdout);
      if (r.stopped) {
        stopped = true;
        reason = "stop string";
        break;
      }
      if (n_gen >= o->n_predict) break;
      if (pos >= ctx) {
        reason = "context full";
        break;
      }
      reserve_or_throw(kv, 0, pos + 1);
      batch.clear();
      batch.add(next, pos++, 0, true);
      lm.model->forward(batch, *kv.store, pool, logits);
    }
    t_gen = now_seconds() - t_gen;
    if (!stopped) {
      std::string tail = stops.push(decoder.flush()).emit + stops.flush();
      std::fwrite(tail.data(), 1, tail.size(), stdout);
    }
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s)\n", prompt.size(), t_pp,
                 prompt.size() / std::max(t_pp, 1e-9));
    std::fprintf(stderr, "generation: %d tokens in %.3f s (%.1f tok/s), stopped by %s\n", n_gen, t_gen,
                 n_gen / std::max(t_gen, 1e-9), reason.c_str());
    return 0;
  };
}

}  // namespace pagoda::cli
