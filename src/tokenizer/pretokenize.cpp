#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace pagoda::tokenizer_detail {

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Frees the match data of one find_all() call on every exit path.
struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                                   &err_offset, nullptr);
  if (code == nullptr) {
    throw Error("regex '" + pattern + "': " + pcre2_message(err) + " at offset " +
                std::to_string(err_offset));
  }
  // JIT makes the Llama 3 pattern ~10x faster; without JIT support pcre2_match
  // falls back to the interpreter by itself, so a failure here is harmless.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  const pcre2_code* code = as_code(code_);
  MatchData data(code);
  if (data.md == nullptr) throw Error("regex '" + pattern_ + "': out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code, subject, s.size(), pos, 0, data.md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT stack (32 KiB) can run out on very long runs of one class; the
      // interpreter keeps its backtracking frames on the heap instead.
      rc = pcre2_match(code, subject, s.size(), pos, PCRE2_NO_JIT, data.md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("regex '" + pattern_ + "': match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      pos = end;
    } else {
      // An empty match yields no piece; step over one character.
      if (begin >= s.size()) break;
      pos = begin + utf8_char_len(s, begin);
    }
  }
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z') || c == '_';
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::prepend:
        if (!text.empty()) text.insert(0, step.content);
        break;
      case NormalizerStep::Kind::replace: {
        if (!step.regex) {
          text = replace_all(text, step.pattern, step.content);
          break;
        }
        const auto matches = step.regex->find_all(text);
        if (matches.empty()) break;
        std::string out;
        out.reserve(text.size() + matches.size() * step.content.size());
        size_t prev = 0;
        for (const auto& [b, e] : matches) {
          out.append(text, prev, b - prev);
          out += step.content;
          prev = e;
        }
        out.append(text, prev, std::string::npos);
        text = std::move(out);
        break;
      }
    }
  }
  return text;
}

void split_piece(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  struct Segment {
    size_t begin, end;
    bool is_match;
  };
  // Cover the whole piece with alternating gap / match segments.
  std::vector<Segment> segs;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev < piece.size()) segs.push_back({prev, piece.size(), false});
  if (invert) {
    for (Segment& s : segs) s.is_match = !s.is_match;
  }

  // Fold the delimiters per behavior: the same folds as HF's
  // NormalizedString::split, done left to right, so edge cases such as a
  // delimiter at the start come out identically. [cur_begin, cur_end) is the
  // piece being built.
  size_t cur_begin = std::string_view::npos, cur_end = 0;
  auto emit = [&] {
    if (cur_begin != std::string_view::npos && cur_end > cur_begin) {
      out.emplace_back(piece.substr(cur_begin, cur_end - cur_begin));
    }
    cur_begin = std::string_view::npos;
  };
  auto start = [&](const Segment& s) {
    emit();
    cur_begin = s.begin;
    cur_end = s.end;
  };
  bool previous_match = false;
  bool join_next = false;  // merged_with_next: the current delimiter waits for its piece
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& s = segs[i];
    const bool have_piece = cur_begin != std::string_view::npos;
    switch (behavior) {
      case SplitBehavior::removed:
        if (!s.is_match) start(s);
        break;
      case SplitBehavior::isolated:
        start(s);
        break;
      case SplitBehavior::merged_with_previous:
        if (s.is_match && !previous_match && have_piece) {
          cur_end = s.end;
        } else {
          start(s);
        }
        break;
      case SplitBehavior::merged_with_next:
        if (join_next) {
          cur_end = s.end;
          join_next = false;
        } else {
          start(s);
          join_next = s.is_match && i + 1 < segs.size() && !segs[i + 1].is_match;
        }
        break;
      case SplitBehavior::contiguous:
        if (s.is_match == previous_match && have_piece) {
          cur_end = s.end;
        } else {
          start(s);
        }
        break;
    }
    previous_match = s.is_match;
  }
  emit();
}

namespace {

// byte -> code point of the GPT-2 byte-level alphabet, and back.
struct ByteLevelTables {
  std::array<std::string, 256> encoded;  // UTF-8 of each byte's code point
  std::array<int16_t, 324> decoded;      // code point -> byte, -1 outside the alphabet
  ByteLevelTables() {
    decoded.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? b : next_extra++;
      append_utf8(encoded[b], cp);
      decoded[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

void apply_step(const PreTokenizerStep& step, std::string_view piece, bool first_piece,
                std::vector<std::string>& out) {
  switch (step.kind) {
    case PreTokenizerStep::Kind::split:
      split_piece(piece, step.regex->find_all(piece), step.behavior, step.invert, out);
      return;
    case PreTokenizerStep::Kind::byte_level: {
      std::string text;
      text.reserve(piece.size() + 1);
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) text.push_back(' ');
      text.append(piece);
      std::vector<std::string> parts;
      if (step.use_regex) {
        split_piece(text, step.regex->find_all(text), SplitBehavior::isolated, false, parts);
      } else {
        parts.push_back(std::move(text));
      }
      for (const std::string& p : parts) out.push_back(byte_level_encode(p));
      return;
    }
    case PreTokenizerStep::Kind::metaspace: {
      std::string text;
      text.reserve(piece.size() + 3);
      for (char c : piece) {
        if (c == ' ') {
          text += step.replacement;
        } else {
          text.push_back(c);
        }
      }
      const bool prepend = step.prepend_scheme == PrependScheme::always ||
                           (step.prepend_scheme == PrependScheme::first && first_piece);
      if (prepend && text.compare(0, step.replacement.size(), step.replacement) != 0) {
        text.insert(0, step.replacement);
      }
      if (!step.split) {
        out.push_back(std::move(text));
        return;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t p = text.find(step.replacement); p != std::string::npos;
           p = text.find(step.replacement, p + step.replacement.size())) {
        matches.emplace_back(p, p + step.replacement.size());
      }
      split_piece(text, matches, SplitBehavior::merged_with_next, false, out);
      return;
    }
  }
}

}  // namespace

std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string text,
                                      bool at_input_start) {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(std::move(text));
  std::vector<std::string> next;
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      apply_step(step, pieces[i], at_input_start && i == 0, next);
    }
    pieces.swap(next);
  }
  return pieces;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (size_t p = s.find(from); p != std::string_view::npos; p = s.find(from, prev)) {
    out.append(s.substr(prev, p - prev));
    out.append(to);
    prev = p + from.size();
  }
  out.append(s.substr(prev));
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelTables& t = byte_level_tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.encoded[static_cast<uint8_t>(c)];
  return out;
}

std::string byte_level_decode(std::string_view text) {
  const ByteLevelTables& t = byte_level_tables();
  std::string out;
  out.reserve(text.size());
  // A character outside the alphabet, and every ill-formed unit (an overlong "C1 A1"
  // is not 'a'), is copied as it is.
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Char c = decode_utf8_char(text, i);
    if (c.valid && c.cp < t.decoded.size() && t.decoded[c.cp] >= 0) {
      out.push_back(static_cast<char>(t.decoded[c.cp]));
    } else {
      out.append(text.substr(i, c.len));
    }
    i += c.len;
  }
  return out;
}

}  // namespace pagoda::tokenizer_detail
