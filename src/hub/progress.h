// Download progress for a pull: one meter shared by the files fetched in parallel.
// On a terminal it redraws one line ("\r") at most every 200 ms with bytes, rate and ETA;
// otherwise it prints plain lines (a file starting, a file done with its rate, and the
// overall state every 30 s) so logs stay readable. Thread-safe (one mutex); silent when
// `out` is null. Internal to src/hub.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace pagoda::hub {

class ProgressMeter {
 public:
  ProgressMeter(FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  // A file starts with `already` bytes on disk (a resumed download) of `size` (0 = unknown).
  void file_started(const std::string& name, uint64_t size, uint64_t already);
  // `n` more bytes arrived. A retry that restarts a file from zero passes a negative n.
  void bytes(int64_t n);
  void file_done(const std::string& name, uint64_t size, double seconds);
  void message(const std::string& line);  // a whole line (clears a drawn bar first)
  void finish();                          // ends the drawn bar with a newline

 private:
  void draw_locked(bool force);
  static std::string human(double bytes);

  FILE* out_;
  bool terminal_;
  std::mutex mu_;
  uint64_t total_ = 0, done_ = 0, session_bytes_ = 0;
  int active_ = 0;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_{};
};

}  // namespace pagoda::hub
