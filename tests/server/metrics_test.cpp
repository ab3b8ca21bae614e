#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::server {
namespace {

// ---- a tiny exposition-format (0.0.4) parser ---------------------------------------

struct Sample {
  std::string name;                           // as written, e.g. pagoda_x_bucket
  std::map<std::string, std::string> labels;  // unescaped
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // metric family -> counter/gauge/histogram
  std::set<std::string> helps;
  std::vector<Sample> samples;
};

// Go's ParseFloat as Prometheus uses it, for the values we write.
bool parse_value(const std::string& s, double* v) {
  if (s == "+Inf") return *v = INFINITY, true;
  if (s == "-Inf") return *v = -INFINITY, true;
  if (s == "NaN") return *v = NAN, true;
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool valid_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return false;
  return true;
}

// Parses `text` strictly; every problem is a test failure naming the line.
// (void, with an out-parameter, so that ASSERT_* can return early.)
void parse_exposition(const std::string& text, Exposition& e) {
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the last line must end with \\n";
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    SCOPED_TRACE("line " + std::to_string(n) + ": " + line);
    ASSERT_FALSE(line.empty()) << "no blank lines expected";
    if (line.rfind("# HELP ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(valid_name(name));
      EXPECT_NE(rest.find(' '), std::string::npos) << "HELP without text";
      EXPECT_TRUE(e.helps.insert(name).second) << "second HELP for " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream ls(line.substr(7));
      std::string name, type, extra;
      ls >> name >> type;
      EXPECT_FALSE(ls >> extra);
      EXPECT_TRUE(valid_name(name));
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << type;
      EXPECT_EQ(e.types.count(name), 0u) << "second TYPE for " << name;
      for (const auto& s : e.samples) EXPECT_NE(s.name.rfind(name, 0), 0u) << "TYPE after samples";
      e.types[name] = type;
      continue;
    }
    ASSERT_NE(line[0], '#') << "unexpected comment";
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    EXPECT_TRUE(valid_name(s.name)) << s.name;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (true) {
        ASSERT_LT(i, line.size());
        if (line[i] == '}') { ++i; break; }
        size_t eq = line.find('=', i);
        ASSERT_NE(eq, std::string::npos);
        std::string lname = line.substr(i, eq - i);
        EXPECT_TRUE(valid_name(lname)) << lname;
        ASSERT_LT(eq + 1, line.size());
        ASSERT_EQ(line[eq + 1], '"');
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            ++j;
            ASSERT_LT(j, line.size());
            ASSERT_TRUE(line[j] == '\\' || line[j] == '"' || line[j] == 'n') << "bad escape";
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        ASSERT_LT(j, line.size()) << "unterminated label value";
        s.labels[lname] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
    }
    ASSERT_LT(i, line.size());
    ASSERT_EQ(line[i], ' ');
    std::string value = line.substr(i + 1);
    ASSERT_EQ(value.find(' '), std::string::npos) << "no timestamps expected";
    EXPECT_TRUE(parse_value(value, &s.value)) << value;
    e.samples.push_back(std::move(s));
  }
}

// The family a sample belongs to: histograms' _bucket/_sum/_count go to their base.
std::string family_of(const Exposition& e, const std::string& sample_name) {
  if (e.types.count(sample_name)) return sample_name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string sfx = suffix;
    if (sample_name.size() > sfx.size() &&
        sample_name.compare(sample_name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      std::string base = sample_name.substr(0, sample_name.size() - sfx.size());
      auto it = e.types.find(base);
      if (it != e.types.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

// Checks every rule the brief lists; returns the parsed exposition.
void check_exposition_into(const std::string& text, Exposition& e) {
  parse_exposition(text, e);
  std::map<std::string, std::vector<const Sample*>> by_family;
  for (const auto& s : e.samples) {
    std::string fam = family_of(e, s.name);
    EXPECT_FALSE(fam.empty()) << "no TYPE line for " << s.name;
    EXPECT_EQ(e.helps.count(fam), 1u) << "no HELP line for " << fam;
    EXPECT_EQ(s.name.rfind("pagoda_", 0), 0u) << s.name;
    if (!fam.empty() && e.types[fam] == "counter") {
      EXPECT_GE(s.value, 0) << s.name;
      EXPECT_EQ(s.name.substr(s.name.size() - 6), "_total") << s.name;
    }
    by_family[fam].push_back(&s);
  }
  for (const auto& [fam, type] : e.types) {
    if (type != "histogram") continue;
    SCOPED_TRACE(fam);
    double prev = -1, prev_le = -INFINITY, inf_bucket = -1, count = -1;
    bool sum_seen = false;
    for (const Sample* s : by_family[fam]) {
      if (s->name == fam + "_bucket") {
        ASSERT_EQ(s->labels.count("le"), 1u);
        double le = 0;
        ASSERT_TRUE(parse_value(s->labels.at("le"), &le)) << s->labels.at("le");
        EXPECT_GT(le, prev_le) << "le not ascending";
        EXPECT_GE(s->value, prev) << "buckets not cumulative";
        EXPECT_EQ(s->value, std::floor(s->value));
        prev = s->value;
        prev_le = le;
        if (std::isinf(le)) {
          EXPECT_EQ(s->labels.at("le"), "+Inf");
          inf_bucket = s->value;
        }
      } else if (s->name == fam + "_count") {
        count = s->value;
      } else if (s->name == fam + "_sum") {
        sum_seen = true;
      }
    }
    EXPECT_GE(inf_bucket, 0) << "no +Inf bucket";
    EXPECT_EQ(inf_bucket, count) << "+Inf bucket != _count";
    EXPECT_TRUE(sum_seen);
  }
}

Exposition check_exposition(const std::string& text) {
  Exposition e;
  check_exposition_into(text, e);
  return e;
}

double value_of(const Exposition& e, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
  for (const auto& s : e.samples)
    if (s.name == name && s.labels == labels) return s.value;
  ADD_FAILURE() << "no sample " << name;
  return NAN;
}

bool has_sample(const Exposition& e, const std::string& name,
                const std::map<std::string, std::string>& labels) {
  for (const auto& s : e.samples)
    if (s.name == name && s.labels == labels) return true;
  return false;
}

// ---- Histogram ---------------------------------------------------------------------

TEST(Histogram, LeIsInclusiveAtExactBounds) {
  Histogram h({0.1, 0.5, 1.0});
  h.observe(0.1);   // -> le 0.1
  h.observe(0.5);   // -> le 0.5
  h.observe(1.0);   // -> le 1
  h.observe(1.0000001);  // -> +Inf
  h.observe(0.0);   // -> le 0.1
  std::string out;
  h.render("x", out);
  EXPECT_EQ(out,
            "x_bucket{le=\"0.1\"} 2\n"
            "x_bucket{le=\"0.5\"} 3\n"
            "x_bucket{le=\"1\"} 4\n"
            "x_bucket{le=\"+Inf\"} 5\n"
            "x_sum 2.6000001\n"
            "x_count 5\n");
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 2.6000001);
}

TEST(Histogram, EmptyRendersZeros) {
  Histogram h({1, 2});
  std::string out;
  h.render("e", out);
  EXPECT_EQ(out, "e_bucket{le=\"1\"} 0\ne_bucket{le=\"2\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\ne_count 0\n");
}

TEST(Histogram, NanIsDroppedAndInfinityGoesToInf) {
  Histogram h({1});
  h.observe(NAN);
  EXPECT_EQ(h.count(), 0u);
  h.observe(INFINITY);
  EXPECT_EQ(h.count(), 1u);
  std::string out;
  h.render("h", out);
  EXPECT_NE(out.find("h_bucket{le=\"1\"} 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("h_bucket{le=\"+Inf\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("h_sum +Inf\n"), std::string::npos) << out;
}

TEST(Histogram, BoundsPrintAsShortestDecimals) {
  Histogram h({0.001, 0.0025, 0.075, 120});
  std::string out;
  h.render("b", out);
  for (const char* le : {"le=\"0.001\"", "le=\"0.0025\"", "le=\"0.075\"", "le=\"120\""})
    EXPECT_NE(out.find(le), std::string::npos) << le << "\n" << out;
}

TEST(HistogramDeathTest, UnsortedBoundsAbort) {
  EXPECT_DEATH(Histogram({1.0, 0.5}), "ascending");
  EXPECT_DEATH(Histogram({1.0, INFINITY}), "finite");
}

// ---- ServerMetrics ------------------------------------------------------------------

RequestResult finished(FinishReason reason, int64_t prompt, int64_t cached, int64_t generated,
                       double queue_ms, double ttft_ms, std::vector<double> itl_ms, double total_ms) {
  RequestResult r;
  r.finish = reason;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.generated_tokens = generated;
  r.timings.queue_ms = queue_ms;
  r.timings.ttft_ms = ttft_ms;
  r.timings.token_intervals_ms = std::move(itl_ms);
  r.timings.total_ms = total_ms;
  return r;
}

EngineStats some_stats() {
  EngineStats s;
  s.running = 3;
  s.waiting = 7;
  s.preemptions = 2;
  s.resident_weight_bytes = 5 << 20;
  s.pool.bytes_reserved = 1 << 20;
  s.pool.bytes_in_use = 4096;
  s.pool.bytes_budget = uint64_t{8} << 30;
  s.pool.tokens_in_use = 123;
  s.pool.blocks_budget = 1000;
  s.pool.blocks_free = 990;
  s.pool.blocks_live = 10;
  s.pool.blocks_live_by_group = {4, 3, 3};  // a sliding-window model: global and two local groups
  s.cache.cached_bytes = 2048;
  s.cache.entries = 4;
  s.cache.queried_tokens = 500;
  s.cache.hit_tokens = 300;
  s.cache.evictions_capacity = 1;
  s.cache.evictions_ttl = 2;
  s.cache.evictions_max_entries = 3;
  s.cache.evictions_pool_pressure = 4;
  return s;
}

// Speculative decoding: the counters as the engine reports them, the rate and the mean
// accepted length derived from them.
TEST(ServerMetrics, SpeculationRatesComeFromTheEngineCounters) {
  ServerMetrics m;
  EngineStats st;
  st.spec.draft_tokens = 40;
  st.spec.accepted_tokens = 30;
  st.spec.verifications = 8;
  st.spec.suffix.bytes = 12345;
  Exposition e = check_exposition(m.render(st));
  EXPECT_EQ(value_of(e, "pagoda_spec_draft_tokens_total", {}), 40);
  EXPECT_EQ(value_of(e, "pagoda_spec_accepted_tokens_total", {}), 30);
  EXPECT_DOUBLE_EQ(value_of(e, "pagoda_spec_acceptance_rate", {}), 0.75);
  EXPECT_DOUBLE_EQ(value_of(e, "pagoda_spec_mean_accepted_length", {}), 3.75);
  EXPECT_EQ(value_of(e, "pagoda_spec_suffix_index_bytes", {}), 12345);
  EXPECT_EQ(e.types["pagoda_spec_acceptance_rate"], "gauge");
}

TEST(ServerMetrics, FreshRenderIsValidAndComplete) {
  ServerMetrics m;
  Exposition e = check_exposition(m.render(EngineStats{}));
  const char* expected[] = {
      "pagoda_http_requests_total", "pagoda_requests_finished_total", "pagoda_prompt_tokens_total",
      "pagoda_cached_prompt_tokens_total", "pagoda_generation_tokens_total",
      "pagoda_prefix_cache_queried_tokens_total", "pagoda_prefix_cache_hit_tokens_total",
      "pagoda_prefix_cache_evictions_total", "pagoda_preemptions_total", "pagoda_requests_refused_total",
      "pagoda_requests_running", "pagoda_requests_waiting", "pagoda_resident_weight_bytes",
      "pagoda_process_rss_bytes", "pagoda_kv_bytes_reserved",
      "pagoda_kv_bytes_in_use", "pagoda_kv_bytes_budget", "pagoda_kv_tokens_in_use",
      "pagoda_kv_blocks_total", "pagoda_kv_blocks_free", "pagoda_kv_blocks_live", "pagoda_prefix_cache_bytes",
      "pagoda_prefix_cache_entries", "pagoda_grammar_cache_entries", "pagoda_grammar_cache_bytes",
      "pagoda_grammar_cache_capacity_bytes", "pagoda_grammar_cache_hits_total",
      "pagoda_grammar_cache_evictions_total", "pagoda_time_to_first_token_seconds",
      "pagoda_inter_token_latency_seconds", "pagoda_e2e_request_latency_seconds",
      "pagoda_request_queue_time_seconds", "pagoda_spec_draft_tokens_total", "pagoda_spec_accepted_tokens_total",
      "pagoda_spec_verifications_total", "pagoda_spec_acceptance_rate", "pagoda_spec_mean_accepted_length",
      "pagoda_spec_suffix_index_bytes"};
  for (const char* name : expected) EXPECT_EQ(e.types.count(name), 1u) << name;
  EXPECT_EQ(e.types.size(), std::size(expected));
  EXPECT_EQ(e.types["pagoda_requests_running"], "gauge");
  EXPECT_EQ(e.types["pagoda_preemptions_total"], "counter");
  EXPECT_EQ(e.types["pagoda_inter_token_latency_seconds"], "histogram");
  EXPECT_EQ(e.types.count("pagoda_prefix_cache_disk_blocks"), 0u) << "no disk tier, no disk metrics";
  // Known label values are shown at 0 from the start.
  for (const char* r : {"stop", "length", "cancelled", "error"})
    EXPECT_EQ(value_of(e, "pagoda_requests_finished_total", {{"reason", r}}), 0) << r;
  for (const char* r : {"busy", "invalid"})
    EXPECT_EQ(value_of(e, "pagoda_requests_refused_total", {{"reason", r}}), 0) << r;
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_bucket", {{"le", "0.005"}}), 0);
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_bucket", {{"le", "120"}}), 0);
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_bucket", {{"le", "0.001"}}), 0);
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_bucket", {{"le", "5"}}), 0);
}

TEST(ServerMetrics, GaugesAndCacheCountersComeFromTheSnapshot) {
  ServerMetrics m;
  Exposition e = check_exposition(m.render(some_stats()));
  EXPECT_EQ(value_of(e, "pagoda_requests_running"), 3);
  EXPECT_EQ(value_of(e, "pagoda_requests_waiting"), 7);
  EXPECT_EQ(value_of(e, "pagoda_preemptions_total"), 2);
  EXPECT_EQ(value_of(e, "pagoda_resident_weight_bytes"), 5 << 20);
  EXPECT_GT(value_of(e, "pagoda_process_rss_bytes"), 0);  // this test process, measured
  EXPECT_EQ(value_of(e, "pagoda_kv_bytes_reserved"), 1 << 20);
  EXPECT_EQ(value_of(e, "pagoda_kv_bytes_in_use"), 4096);
  EXPECT_EQ(value_of(e, "pagoda_kv_bytes_budget"), 8589934592.0);
  EXPECT_EQ(value_of(e, "pagoda_kv_tokens_in_use"), 123);
  EXPECT_EQ(value_of(e, "pagoda_kv_blocks_total"), 1000);
  EXPECT_EQ(value_of(e, "pagoda_kv_blocks_free"), 990);
  EXPECT_EQ(value_of(e, "pagoda_kv_blocks_live", {{"group", "0"}}), 4);
  EXPECT_EQ(value_of(e, "pagoda_kv_blocks_live", {{"group", "2"}}), 3);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_bytes"), 2048);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_entries"), 4);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_queried_tokens_total"), 500);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_hit_tokens_total"), 300);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_evictions_total", {{"reason", "capacity"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_evictions_total", {{"reason", "ttl"}}), 2);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_evictions_total", {{"reason", "max_entries"}}), 3);
  EXPECT_EQ(value_of(e, "pagoda_prefix_cache_evictions_total", {{"reason", "pool_pressure"}}), 4);
  // Large byte counts print as integers Prometheus reads exactly.
  std::string text = m.render(some_stats());
  EXPECT_NE(text.find("pagoda_kv_bytes_budget 8589934592\n"), std::string::npos);
}

TEST(ServerMetrics, RecordsHttpRefusedAndFinished) {
  ServerMetrics m;
  m.record_http(200);
  m.record_http(200);
  m.record_http(404);
  m.record_refused("busy");
  m.record_refused("invalid");
  m.record_refused("invalid");
  m.record_finished(finished(FinishReason::Stop, 10, 4, 3, 2.0, 50.0, {10.0, 20.0}, 100.0));
  m.record_finished(finished(FinishReason::Length, 5, 0, 1, 1.0, 7.0, {}, 8.0));
  m.record_finished(finished(FinishReason::Cancelled, 6, 0, 0, 0.0, 0.0, {}, 3.0));  // never admitted
  m.record_error();
  Exposition e = check_exposition(m.render(EngineStats{}));
  EXPECT_EQ(value_of(e, "pagoda_http_requests_total", {{"status", "200"}}), 2);
  EXPECT_EQ(value_of(e, "pagoda_http_requests_total", {{"status", "404"}}), 1);
  EXPECT_FALSE(has_sample(e, "pagoda_http_requests_total", {{"status", "500"}}));
  EXPECT_EQ(value_of(e, "pagoda_requests_refused_total", {{"reason", "busy"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_requests_refused_total", {{"reason", "invalid"}}), 2);
  EXPECT_EQ(value_of(e, "pagoda_requests_finished_total", {{"reason", "stop"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_requests_finished_total", {{"reason", "length"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_requests_finished_total", {{"reason", "cancelled"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_requests_finished_total", {{"reason", "error"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_prompt_tokens_total"), 21);
  EXPECT_EQ(value_of(e, "pagoda_cached_prompt_tokens_total"), 4);
  EXPECT_EQ(value_of(e, "pagoda_generation_tokens_total"), 4);

  // TTFT: only the two requests that produced a token; 0.05 s and 0.007 s.
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(value_of(e, "pagoda_time_to_first_token_seconds_sum"), 0.057);
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_bucket", {{"le", "0.005"}}), 0);
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_bucket", {{"le", "0.01"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_time_to_first_token_seconds_bucket", {{"le", "0.05"}}), 2);  // inclusive
  // ITL: every interval (0.01 s, 0.02 s).
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_count"), 2);
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_bucket", {{"le", "0.01"}}), 1);
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_bucket", {{"le", "0.025"}}), 2);
  // E2E: every finished request (not the on_error one: no timings).
  EXPECT_EQ(value_of(e, "pagoda_e2e_request_latency_seconds_count"), 3);
  EXPECT_DOUBLE_EQ(value_of(e, "pagoda_e2e_request_latency_seconds_sum"), 0.111);
  // Queue: not the request cancelled before admission.
  EXPECT_EQ(value_of(e, "pagoda_request_queue_time_seconds_count"), 2);
}

TEST(ServerMetrics, LabelValuesAreEscaped) {
  ServerMetrics m;
  m.record_refused("we\"ird\\re\nason");
  std::string text = m.render(EngineStats{});
  EXPECT_NE(text.find("pagoda_requests_refused_total{reason=\"we\\\"ird\\\\re\\nason\"} 1\n"),
            std::string::npos)
      << text;
  Exposition e = check_exposition(text);
  EXPECT_EQ(value_of(e, "pagoda_requests_refused_total", {{"reason", "we\"ird\\re\nason"}}), 1);
}

TEST(ServerMetrics, ConcurrentRecordingAndRendering) {
  ServerMetrics m;
  constexpr int kThreads = 4, kPer = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kPer; ++i) {
        m.record_http(200);
        m.record_finished(finished(FinishReason::Stop, 1, 0, 2, 1.0, 2.0, {3.0}, 4.0));
        if (i % 100 == 0) (void)m.render(EngineStats{});
      }
    });
  for (auto& th : threads) th.join();
  Exposition e = check_exposition(m.render(EngineStats{}));
  EXPECT_EQ(value_of(e, "pagoda_http_requests_total", {{"status", "200"}}), kThreads * kPer);
  EXPECT_EQ(value_of(e, "pagoda_generation_tokens_total"), 2 * kThreads * kPer);
  EXPECT_EQ(value_of(e, "pagoda_inter_token_latency_seconds_count"), kThreads * kPer);
}

}  // namespace
}  // namespace pagoda::server
