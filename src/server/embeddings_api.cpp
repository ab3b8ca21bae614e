// Embeddings and rerank wire protocol; the contract is embeddings_api.h's.
#include "server/embeddings_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/error.h"
#include "server/openai_fields.h"

namespace pagoda::server {

namespace {

using namespace fields;

std::string indexed(const std::string& name, size_t i) { return name + "[" + std::to_string(i) + "]"; }

// One token id of an input; `where` names it for the message.
int32_t input_token(const ordered_json& v, int32_t n_vocab, const std::string& where) {
  if (!v.is_number_integer()) bad("input", quoted(where) + " must hold token ids (integers)");
  const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (neg || v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab))
    bad("input", quoted(where) + " token id " +
                     (neg ? std::to_string(v.get<int64_t>()) : std::to_string(v.get<uint64_t>())) +
                     " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

EmbeddingInput text_input(const ordered_json& v, const std::string& where) {
  std::string text = v.get<std::string>();
  if (text.empty()) bad("input", quoted(where) + " must not be an empty string");
  require_utf8(text, "input");
  EmbeddingInput in;
  in.text = std::move(text);
  return in;
}

EmbeddingInput token_input(const ordered_json& a, int32_t n_vocab, const std::string& where) {
  if (a.empty()) bad("input", quoted(where) + " must not be an empty list of token ids");
  EmbeddingInput in;
  in.tokens.reserve(a.size());
  for (const auto& v : a) in.tokens.push_back(input_token(v, n_vocab, where));
  return in;
}

void check_count(size_t n, const std::string& name) {
  if (n > kMaxInputs)
    bad(name, quoted(name) + " has " + std::to_string(n) + " items; at most " + std::to_string(kMaxInputs) +
                  " are allowed");
}

// The shortest decimal that reads back as the same float32.
void append_float(std::string& out, float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  PAGODA_CHECK(ec == std::errc() && std::isfinite(v), "embeddings: a non-finite value reached the response");
  out.append(buf, end);
}

void append_json_string(std::string& out, const std::string& s) { out += dump_json(ordered_json(s)); }

}  // namespace

EmbeddingsRequest parse_embeddings_request(std::string_view body_text, int32_t n_vocab) {
  const ordered_json body = parse_body(body_text);
  EmbeddingsRequest r;
  r.model = opt_string(body, "model").value_or("");
  const ordered_json* input = find_field(body, "input");
  if (!input) bad("input", "'input' is required");
  if (input->is_string()) {
    r.inputs.push_back(text_input(*input, "input"));
  } else if (input->is_array()) {
    if (input->empty()) bad("input", "'input' must not be an empty array");
    check_count(input->size(), "input");
    const ordered_json& first = (*input)[0];
    if (first.is_number()) {  // one input as token ids
      r.inputs.push_back(token_input(*input, n_vocab, "input"));
    } else {
      const bool strings = first.is_string();
      for (size_t i = 0; i < input->size(); ++i) {
        const ordered_json& item = (*input)[i];
        const std::string where = indexed("input", i);
        if (strings && item.is_string()) {
          r.inputs.push_back(text_input(item, where));
        } else if (!strings && item.is_array()) {
          r.inputs.push_back(token_input(item, n_vocab, where));
        } else {
          bad("input", quoted(where) + " must be " + (strings ? "a string" : "an array of token ids") +
                           ": 'input' is a string, an array of strings, an array of token ids or an array of "
                           "arrays of token ids");
        }
      }
    }
  } else {
    bad("input", "'input' must be a string, an array of strings, an array of token ids or an array of arrays of "
                 "token ids");
  }
  if (auto fmt = opt_string(body, "encoding_format")) {
    if (*fmt != "float" && *fmt != "base64")
      bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\" (got " + echo(*fmt) + ")");
    r.base64 = *fmt == "base64";
  }
  if (auto d = opt_integer(body, "dimensions")) {
    check_min("dimensions", *d, 1);
    r.dimensions = *d;
  }
  (void)opt_string(body, "user");
  return r;
}

std::vector<float> normalized_embedding(std::span<const float> pooled, int64_t dims) {
  PAGODA_CHECK(dims >= 1 && static_cast<size_t>(dims) <= pooled.size(), "normalized_embedding: dims out of range");
  double sum = 0.0;
  for (int64_t i = 0; i < dims; ++i) sum += static_cast<double>(pooled[i]) * pooled[i];
  const double norm = std::sqrt(sum);
  std::vector<float> out(static_cast<size_t>(dims));
  for (int64_t i = 0; i < dims; ++i)
    out[static_cast<size_t>(i)] = norm > 0.0 ? static_cast<float>(pooled[i] / norm) : 0.0f;
  return out;
}

std::string base64_floats(std::span<const float> v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(u >> (8 * b));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(n >> s) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    const uint32_t n = (bytes[i] << 16) | (rest == 2 ? bytes[i + 1] << 8 : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string embeddings_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                     bool base64, int64_t prompt_tokens) {
  // Written by hand rather than through nlohmann::json: a float32 stored in a JSON
  // number becomes a double and prints with 17 digits (0.1f -> 0.10000000149011612),
  // twice the bytes of its shortest float32 text.
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < embeddings.size(); ++i) {
    if (i) out += ',';
    out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (base64) {
      out += '"' + base64_floats(embeddings[i]) + '"';
    } else {
      out += '[';
      for (size_t d = 0; d < embeddings[i].size(); ++d) {
        if (d) out += ',';
        append_float(out, embeddings[i][d]);
      }
      out += ']';
    }
    out += '}';
  }
  out += "],\"model\":";
  append_json_string(out, model);
  out += ",\"usage\":{\"prompt_tokens\":" + std::to_string(prompt_tokens) +
         ",\"total_tokens\":" + std::to_string(prompt_tokens) + "}}";
  return out;
}

RerankRequest parse_rerank_request(std::string_view body_text) {
  const ordered_json body = parse_body(body_text);
  RerankRequest r;
  r.model = opt_string(body, "model").value_or("");
  std::optional<std::string> query = opt_string(body, "query");
  if (!query) bad("query", "'query' is required");
  if (query->empty()) bad("query", "'query' must not be empty");
  r.query = std::move(*query);
  const ordered_json* docs = find_field(body, "documents");
  if (!docs) bad("documents", "'documents' is required");
  if (!docs->is_array()) bad("documents", "'documents' must be an array of strings");
  if (docs->empty()) bad("documents", "'documents' must not be empty");
  check_count(docs->size(), "documents");
  for (size_t i = 0; i < docs->size(); ++i) {
    const ordered_json& d = (*docs)[i];
    const std::string where = indexed("documents", i);
    const ordered_json* text = &d;
    if (d.is_object()) {  // Jina / Cohere also take {"text": "..."}
      text = find_field(d, "text");
      if (!text) bad("documents", quoted(where) + " must be a string or an object with a 'text' string");
    }
    if (!text->is_string()) bad("documents", quoted(where) + " must be a string or an object with a 'text' string");
    std::string s = text->get<std::string>();
    if (s.empty()) bad("documents", quoted(where) + " must not be empty");
    require_utf8(s, "documents");
    r.documents.push_back(std::move(s));
  }
  if (auto n = opt_integer(body, "top_n")) {
    check_min("top_n", *n, 1);
    r.top_n = *n;
  }
  r.return_documents = opt_bool(body, "return_documents").value_or(false);
  return r;
}

float rerank_score(std::span<const float> outputs) {
  PAGODA_CHECK(!outputs.empty(), "rerank_score: no outputs");
  if (outputs.size() == 1) return outputs[0];
  const double mx = *std::max_element(outputs.begin(), outputs.end());
  double sum = 0.0;
  for (float x : outputs) sum += std::exp(static_cast<double>(x) - mx);
  return static_cast<float>(std::exp(static_cast<double>(outputs[0]) - mx) / sum);
}

std::string rerank_prompt(const std::string& rerank_template, const std::string& query, const std::string& document) {
  if (rerank_template.empty()) return query + "\n" + document;
  std::string out;
  out.reserve(rerank_template.size() + query.size() + document.size());
  // One left-to-right pass: a query that itself spells "{document}" stays text.
  for (size_t i = 0; i < rerank_template.size();) {
    if (rerank_template.compare(i, 7, "{query}") == 0) {
      out += query;
      i += 7;
    } else if (rerank_template.compare(i, 10, "{document}") == 0) {
      out += document;
      i += 10;
    } else {
      out += rerank_template[i++];
    }
  }
  return out;
}

std::string rerank_response_json(const std::string& model, const std::vector<float>& scores,
                                 const RerankRequest& request, int64_t prompt_tokens) {
  PAGODA_CHECK(scores.size() == request.documents.size(), "rerank_response_json: one score per document");
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  const size_t n = request.top_n ? std::min<size_t>(order.size(), static_cast<size_t>(*request.top_n)) : order.size();
  std::string out = "{\"object\":\"list\",\"model\":";
  append_json_string(out, model);
  out += ",\"results\":[";
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    if (k) out += ',';
    out += "{\"index\":" + std::to_string(i) + ",\"relevance_score\":";
    append_float(out, scores[i]);
    if (request.return_documents) {
      out += ",\"document\":{\"text\":";
      append_json_string(out, request.documents[i]);
      out += '}';
    }
    out += '}';
  }
  out += "],\"usage\":{\"prompt_tokens\":" + std::to_string(prompt_tokens) +
         ",\"total_tokens\":" + std::to_string(prompt_tokens) + "}}";
  return out;
}

}  // namespace pagoda::server
