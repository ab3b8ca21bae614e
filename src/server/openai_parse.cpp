// OpenAI request parsing: the field readers (openai_fields.h) and the chat, completion
// and utility-endpoint parsers. The contract is openai_protocol.h's; responses and SSE
// chunks are built in openai_render.cpp, tools and output constraints parsed in
// openai_tools.cpp.
#include "server/openai_protocol.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "common/json_parse.h"
#include "server/openai_fields.h"

namespace pagoda::server {

namespace fields {

// ---- errors -----------------------------------------------------------------

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// A number for a message: the shortest text that reads back as the same double.
std::string fmt_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

// A client's string echoed in a message: at most 40 bytes, JSON-quoted (so control
// characters cannot break the one-line message), never invalid UTF-8.
std::string echo(std::string_view s) {
  std::string cut(s.substr(0, 40));
  std::string out = dump_json(ordered_json(sanitize_utf8(cut)));
  if (s.size() > 40) out += "...";
  return out;
}

// ---- field readers ------------------------------------------------------------
// Each returns nullopt for an absent field or JSON null (OpenAI clients send null for
// "not given"), and throws ApiError naming the field for a wrong type.

const ordered_json* find_field(const ordered_json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> opt_number(const ordered_json& obj, const std::string& key) {
  const ordered_json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(key, quoted(key) + " must be a number");
  return v->get<double>();
}

// An integer: a JSON integer, or a number with an integral value (1.0), in int64.
std::optional<int64_t> opt_integer(const ordered_json& obj, const std::string& key) {
  const ordered_json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(key, quoted(key) + " is out of range (got " + std::to_string(u) + ")");
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // 2^63 is exactly representable; every double below it in magnitude fits.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  }
  bad(key, quoted(key) + " must be an integer");
}

std::optional<bool> opt_bool(const ordered_json& obj, const std::string& key) {
  const ordered_json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(key, quoted(key) + " must be a boolean");
  return v->get<bool>();
}

void require_utf8(const std::string& s, const std::string& name) {
  if (!is_valid_utf8(s)) bad(name, quoted(name) + " is not valid UTF-8");
}

std::optional<std::string> opt_string(const ordered_json& obj, const std::string& key) {
  const ordered_json* v = find_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(key, quoted(key) + " must be a string");
  std::string s = v->get<std::string>();
  require_utf8(s, key);
  return s;
}

// lo <= v <= hi (each bound inclusive unless said otherwise); the message shows the
// range in interval notation.
void check_range(const std::string& key, double v, double lo, double hi, bool lo_open, bool hi_open) {
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    bad(key, quoted(key) + " must be in " + (lo_open ? "(" : "[") + fmt_number(lo) + ", " +
                 fmt_number(hi) + (hi_open ? ")" : "]") + " (got " + fmt_number(v) + ")");
}

void check_min(const std::string& key, int64_t v, int64_t min) {
  if (v < min)
    bad(key, quoted(key) + " must be >= " + std::to_string(min) + " (got " + std::to_string(v) + ")");
}

// Characters as OpenAI counts them: code points (the body parsed as JSON is valid UTF-8,
// so each is one lead byte).
size_t utf8_length(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// OpenAI's bounds (the API reference for `metadata`): 16 pairs, 64-character keys,
// 512-character values. Beyond validation they bound what the Responses store keeps.
void check_metadata(const ordered_json& body) {
  constexpr size_t kMaxPairs = 16, kMaxKeyChars = 64, kMaxValueChars = 512;
  const ordered_json* m = find_field(body, "metadata");
  if (!m) return;
  if (!m->is_object()) bad("metadata", "'metadata' must be an object");
  if (m->size() > kMaxPairs)
    bad("metadata", "'metadata' may hold at most 16 key-value pairs (got " + std::to_string(m->size()) + ")");
  for (auto it = m->begin(); it != m->end(); ++it) {
    if (utf8_length(it.key()) > kMaxKeyChars)
      bad("metadata", "'metadata' keys must be at most 64 characters (got " + echo(it.key()) + ")");
    if (!it.value().is_string())
      bad("metadata." + it.key(), "'metadata' values must be strings (" + echo(it.key()) + " is not)");
    if (utf8_length(it.value().get_ref<const std::string&>()) > kMaxValueChars)
      bad("metadata." + it.key(), "'metadata' values must be at most 512 characters (" + echo(it.key()) + " is longer)");
  }
}

// ---- the body -----------------------------------------------------------------

// Deeper JSON is refused before anything walks it recursively (templates, dump()); the
// check is the shared linear one (common/json_parse.h), not nlohmann's parser callback,
// which made a body of many small objects quadratic.
ordered_json parse_body(std::string_view body) {
  if (!json_depth_within(body, kMaxJsonDepth))
    bad("", "invalid JSON: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  ordered_json j;
  try {
    j = ordered_json::parse(body.begin(), body.end());
  } catch (const ordered_json::exception& e) {
    // parse_error, and out_of_range 406 for a number too large for a double (1e999).
    // what(): "[json.exception.parse_error.101] parse error at line 1, column 2: ...";
    // the id prefix means nothing to a client.
    std::string msg = e.what();
    if (auto pos = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
      msg.erase(0, pos + 2);
    // "last read: '...'" quotes the whole current token, which may be megabytes.
    constexpr size_t kMaxMessage = 240;
    if (msg.size() > kMaxMessage) msg = msg.substr(0, kMaxMessage) + "...";
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    bad("", "invalid JSON: " + sanitize_utf8(msg));
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  return j;
}

}  // namespace fields

namespace {

using namespace fields;

// ---- chat messages --------------------------------------------------------------

bool known_role(const std::string& r) {
  return r == "system" || r == "user" || r == "assistant" || r == "tool" || r == "developer";
}

// The content of messages[i] as one string, or null.
// An image part's URL: {"type": "image_url", "image_url": {"url": "..."}} (or the URL as a
// string, as some clients send it).
std::string image_part_url(const ordered_json& part, const std::string& part_name) {
  auto it = part.find("image_url");
  const std::string name = part_name + ".image_url";
  if (it == part.end()) bad(name, quoted(name) + " is required");
  const ordered_json* url = &*it;
  if (it->is_object()) {
    auto u = it->find("url");
    if (u == it->end()) bad(name + ".url", quoted(name + ".url") + " is required");
    url = &*u;
  }
  if (!url->is_string()) bad(name, quoted(name) + " must be an object {\"url\": \"data:...\"}");
  return url->get<std::string>();
}

ordered_json message_content(const ordered_json& m, const std::string& where, const std::string& role,
                             std::vector<std::string>* images) {
  const std::string name = where + ".content";
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    // OpenAI: an assistant message may leave content out when it carries tool calls.
    const bool has_calls = (m.contains("tool_calls") && !m["tool_calls"].is_null()) ||
                           (m.contains("function_call") && !m["function_call"].is_null());
    if (role == "assistant" && has_calls) return nullptr;
    bad(name, quoted(name) + " is required");
  }
  if (it->is_string()) {
    std::string s = it->get<std::string>();
    require_utf8(s, name);
    return s;
  }
  if (!it->is_array()) bad(name, quoted(name) + " must be a string or an array of content parts");
  std::string joined;
  for (size_t p = 0; p < it->size(); ++p) {
    const ordered_json& part = (*it)[p];
    const std::string part_name = name + "[" + std::to_string(p) + "]";
    if (!part.is_object()) bad(part_name, quoted(part_name) + " must be an object");
    auto type = part.find("type");
    if (type != part.end() && type->is_string() && type->get<std::string>() == "image_url") {
      // The image becomes the marker the server replaces with the image's tokens after the
      // template has run (llama-server's <__media__>); its URL is kept in order.
      std::string url = image_part_url(part, part_name);
      if (images) images->push_back(std::move(url));
      joined += kImageMarker;
      continue;
    }
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text")
      bad(part_name, "only text and image_url content parts are supported (" + part_name + ")");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      bad(part_name + ".text", quoted(part_name + ".text") + " must be a string");
    const std::string& t = text->get_ref<const std::string&>();
    require_utf8(t, part_name + ".text");
    joined += t;
  }
  return joined;
}

ordered_json parse_messages(const ordered_json& body, std::vector<std::string>* images = nullptr) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) bad("messages", "'messages' is required");
  if (!it->is_array()) bad("messages", "'messages' must be an array");
  if (it->empty()) bad("messages", "'messages' must not be empty");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const ordered_json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, quoted(where) + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || role->is_null()) bad(where + ".role", quoted(where + ".role") + " is required");
    if (!role->is_string()) bad(where + ".role", quoted(where + ".role") + " must be a string");
    const std::string r = role->get<std::string>();
    if (!known_role(r))
      bad(where + ".role", quoted(where + ".role") +
                               " must be one of system, user, assistant, tool, developer (got " +
                               echo(r) + ")");
    auto calls = m.find("tool_calls");
    if (calls != m.end() && !calls->is_null() && !calls->is_array())
      bad(where + ".tool_calls", quoted(where + ".tool_calls") + " must be an array");
    ordered_json copy = m;
    copy["content"] = message_content(m, where, r, images);
    out.push_back(std::move(copy));
  }
  return out;
}


// ---- fields shared by both endpoints --------------------------------------------

void parse_stop(const ordered_json& body, CompletionRequest& r) {
  constexpr size_t kMaxStop = 16;
  const ordered_json* v = find_field(body, "stop");
  if (!v) return;
  // Empty strings are refused, not ignored: an empty stop string would match at once,
  // which no client means; saying so beats silently changing the request.
  auto take = [&](const ordered_json& s) {
    if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
    std::string str = s.get<std::string>();
    if (str.empty()) bad("stop", "'stop' strings must not be empty");
    require_utf8(str, "stop");
    r.stop.push_back(std::move(str));
  };
  if (v->is_string()) {
    take(*v);
  } else if (v->is_array()) {
    if (v->size() > kMaxStop)
      bad("stop", "'stop' may hold at most " + std::to_string(kMaxStop) + " strings (got " +
                      std::to_string(v->size()) + ")");
    for (const auto& s : *v) take(s);
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
}

void parse_logit_bias(const ordered_json& body, int32_t n_vocab, SamplingParams& sp) {
  const ordered_json* v = find_field(body, "logit_bias");
  if (!v) return;
  if (!v->is_object()) bad("logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
  for (const auto& [key, bias] : v->items()) {
    int64_t id = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    // Canonical decimal only ("5", not "05" or "+5"), so two keys never name one token.
    if (ec != std::errc() || end != key.data() + key.size() || key != std::to_string(id))
      bad("logit_bias", "'logit_bias' key " + echo(key) + " is not a token id");
    if (id < 0 || id >= n_vocab)
      bad("logit_bias", "'logit_bias' token id " + std::to_string(id) +
                            " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    if (!bias.is_number())
      bad("logit_bias", "'logit_bias' value for token " + std::to_string(id) + " must be a number");
    const double b = bias.get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      bad("logit_bias", "'logit_bias' value for token " + std::to_string(id) +
                            " must be in [-100, 100] (got " + fmt_number(b) + ")");
    sp.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
}

// Everything but the prompt / messages and logprobs, which differ by endpoint.
void parse_common(const ordered_json& body, int32_t n_vocab, const SamplingDefaults& defaults,
                  CompletionRequest& r) {
  if (auto m = opt_string(body, "model")) r.model = *m;

  // OpenAI's defaults, not the CLI's (SamplingParams' own defaults are llama.cpp's).
  SamplingParams& sp = r.sampling;
  sp.temperature = 1.0f;
  sp.top_p = 1.0f;
  sp.top_k = -1;
  sp.min_p = 0.0f;
  sp.repetition_penalty = 1.0f;
  sp.presence_penalty = 0.0f;
  sp.frequency_penalty = 0.0f;
  // OpenAI's penalties count every generated token, not a window (penalties only
  // count generated tokens here: the engine never accept()s the prompt).
  sp.penalty_last_n = -1;
  sp.seed = SamplingParams::kRandomSeed;
  if (defaults.temperature) sp.temperature = *defaults.temperature;
  if (defaults.top_p) sp.top_p = *defaults.top_p;
  if (defaults.top_k) sp.top_k = *defaults.top_k;
  if (defaults.repetition_penalty) sp.repetition_penalty = *defaults.repetition_penalty;

  if (auto t = opt_number(body, "temperature")) {
    check_range("temperature", *t, 0.0, 2.0);
    sp.temperature = static_cast<float>(*t);
  }
  if (auto p = opt_number(body, "top_p")) {
    check_range("top_p", *p, 0.0, 1.0, /*lo_open=*/true);
    sp.top_p = static_cast<float>(*p);
  }
  if (auto k = opt_integer(body, "top_k")) {
    check_min("top_k", *k, -1);
    if (*k > std::numeric_limits<int32_t>::max()) *k = std::numeric_limits<int32_t>::max();  // = off
    sp.top_k = static_cast<int32_t>(*k);
  }
  if (auto p = opt_number(body, "min_p")) {
    check_range("min_p", *p, 0.0, 1.0);
    sp.min_p = static_cast<float>(*p);
  }
  if (auto p = opt_number(body, "presence_penalty")) {
    check_range("presence_penalty", *p, -2.0, 2.0);
    sp.presence_penalty = static_cast<float>(*p);
  }
  if (auto p = opt_number(body, "frequency_penalty")) {
    check_range("frequency_penalty", *p, -2.0, 2.0);
    sp.frequency_penalty = static_cast<float>(*p);
  }
  if (auto p = opt_number(body, "repetition_penalty")) {
    if (!(std::isfinite(*p) && *p > 0.0))
      bad("repetition_penalty", "'repetition_penalty' must be > 0 (got " + fmt_number(*p) + ")");
    sp.repetition_penalty = static_cast<float>(*p);
  }
  // Any int64, reinterpreted as uint64: -1 is SamplingParams::kRandomSeed (a fresh
  // seed per request), as llama-server's seed -1.
  if (auto s = opt_integer(body, "seed")) sp.seed = static_cast<uint64_t>(*s);
  parse_logit_bias(body, n_vocab, sp);
  if (auto err = sp.validate(n_vocab)) bad(err->substr(0, err->find(' ')), *err);

  auto max_tokens = opt_integer(body, "max_tokens");
  auto max_completion = opt_integer(body, "max_completion_tokens");
  if (max_tokens) check_min("max_tokens", *max_tokens, 1);
  if (max_completion) check_min("max_completion_tokens", *max_completion, 1);
  if (max_completion)
    r.max_tokens = *max_completion;
  else if (max_tokens)
    r.max_tokens = *max_tokens;
  if (auto m = opt_integer(body, "min_tokens")) {
    check_min("min_tokens", *m, 0);
    if (r.max_tokens >= 0 && *m > r.max_tokens)
      bad("min_tokens", "'min_tokens' (" + std::to_string(*m) + ") must not exceed 'max_tokens' (" +
                            std::to_string(r.max_tokens) + ")");
    r.min_tokens = *m;
  }
  if (auto n = opt_integer(body, "n"); n && *n != 1)
    bad("n", "'n' must be 1: one choice per request is supported (got " + std::to_string(*n) + ")");
  if (auto b = opt_bool(body, "ignore_eos")) r.ignore_eos = *b;
  if (auto b = opt_bool(body, "speculative")) r.speculative = *b;
  parse_stop(body, r);

  if (auto s = opt_bool(body, "stream")) r.stream = *s;
  // Accepted without `stream` too (OpenAI refuses that; it is harmless here).
  if (const ordered_json* so = find_field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (auto u = find_field(*so, "include_usage")) {
      if (!u->is_boolean())
        bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
      r.include_usage = u->get<bool>();
    }
  }

  // cache_key: see the contract. U+001F is refused in both parts, so that no
  // prompt_cache_key can spell out another tenant's salt ("a\x1fs:b" vs key "a" +
  // salt "b").
  auto key = opt_string(body, "prompt_cache_key").value_or("");
  auto salt = opt_string(body, "cache_salt").value_or("");
  if (key.find('\x1f') != std::string::npos)
    bad("prompt_cache_key", "'prompt_cache_key' must not contain U+001F");
  if (salt.find('\x1f') != std::string::npos) bad("cache_salt", "'cache_salt' must not contain U+001F");
  if (!key.empty()) r.cache_key = "k:" + key;
  if (!salt.empty()) {
    if (!r.cache_key.empty()) r.cache_key += '\x1f';
    r.cache_key += "s:" + salt;
  }
  if (auto c = opt_bool(body, "cache_prompt")) r.cache_prompt = *c;
  (void)opt_string(body, "user");  // accepted and ignored; a non-string is still a 400
}

// One token id of a prompt.
int32_t prompt_token(const ordered_json& v, int32_t n_vocab) {
  if (!v.is_number_integer())
    bad("prompt", "'prompt' must be a string or an array of token ids (integers)");
  const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (neg || v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab))
    bad("prompt", "'prompt' token id " + (neg ? std::to_string(v.get<int64_t>()) : std::to_string(v.get<uint64_t>())) +
                      " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

void parse_prompt(const ordered_json& body, int32_t n_vocab, CompletionRequest& r) {
  const ordered_json* p = find_field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  auto take_text = [&](const ordered_json& s) {
    std::string text = s.get<std::string>();
    if (text.empty()) bad("prompt", "'prompt' must not be empty");
    require_utf8(text, "prompt");
    r.prompt_text = std::move(text);
  };
  auto take_tokens = [&](const ordered_json& a) {
    if (a.empty()) bad("prompt", "'prompt' must not be empty");
    std::vector<int32_t> ids;
    ids.reserve(a.size());
    for (const auto& v : a) ids.push_back(prompt_token(v, n_vocab));
    r.prompt_tokens = std::move(ids);
  };
  if (p->is_string()) return take_text(*p);
  if (!p->is_array())
    bad("prompt", "'prompt' must be a string or an array of token ids");
  if (p->empty()) bad("prompt", "'prompt' must not be empty");
  const ordered_json& first = (*p)[0];
  if (first.is_string() || first.is_array()) {
    // A batch of prompts: only a batch of one is served.
    if (p->size() != 1)
      bad("prompt", "'prompt' must be a single prompt: batches of prompts are not supported (got " +
                        std::to_string(p->size()) + ")");
    if (first.is_string()) return take_text(first);
    return take_tokens(first);
  }
  take_tokens(*p);
}

}  // namespace

// ---- public: parsing ----------------------------------------------------------------

using namespace fields;

CompletionRequest parse_chat_request(std::string_view body_text, int32_t n_vocab, const SamplingDefaults& defaults) {
  return parse_chat_request_body(parse_body(body_text), n_vocab, defaults);
}

CompletionRequest parse_chat_request_body(const ordered_json& body, int32_t n_vocab, const SamplingDefaults& defaults) {
  CompletionRequest r;
  r.kind = ApiKind::Chat;
  r.messages = parse_messages(body, &r.image_urls);
  r.tools = parse_tools(body);
  check_metadata(body);
  if (const ordered_json* k = find_field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *k;
  }
  parse_common(body, n_vocab, defaults, r);
  parse_tool_and_output_fields(body, ApiKind::Chat, r);
  if (auto lp = opt_bool(body, "logprobs")) r.logprobs = *lp;
  if (auto top = opt_integer(body, "top_logprobs")) {
    check_range("top_logprobs", static_cast<double>(*top), 0, 20);
    if (*top > 0 && !r.logprobs)
      bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    r.top_logprobs = static_cast<int>(*top);
  }
  return r;
}

CompletionRequest parse_completion_request(std::string_view body_text, int32_t n_vocab,
                                           const SamplingDefaults& defaults) {
  const ordered_json body = parse_body(body_text);
  CompletionRequest r;
  r.kind = ApiKind::Completion;
  parse_prompt(body, n_vocab, r);
  parse_common(body, n_vocab, defaults, r);
  parse_tool_and_output_fields(body, ApiKind::Completion, r);
  if (auto lp = opt_integer(body, "logprobs")) {
    check_range("logprobs", static_cast<double>(*lp), 0, 5);
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(*lp);
  }
  if (auto e = opt_bool(body, "echo")) {
    r.echo = *e;
    if (r.echo) bad("echo", "'echo' is not supported");
  }
  if (auto b = opt_integer(body, "best_of"); b && *b != 1)
    bad("best_of", "'best_of' must be 1 (got " + std::to_string(*b) + ")");
  if (auto s = opt_string(body, "suffix"); s && !s->empty()) bad("suffix", "'suffix' is not supported");
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body_text) {
  const ordered_json body = parse_body(body_text);
  TokenizeRequest r;
  auto content = opt_string(body, "content");
  if (!content) bad("content", "'content' is required");
  r.content = std::move(*content);
  if (auto b = opt_bool(body, "add_special")) r.add_special = *b;
  if (auto b = opt_bool(body, "with_pieces")) r.with_pieces = *b;
  return r;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body_text, int32_t n_vocab) {
  const ordered_json body = parse_body(body_text);
  std::vector<int32_t> ids;
  const ordered_json* t = find_field(body, "tokens");
  if (!t) return ids;  // llama-server: no tokens, empty content
  if (!t->is_array()) bad("tokens", "'tokens' must be an array of token ids");
  ids.reserve(t->size());
  for (const auto& v : *t) {
    if (!v.is_number_integer()) bad("tokens", "'tokens' must be an array of token ids (integers)");
    const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (neg || v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab))
      bad("tokens", "'tokens' holds a token id outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

ApplyTemplateRequest parse_apply_template_request(std::string_view body_text) {
  const ordered_json body = parse_body(body_text);
  ApplyTemplateRequest r;
  r.messages = parse_messages(body);
  r.tools = parse_tools(body);
  if (auto b = opt_bool(body, "add_generation_prompt")) r.add_generation_prompt = *b;
  // The variables a chat request would give the template (gpt-oss's reasoning_effort).
  if (const ordered_json* k = find_field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_kwargs = *k;
  }
  if (auto effort = opt_string(body, "reasoning_effort"); effort && !r.template_kwargs.contains("reasoning_effort"))
    r.template_kwargs["reasoning_effort"] = *effort;
  return r;
}

}  // namespace pagoda::server
