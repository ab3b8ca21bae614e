// ThreadPool: every task of a job runs exactly once on a valid thread, the workers really
// run in parallel, back-to-back tiny jobs neither deadlock nor crawl, and destruction
// joins cleanly whether the workers are spinning or asleep. Tests that could hang arm a
// watchdog that aborts with a message instead.

#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

// Aborts the process if not destroyed within `limit` (a deadlocked pool would otherwise
// hang the test binary until ctest's timeout, with no hint of where).
class Watchdog {
 public:
  Watchdog(std::string what, std::chrono::seconds limit) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: %s did not finish within %llds (deadlock?)\n", what_.c_str(),
                     static_cast<long long>(limit.count()));
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnceOnAValidThread) {
  Watchdog dog("EveryTaskRunsExactlyOnceOnAValidThread", std::chrono::seconds(60));
  for (int num_threads : {1, 2, 3, 4}) {
    ThreadPool pool(num_threads);
    ASSERT_EQ(pool.num_threads(), num_threads);
    for (int64_t n_tasks : {0, 1, 2, 3, 100, 10000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n_tasks));
      std::atomic<int> bad_thread{0};
      pool.parallel_for(n_tasks, [&](int64_t i, int t) {
        runs[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        if (t < 0 || t >= num_threads) bad_thread.fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n_tasks; ++i)
        ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
            << "threads=" << num_threads << " n_tasks=" << n_tasks << " task=" << i;
      EXPECT_EQ(bad_thread.load(), 0) << "threads=" << num_threads << " n_tasks=" << n_tasks;
    }
  }
}

// run_ranges: the same exactly-once contract, alternating with plain jobs on one pool (the
// range counters and the shared one must not leak into each other's jobs).
TEST(ThreadPoolTest, RangesRunEveryTaskExactlyOnceBesidePlainJobs) {
  Watchdog dog("RangesRunEveryTaskExactlyOnceBesidePlainJobs", std::chrono::seconds(60));
  for (int num_threads : {1, 2, 3, 4}) {
    ThreadPool pool(num_threads);
    for (int64_t n_tasks : {0, 1, 2, 3, 5, 100, 10000}) {
      for (bool ranges : {true, false, true}) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n_tasks));
        std::atomic<int> bad_thread{0};
        auto f = [&](int64_t i, int t) {
          runs[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
          if (t < 0 || t >= num_threads) bad_thread.fetch_add(1, std::memory_order_relaxed);
        };
        if (ranges) pool.parallel_for_ranges(n_tasks, f);
        else pool.parallel_for(n_tasks, f);
        for (int64_t i = 0; i < n_tasks; ++i)
          ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
              << "threads=" << num_threads << " n_tasks=" << n_tasks << " ranges=" << ranges << " task=" << i;
        EXPECT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

// A thread runs its own range in order, and a range whose thread never comes (here: the
// worker blocked inside its first task until the owner has done everything else) is
// finished by the others, so the job does not wait for a late thread.
TEST(ThreadPoolTest, RangesRunInOrderAndALateThreadsRangeIsTakenOver) {
  Watchdog dog("RangesRunInOrderAndALateThreadsRangeIsTakenOver", std::chrono::seconds(60));
  ThreadPool pool(2);
  const int64_t n = 64;
  std::vector<int> owner(n, -1);
  std::atomic<int64_t> owner_done{0};
  std::atomic<bool> worker_blocked{false};
  std::vector<int64_t> order0;  // tasks in the order thread 0 ran them
  pool.parallel_for_ranges(n, [&](int64_t i, int t) {
    owner[static_cast<size_t>(i)] = t;
    if (t == 0) {
      order0.push_back(i);
      owner_done.fetch_add(1);
    } else if (!worker_blocked.exchange(true)) {
      // The worker's first task: wait until thread 0 has run every other task (or, when
      // the worker came before thread 0 started, give up after a while).
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (owner_done.load() < n - 1 && Clock::now() < until) std::this_thread::yield();
    }
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_NE(owner[static_cast<size_t>(i)], -1) << i;
  // Thread 0 starts at the start of its range [0, 32) and goes up through it.
  ASSERT_FALSE(order0.empty());
  EXPECT_EQ(order0.front(), 0);
  for (size_t k = 1; k < order0.size() && order0[k] < n / 2; ++k) EXPECT_GT(order0[k], order0[k - 1]);
  // If the worker joined, it blocked on one task of its range [32, 64) and thread 0 ran
  // all the rest of that range too.
  int64_t by_worker = 0;
  for (int64_t i = 0; i < n; ++i) by_worker += owner[static_cast<size_t>(i)] == 1;
  EXPECT_LE(by_worker, 1);
}

// Plain (non-atomic) writes made by tasks are visible to the owner once run() returns,
// and the owner's writes before run() are visible to the tasks.
TEST(ThreadPoolTest, TaskWritesAreVisibleAfterRun) {
  ThreadPool pool(4);
  std::vector<int64_t> in(5000), out(5000, -1);
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i) * 3 + round;
    pool.parallel_for(static_cast<int64_t>(in.size()), [&](int64_t i, int) { out[i] = in[i] + 1; });
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] + 1) << "round=" << round << " i=" << i;
  }
}

// With N threads and N tasks that each wait until all N have started, the job can only
// finish if every thread (owner included) holds one task at the same time.
TEST(ThreadPoolTest, AllThreadsRunTasksConcurrently) {
  Watchdog dog("AllThreadsRunTasksConcurrently", std::chrono::seconds(30));
  for (int num_threads : {2, 3, 4}) {
    ThreadPool pool(num_threads);
    std::atomic<int> arrived{0};
    std::atomic<bool> timed_out{false};
    std::vector<std::atomic<int>> thread_seen(static_cast<size_t>(num_threads));
    pool.parallel_for(num_threads, [&](int64_t, int t) {
      thread_seen[static_cast<size_t>(t)].fetch_add(1);
      arrived.fetch_add(1);
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (arrived.load() < num_threads) {
        if (Clock::now() > deadline) {
          timed_out = true;
          return;
        }
        std::this_thread::yield();
      }
    });
    EXPECT_FALSE(timed_out.load()) << "threads=" << num_threads << ": only " << arrived.load()
                                   << " tasks ever ran at once";
    for (int t = 0; t < num_threads; ++t)
      EXPECT_EQ(thread_seen[static_cast<size_t>(t)].load(), 1) << "threads=" << num_threads << " t=" << t;
  }
}

TEST(ThreadPoolTest, ManyTinyJobsCompleteWithoutDeadlock) {
  Watchdog dog("ManyTinyJobsCompleteWithoutDeadlock", std::chrono::seconds(60));
  for (int num_threads : {2, 4}) {
    ThreadPool pool(num_threads);
    std::atomic<int64_t> sum{0};
    const int64_t kJobs = 100000;
    const auto start = Clock::now();
    for (int64_t j = 0; j < kJobs; ++j)
      pool.parallel_for(2, [&](int64_t i, int) { sum.fetch_add(i + 1, std::memory_order_relaxed); });
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(sum.load(), kJobs * 3) << "threads=" << num_threads;
    std::printf("[ measured ] %lld jobs of 2 tasks on %d threads: %.3f s (%.2f us/job)\n",
                static_cast<long long>(kJobs), num_threads, secs, secs * 1e6 / kJobs);
    // A few microseconds per job when the workers stay spinning; even with every job
    // paying a futex wake-up (tens of us) it stays well under this.
    EXPECT_LT(secs, 10.0) << "threads=" << num_threads;
  }
}

// Back-to-back jobs big enough that workers join them (the owner cannot claim every
// task before a spinning worker notices): each job's tasks run exactly once, and no
// task of one job leaks into the next.
TEST(ThreadPoolTest, BackToBackJobsWithJoiningWorkersRunEachTaskOnce) {
  Watchdog dog("BackToBackJobsWithJoiningWorkersRunEachTaskOnce", std::chrono::seconds(60));
  for (int num_threads : {2, 3, 4}) {
    ThreadPool pool(num_threads);
    const int64_t kJobs = 5000, kTasks = 64;
    std::vector<int64_t> last_job(kTasks, -1);  // the job that last ran each task
    std::atomic<int64_t> by_workers{0}, wrong{0};
    for (int64_t j = 0; j < kJobs; ++j) {
      pool.parallel_for(kTasks, [&](int64_t i, int t) {
        if (last_job[i] != j - 1) wrong.fetch_add(1, std::memory_order_relaxed);
        last_job[i] = j;
        if (t != 0) by_workers.fetch_add(1, std::memory_order_relaxed);
        volatile int spin = 0;  // ~0.1 us of work, so a job lasts long enough to share
        for (int k = 0; k < 100; ++k) spin = spin + k;
      });
    }
    EXPECT_EQ(wrong.load(), 0) << "threads=" << num_threads;
    for (int64_t i = 0; i < kTasks; ++i) ASSERT_EQ(last_job[i], kJobs - 1) << "task " << i;
    // How many tasks workers took depends on how much CPU the machine gives them (on a
    // loaded 2-core box it can be 0%); AllThreadsRunTasksConcurrently pins that they can.
    std::printf("[ measured ] %d threads: %.1f%% of tasks ran on workers\n", num_threads,
                100.0 * by_workers.load() / (kJobs * kTasks));
  }
}

// Jobs separated by pauses long enough for the workers to stop spinning and sleep:
// each job must wake them again.
TEST(ThreadPoolTest, JobsAfterIdlePausesWakeSleepingWorkers) {
  Watchdog dog("JobsAfterIdlePausesWakeSleepingWorkers", std::chrono::seconds(30));
  ThreadPool pool(4);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::atomic<int> count{0};
    pool.parallel_for(64, [&](int64_t, int) { count.fetch_add(1); });
    EXPECT_EQ(count.load(), 64) << "round=" << round;
  }
}

TEST(ThreadPoolTest, DestructionWhileIdleJoinsCleanly) {
  Watchdog dog("DestructionWhileIdleJoinsCleanly", std::chrono::seconds(30));
  for (int num_threads : {1, 2, 4}) {
    { ThreadPool pool(num_threads); }  // never ran a job: workers may not even have started
    {
      ThreadPool pool(num_threads);  // just ran a job: workers are spinning
      std::atomic<int> count{0};
      pool.parallel_for(10, [&](int64_t, int) { count.fetch_add(1); });
      EXPECT_EQ(count.load(), 10);
    }
    {
      ThreadPool pool(num_threads);  // idle long enough to be asleep on the condition variable
      pool.parallel_for(10, [&](int64_t, int) {});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

TEST(ThreadPoolTest, DefaultThreadCountIsPositive) { EXPECT_GE(ThreadPool::default_num_threads(), 1); }

TEST(ThreadPoolDeathTest, RejectsZeroThreads) {
  EXPECT_DEATH({ ThreadPool pool(0); }, "at least one thread");
}

}  // namespace
}  // namespace pagoda
