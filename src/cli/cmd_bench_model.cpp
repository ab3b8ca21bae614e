// `pagoda bench-model`: prompt-processing and generation speed (median of
// repeats) and the decode roofline (measured read bandwidth / bytes a decode
// step streams: the weights, plus at a context depth the K/V attention reads, plus a
// hybrid model's recurrent state read and written).
// `-d N` measures both at N tokens of context, as llama-bench's -d does: the
// context is prefilled once, untimed, and every repeat runs from position N.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "common/process_memory.h"
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
    int n_prompt = 512, n_gen = 128, depth = 0, threads = 0, repeats = 3;
    bool json = false;
    KvOptions kv;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF model file, Hugging Face model directory or hf://OWNER/REPO[:QUANT]")->required();
  app.add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (0 skips)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", o->n_gen, "Generated tokens (0 skips)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("-d,--depth", o->depth, "Tokens of context before the prompt / generation (attention cost)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 22));
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
    const int64_t d = o->depth;
    const int64_t ctx = std::max<int64_t>(d + std::max(o->n_prompt, o->n_gen), 1);
    KvCache kv = make_kv_cache(*lm.model, o->kv);
    reserve_or_throw(kv, 0, 1);
    std::vector<float> logits;
    Batch batch;
    // Token ids spread over the vocabulary; speed does not depend on them.
    auto token_at = [&](int64_t i) { return static_cast<int32_t>((i * 7919 + 13) % c.n_vocab); };

    // The context, once, in 512-token chunks (positions [0, d)); the runs then write
    // their K/V after it, each repeat over the same positions.
    for (int64_t at = 0; at < d; at += 512) {
      batch.clear();
      const int64_t end = std::min(d, at + 512);
      for (int64_t i = at; i < end; ++i) batch.add(token_at(i), i, 0, i + 1 == end);
      reserve_or_throw(kv, 0, end);  // chunk by chunk: local layers never hold more than window + chunk
      lm.model->forward(batch, *kv.store, pool, logits);
      kv.store->release_out_of_window(0, end);  // sliding-window layers keep their window
    }
    // The KV memory a sequence at this depth holds: every layer's blocks, or with sliding
    // windows paged apart the global layers' and the local layers' windows.
    const uint64_t kv_bytes_at_depth = d > 0 ? kv.pool->stats().bytes_in_use : 0;
    reserve_or_throw(kv, 0, ctx);
    // Hybrid models: each phase starts from the recurrent state at the depth (a forward
    // must continue its sequence's state), restored before it, outside the timing.
    RecurrentStates& states = kv.store->recurrent_states();
    std::vector<uint8_t> state_at_depth;
    if (states.enabled()) {
      states.ensure(0);
      state_at_depth.assign(states.data(0), states.data(0) + states.bytes_per_state());
    }
    auto rewind_state = [&] {
      if (state_at_depth.empty()) return;
      std::memcpy(states.data(0), state_at_depth.data(), state_at_depth.size());
      states.set_pos(0, d);
    };
    std::vector<double> pp_rates, tg_rates, gen_probe_rates;
    ProcessMemory mem;
    std::optional<BandwidthProbe> probe;
    // One untimed warm-up of each phase: page in the weights, grow scratch.
    for (int r = -1; r < o->repeats; ++r) {
      if (r == 0) {
        // After the warm-up, before the bandwidth probe allocates its buffer: load +
        // forward passes, what a server holds (with this KV budget).
        mem = read_process_memory();
        probe.emplace(pool);
      }
      // Two probe passes beside each repeat (kernels/membw.h says why): one right before
      // its generation and one right after, so each generation rate also has the
      // bandwidth of its own seconds (gen_probe_rates: this VM's memory flips between ~35
      // and ~62 GB/s within seconds, and a median over the whole run can be the other one).
      if (o->n_prompt > 0) {
        rewind_state();
        batch.clear();
        for (int64_t i = 0; i < o->n_prompt; ++i) batch.add(token_at(i), d + i, 0, i + 1 == o->n_prompt);
        double t0 = now_seconds();
        lm.model->forward(batch, *kv.store, pool, logits);
        double dt = now_seconds() - t0;
        if (r >= 0) pp_rates.push_back(o->n_prompt / dt);
      }
      if (r >= 0) probe->run(1);
      if (o->n_gen > 0) {
        rewind_state();
        double t0 = now_seconds();
        for (int64_t i = 0; i < o->n_gen; ++i) {
          batch.clear();
          batch.add(token_at(i), d + i, 0, true);
          lm.model->forward(batch, *kv.store, pool, logits);
        }
        double dt = now_seconds() - t0;
        if (r >= 0) tg_rates.push_back(o->n_gen / dt);
      }
      if (r >= 0) {
        probe->run(1);
        const std::vector<double>& pr = probe->rates();
        gen_probe_rates.push_back((pr[pr.size() - 2] + pr.back()) / 2);
      }
    }
    if (!probe) {  // no repeat ran (cannot happen: repeats >= 1); measure anyway
      mem = read_process_memory();
      probe.emplace(pool);
    }
    probe->run(2);
    const BandwidthSummary bws = probe->summary();
    const double bw = bws.median;
    // A decode step reads the weights it uses (every matrix once; of a mixture of experts
    // only the chosen experts) and, in attention, the K/V of its context (on average
    // d + n/2 tokens over the run).
    const size_t weight_bytes = lm.model->decode_step_bytes();
    // A local (sliding-window) layer reads only its window, in either KV layout.
    const KvLayerGroups& groups = kv.store->groups();
    const double avg_ctx = static_cast<double>(d) + o->n_gen / 2.0;
    double kv_step_bytes_f = 0.0;  // each KV layer's bytes per token times the tokens it reads
    const std::vector<int64_t> windows = c.layer_windows();
    for (size_t l = 0; l < windows.size(); ++l) {
      const int64_t w = windows[l];
      const double per_token = static_cast<double>(kv.pool->real_block_bytes(groups.slot[l], groups.group[l])) /
                               static_cast<double>(kv.pool->block_size());
      kv_step_bytes_f += (w > 0 ? std::min(avg_ctx, static_cast<double>(w)) : avg_ctx) * per_token;
    }
    const size_t kv_step_bytes = static_cast<size_t>(kv_step_bytes_f);
    // Hybrid models: the recurrent state, read and written back (50 MiB each way for Qwen
    // 3.5 4B, 2% of its Q4_K_M weights).
    const size_t state_step_bytes = 2 * recurrent_state_bytes(c);
    const size_t step_bytes = weight_bytes + (d > 0 ? kv_step_bytes : 0) + state_step_bytes;
    const double roofline = bw / static_cast<double>(step_bytes);
    const double pp = median(pp_rates), tg = median(tg_rates);
    // Each generation run against the roofline of the two passes around it; the median.
    std::vector<double> paired_fractions;
    for (size_t i = 0; i < tg_rates.size() && i < gen_probe_rates.size(); ++i)
      if (gen_probe_rates[i] > 0) paired_fractions.push_back(tg_rates[i] * static_cast<double>(step_bytes) / gen_probe_rates[i]);
    const double paired_fraction = paired_fractions.empty() ? 0.0 : median(paired_fractions);
    if (o->json) {
      nlohmann::json j = {{"model", o->model},
                          {"arch", c.arch_name},
                          {"threads", threads},
                          {"isa", isa_name(best_isa())},
                          {"n_prompt", o->n_prompt},
                          {"n_gen", o->n_gen},
                          {"depth", d},
                          {"repeats", o->repeats},
                          {"prompt_tokens_per_s", pp},
                          {"gen_tokens_per_s", tg},
                          {"prompt_tokens_per_s_runs", pp_rates},
                          {"gen_tokens_per_s_runs", tg_rates},
                          {"model_bytes", lm.model->file_tensor_bytes()},
                          {"resident_weight_bytes", lm.model->resident_weight_bytes()},
                          {"process_rss_bytes", mem.rss_bytes},
                          {"process_rss_anon_bytes", mem.anon_bytes},
                          {"process_rss_file_bytes", mem.file_bytes},
                          {"weight_bytes", lm.model->weight_bytes()},
                          {"decode_step_bytes", step_bytes},
                          {"decode_step_weight_bytes", weight_bytes},
                          {"decode_step_state_bytes", state_step_bytes},
                          {"n_expert", c.n_expert},
                          {"n_expert_used", c.n_expert_used},
                          {"read_bandwidth_bytes_per_s", bw},
                          {"read_bandwidth_min_bytes_per_s", bws.min},
                          {"read_bandwidth_max_bytes_per_s", bws.max},
                          {"read_bandwidth_passes", bws.passes},
                          {"decode_roofline_tokens_per_s", roofline},
                          {"decode_roofline_fraction", roofline > 0 ? tg / roofline : 0.0},
                          {"decode_roofline_fraction_paired", paired_fraction},
                          {"decode_roofline_fraction_paired_runs", paired_fractions},
                          {"read_bandwidth_beside_gen_runs", gen_probe_rates},
                          {"kv_block_size", kv.pool->block_size()},
                          {"kv_type_k", o->kv.type_k},
                          {"kv_type_v", o->kv.type_v},
                          {"kv_bytes_per_token", kv.pool->bytes_per_token() * groups.n_groups()},
                          {"kv_layer_groups", groups.describe()},
                          {"kv_bytes_at_depth", kv_bytes_at_depth},
                          {"kv_bytes_per_token_at_depth", d > 0 ? static_cast<double>(kv_bytes_at_depth) / d : 0.0},
                          {"load_seconds", lm.load_seconds}};
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("model: %s\n  %s\n  tensor bytes %.1f MiB, decode step streams %.1f MiB%s, %d threads, %s\n",
                o->model.c_str(), c.summary().c_str(), lm.model->file_tensor_bytes() / 1048576.0,
                step_bytes / 1048576.0,
                state_step_bytes > 0 ? (d > 0 ? " (weights, K/V, recurrent state in and out)" : " (weights, recurrent state in and out)")
                                     : (d > 0 ? " (weights and K/V)" : ""),
                threads, cpu_features_string().c_str());
    if (d > 0)
      std::printf("  at a context depth of %lld tokens: KV holds %.1f MiB (%.0f bytes a token; %s)\n",
                  static_cast<long long>(d), kv_bytes_at_depth / 1048576.0,
                  static_cast<double>(kv_bytes_at_depth) / static_cast<double>(d), groups.describe().c_str());
    if (c.n_expert > 0)
      std::printf("  mixture of experts: %lld of %lld experts a token; a decode step reads %.1f%% of the %.1f MiB "
                  "of weights (attention, router, %lld experts' FFN, output, one embedding row)\n",
                  static_cast<long long>(c.n_expert_used), static_cast<long long>(c.n_expert),
                  100.0 * static_cast<double>(weight_bytes) / static_cast<double>(lm.model->weight_bytes()),
                  lm.model->weight_bytes() / 1048576.0, static_cast<long long>(c.n_expert_used));
    // The spread is printed beside the median: on a shared machine runs vary by 10-30%.
    auto range = [](const std::vector<double>& v, double scale = 1.0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f-%.1f", scale * *std::min_element(v.begin(), v.end()),
                    scale * *std::max_element(v.begin(), v.end()));
      return std::string(buf);
    };
    if (o->n_prompt > 0)
      std::printf("  prompt processing (pp%d): %8.1f tok/s (median of %d, range %s)\n", o->n_prompt, pp, o->repeats,
                  range(pp_rates).c_str());
    if (o->n_gen > 0)
      std::printf("  generation        (tg%d): %8.1f tok/s (median of %d, range %s)\n", o->n_gen, tg, o->repeats,
                  range(tg_rates).c_str());
    std::printf("  resident: weights %.1f MiB (%.2fx the tensor bytes); process RSS %.1f MiB (anonymous %.1f, file %.1f)\n",
                lm.model->resident_weight_bytes() / 1048576.0,
                static_cast<double>(lm.model->resident_weight_bytes()) / static_cast<double>(lm.model->file_tensor_bytes()),
                mem.rss_bytes / 1048576.0, mem.anon_bytes / 1048576.0, mem.file_bytes / 1048576.0);
    std::printf("  read bandwidth %.1f GB/s (median of %d passes beside the runs, range %.1f-%.1f) -> decode roofline "
                "%.1f tok/s",
                bw / 1e9, bws.passes, bws.min / 1e9, bws.max / 1e9, roofline);
    if (o->n_gen > 0) std::printf(" (generation at %.0f%% of it)", 100.0 * tg / roofline);
    std::printf("\n");
    if (o->n_gen > 0 && !paired_fractions.empty())
      std::printf("  generation against the passes on either side of each run: %.0f%% of their roofline (median of %zu, "
                  "range %.0f-%.0f%%; bandwidth beside the runs %s GB/s)\n",
                  100.0 * paired_fraction, paired_fractions.size(),
                  100.0 * *std::min_element(paired_fractions.begin(), paired_fractions.end()),
                  100.0 * *std::max_element(paired_fractions.begin(), paired_fractions.end()),
                  range(gen_probe_rates, 1e-9).c_str());
    return 0;
  };
}

}  // namespace pagoda::cli
