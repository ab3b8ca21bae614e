#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "common/process_memory.h"

namespace pagoda::server {

namespace {

// Latency buckets, seconds. Roughly x2–x2.5 apart, as Prometheus' and vLLM's defaults:
// request-level times span a loaded queue (minutes) down to a cached one-token reply
// (milliseconds); 15 buckets keep a histogram at 17 series. Inter-token gaps run from
// ~1 ms (small model, batch of one) to seconds (a long prefill chunk or a preemption in
// between), so they get their own finer, shorter range.
std::vector<double> request_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120};
}
std::vector<double> itl_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5};
}

// A sample value as Prometheus' parser reads it (Go's strconv.ParseFloat): the
// shortest round-trip decimal, and +Inf / -Inf / NaN spelled that way.
std::string fmt_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  PAGODA_CHECK(ec == std::errc(), "to_chars failed");
  return std::string(buf, end);
}

// Label values escape \, " and newline (exposition format 0.0.4).
std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  // HELP text escapes \ and newline; ours has neither.
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

void write_sample(std::string& out, const std::string& name, double v) {
  out += name + " " + fmt_value(v) + "\n";
}

void write_sample(std::string& out, const std::string& name, const std::string& label,
            const std::string& label_value, double v) {
  out += name + "{" + label + "=\"" + escape_label(label_value) + "\"} " + fmt_value(v) + "\n";
}

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  const std::string full = std::string("pagoda_") + name;
  header(out, full, type, help);
  write_sample(out, full, v);
}

// A counter with one label: every entry of `by` (which the caller pre-fills with the
// label values it always wants shown, at 0, so rate() sees the series from the start).
template <class Map>
void labelled(std::string& out, const char* name, const char* label, const char* help,
              const Map& by) {
  const std::string full = std::string("pagoda_") + name;
  header(out, full, "counter", help);
  for (const auto& [k, v] : by) {
    if constexpr (std::is_same_v<typename Map::key_type, int>)
      write_sample(out, full, label, std::to_string(k), static_cast<double>(v));
    else
      write_sample(out, full, label, k, static_cast<double>(v));
  }
}

}  // namespace

// ---- Histogram --------------------------------------------------------------------

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    PAGODA_CHECK(std::isfinite(bounds_[i]), "Histogram bounds must be finite (+Inf is implied)");
    PAGODA_CHECK(i == 0 || bounds_[i - 1] < bounds_[i], "Histogram bounds must be strictly ascending");
  }
}

void Histogram::observe(double v) {
  // A NaN would poison _sum for good and fits no bucket: it is dropped.
  if (std::isnan(v)) return;
  // le is inclusive: v == bound counts in that bucket. Linear scan: <= 16 bounds.
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    write_sample(out, name + "_bucket", "le", fmt_value(bounds_[i]), static_cast<double>(cumulative));
  }
  cumulative += counts_.back();
  write_sample(out, name + "_bucket", "le", "+Inf", static_cast<double>(cumulative));
  write_sample(out, name + "_sum", sum_);
  write_sample(out, name + "_count", static_cast<double>(count_));
}

// ---- ServerMetrics ----------------------------------------------------------------

ServerMetrics::ServerMetrics()
    : ttft_(request_buckets()), itl_(itl_buckets()), e2e_(request_buckets()), queue_(request_buckets()) {
  for (const char* r : {"stop", "length", "cancelled", "error"}) finished_by_reason_[r] = 0;
  for (const char* r : {"busy", "invalid"}) refused_by_reason_[r] = 0;
}

void ServerMetrics::record_http(int status) {
  std::lock_guard lock(mu_);
  ++http_by_status_[status];
}

void ServerMetrics::record_refused(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++refused_by_reason_[reason];
}

void ServerMetrics::record_finished(const RequestResult& result) {
  std::lock_guard lock(mu_);
  ++finished_by_reason_[finish_reason_name(result.finish)];
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, result.prompt_tokens));
  cached_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, result.cached_tokens));
  generated_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, result.generated_tokens));
  const RequestTimings& t = result.timings;
  if (result.generated_tokens > 0) ttft_.observe(t.ttft_ms / 1e3);
  for (double ms : t.token_intervals_ms) itl_.observe(ms / 1e3);
  e2e_.observe(t.total_ms / 1e3);
  // A request cancelled before it was ever admitted has no queue time (queue_ms 0):
  // it would pile into the lowest bucket.
  if (t.queue_ms > 0 || result.generated_tokens > 0) queue_.observe(t.queue_ms / 1e3);
}

void ServerMetrics::record_error() {
  std::lock_guard lock(mu_);
  ++finished_by_reason_["error"];
}

std::string ServerMetrics::render(const EngineStats& stats, const GrammarCacheStats& grammars) const {
  std::string out;
  out.reserve(8192);
  const PoolStats& pool = stats.pool;
  const CacheStats& cache = stats.cache;
  auto d = [](auto v) { return static_cast<double>(v); };

  std::lock_guard lock(mu_);
  // Counters kept here.
  labelled(out, "http_requests_total", "status", "HTTP requests by status code (499: the client closed the connection before its answer was complete).",
           http_by_status_);
  labelled(out, "requests_finished_total", "reason",
           "Generation requests finished, by reason (stop, length, cancelled, error).",
           finished_by_reason_);
  labelled(out, "requests_refused_total", "reason",
           "Generation requests refused before queueing (busy: queue full; invalid).",
           refused_by_reason_);
  metric(out, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         d(prompt_tokens_));
  metric(out, "cached_prompt_tokens_total", "counter",
         "Prompt tokens of finished requests reused from the prefix cache.", d(cached_tokens_));
  metric(out, "generation_tokens_total", "counter", "Tokens generated by finished requests.",
         d(generated_tokens_));

  // Counters and gauges read from the engine's snapshot.
  metric(out, "prefix_cache_queried_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.", d(cache.queried_tokens));
  metric(out, "prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens reused from the prefix cache.", d(cache.hit_tokens));
  {
    const std::string name = "pagoda_prefix_cache_evictions_total";
    header(out, name, "counter",
           "Prefix cache entries evicted, by reason (capacity, ttl, max_entries, pool_pressure).");
    write_sample(out, name, "reason", "capacity", d(cache.evictions_capacity));
    write_sample(out, name, "reason", "ttl", d(cache.evictions_ttl));
    write_sample(out, name, "reason", "max_entries", d(cache.evictions_max_entries));
    write_sample(out, name, "reason", "pool_pressure", d(cache.evictions_pool_pressure));
  }
  metric(out, "preemptions_total", "counter",
         "Running sequences preempted for KV space (recomputed later).", d(stats.preemptions));

  metric(out, "requests_running", "gauge", "Requests running (admitted to the batch).",
         d(stats.running));
  metric(out, "requests_waiting", "gauge", "Requests waiting for admission (incl. preempted).",
         d(stats.waiting));
  metric(out, "resident_weight_bytes", "gauge",
         "Bytes the model weights keep resident (repacked copies, file bytes still read).",
         d(stats.resident_weight_bytes));
  metric(out, "process_rss_bytes", "gauge", "Resident memory of the server process (VmRSS), in bytes.",
         d(read_process_memory().rss_bytes));
  metric(out, "kv_bytes_reserved", "gauge", "KV cache memory committed, in bytes.",
         d(pool.bytes_reserved));
  metric(out, "kv_bytes_in_use", "gauge",
         "KV cache bytes of blocks holding data (running sequences and the prefix cache).",
         d(pool.bytes_in_use));
  metric(out, "kv_bytes_budget", "gauge", "KV cache budget, in bytes.", d(pool.bytes_budget));
  metric(out, "kv_tokens_in_use", "gauge", "Token slots filled in the KV cache.",
         d(pool.tokens_in_use));
  metric(out, "kv_blocks_total", "gauge", "KV cache blocks the budget pays for.",
         d(pool.blocks_budget));
  metric(out, "kv_blocks_free", "gauge", "KV cache blocks neither held nor cached.",
         d(pool.blocks_free));
  {
    const std::string name = "pagoda_kv_blocks_live";
    header(out, name, "gauge",
           "KV cache blocks held by running sequences, by layer group (0: global layers; 1..: "
           "sliding-window layers).");
    if (pool.blocks_live_by_group.empty()) write_sample(out, name, "group", "0", d(pool.blocks_live));
    for (size_t g = 0; g < pool.blocks_live_by_group.size(); ++g)
      write_sample(out, name, "group", std::to_string(g), d(pool.blocks_live_by_group[g]));
  }
  metric(out, "prefix_cache_bytes", "gauge", "Bytes of KV blocks indexed by the prefix cache.",
         d(cache.cached_bytes));
  metric(out, "prefix_cache_entries", "gauge", "Sequences cached by the prefix cache.",
         d(cache.entries));
  {
    const EngineStats::Speculation& sp = stats.spec;
    metric(out, "spec_draft_tokens_total", "counter", "Speculative decoding: proposed tokens verified.",
           d(sp.draft_tokens));
    metric(out, "spec_accepted_tokens_total", "counter", "Speculative decoding: proposed tokens accepted.",
           d(sp.accepted_tokens));
    metric(out, "spec_verifications_total", "counter", "Speculative decoding: decode rows that carried proposals.",
           d(sp.verifications));
    metric(out, "spec_acceptance_rate", "gauge", "Accepted / proposed tokens since start (0 before any).",
           sp.draft_tokens > 0 ? static_cast<double>(sp.accepted_tokens) / static_cast<double>(sp.draft_tokens) : 0.0);
    metric(out, "spec_mean_accepted_length", "gauge", "Accepted tokens per verification since start.",
           sp.verifications > 0 ? static_cast<double>(sp.accepted_tokens) / static_cast<double>(sp.verifications) : 0.0);
    metric(out, "spec_suffix_index_bytes", "gauge", "Bytes of the suffix proposer's index (--spec-suffix-bytes caps it).",
           d(sp.suffix.bytes));
  }
  if (const SnapshotStats& ss = cache.state_snapshots; ss.state_bytes > 0) {
    metric(out, "recurrent_state_bytes", "gauge",
           "Bytes of the running sequences' recurrent states (hybrid models).", d(stats.recurrent_state_bytes));
    metric(out, "prefix_cache_state_snapshots", "gauge",
           "Recurrent-state snapshots kept for hybrid models' prefix reuse.", d(ss.snapshots));
    metric(out, "prefix_cache_state_snapshot_bytes", "gauge", "Bytes of those snapshots (count x state size).",
           d(ss.bytes));
    metric(out, "prefix_cache_state_snapshot_capacity_bytes", "gauge",
           "Their share of the KV budget (--state-snapshot-bytes).", d(ss.capacity_bytes));
    metric(out, "prefix_cache_state_snapshot_restores_total", "counter",
           "Requests that resumed from a snapshot.", d(ss.restores));
    metric(out, "prefix_cache_state_snapshot_evictions_total", "counter",
           "Snapshots dropped to stay under their cap.", d(ss.evictions));
  }
  if (cache.disk.enabled) {
    const DiskTierStats& disk = cache.disk;
    metric(out, "prefix_cache_disk_blocks", "gauge", "KV blocks kept by the prefix cache's disk tier.",
           d(disk.blocks));
    metric(out, "prefix_cache_disk_bytes", "gauge",
           "Real bytes on disk of the disk tier (records, directory, lock file).", d(disk.bytes));
    metric(out, "prefix_cache_disk_capacity_bytes", "gauge", "The disk tier's cap (--prompt-cache-disk-bytes).",
           d(disk.capacity_bytes));
    metric(out, "prefix_cache_disk_hits_total", "counter", "Lookups that read blocks back from the disk tier.",
           d(disk.hits));
    metric(out, "prefix_cache_disk_hit_tokens_total", "counter", "Prompt tokens read back from the disk tier.",
           d(disk.hit_tokens));
    metric(out, "prefix_cache_disk_writes_total", "counter", "Blocks written to the disk tier.", d(disk.writes));
    metric(out, "prefix_cache_disk_reads_total", "counter", "Blocks read back intact from the disk tier.",
           d(disk.reads));
    metric(out, "prefix_cache_disk_evictions_total", "counter", "Disk-tier blocks deleted to stay under the cap.",
           d(disk.evictions));
    metric(out, "prefix_cache_disk_corrupt_total", "counter",
           "Disk-tier blocks that failed their checks (torn or corrupt): deleted, counted as misses.", d(disk.corrupt));
    metric(out, "prefix_cache_disk_read_bytes_per_second", "gauge",
           "Disk-tier restore throughput: payload bytes read back / seconds spent reading them.",
           disk.read_bytes_per_s());
    metric(out, "prefix_cache_disk_queued_write_bytes", "gauge",
           "Bytes of spilled blocks copied and waiting for the disk I/O thread (bounded by the write queue).",
           d(disk.queued_write_bytes));
    metric(out, "prefix_cache_disk_write_queue_drops_total", "counter",
           "Spilled blocks dropped because the disk write queue was full (the engine never waits for it).",
           d(disk.write_queue_drops));
    metric(out, "prefix_cache_disk_write_queue_waits_total", "counter",
           "Times a shutdown flush waited for room in the disk write queue.", d(disk.write_queue_waits));
    metric(out, "prefix_cache_disk_stalled", "gauge",
           "1 while one disk-tier read or write has run past its deadline (restores are misses meanwhile).",
           disk.stalled ? 1.0 : 0.0);
    metric(out, "prefix_cache_disk_restore_timeouts_total", "counter",
           "Disk restores cut short because the disk tier stalled (their requests computed instead).",
           d(disk.restore_timeouts));
    metric(out, "prefix_cache_disk_restores_in_flight", "gauge",
           "Requests whose disk restore's reads are in flight (they wait; the others do not).",
           d(disk.restores_in_flight));
  }

  metric(out, "grammar_cache_entries", "gauge", "Compiled grammars kept for reuse.", d(grammars.entries));
  metric(out, "grammar_cache_bytes", "gauge",
         "Memory the kept grammars hold: their text keys, compiled rules and token-mask caches.",
         d(grammars.bytes));
  metric(out, "grammar_cache_capacity_bytes", "gauge", "The grammar cache's cap (--grammar-cache-bytes).",
         d(grammars.capacity_bytes));
  metric(out, "grammar_cache_hits_total", "counter", "Requests whose grammar was already compiled.",
         d(grammars.hits));
  metric(out, "grammar_cache_evictions_total", "counter", "Grammars dropped to stay under the cache's bounds.",
         d(grammars.evictions));

  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    const std::string full = std::string("pagoda_") + name;
    header(out, full, "histogram", help);
    h.render(full, out);
  };
  histogram("time_to_first_token_seconds", "Time from submission to the first token.", ttft_);
  histogram("inter_token_latency_seconds", "Time between consecutive tokens of a request.", itl_);
  histogram("e2e_request_latency_seconds", "Time from submission to finish.", e2e_);
  histogram("request_queue_time_seconds", "Time from submission to first admission.", queue_);
  return out;
}

}  // namespace pagoda::server
