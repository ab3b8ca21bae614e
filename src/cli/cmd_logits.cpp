// `pagoda logits`: raw float32 logits [n_tokens, n_vocab] of a token sequence,
// for reference checks against an independent implementation.
#include <cstdio>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"

namespace pagoda::cli {

Runner add_logits(CLI::App& app) {
  struct Opts {
    std::string model, tokens, out;
    int threads = 0;
    int64_t ctx_size = 0;
    bool one_by_one = false;
    KvOptions kv;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model")->required();
  app.add_option("--tokens", o->tokens, "Token ids, e.g. 1,5,9")->required();
  app.add_option("--out", o->out, "Output file (raw little-endian float32)")->required();
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("-c,--ctx-size", o->ctx_size,
                 "Context size the model runs with (default: the model's); selects LongRoPE long/short factors");
  app.add_flag("--one-by-one", o->one_by_one, "Feed tokens one per forward (decode path) instead of one batch");
  o->kv.add_to(app);
  return [o] {
    std::vector<int32_t> ids = parse_token_list(o->tokens);
    o->kv.resolve();  // bad KV flags fail before the model loads
    if (ids.empty()) throw Error("--tokens is empty");
    LoadedModel lm = load_model(o->model, false);
    const ModelConfig& c = lm.model->config();
    if (o->ctx_size < 0) throw Error("--ctx-size must be > 0");
    if (o->ctx_size > 0) lm.model->set_context_size(o->ctx_size);
    ThreadPool pool(o->threads > 0 ? o->threads : ThreadPool::default_num_threads());
    if (static_cast<int64_t>(ids.size()) > c.ctx_len)
      throw Error(std::to_string(ids.size()) + " tokens exceed the model's context of " + std::to_string(c.ctx_len));
    KvCache kv = make_kv_cache(*lm.model, o->kv);
    reserve_or_throw(kv, 0, static_cast<int64_t>(ids.size()));
    std::vector<float> all, logits;
    Batch b;
    if (o->one_by_one) {
      for (size_t i = 0; i < ids.size(); ++i) {
        b.clear();
        b.add(ids[i], static_cast<int64_t>(i), 0, true);
        lm.model->forward(b, *kv.store, pool, logits);
        all.insert(all.end(), logits.begin(), logits.end());
      }
    } else {
      for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int64_t>(i), 0, true);
      lm.model->forward(b, *kv.store, pool, all);
    }
    FILE* f = std::fopen(o->out.c_str(), "wb");
    if (!f) throw Error(o->out + ": cannot open for writing");
    size_t n = std::fwrite(all.data(), sizeof(float), all.size(), f);
    bool ok = std::fclose(f) == 0 && n == all.size();
    if (!ok) throw Error(o->out + ": write failed");
    return 0;
  };
}

}  // namespace pagoda::cli
