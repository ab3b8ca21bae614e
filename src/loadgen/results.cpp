#include "loadgen/results.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text_file.h"

namespace pagoda::loadgen {

using ojson = nlohmann::ordered_json;

double RequestRecord::tpot_ms() const {
  if (!ok() || ttft_ms < 0 || completion_tokens < 2) return -1;
  return (e2e_ms - ttft_ms) / static_cast<double>(completion_tokens - 1);
}

bool job_hangs_up(const BenchConfig& config, int64_t job_idx) {
  if (config.hangup_fraction <= 0) return false;
  double f = std::min(config.hangup_fraction, 1.0);
  return std::floor(static_cast<double>(job_idx + 1) * f) > std::floor(static_cast<double>(job_idx) * f);
}

Report make_report(const RunResults& results) {
  Report rep;
  rep.duration_s = results.duration_s;
  std::vector<double> ttft, itl, tpot, e2e, per_stream;
  std::map<int, std::vector<double>> turn_ttft;
  std::map<int, TurnReport> turns;
  bool multi_turn = results.config.workload.kind == WorkloadKind::kMultiTurn ||
                    results.config.workload.kind == WorkloadKind::kRepeat;
  std::map<int, std::vector<double>> turn_tok_s;
  for (const RequestRecord& r : results.records) {
    ++rep.num_sent;
    if (r.error == kHungUp) {
      ++rep.num_hung_up;
      continue;
    }
    if (!r.ok()) {
      ++rep.num_failed;
      ++rep.errors[r.error];
      continue;
    }
    ++rep.num_ok;
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    double t = r.tpot_ms();
    if (t > 0) {
      tpot.push_back(t);
      per_stream.push_back(1000.0 / t);
    }
    e2e.push_back(r.e2e_ms);
    rep.prompt_tokens += r.prompt_tokens;
    rep.completion_tokens += r.completion_tokens;
    if (r.usage_reported) ++rep.num_usage_reported;
    if (r.cached_tokens >= 0) {
      rep.cached_tokens += r.cached_tokens;
      ++rep.num_cached_reported;
    }
    if (r.output_len_honoured()) ++rep.num_output_len_honoured;
    if (multi_turn) {
      TurnReport& tr = turns[r.turn_idx];
      tr.turn_idx = r.turn_idx;
      ++tr.num_ok;
      tr.prompt_tokens += r.prompt_tokens;
      if (r.cached_tokens >= 0) {
        tr.cached_tokens += r.cached_tokens;
        ++tr.num_cached_reported;
      }
      if (r.ttft_ms >= 0) turn_ttft[r.turn_idx].push_back(r.ttft_ms);
      if (t > 0) turn_tok_s[r.turn_idx].push_back(1000.0 / t);
    }
  }
  rep.ttft_ms = summarize(std::move(ttft));
  rep.itl_ms = summarize(std::move(itl));
  rep.tpot_ms = summarize(std::move(tpot));
  rep.e2e_ms = summarize(std::move(e2e));
  rep.per_stream_tok_s = summarize(std::move(per_stream));
  if (rep.duration_s > 0) {
    rep.generation_tok_s = static_cast<double>(rep.completion_tokens) / rep.duration_s;
    rep.prompt_tok_s = static_cast<double>(rep.prompt_tokens) / rep.duration_s;
    rep.request_rate = static_cast<double>(rep.num_ok) / rep.duration_s;
  }
  for (auto& [idx, tr] : turns) {
    tr.ttft_ms = summarize(std::move(turn_ttft[idx]));
    tr.per_stream_tok_s = summarize(std::move(turn_tok_s[idx]));
    rep.per_turn.push_back(tr);
  }
  return rep;
}

// ---- JSON -------------------------------------------------------------------

namespace {

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(std::string("results JSON: key '") + key + "' has the wrong type");
  }
}

const nlohmann::json& require(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) throw Error(std::string("results JSON: missing key '") + key + "'");
  return j[key];
}

}  // namespace

ojson config_to_json(const BenchConfig& c) {
  ojson j;
  j["url"] = c.url;
  j["endpoint"] = endpoint_name(c.endpoint);
  j["model"] = c.model;
  j["workload"] = workload_name(c.workload.kind);
  j["input_len"] = c.workload.input_len;
  j["output_len"] = c.workload.output_len;
  j["prefix_len"] = c.workload.prefix_len;
  j["system_len"] = c.workload.system_len;
  j["turns"] = c.workload.turns;
  j["seed"] = c.workload.seed;
  j["concurrency"] = c.concurrency;
  j["rate"] = c.rate;
  j["max_requests"] = c.max_requests;
  j["max_duration_s"] = c.max_duration_s;
  j["timeout_s"] = c.timeout_s;
  j["ignore_eos"] = c.fixed_output;
  j["extra_body"] = c.extra_body;
  j["label"] = c.label;
  j["token_counts"] = c.tokens_measured ? "measured" : "approx";
  j["tokenizer"] = c.tokenizer;
  j["hangup_fraction"] = c.hangup_fraction;
  j["hangup_after_chunks"] = c.hangup_after_chunks;
  return j;
}

BenchConfig config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("results JSON: 'config' is not an object");
  BenchConfig c;
  c.url = get_or<std::string>(j, "url", "");
  if (!parse_endpoint(get_or<std::string>(j, "endpoint", "chat"), &c.endpoint)) {
    throw Error("results JSON: unknown endpoint");
  }
  c.model = get_or<std::string>(j, "model", "");
  if (!parse_workload(get_or<std::string>(j, "workload", ""), &c.workload.kind)) {
    throw Error("results JSON: unknown or missing workload");
  }
  c.workload.input_len = get_or<int64_t>(j, "input_len", 0);
  c.workload.output_len = get_or<int64_t>(j, "output_len", 0);
  c.workload.prefix_len = get_or<int64_t>(j, "prefix_len", 0);
  c.workload.system_len = get_or<int64_t>(j, "system_len", 0);
  c.workload.turns = get_or<int64_t>(j, "turns", 1);
  c.workload.seed = get_or<uint64_t>(j, "seed", 0);
  c.concurrency = get_or<int64_t>(j, "concurrency", 1);
  c.rate = get_or<double>(j, "rate", 0);
  c.max_requests = get_or<int64_t>(j, "max_requests", 0);
  c.max_duration_s = get_or<double>(j, "max_duration_s", 0);
  c.timeout_s = get_or<double>(j, "timeout_s", 0);
  c.fixed_output = get_or<bool>(j, "ignore_eos", true);
  c.extra_body = get_or<std::string>(j, "extra_body", "");
  c.label = get_or<std::string>(j, "label", "");
  c.tokens_measured = get_or<std::string>(j, "token_counts", "approx") == "measured";
  c.tokenizer = get_or<std::string>(j, "tokenizer", "");
  c.hangup_fraction = get_or<double>(j, "hangup_fraction", 0);
  c.hangup_after_chunks = get_or<int64_t>(j, "hangup_after_chunks", 4);
  return c;
}

ojson record_to_json(const RequestRecord& r) {
  ojson j;
  j["job"] = r.job_idx;
  j["turn"] = r.turn_idx;
  j["scheduled_s"] = r.scheduled_s;
  j["start_s"] = r.start_s;
  j["result"] = r.error;
  if (!r.detail.empty()) j["detail"] = r.detail;
  j["http_status"] = r.http_status;
  j["ttft_ms"] = r.ttft_ms;
  j["e2e_ms"] = r.e2e_ms;
  j["tpot_ms"] = r.tpot_ms();
  j["itl_ms"] = r.itl_ms;
  j["content_chunks"] = r.num_content_chunks;
  j["usage_reported"] = r.usage_reported;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["expected_prompt_tokens"] = r.expected_prompt_tokens;
  j["max_tokens"] = r.max_tokens;
  j["output_len_honoured"] = r.output_len_honoured();
  return j;
}

RequestRecord record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("results JSON: a request record is not an object");
  RequestRecord r;
  r.job_idx = get_or<int64_t>(j, "job", 0);
  r.turn_idx = get_or<int>(j, "turn", 0);
  r.scheduled_s = get_or<double>(j, "scheduled_s", 0);
  r.start_s = get_or<double>(j, "start_s", 0);
  r.error = require(j, "result").is_string() ? j["result"].get<std::string>() : throw Error("results JSON: 'result' is not a string");
  r.detail = get_or<std::string>(j, "detail", "");
  r.http_status = get_or<int>(j, "http_status", 0);
  r.ttft_ms = get_or<double>(j, "ttft_ms", -1);
  r.e2e_ms = get_or<double>(j, "e2e_ms", 0);
  r.itl_ms = get_or<std::vector<double>>(j, "itl_ms", {});
  r.num_content_chunks = get_or<int64_t>(j, "content_chunks", 0);
  r.usage_reported = get_or<bool>(j, "usage_reported", false);
  r.prompt_tokens = get_or<int64_t>(j, "prompt_tokens", 0);
  r.completion_tokens = get_or<int64_t>(j, "completion_tokens", 0);
  r.cached_tokens = get_or<int64_t>(j, "cached_tokens", -1);
  r.expected_prompt_tokens = get_or<int64_t>(j, "expected_prompt_tokens", 0);
  r.max_tokens = get_or<int64_t>(j, "max_tokens", 0);
  return r;
}

ojson summary_to_json(const Summary& s) {
  return ojson{{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"p10", s.p10}, {"p50", s.p50},
               {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

ojson report_to_json(const Report& r) {
  ojson j;
  j["requests_sent"] = r.num_sent;
  j["requests_ok"] = r.num_ok;
  j["requests_failed"] = r.num_failed;
  j["requests_hung_up"] = r.num_hung_up;
  j["errors"] = ojson::object();
  for (const auto& [k, v] : r.errors) j["errors"][k] = v;
  j["duration_s"] = r.duration_s;
  j["percentiles"] = "linear interpolation between closest ranks (numpy default)";
  j["ttft_ms"] = summary_to_json(r.ttft_ms);
  j["itl_ms"] = summary_to_json(r.itl_ms);
  j["tpot_ms"] = summary_to_json(r.tpot_ms);
  j["e2e_ms"] = summary_to_json(r.e2e_ms);
  j["per_stream_tok_s"] = summary_to_json(r.per_stream_tok_s);
  j["generation_tok_s"] = r.generation_tok_s;
  j["prompt_tok_s"] = r.prompt_tok_s;
  j["request_rate"] = r.request_rate;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["requests_with_cached_tokens"] = r.num_cached_reported;
  j["requests_with_usage"] = r.num_usage_reported;
  j["output_len_honoured"] = r.num_output_len_honoured;
  ojson turns = ojson::array();
  for (const TurnReport& t : r.per_turn) {
    turns.push_back({{"turn", t.turn_idx},
                     {"requests_ok", t.num_ok},
                     {"ttft_ms", summary_to_json(t.ttft_ms)},
                     {"prompt_tokens", t.prompt_tokens},
                     {"cached_tokens", t.cached_tokens},
                     {"requests_with_cached_tokens", t.num_cached_reported},
                     {"per_stream_tok_s", summary_to_json(t.per_stream_tok_s)}});
  }
  j["per_turn"] = std::move(turns);
  return j;
}

ojson results_to_json(const RunResults& results) {
  ojson j;
  j["format"] = "pagoda-bench/1";
  j["label"] = results.config.label;
  j["config"] = config_to_json(results.config);
  j["duration_s"] = results.duration_s;
  j["summary"] = report_to_json(make_report(results));
  ojson recs = ojson::array();
  for (const RequestRecord& r : results.records) recs.push_back(record_to_json(r));
  j["requests"] = std::move(recs);
  return j;
}

RunResults results_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("results JSON: not an object");
  if (get_or<std::string>(j, "format", "") != "pagoda-bench/1") {
    throw Error("results JSON: 'format' is not pagoda-bench/1");
  }
  RunResults r;
  r.config = config_from_json(require(j, "config"));
  r.duration_s = get_or<double>(j, "duration_s", 0);
  const nlohmann::json& recs = require(j, "requests");
  if (!recs.is_array()) throw Error("results JSON: 'requests' is not an array");
  for (const auto& rec : recs) r.records.push_back(record_from_json(rec));
  return r;
}

void write_results_file(const std::string& path, const RunResults& results) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot open for writing");
  out << results_to_json(results).dump(1) << "\n";
  if (!out) throw Error(path + ": write failed");
}

RunResults read_results_file(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  try {
    return results_from_json(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

// ---- text -------------------------------------------------------------------

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

void line(std::ostringstream& os, const char* f, ...) __attribute__((format(printf, 2, 3)));
void line(std::ostringstream& os, const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  os << buf << "\n";
}

void summary_row(std::ostringstream& os, const char* name, const Summary& s) {
  if (s.count == 0) {
    line(os, "  %-18s %10s %10s %10s %10s   (no samples)", name, "-", "-", "-", "-");
    return;
  }
  line(os, "  %-18s %10.2f %10.2f %10.2f %10.2f   (n=%lld)", name, s.mean, s.p50, s.p90, s.p99,
       static_cast<long long>(s.count));
}

}  // namespace

std::string progress_line(int64_t done, int64_t total, int64_t failed, double elapsed_s, double max_duration_s) {
  const double left = done > 0 ? elapsed_s / static_cast<double>(done) * static_cast<double>(std::max<int64_t>(0, total - done))
                               : max_duration_s - elapsed_s;
  const double eta = std::max(0.0, std::min(left, max_duration_s - elapsed_s));
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld/%lld done, %lld failed, %.0f s elapsed, ETA %.0f s", static_cast<long long>(done),
                static_cast<long long>(total), static_cast<long long>(failed), elapsed_s, eta);
  return buf;
}

std::string format_report(const RunResults& results, const Report& r) {
  const BenchConfig& c = results.config;
  std::ostringstream os;
  std::string mode = c.rate > 0 ? "open loop, Poisson " + fmt("%.3g", c.rate) + " jobs/s (in-flight cap " +
                                      std::to_string(c.concurrency) + ")"
                                : "closed loop, concurrency " + std::to_string(c.concurrency);
  line(os, "pagoda bench%s%s: %s, %s %s, %s", c.label.empty() ? "" : " ", c.label.c_str(),
       workload_name(c.workload.kind).c_str(), c.url.c_str(), endpoint_path(c.endpoint).c_str(), mode.c_str());
  line(os, "  token counts: %s", c.tokens_measured ? ("measured with " + c.tokenizer).c_str()
                                                   : "approx (0.75 words/token; pass -m MODEL to measure)");
  line(os, "  requests: %lld sent, %lld ok, %lld failed, in %.2f s", static_cast<long long>(r.num_sent),
       static_cast<long long>(r.num_ok), static_cast<long long>(r.num_failed), r.duration_s);
  for (const auto& [cls, n] : r.errors) line(os, "    %-22s %lld", cls.c_str(), static_cast<long long>(n));
  if (c.hangup_fraction > 0) {
    line(os, "  hung up on purpose: %lld (%.0f%% of the jobs, after %lld content chunks: sent, not ok or failed, not in the figures)",
         static_cast<long long>(r.num_hung_up), 100 * c.hangup_fraction,
         static_cast<long long>(c.hangup_after_chunks));
  }
  line(os, "%s", "");
  line(os, "  %-18s %10s %10s %10s %10s", "latency (ms)", "mean", "p50", "p90", "p99");
  summary_row(os, "TTFT", r.ttft_ms);
  summary_row(os, "ITL (per chunk)", r.itl_ms);
  summary_row(os, "TPOT (per token)", r.tpot_ms);
  summary_row(os, "end-to-end", r.e2e_ms);
  line(os, "%s", "");
  line(os, "  generation throughput  %10.2f tok/s (aggregate)", r.generation_tok_s);
  line(os, "  per-stream generation  %10.2f tok/s (mean of 1000/TPOT; p50 %.2f)", r.per_stream_tok_s.mean,
       r.per_stream_tok_s.p50);
  line(os, "  prompt throughput      %10.2f tok/s", r.prompt_tok_s);
  line(os, "  request throughput     %10.3f req/s", r.request_rate);
  line(os, "  tokens: prompt %lld, completion %lld (usage reported by the server for %lld of %lld)",
       static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.completion_tokens),
       static_cast<long long>(r.num_usage_reported), static_cast<long long>(r.num_ok));
  line(os, "  output length honoured (ignore_eos/min_tokens): %lld of %lld",
       static_cast<long long>(r.num_output_len_honoured), static_cast<long long>(r.num_ok));
  if (r.num_cached_reported > 0) {
    line(os, "  cached prompt tokens   %lld (%.1f%% of prompt tokens)", static_cast<long long>(r.cached_tokens),
         r.prompt_tokens ? 100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0.0);
  } else {
    line(os, "  cached prompt tokens   not reported by the server");
  }
  if (!r.per_turn.empty()) {
    line(os, "%s", "");
    line(os, "  %-6s %6s %10s %10s %10s %12s %12s %12s", "turn", "ok", "TTFT p50", "TTFT p90", "TTFT mean", "prompt tok",
         "cached tok", "decode t/s");
    for (const TurnReport& t : r.per_turn) {
      std::string cached = t.num_cached_reported ? std::to_string(t.cached_tokens) : "-";
      line(os, "  %-6d %6lld %10.2f %10.2f %10.2f %12lld %12s %12.1f", t.turn_idx + 1, static_cast<long long>(t.num_ok),
           t.ttft_ms.p50, t.ttft_ms.p90, t.ttft_ms.mean, static_cast<long long>(t.prompt_tokens), cached.c_str(),
           t.per_stream_tok_s.mean);
    }
  }
  return os.str();
}

std::string format_compare(const RunResults& a, const RunResults& b) {
  Report ra = make_report(a), rb = make_report(b);
  std::string la = a.config.label.empty() ? "a" : a.config.label;
  std::string lb = b.config.label.empty() ? "b" : b.config.label;
  std::ostringstream os;
  line(os, "%-28s %14s %14s %10s", "", la.substr(0, 14).c_str(), lb.substr(0, 14).c_str(), "b/a");
  auto row = [&](const std::string& name, double va, double vb) {
    std::string ratio = va != 0 ? fmt("%.3f", vb / va) : "-";
    line(os, "%-28s %14.2f %14.2f %10s", name.c_str(), va, vb, ratio.c_str());
  };
  auto text_row = [&](const char* name, const std::string& va, const std::string& vb) {
    line(os, "%-28s %14s %14s", name, va.substr(0, 14).c_str(), vb.substr(0, 14).c_str());
  };
  text_row("workload", workload_name(a.config.workload.kind), workload_name(b.config.workload.kind));
  text_row("token counts", a.config.tokens_measured ? "measured" : "approx",
           b.config.tokens_measured ? "measured" : "approx");
  row("requests ok", static_cast<double>(ra.num_ok), static_cast<double>(rb.num_ok));
  row("requests failed", static_cast<double>(ra.num_failed), static_cast<double>(rb.num_failed));
  auto rows = [&](const char* name, const Summary& sa, const Summary& sb) {
    row(std::string(name) + " mean", sa.mean, sb.mean);
    row(std::string(name) + " p50", sa.p50, sb.p50);
    row(std::string(name) + " p90", sa.p90, sb.p90);
    row(std::string(name) + " p99", sa.p99, sb.p99);
  };
  rows("TTFT ms", ra.ttft_ms, rb.ttft_ms);
  rows("ITL ms", ra.itl_ms, rb.itl_ms);
  rows("TPOT ms", ra.tpot_ms, rb.tpot_ms);
  rows("e2e ms", ra.e2e_ms, rb.e2e_ms);
  row("generation tok/s", ra.generation_tok_s, rb.generation_tok_s);
  row("per-stream tok/s mean", ra.per_stream_tok_s.mean, rb.per_stream_tok_s.mean);
  row("prompt tok/s", ra.prompt_tok_s, rb.prompt_tok_s);
  row("cached tokens", static_cast<double>(ra.cached_tokens), static_cast<double>(rb.cached_tokens));
  size_t turns = std::max(ra.per_turn.size(), rb.per_turn.size());
  for (size_t t = 0; t < turns; ++t) {
    double va = t < ra.per_turn.size() ? ra.per_turn[t].ttft_ms.p50 : 0;
    double vb = t < rb.per_turn.size() ? rb.per_turn[t].ttft_ms.p50 : 0;
    row("turn " + std::to_string(t + 1) + " TTFT p50 ms", va, vb);
  }
  return os.str();
}

}  // namespace pagoda::loadgen
