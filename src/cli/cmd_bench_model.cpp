// `pagoda bench-model`: prompt-processing and generation speed (median of
// repeats) and the decode roofline (measured read bandwidth / bytes a decode
// step streams).
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "kernels/membw.h"

namespace pagoda::cli {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

Runner add_bench_model(CLI::App& app) {
  struct Opts {
    std::string quantize;
    std::string model;
    int n_prompt = 512, n_gen = 128, threads = 0, repeats = 3;
    bool json = false;
    KvOptions kv;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model file or Hugging Face model directory")->required();
  app.add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (0 skips)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", o->n_gen, "Generated tokens (0 skips)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("-r,--repeats", o->repeats, "Repeats (median reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_flag("--json", o->json, "Print one JSON object");
  add_quantize_option(app, o->quantize);
  o->kv.add_to(app);
  return [o] {
    o->kv.resolve();  // bad KV flags fail before the model loads
    LoadedModel lm = load_model(o->model, LoadOptions{false, parse_quantize(o->quantize)});
    const ModelConfig& c = lm.model->config();
    const int threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    ThreadPool pool(threads);
    const int64_t ctx = std::max<int64_t>(o->n_prompt + o->n_gen, 1);
    KvCache kv = make_kv_cache(c, o->kv);
    reserve_or_throw(kv, 0, ctx);
    std::vector<float> logits;
    Batch batch;
    // Token ids spread over the vocabulary; speed does not depend on them.
    auto token_at = [&](int64_t i) { return static_cast<int32_t>((i * 7919 + 13) % c.n_vocab); };

    std::vector<double> pp_rates, tg_rates;
    // One untimed warm-up of each phase: page in the weights, grow scratch.
    for (int r = -1; r < o->repeats; ++r) {
      if (o->n_prompt > 0) {
        batch.clear();
        for (int64_t i = 0; i < o->n_prompt; ++i) batch.add(token_at(i), i, 0, i + 1 == o->n_prompt);
        double t0 = now_seconds();
        lm.model->forward(batch, *kv.store, pool, logits);
        double dt = now_seconds() - t0;
        if (r >= 0) pp_rates.push_back(o->n_prompt / dt);
      }
      if (o->n_gen > 0) {
        double t0 = now_seconds();
        for (int64_t i = 0; i < o->n_gen; ++i) {
          batch.clear();
          batch.add(token_at(i), i, 0, true);
          lm.model->forward(batch, *kv.store, pool, logits);
        }
        double dt = now_seconds() - t0;
        if (r >= 0) tg_rates.push_back(o->n_gen / dt);
      }
    }
    const double bw = measure_read_bandwidth(pool);
    const size_t step_bytes = lm.model->decode_step_bytes();
    const double roofline = bw / static_cast<double>(step_bytes);
    const double pp = median(pp_rates), tg = median(tg_rates);
    if (o->json) {
      nlohmann::json j = {{"model", o->model},
                          {"arch", c.arch_name},
                          {"threads", threads},
                          {"isa", isa_name(best_isa())},
                          {"n_prompt", o->n_prompt},
                          {"n_gen", o->n_gen},
                          {"repeats", o->repeats},
                          {"prompt_tokens_per_s", pp},
                          {"gen_tokens_per_s", tg},
                          {"prompt_tokens_per_s_runs", pp_rates},
                          {"gen_tokens_per_s_runs", tg_rates},
                          {"model_bytes", lm.model->file_tensor_bytes()},
                          {"weight_bytes", lm.model->weight_bytes()},
                          {"decode_step_bytes", step_bytes},
                          {"n_expert", c.n_expert},
                          {"n_expert_used", c.n_expert_used},
                          {"read_bandwidth_bytes_per_s", bw},
                          {"decode_roofline_tokens_per_s", roofline},
                          {"decode_roofline_fraction", roofline > 0 ? tg / roofline : 0.0},
                          {"kv_block_size", kv.pool->block_size()},
                          {"kv_type_k", o->kv.type_k},
                          {"kv_type_v", o->kv.type_v},
                          {"kv_bytes_per_token", kv.pool->bytes_per_token()},
                          {"load_seconds", lm.load_seconds}};
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("model: %s\n  %s\n  tensor bytes %.1f MiB, decode step streams %.1f MiB, %d threads, %s\n",
                o->model.c_str(), c.summary().c_str(), lm.model->file_tensor_bytes() / 1048576.0,
                step_bytes / 1048576.0, threads, cpu_features_string().c_str());
    if (c.n_expert > 0)
      std::printf("  mixture of experts: %lld of %lld experts a token; a decode step reads %.1f%% of the %.1f MiB "
                  "of weights (attention, router, %lld experts' FFN, output, one embedding row)\n",
                  static_cast<long long>(c.n_expert_used), static_cast<long long>(c.n_expert),
                  100.0 * static_cast<double>(step_bytes) / static_cast<double>(lm.model->weight_bytes()),
                  lm.model->weight_bytes() / 1048576.0, static_cast<long long>(c.n_expert_used));
    // The spread is printed beside the median: on a shared machine runs vary by 10-30%.
    auto range = [](const std::vector<double>& v) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f-%.1f", *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
      return std::string(buf);
    };
    if (o->n_prompt > 0)
      std::printf("  prompt processing (pp%d): %8.1f tok/s (median of %d, range %s)\n", o->n_prompt, pp, o->repeats,
                  range(pp_rates).c_str());
    if (o->n_gen > 0)
      std::printf("  generation        (tg%d): %8.1f tok/s (median of %d, range %s)\n", o->n_gen, tg, o->repeats,
                  range(tg_rates).c_str());
    std::printf("  read bandwidth %.1f GB/s -> decode roofline %.1f tok/s", bw / 1e9, roofline);
    if (o->n_gen > 0) std::printf(" (generation at %.0f%% of it)", 100.0 * tg / roofline);
    std::printf("\n");
    return 0;
  };
}

}  // namespace pagoda::cli
