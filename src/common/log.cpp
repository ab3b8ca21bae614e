#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/error.h"
#include "common/utf8.h"

namespace pagoda {

namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // U+2026

void append_hex_escape(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, value);
  out += buf;
}

// Code points a terminal or a line-oriented tool may act on beyond the ASCII controls:
// C1 controls (U+0085 NEL is a newline to some, U+009B a CSI to others) and the Unicode
// line / paragraph separators.
bool is_wide_control(char32_t cp) { return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029; }

// Text: \n \r \t, \xNN for the other ASCII controls and DEL, \uNNNN for the wide ones;
// `quote` also escapes \ and ". `s` is well-formed UTF-8.
void append_text_escaped(std::string& out, std::string_view s, bool quote) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7F) append_hex_escape(out, "\\x", c, 2);
      else if (quote && (c == '"' || c == '\\')) (out += '\\') += static_cast<char>(c);
      else out += static_cast<char>(c);
      continue;
    }
    const Utf8Char u = decode_utf8_char(s, i);
    if (is_wide_control(u.cp)) append_hex_escape(out, "\\u", static_cast<unsigned>(u.cp), 4);
    else out.append(s.substr(i, u.len));
    i += u.len;
  }
}

// A text value: bare when it is only visible characters other than " \ =, else quoted.
void append_text_value(std::string& out, std::string_view s) {
  bool bare = !s.empty();
  for (size_t i = 0; i < s.size() && bare;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      bare = c > 0x20 && c != 0x7F && c != '"' && c != '\\' && c != '=';
      ++i;
      continue;
    }
    const Utf8Char u = decode_utf8_char(s, i);
    bare = !is_wide_control(u.cp);
    i += u.len;
  }
  if (bare) {
    out += s;
    return;
  }
  out += '"';
  append_text_escaped(out, s, /*quote=*/true);
  out += '"';
}

// A JSON string literal. `s` is well-formed UTF-8; the wide controls are escaped too, so
// a JavaScript consumer (which reads U+2028 as a line end in older engines) is safe.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7F) append_hex_escape(out, "\\u", c, 4);
          else out += static_cast<char>(c);
      }
      continue;
    }
    const Utf8Char u = decode_utf8_char(s, i);
    if (is_wide_control(u.cp)) append_hex_escape(out, "\\u", static_cast<unsigned>(u.cp), 4);
    else out.append(s.substr(i, u.len));
    i += u.len;
  }
  out += '"';
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "info";
}

std::string format_log_timestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const int64_t ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms / 1000;
  int64_t milli = ms % 1000;
  if (milli < 0) {  // before 1970: floor, not truncation
    milli += 1000;
    --secs;
  }
  const time_t tt = static_cast<time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];  // tm_year may be any int as far as -Wformat-truncation knows
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(milli));
  return buf;
}

std::string truncate_for_log(std::string_view s, size_t max_bytes) {
  std::string clean = sanitize_utf8(s);
  if (clean.size() <= max_bytes) return clean;
  const bool marked = max_bytes >= kEllipsis.size();
  size_t cut = marked ? max_bytes - kEllipsis.size() : max_bytes;
  // Back off to the start of a character (a continuation byte is 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(clean[cut]) & 0xC0) == 0x80) --cut;
  clean.resize(cut);
  if (marked) clean += kEllipsis;
  return clean;
}

// ---- LogLine ------------------------------------------------------------------------

LogLine::Field& LogLine::push(std::string_view key, Kind kind, bool head) {
  Field& f = fields_.emplace_back();
  f.key = sanitize_utf8(key);
  f.kind = kind;
  f.head = head;
  return f;
}

LogLine& LogLine::head(std::string_view key, std::string_view value) {
  push(key, Kind::String, true).text = truncate_for_log(value, kMaxLogValueBytes);
  return *this;
}

LogLine& LogLine::head(std::string_view key, int64_t value) {
  push(key, Kind::Int, true).i = value;
  return *this;
}

LogLine& LogLine::message(std::string_view text) {
  message_ = truncate_for_log(text, kMaxLogValueBytes);
  return *this;
}

LogLine& LogLine::add(std::string_view key, std::string_view value) {
  push(key, Kind::String, false).text = truncate_for_log(value, kMaxLogValueBytes);
  return *this;
}

LogLine& LogLine::add(std::string_view key, int64_t value) {
  push(key, Kind::Int, false).i = value;
  return *this;
}

LogLine& LogLine::add(std::string_view key, double value, int decimals) {
  Field& f = push(key, Kind::Double, false);
  f.d = value;
  f.decimals = decimals < 0 ? 0 : decimals > 9 ? 9 : decimals;
  return *this;
}

LogLine& LogLine::add(std::string_view key, bool value) {
  push(key, Kind::Bool, false).i = value ? 1 : 0;
  return *this;
}

std::string LogLine::format(LogFormat format, std::string_view tag_key, std::string_view tag) const {
  std::string out;
  out.reserve(256);
  const std::string ts = format_log_timestamp(at_);
  auto number = [](const Field& f) -> std::string {
    switch (f.kind) {
      case Kind::Int: return std::to_string(f.i);
      case Kind::Bool: return f.i ? "true" : "false";
      case Kind::Double: return std::isfinite(f.d) ? fixed(f.d, f.decimals) : std::string();
      case Kind::String: break;
    }
    return {};
  };

  if (format == LogFormat::Json) {
    out += "{\"ts\":\"" + ts + "\",\"level\":\"" + log_level_name(level_) + "\"";
    auto key = [&](std::string_view k) {
      out += ',';
      append_json_string(out, k);
      out += ':';
    };
    if (!tag_key.empty()) {
      key(tag_key);
      append_json_string(out, sanitize_utf8(tag));
    }
    auto value = [&](const Field& f) {
      key(f.key);
      if (f.kind == Kind::String) {
        append_json_string(out, f.text);
      } else {
        const std::string n = number(f);
        out += n.empty() ? "null" : n;
      }
    };
    for (const Field& f : fields_)
      if (f.head) value(f);
    if (!message_.empty()) {
      key("msg");
      append_json_string(out, message_);
    }
    for (const Field& f : fields_)
      if (!f.head) value(f);
    out += '}';
    return out;
  }

  out += ts;
  out += ' ';
  for (const char* p = log_level_name(level_); *p; ++p) out += static_cast<char>(*p - 'a' + 'A');
  if (!tag_key.empty()) {
    out += " [";
    append_text_escaped(out, sanitize_utf8(tag), /*quote=*/true);
    out += ']';
  }
  for (const Field& f : fields_) {
    if (!f.head) continue;
    out += ' ';
    if (f.kind == Kind::String) append_text_value(out, f.text);
    else out += number(f).empty() ? "-" : number(f);
  }
  if (!message_.empty()) {
    out += ' ';
    append_text_escaped(out, message_, /*quote=*/false);
  }
  for (const Field& f : fields_) {
    if (f.head) continue;
    out += ' ';
    append_text_value(out, f.key);
    out += '=';
    if (f.kind == Kind::String) append_text_value(out, f.text);
    else out += number(f).empty() ? "-" : number(f);
  }
  return out;
}

// ---- Logger -------------------------------------------------------------------------

Logger::~Logger() {
  if (owns_fd_) ::close(fd_);
}

void Logger::set_format(LogFormat format) {
  std::lock_guard lock(mu_);
  format_ = format;
}

void Logger::set_tag(std::string key, std::string value) {
  std::lock_guard lock(mu_);
  tag_key_ = std::move(key);
  tag_ = std::move(value);
}

void Logger::open_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open the log file " + path + " for appending: " + std::strerror(errno));
  std::lock_guard lock(mu_);
  if (owns_fd_) ::close(fd_);
  fd_ = fd;
  owns_fd_ = true;
}

LogFormat Logger::format() const {
  std::lock_guard lock(mu_);
  return format_;
}

void Logger::write(const LogLine& line) {
  if (!enabled(line.level())) return;
  std::lock_guard lock(mu_);
  std::string text = line.format(format_, tag_key_, tag_);
  text += '\n';
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EIO, ENOSPC, a closed stderr: the line is dropped
    off += static_cast<size_t>(n);
  }
}

Logger& logger() {
  // Never destroyed: an I/O thread may still log while static destructors run.
  static Logger* const instance = new Logger();
  return *instance;
}

}  // namespace pagoda
