// ServerMetrics — what GET /metrics reports, in the Prometheus text format (0.0.4).
//
// Contract:
// - Thread-safe: record_* are called from I/O threads and the engine thread; render()
//   from an I/O thread. One mutex; every call is O(buckets) at most.
// - Counters only grow; the engine's gauges (running, waiting, KV bytes) and the
//   prefix cache's counters (queried / hit tokens, evictions by reason) are read from
//   the EngineStats snapshot passed to render(), so they are never stale by more
//   than one engine step and never double-counted.
// - Names (all prefixed pagoda_), each with # HELP and # TYPE:
//   counters  http_requests_total{status} (499: the client left before its answer was
//             complete, as the access log says), requests_finished_total{reason}
//             (stop/length/cancelled/error), prompt_tokens_total, cached_prompt_tokens_total,
//             generation_tokens_total, prefix_cache_queried_tokens_total,
//             prefix_cache_hit_tokens_total, prefix_cache_evictions_total{reason},
//             preemptions_total, requests_refused_total{reason} (busy/invalid)
//   gauges    requests_running, requests_waiting, resident_weight_bytes, process_rss_bytes,
//             kv_bytes_reserved, kv_bytes_in_use,
//             kv_bytes_budget, kv_tokens_in_use, kv_blocks_total, kv_blocks_free,
//             prefix_cache_bytes, prefix_cache_entries
//   with a disk tier (--prompt-cache-dir): gauges prefix_cache_disk_blocks,
//             prefix_cache_disk_bytes, prefix_cache_disk_capacity_bytes,
//             prefix_cache_disk_read_bytes_per_second; counters prefix_cache_disk_hits_total,
//             _hit_tokens_total, _writes_total, _reads_total, _evictions_total, _corrupt_total
//   grammar cache: gauges grammar_cache_entries, grammar_cache_bytes,
//             grammar_cache_capacity_bytes; counters grammar_cache_hits_total,
//             grammar_cache_evictions_total
//   histograms (seconds) time_to_first_token_seconds, inter_token_latency_seconds,
//             e2e_request_latency_seconds, request_queue_time_seconds, each with
//             fixed buckets, _bucket{le}, _sum and _count.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/structured_output.h"

namespace pagoda::server {

// A fixed-bucket Prometheus histogram (not thread-safe on its own).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf implied
  void observe(double v);
  // Appends name_bucket{le=...} (cumulative), name_sum, name_count lines.
  void render(const std::string& name, std::string& out) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void record_http(int status);
  void record_refused(const std::string& reason);  // "busy" / "invalid"
  // One finished request (any reason): token counters and the four histograms
  // (inter-token latency observes every interval; TTFT only when a token came).
  void record_finished(const RequestResult& result);
  void record_error();  // a request that ended with on_error
  std::string render(const EngineStats& stats, const GrammarCacheStats& grammars = {}) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> http_by_status_;
  std::map<std::string, uint64_t> finished_by_reason_;
  std::map<std::string, uint64_t> refused_by_reason_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, itl_, e2e_, queue_;
};

}  // namespace pagoda::server
