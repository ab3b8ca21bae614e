#include "cache/disk_io.h"

#include <chrono>

namespace pagoda {

DiskIo::DiskIo(DiskTier& disk, std::function<void()> on_done) : disk_(disk), on_done_(std::move(on_done)) {
  thread_ = std::thread([this] { loop(); });
}

DiskIo::~DiskIo() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t DiskIo::read(std::vector<ReadBlock> blocks, size_t payload_bytes) {
  auto job = std::make_shared<ReadJob>();
  job->blocks = std::move(blocks);
  job->payload_bytes = payload_bytes;
  std::lock_guard<std::mutex> lk(mu_);
  job->ticket = next_ticket_++;
  reads_[job->ticket] = job;
  Job j;
  j.read = job;
  queue_.push_back(std::move(j));
  work_cv_.notify_all();
  return job->ticket;
}

void DiskIo::cancel(uint64_t ticket) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = reads_.find(ticket); it != reads_.end()) it->second->cancelled = true;
}

void DiskIo::take_done(std::vector<std::pair<uint64_t, int64_t>>& out) {
  std::lock_guard<std::mutex> lk(mu_);
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

void DiskIo::write(const BlockHash& h, std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  Job j;
  j.hash = h;
  j.tokens.assign(tokens.begin(), tokens.end());
  j.payload.assign(payload.begin(), payload.end());
  const uint64_t bytes = j.bytes();
  const uint64_t cap = disk_.config().write_queue_bytes;
  std::unique_lock<std::mutex> lk(mu_);
  // Room, or an empty queue (a block larger than the whole queue goes alone).
  if (queued_bytes_ > 0 && queued_bytes_ + bytes > cap) {
    const auto t0 = std::chrono::steady_clock::now();
    ++waits_;
    idle_cv_.wait(lk, [&] { return queued_bytes_ == 0 || queued_bytes_ + bytes <= cap; });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  queued_bytes_ += bytes;
  ++queued_writes_;
  ++queued_[h];
  queue_.push_back(std::move(j));
  work_cv_.notify_all();
}

bool DiskIo::write_queued(const BlockHash& h) const {
  std::lock_guard<std::mutex> lk(mu_);
  return queued_.count(h) != 0;
}

void DiskIo::unqueue_write(const Job& j) {
  queued_bytes_ -= j.bytes();
  --queued_writes_;
  if (auto it = queued_.find(j.hash); it != queued_.end() && --it->second == 0) queued_.erase(it);
}

void DiskIo::discard_writes() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->read) {
      ++it;
      continue;
    }
    unqueue_write(*it);
    it = queue_.erase(it);
  }
  idle_cv_.notify_all();
}

void DiskIo::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

void DiskIo::fill_stats(DiskTierStats& s) const {
  std::lock_guard<std::mutex> lk(mu_);
  s.queued_writes = queued_writes_;
  s.queued_write_bytes = queued_bytes_;
  s.write_queue_capacity_bytes = disk_.config().write_queue_bytes;
  s.write_queue_waits = waits_;
  s.write_queue_wait_seconds = wait_seconds_;
  s.restores_in_flight = static_cast<int64_t>(reads_.size());
}

void DiskIo::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and every job done
    Job j = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    int64_t n_ok = 0;
    if (j.read) {
      ReadJob& r = *j.read;
      for (ReadBlock& b : r.blocks) {
        if (r.cancelled) break;
        if (!disk_.get(b.hash, b.tokens, std::span<uint8_t>(b.dst, r.payload_bytes))) break;
        ++n_ok;
      }
    } else {
      disk_.put(j.hash, j.tokens, j.payload);  // not kept (full, I/O error): counted by DiskTier
    }
    lk.lock();
    busy_ = false;
    if (j.read) {
      reads_.erase(j.read->ticket);
      done_.emplace_back(j.read->ticket, n_ok);
    } else {
      unqueue_write(j);
    }
    idle_cv_.notify_all();
    if (j.read && on_done_) {
      lk.unlock();
      on_done_();
      lk.lock();
    }
  }
}

}  // namespace pagoda
