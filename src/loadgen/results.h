// What a benchmark run produced: its configuration, one record per request sent,
// the derived report, and their JSON / text forms.
//
// Contract:
// - RunResults holds the raw data (config + records + wall time); Report is
//   derived from it by make_report() and never stored on its own, so a results
//   file read back gives the same report as the run that wrote it.
// - JSON layout ("format": "pagoda-bench/1"): {format, label, config, duration_s,
//   summary (the Report), requests: [records]}. results_from_json() reads config,
//   duration_s and requests; it throws pagoda::Error naming the missing or
//   mistyped key.
// - Units: times in the records and reports are milliseconds (`*_ms`) except
//   the run-level `*_s` fields; tokens are counts.
// - Plain values; no threads.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace pagoda::loadgen {

struct BenchConfig {
  std::string url;
  std::string api_key;              // never written to JSON
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                // "" = the field is omitted from requests
  WorkloadOptions workload;
  int64_t concurrency = 1;          // closed loop: workers; open loop: the in-flight cap
  double rate = 0;                  // jobs/s (multi-turn: conversation starts/s); 0 = closed loop
  int64_t max_requests = 0;         // the run sends at most this many requests
  double max_duration_s = 0;        // no request starts after this
  double timeout_s = 60;            // per request, connect to [DONE]
  bool fixed_output = true;         // send ignore_eos + min_tokens = output_len
  std::string extra_body;           // JSON object text merged into every request ("" = none)
  std::string label;
  bool tokens_measured = false;     // lengths measured with a tokenizer (else approx)
  std::string tokenizer;            // the -m path, "" when approximated
  // Hang-ups: this fraction of the jobs (spread evenly: job j hangs up when
  // floor((j + 1) * f) > floor(j * f), so every prefix of the jobs holds its share)
  // closes the connection after hangup_after_chunks content chunks, like a client
  // that goes away mid-stream. A hung-up request is neither ok nor failed (class
  // kHungUp, counted in Report::num_hung_up and left out of the latency and token
  // figures); in a multi-turn job it ends the job.
  double hangup_fraction = 0;       // 0..1
  int64_t hangup_after_chunks = 4;  // >= 1
};

// The record class of a request the client closed on purpose (hangup_fraction).
inline constexpr const char* kHungUp = "hung_up";

// Whether job `job_idx` is one of the hang-up jobs of `config` (see hangup_fraction).
bool job_hangs_up(const BenchConfig& config, int64_t job_idx);

struct RequestRecord {
  int64_t job_idx = 0;
  int turn_idx = 0;
  double scheduled_s = 0;          // intended start, from the run start (open loop)
  double start_s = 0;              // actual start, from the run start
  std::string error = "ok";        // error_class_name(); "ok" for success
  std::string detail;              // one line for failures
  int http_status = 0;
  double ttft_ms = -1;             // first content chunk; -1 when none arrived
  double e2e_ms = 0;               // start to [DONE] (or to the failure)
  std::vector<double> itl_ms;      // gaps between consecutive content chunks
  int64_t num_content_chunks = 0;
  bool usage_reported = false;     // the server sent a usage chunk
  int64_t prompt_tokens = 0;       // server's usage, else the workload's estimate
  int64_t completion_tokens = 0;   // server's usage, else the content chunk count
  int64_t cached_tokens = -1;      // prompt_tokens_details.cached_tokens; -1 when absent
  int64_t expected_prompt_tokens = 0;  // the workload's count of the new user text + history
  int64_t max_tokens = 0;
  bool ok() const { return error == "ok"; }
  // ignore_eos / min_tokens honoured: completion_tokens == max_tokens.
  bool output_len_honoured() const { return ok() && completion_tokens == max_tokens; }
  // (e2e - ttft) / (completion_tokens - 1), or -1 when undefined.
  double tpot_ms() const;
};

struct RunResults {
  BenchConfig config;
  double duration_s = 0;           // first start to last finish
  std::vector<RequestRecord> records;  // in completion order
};

struct TurnReport {
  int turn_idx = 0;
  int64_t num_ok = 0;
  Summary ttft_ms;
  int64_t prompt_tokens = 0;       // summed over ok requests of this turn
  int64_t cached_tokens = 0;       // summed where reported
  int64_t num_cached_reported = 0;
  Summary per_stream_tok_s;        // decode tok/s per request of this turn (1000 / tpot_ms)
};

struct Report {
  int64_t num_sent = 0, num_ok = 0, num_failed = 0;
  int64_t num_hung_up = 0;          // closed by the client on purpose (hangup_fraction)
  std::map<std::string, int64_t> errors;  // class -> count, failures only
  double duration_s = 0;
  Summary ttft_ms, itl_ms, tpot_ms, e2e_ms;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;             // sum where reported
  int64_t num_cached_reported = 0;       // ok requests whose usage had cached_tokens
  int64_t num_usage_reported = 0;
  int64_t num_output_len_honoured = 0;
  double generation_tok_s = 0;     // completion tokens of ok requests / duration
  double prompt_tok_s = 0;         // prompt tokens of ok requests / duration
  double request_rate = 0;         // ok requests / duration
  Summary per_stream_tok_s;        // per request: 1000 / tpot_ms
  std::vector<TurnReport> per_turn;  // multi-turn only
};

Report make_report(const RunResults& results);

nlohmann::ordered_json config_to_json(const BenchConfig& config);
BenchConfig config_from_json(const nlohmann::json& j);
nlohmann::ordered_json record_to_json(const RequestRecord& r);
RequestRecord record_from_json(const nlohmann::json& j);
nlohmann::ordered_json summary_to_json(const Summary& s);
nlohmann::ordered_json report_to_json(const Report& r);
nlohmann::ordered_json results_to_json(const RunResults& results);
RunResults results_from_json(const nlohmann::json& j);

// Throw pagoda::Error when the file cannot be read/written or parsed.
void write_results_file(const std::string& path, const RunResults& results);
RunResults read_results_file(const std::string& path);

// The human-readable table printed after a run.
std::string format_report(const RunResults& results, const Report& report);
// The progress line `pagoda bench` redraws on a terminal: "37/100 done, 2 failed, 12 s
// elapsed, ETA 20 s". The ETA is the mean pace so far over what is left, and never past
// the duration cap (max_duration_s).
std::string progress_line(int64_t done, int64_t total, int64_t failed, double elapsed_s, double max_duration_s);
// Two runs side by side, with b/a ratios ("-" where a is 0).
std::string format_compare(const RunResults& a, const RunResults& b);

}  // namespace pagoda::loadgen
