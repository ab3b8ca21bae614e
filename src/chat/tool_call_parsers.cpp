// Tool-call syntaxes of the model families (see chat_format.h for the list). The
// content region is scanned for each format's start markers; at each one a region
// parser answers Ok (calls, and where the region ends), Incomplete (the text ends
// before the region could be judged: partial mode holds it back, the final parse keeps
// it as content) or Fail (never a call: its marker is kept as content and scanning
// goes on after it).
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "chat/chat_parse_internal.h"
#include "chat/json_scan.h"
#include "common/json_parse.h"

namespace pagoda::chat::detail {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

enum class Status { Ok, Incomplete, Fail };

struct Region {
  Status status = Status::Fail;
  size_t end = 0;
  std::vector<RawCall> calls;
};

Region fail() { return {}; }
Region incomplete() { return {Status::Incomplete, 0, {}}; }

// Literal at t[i]: Match (i advanced past it), Partial (the text ends inside it), or Mismatch.
enum class Lit { Match, Partial, Mismatch };
Lit expect(std::string_view t, size_t& i, std::string_view lit) {
  std::string_view rest = t.substr(std::min(i, t.size()));
  if (rest.starts_with(lit)) {
    i += lit.size();
    return Lit::Match;
  }
  if (rest.size() < lit.size() && lit.starts_with(rest)) return Lit::Partial;
  return Lit::Mismatch;
}

// Names: bounded so a marker followed by a wall of text fails fast.
constexpr size_t kMaxNameBytes = 256;

const std::string kDsmlCallsBegin = "<" + kDsml + "function_calls>";
const std::string kDsmlCallsEnd = "</" + kDsml + "function_calls>";
const std::string kDsmlInvoke = "<" + kDsml + "invoke name=\"";
const std::string kDsmlInvokeEnd = "</" + kDsml + "invoke>";
const std::string kDsmlParam = "<" + kDsml + "parameter name=\"";
const std::string kDsmlParamEnd = "</" + kDsml + "parameter>";

// ---- JSON call objects -------------------------------------------------------------

// The arguments value text[b, e): an object (the model's bytes), or a string holding
// an object (re-serialized). False otherwise.
bool arguments_text(std::string_view text, size_t b, size_t e, std::string& out) {
  if (text[b] == '{') {
    out = std::string(text.substr(b, e - b));
    return true;
  }
  if (text[b] == '"') {
    json s = parse_json_or_discarded(text.substr(b, e - b));
    if (!s.is_string()) return false;
    json obj = parse_json_or_discarded(s.get<std::string>());
    if (!obj.is_object()) return false;
    out = obj.dump();
    return true;
  }
  return false;
}

// {"name": ..., "arguments"|"parameters": {...}} or {"type": "function", "function": {...}}.
bool call_from_object(std::string_view text, size_t b, size_t e, bool require_arguments, RawCall& call,
                      int depth = 0) {
  const std::vector<JsonMember> members = object_members(text, b, e);
  const JsonMember* name = nullptr;
  const JsonMember* args = nullptr;
  const JsonMember* function = nullptr;
  for (const JsonMember& m : members) {
    if (m.key == "name") name = &m;
    else if (m.key == "arguments" || m.key == "parameters") args = &m;
    else if (m.key == "function") function = &m;
  }
  if (!name && function && depth == 0 && text[function->value_begin] == '{')
    return call_from_object(text, function->value_begin, function->value_end, require_arguments, call, 1);
  if (!name || text[name->value_begin] != '"') return false;
  json n = parse_json_or_discarded(text.substr(name->value_begin, name->value_end - name->value_begin));
  if (!n.is_string() || n.get<std::string>().empty()) return false;
  call.name = n.get<std::string>();
  if (!args) {
    if (require_arguments) return false;
    call.arguments = "{}";
    return true;
  }
  return arguments_text(text, args->value_begin, args->value_end, call.arguments);
}

// A JSON value at text[i] (whitespace skipped): Ok with end, Incomplete or Fail.
Region scan_at(std::string_view text, size_t i, size_t& value_begin) {
  i = skip_ws(text, i);
  value_begin = i;
  ScanResult r = scan_json_value(text, i);
  if (r.status == ScanStatus::Incomplete) return incomplete();
  if (r.status == ScanStatus::Invalid) return fail();
  return {Status::Ok, r.end, {}};
}

// Array of call objects at text[i] ("[{...}, ...]").
Region call_array_at(std::string_view text, size_t i, bool require_arguments) {
  size_t b = 0;
  Region r = scan_at(text, i, b);
  if (r.status != Status::Ok) return r;
  if (text[b] != '[') return fail();
  // Elements: reuse the object scanner by walking the array's top level.
  size_t k = skip_ws(text, b + 1);
  if (k < r.end && text[k] == ']') return fail();  // "[]" calls nothing: keep it as text
  while (k < r.end) {
    ScanResult el = scan_json_value(text, k);
    if (el.status != ScanStatus::Complete || text[k] != '{') return fail();
    RawCall call;
    if (!call_from_object(text, k, el.end, require_arguments, call)) return fail();
    r.calls.push_back(std::move(call));
    k = skip_ws(text, el.end);
    if (k < r.end && text[k] == ',') k = skip_ws(text, k + 1);
    else break;
  }
  return r;
}

// ---- XML-ish parameter values (Qwen3Coder, DSML) -----------------------------------

const json* tool_property_schema(const ParseOptions& opts, std::string_view tool, std::string_view param) {
  if (!opts.tools.is_array()) return nullptr;
  for (const json& t : opts.tools) {
    const json* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!fn->is_object() || !fn->contains("name") || (*fn)["name"] != tool) continue;
    const json* p = fn->contains("parameters") ? &(*fn)["parameters"] : nullptr;
    if (!p || !p->is_object() || !p->contains("properties") || !(*p)["properties"].is_object()) return nullptr;
    auto it = (*p)["properties"].find(std::string(param));
    return it == (*p)["properties"].end() ? nullptr : &*it;
  }
  return nullptr;
}

bool schema_is_string_only(const json* schema) {
  if (!schema || !schema->is_object() || !schema->contains("type")) return false;
  const json& t = (*schema)["type"];
  return t == "string" || (t.is_array() && t.size() == 1 && t[0] == "string");
}

// A text value: JSON when it reads as JSON (a number, true, an object...), else the
// text itself; a string-typed property (from the request's tools) stays text.
ordered_json parameter_value(std::string_view value, const json* schema) {
  if (schema_is_string_only(schema)) {
    // A JSON string literal (what tool_call_grammar() makes the model write) decodes.
    std::string_view v = ltrim_view(value);
    if (v.starts_with('"')) {
      ordered_json s = parse_ordered_json_or_discarded(v);
      if (s.is_string()) return s;
    }
    return std::string(value);
  }
  ordered_json j = parse_ordered_json_or_discarded(value);
  if (!j.is_discarded()) return j;
  if (schema && schema->is_object() && (*schema).value("type", json()) == "boolean") {
    // Templates render Python booleans with `| string`: "True" / "False".
    if (value == "True") return true;
    if (value == "False") return false;
  }
  return std::string(value);
}

// <function=NAME> ... </function> at text[i] (just after "<function=").
Region function_block(std::string_view text, size_t i, const ParseOptions& opts, bool partial) {
  const size_t gt = text.find('>', i);
  const size_t name_end = gt == std::string_view::npos ? text.size() : gt;
  std::string_view name = text.substr(i, name_end - i);
  if (name.size() > kMaxNameBytes || name.find_first_of("\n<") != std::string_view::npos) return fail();
  if (gt == std::string_view::npos) return incomplete();
  if (name.empty()) return fail();
  i = gt + 1;
  RawCall call;
  call.name = std::string(name);
  size_t k = skip_ws(text, i);
  if (k >= text.size()) return incomplete();
  if (text[k] == '{') {
    // functionary v3.1: <function=name>{json}</function>
    size_t b = 0;
    Region r = scan_at(text, k, b);
    if (r.status != Status::Ok) return r;
    if (!arguments_text(text, b, r.end, call.arguments)) return fail();
    k = skip_ws(text, r.end);
    Lit l = expect(text, k, "</function>");
    if (l == Lit::Partial) return incomplete();
    if (l == Lit::Mismatch) return fail();
    return {Status::Ok, k, {std::move(call)}};
  }
  ordered_json args = ordered_json::object();
  while (true) {
    k = skip_ws(text, k);
    if (k >= text.size()) return incomplete();
    Lit l = expect(text, k, "</function>");
    if (l == Lit::Match) break;
    if (l == Lit::Partial) return incomplete();
    l = expect(text, k, "<parameter=");
    if (l == Lit::Partial) return incomplete();
    if (l == Lit::Mismatch) return fail();
    const size_t pgt = text.find('>', k);
    std::string_view pname = text.substr(k, (pgt == std::string_view::npos ? text.size() : pgt) - k);
    if (pname.size() > kMaxNameBytes || pname.find_first_of("\n<") != std::string_view::npos) return fail();
    if (pgt == std::string_view::npos) return incomplete();
    const size_t vbeg = pgt + 1;
    const size_t vend = text.find("</parameter>", vbeg);
    if (vend == std::string_view::npos) return incomplete();
    std::string_view value = text.substr(vbeg, vend - vbeg);
    // The template writes "<parameter=p>\nvalue\n</parameter>": one newline each side.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    args[std::string(pname)] = parameter_value(value, tool_property_schema(opts, call.name, pname));
    k = vend + std::string_view("</parameter>").size();
  }
  call.arguments = args.dump();
  return {Status::Ok, k, {std::move(call)}};
}

// The closing tag after a call; a call cut off right before it (max_tokens, a stop
// string) still counts in the final parse.
Region close_with(std::string_view text, Region r, std::string_view closer, bool partial) {
  size_t k = skip_ws(text, r.end);
  Lit l = expect(text, k, closer);
  if (l == Lit::Match) {
    r.end = k;
    return r;
  }
  if (l == Lit::Partial || k >= text.size()) {
    if (partial) return incomplete();
    r.end = text.size();
    return r;
  }
  return fail();
}

// ---- regions per marker ------------------------------------------------------------

// <tool_call> {json} </tool_call>  or  <tool_call> <function=...>...</function> </tool_call>
Region tool_call_tag(std::string_view text, size_t i, const ParseOptions& opts, bool partial) {
  size_t k = skip_ws(text, i);
  if (k >= text.size()) return incomplete();
  Region r;
  if (text[k] == '{') {
    size_t b = 0;
    r = scan_at(text, k, b);
    if (r.status != Status::Ok) return r;
    RawCall call;
    if (!call_from_object(text, b, r.end, false, call)) return fail();
    r.calls.push_back(std::move(call));
  } else {
    Lit l = expect(text, k, "<function=");
    if (l == Lit::Partial) return incomplete();
    if (l == Lit::Mismatch) return fail();
    r = function_block(text, k, opts, partial);
    if (r.status != Status::Ok) return r;
  }
  return close_with(text, std::move(r), "</tool_call>", partial);
}

// [TOOL_CALLS][{...}, ...]  or  [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
Region mistral(std::string_view text, size_t i) {
  size_t k = skip_ws(text, i);
  if (k >= text.size()) return incomplete();
  if (text[k] == '[') return call_array_at(text, k, false);
  size_t n = k;
  while (n < text.size() && n - k <= kMaxNameBytes &&
         (std::isalnum(static_cast<unsigned char>(text[n])) || text[n] == '_' || text[n] == '-' || text[n] == '.'))
    ++n;
  if (n - k > kMaxNameBytes || n == k) return fail();
  if (n >= text.size()) return incomplete();
  RawCall call;
  call.name = std::string(text.substr(k, n - k));
  k = n;
  Lit l = expect(text, k, "[CALL_ID]");
  if (l == Lit::Partial) return incomplete();
  if (l == Lit::Match) {
    while (k < text.size() && k - n < 64 && std::isalnum(static_cast<unsigned char>(text[k]))) ++k;
    if (k >= text.size()) return incomplete();
  }
  l = expect(text, k, "[ARGS]");
  if (l == Lit::Partial) return incomplete();
  if (l == Lit::Mismatch) return fail();
  size_t b = 0;
  Region r = scan_at(text, k, b);
  if (r.status != Status::Ok) return r;
  if (!arguments_text(text, b, r.end, call.arguments)) return fail();
  r.calls.push_back(std::move(call));
  return r;
}

// One DeepSeek call after <｜tool▁call▁begin｜>: "function<｜tool▁sep｜>NAME\n```json\n{..}\n```"
// (V3, R1) or "NAME<｜tool▁sep｜>{..}" (V3.1), then <｜tool▁call▁end｜>.
Region deepseek_call(std::string_view text, size_t k, bool partial) {
  const size_t sep = text.find(kDsSep, k);
  std::string_view head = text.substr(k, (sep == std::string_view::npos ? text.size() : sep) - k);
  if (head.size() > kMaxNameBytes || head.find('\n') != std::string_view::npos) return fail();
  if (sep == std::string_view::npos) return incomplete();
  size_t j = sep + kDsSep.size();
  RawCall call;
  if (j >= text.size()) return incomplete();
  if (head == "function" && text[j] != '{') {
    const size_t nl = text.find('\n', j);
    std::string_view name = text.substr(j, (nl == std::string_view::npos ? text.size() : nl) - j);
    if (name.size() > kMaxNameBytes) return fail();
    if (nl == std::string_view::npos) return incomplete();
    call.name = rtrim_copy(name);
    j = skip_ws(text, nl);
    if (expect(text, j, "```json") == Lit::Partial || (j >= text.size())) return incomplete();
    if (expect(text, j, "```") == Lit::Partial) return incomplete();
  } else {
    call.name = rtrim_copy(head);
  }
  if (call.name.empty()) return fail();
  size_t b = 0;
  Region r = scan_at(text, j, b);
  if (r.status != Status::Ok) return r;
  if (!arguments_text(text, b, r.end, call.arguments)) return fail();
  j = skip_ws(text, r.end);
  if (expect(text, j, "```") == Lit::Partial) return incomplete();
  r.end = j;
  r.calls = {std::move(call)};
  return close_with(text, std::move(r), kDsCallEnd, partial);
}

Region deepseek(std::string_view text, size_t i, bool outer, bool partial) {
  Region all{Status::Ok, i, {}};
  size_t k = i;
  while (true) {
    k = skip_ws(text, k);
    if (!outer && !all.calls.empty()) break;
    if (outer) {
      Lit l = expect(text, k, kDsCallsEnd);
      if (l == Lit::Match) {
        all.end = k;
        return all.calls.empty() ? fail() : all;
      }
      if (k >= text.size() || l == Lit::Partial) {
        if (partial) return incomplete();
        if (all.calls.empty()) return fail();
        all.end = text.size();
        return all;
      }
      l = expect(text, k, kDsCallBegin);
      if (l == Lit::Partial) return incomplete();
      if (l == Lit::Mismatch) return fail();
    }
    Region one = deepseek_call(text, k, partial);
    if (one.status != Status::Ok) return one;
    all.calls.push_back(std::move(one.calls[0]));
    k = one.end;
    all.end = k;
  }
  return all;
}

// <｜DSML｜function_calls> <｜DSML｜invoke name="N"> <｜DSML｜parameter name="k" string="true|false">v</..> ...
Region dsml(std::string_view text, size_t i, const ParseOptions& opts, bool partial) {
  Region all{Status::Ok, i, {}};
  size_t k = i;
  while (true) {
    k = skip_ws(text, k);
    Lit l = expect(text, k, kDsmlCallsEnd);
    if (l == Lit::Match) {
      all.end = k;
      return all.calls.empty() ? fail() : all;
    }
    if (l == Lit::Partial || k >= text.size()) {
      if (partial || all.calls.empty()) return incomplete();
      all.end = text.size();
      return all;
    }
    l = expect(text, k, kDsmlInvoke);
    if (l == Lit::Partial) return incomplete();
    if (l == Lit::Mismatch) return fail();
    const size_t q = text.find('"', k);
    std::string_view name = text.substr(k, (q == std::string_view::npos ? text.size() : q) - k);
    if (name.size() > kMaxNameBytes || name.find_first_of("\n<") != std::string_view::npos) return fail();
    if (q == std::string_view::npos) return incomplete();
    if (name.empty()) return fail();
    RawCall call;
    call.name = std::string(name);
    k = q;
    l = expect(text, k, "\">");
    if (l == Lit::Partial) return incomplete();
    if (l == Lit::Mismatch) return fail();
    ordered_json args = ordered_json::object();
    while (true) {
      k = skip_ws(text, k);
      l = expect(text, k, kDsmlInvokeEnd);
      if (l == Lit::Match) break;
      if (l == Lit::Partial || k >= text.size()) return incomplete();
      l = expect(text, k, kDsmlParam);
      if (l == Lit::Partial) return incomplete();
      if (l == Lit::Mismatch) return fail();
      const size_t gt = text.find('>', k);
      std::string_view attrs = text.substr(k, (gt == std::string_view::npos ? text.size() : gt) - k);
      if (attrs.size() > kMaxNameBytes + 32 || attrs.find('\n') != std::string_view::npos) return fail();
      if (gt == std::string_view::npos) return incomplete();
      const size_t pq = attrs.find('"');
      if (pq == std::string_view::npos) return fail();
      std::string pname(attrs.substr(0, pq));
      const bool is_string = attrs.find("string=\"true\"") != std::string_view::npos;
      const size_t vend = text.find(kDsmlParamEnd, gt + 1);
      if (vend == std::string_view::npos) return incomplete();
      std::string_view value = text.substr(gt + 1, vend - gt - 1);
      if (is_string) {
        args[pname] = std::string(value);
      } else {
        ordered_json v = parse_ordered_json_or_discarded(value);
        args[pname] = v.is_discarded() ? parameter_value(value, tool_property_schema(opts, call.name, pname)) : v;
      }
      k = vend + kDsmlParamEnd.size();
    }
    call.arguments = args.dump();
    all.calls.push_back(std::move(call));
  }
}

// Llama 3 JSON calls at the start of the output: {"name", "parameters"} [; {...}]*.
Region llama3_json(std::string_view text, size_t i, bool partial) {
  Region all{Status::Ok, i, {}};
  size_t k = i;
  while (true) {
    size_t b = 0;
    Region r = scan_at(text, k, b);
    if (r.status != Status::Ok || text[b] != '{') {
      if (all.calls.empty()) return r.status == Status::Incomplete ? incomplete() : fail();
      // "; garbage" after a call: the calls stand, the ';' and the rest are content.
      if (r.status == Status::Incomplete) return incomplete();
      return all;
    }
    RawCall call;
    if (!call_from_object(text, b, r.end, true, call)) return all.calls.empty() ? fail() : all;
    all.calls.push_back(std::move(call));
    all.end = r.end;
    size_t j = skip_ws(text, r.end);
    if (j >= text.size()) {
      if (partial) return incomplete();  // a ';' and another call may follow
      return all;
    }
    if (text[j] != ';') return all;
    k = j + 1;
  }
}

// <|python_tag|> runs to the end of the message: JSON calls, name.call(k=v, ...), or code.
Region python_tag(std::string_view text, size_t i, bool partial) {
  if (partial) return incomplete();
  std::string_view body = ltrim_view(text.substr(i));
  const std::string code = rtrim_copy(body);
  if (code.empty()) return fail();
  if (code.front() == '{') {
    Region r = llama3_json(code, 0, false);
    if (r.status == Status::Ok && skip_ws(code, r.end) == code.size()) return {Status::Ok, text.size(), r.calls};
  }
  // name.call(key="v", n=1): builtin tools (brave_search, wolfram_alpha).
  const size_t dot = code.find(".call(");
  if (dot != std::string::npos && dot > 0 && dot <= kMaxNameBytes && code.back() == ')') {
    std::string name = code.substr(0, dot);
    bool ok = name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
              std::string::npos;
    std::string_view inner = std::string_view(code).substr(dot + 6, code.size() - dot - 7);
    ordered_json args = ordered_json::object();
    size_t k = 0;
    while (ok && (k = skip_ws(inner, k)) < inner.size()) {
      const size_t eq = inner.find('=', k);
      if (eq == std::string_view::npos) { ok = false; break; }
      std::string key = rtrim_copy(inner.substr(k, eq - k));
      size_t v = skip_ws(inner, eq + 1);
      ScanResult sr = scan_json_value(inner, v);
      size_t vend;
      if (sr.status == ScanStatus::Complete) {
        vend = sr.end;
      } else {
        // A number (or True/False) running to the end, or a bare word: up to the next ','.
        vend = inner.find(',', v);
        if (vend == std::string_view::npos) vend = inner.size();
      }
      std::string raw = rtrim_copy(inner.substr(v, vend - v));
      ordered_json val = parse_ordered_json_or_discarded(raw);
      if (val.is_discarded()) val = raw == "True" ? ordered_json(true) : raw == "False" ? ordered_json(false) : ordered_json(raw);
      if (key.empty()) { ok = false; break; }
      args[key] = val;
      k = skip_ws(inner, vend);
      if (k < inner.size()) {
        if (inner[k] != ',') { ok = false; break; }
        ++k;
      }
    }
    if (ok) return {Status::Ok, text.size(), {RawCall{name, args.dump()}}};
  }
  return {Status::Ok, text.size(), {RawCall{"python", ordered_json{{"code", code}}.dump()}}};
}

// Generic: the whole output is {"tool_calls": [...]}, {"tool_call": {...}} or
// {"name", "arguments"}, optionally in a ```json fence.
Region generic(std::string_view text, size_t i, bool partial) {
  size_t k = skip_ws(text, i);
  bool fenced = false;
  Lit l = expect(text, k, "```json");
  if (l == Lit::Partial) return incomplete();
  if (l == Lit::Match) fenced = true;
  else {
    l = expect(text, k, "```");
    if (l == Lit::Match) fenced = true;
  }
  size_t b = 0;
  Region r = scan_at(text, k, b);
  if (r.status != Status::Ok) return r;
  if (text[b] != '{') return fail();
  RawCall call;
  const std::vector<JsonMember> members = object_members(text, b, r.end);
  const JsonMember* calls = nullptr;
  const JsonMember* one = nullptr;
  for (const JsonMember& m : members) {
    if (m.key == "tool_calls") calls = &m;
    if (m.key == "tool_call") one = &m;
  }
  if (calls && members.size() == 1) {
    Region a = call_array_at(text, calls->value_begin, true);
    if (a.status != Status::Ok) return fail();
    r.calls = std::move(a.calls);
  } else if (one && members.size() == 1 && text[one->value_begin] == '{') {
    if (!call_from_object(text, one->value_begin, one->value_end, true, call)) return fail();
    r.calls.push_back(std::move(call));
  } else if (call_from_object(text, b, r.end, true, call)) {
    r.calls.push_back(std::move(call));
  } else {
    return fail();
  }
  k = skip_ws(text, r.end);
  if (fenced) {
    l = expect(text, k, "```");
    if (l == Lit::Mismatch) return fail();
    if (l == Lit::Partial) return incomplete();
    k = skip_ws(text, k);
  }
  if (k < text.size()) return fail();
  if (partial) return incomplete();  // must be the whole output: more text would undo it
  r.end = text.size();
  return r;
}

// ---- the content-region scan -------------------------------------------------------

// A call naming a function the request did not offer (a model inventing `rm_rf`) is not a
// call: a client dispatching tool_calls by name must never be handed a name it did not
// give, so the region it sits in is read as text and stays in `content`, as any other text
// that does not parse as a call. llama-server does the same (its parsers are built from the
// offered names, so another name does not parse); vLLM's Hermes parser passes any name on,
// which is the hole. Rejected: dropping the call (loses text the client may want to show)
// and flagging it (a client that dispatches without reading the flag still runs it). The
// whole region goes: in a batch with a made-up name, the calls beside it are not trusted
// either. Grammar-forced calls (tool_choice required / named) never get here: the grammar
// spells only the offered names.
bool region_calls_offered(const Region& r, const ParseOptions& opts) {
  return std::all_of(r.calls.begin(), r.calls.end(), [&](const RawCall& c) { return tool_offered(opts, c.name); });
}

struct Marker {
  std::string text;
  enum Kind { ToolCallTag, ToolCallsTag, FunctionTag, MistralCalls, DsCalls, DsCall, DsmlCalls, PythonTag, FuncTools } kind;
};

std::vector<Marker> markers_for(const ChatFormat& f) {
  switch (f.tools) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Qwen3Coder:
      return {{"<tool_call>", Marker::ToolCallTag},
              {"<tool_calls>", Marker::ToolCallsTag},
              {"<function=", Marker::FunctionTag}};
    case ToolCallFormat::Mistral: return {{"[TOOL_CALLS]", Marker::MistralCalls}};
    case ToolCallFormat::DeepSeekV3:
    case ToolCallFormat::DeepSeekR1:
      return {{kDsCallsBegin, Marker::DsCalls}, {kDsCallBegin, Marker::DsCall}, {kDsmlCallsBegin, Marker::DsmlCalls}};
    case ToolCallFormat::Llama3:
      return {{"<|python_tag|>", Marker::PythonTag}, {"functools[", Marker::FuncTools}};
    case ToolCallFormat::Generic:
    case ToolCallFormat::GptOss:
    case ToolCallFormat::Gemma4: return {};  // parsed on their own (harmony_parser, gemma4_parser)
  }
  return {};
}

Region parse_marker(const Marker& m, std::string_view text, size_t after, const ParseOptions& opts, bool partial) {
  switch (m.kind) {
    case Marker::ToolCallTag: return tool_call_tag(text, after, opts, partial);
    case Marker::ToolCallsTag: {
      // Apriel 1.5: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>
      Region r = call_array_at(text, after, false);
      if (r.status != Status::Ok) return r;
      return close_with(text, std::move(r), "</tool_calls>", partial);
    }
    case Marker::FunctionTag: {
      Region r = function_block(text, after, opts, partial);
      // A bare <function=...> block may still be closed by a stray </tool_call>.
      if (r.status == Status::Ok) {
        size_t k = skip_ws(text, r.end);
        if (expect(text, k, "</tool_call>") == Lit::Match) r.end = k;
      }
      return r;
    }
    case Marker::MistralCalls: return mistral(text, after);
    case Marker::DsCalls: return deepseek(text, after, true, partial);
    case Marker::DsCall: return deepseek(text, after, false, partial);
    case Marker::DsmlCalls: return dsml(text, after, opts, partial);
    case Marker::PythonTag: return python_tag(text, after, partial);
    case Marker::FuncTools: return call_array_at(text, after - 1, true);
  }
  return fail();
}

}  // namespace

void parse_content_region(const ChatFormat& f, std::string_view text, const ParseOptions& opts, bool partial,
                          bool trim_leading, MessageParts& out) {
  // Content pieces between calls; whitespace next to a call, and at the start after
  // </think>, is dropped.
  std::string content;
  bool after_call = false;
  auto add_piece = [&](std::string_view piece, bool before_call) {
    if (after_call || (trim_leading && content.empty() && out.content.empty())) piece = ltrim_view(piece);
    if (before_call) {
      content += rtrim_copy(piece);
    } else {
      content += piece;
    }
  };
  auto finish = [&](std::string_view tail) {
    if (after_call || (trim_leading && content.empty() && out.content.empty())) tail = ltrim_view(tail);
    // Partial: trailing whitespace may yet turn out to precede a call.
    content += partial ? rtrim_copy(tail) : std::string(tail);
    out.content += content;
  };

  if (!opts.parse_tool_calls) {
    finish(text);
    return;
  }
  size_t pos = 0;
  // Formats whose calls are JSON at the very start of the output.
  if (f.tools == ToolCallFormat::Generic || (f.tools == ToolCallFormat::Llama3 && f.syntax != ToolCallSyntax::FireFunction)) {
    const size_t s = skip_ws(text, 0);
    if (partial && s >= text.size()) return finish("");
    const bool fence = f.tools == ToolCallFormat::Generic && s < text.size() && text[s] == '`';
    if (s < text.size() && (text[s] == '{' || fence)) {
      Region r = f.tools == ToolCallFormat::Generic ? generic(text, s, partial) : llama3_json(text, s, partial);
      if (r.status == Status::Incomplete && partial) return finish("");
      if (r.status == Status::Ok && region_calls_offered(r, opts)) {
        for (RawCall& c : r.calls) out.calls.push_back(std::move(c));
        after_call = true;
        pos = r.end;
      }
    }
  }
  const std::vector<Marker> markers = markers_for(f);
  while (true) {
    size_t best = std::string_view::npos;
    const Marker* which = nullptr;
    for (const Marker& m : markers) {
      const size_t p = text.find(m.text, pos);
      if (p < best) {
        best = p;
        which = &m;
      }
    }
    if (!which) {
      std::string_view tail = text.substr(pos);
      if (partial) {
        size_t hold = 0;
        for (const Marker& m : markers) hold = std::max(hold, marker_prefix_suffix(tail, m.text));
        tail.remove_suffix(hold);
      }
      return finish(tail);
    }
    Region r = parse_marker(*which, text, best + which->text.size(), opts, partial);
    if (r.status == Status::Ok && !region_calls_offered(r, opts)) r = fail();
    if (r.status == Status::Incomplete && partial) return finish(text.substr(pos, best - pos));
    if (r.status == Status::Ok) {
      add_piece(text.substr(pos, best - pos), true);
      for (RawCall& c : r.calls) out.calls.push_back(std::move(c));
      after_call = true;
      pos = r.end;
      continue;
    }
    // Not a call: the marker is text.
    add_piece(text.substr(pos, best + which->text.size() - pos), false);
    after_call = false;
    pos = best + which->text.size();
  }
}

}  // namespace pagoda::chat::detail
