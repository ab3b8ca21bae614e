// Logger — the one way a long-running pagoda process (`pagoda serve`) writes its log: one
// line per event, stamped with the UTC time to the millisecond, as text for people or as
// one JSON object per line for log pipelines (Loki, Elasticsearch, `jq`).
//
// Contract:
// - A LogLine is built by the caller (level, head words, a message, key=value fields, in
//   order) and written whole by Logger::write(): one write(2) of the complete line under
//   a mutex, so lines from the I/O threads and the engine thread never interleave, and
//   with O_APPEND (--log-file) not even with another process appending to the same file.
// - One event is one line, whatever the values hold: every string is escaped for its
//   format (text: quoted with \" \\ \n \r \t \xNN escapes when it holds anything but
//   visible characters; JSON: JSON's escapes), invalid UTF-8 becomes U+FFFD, and a string
//   value is cut at kMaxLogValueBytes (on a character boundary, marked with "…").
// - Text:  2026-12-04T22:31:33.123Z INFO [tag] HEAD WORDS message key=value key="a b"
//   JSON:  {"ts":"2026-12-04T22:31:33.123Z","level":"info","<tag key>":"tag",<head fields>,
//           "msg":"message",<fields>}
//   A head word is a field whose text form is its bare value (method, path, status); the
//   tag is the process's name in a fleet (set_tag: the replica id). Numbers are JSON
//   numbers; a non-finite double is null (text: -).
// - Levels: Debug lines are written only when verbose (-v); the rest always.
// - Configuration (set_*, open_file) happens before the threads that log start; write()
//   and enabled() are safe from any thread at any time.
// - Output: stderr until open_file(); a write that fails is dropped (a full disk must not
//   stop the server), never retried forever.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

enum class LogLevel { Debug, Info, Warn, Error };
enum class LogFormat { Text, Json };

// "debug", "info", "warn", "error".
const char* log_level_name(LogLevel level);

// A value longer than this is cut: 4 KiB holds any message pagoda writes and a long
// path; a line stays small enough for syslog-style collectors (8-64 KiB limits).
inline constexpr size_t kMaxLogValueBytes = 4096;

// "2026-12-04T22:31:33.123Z": ISO 8601, UTC, milliseconds.
std::string format_log_timestamp(std::chrono::system_clock::time_point t);

// `s` as well-formed UTF-8 (U+FFFD for ill-formed bytes), cut to at most max_bytes on a
// character boundary, with "…" (3 bytes, within max_bytes) when it was cut.
std::string truncate_for_log(std::string_view s, size_t max_bytes);

class LogLine {
 public:
  explicit LogLine(LogLevel level, std::chrono::system_clock::time_point at = std::chrono::system_clock::now())
      : level_(level), at_(at) {}

  // A head word: text shows the bare value, JSON a "key": value field.
  LogLine& head(std::string_view key, std::string_view value);
  LogLine& head(std::string_view key, int64_t value);
  // Free text after the head (JSON "msg"). Control characters are escaped, nothing quoted.
  LogLine& message(std::string_view text);
  // key=value (text), "key": value (JSON).
  LogLine& add(std::string_view key, std::string_view value);
  LogLine& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  LogLine& add(std::string_view key, int64_t value);
  LogLine& add(std::string_view key, double value, int decimals);
  LogLine& add(std::string_view key, bool value);

  LogLevel level() const { return level_; }
  std::chrono::system_clock::time_point at() const { return at_; }

  // The line without its newline. `tag_key` / `tag` come first after the level ("" none).
  std::string format(LogFormat format, std::string_view tag_key = {}, std::string_view tag = {}) const;

 private:
  enum class Kind { String, Int, Double, Bool };
  struct Field {
    std::string key;
    Kind kind = Kind::String;
    bool head = false;
    std::string text;  // String (already cut)
    int64_t i = 0;     // Int, Bool
    double d = 0;      // Double
    int decimals = 0;
  };
  Field& push(std::string_view key, Kind kind, bool head);

  LogLevel level_;
  std::chrono::system_clock::time_point at_;
  std::string message_;
  std::vector<Field> fields_;
};

class Logger {
 public:
  Logger() = default;
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  void set_format(LogFormat format);
  void set_verbose(bool verbose) { verbose_.store(verbose); }
  // Every line names the process: text "[value]", JSON "key":"value" (e.g. "replica", id).
  void set_tag(std::string key, std::string value);
  // Appends to `path` from now on (created, mode 0644, when missing). Throws pagoda::Error
  // naming the path and the reason when it cannot be opened for appending.
  void open_file(const std::string& path);

  LogFormat format() const;
  bool verbose() const { return verbose_.load(); }
  bool enabled(LogLevel level) const { return level != LogLevel::Debug || verbose_.load(); }
  // Writes the line (and its newline) when its level is enabled.
  void write(const LogLine& line);
  // A plain message line.
  void write(LogLevel level, std::string_view message) { write(LogLine(level).message(message)); }

 private:
  mutable std::mutex mu_;
  LogFormat format_ = LogFormat::Text;
  std::string tag_key_, tag_;
  int fd_ = 2;  // stderr, or the --log-file we opened
  bool owns_fd_ = false;
  std::atomic<bool> verbose_{false};
};

// The process's logger (`pagoda serve` configures it from its flags).
Logger& logger();

}  // namespace pagoda
