#include "common/thread_pool.h"

#include <sched.h>

#include <algorithm>

#include "common/error.h"

namespace pagoda {

namespace {
// Spin this many iterations waiting for the next job before sleeping: a decode
// step launches a few hundred kernels back to back, and a futex wake costs
// several microseconds each time.
constexpr int kSpinIterations = 20000;
// Of those, the first kPureSpinIterations only pause; later ones yield the core
// instead. When runnable threads outnumber free cores (a loaded machine, or
// --threads above the core count), a waiter that never yields holds the core
// that the thread it waits for needs. On an idle machine sched_yield returns at
// once, so yielding costs nothing there.
constexpr int kPureSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// One step of a spin-wait that has already waited `spins` steps.
inline void spin_step(int spins) {
  if (spins < kPureSpinIterations) {
    cpu_relax();
  } else {
    std::this_thread::yield();
  }
}
}  // namespace

int ThreadPool::default_num_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  PAGODA_CHECK(num_threads >= 1, "ThreadPool needs at least one thread");
  range_next_ = std::make_unique<RangeCounter[]>(static_cast<size_t>(num_threads));
  workers_.reserve(num_threads - 1);
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_relaxed);
    // A new seq wakes every worker; closed, so none joins it.
    state_.store(((job_seq_ + 1) << 32) | kClosedBit, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work(int thread_idx) {
  if (!ranges_) {
    for (;;) {
      int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_tasks_) break;
      fn_(ctx_, i, thread_idx);
    }
    return;
  }
  // Its own range first, then the others' in turn: every counter hands out each of
  // its range's tasks once, whoever asks.
  for (int k = 0; k < num_threads_; ++k) {
    const int r = (thread_idx + k) % num_threads_;
    const int64_t lo = n_tasks_ * r / num_threads_, hi = n_tasks_ * (r + 1) / num_threads_;
    for (;;) {
      const int64_t i = lo + range_next_[r].next.fetch_add(1, std::memory_order_relaxed);
      if (i >= hi) break;
      fn_(ctx_, i, thread_idx);
    }
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) { start(n_tasks, fn, ctx, false); }

void ThreadPool::run_ranges(int64_t n_tasks, TaskFn fn, void* ctx) { start(n_tasks, fn, ctx, true); }

void ThreadPool::start(int64_t n_tasks, TaskFn fn, void* ctx, bool ranges) {
  if (n_tasks <= 0) return;
  if (num_threads_ == 1 || n_tasks == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
    return;
  }
  // The previous job is closed with nobody inside (invariant 2), so the job
  // fields are ours to write; the release store of the new seq publishes them.
  n_tasks_ = n_tasks;
  fn_ = fn;
  ctx_ = ctx;
  ranges_ = ranges;
  next_task_.store(0, std::memory_order_relaxed);
  if (ranges)
    for (int r = 0; r < num_threads_; ++r) range_next_[r].next.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++job_seq_;
    state_.store(job_seq_ << 32, std::memory_order_release);  // open, nobody joined
  }
  cv_.notify_all();
  work(0);
  // Every task is claimed: let no one else in, then wait for those inside to
  // finish their tasks (their release decrements make the results visible).
  state_.fetch_or(kClosedBit, std::memory_order_acq_rel);
  for (int spins = 0; (state_.load(std::memory_order_acquire) & kJoinedMask) != 0; ++spins)
    spin_step(std::min(spins, kPureSpinIterations));
}

void ThreadPool::worker_loop(int thread_idx) {
  uint64_t seen_seq = 0;
  for (;;) {
    // Wait for a job newer than the last one this worker saw.
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int spins = 0; seq_of(s) == seen_seq && spins < kSpinIterations; ++spins) {
      spin_step(spins);
      s = state_.load(std::memory_order_acquire);
    }
    if (seq_of(s) == seen_seq) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        s = state_.load(std::memory_order_acquire);
        return seq_of(s) != seen_seq;
      });
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen_seq = seq_of(s);
    // Join it unless it is already closed (then skip it; a failed CAS that shows
    // a newer seq is picked up by the wait above).
    bool joined = false;
    while (seq_of(s) == seen_seq && (s & kClosedBit) == 0) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    work(thread_idx);
    state_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace pagoda
