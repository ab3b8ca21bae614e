// String-shaped pieces of the schema compiler: string formats, enum/const values as a
// prefix tree of literals, and object keys that are none of a set of names.
#include <algorithm>
#include <map>
#include <string>

#include "common/json_text.h"
#include "common/utf8.h"
#include "grammar/json_schema_internal.h"

namespace pagoda::grammar::detail {
namespace {

std::string date_rule(GbnfBuilder::Impl& b) {
  const std::string mult4 = "(\"0\" [48] | [2468] [048] | [13579] [26])";
  // Year 0001-9999 (Python's date has no year 0), day valid for its month, and
  // February 29 only in leap years (divisible by 4; centuries by 400).
  return b.define(
      "date",
      "([1-9] [0-9]{3} | \"0\" ([1-9] [0-9]{2} | \"0\" ([1-9] [0-9] | \"0\" [1-9]))) \"-\" ("
      "(\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
      "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
      "\"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) | "
      "([0-9] [0-9] " + mult4 + " | " + mult4 + " \"00\") \"-02-29\"");
}

std::string time_rule(GbnfBuilder::Impl& b) {
  // RFC 3339 full-time; seconds 00-59 (a leap second :60 is valid RFC 3339 but not
  // for Python's datetime), fraction up to 9 digits (nanoseconds).
  return b.define("time",
                   "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
                   "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])");
}

std::string literal_of(const std::u32string& text, size_t from, size_t to) {
  std::string bytes;
  for (size_t i = from; i < to; ++i) bytes += utf8_encode(text[i]);
  return gbnf_quote(bytes);
}

// One JSON-string character (raw or short escape) whose decoded value is not in
// `excluded`; "" when nothing is left.
std::string short_char_set(GbnfBuilder::Impl& b, const CodepointRanges& excluded) {
  CodepointRanges allowed = complement(excluded);
  CodepointRanges filtered;
  // Control characters without a short escape are left out (they would need \u).
  const CodepointRanges short_ok = normalize(
      {{'\b', '\b'}, {'\t', '\n'}, {'\f', '\r'}, {0x20, 0xD7FF}, {0xE000, 0x10FFFF}});
  for (const auto& [a, b2] : allowed)
    for (const auto& [x, y] : short_ok) {
      const uint32_t lo = std::max(a, x), hi = std::min(b2, y);
      if (lo <= hi) filtered.emplace_back(lo, hi);
    }
  if (filtered.empty()) return "";
  return json_string_char_set(b, filtered);
}

std::string json_escape_cp(uint32_t cp) {
  const std::string quoted = dump_json(nlohmann::json(utf8_encode(cp)));
  return quoted.substr(1, quoted.size() - 2);
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view s) {
  const std::u32string cps = pagoda::decode_utf8(s);
  return std::vector<uint32_t>(cps.begin(), cps.end());
}

// The rule for a string format's content; [min_len, max_len] receives its length range.
std::string format_rule(GbnfBuilder::Impl& b, const std::string& format, const std::string& path, int64_t& min_len, int64_t& max_len) {
  if (format == "date") {
    min_len = max_len = 10;
    return date_rule(b);
  }
  if (format == "time") {
    min_len = 9;
    max_len = 24;
    return time_rule(b);
  }
  if (format == "date-time") {
    min_len = 20;
    max_len = 35;
    return b.define("date-time", date_rule(b) + " \"T\" " + time_rule(b));
  }
  if (format == "uuid") {
    min_len = max_len = 36;
    const std::string hex = "[0-9a-fA-F]";
    return b.define("uuid", hex + "{8} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " +
                                 hex + "{12}");
  }
  if (format == "email") {
    // local@domain with a dotted domain; local part and labels from the unquoted
    // ASCII set, bounded as RFC 5321 bounds them (64 / 63 per label, 8 labels here).
    min_len = 5;
    max_len = 64 + 1 + 8 * 64;
    const std::string label = "[A-Za-z0-9] [A-Za-z0-9-]{0,62}";
    return b.define("email", "[A-Za-z0-9._%+-]{1,64} \"@\" " + label + " (\".\" " + label + "){1,8}");
  }
  throw UnsupportedSchema("JSON Schema keyword 'format' at " + (path.empty() ? std::string("/") : path) +
                              ": string format '" + format + "' is not supported (date, time, date-time, uuid, email are)",
                          "format", path + "/format");
}

// The sorted, distinct texts[lo, hi) that share their first `depth` code points, from
// there on, as a prefix tree: at any point of the input only one branch is live, so a
// 20000-value enum costs the matcher one parse stack, not 20000 (its limit is 4096).
// Branching levels past 200 (hostile: "a", "aa", "aaa", ...) fall back to plain
// alternatives, which bounds the recursion.
std::string literal_trie(GbnfBuilder::Impl& b, const std::string& rule_hint, const std::vector<std::u32string>& texts,
                         size_t lo, size_t hi, size_t depth, int level) {
  const std::u32string& first = texts[lo];
  const std::u32string& last = texts[hi - 1];
  size_t common = depth;
  while (common < first.size() && common < last.size() && first[common] == last[common]) ++common;
  std::string prefix = common > depth ? literal_of(first, depth, common) : "";
  if (hi - lo == 1) return prefix.empty() ? "\"\"" : prefix;
  std::vector<std::string> alts;
  bool has_empty = false;
  size_t i = lo;
  if (first.size() == common) {  // sorted first: the text that ends here
    has_empty = true;
    ++i;
  }
  while (i < hi) {
    size_t j = i + 1;
    while (j < hi && texts[j][common] == texts[i][common]) ++j;
    if (level >= 200) {
      for (size_t k = i; k < j; ++k) alts.push_back(literal_of(texts[k], common, texts[k].size()));
    } else {
      alts.push_back(literal_trie(b, rule_hint, texts, i, j, common, level + 1));
    }
    i = j;
  }
  std::string body;
  for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
  std::string rest = alts.size() == 1 && !has_empty ? body : b.define(rule_hint, body) + (has_empty ? "?" : "");
  return prefix.empty() ? rest : prefix + " " + rest;
}

// A JSON string key (with quotes) whose decoded text is none of `names`: at each trie
// node, either close (when the prefix is not a name), or leave the trie with any other
// character (then anything), or follow a child. \u escapes are not generated for
// these keys, so the characters written are the characters decoded.
std::string key_not_in(GbnfBuilder::Impl& b, const std::string& prefix, const std::vector<std::string>& names) {
  if (names.empty()) return b.json_string();
  struct TrieNode {
    std::map<uint32_t, int> kids;
    bool terminal = false;
  };
  std::vector<TrieNode> trie(1);
  for (const std::string& n : names) {
    int cur = 0;
    for (uint32_t cp : decode_utf8(n)) {
      auto it = trie[cur].kids.find(cp);
      if (it == trie[cur].kids.end()) {
        trie.push_back({});
        it = trie[cur].kids.emplace(cp, static_cast<int>(trie.size() - 1)).first;
      }
      cur = it->second;
    }
    trie[cur].terminal = true;
  }
  // Any character except '"' (written raw or with a short escape, no \u).
  const std::string rest = b.define("key-rest", short_char_set(b, {}) + "* \"\\\"\"");
  std::vector<std::string> node_rules(trie.size());
  for (size_t i = trie.size(); i-- > 0;) {
    std::vector<std::string> alts;
    if (!trie[i].terminal) alts.push_back("\"\\\"\"");
    CodepointRanges children;
    for (const auto& [cp, child] : trie[i].kids) {
      children.emplace_back(cp, cp);
      alts.push_back(gbnf_quote(json_escape_cp(cp)) + " " + node_rules[child]);
    }
    const std::string other = short_char_set(b, children);
    if (!other.empty()) alts.push_back("(" + other + ") " + rest);
    std::string body;
    for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
    node_rules[i] = b.define(prefix.empty() ? "key" : prefix + "-key", body);
  }
  return b.define(prefix.empty() ? "other-key" : prefix + "-other-key", "\"\\\"\" " + node_rules[0]);
}

}  // namespace pagoda::grammar::detail
