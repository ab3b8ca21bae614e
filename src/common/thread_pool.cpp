#include "common/thread_pool.h"

#include <sched.h>

#include "common/error.h"

namespace pagoda {

namespace {
// Spin this many iterations waiting for the next job before sleeping: a decode
// step launches a few hundred kernels back to back, and a futex wake costs
// several microseconds each time.
constexpr int kSpinIterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
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
  workers_.reserve(num_threads - 1);
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work(int thread_idx) {
  for (;;) {
    int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) break;
    fn_(ctx_, i, thread_idx);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (num_threads_ == 1 || n_tasks == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
    return;
  }
  n_tasks_ = n_tasks;
  fn_ = fn;
  ctx_ = ctx;
  next_task_.store(0, std::memory_order_relaxed);
  active_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  work(0);
  while (active_.load(std::memory_order_acquire) != 0) cpu_relax();
}

void ThreadPool::worker_loop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t gen;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen && spins < kSpinIterations) {
      cpu_relax();
      ++spins;
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_) return;
    work(thread_idx);
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace pagoda
