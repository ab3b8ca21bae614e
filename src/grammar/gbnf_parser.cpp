// GBNF (llama.cpp's dialect) -> GrammarImpl, plus the checks: undefined rules, a
// missing root, left recursion (through nullable prefixes too) and the limits.
//
// Syntax handled:
//   rule      ::= name ws "::=" ws alternates (newline | end)
//   alternates: sequence ("|" sequence)*   -- a newline may follow "|"; at the top
//               level a line may also start with "|" to continue the rule above
//   sequence  : item* where item is "literal", [class], [^class], ., name, ( alternates )
//               each optionally followed by * + ? {m} {m,} {m,n}
//   comments  : # to end of line; inside ( ) newlines are ordinary whitespace.
// Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xNN \uNNNN
// \UNNNNNNNN (a code point each, as in llama.cpp: "\xC3" is U+00C3, not a byte).
//
// Linear time: each byte is read once; the recursion (groups) is bounded by
// max_nesting; repetition output is counted against max_elements / max_rules before
// anything is copied.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "common/utf8.h"
#include "grammar/grammar_impl.h"

namespace pagoda::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// An element while parsing: kChars holds an index into the parser's charset table.
using Sequence = std::vector<Elem>;
using Alternatives = std::vector<Sequence>;

struct RuleDraft {
  std::string name;
  Alternatives alts;
  bool defined = false;
  bool generated = false;
  size_t def_offset = 0;
  size_t first_ref_offset = 0;
};

class Parser {
 public:
  Parser(std::string_view src, const GrammarLimits& limits) : src_(src), lim_(limits) {}

  void parse_all() {
    skip_space(true);
    while (pos_ < src_.size()) parse_rule();
  }

  std::vector<RuleDraft> rules;
  std::unordered_map<std::string, int32_t> rule_ids;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> charset_ranges;
  std::vector<bool> charset_negated;

  [[noreturn]] void fail_at(size_t offset, const std::string& msg) const {
    throw GrammarError(where(offset) + msg);
  }
  std::string where(size_t offset) const { return "GBNF line " + line_col(offset) + ": "; }
  std::string line_col(size_t offset) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }

 private:
  char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= src_.size(); }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space(bool newline_ok) {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string describe_here() const {
    if (at_end()) return "end of input";
    char c = src_[pos_];
    if (c == '\n' || c == '\r') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned char>(c));
      return std::string("byte ") + buf;
    }
    return std::string("'") + c + "'";
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
    if (pos_ == start) fail_at(pos_, "expecting a rule name, found " + describe_here());
    return std::string(src_.substr(start, pos_ - start));
  }

  int32_t rule_id(const std::string& name, size_t ref_offset) {
    auto [it, inserted] = rule_ids.try_emplace(name, static_cast<int32_t>(rules.size()));
    if (inserted) {
      check_rule_count();
      RuleDraft d;
      d.name = name;
      d.first_ref_offset = ref_offset;
      rules.push_back(std::move(d));
    }
    return it->second;
  }

  void check_rule_count() {
    if (rules.size() + 1 > lim_.max_rules)
      fail_at(pos_, "more than " + std::to_string(lim_.max_rules) + " rules (limit max_rules)");
  }

  void add_elements(size_t n) {
    num_elements_ += n;
    if (num_elements_ > lim_.max_elements)
      fail_at(pos_, "grammar expands to more than " + std::to_string(lim_.max_elements) +
                        " elements (limit max_elements)");
  }

  int32_t new_generated_rule(const std::string& base, size_t offset, Alternatives alts) {
    check_rule_count();
    RuleDraft d;
    // Generated names cannot clash with user names: those never contain '#'.
    d.name = base + "#" + std::to_string(rules.size());
    d.alts = std::move(alts);
    d.defined = true;
    d.generated = true;
    d.def_offset = offset;
    d.first_ref_offset = offset;
    for (const auto& s : d.alts) add_elements(s.size() + 1);
    rule_ids.emplace(d.name, static_cast<int32_t>(rules.size()));
    rules.push_back(std::move(d));
    return static_cast<int32_t>(rules.size() - 1);
  }

  void parse_rule() {
    size_t name_offset = pos_;
    std::string name = parse_name();
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail_at(pos_, "expecting '::=' after rule name '" + name + "', found " + describe_here());
    pos_ += 3;
    skip_space(true);
    int32_t id = rule_id(name, name_offset);
    if (rules[id].defined) fail_at(name_offset, "rule '" + name + "' is defined twice");
    rules[id].defined = true;
    rules[id].def_offset = name_offset;
    current_rule_ = name;
    Alternatives alts = parse_alternates(/*nested=*/false, 0);
    for (const auto& s : alts) add_elements(s.size() + 1);
    rules[id].alts = std::move(alts);
    if (!at_end()) {
      if (peek() == '\r') {
        pos_ += peek(1) == '\n' ? 2 : 1;
      } else if (peek() == '\n') {
        ++pos_;
      } else {
        fail_at(pos_, "expecting end of line after rule '" + name + "', found " + describe_here());
      }
    }
    skip_space(true);
  }

  Alternatives parse_alternates(bool nested, int depth) {
    Alternatives alts;
    alts.push_back(parse_sequence(nested, depth));
    for (;;) {
      if (peek() == '|') {
        ++pos_;
        skip_space(true);
        alts.push_back(parse_sequence(nested, depth));
        continue;
      }
      if (!nested) {
        // A top-level continuation line starting with '|' (a rule never starts with it).
        size_t save = pos_;
        skip_space(true);
        if (peek() == '|') continue;
        pos_ = save;
      }
      break;
    }
    return alts;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail_at(pos_, "expecting " + std::to_string(digits) + " hex digits in escape, found " + describe_here());
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  uint32_t parse_char() {
    size_t start = pos_;
    unsigned char c = static_cast<unsigned char>(peek());
    if (at_end()) fail_at(pos_, "unexpected end of input");
    if (c == '\\') {
      ++pos_;
      char e = peek();
      if (at_end()) fail_at(pos_, "unexpected end of input in escape");
      ++pos_;
      uint32_t cp;
      switch (e) {
        case 'x': cp = parse_hex(2); break;
        case 'u': cp = parse_hex(4); break;
        case 'U': cp = parse_hex(8); break;
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
          return static_cast<uint32_t>(e);
        default:
          pos_ = start + 1;
          fail_at(start, "unknown escape '\\" + describe_here().substr(1));
      }
      if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
        fail_at(start, "escape is not a Unicode scalar value");
      return cp;
    }
    if (c < 0x80) {
      ++pos_;
      return c;
    }
    const Utf8Char u = decode_utf8_char(src_, pos_);
    if (!u.valid) fail_at(start, "invalid UTF-8 in grammar text");
    pos_ += u.len;
    return u.cp;
  }

  int32_t charset_index(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    charset_ranges.push_back(std::move(ranges));
    charset_negated.push_back(negated);
    return static_cast<int32_t>(charset_ranges.size() - 1);
  }
  int32_t single_char(uint32_t cp) {
    auto it = single_char_sets_.find(cp);
    if (it != single_char_sets_.end()) return it->second;
    int32_t id = charset_index({{cp, cp}}, false);
    single_char_sets_.emplace(cp, id);
    return id;
  }

  uint64_t parse_count() {
    size_t start = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > lim_.max_repetition)
        fail_at(start, "repetition count over " + std::to_string(lim_.max_repetition) + " (limit max_repetition)");
      ++pos_;
    }
    if (pos_ == start) fail_at(pos_, "expecting a number in {m,n}, found " + describe_here());
    return v;
  }

  // Replaces seq[item_start, end) (the last item) with its repetition min..max
  // (max = UINT64_MAX: unbounded).
  void apply_repetition(Sequence& seq, size_t item_start, uint64_t min, uint64_t max, size_t op_offset) {
    Sequence item(seq.begin() + static_cast<ptrdiff_t>(item_start), seq.end());
    seq.resize(item_start);
    // A multi-element item (a literal) becomes one rule so copies are one reference.
    if (item.size() > 1 && (max > 1 || min > 1)) {
      int32_t r = new_generated_rule(current_rule_, op_offset, {item});
      item = {Elem{ElemKind::kRule, r}};
    }
    add_elements(item.size() * min);
    for (uint64_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max == UINT64_MAX) {
      // star ::= item star | ε  (right recursion: constant stack depth when matching)
      check_rule_count();
      int32_t star = static_cast<int32_t>(rules.size());
      Sequence rec = item;
      rec.push_back(Elem{ElemKind::kRule, star});
      new_generated_rule(current_rule_, op_offset, {rec, {}});
      add_elements(1);
      seq.push_back(Elem{ElemKind::kRule, star});
    } else if (max > min) {
      // opt_k ::= item opt_{k-1} | ε, opt_1 ::= item | ε: k = max - min rules.
      uint64_t k = max - min;
      if (rules.size() + k > lim_.max_rules)
        fail_at(op_offset, "repetition needs more than " + std::to_string(lim_.max_rules) + " rules (limit max_rules)");
      add_elements(k * (item.size() + 3));
      int32_t inner = -1;
      for (uint64_t i = 0; i < k; ++i) {
        Sequence s = item;
        if (inner >= 0) s.push_back(Elem{ElemKind::kRule, inner});
        inner = new_generated_rule(current_rule_, op_offset, {s, {}});
      }
      seq.push_back(Elem{ElemKind::kRule, inner});
    }
  }

  Sequence parse_sequence(bool nested, int depth) {
    Sequence seq;
    size_t last_start = SIZE_MAX;
    for (;;) {
      char c = peek();
      size_t item_offset = pos_;
      if (at_end()) break;
      if (c == '"') {
        ++pos_;
        last_start = seq.size();
        while (!at_end() && peek() != '"') seq.push_back(Elem{ElemKind::kChars, single_char(parse_char())});
        if (at_end()) fail_at(item_offset, "unterminated string literal");
        ++pos_;
        add_elements(0);
      } else if (c == '[') {
        ++pos_;
        bool negated = false;
        if (peek() == '^') {
          negated = true;
          ++pos_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (!at_end() && peek() != ']') {
          size_t char_offset = pos_;
          uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail_at(char_offset, "character range is out of order");
          }
          ranges.emplace_back(lo, hi);
        }
        if (at_end()) fail_at(item_offset, "unterminated character class");
        ++pos_;
        last_start = seq.size();
        seq.push_back(Elem{ElemKind::kChars, charset_index(std::move(ranges), negated)});
      } else if (c == '.') {
        ++pos_;
        last_start = seq.size();
        seq.push_back(Elem{ElemKind::kChars, charset_index({{0, kMaxCodePoint}}, false)});
      } else if (is_name_char(c)) {
        std::string name = parse_name();
        last_start = seq.size();
        seq.push_back(Elem{ElemKind::kRule, rule_id(name, item_offset)});
      } else if (c == '(') {
        if (depth + 1 > lim_.max_nesting)
          fail_at(pos_, "groups nested deeper than " + std::to_string(lim_.max_nesting) + " (limit max_nesting)");
        ++pos_;
        skip_space(true);
        Alternatives sub = parse_alternates(/*nested=*/true, depth + 1);
        if (peek() != ')') fail_at(pos_, "expecting ')' to close the group opened at " + line_col(item_offset) + ", found " + describe_here());
        ++pos_;
        last_start = seq.size();
        seq.push_back(Elem{ElemKind::kRule, new_generated_rule(current_rule_, item_offset, std::move(sub))});
      } else if (c == '*' || c == '+' || c == '?') {
        if (last_start == SIZE_MAX) fail_at(pos_, std::string("expecting an item before '") + c + "'");
        ++pos_;
        uint64_t min = c == '+' ? 1 : 0, max = c == '?' ? 1 : UINT64_MAX;
        apply_repetition(seq, last_start, min, max, item_offset);
        last_start = SIZE_MAX;  // "a**" is an error, as in llama.cpp
      } else if (c == '{') {
        if (last_start == SIZE_MAX) fail_at(pos_, "expecting an item before '{'");
        ++pos_;
        skip_space(nested);
        uint64_t min = parse_count(), max = min;
        skip_space(nested);
        if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          max = (peek() >= '0' && peek() <= '9') ? parse_count() : UINT64_MAX;
          skip_space(nested);
        }
        if (peek() != '}') fail_at(pos_, "expecting '}' in repetition, found " + describe_here());
        ++pos_;
        if (max < min) fail_at(item_offset, "repetition {m,n} with n < m");
        apply_repetition(seq, last_start, min, max, item_offset);
        last_start = SIZE_MAX;
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  std::string_view src_;
  size_t pos_ = 0;
  const GrammarLimits& lim_;
  size_t num_elements_ = 0;
  std::string current_rule_;
  std::unordered_map<uint32_t, int32_t> single_char_sets_;
};

// Nullable rules, in linear time: an alternative becomes nullable once every
// element of it is a nullable rule reference (counted per occurrence).
std::vector<bool> nullable_rules(const std::vector<RuleDraft>& rules) {
  size_t n = rules.size();
  std::vector<bool> nullable(n, false);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> occurrences(n);  // rule -> (rule, alt)
  std::vector<std::vector<int32_t>> remaining(n);
  std::vector<int32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    remaining[r].resize(rules[r].alts.size());
    for (size_t a = 0; a < rules[r].alts.size(); ++a) {
      const Sequence& s = rules[r].alts[a];
      bool has_chars = std::any_of(s.begin(), s.end(), [](const Elem& e) { return e.kind == ElemKind::kChars; });
      if (has_chars) {
        remaining[r][a] = -1;
        continue;
      }
      remaining[r][a] = static_cast<int32_t>(s.size());
      for (const Elem& e : s) occurrences[e.arg].emplace_back(static_cast<int32_t>(r), static_cast<int32_t>(a));
      if (s.empty() && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(static_cast<int32_t>(r));
      }
    }
  }
  while (!queue.empty()) {
    int32_t x = queue.back();
    queue.pop_back();
    for (auto [r, a] : occurrences[x]) {
      if (--remaining[r][a] == 0 && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(r);
      }
    }
  }
  return nullable;
}

// Left recursion: rule A reaches rule B when B appears in one of A's alternatives
// after only nullable references. A cycle in that graph means a rule can derive
// itself without consuming input (the matcher would expand forever). Iterative DFS.
void check_left_recursion(const Parser& p, const std::vector<RuleDraft>& rules, const std::vector<bool>& nullable) {
  size_t n = rules.size();
  std::vector<std::vector<int32_t>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules[r].alts) {
      for (const Elem& e : s) {
        if (e.kind != ElemKind::kRule) break;
        edges[r].push_back(e.arg);
        if (!nullable[e.arg]) break;
      }
    }
  }
  enum : uint8_t { kWhite, kGrey, kBlack };
  std::vector<uint8_t> color(n, kWhite);
  std::vector<std::pair<int32_t, size_t>> stack;  // (rule, next edge index)
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != kWhite) continue;
    stack.emplace_back(static_cast<int32_t>(start), 0);
    color[start] = kGrey;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == edges[r].size()) {
        color[r] = kBlack;
        stack.pop_back();
        continue;
      }
      int32_t next = edges[r][i++];
      if (color[next] == kGrey) {
        // Name the cycle by its user-written rules (generated ones are parts of them).
        size_t k = stack.size();
        while (k > 0 && stack[k - 1].first != next) --k;
        std::vector<std::string> names;
        const RuleDraft* first_user = nullptr;
        for (size_t j = k - 1; j < stack.size(); ++j) {
          const RuleDraft& d = rules[stack[j].first];
          if (!first_user && !d.generated) first_user = &d;
          std::string shown = d.name.substr(0, d.name.find('#'));
          if (names.empty() || names.back() != shown) names.push_back(shown);
        }
        std::string path;
        for (const auto& s : names) path += s + " -> ";
        path += names.front();
        const RuleDraft& at = first_user ? *first_user : rules[next];
        std::string msg = "left recursion: rule '" + at.name.substr(0, at.name.find('#')) +
                          "' can reach itself without consuming input (" + path + ")";
        if (!first_user) msg += "; a repeated item that can match empty text does this";
        p.fail_at(at.def_offset, msg);
      }
      if (color[next] == kWhite) {
        color[next] = kGrey;
        stack.emplace_back(next, 0);
      }
    }
  }
}

// Productive rules, in linear time: a rule is productive once one of its alternatives
// has only productive elements (a non-empty character set, or a productive rule).
// The grammar's language is empty exactly when the root is not productive: e.g.
// `root ::= [^\x00-\U0010FFFF]` (a set with no member), or a rule that can only recurse.
std::vector<bool> productive_rules(const GrammarImpl& g) {
  const size_t n = g.rules.size();
  std::vector<bool> productive(n, false);
  std::vector<std::vector<int32_t>> occurrences(n);  // rule -> alternatives referencing it (per occurrence)
  std::vector<int32_t> remaining(g.alt_starts.size(), 0);
  std::vector<int32_t> alt_rule(g.alt_starts.size(), 0);
  std::vector<int32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    for (int32_t a = g.rules[r].alt_begin; a < g.rules[r].alt_end; ++a) {
      alt_rule[a] = static_cast<int32_t>(r);
      bool dead = false;
      for (int32_t e = g.alt_starts[a]; g.elems[e].kind != ElemKind::kEnd; ++e) {
        const Elem& el = g.elems[e];
        if (el.kind == ElemKind::kChars) {
          dead = dead || g.charsets[el.arg].empty();
        } else {
          ++remaining[a];
          occurrences[el.arg].push_back(a);
        }
      }
      if (dead) {
        remaining[a] = -1;  // never productive
      } else if (remaining[a] == 0 && !productive[r]) {
        productive[r] = true;
        queue.push_back(static_cast<int32_t>(r));
      }
    }
  }
  while (!queue.empty()) {
    const int32_t x = queue.back();
    queue.pop_back();
    for (int32_t a : occurrences[x]) {
      if (remaining[a] > 0 && --remaining[a] == 0 && !productive[alt_rule[a]]) {
        productive[alt_rule[a]] = true;
        queue.push_back(alt_rule[a]);
      }
    }
  }
  return productive;
}

}  // namespace

void parse_gbnf(std::string_view text, std::string_view root, GrammarImpl& g) {
  const GrammarLimits& lim = g.limits;
  if (text.size() > lim.max_text_bytes)
    throw GrammarError("GBNF text is " + std::to_string(text.size()) + " bytes, over the limit of " +
                       std::to_string(lim.max_text_bytes) + " (max_text_bytes)");
  Parser p(text, lim);
  p.parse_all();
  for (const RuleDraft& d : p.rules)
    if (!d.defined) p.fail_at(d.first_ref_offset, "undefined rule '" + d.name + "'");
  auto root_it = p.rule_ids.find(std::string(root));
  if (root_it == p.rule_ids.end())
    throw GrammarError("GBNF line 1:1: grammar has no rule named '" + std::string(root) + "' (the start rule)");
  std::vector<bool> nullable = nullable_rules(p.rules);
  check_left_recursion(p, p.rules, nullable);

  g.root_rule = root_it->second;
  g.charsets.reserve(p.charset_ranges.size());
  for (size_t i = 0; i < p.charset_ranges.size(); ++i)
    g.charsets.push_back(Charset::from_ranges(std::move(p.charset_ranges[i]), p.charset_negated[i]));
  g.rules.resize(p.rules.size());
  for (size_t r = 0; r < p.rules.size(); ++r) {
    RuleDraft& d = p.rules[r];
    RuleInfo& info = g.rules[r];
    info.name = std::move(d.name);
    info.src_offset = d.def_offset;
    info.generated = d.generated;
    info.alt_begin = static_cast<int32_t>(g.alt_starts.size());
    for (const Sequence& s : d.alts) {
      g.alt_starts.push_back(static_cast<int32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), s.begin(), s.end());
      g.elems.push_back(Elem{ElemKind::kEnd, static_cast<int32_t>(r)});
    }
    info.alt_end = static_cast<int32_t>(g.alt_starts.size());
    Alternatives().swap(d.alts);
  }
  // A grammar no text satisfies would leave the sampler nothing to allow but the end,
  // and an empty answer that the grammar does not accept would be reported as a stop.
  if (!productive_rules(g)[g.root_rule])
    p.fail_at(p.rules[g.root_rule].def_offset,
              "the grammar accepts no text: rule '" + std::string(root) +
                  "' can never be completed (a character class with no member, such as [^\\x00-\\U0010FFFF], "
                  "or rules that only refer to each other)");
}

Charset Charset::from_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : ranges) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> comp;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) comp.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) comp.emplace_back(next, kMaxCodePoint);
    merged.swap(comp);
  }
  Charset cs;
  for (auto [lo, hi] : merged) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 127); ++c) cs.ascii[c >> 6] |= uint64_t{1} << (c & 63);
    if (hi < 128) continue;
    lo = std::max<uint32_t>(lo, 128);
    // Surrogates are not characters: cut them out.
    if (lo < 0xD800 && hi >= 0xD800) {
      cs.wide.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) cs.wide.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cs.wide.emplace_back(0xE000, hi);
    } else {
      cs.wide.emplace_back(lo, hi);
    }
  }
  return cs;
}

bool Charset::contains_wide(uint32_t cp) const {
  auto it = std::upper_bound(wide.begin(), wide.end(), cp,
                             [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
  return it != wide.begin() && cp <= std::prev(it)->second;
}

bool Charset::intersects_wide(uint32_t lo, uint32_t hi) const {
  // The first range ending at or after lo must start at or before hi.
  auto it = std::lower_bound(wide.begin(), wide.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
  return it != wide.end() && it->first <= hi;
}

bool Charset::contains_wide_range(uint32_t lo, uint32_t hi) const {
  auto it = std::lower_bound(wide.begin(), wide.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
  return it != wide.end() && it->first <= lo && it->second >= hi;
}

}  // namespace pagoda::grammar
