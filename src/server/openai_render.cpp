// OpenAI response building: non-streaming bodies, streaming chunks and SSE events,
// logprobs, usage and the utility endpoints' answers. The contract is
// openai_protocol.h's; requests are parsed in openai_parse.cpp.
#include "server/openai_protocol.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "common/error.h"
#include "server/openai_fields.h"

namespace pagoda::server {

namespace {

// A logprob as JSON: the float's shortest decimal (-0.1, not -0.10000000149011612),
// and -9999.0 for -infinity / NaN, as OpenAI and vLLM send (JSON has no infinity).
double json_logprob(float lp) {
  if (!std::isfinite(lp)) return -9999.0;
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, lp);
  double d = static_cast<double>(lp);
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

ordered_json bytes_json(std::string_view s) {
  ordered_json a = ordered_json::array();
  for (char c : s) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

}  // namespace

namespace fields {

ordered_json chunk_head(const std::string& object, const std::string& id, int64_t created,
                        const std::string& model) {
  ordered_json j;
  j["id"] = id;
  j["object"] = object;
  j["created"] = created;
  j["model"] = model;
  return j;
}

ordered_json chat_choice_chunk(ordered_json delta, const ordered_json& logprobs,
                               const ordered_json& finish_reason) {
  ordered_json c;
  c["index"] = 0;
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_reason;
  return c;
}

}  // namespace fields

using namespace fields;

ordered_json usage_json(const Usage& u) {
  ordered_json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

ordered_json chat_logprobs_json(const std::vector<TokenLogprobInfo>& tokens) {
  ordered_json content = ordered_json::array();
  for (const auto& t : tokens) {
    ordered_json e;
    e["token"] = sanitize_utf8(t.token);
    e["logprob"] = json_logprob(t.logprob);
    e["bytes"] = bytes_json(t.token);
    ordered_json top = ordered_json::array();
    for (const auto& alt : t.top) {
      ordered_json a;
      a["token"] = sanitize_utf8(alt.token);
      a["logprob"] = json_logprob(alt.logprob);
      a["bytes"] = bytes_json(alt.token);
      top.push_back(std::move(a));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  ordered_json j;
  j["content"] = std::move(content);
  return j;
}

ordered_json completion_logprobs_json(const std::vector<TokenLogprobInfo>& tokens,
                                      size_t text_offset_base) {
  ordered_json toks = ordered_json::array(), lps = ordered_json::array(),
               tops = ordered_json::array(), offsets = ordered_json::array();
  size_t offset = text_offset_base;
  for (const auto& t : tokens) {
    toks.push_back(sanitize_utf8(t.token));
    lps.push_back(json_logprob(t.logprob));
    ordered_json top = ordered_json::object();
    // Two alternatives with the same text share one key (the better one stays), as in
    // OpenAI's and vLLM's dict.
    for (const auto& alt : t.top) {
      std::string key = sanitize_utf8(alt.token);
      if (!top.contains(key)) top[key] = json_logprob(alt.logprob);
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += t.token.size();  // bytes of the token's text
  }
  ordered_json j;
  j["tokens"] = std::move(toks);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

std::string chat_response_json(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason,
                               const Usage& usage, const ordered_json& logprobs) {
  ordered_json j = chunk_head("chat.completion", id, created, model);
  ordered_json choice;
  choice["index"] = 0;
  choice["message"] = {{"role", "assistant"}, {"content", text}};
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  j["choices"] = ordered_json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump_json(j);
}

std::string completion_response_json(const std::string& id, int64_t created,
                                     const std::string& model, const std::string& text,
                                     const std::string& finish_reason, const Usage& usage,
                                     const ordered_json& logprobs) {
  ordered_json j = chunk_head("text_completion", id, created, model);
  ordered_json choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  j["choices"] = ordered_json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump_json(j);
}

std::string sse_event(const ordered_json& chunk) {
  std::string out = "data: ";
  out += dump_json(chunk);
  out += "\n\n";
  return out;
}

ordered_json chat_chunk_role(const std::string& id, int64_t created, const std::string& model,
                             bool include_usage) {
  ordered_json j = chunk_head("chat.completion.chunk", id, created, model);
  ordered_json delta = {{"role", "assistant"}, {"content", ""}};
  j["choices"] = ordered_json::array({chat_choice_chunk(std::move(delta), nullptr, nullptr)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ordered_json chat_chunk_content(const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const ordered_json& logprobs,
                                bool include_usage) {
  ordered_json j = chunk_head("chat.completion.chunk", id, created, model);
  ordered_json delta = {{"content", text}};
  j["choices"] = ordered_json::array({chat_choice_chunk(std::move(delta), logprobs, nullptr)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ordered_json chat_chunk_finish(const std::string& id, int64_t created, const std::string& model,
                               const std::string& finish_reason, bool include_usage) {
  ordered_json j = chunk_head("chat.completion.chunk", id, created, model);
  j["choices"] = ordered_json::array(
      {chat_choice_chunk(ordered_json::object(), nullptr, ordered_json(finish_reason))});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                              const std::string& text, const ordered_json& logprobs,
                              const std::optional<std::string>& finish_reason, bool include_usage) {
  ordered_json j = chunk_head("text_completion", id, created, model);
  ordered_json choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason ? ordered_json(*finish_reason) : ordered_json(nullptr);
  j["choices"] = ordered_json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

ordered_json usage_chunk(ApiKind kind, const std::string& id, int64_t created,
                         const std::string& model, const Usage& usage) {
  ordered_json j = chunk_head(kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion",
                              id, created, model);
  j["choices"] = ordered_json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string tokenize_response_json(const std::vector<int32_t>& ids,
                                   const std::vector<std::string>* pieces) {
  PAGODA_CHECK(!pieces || pieces->size() == ids.size(),
               "tokenize_response_json: " + std::to_string(pieces ? pieces->size() : 0) +
                   " pieces for " + std::to_string(ids.size()) + " ids");
  ordered_json tokens = ordered_json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!pieces) {
      tokens.push_back(ids[i]);
      continue;
    }
    const std::string& piece = (*pieces)[i];
    ordered_json t;
    t["id"] = ids[i];
    t["piece"] = is_valid_utf8(piece) ? ordered_json(piece) : bytes_json(piece);
    tokens.push_back(std::move(t));
  }
  ordered_json j;
  j["tokens"] = std::move(tokens);
  return dump_json(j);
}

}  // namespace pagoda::server
