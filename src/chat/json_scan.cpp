#include "chat/json_scan.h"

#include <nlohmann/json.hpp>

namespace pagoda::chat::detail {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view text, size_t pos) {
  while (pos < text.size() && is_ws(text[pos])) ++pos;
  return pos;
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

ScanResult incomplete() { return {ScanStatus::Incomplete, 0}; }
ScanResult invalid() { return {ScanStatus::Invalid, 0}; }
ScanResult complete(size_t end) { return {ScanStatus::Complete, end}; }

ScanResult scan_string(std::string_view t, size_t pos) {
  // t[pos] == '"'
  size_t i = pos + 1;
  while (i < t.size()) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c == '"') return complete(i + 1);
    if (c < 0x20) return invalid();
    if (c == '\\') {
      if (i + 1 >= t.size()) return incomplete();
      const char e = t[i + 1];
      if (e == 'u') {
        for (size_t k = 0; k < 4; ++k) {
          if (i + 2 + k >= t.size()) return incomplete();
          if (!is_hex(t[i + 2 + k])) return invalid();
        }
        i += 6;
        continue;
      }
      if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't')
        return invalid();
      i += 2;
      continue;
    }
    ++i;
  }
  return incomplete();
}

ScanResult scan_number(std::string_view t, size_t pos) {
  size_t i = pos;
  if (t[i] == '-') ++i;
  if (i >= t.size()) return incomplete();
  if (t[i] == '0') {
    ++i;
  } else if (is_digit(t[i])) {
    while (i < t.size() && is_digit(t[i])) ++i;
  } else {
    return invalid();
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (i >= t.size()) return incomplete();
    if (!is_digit(t[i])) return invalid();
    while (i < t.size() && is_digit(t[i])) ++i;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (i >= t.size()) return incomplete();
    if (!is_digit(t[i])) return invalid();
    while (i < t.size() && is_digit(t[i])) ++i;
  }
  // A number running into the end of the text may go on.
  if (i >= t.size()) return incomplete();
  return complete(i);
}

ScanResult scan_literal(std::string_view t, size_t pos, std::string_view word) {
  for (size_t k = 0; k < word.size(); ++k) {
    if (pos + k >= t.size()) return incomplete();
    if (t[pos + k] != word[k]) return invalid();
  }
  return complete(pos + word.size());
}

// Iterative over an explicit stack of open containers so depth costs no recursion.
ScanResult scan_value_iter(std::string_view t, size_t pos) {
  std::vector<char> stack;  // '{' or '['
  // Expectation after a value inside a container: ',' or the closer.
  enum class Want { Value, KeyOrClose, Key, Colon, CommaOrClose, ValueOrClose };
  Want want = Want::Value;
  size_t i = pos;
  while (true) {
    if (!stack.empty() || want != Want::Value || i != pos) i = skip_ws(t, i);
    if (i >= t.size()) return incomplete();
    const char c = t[i];
    switch (want) {
      case Want::Value:
      case Want::ValueOrClose: {
        if (want == Want::ValueOrClose && c == ']') {
          stack.pop_back();
          ++i;
          if (stack.empty()) return complete(i);
          want = Want::CommaOrClose;
          break;
        }
        if (c == '{' || c == '[') {
          if (static_cast<int>(stack.size()) >= kMaxJsonDepth) return invalid();
          stack.push_back(c);
          ++i;
          want = c == '{' ? Want::KeyOrClose : Want::ValueOrClose;
          break;
        }
        ScanResult r;
        if (c == '"') r = scan_string(t, i);
        else if (c == '-' || is_digit(c)) r = scan_number(t, i);
        else if (c == 't') r = scan_literal(t, i, "true");
        else if (c == 'f') r = scan_literal(t, i, "false");
        else if (c == 'n') r = scan_literal(t, i, "null");
        else return invalid();
        if (r.status != ScanStatus::Complete) {
          // A number at the end of the text inside a container is just unfinished.
          return r;
        }
        i = r.end;
        if (stack.empty()) return complete(i);
        want = Want::CommaOrClose;
        break;
      }
      case Want::KeyOrClose:
      case Want::Key: {
        if (want == Want::KeyOrClose && c == '}') {
          stack.pop_back();
          ++i;
          if (stack.empty()) return complete(i);
          want = Want::CommaOrClose;
          break;
        }
        if (c != '"') return invalid();
        ScanResult r = scan_string(t, i);
        if (r.status != ScanStatus::Complete) return r;
        i = r.end;
        want = Want::Colon;
        break;
      }
      case Want::Colon:
        if (c != ':') return invalid();
        ++i;
        want = Want::Value;
        break;
      case Want::CommaOrClose: {
        const char closer = stack.back() == '{' ? '}' : ']';
        if (c == closer) {
          stack.pop_back();
          ++i;
          if (stack.empty()) return complete(i);
          break;
        }
        if (c != ',') return invalid();
        ++i;
        want = stack.back() == '{' ? Want::Key : Want::Value;
        break;
      }
    }
  }
}

}  // namespace

ScanResult scan_json_value(std::string_view text, size_t pos) {
  if (pos >= text.size()) return incomplete();
  const char c = text[pos];
  if (c == '-' || is_digit(c)) {
    // A top-level number is complete only when something follows it.
    return scan_number(text, pos);
  }
  return scan_value_iter(text, pos);
}

std::vector<JsonMember> object_members(std::string_view text, size_t begin, size_t end) {
  std::vector<JsonMember> out;
  std::string_view t = text.substr(0, end);
  size_t i = skip_ws(t, begin);
  if (i >= t.size() || t[i] != '{') return {};
  i = skip_ws(t, i + 1);
  if (i < t.size() && t[i] == '}') return out;
  while (i < t.size()) {
    if (t[i] != '"') return {};
    ScanResult k = scan_string(t, i);
    if (k.status != ScanStatus::Complete) return {};
    JsonMember m;
    try {
      m.key = nlohmann::json::parse(t.substr(i, k.end - i)).get<std::string>();
    } catch (const std::exception&) {
      return {};  // e.g. an escaped lone surrogate
    }
    i = skip_ws(t, k.end);
    if (i >= t.size() || t[i] != ':') return {};
    i = skip_ws(t, i + 1);
    ScanResult v = scan_json_value(t, i);
    if (v.status != ScanStatus::Complete) {
      // A bare number ending exactly at `end` scans Incomplete on the truncated view.
      if (v.status == ScanStatus::Incomplete) {
        ScanResult full = scan_json_value(text, i);
        if (full.status != ScanStatus::Complete || full.end > end) return {};
        v = full;
      } else {
        return {};
      }
    }
    m.value_begin = i;
    m.value_end = v.end;
    out.push_back(std::move(m));
    i = skip_ws(t, v.end);
    if (i < t.size() && t[i] == ',') {
      i = skip_ws(t, i + 1);
      continue;
    }
    if (i < t.size() && t[i] == '}') return out;
    return {};
  }
  return {};
}

}  // namespace pagoda::chat::detail
