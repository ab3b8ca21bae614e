// ThreadPool — a fixed set of worker threads created once, for kernels.
//
// Contract: one owner thread (the thread that calls run()) hands out a job of
// n_tasks independent tasks; the owner thread takes part as worker 0, so a
// pool of N threads starts N-1 OS threads. run() returns when every task is
// done. run() is not reentrant and must be called from one thread at a time
// (the engine thread); tasks must not throw. A job allocates nothing: tasks are
// claimed through an atomic counter, and workers spin briefly (yielding the core
// after a while) before sleeping on a condition variable, so a step of many small
// kernels does not pay a wake-up per kernel.
//
// Invariants (state_ packs seq | closed | joined):
//  1. A worker touches the job fields (fn_, ctx_, n_tasks_, next_task_, ranges_,
//     range_next_) only between joining (a CAS that raises `joined` on an open job)
//     and leaving.
//  2. run() / run_ranges() closes the job once every task is claimed and returns once
//     `joined` is 0; only then may it rewrite the job fields for the next job.
//  So a job never waits for a worker that is asleep, descheduled or late: such a
//  worker finds the job closed (or a newer seq) and skips it. Waiting for every
//  worker to check in instead made each job cost a scheduler time slice
//  whenever threads outnumbered free cores (~2 ms per job, 4 threads on 2 busy
//  cores).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  // fn(task_idx, thread_idx): task_idx in [0, n_tasks), thread_idx in [0, num_threads()).
  using TaskFn = void (*)(void* ctx, int64_t task_idx, int thread_idx);

  // Requires: num_threads >= 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(ctx, i, thread) for i in [0, n_tasks) across all threads; blocks until done.
  void run(int64_t n_tasks, TaskFn fn, void* ctx);

  // Convenience wrapper for lambdas: f(task_idx, thread_idx).
  template <class F>
  void parallel_for(int64_t n_tasks, F&& f) {
    run(n_tasks, trampoline<F>, erase(f));
  }
  // Like run(), but the tasks are cut into num_threads() contiguous ranges and thread t
  // starts on range t, in order, taking what is left of the others' ranges only when
  // its own is done (so a late or descheduled thread's range is still finished by the
  // others). For tasks that stream neighbouring memory: each thread then reads one long
  // sequence instead of every other tile of a shared one.
  void run_ranges(int64_t n_tasks, TaskFn fn, void* ctx);
  template <class F>
  void parallel_for_ranges(int64_t n_tasks, F&& f) {
    run_ranges(n_tasks, trampoline<F>, erase(f));
  }

  // The number of hardware threads this process may use (sched affinity).
  static int default_num_threads();

 private:
  // The lambda wrappers' type erasure (F may be an lvalue reference type, or const).
  template <class F>
  static void trampoline(void* ctx, int64_t i, int t) {
    (*static_cast<std::remove_reference_t<F>*>(ctx))(i, t);
  }
  template <class G>
  static void* erase(G& f) {
    return const_cast<void*>(static_cast<const void*>(std::addressof(f)));
  }
  void worker_loop(int thread_idx);
  void start(int64_t n_tasks, TaskFn fn, void* ctx, bool ranges);
  void work(int thread_idx);

  // state_ layout: bits 63..32 job sequence number, bit 31 closed, bits 30..0 the
  // number of workers inside the job.
  static constexpr uint64_t kClosedBit = uint64_t{1} << 31;
  static constexpr uint64_t kJoinedMask = kClosedBit - 1;
  static uint64_t seq_of(uint64_t state) { return state >> 32; }

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;                // guards publishing a new seq, for cv_ sleepers
  std::condition_variable cv_;
  std::atomic<uint64_t> state_{kClosedBit};  // seq 0, closed: no job yet
  uint64_t job_seq_ = 0;         // owner thread only: seq of the last job
  std::atomic<int64_t> next_task_{0};
  // run_ranges: range r's next task, as an offset from its start (one cache line each).
  struct alignas(64) RangeCounter {
    std::atomic<int64_t> next{0};
  };
  std::unique_ptr<RangeCounter[]> range_next_;
  bool ranges_ = false;
  int64_t n_tasks_ = 0;
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace pagoda
