#include "loadgen/runner.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "loadgen/http_client.h"
#include "loadgen/sse.h"

namespace pagoda::loadgen {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One streaming request; fills `rec` and returns the assistant's text. With
// hangup_after > 0 the connection is closed once that many content chunks have
// arrived (unless the stream ended first), and the record's class is kHungUp.
std::string send_one(const Url& url, const BenchConfig& config, const std::string& body, int64_t hangup_after,
                     RequestRecord& rec) {
  SseParser sse;
  StreamAccumulator acc;
  std::vector<std::string> events;
  bool malformed = false, stream_error = false, hung_up = false;
  std::string detail;
  Clock::time_point t0 = Clock::now();
  Clock::time_point first_content{}, last_content{}, done_at{};
  bool any_content = false;
  size_t num_events = 0;

  auto on_body = [&](std::string_view piece) -> bool {
    Clock::time_point now = Clock::now();
    events.clear();
    sse.feed(piece, events);
    for (const std::string& ev : events) {
      ++num_events;
      bool content = false;
      StreamAccumulator::Status st = acc.on_event(ev, &content);
      if (content) {
        if (!any_content) {
          first_content = now;
        } else {
          rec.itl_ms.push_back(ms_between(last_content, now));
        }
        any_content = true;
        last_content = now;
      }
      if (st == StreamAccumulator::Status::kMalformed) {
        malformed = true;
        detail = acc.detail();
        return false;
      }
      if (st == StreamAccumulator::Status::kServerError) {
        stream_error = true;
        detail = acc.detail();
        return false;
      }
      if (st == StreamAccumulator::Status::kDone) {
        done_at = now;
        return false;  // do not wait for the server to close the connection
      }
      if (hangup_after > 0 && acc.num_content_chunks() >= hangup_after) {
        hung_up = true;
        return false;  // post_stream closes the socket without reading further
      }
    }
    if (sse.failed()) {
      malformed = true;
      detail = "SSE event larger than 4 MiB";
      return false;
    }
    return true;
  };

  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.timeout_s));
  HttpResult res = post_stream(url, endpoint_path(config.endpoint), body, config.api_key, deadline, on_body);
  Clock::time_point end = acc.done() ? done_at : Clock::now();
  rec.http_status = res.status;
  rec.e2e_ms = ms_between(t0, end);
  rec.ttft_ms = any_content ? ms_between(t0, first_content) : -1;
  rec.num_content_chunks = acc.num_content_chunks();

  ErrorKind kind = res.error;
  if (kind == ErrorKind::kNone && hung_up) {
    rec.error = kHungUp;
    rec.completion_tokens = acc.num_content_chunks();
    return acc.text();
  }
  if (kind == ErrorKind::kNone) {
    if (malformed) {
      kind = ErrorKind::kMalformedSse;
    } else if (stream_error) {
      kind = ErrorKind::kStreamError;
    } else if (!acc.done()) {
      if (num_events == 0 && res.body_complete) {
        kind = ErrorKind::kMalformedSse;
        detail = "the response is not an event stream (no data: events)";
      } else {
        kind = ErrorKind::kIncompleteStream;
        detail = "the stream ended before data: [DONE]";
      }
    }
  } else {
    detail = res.detail;
  }
  rec.error = error_class_name(kind, res.status);
  rec.detail = detail;
  rec.usage_reported = acc.has_usage();
  if (acc.has_usage()) {
    rec.prompt_tokens = acc.prompt_tokens();
    rec.completion_tokens = acc.completion_tokens();
    rec.cached_tokens = acc.cached_tokens();
  } else {
    rec.prompt_tokens = rec.expected_prompt_tokens;
    rec.completion_tokens = acc.num_content_chunks();
  }
  return acc.text();
}

}  // namespace

RunResults run_bench(const BenchConfig& config, const Workload& workload, const ProgressFn& progress) {
  PAGODA_CHECK(config.max_requests >= 1, "max_requests must be >= 1");
  PAGODA_CHECK(config.max_duration_s > 0, "max_duration_s must be > 0");
  PAGODA_CHECK(config.timeout_s > 0, "timeout_s must be > 0");
  PAGODA_CHECK(config.concurrency >= 1, "concurrency must be >= 1");
  PAGODA_CHECK(config.hangup_fraction >= 0 && config.hangup_fraction <= 1, "hangup_fraction must be in [0, 1]");
  PAGODA_CHECK(config.hangup_after_chunks >= 1, "hangup_after_chunks must be >= 1");
  RunResults results;
  results.config = config;
  results.config.tokens_measured = workload.tokens_measured();
  results.config.workload = workload.options();

  std::string why;
  std::optional<Url> url = parse_url(config.url, &why);
  if (!url) {
    RequestRecord rec;
    rec.error = error_class_name(ErrorKind::kBadUrl, 0);
    rec.detail = config.url + ": " + why;
    results.records.push_back(rec);
    return results;
  }

  const int turns = workload.turns_per_job();
  // Jobs needed to send max_requests requests if every turn succeeds.
  const int64_t max_jobs = (config.max_requests + turns - 1) / turns;
  std::vector<double> arrival_s(static_cast<size_t>(max_jobs), 0.0);
  if (config.rate > 0) {
    Rng rng(config.workload.seed ^ 0xA5A5A5A5DEADBEEFull);
    double t = 0;
    for (double& a : arrival_s) {
      t += rng.exponential(config.rate);
      a = t;
    }
  }

  std::mutex mu;  // guards results.records, last_end and calls to progress
  // A refused connection means no server is listening: every later request would be
  // refused too, so the run stops at the first (the caller reports it).
  std::atomic<bool> refused{false};
  std::atomic<int64_t> next_job{0};
  std::atomic<int64_t> requests_left{config.max_requests};
  const Clock::time_point run_start = Clock::now();
  const Clock::time_point stop_starting =
      run_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.max_duration_s));
  Clock::time_point last_end = run_start;
  auto since_start = [&](Clock::time_point t) { return std::chrono::duration<double>(t - run_start).count(); };

  auto worker = [&] {
    for (;;) {
      if (refused) return;
      int64_t job_idx = next_job.fetch_add(1);
      if (job_idx >= max_jobs) return;
      double scheduled = arrival_s[static_cast<size_t>(job_idx)];
      Clock::time_point at =
          run_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(scheduled));
      if (at >= stop_starting) return;
      std::this_thread::sleep_until(at);
      Job job = workload.job(job_idx);
      const int64_t hangup_after = job_hangs_up(config, job_idx) ? config.hangup_after_chunks : 0;
      std::vector<std::string> answers;
      int64_t history_tokens = job.system_tokens;
      for (int turn = 0; turn < turns; ++turn) {
        if (Clock::now() >= stop_starting || refused) return;
        if (requests_left.fetch_sub(1) <= 0) return;
        RequestRecord rec;
        rec.job_idx = job_idx;
        rec.turn_idx = turn;
        rec.scheduled_s = turn == 0 ? scheduled : since_start(Clock::now());
        rec.start_s = since_start(Clock::now());
        rec.max_tokens = config.workload.output_len;
        history_tokens += job.user_tokens[static_cast<size_t>(turn)];
        rec.expected_prompt_tokens = history_tokens;
        std::string body =
            request_body(config.endpoint, config.model, job, turn, answers, config.workload.output_len,
                         config.fixed_output, config.extra_body);
        std::string answer = send_one(*url, config, body, hangup_after, rec);
        bool ok = rec.ok();
        if (rec.error == error_class_name(ErrorKind::kConnectRefused, 0)) refused = true;
        {
          std::lock_guard<std::mutex> lock(mu);
          last_end = std::max(last_end, Clock::now());
          results.records.push_back(rec);
          if (progress) progress(rec);
        }
        if (!ok) break;
        history_tokens += rec.completion_tokens;  // approximately: the answer is re-sent as text
        answers.push_back(std::move(answer));
      }
    }
  };

  int64_t num_workers = std::min<int64_t>(config.concurrency, max_jobs);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_workers));
  for (int64_t i = 0; i < num_workers; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  results.duration_s = since_start(last_end);
  return results;
}

}  // namespace pagoda::loadgen
