// Regular expressions (the subset in json_schema.h) -> GBNF.
//
// Semantics follow Python's `re` (the reference the tests compare against) where the
// subset allows, with one deliberate narrowing so the output is valid under both
// Python and ECMA-262 (JSON Schema's regex dialect): \d \w \s are their ASCII sets
// ([0-9], [A-Za-z0-9_], [ \t\n\v\f\r\x1c-\x1f]) and \D \W \S, and negated classes that
// contain a shorthand, are complements within ASCII. Python's Unicode-aware classes
// would otherwise accept e.g. Arabic-Indic digits for \d and reject them for \D, so the
// grammar would emit text the validator refuses; the cost is that a \W cannot be a
// non-ASCII character.
#include <algorithm>
#include <optional>
#include <string>

#include "common/utf8.h"
#include "grammar/json_schema_internal.h"

namespace pagoda::grammar::detail {

namespace {

const char* kHex = "0123456789ABCDEF";

// ---- Regex AST ----

struct Node {
  enum Kind { kEmpty, kChars, kConcat, kAlt, kRepeat } kind = kEmpty;
  CodepointRanges set;       // kChars
  std::vector<Node> kids;    // kConcat, kAlt, kRepeat (one)
  int64_t min = 0, max = 0;  // kRepeat; max kUnbounded = no maximum
};

struct TopAlternative {
  Node node;
  bool anchored_start = false;
  bool anchored_end = false;
};

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const std::string& path) : path_(path) {
    decode(pattern);
  }

  std::vector<TopAlternative> parse() {
    std::vector<TopAlternative> alts;
    while (true) {
      TopAlternative alt;
      if (peek('^')) {
        ++pos_;
        alt.anchored_start = true;
      }
      alt.node = parse_concat(0, &alt.anchored_end);
      alts.push_back(std::move(alt));
      if (pos_ >= cps_.size()) break;
      if (cps_[pos_] == '|') {
        ++pos_;
        continue;
      }
      fail("unbalanced ')'");
    }
    return alts;
  }

 private:
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  std::string path_;
  // Group nesting: 100 is far beyond any hand-written pattern and keeps the recursive
  // descent (and the GBNF nesting the grammar compiler allows, 256) bounded.
  static constexpr int kMaxDepth = 100;

  [[noreturn]] void fail(const std::string& why) const {
    throw UnsupportedSchema("pattern at " + (path_.empty() ? std::string("/") : path_) + ": " + why +
                                " (at character " + std::to_string(pos_) + ")",
                            "pattern", path_);
  }

  void decode(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      const Utf8Char u = decode_utf8_char(s, i);
      if (!u.valid) fail("invalid UTF-8");
      cps_.push_back(u.cp);
      i += u.len;
    }
  }

  bool peek(uint32_t c) const { return pos_ < cps_.size() && cps_[pos_] == c; }

  static Node chars(CodepointRanges r) {
    Node n;
    n.kind = Node::kChars;
    n.set = normalize(std::move(r));
    return n;
  }

  // Concatenation up to '|' / ')' / end. `anchored_end` (top level only) receives a
  // trailing '$'.
  Node parse_concat(int depth, bool* anchored_end) {
    Node seq;
    seq.kind = Node::kConcat;
    while (pos_ < cps_.size() && cps_[pos_] != '|' && cps_[pos_] != ')') {
      const uint32_t c = cps_[pos_];
      if (c == '$') {
        ++pos_;
        const bool at_end = pos_ >= cps_.size() || cps_[pos_] == '|';
        if (!anchored_end || !at_end) fail("'$' is supported only at the end of the pattern");
        *anchored_end = true;
        break;
      }
      if (c == '^') fail("'^' is supported only at the start of the pattern");
      Node atom = parse_atom(depth);
      parse_quantifiers(atom);
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  void parse_quantifiers(Node& atom) {
    int64_t min, max;
    if (!parse_quantifier(min, max)) return;
    Node rep;
    rep.kind = Node::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(std::move(atom));
    atom = std::move(rep);
    if (peek('?')) {
      ++pos_;  // lazy: same set of full matches / same search outcome
    } else if (peek('+')) {
      fail("possessive quantifiers are not supported");
    }
    int64_t a, b;
    const size_t save = pos_;
    if (parse_quantifier(a, b)) {
      pos_ = save;
      fail("multiple repeat");
    }
  }

  bool parse_number(int64_t& v) {
    const size_t start = pos_;
    v = 0;
    while (pos_ < cps_.size() && cps_[pos_] >= '0' && cps_[pos_] <= '9') {
      v = v * 10 + (cps_[pos_] - '0');
      if (v > 100000000) fail("repetition count too large");
      ++pos_;
    }
    return pos_ > start;
  }

  bool parse_quantifier(int64_t& min, int64_t& max) {
    if (pos_ >= cps_.size()) return false;
    switch (cps_[pos_]) {
      case '*': ++pos_; min = 0; max = kUnbounded; return true;
      case '+': ++pos_; min = 1; max = kUnbounded; return true;
      case '?': ++pos_; min = 0; max = 1; return true;
      case '{': {
        // Python reads "{" that does not start {m}, {m,}, {,n}, {m,n} as a literal.
        const size_t save = pos_;
        ++pos_;
        int64_t a = 0, b = kUnbounded;
        const bool has_a = parse_number(a);
        if (peek('}') && has_a) {
          ++pos_;
          min = max = a;
          return true;
        }
        if (peek(',')) {
          ++pos_;
          const bool has_b = parse_number(b);
          if (peek('}')) {
            ++pos_;
            min = has_a ? a : 0;
            max = has_b ? b : kUnbounded;
            if (max != kUnbounded && max < min) fail("min repeat greater than max repeat");
            return true;
          }
        }
        pos_ = save;
        return false;
      }
      default: return false;
    }
  }

  Node parse_atom(int depth) {
    const uint32_t c = cps_[pos_];
    switch (c) {
      case '(': {
        if (depth + 1 > kMaxDepth) fail("groups nested deeper than 100");
        ++pos_;
        if (peek('?')) {
          ++pos_;
          if (peek(':')) {
            ++pos_;
          } else if (peek('P') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] == '<') {
            pos_ += 2;
            while (pos_ < cps_.size() && cps_[pos_] != '>') ++pos_;
            if (pos_ >= cps_.size()) fail("unterminated group name");
            ++pos_;
          } else {
            fail("group extensions other than (?:...) and (?P<name>...) are not supported");
          }
        }
        Node alt;
        alt.kind = Node::kAlt;
        while (true) {
          alt.kids.push_back(parse_concat(depth + 1, nullptr));
          if (peek('|')) {
            ++pos_;
            continue;
          }
          if (!peek(')')) fail("missing ')'");
          ++pos_;
          break;
        }
        return alt;
      }
      case '[': return parse_class();
      case '.':
        ++pos_;
        return chars(complement({{'\n', '\n'}}));
      case '\\': return parse_escape(false);
      case '*':
      case '+':
      case '?': fail("nothing to repeat");
      case '{': {
        int64_t a, b;
        const size_t save = pos_;
        if (parse_quantifier(a, b)) {
          pos_ = save;
          fail("nothing to repeat");
        }
        pos_ = save + 1;
        return chars({{'{', '{'}});
      }
      default:
        ++pos_;
        return chars({{c, c}});
    }
  }

  static CodepointRanges shorthand(uint32_t c, bool* negated) {
    static const CodepointRanges digit = {{'0', '9'}};
    static const CodepointRanges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const CodepointRanges space = {{'\t', '\r'}, {0x1C, 0x1F}, {' ', ' '}};
    auto ascii_complement = [](const CodepointRanges& r) {
      CodepointRanges out;
      for (const auto& [a, b] : complement(r))
        if (a < 0x80) out.emplace_back(a, std::min<uint32_t>(b, 0x7F));
      return out;
    };
    *negated = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
      case 'd': return digit;
      case 'w': return word;
      case 's': return space;
      case 'D': return ascii_complement(digit);
      case 'W': return ascii_complement(word);
      case 'S': return ascii_complement(space);
      default: return {};
    }
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= cps_.size()) fail("incomplete escape");
      const uint32_t h = cps_[pos_++];
      int d = h >= '0' && h <= '9' ? int(h - '0') : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? int(h - 'A' + 10) : -1;
      if (d < 0) fail("incomplete escape");
      v = v * 16 + d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail("escape is not a Unicode scalar value");
    return v;
  }

  // After '\\'. Returns a single code point set or a shorthand class; `in_class`
  // selects Python's in-class meaning of \b (backspace).
  Node parse_escape(bool in_class, bool* is_shorthand = nullptr) {
    ++pos_;
    if (pos_ >= cps_.size()) fail("bad escape (end of pattern)");
    const uint32_t c = cps_[pos_++];
    if (is_shorthand) *is_shorthand = false;
    auto one = [](uint32_t cp) { return chars({{cp, cp}}); };
    switch (c) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        bool neg;
        if (is_shorthand) *is_shorthand = true;
        return chars(shorthand(c, &neg));
      }
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case 'a': return one('\a');
      case '0': return one(0);
      case 'x': return one(parse_hex(2));
      case 'u': return one(parse_hex(4));
      case 'U': return one(parse_hex(8));
      case 'b':
        if (in_class) return one('\b');
        fail("word boundaries (\\b) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      fail(std::string("escape \\") + static_cast<char>(c) + " is not supported");
    return one(c);  // escaped punctuation or non-ASCII: itself
  }

  Node parse_class() {
    ++pos_;  // '['
    bool negate = false;
    if (peek('^')) {
      ++pos_;
      negate = true;
    }
    CodepointRanges set;
    bool has_shorthand = false;
    bool first = true;
    while (true) {
      if (pos_ >= cps_.size()) fail("unterminated character set");
      if (cps_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      // One endpoint: a code point, or a shorthand class (which cannot start a range).
      auto endpoint = [&](bool* shorthand_out) -> CodepointRanges {
        if (cps_[pos_] == '\\') {
          bool sh = false;
          Node n = parse_escape(true, &sh);
          *shorthand_out = sh;
          return n.set;
        }
        *shorthand_out = false;
        const uint32_t cp = cps_[pos_++];
        return {{cp, cp}};
      };
      bool sh_lo;
      CodepointRanges lo = endpoint(&sh_lo);
      if (sh_lo) {
        has_shorthand = true;
        set.insert(set.end(), lo.begin(), lo.end());
        continue;
      }
      if (peek('-') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        bool sh_hi;
        CodepointRanges hi = endpoint(&sh_hi);
        if (sh_hi) fail("bad character range");
        if (hi[0].first < lo[0].first) fail("bad character range");
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.push_back(lo[0]);
      }
    }
    if (!negate) return chars(set);
    CodepointRanges comp = complement(set);
    if (has_shorthand) {
      // See the file comment: complements of shorthands stay within ASCII.
      CodepointRanges ascii;
      for (const auto& [a, b] : comp)
        if (a < 0x80) ascii.emplace_back(a, std::min<uint32_t>(b, 0x7F));
      comp = ascii;
    }
    return chars(comp);
  }
};

// ---- Emission ----

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::kEmpty: return true;
    case Node::kChars: return false;
    case Node::kConcat:
      for (const Node& k : n.kids)
        if (!nullable(k)) return false;
      return true;
    case Node::kAlt:
      for (const Node& k : n.kids)
        if (nullable(k)) return true;
      return false;
    case Node::kRepeat: return n.min == 0 || n.max == 0 || nullable(n.kids[0]);
  }
  return true;
}

// The node's language without the empty string; nullopt when nothing is left.
std::optional<Node> strip_empty(const Node& n) {
  switch (n.kind) {
    case Node::kEmpty: return std::nullopt;
    case Node::kChars: return n;
    case Node::kConcat: {
      if (!nullable(n)) return n;
      // A1 A2..Ak minus "" = A1' A2..Ak | (A2..Ak minus "") (A1 is nullable here).
      if (n.kids.empty()) return std::nullopt;
      Node rest;
      rest.kind = Node::kConcat;
      rest.kids.assign(n.kids.begin() + 1, n.kids.end());
      Node alt;
      alt.kind = Node::kAlt;
      if (std::optional<Node> first = strip_empty(n.kids[0])) {
        Node seq;
        seq.kind = Node::kConcat;
        seq.kids.push_back(std::move(*first));
        seq.kids.insert(seq.kids.end(), rest.kids.begin(), rest.kids.end());
        alt.kids.push_back(std::move(seq));
      }
      if (std::optional<Node> r = strip_empty(rest)) alt.kids.push_back(std::move(*r));
      if (alt.kids.empty()) return std::nullopt;
      if (alt.kids.size() == 1) return std::move(alt.kids[0]);
      return alt;
    }
    case Node::kAlt: {
      Node alt;
      alt.kind = Node::kAlt;
      for (const Node& k : n.kids)
        if (std::optional<Node> s = strip_empty(k)) alt.kids.push_back(std::move(*s));
      if (alt.kids.empty()) return std::nullopt;
      return alt;
    }
    case Node::kRepeat: {
      if (n.max == 0) return std::nullopt;
      if (!nullable(n.kids[0])) {
        Node rep = n;
        rep.min = std::max<int64_t>(n.min, 1);
        return rep;
      }
      // (X){m,n} with X nullable: 1..n non-empty pieces of X.
      std::optional<Node> inner = strip_empty(n.kids[0]);
      if (!inner) return std::nullopt;
      Node rep;
      rep.kind = Node::kRepeat;
      rep.min = 1;
      rep.max = n.max;
      rep.kids.push_back(std::move(*inner));
      return rep;
    }
  }
  return std::nullopt;
}

struct Lengths {
  int64_t min = 0, max = 0;  // max kUnbounded = none
};

int64_t add_len(int64_t a, int64_t b) { return a == kUnbounded || b == kUnbounded ? kUnbounded : a + b; }

class RegexEmitter {
 public:
  RegexEmitter(GbnfBuilder::Impl& b, bool json, const std::string& path) : b_(b), json_(json), path_(path) {}

  // Returns "" for the empty string; `len` receives the length range.
  std::string emit(const Node& n, Lengths& len) {
    switch (n.kind) {
      case Node::kEmpty: len = {0, 0}; return "";
      case Node::kChars: {
        len = {1, 1};
        if (n.set.empty()) throw UnsupportedSchema("pattern at " + path_ + ": empty character set",
                                                   "pattern", path_);
        if (n.set.size() == 1 && n.set[0].first == n.set[0].second) return literal(n.set[0].first);
        return json_ ? json_string_char_set(b_, n.set) : char_class(n.set);
      }
      case Node::kConcat: {
        std::string out;
        std::string pending_lit;  // consecutive single characters merged into one literal
        len = {0, 0};
        auto flush = [&] {
          if (pending_lit.empty()) return;
          if (!out.empty()) out += ' ';
          out += quote(pending_lit);
          pending_lit.clear();
        };
        for (const Node& k : n.kids) {
          Lengths kl;
          if (k.kind == Node::kChars && k.set.size() == 1 && k.set[0].first == k.set[0].second) {
            pending_lit += encode_char(k.set[0].first);
            len.min += 1;
            len.max = add_len(len.max, 1);
            continue;
          }
          std::string e = emit(k, kl);
          len.min += kl.min;
          len.max = add_len(len.max, kl.max);
          if (e.empty()) continue;
          flush();
          out += (out.empty() ? "" : " ") + e;
        }
        flush();
        return out;
      }
      case Node::kAlt: {
        std::vector<std::string> alts;
        bool has_empty = false;
        len = {INT64_MAX, 0};
        for (const Node& k : n.kids) {
          Lengths kl;
          std::string e = emit(k, kl);
          len.min = std::min(len.min, kl.min);
          len.max = (len.max == kUnbounded || kl.max == kUnbounded) ? kUnbounded : std::max(len.max, kl.max);
          if (e.empty()) {
            has_empty = true;
          } else if (std::find(alts.begin(), alts.end(), e) == alts.end()) {
            alts.push_back(e);
          }
        }
        if (alts.empty()) return "";
        std::string body;
        for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
        return "(" + body + ")" + (has_empty ? "?" : "");
      }
      case Node::kRepeat: {
        if (nullable(n.kids[0])) {
          // X{m,n} with X matching "" is (X minus ""){0,n}: a repetition of something
          // that can match nothing would be an epsilon loop (left recursion once the
          // grammar compiler expands it).
          std::optional<Node> stripped = strip_empty(n.kids[0]);
          len = {0, 0};
          if (!stripped) return "";
          Node rep = n;
          rep.min = 0;
          rep.kids[0] = std::move(*stripped);
          return emit(rep, len);
        }
        Lengths kl;
        std::string e = emit(n.kids[0], kl);
        len.min = kl.min * n.min;
        len.max = n.max == kUnbounded ? (kl.max == 0 ? 0 : kUnbounded)
                  : (kl.max == kUnbounded ? kUnbounded : kl.max * n.max);
        if (e.empty()) return "";
        if (!is_single_element(e)) e = "(" + e + ")";
        return repeat(b_, e, n.min, n.max, "pattern", path_);
      }
    }
    return "";
  }

  std::string literal(uint32_t cp) { return quote(encode_char(cp)); }

 private:
  GbnfBuilder::Impl& b_;
  bool json_;
  std::string path_;

  // The bytes the text holds for cp: itself, or (inside a JSON string) its escape.
  std::string encode_char(uint32_t cp) const {
    if (!json_) return utf8_encode(cp);
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\b': return "\\b";
      case '\f': return "\\f";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      default: break;
    }
    if (cp < 0x20) return std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
    return utf8_encode(cp);
  }

  static std::string quote(const std::string& bytes) { return gbnf_quote(bytes); }

  static bool is_single_element(const std::string& e) {
    // A rule name, a literal or a class: no top-level blank outside quotes/brackets.
    int depth = 0;
    bool in_str = false, in_cls = false;
    for (size_t i = 0; i < e.size(); ++i) {
      const char c = e[i];
      if (in_str) {
        if (c == '\\') ++i;
        else if (c == '"') in_str = false;
      } else if (in_cls) {
        if (c == '\\') ++i;
        else if (c == ']') in_cls = false;
      } else if (c == '"') {
        in_str = true;
      } else if (c == '[') {
        in_cls = true;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if ((c == ' ' || c == '|') && depth == 0) {
        return false;
      }
    }
    // "(...)?" or "x*" are single elements only when parenthesized as a whole.
    const char last = e.back();
    if (last == '?' || last == '*' || last == '+' || last == '}') return false;
    return true;
  }
};

}  // namespace

RegexResult regex_expr(GbnfBuilder::Impl& b, std::string_view pattern, RegexMode mode,
                       std::string_view name_hint, const std::string& path, const std::string& raw_char) {
  // 64 KiB of pattern: beyond any real schema's, and the text is walked once.
  if (pattern.size() > 65536)
    throw UnsupportedSchema("pattern at " + path + " is longer than 65536 bytes", "pattern", path);
  RegexParser parser(pattern, path);
  std::vector<TopAlternative> alts = parser.parse();
  const bool json = mode == RegexMode::kJsonStringSearch;
  const bool search = mode != RegexMode::kWholeText;
  if (mode == RegexMode::kRawStringSearch && raw_char.empty())
    throw std::invalid_argument("regex_expr: a raw string search needs its character rule");
  RegexEmitter emitter(b, json, path);
  RegexResult result;
  result.min_len = INT64_MAX;
  result.max_len = 0;
  std::vector<std::string> exprs;
  bool has_empty = false;
  for (const TopAlternative& alt : alts) {
    Lengths len;
    std::string e = emitter.emit(alt.node, len);
    if (search) {
      // Search semantics: an end without its anchor may have any characters around it.
      const std::string any = (json ? b.json_char() : raw_char) + "*";
      if (!alt.anchored_start) {
        e = e.empty() ? any : any + " " + e;
        len.max = kUnbounded;
      }
      if (!alt.anchored_end && !(e == any)) {
        e = e.empty() ? any : e + " " + any;
        len.max = kUnbounded;
      }
    }
    result.min_len = std::min(result.min_len, len.min);
    result.max_len = (result.max_len == kUnbounded || len.max == kUnbounded)
                         ? kUnbounded : std::max(result.max_len, len.max);
    if (e.empty()) {
      has_empty = true;
    } else {
      exprs.push_back(e);
    }
  }
  std::string body;
  for (size_t i = 0; i < exprs.size(); ++i) body += (i ? " | " : "") + exprs[i];
  if (body.empty()) {
    result.expr = "\"\"";
  } else {
    std::string name = b.define(name_hint.empty() ? "regex" : name_hint, body);
    result.expr = has_empty ? name + "?" : name;
  }
  return result;
}

}  // namespace pagoda::grammar::detail
