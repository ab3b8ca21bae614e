#include "hub/progress.h"

namespace pagoda::hub {

std::string ProgressMeter::human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void ProgressMeter::file_started(const std::string& name, uint64_t size, uint64_t already) {
  if (!out_) return;
  std::lock_guard lock(mu_);
  total_ += size;
  done_ += already;
  ++active_;
  if (!terminal_) {
    std::string line = "downloading " + name + (size ? " (" + human(static_cast<double>(size)) + ")" : "");
    if (already) line += ", resuming at " + human(static_cast<double>(already));
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
  draw_locked(true);
}

void ProgressMeter::bytes(int64_t n) {
  if (!out_) return;
  std::lock_guard lock(mu_);
  done_ = static_cast<uint64_t>(static_cast<int64_t>(done_) + n);
  if (n > 0) session_bytes_ += static_cast<uint64_t>(n);
  draw_locked(false);
}

void ProgressMeter::file_done(const std::string& name, uint64_t size, double seconds) {
  if (!out_) return;
  std::lock_guard lock(mu_);
  --active_;
  if (!terminal_) {
    std::fprintf(out_, "downloaded %s: %s in %.1f s\n", name.c_str(), human(static_cast<double>(size)).c_str(), seconds);
    std::fflush(out_);
  }
  draw_locked(true);
}

void ProgressMeter::message(const std::string& line) {
  if (!out_) return;
  std::lock_guard lock(mu_);
  if (bar_drawn_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  if (bar_drawn_) draw_locked(true);
}

void ProgressMeter::finish() {
  if (!out_) return;
  std::lock_guard lock(mu_);
  if (bar_drawn_) {
    draw_locked(true);
    std::fprintf(out_, "\n");
    std::fflush(out_);
    bar_drawn_ = false;
  }
}

void ProgressMeter::draw_locked(bool force) {
  const auto now = std::chrono::steady_clock::now();
  const auto since_draw = now - last_draw_;
  if (terminal_ ? (!force && since_draw < std::chrono::milliseconds(200)) : since_draw < std::chrono::seconds(30))
    return;
  if (!terminal_ && last_draw_ == std::chrono::steady_clock::time_point{}) {
    last_draw_ = now;  // the first plain status line comes 30 s in
    return;
  }
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(session_bytes_) / elapsed : 0;
  std::string line = human(static_cast<double>(done_));
  if (total_ > 0) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3.0f%% ", 100.0 * static_cast<double>(done_) / static_cast<double>(total_));
    line = pct + line + " / " + human(static_cast<double>(total_));
  }
  line += "  " + human(rate) + "/s";
  if (total_ > done_ && rate > 0) {
    const auto eta = static_cast<long>(static_cast<double>(total_ - done_) / rate);
    char buf[32];
    std::snprintf(buf, sizeof buf, "  ETA %ld:%02ld:%02ld", eta / 3600, eta / 60 % 60, eta % 60);
    line += buf;
  }
  if (terminal_) {
    std::fprintf(out_, "\r\033[Kdownloading %s", line.c_str());
    bar_drawn_ = true;
  } else if (active_ > 0) {
    std::fprintf(out_, "progress: %s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace pagoda::hub
