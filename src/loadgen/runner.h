// The benchmark run loop: sends a workload's requests to one server and records
// what each one did, from the client's side.
//
// Contract:
// - Scheduling. A job (one conversation) runs its turns one after another.
//   Closed loop (rate == 0): `concurrency` workers each take the next job as soon
//   as the last finished. Open loop (rate > 0): job starts follow a Poisson
//   process of `rate` jobs/s drawn from the seed; at most `concurrency` jobs are
//   in flight, and a start that finds all workers busy goes out late (its record
//   keeps both scheduled_s and start_s, so the lateness is visible).
// - Bounds, always: at most max_requests requests are sent; none starts after
//   max_duration_s; each ends by its timeout_s deadline. So a run ends within
//   max_duration_s + timeout_s (+ connect overhead), whatever the server does.
// - Per request (all client-side, steady clock): TTFT = first content-bearing
//   chunk; ITL = gaps between content chunks (a chunk may carry several tokens);
//   e2e = start to [DONE]; tokens from the final usage chunk
//   (stream_options.include_usage), else estimated (prompt from the workload,
//   completion = content chunks) with usage_reported false.
// - Failures never throw: each failed request is one record whose `error` names
//   the class (http_client.h). In a multi-turn job a failed turn ends the job
//   (the history would be wrong). num ok + num failed + num hung up ==
//   records.size() == sent.
// - Hang-ups (config.hangup_fraction): the chosen jobs' requests close their
//   connection after hangup_after_chunks content chunks (class kHungUp), which
//   ends the job; the server must cancel them and serve the others unharmed.
// - Only config.url's host and port are contacted.
// - run_bench() blocks the caller; it starts and joins its own worker threads.
#pragma once

#include <functional>

#include "loadgen/results.h"
#include "loadgen/workload.h"

namespace pagoda::loadgen {

// Called after each request, from worker threads, serialised by a mutex (the
// order is completion order). May be empty.
using ProgressFn = std::function<void(const RequestRecord&)>;

// Requires: config.max_requests >= 1, config.max_duration_s > 0,
// config.timeout_s > 0, config.concurrency >= 1. An unparsable config.url gives
// one record of class "bad_url" and sends nothing.
RunResults run_bench(const BenchConfig& config, const Workload& workload, const ProgressFn& progress = {});

}  // namespace pagoda::loadgen
