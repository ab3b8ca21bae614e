// Gemma 4's output, as llama.cpp b10587 reads it (common/chat.cpp's gemma4 parser):
//   [<|turn>model\n] ( [<|channel>thought REASONING <channel|>] CONTENT )*
//   ( <|tool_call>call:NAME{ARGS}<tool_call|> )*
// CONTENT runs to the next <|channel>, <channel|> or <|tool_call>. A "<|channel>" not
// followed by "thought" is an empty channel and dropped, as is a stray "<channel|>" (the
// model closes its thinking twice at times). ARGS is Gemma's own value syntax: keys bare
// (or between <|"|> quotes), strings between <|"|> ... <|"|> (no escapes inside), numbers,
// true / false / null, {k:v, ...} and [v, ...]; the call's arguments are that dict
// re-written as JSON. A call that does not parse, or names a function the request did
// not offer, stays in the content as text (tool_call_parsers.cpp says why).
#include <nlohmann/json.hpp>

#include "chat/chat_parse_internal.h"
#include "chat/json_scan.h"

namespace pagoda::chat::detail {
namespace {

constexpr std::string_view kTurnModel = "<|turn>model\n";
constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kThought = "thought";
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kCallPrefix = "call:";
constexpr std::string_view kQuote = "<|\"|>";
constexpr std::string_view kContentEnds[] = {kChannelOpen, kChannelClose, kCallOpen};
// Nesting bound of an argument value: deeper is not a call (the text stays content).
constexpr int kMaxDepth = 64;

enum class Got { Ok, Incomplete, Fail };

// One Gemma value at t[i] (after optional blanks), written as JSON to `out`; i moves past it.
class ValueReader {
 public:
  explicit ValueReader(std::string_view t) : t_(t) {}

  Got value(size_t& i, std::string& out, int depth) {
    if (depth > kMaxDepth) return Got::Fail;
    i = skip_ws(t_, i);
    if (i >= t_.size()) return Got::Incomplete;
    if (t_.substr(i).starts_with(kQuote) || kQuote.starts_with(t_.substr(i))) return string(i, out);
    const char c = t_[i];
    if (c == '{' || c == '[') return container(i, out, depth, c == '{');
    // A number, true, false or null: JSON's own spelling.
    const ScanResult r = scan_json_value(t_, i);
    if (r.status == ScanStatus::Incomplete) return Got::Incomplete;
    if (r.status != ScanStatus::Complete) return Got::Fail;
    const std::string_view lit = t_.substr(i, r.end - i);
    if (lit.empty() || lit.front() == '"' || lit.front() == '{' || lit.front() == '[') return Got::Fail;
    // A number that runs to the end of the text may still grow.
    if (r.end >= t_.size()) return Got::Incomplete;
    out += lit;
    i = r.end;
    return Got::Ok;
  }

 private:
  Got string(size_t& i, std::string& out) {
    if (!t_.substr(i).starts_with(kQuote)) return Got::Incomplete;  // the text ends inside the quote
    const size_t b = i + kQuote.size();
    const size_t e = t_.find(kQuote, b);
    if (e == std::string_view::npos) return Got::Incomplete;
    out += nlohmann::json(std::string(t_.substr(b, e - b))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    i = e + kQuote.size();
    return Got::Ok;
  }

  // key: bare (up to ':') or quoted; JSON-quoted in `out`.
  Got key(size_t& i, std::string& out) {
    i = skip_ws(t_, i);
    if (i >= t_.size()) return Got::Incomplete;
    std::string k;
    if (t_.substr(i).starts_with(kQuote) || kQuote.starts_with(t_.substr(i))) {
      std::string quoted;
      const Got g = string(i, quoted);
      if (g != Got::Ok) return g;
      out += quoted;
    } else {
      const size_t e = t_.find_first_of(":}", i);
      if (e == std::string_view::npos) return Got::Incomplete;
      if (e == i || t_[e] != ':') return Got::Fail;
      k = std::string(t_.substr(i, e - i));
      out += nlohmann::json(k).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      i = e;
    }
    if (i >= t_.size()) return Got::Incomplete;
    if (t_[i] != ':') return Got::Fail;
    ++i;
    out += ':';
    return Got::Ok;
  }

  // '{' key: value, ... '}' (keyed) or '[' value, ... ']': the same walk, JSON out.
  Got container(size_t& i, std::string& out, int depth, bool keyed) {
    const char close = keyed ? '}' : ']';
    out += t_[i++];  // '{' or '['
    i = skip_ws(t_, i);
    if (i >= t_.size()) return Got::Incomplete;
    if (t_[i] == close) {
      ++i;
      out += close;
      return Got::Ok;
    }
    while (true) {
      Got g = keyed ? key(i, out) : Got::Ok;
      if (g != Got::Ok) return g;
      g = value(i, out, depth + 1);
      if (g != Got::Ok) return g;
      i = skip_ws(t_, i);
      if (i >= t_.size()) return Got::Incomplete;
      if (t_[i] == close) {
        ++i;
        out += close;
        return Got::Ok;
      }
      if (t_[i] != ',') return Got::Fail;
      ++i;
      out += ',';
    }
  }

  std::string_view t_;
};

// "call:NAME{...}<tool_call|>" at t[i] (just after "<|tool_call>"): the call and where it
// ends. A call cut off right before its closing marker (max_tokens, a stop string, the
// end-of-generation token the template closes calls with) still counts in the final parse.
Got call_at(std::string_view t, size_t i, bool partial, RawCall& call, size_t& end) {
  for (size_t k = 0; k < kCallPrefix.size(); ++k, ++i) {
    if (i >= t.size()) return Got::Incomplete;
    if (t[i] != kCallPrefix[k]) return Got::Fail;
  }
  const size_t brace = t.find('{', i);
  const size_t name_end = brace == std::string_view::npos ? t.size() : brace;
  if (name_end - i > 256) return Got::Fail;  // a marker followed by a wall of text
  for (size_t k = i; k < name_end; ++k)
    if (is_ws(t[k]) || t[k] == '<' || t[k] == '}') return Got::Fail;
  if (brace == std::string_view::npos) return Got::Incomplete;
  if (brace == i) return Got::Fail;
  call.name = std::string(t.substr(i, brace - i));
  size_t p = brace;
  call.arguments.clear();
  ValueReader r(t);
  const Got g = r.value(p, call.arguments, 0);
  if (g != Got::Ok) return g;
  if (t.substr(p).starts_with(kCallClose)) {
    end = p + kCallClose.size();
    return Got::Ok;
  }
  if (p >= t.size() || kCallClose.starts_with(t.substr(p))) {
    if (partial) return Got::Incomplete;
    end = t.size();
    return Got::Ok;
  }
  return Got::Fail;
}

}  // namespace

MessageParts parse_gemma4(std::string_view text, const ParseOptions& opts, bool partial) {
  MessageParts out;
  size_t pos = 0;
  if (text.starts_with(kTurnModel)) pos = kTurnModel.size();
  else if (partial && kTurnModel.starts_with(text)) return out;
  bool after_block = false;  // just after a thinking block or a call: leading blanks are not content
  bool in_thought = opts.thinking_open_at_start;
  std::string pending_ws;    // content blanks that a call right after would drop
  auto add_content = [&](std::string_view piece) {
    if (after_block) piece = ltrim_view(piece);
    if (piece.empty()) return;
    after_block = false;
    out.content += pending_ws;
    pending_ws.clear();
    const std::string body = rtrim_copy(piece);
    out.content += body;
    pending_ws = std::string(piece.substr(body.size()));
  };
  auto finish = [&]() {
    if (!partial) out.content += pending_ws;
    return out;
  };

  while (pos <= text.size()) {
    if (in_thought) {
      // Reasoning up to <channel|>; unclosed at the end, all of it (held back in part).
      const size_t close = text.find(kChannelClose, pos);
      std::string_view body = text.substr(pos, (close == std::string_view::npos ? text.size() : close) - pos);
      if (close == std::string_view::npos && partial) body.remove_suffix(marker_prefix_suffix(body, kChannelClose));
      if (opts.extract_reasoning) {
        // Trimmed (unclosed while streaming: trailing blanks may be followed by more).
        const std::string r = rtrim_copy(ltrim_view(body));
        if (!out.reasoning.empty() && !r.empty()) out.reasoning += "\n";
        out.reasoning += r;
      } else {
        add_content(std::string(kChannelOpen) + std::string(kThought) + std::string(body) +
                    (close == std::string_view::npos ? "" : std::string(kChannelClose)));
      }
      if (close == std::string_view::npos) return finish();
      pos = close + kChannelClose.size();
      in_thought = false;
      after_block = true;
      continue;
    }
    // Content up to the next marker.
    size_t best = std::string_view::npos;
    std::string_view which;
    for (std::string_view m : kContentEnds) {
      const size_t p = text.find(m, pos);
      if (p < best) {
        best = p;
        which = m;
      }
    }
    if (best == std::string_view::npos) {
      std::string_view tail = text.substr(pos);
      if (partial) {
        size_t hold = 0;
        for (std::string_view m : kContentEnds) hold = std::max(hold, marker_prefix_suffix(tail, m));
        tail.remove_suffix(hold);
      }
      add_content(tail);
      return finish();
    }
    add_content(text.substr(pos, best - pos));
    size_t next = best + which.size();
    if (which == kChannelClose) {  // a stray close: dropped
      pos = next;
      after_block = true;
      continue;
    }
    if (which == kChannelOpen) {
      if (text.substr(next).starts_with(kThought)) {
        in_thought = true;
        pos = next + kThought.size();
        continue;
      }
      if (partial && kThought.starts_with(text.substr(next))) return finish();
      pos = next;  // an empty channel: dropped
      continue;
    }
    // <|tool_call>
    RawCall call;
    size_t end = 0;
    const Got g = opts.parse_tool_calls ? call_at(text, next, partial, call, end) : Got::Fail;
    if (g == Got::Incomplete && partial) return finish();
    if (g == Got::Ok && tool_offered(opts, call.name)) {
      pending_ws.clear();
      out.calls.push_back(std::move(call));
      pos = end;
      after_block = true;
      continue;
    }
    // Not a call: its text is content, and the scan goes on after the marker.
    if (g == Got::Incomplete) {  // the final parse of a call cut off mid-value
      add_content(text.substr(best));
      return finish();
    }
    add_content(which);
    pos = next;
  }
  return finish();
}

nlohmann::json gemma4_tool_responses(const nlohmann::json& messages) {
  using json = nlohmann::json;
  if (!messages.is_array()) return messages;
  json result = json::array();
  auto has_calls = [](const json& m) {
    return m.is_object() && m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
  };
  auto has_content = [](const json& m) {
    if (!m.is_object() || !m.contains("content")) return false;
    const json& c = m["content"];
    return (c.is_string() && !c.get_ref<const std::string&>().empty()) || (c.is_array() && !c.empty());
  };
  size_t i = 0;
  while (i < messages.size()) {
    const json& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant" || !has_calls(m)) {
      result.push_back(m);
      ++i;
      continue;
    }
    json turn = m;
    json responses = json::array();
    ++i;
    while (i < messages.size() && messages[i].is_object() && messages[i].value("role", "") == "tool") {
      const json& r = messages[i];
      json response;
      if (r.contains("content")) {
        const json& c = r["content"];
        response = c;
        if (c.is_string()) {
          json parsed = json::parse(c.get_ref<const std::string&>(), nullptr, false);
          if (!parsed.is_discarded()) response = std::move(parsed);
        }
      }
      // The name of the call it answers (in order), else its tool_call_id.
      std::string name;
      const json& calls = turn["tool_calls"];
      if (responses.size() < calls.size() && calls[responses.size()].is_object()) {
        const json& fn = calls[responses.size()].value("function", json::object());
        if (fn.is_object() && fn.contains("name") && fn["name"].is_string()) name = fn["name"];
      }
      if (name.empty() && r.contains("tool_call_id") && r["tool_call_id"].is_string()) name = r["tool_call_id"];
      responses.push_back({{"name", name}, {"response", response}});
      ++i;
    }
    if (!responses.empty()) turn["tool_responses"] = responses;
    // The answer after the results joins the same model turn.
    if (i < messages.size() && messages[i].is_object() && messages[i].value("role", "") == "assistant" &&
        !has_calls(messages[i]) && has_content(messages[i])) {
      turn["content"] = messages[i]["content"];
      ++i;
    }
    result.push_back(std::move(turn));
  }
  return result;
}

}  // namespace pagoda::chat::detail
