// jinja::tokenize (see lexer.h). Mirrors jinja2/lexer.py: the root rule
// finds the next `{{` / `{%` / `{#`, the tag rules match end tags before
// operators, and end tags are ignored while brackets are open.
#include "jinja/lexer.h"

#include <cctype>
#include <algorithm>
#include <cstring>

#include "jinja/value.h"

namespace pagoda::jinja {

namespace {

std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python str.rstrip(): ASCII whitespace plus the Unicode spaces.
std::string rstrip_py(const std::string& s) {
  std::u32string u = decode_utf8(s);
  size_t n = u.size();
  while (n > 0 && is_py_space(u[n - 1])) --n;
  return encode_utf8(std::u32string_view(u).substr(0, n));
}

// Length of the Python-whitespace run at s[pos...].
size_t skip_py_space(const std::string& s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    if (is_ws(s[p]) || (s[p] >= 0x1c && s[p] <= 0x1f)) {
      ++p;
      continue;
    }
    unsigned char c = static_cast<unsigned char>(s[p]);
    if (c >= 0x80) {
      size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      std::u32string u = decode_utf8(s.substr(p, n));
      if (u.size() == 1 && is_py_space(u[0])) {
        p += n;
        continue;
      }
    }
    break;
  }
  return p - pos;
}

int count_nl(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python "unicode-escape" decoding of a string literal body.
std::string decode_escapes(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          int h = i + 1 + k < body.size() ? hexval(body[i + 1 + k]) : -1;
          if (h < 0) throw SyntaxError("truncated \\" + std::string(1, e) + " escape in a string literal", line);
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        i += n;
        out += encode_utf8(std::u32string(1, cp));
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          out += encode_utf8(std::u32string(1, cp));
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

const char* const kOpens[3] = {"{{", "{%", "{#"};

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {
    for (int k = 0; k < 3; ++k) next_open_[k] = s_.find(kOpens[k]);
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      // The next of each opener, searched again only once passed: searching all
      // three from pos_ every time would rescan to the end of a template without
      // comments at every tag (quadratic: 50,000 tags took minutes).
      size_t tag = std::string::npos;
      for (int k = 0; k < 3; ++k) {
        if (next_open_[k] != std::string::npos && next_open_[k] < pos_) next_open_[k] = s_.find(kOpens[k], pos_);
        tag = std::min(tag, next_open_[k]);
      }
      if (tag == std::string::npos) {
        emit_data(s_.substr(pos_));
        line_ += count_nl(s_, pos_, s_.size());
        pos_ = s_.size();
        break;
      }
      char kind = s_[tag + 1];
      char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      std::string text = s_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = rstrip_py(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size(); ++i)
            if (!is_ws(text[i])) all_ws = false;
          if (all_ws) text.resize(l_pos);
        }
      }
      int text_line = line_;
      line_ += count_nl(s_, pos_, tag);
      emit_data(std::move(text), text_line);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else {
        line_starting = tag_body(kind == '{');
      }
    }
    toks_.push_back({Token::Type::Eof, "", line_});
    return std::move(toks_);
  }

 private:
  void emit_data(std::string text, int line = -1) {
    if (!text.empty()) toks_.push_back({Token::Type::Data, std::move(text), line < 0 ? line_ : line});
  }

  // After `{#`: returns whether the consumed end ended with a newline.
  bool comment() {
    size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) throw SyntaxError("missing end of comment tag", line_);
    char sign = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    line_ += count_nl(s_, pos_, end);
    pos_ = end + 2;
    return after_end(sign);
  }

  // Consumes what follows an end tag; returns whether it ended with '\n'.
  bool after_end(char sign) {
    if (sign == '-') {
      size_t n = skip_py_space(s_, pos_);
      line_ += count_nl(s_, pos_, pos_ + n);
      pos_ += n;
      return n > 0 && s_[pos_ - 1] == '\n';
    }
    if (sign != '+' && trim_newline_ && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
      return true;
    }
    return false;
  }

  bool tag_body(bool is_var) {
    toks_.push_back({is_var ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line_});
    int depth = 0;
    const char* end = is_var ? "}}" : "%}";
    while (true) {
      if (pos_ >= s_.size()) throw SyntaxError(std::string("unexpected end of template, expected '") + end + "'", line_);
      char c = s_[pos_];
      if (is_ws(c)) {
        line_ += c == '\n';
        ++pos_;
        continue;
      }
      if (depth == 0) {
        char sign = 0;
        size_t p = pos_;
        if ((c == '-' || c == '+') && s_.compare(pos_ + 1, 2, end) == 0) {
          sign = c;
          ++p;
        }
        if (s_.compare(p, 2, end) == 0 && (sign != '+' || !is_var)) {
          pos_ = p + 2;
          toks_.push_back({is_var ? Token::Type::VarEnd : Token::Type::BlockEnd, "", line_});
          trim_newline_ = !is_var;
          bool r = after_end(sign);
          trim_newline_ = true;
          return r;
        }
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        toks_.push_back({Token::Type::Name, s_.substr(b, pos_ - b), line_});
      } else if (c == '\'' || c == '"') {
        string_lit(c);
      } else {
        static const char* ops2[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* o : ops2)
          if (s_.compare(pos_, 2, o) == 0) op = o;
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}><=.:|,;", c)) throw SyntaxError(std::string("unexpected char '") + c + "'", line_);
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        pos_ += op.size();
        toks_.push_back({Token::Type::Op, op, line_});
      }
    }
  }

  void number() {
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                  (s_[pos_] == '_' && pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])))))
        ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])) &&
        (b == 0 || s_[b - 1] != '.')) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E') && (b == 0 || s_[b - 1] != '.')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i)
      if (s_[i] != '_') text += s_[i];
    toks_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line_});
  }

  void string_lit(char q) {
    size_t b = ++pos_;
    int start_line = line_;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '\n') ++line_;
      ++pos_;
    }
    if (pos_ >= s_.size()) throw SyntaxError("unterminated string literal", start_line);
    std::string body = s_.substr(b, pos_ - b);
    ++pos_;
    toks_.push_back({Token::Type::String, decode_escapes(body, start_line), start_line});
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool trim_newline_ = true;
  std::vector<Token> toks_;
  size_t next_open_[3];  // where "{{", "{%", "{#" occur next (npos: no more); stale when < pos_
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace pagoda::jinja
