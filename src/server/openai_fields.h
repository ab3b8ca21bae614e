// Field readers shared by the OpenAI protocol parsers (openai_parse.cpp,
// openai_tools.cpp) and the response pieces shared by the builders (openai_render.cpp,
// openai_tools.cpp). Internal to src/server.
//
// Each opt_* returns nullopt for an absent field or JSON null (OpenAI clients send null
// for "not given") and throws ApiError 400 naming the field for a wrong type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai_protocol.h"

namespace pagoda::server::fields {

[[noreturn]] void bad(const std::string& param, const std::string& message);
std::string quoted(const std::string& name);
std::string fmt_number(double v);
// A client's string for a message: at most 40 bytes, JSON-quoted, valid UTF-8.
std::string echo(std::string_view s);
// The request body as a JSON object: a 400 for invalid JSON, a number beyond double's
// range, nesting deeper than 64 levels, or a body that is not an object.
ordered_json parse_body(std::string_view body);
const ordered_json* find_field(const ordered_json& obj, const std::string& key);
std::optional<double> opt_number(const ordered_json& obj, const std::string& key);
std::optional<int64_t> opt_integer(const ordered_json& obj, const std::string& key);
std::optional<bool> opt_bool(const ordered_json& obj, const std::string& key);
void require_utf8(const std::string& s, const std::string& name);
std::optional<std::string> opt_string(const ordered_json& obj, const std::string& key);
// lo <= v <= hi (each bound inclusive unless said otherwise).
void check_range(const std::string& key, double v, double lo, double hi, bool lo_open = false,
                 bool hi_open = false);
void check_min(const std::string& key, int64_t v, int64_t min);
// `metadata` (chat completions, responses) as OpenAI bounds it: an object of at most 16
// string values, keys at most 64 characters, values at most 512; a 400 naming the field
// otherwise. Absent or null is fine.
void check_metadata(const ordered_json& body);

// Response pieces: {"id","object","created","model"} and one streaming choice
// {"index":0,"delta","logprobs","finish_reason"}.
ordered_json chunk_head(const std::string& object, const std::string& id, int64_t created,
                        const std::string& model);
ordered_json chat_choice_chunk(ordered_json delta, const ordered_json& logprobs,
                               const ordered_json& finish_reason);

}  // namespace pagoda::server::fields

namespace pagoda::server {
// openai_tools.cpp: tools, tool_choice, parallel_tool_calls (chat only), response_format
// and the extension constraint fields (grammar, json_schema, guided_json, guided_regex,
// guided_choice), reasoning_effort. Throws ApiError 400.
void parse_tool_and_output_fields(const ordered_json& body, ApiKind kind, CompletionRequest& r);
// `tools` alone (also /apply-template): null, or an array of checked function tools.
ordered_json parse_tools(const ordered_json& body);
}  // namespace pagoda::server
