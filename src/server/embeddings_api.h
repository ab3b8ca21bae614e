// Embeddings and rerank wire protocol: POST /v1/embeddings (OpenAI's shape) and
// POST /v1/rerank (the Jina / Cohere shape llama-server serves): request parsing and
// validation, the L2 normalisation and Matryoshka truncation of pooled vectors, base64
// encoding, reranker scores and prompts, and the response JSON.
//
// Contract:
// - Pure functions over JSON text and floats: no engine, no sockets. Thread-safe.
// - Parsing throws ApiError 400 (param named, one line) for invalid JSON, a body that is
//   not an object, wrong types and bad values; unknown fields are ignored, JSON null
//   means "not given" (as in openai_protocol.h).
// - /v1/embeddings `input`: a string, an array of strings, an array of token ids (one
//   input), or an array of arrays of token ids. Not empty, no empty string or empty id
//   list, at most kMaxInputs inputs, ids in [0, n_vocab), strings valid UTF-8; strings
//   and ids are not mixed. `encoding_format`: "float" (default) or "base64" (the
//   little-endian float32 bytes, standard base64 with padding, as OpenAI sends them).
//   `dimensions`: an integer >= 1 (the server checks it against the model's width).
//   `user` accepted and ignored.
// - /v1/rerank: `query` a non-empty string; `documents` a non-empty array (at most
//   kMaxInputs) of strings or {"text": string} objects; `top_n` >= 1 (default all);
//   `return_documents` (default false) adds each document's text to its result.
// - Numbers in responses are float32 values written as their shortest decimal that
//   reads back as the same float32.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"

namespace pagoda::server {

// OpenAI's limit on inputs per embeddings request; also documents per rerank.
constexpr size_t kMaxInputs = 2048;

struct EmbeddingInput {
  std::optional<std::string> text;  // a string input, or
  std::vector<int32_t> tokens;      // token ids (used when text is nullopt)
};

struct EmbeddingsRequest {
  std::string model;  // "" when not given
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;                // encoding_format "base64"
  std::optional<int64_t> dimensions;  // Matryoshka truncation
};

// Throws ApiError 400.
EmbeddingsRequest parse_embeddings_request(std::string_view body, int32_t n_vocab);

// The first `dims` components of `pooled`, divided by their L2 norm (computed in double);
// an all-zero vector stays zero. Requires: 1 <= dims <= pooled.size().
std::vector<float> normalized_embedding(std::span<const float> pooled, int64_t dims);

// Standard base64 (RFC 4648, with padding) of the little-endian float32 bytes.
std::string base64_floats(std::span<const float> v);

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...] or "..."}],
//  "model","usage":{"prompt_tokens","total_tokens"}}.
std::string embeddings_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                     bool base64, int64_t prompt_tokens);

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;
  std::optional<int64_t> top_n;
  bool return_documents = false;
};

// Throws ApiError 400.
RerankRequest parse_rerank_request(std::string_view body);

// The relevance score of a reranker head's raw outputs: one output is the score itself
// (BERT-style cross-encoders); with two or more, the probability of the first label
// (softmax, computed in double): for Qwen3-Reranker's (yes, no) head that is
// P(yes) = sigmoid(logit_yes - logit_no), as llama.cpp scores it.
// Requires: outputs non-empty.
float rerank_score(std::span<const float> outputs);

// The prompt text of one (query, document) pair: `rerank_template` (the GGUF's
// tokenizer.chat_template.rerank) with every "{query}" and "{document}" replaced; when
// the model has none, query + "\n" + document. Special tokens the template spells are
// parsed when it is tokenized.
std::string rerank_prompt(const std::string& rerank_template, const std::string& query, const std::string& document);

// {"object":"list","model","results":[{"index","relevance_score"[,"document":{"text"}]}],
//  "usage":{"prompt_tokens","total_tokens"}}: results by descending score (ties by
// index), the first top_n. Requires: scores.size() == documents.size().
std::string rerank_response_json(const std::string& model, const std::vector<float>& scores,
                                 const RerankRequest& request, int64_t prompt_tokens);

}  // namespace pagoda::server
