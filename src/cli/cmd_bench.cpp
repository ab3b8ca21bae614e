// `pagoda bench`: a serving benchmark for any OpenAI-compatible server (pagoda,
// llama-server, vLLM, ...). The work is in src/loadgen/; this file maps options
// to a BenchConfig, picks defaults, runs, and prints / writes the results.
//
// Exit codes: 0 when the run completed, even if every request failed (failures
// are results, counted per class); 1 for bad option values or unreadable files
// (pagoda::Error); 2 for options CLI11 rejects.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "cli/commands.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "loadgen/http_client.h"
#include "loadgen/results.h"
#include "loadgen/runner.h"
#include "loadgen/svg_plot.h"
#include "loadgen/workload.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

namespace {

// Defaults, chosen so that a bare run is short and always ends by itself.
constexpr int64_t kDefaultRequests = 100;          // random / shared-prefix without --requests/--duration
constexpr int64_t kRequestCapWithDuration = 1000000;  // --duration alone: the request cap
constexpr double kDefaultMaxDurationS = 600;       // --requests alone: the time cap
constexpr int64_t kDefaultOpenLoopInFlight = 256;  // --rate: the in-flight cap (threads)
constexpr int64_t kMaxConcurrency = 4096;          // one thread per worker

struct Opts {
  std::string url, api_key, endpoint = "chat", model, workload, tokenizer, out, plot, label;
  std::vector<std::string> compare;
  int64_t concurrency = 0, requests = 0, input_len = 0, output_len = 128, prefix_len = 2000, system_len = 0, turns = 5,
          conversations = 4;
  double rate = 0, duration = 0, timeout = 60, hangup_fraction = 0;
  int64_t hangup_after = 4;
  uint64_t seed = 0;
  bool quiet = false, no_ignore_eos = false;
  std::string extra_body;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

loadgen::TokenCounter load_counter(const std::string& path) {
  std::shared_ptr<const Tokenizer> tok;
  if (ends_with(path, ".json")) {
    std::string cfg = path.substr(0, path.find_last_of('/') + 1) + "tokenizer_config.json";
    std::FILE* probe = std::fopen(cfg.c_str(), "rb");
    if (probe) std::fclose(probe);
    tok = Tokenizer::from_hf_json(path, probe ? cfg : "");
  } else {
    // Tokenizer only: the weights are never read (the file is mapped, not loaded).
    gguf::GgufFile f = gguf::GgufFile::open(path);
    tok = Tokenizer::from_gguf(f);
  }
  return [tok](std::string_view text) { return static_cast<int64_t>(tok->encode(text, false, false).size()); };
}

int run_compare(const Opts& o) {
  loadgen::RunResults a = loadgen::read_results_file(o.compare[0]);
  loadgen::RunResults b = loadgen::read_results_file(o.compare[1]);
  if (a.config.label.empty()) a.config.label = o.compare[0];
  if (b.config.label.empty()) b.config.label = o.compare[1];
  std::printf("a: %s\nb: %s\n\n%s", o.compare[0].c_str(), o.compare[1].c_str(),
              loadgen::format_compare(a, b).c_str());
  if (!o.plot.empty()) {  // both runs on one chart (e.g. multi-turn TTFT, cache on vs off)
    loadgen::write_plot_file(o.plot, {&a, &b});
    std::printf("plot: %s\n", o.plot.c_str());
  }
  return 0;
}

int run(const Opts& o) {
  if (!o.compare.empty()) return run_compare(o);
  if (o.url.empty()) throw Error("--url is required (or --compare a.json b.json)");
  if (o.workload.empty()) throw Error("--workload is required: random, shared-prefix or multi-turn");
  std::string why;
  if (!loadgen::parse_url(o.url, &why)) throw Error("--url " + o.url + ": " + why);

  loadgen::BenchConfig c;
  c.url = o.url;
  c.api_key = o.api_key;
  c.model = o.model;
  c.label = o.label;
  c.tokenizer = o.tokenizer;
  if (!loadgen::parse_endpoint(o.endpoint, &c.endpoint)) throw Error("--endpoint must be chat or completions");
  loadgen::WorkloadOptions& w = c.workload;
  if (!loadgen::parse_workload(o.workload, &w.kind)) {
    throw Error("--workload " + o.workload + ": must be random, shared-prefix, multi-turn or repeat");
  }
  // repeat has turns like multi-turn (each the same message, sent alone).
  const bool multi_turn = w.kind == loadgen::WorkloadKind::kMultiTurn || w.kind == loadgen::WorkloadKind::kRepeat;
  w.input_len = o.input_len > 0 ? o.input_len
                : w.kind == loadgen::WorkloadKind::kRandom ? 256
                : w.kind == loadgen::WorkloadKind::kSharedPrefix ? 32
                                                                 : 64;
  w.output_len = o.output_len;
  w.prefix_len = o.prefix_len;
  w.system_len = o.system_len;
  w.turns = multi_turn ? o.turns : 1;
  w.seed = o.seed;

  c.rate = o.rate;
  if (o.concurrency > 0) {
    c.concurrency = o.concurrency;
  } else if (o.rate > 0) {
    c.concurrency = kDefaultOpenLoopInFlight;
  } else {
    c.concurrency = multi_turn ? o.conversations : 1;
  }
  if (c.concurrency > kMaxConcurrency) throw Error("--concurrency: at most " + std::to_string(kMaxConcurrency));
  if (o.requests > 0) {
    c.max_requests = o.requests;
  } else if (o.duration > 0) {
    c.max_requests = kRequestCapWithDuration;
  } else {
    c.max_requests = multi_turn ? o.conversations * o.turns : kDefaultRequests;
  }
  c.max_duration_s = o.duration > 0 ? o.duration : kDefaultMaxDurationS;
  c.timeout_s = o.timeout;
  c.fixed_output = !o.no_ignore_eos;
  loadgen::check_extra_body(o.extra_body);
  c.extra_body = o.extra_body;
  c.hangup_fraction = o.hangup_fraction;
  c.hangup_after_chunks = o.hangup_after;

  loadgen::TokenCounter counter;
  if (!o.tokenizer.empty()) counter = load_counter(o.tokenizer);
  loadgen::Workload workload(w, counter);

  const bool tty = !o.quiet && isatty(STDERR_FILENO);
  if (!o.quiet) {
    std::fprintf(stderr, "pagoda bench: %s workload against %s (at most %lld requests, %.0f s)\n",
                 o.workload.c_str(), o.url.c_str(), static_cast<long long>(c.max_requests), c.max_duration_s);
  }
  int64_t done = 0, failed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  loadgen::ProgressFn progress = [&](const loadgen::RequestRecord& r) {  // serialised by run_bench
    ++done;
    if (!r.ok()) ++failed;
    if (!tty) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\r  %s   ",
                 loadgen::progress_line(done, c.max_requests, failed, elapsed, c.max_duration_s).c_str());
  };
  loadgen::RunResults results = loadgen::run_bench(c, workload, progress);
  if (tty) std::fprintf(stderr, "\n");
  // No server listening: a clear error and a failing exit status, not a report of 100%
  // failed requests (the run stopped at the first refusal).
  for (const loadgen::RequestRecord& r : results.records)
    if (r.error == "connect_refused" || r.error == "bad_url")
      throw Error((r.error == "bad_url" ? "--url " : "") + r.detail +
                  (r.error == "connect_refused" ? " (is the server running?)" : ""));

  loadgen::Report report = loadgen::make_report(results);
  std::printf("%s", loadgen::format_report(results, report).c_str());
  if (!o.out.empty()) {
    loadgen::write_results_file(o.out, results);
    std::printf("\nresults: %s\n", o.out.c_str());
  }
  if (!o.plot.empty()) {
    loadgen::write_plot_file(o.plot, results);
    std::printf("plot: %s\n", o.plot.c_str());
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--url", o->url, "Server base URL, http://host:port (only this host is contacted)");
  app.add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'");
  app.add_option("--endpoint", o->endpoint, "chat (/v1/chat/completions) or completions (/v1/completions)")
      ->check(CLI::IsMember({"chat", "completions"}));
  app.add_option("--model", o->model, "The request's model field (omitted when empty; vLLM needs it)");
  app.add_option("--workload", o->workload,
                 "random, shared-prefix, multi-turn or repeat (one message sent --turns times alone, greedy: retries)")
      ->check(CLI::IsMember({"random", "shared-prefix", "multi-turn", "repeat"}));
  app.add_option("--concurrency", o->concurrency,
                 "Closed loop: requests in flight (default 1; multi-turn: --conversations). "
                 "With --rate: the in-flight cap (default 256)")
      ->check(CLI::Range(int64_t{1}, kMaxConcurrency));
  app.add_option("--rate", o->rate, "Open loop: Poisson arrivals, jobs/s (multi-turn: conversation starts/s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--requests", o->requests,
                 "Send at most N requests (default 100; multi-turn: conversations x turns)")
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o->duration, "Start no request after S seconds (default cap 600)")
      ->check(CLI::PositiveNumber);
  app.add_option("--input-len", o->input_len,
                 "Tokens per user message (random: mean of uniform +-20%, default 256; shared-prefix: the "
                 "question, default 32; multi-turn: default 64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--output-len", o->output_len, "max_tokens = min_tokens, with ignore_eos")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--system-len", o->system_len,
                 "multi-turn: tokens in each conversation's own system prompt (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--prefix-len", o->prefix_len, "shared-prefix: tokens in the shared system prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--turns", o->turns, "multi-turn: turns per conversation; repeat: sends of each message")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--conversations", o->conversations, "multi-turn: conversations (run concurrently)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, kMaxConcurrency));
  app.add_option("--seed", o->seed, "Workload seed (same seed, same prompts)")->capture_default_str();
  app.add_option("--timeout", o->timeout, "Per-request timeout, seconds")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-m,--tokenizer-model", o->tokenizer,
                 "GGUF (or tokenizer.json) whose tokenizer measures prompt lengths exactly (else approximated)");
  app.add_option("--out", o->out, "Write the results (config, summary, every request) as JSON");
  app.add_option("--plot", o->plot, "Write an SVG chart (multi-turn: TTFT per turn; else latency CDFs); with --compare, both runs");
  app.add_option("--label", o->label, "Name of this run in reports, plots and --compare");
  app.add_option("--compare", o->compare, "Print two results files side by side with ratios b/a")->expected(2);
  app.add_option("--hangup-fraction", o->hangup_fraction,
                 "This fraction of the jobs closes the connection mid-stream (after --hangup-after content chunks); "
                 "reported as hung up, apart from ok and failed")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--hangup-after", o->hangup_after, "Content chunks a hang-up job reads before closing")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_flag("--no-ignore-eos", o->no_ignore_eos,
               "Do not send ignore_eos / min_tokens (for servers that reject them); output lengths then vary");
  app.add_option("--extra-body", o->extra_body,
                 "A JSON object whose members every request also carries (replacing the client's of the same name), "
                 "e.g. '{\"logit_bias\": {\"3\": -100}}'");
  app.add_flag("--quiet", o->quiet, "No progress line on stderr");
  return [o] { return run(*o); };
}

}  // namespace pagoda::cli
