#include "cache/disk_io.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace pagoda {

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How often a waiter looks at the deadline: well under any sensible deadline (seconds),
// and cheap (a wakeup every 50 ms only while someone waits).
constexpr auto kPollInterval = std::chrono::milliseconds(50);

}  // namespace

struct DiskIo::State {
  struct ReadJob {
    uint64_t ticket = 0;
    std::vector<ReadBlock> blocks;
    size_t payload_bytes = 0;
    bool cancelled = false;  // guarded by mu: set by cancel(), read before each copy
    int64_t n_copied = 0;    // guarded by mu
  };
  struct Job {
    std::shared_ptr<ReadJob> read;  // null: a write
    BlockHash hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    uint64_t bytes() const { return payload.size() + tokens.size() * sizeof(int32_t); }
  };

  State(DiskTier& d, std::function<void()> cb)
      : disk(d), on_done(std::move(cb)), deadline_ns(int64_t{std::max(1, d.config().io_deadline_ms)} * 1'000'000) {}

  // The operation running now has passed the deadline. With mu held, or racy for stats.
  bool stalled_now() const {
    const int64_t t0 = op_start_ns.load(std::memory_order_relaxed);
    return t0 != 0 && steady_ns() - t0 > deadline_ns;
  }
  // For a waiter about to give up (mu held through `lk`): stalled, and still the same
  // operation one poll interval later. The second look spares a waiter the moment
  // between a stuck call returning and the thread taking the lock to say so.
  bool stalled_for_sure(std::unique_lock<std::mutex>& lk) {
    if (!stalled_now()) return false;
    const int64_t t0 = op_start_ns.load(std::memory_order_relaxed);
    idle_cv.wait_for(lk, kPollInterval);
    return op_start_ns.load(std::memory_order_relaxed) == t0 && stalled_now();
  }
  void unqueue_write(const Job& j) {  // with mu held
    queued_bytes -= j.bytes();
    --queued_writes;
    if (auto it = queued.find(j.hash); it != queued.end() && --it->second == 0) queued.erase(it);
  }
  void run_read(std::unique_lock<std::mutex>& lk, ReadJob& r);
  void loop();

  DiskTier& disk;
  std::function<void()> on_done;  // cleared when the thread is left behind
  const int64_t deadline_ns;
  std::mutex mu;
  std::condition_variable work_cv;  // the thread: a job or stop
  std::condition_variable idle_cv;  // the owner: room in the queue, idle, or exited
  std::deque<Job> queue;
  bool busy = false;    // running a job taken off the queue (a write stays booked)
  bool stop = false;
  bool exited = false;
  // steady_ns() when the operation running now (one block's read or write) started; 0:
  // none. Written with mu held, so stop() deciding "stalled" under mu is not raced.
  std::atomic<int64_t> op_start_ns{0};
  std::unordered_map<BlockHash, int, BlockHashHasher> queued;     // writes queued or running
  std::unordered_map<uint64_t, std::shared_ptr<ReadJob>> reads;  // queued or running
  std::vector<std::pair<uint64_t, int64_t>> done;
  std::vector<uint8_t> buffer;  // the thread's read buffer (see Reads in the header)
  uint64_t next_ticket = 1;
  uint64_t queued_bytes = 0;
  int64_t queued_writes = 0;
  int64_t drops = 0;
  int64_t waits = 0;
  double wait_seconds = 0;
};

void DiskIo::State::run_read(std::unique_lock<std::mutex>& lk, ReadJob& r) {
  buffer.resize(r.payload_bytes);
  for (ReadBlock& b : r.blocks) {
    if (r.cancelled) return;
    op_start_ns = steady_ns();
    lk.unlock();
    const bool ok = disk.get(b.hash, b.tokens, std::span<uint8_t>(buffer.data(), r.payload_bytes));
    lk.lock();
    op_start_ns = 0;
    if (!ok || r.cancelled) return;
    std::memcpy(b.dst, buffer.data(), r.payload_bytes);  // under mu: cancel() fences it
    ++r.n_copied;
  }
}

void DiskIo::State::loop() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    work_cv.wait(lk, [&] { return stop || !queue.empty(); });
    if (queue.empty()) break;  // stop, and every job done
    Job j = std::move(queue.front());
    queue.pop_front();
    busy = true;
    if (j.read) {
      run_read(lk, *j.read);
    } else {
      op_start_ns = steady_ns();
      lk.unlock();
      disk.put(j.hash, j.tokens, j.payload);  // not kept (full, I/O error): counted by DiskTier
      lk.lock();
      op_start_ns = 0;
    }
    busy = false;
    std::function<void()> cb;
    if (j.read) {
      if (!j.read->cancelled) {  // a cancelled job was taken off `reads` by cancel()
        reads.erase(j.read->ticket);
        done.emplace_back(j.read->ticket, j.read->n_copied);
        cb = on_done;
      }
    } else {
      unqueue_write(j);
    }
    idle_cv.notify_all();
    if (cb) {
      lk.unlock();
      cb();
      lk.lock();
    }
  }
  exited = true;
  idle_cv.notify_all();
}

DiskIo::DiskIo(DiskTier& disk, std::function<void()> on_done)
    : s_(std::make_shared<State>(disk, std::move(on_done))) {
  // The thread holds its own reference: if it is left behind (stop()), the state lives on.
  std::thread([s = s_] { s->loop(); }).detach();
}

DiskIo::~DiskIo() { stop(); }

bool DiskIo::stop() {
  if (stopped_) return !left_behind_;
  stopped_ = true;
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->stop = true;
  s_->work_cv.notify_all();
  while (!s_->exited) {
    s_->idle_cv.wait_for(lk, kPollInterval);
    if (!s_->exited && s_->stalled_for_sure(lk) && !s_->exited) {
      // Stuck in the kernel (a hung mount): drop what is queued, never call back into the
      // owner, and let it return whenever it does (see Lifetime in the header).
      s_->on_done = nullptr;
      for (auto& [ticket, job] : s_->reads) job->cancelled = true;  // never copies into the pool again
      s_->reads.clear();
      for (auto& j : s_->queue)
        if (!j.read) s_->unqueue_write(j);
      s_->queue.clear();
      left_behind_ = true;
      return false;
    }
  }
  return true;
}

uint64_t DiskIo::read(std::vector<ReadBlock> blocks, size_t payload_bytes) {
  auto job = std::make_shared<State::ReadJob>();
  job->blocks = std::move(blocks);
  job->payload_bytes = payload_bytes;
  std::lock_guard<std::mutex> lk(s_->mu);
  job->ticket = s_->next_ticket++;
  s_->reads[job->ticket] = job;
  State::Job j;
  j.read = job;
  s_->queue.push_back(std::move(j));
  s_->work_cv.notify_all();
  return job->ticket;
}

bool DiskIo::read_now(ReadBlock block, size_t payload_bytes) {
  std::vector<ReadBlock> blocks;
  blocks.push_back(std::move(block));
  const uint64_t ticket = read(std::move(blocks), payload_bytes);
  std::unique_lock<std::mutex> lk(s_->mu);
  for (;;) {
    const auto d = std::find_if(s_->done.begin(), s_->done.end(), [&](const auto& p) { return p.first == ticket; });
    if (d != s_->done.end()) {
      const bool ok = d->second == 1;
      s_->done.erase(d);
      return ok;
    }
    if (s_->exited || s_->stalled_for_sure(lk)) break;
    s_->idle_cv.wait_for(lk, kPollInterval);
  }
  lk.unlock();
  cancel(ticket);  // stuck: it never writes dst now
  return false;
}

int64_t DiskIo::cancel(uint64_t ticket) {
  std::lock_guard<std::mutex> lk(s_->mu);
  if (auto it = s_->reads.find(ticket); it != s_->reads.end()) {
    const std::shared_ptr<State::ReadJob> job = it->second;
    s_->reads.erase(it);
    job->cancelled = true;
    // Not started: out of the queue now, so its blocks are not read for nothing.
    auto q = std::find_if(s_->queue.begin(), s_->queue.end(), [&](const State::Job& j) { return j.read == job; });
    if (q != s_->queue.end()) s_->queue.erase(q);
    s_->idle_cv.notify_all();
    return job->n_copied;
  }
  // Finished, not taken yet.
  auto d = std::find_if(s_->done.begin(), s_->done.end(), [&](const auto& p) { return p.first == ticket; });
  if (d == s_->done.end()) return 0;
  const int64_t n = d->second;
  s_->done.erase(d);
  return n;
}

void DiskIo::take_done(std::vector<std::pair<uint64_t, int64_t>>& out) {
  std::lock_guard<std::mutex> lk(s_->mu);
  out.insert(out.end(), s_->done.begin(), s_->done.end());
  s_->done.clear();
}

void DiskIo::write(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload,
                   WhenFull when_full) {
  const uint64_t bytes = payload.size() + tokens.size_bytes();
  const uint64_t cap = s_->disk.config().write_queue_bytes;
  // Room, or an empty queue (a block larger than the whole queue goes alone). Only this
  // thread adds, so room found here is still there after the copy below.
  auto room = [&] { return s_->queued_bytes == 0 || s_->queued_bytes + bytes <= cap; };
  {
    std::unique_lock<std::mutex> lk(s_->mu);
    if (!room()) {
      if (when_full == WhenFull::Drop) {
        ++s_->drops;
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      ++s_->waits;
      while (!room() && !s_->stalled_for_sure(lk)) s_->idle_cv.wait_for(lk, kPollInterval);
      s_->wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!room()) {
        ++s_->drops;
        return;
      }
    }
  }
  State::Job j;
  j.hash = h;
  j.tokens.assign(tokens.begin(), tokens.end());
  j.payload.assign(payload.begin(), payload.end());
  std::lock_guard<std::mutex> lk(s_->mu);
  s_->queued_bytes += bytes;
  ++s_->queued_writes;
  ++s_->queued[h];
  s_->queue.push_back(std::move(j));
  s_->work_cv.notify_all();
}

bool DiskIo::write_queued(const BlockHash& h) const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->queued.count(h) != 0;
}

void DiskIo::discard_writes() {
  std::lock_guard<std::mutex> lk(s_->mu);
  for (auto it = s_->queue.begin(); it != s_->queue.end();) {
    if (it->read) {
      ++it;
      continue;
    }
    s_->unqueue_write(*it);
    it = s_->queue.erase(it);
  }
  s_->idle_cv.notify_all();
}

bool DiskIo::drain() {
  std::unique_lock<std::mutex> lk(s_->mu);
  while (!(s_->queue.empty() && !s_->busy)) {
    if (s_->stalled_for_sure(lk)) return false;
    s_->idle_cv.wait_for(lk, kPollInterval);
  }
  return true;
}

bool DiskIo::stalled() const { return s_->stalled_now(); }

void DiskIo::fill_stats(DiskTierStats& s) const {
  std::lock_guard<std::mutex> lk(s_->mu);
  s.queued_writes = s_->queued_writes;
  s.queued_write_bytes = s_->queued_bytes;
  s.write_queue_capacity_bytes = s_->disk.config().write_queue_bytes;
  s.write_queue_waits = s_->waits;
  s.write_queue_wait_seconds = s_->wait_seconds;
  s.write_queue_drops = s_->drops;
  s.restores_in_flight = static_cast<int64_t>(s_->reads.size());
  const int64_t t0 = s_->op_start_ns.load(std::memory_order_relaxed);
  s.stalled = s_->stalled_now();
  s.stalled_seconds = s.stalled ? static_cast<double>(steady_ns() - t0) / 1e9 : 0.0;
}

}  // namespace pagoda
