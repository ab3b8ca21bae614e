// A thinking block before a constrained output (see with_reasoning_prefix).
//
// "Any text without the marker M, then M" as right-branching rules of the marker's
// matching automaton: t0 loops over characters other than M[0]; t_i (M[0..i) seen)
// goes back to t0 on a character that breaks the prefix, to t1 on M[0] again, or on to
// t_{i+1}; t_{k-1} has no way on (M would be complete). A text may also end inside a
// prefix (e_i) right before the closing M. This needs M[0] to occur once in M, which
// holds for "</think>". Rejected: thinking text as [^<]* — reasoning about code or HTML
// writes '<' all the time.
#include <stdexcept>
#include <string>

#include "chat/chat_format.h"
#include "grammar/json_schema.h"

namespace pagoda::chat {

namespace detail {

// One code point (here: an ASCII byte) inside a GBNF character class.
std::string class_char(char c) {
  if (c == ']' || c == '[' || c == '^' || c == '-' || c == '\\') return std::string("\\") + c;
  return std::string(1, c);
}

std::string text_until_marker_rules(const std::string& prefix, const std::string& m) {
  if (m.size() < 2 || m.find(m[0], 1) != std::string::npos)
    throw std::invalid_argument("reasoning grammar: the marker's first character must occur once in it");
  const size_t k = m.size();
  const std::string q0 = grammar::gbnf_quote(std::string(1, m[0]));
  auto t = [&](size_t i) { return prefix + "-t" + std::to_string(i); };
  auto e = [&](size_t i) { return prefix + "-e" + std::to_string(i); };
  std::string out = t(0) + " ::= ([^" + class_char(m[0]) + "] | " + q0 + " " + t(1) + ")*\n";
  for (size_t i = 1; i < k; ++i) {
    std::string body = "[^" + class_char(m[i]) + class_char(m[0]) + "] | " + q0 + " " + t(1);
    if (i + 1 < k) body += " | " + grammar::gbnf_quote(std::string(1, m[i])) + " " + t(i + 1);
    out += t(i) + " ::= " + body + "\n";
  }
  // Ending inside a prefix: M[0..i) with restarts, before the closing marker.
  for (size_t i = 1; i < k; ++i) {
    std::string body = "(" + q0 + " " + e(1);
    if (i + 1 < k) body += " | " + grammar::gbnf_quote(std::string(1, m[i])) + " " + e(i + 1);
    body += ")?";
    out += e(i) + " ::= " + body + "\n";
  }
  out += prefix + " ::= " + t(0) + " (" + q0 + " " + e(1) + ")? " + grammar::gbnf_quote(m) + "\n";
  return out;
}

}  // namespace detail

ReasoningGrammar with_reasoning_prefix(const ChatFormat& f, const std::string& body_gbnf, bool opened,
                                       bool tool_calls) {
  if (f.reasoning == ReasoningFormat::GptOss) {
    // Harmony: "<|end|>" has its '<' once, as the marker automaton needs.
    const std::string block = "pagoda-analysis-block";
    std::string out = body_gbnf;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += detail::text_until_marker_rules(block, "<|end|>");
    const std::string next = block + " \"<|start|>assistant\"";
    const std::string body = tool_calls ? "root" : "\"<|channel|>final<|message|>\" root";
    out += std::string(kReasoningRoot) + " ::= " +
           (opened ? next + " " + body : "(\"<|channel|>analysis<|message|>\" " + next + ")? " + body) + "\n";
    return {out, kReasoningRoot};
  }
  if (f.reasoning == ReasoningFormat::Gemma4) {
    // "<|channel>thought" (unless the prompt opened it), text, "<channel|>".
    const std::string block = "pagoda-reasoning-block";
    std::string out = body_gbnf;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += detail::text_until_marker_rules(block, "<channel|>");
    out += std::string(kReasoningRoot) + " ::= " +
           (opened ? block + " root" : "(\"<|channel>thought\" " + block + ")? root") + "\n";
    return {out, kReasoningRoot};
  }
  if (f.reasoning != ReasoningFormat::Think) return {body_gbnf, "root"};
  const std::string block = "pagoda-reasoning-block";
  std::string out = body_gbnf;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += detail::text_until_marker_rules(block, "</think>");
  const std::string after = "([ \\t] | \"\\n\"){0,3}";
  out += std::string(kReasoningRoot) + " ::= " +
         (opened ? block + " " + after + " root" : "(\"<think>\" " + block + " " + after + ")? root") + "\n";
  return {out, kReasoningRoot};
}

}  // namespace pagoda::chat
